// kinet multiproc tests — one side of kinet::Transport over "ucx" between two
// processes (tests/multiproc/ucx_transport_test.cpp).
//   ucx_transport_helper --role target|victim|initiator|killer --me FILE --peer FILE
// Each side writes its address (and the target its keys) to --me and reads
// the other's from --peer (bounded), then prints one result line, "OK ..." or
// "FAIL <why>".
//   target:    registers a 2 MiB region between two 4 KiB guards (0xA5, not
//              registered), a read-only and a write-only region; serves until the
//              initiator sets the done word, then checks the guards and the
//              read-only region untouched.
//   initiator: every operation with data checked byte for byte against a model
//              of the target's memory, more operations than the depth, a split
//              transfer, and crafted operations the target must reject (exact
//              statuses), then a final get of the whole region against the model.
//   victim:    registers a region, waits for the trigger word, then SIGKILLs itself.
//   killer:    sets the trigger, keeps 4 puts in flight; expects the first failure
//              TransportRetryExceeded with peer_error "peer lost: ..." (or "timeout
//              after ..."), a later one WrFlushed; prints the error and the delay.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "kinet/kinet.hpp"
#include "kinet/status.hpp"
#include "kinet/transport.hpp"

using namespace kinet;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {
constexpr size_t kGuard = 4096, kLen = 2 << 20, kSmall = 4096;
constexpr size_t kDoneWord = kLen - 8, kCountWord = kLen - 16, kSigWord = kLen - 24, kTrigger = 0;

std::string arg(int argc, char** argv, const char* name) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return "";
}
struct Fail {
  std::string why;
};
[[noreturn]] void fail(const std::string& why) { throw Fail{why}; }

void put_blob(std::string& f, const std::vector<uint8_t>& b) {
  uint32_t n = static_cast<uint32_t>(b.size());
  f.append(reinterpret_cast<const char*>(&n), 4).append(reinterpret_cast<const char*>(b.data()), n);
}
std::vector<uint8_t> get_blob(const std::string& f, size_t& at) {
  uint32_t n = 0;
  if (at + 4 > f.size()) fail("truncated exchange file");
  std::memcpy(&n, &f[at], 4);
  if (at + 4 + n > f.size()) fail("truncated exchange file");
  std::vector<uint8_t> b(f.begin() + static_cast<long>(at + 4), f.begin() + static_cast<long>(at + 4 + n));
  at += 4 + n;
  return b;
}
void write_file(const std::string& path, const std::string& data) {
  {
    std::ofstream f(path + ".tmp", std::ios::binary);
    f << data;
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
}
std::string read_file(const std::string& path) {
  const auto deadline = Clock::now() + 20s;
  while (Clock::now() < deadline) {
    std::ifstream f(path, std::ios::binary);
    if (f) return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    std::this_thread::sleep_for(1ms);  // polling for a file the other process renames into place
  }
  fail("no exchange file " + path + " after 20 s");
}
uint64_t load(const uint8_t* p) { return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<uint8_t*>(p))).load(); }

// Polls `t` until `pred()` or 20 s.
template <class P>
void serve_until(Transport& t, P pred, const char* what) {
  Completion c[16];
  const auto deadline = Clock::now() + 20s;
  while (!pred()) {
    t.poll(c, 16);
    if (Clock::now() > deadline) fail(std::string("no ") + what + " within 20 s");
  }
}

// The initiator's bookkeeping: posts with NoSpace retries, completions by cookie.
struct Client {
  Transport& t;
  PeerId p;
  std::vector<Completion> done;
  size_t max_out = 0;
  void poll() {
    Completion c[64];
    size_t n = t.poll(c, 64);
    done.insert(done.end(), c, c + n);
  }
  template <class F>
  void post(F f) {
    for (;;) {
      Status s = f();
      if (s == Status::Ok) break;
      if (s != Status::NoSpace) fail(std::string("posting returned ") + status_string(s));
      poll();
    }
    max_out = std::max(max_out, t.outstanding());
  }
  // Waits for every outstanding op; returns status by cookie.
  std::vector<Completion> drain() {
    const auto deadline = Clock::now() + 30s;
    while (t.outstanding() > 0) {
      poll();
      if (Clock::now() > deadline) fail("operations outstanding after 30 s: " + t.peer_error(p));
    }
    std::vector<Completion> out;
    out.swap(done);
    return out;
  }
  Status one(uint64_t cookie, std::function<Status()> f) {
    post(f);
    auto c = drain();
    if (c.size() != 1 || c[0].cookie != cookie) fail("expected one completion with cookie " + std::to_string(cookie));
    return c[0].status;
  }
};

void expect_status(Status got, Status want, const std::string& what) {
  if (got != want) fail(what + ": " + status_string(got) + ", expected " + status_string(want));
}

int initiator(Transport& t, const std::string& peer_file) {
  const std::string f = read_file(peer_file);
  size_t at = 0;
  const PeerId p = t.connect(get_blob(f, at), "target");
  const RemoteKey main_key = [&] { auto b = get_blob(f, at); return RemoteKey::deserialize(b.data(), b.size()); }();
  const RemoteKey ro_key = [&] { auto b = get_blob(f, at); return RemoteKey::deserialize(b.data(), b.size()); }();
  const RemoteKey wo_key = [&] { auto b = get_blob(f, at); return RemoteKey::deserialize(b.data(), b.size()); }();
  const uint32_t k = t.import_key(p, main_key), kro = t.import_key(p, ro_key), kwo = t.import_key(p, wo_key);
  RemoteKey forged = main_key;
  forged.rkey ^= 0x10;  // a key the target never issued
  const uint32_t kbad = t.import_key(p, forged);
  const uint64_t B = main_key.addr;
  Client c{t, p, {}, 0};
  std::vector<uint8_t> model(kLen, 0);  // the target's region as it must be
  auto pattern = [](size_t i, uint8_t seed) { return static_cast<uint8_t>(i * 31 + seed); };

  // 1. Many small puts (more than the depth), then one put larger than
  //    max_message() (the engine splits it).
  std::vector<uint8_t> src(kLen);
  for (size_t i = 0; i < kLen; ++i) src[i] = pattern(i, 7);
  const size_t nsmall = 3000;
  for (size_t i = 0; i < nsmall; ++i) {
    const size_t off = 4096 + i * 64;
    c.post([&] { return t.put(p, &src[off], 48, k, B + off, i); });
    std::memcpy(&model[off], &src[off], 48);
  }
  auto done = c.drain();
  if (done.size() != nsmall) fail(std::to_string(done.size()) + " completions for " + std::to_string(nsmall) + " puts");
  for (auto& d : done) expect_status(d.status, Status::Ok, "small put " + std::to_string(d.cookie));
  const size_t big_off = 256 * 1024, big = (1 << 20) + 12345;
  expect_status(c.one(1, [&] { return t.put(p, &src[big_off], big, k, B + big_off, 1); }), Status::Ok, "big put");
  std::memcpy(&model[big_off], &src[big_off], big);

  // 2. get of a range crossing both, byte for byte.
  std::vector<uint8_t> back(kLen, 0);
  expect_status(c.one(2, [&] { return t.get(p, back.data(), 600000, k, B + 4000, 2); }), Status::Ok, "get");
  if (std::memcmp(back.data(), &model[4000], 600000) != 0) fail("get returned other bytes than were put");

  // 3. Atomics: fetch_add returns the old values; compare_swap swaps only on a match.
  uint64_t old = 99;
  for (uint64_t i = 1; i <= 5; ++i) {
    expect_status(c.one(10 + i, [&] { return t.fetch_add(p, &old, k, B + kCountWord, i, 10 + i); }), Status::Ok, "fetch_add");
    if (old != i * (i - 1) / 2) fail("fetch_add " + std::to_string(i) + " returned " + std::to_string(old));
  }
  expect_status(c.one(20, [&] { return t.compare_swap(p, &old, k, B + kCountWord, 15, 100, 20); }), Status::Ok, "cas");
  if (old != 15) fail("compare_swap (match) returned " + std::to_string(old));
  expect_status(c.one(21, [&] { return t.compare_swap(p, &old, k, B + kCountWord, 15, 200, 21); }), Status::Ok, "cas");
  if (old != 100) fail("compare_swap (no match) returned " + std::to_string(old));
  uint64_t v = 100;
  std::memcpy(&model[kCountWord], &v, 8);

  // 4. Signals and put_signal: Add then Set; the put's data lands with it.
  expect_status(c.one(30, [&] { return t.signal(p, k, B + kSigWord, SignalOp::Add, 7, 30); }), Status::Ok, "signal add");
  expect_status(c.one(31, [&] { return t.signal(p, k, B + kSigWord, SignalOp::Add, 5, 31); }), Status::Ok, "signal add");
  expect_status(c.one(32, [&] { return t.put_signal(p, &src[100], 1000, k, B + 100, k, B + kSigWord, SignalOp::Set, 42, 32); }),
                Status::Ok, "put_signal");
  std::memcpy(&model[100], &src[100], 1000);
  v = 42;
  std::memcpy(&model[kSigWord], &v, 8);

  // 5. Crafted operations, each rejected at its exact edge; nothing is touched.
  std::vector<uint8_t> junk(64, 0xEE);
  struct Bad {
    const char* what;
    std::function<Status()> f;
    Status want;
  } bad[] = {
      {"put one byte past the end", [&] { return t.put(p, junk.data(), 8, k, B + kLen - 7, 40); }, Status::RemoteAccess},
      {"put one byte before the start", [&] { return t.put(p, junk.data(), 8, k, B - 1, 40); }, Status::RemoteAccess},
      {"put with a forged key", [&] { return t.put(p, junk.data(), 8, kbad, B + 64, 40); }, Status::RemoteAccess},
      {"put to the read-only region", [&] { return t.put(p, junk.data(), 8, kro, ro_key.addr, 40); }, Status::RemoteAccess},
      {"get from the write-only region", [&] { return t.get(p, junk.data(), 8, kwo, wo_key.addr, 40); }, Status::RemoteAccess},
      {"fetch_add without atomic access", [&] { return t.fetch_add(p, &old, kwo, wo_key.addr, 1, 40); }, Status::RemoteAccess},
      {"unaligned fetch_add", [&] { return t.fetch_add(p, &old, k, B + kCountWord + 4, 1, 40); }, Status::RemoteInvalidRequest},
      {"signal past the end", [&] { return t.signal(p, k, B + kLen, SignalOp::Set, 1, 40); }, Status::RemoteAccess},
  };
  for (auto& b : bad) expect_status(c.one(40, b.f), b.want, b.what);
  // An in-bounds put right at the end is still fine (the edge itself).
  expect_status(c.one(41, [&] { return t.put(p, &src[kLen - 64], 24, k, B + kLen - 64, 41); }), Status::Ok, "put at the end");
  std::memcpy(&model[kLen - 64], &src[kLen - 64], 24);

  // 6. The whole region, byte for byte, then the done word (target checks its guards).
  std::fill(back.begin(), back.end(), 0);
  expect_status(c.one(50, [&] { return t.get(p, back.data(), kLen - 24, k, B, 50); }), Status::Ok, "final get");
  for (size_t i = 0; i < kLen - 24; ++i)
    if (back[i] != model[i]) fail("the target's byte " + std::to_string(i) + " differs from the model");
  expect_status(c.one(51, [&] { return t.signal(p, k, B + kDoneWord, SignalOp::Set, 0xD0E, 51); }), Status::Ok, "done");
  std::printf("OK up to %zu in flight\n", c.max_out);
  return 0;
}

int target(Transport& t, const std::string& me, const std::string& peer_file) {
  std::vector<uint8_t> mem(kGuard + kLen + kGuard, 0xA5);
  std::memset(&mem[kGuard], 0, kLen);
  std::vector<uint8_t> ro(kSmall, 0x3C), wo(kSmall, 0);
  auto r = t.register_memory(&mem[kGuard], kLen, kRemoteWrite | kRemoteRead | kRemoteAtomic);
  auto rro = t.register_memory(ro.data(), ro.size(), kRemoteRead);
  auto rwo = t.register_memory(wo.data(), wo.size(), kRemoteWrite);
  std::string f;
  put_blob(f, t.address());
  put_blob(f, r->remote_key().serialize());
  put_blob(f, rro->remote_key().serialize());
  put_blob(f, rwo->remote_key().serialize());
  write_file(me, f);
  const std::string pf = read_file(peer_file);
  size_t at = 0;
  t.connect(get_blob(pf, at), "initiator");
  const uint8_t* done = &mem[kGuard + kDoneWord];
  serve_until(t, [&] { return load(done) == 0xD0E; }, "done word");
  for (size_t i = 0; i < kGuard; ++i)
    if (mem[i] != 0xA5 || mem[kGuard + kLen + i] != 0xA5) fail("a guard byte changed");
  for (uint8_t b : ro)
    if (b != 0x3C) fail("the read-only region changed");
  // Keep serving briefly so the initiator's last answer gets out before we close.
  const auto until = Clock::now() + 200ms;
  Completion c[4];
  while (Clock::now() < until) t.poll(c, 4);
  std::printf("OK guards intact\n");
  return 0;
}

int victim(Transport& t, const std::string& me, const std::string& peer_file) {
  std::vector<uint8_t> mem(kSmall, 0);
  auto r = t.register_memory(mem.data(), mem.size(), kRemoteWrite | kRemoteRead | kRemoteAtomic);
  std::string f;
  put_blob(f, t.address());
  put_blob(f, r->remote_key().serialize());
  write_file(me, f);
  const std::string pf = read_file(peer_file);
  size_t at = 0;
  t.connect(get_blob(pf, at), "killer");
  serve_until(t, [&] { return load(&mem[kTrigger]) == 1; }, "trigger");
  std::fflush(stdout);
  kill(getpid(), SIGKILL);
  return 1;
}

int killer(Transport& t, const std::string& peer_file) {
  const std::string f = read_file(peer_file);
  size_t at = 0;
  const PeerId p = t.connect(get_blob(f, at), "victim");
  auto kb = get_blob(f, at);
  const RemoteKey key = RemoteKey::deserialize(kb.data(), kb.size());
  const uint32_t k = t.import_key(p, key);
  Client c{t, p, {}, 0};
  // The victim may die before its answer to the trigger leaves: the trigger
  // is just the first operation that may fail.
  c.post([&] { return t.signal(p, k, key.addr + kTrigger, SignalOp::Set, 1, 1); });
  const auto t0 = Clock::now();
  uint64_t data = 0, cookie = 100;
  const auto deadline = t0 + 30s;
  Status first = Status::Ok;
  while (first == Status::Ok) {
    while (t.outstanding() < 4) c.post([&] { return t.put(p, &data, 8, k, key.addr + 64, cookie++); });
    c.poll();
    for (auto& d : c.done)
      if (d.status != Status::Ok && first == Status::Ok) first = d.status;
    c.done.clear();
    if (Clock::now() > deadline) fail("the victim's death was not noticed within 30 s");
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  expect_status(first, Status::TransportRetryExceeded, "the first failure");
  const std::string why = t.peer_error(p);
  c.drain();
  expect_status(c.one(cookie, [&] { return t.put(p, &data, 8, k, key.addr + 64, cookie); }), Status::WrFlushed,
                "a put after the loss");
  std::printf("OK after %lld ms: %s\n", static_cast<long long>(ms), why.c_str());
  return 0;
}
}  // namespace

int run(int argc, char** argv) {
  const std::string role = arg(argc, argv, "--role"), me = arg(argc, argv, "--me"), peer = arg(argc, argv, "--peer");
  try {
    auto t = Transport::open({.provider = "ucx", .name = role});
    if (role == "initiator" || role == "killer") {
      std::string f;
      put_blob(f, t->address());
      write_file(me, f);
      return role == "initiator" ? initiator(*t, peer) : killer(*t, peer);
    }
    if (role == "target") return target(*t, me, peer);
    if (role == "victim") return victim(*t, me, peer);
    fail("unknown --role " + role);
  } catch (const Fail& f) {
    std::printf("FAIL %s\n", f.why.c_str());
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
  }
  std::fflush(stdout);
  return 1;
}

int main(int argc, char** argv) {
  const int rc = run(argc, argv);  // the transport is closed by now
  std::fflush(stdout);
  // No exit-time handlers: LeakSanitizer's exit-time tracer crashes in these
  // processes under `ip netns exec` (UCX's threads); the result is what counts.
  _exit(rc);
}
