// kinet multiproc tests — Comm scenarios every path runs (proxy in
// comm_multiproc_test, gdaki in comm_gdaki_test): every operation to every
// rank, data verified byte for byte, the edges of the argument checks; a
// SIGKILLed rank. Host threads post (the CPU stand-in for a kernel).
#pragma once
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "comm_ranks.hpp"
#include "kinet/comm.hpp"

namespace kinet::test {
using namespace std::chrono_literals;
using dev::Cmp;
using dev::SigOp;

// Window layout (bytes) of the AllOps scenario; ranks < 8.
constexpr uint64_t kSrc = 0, kData = 16 << 10, kGet = 32 << 10, kVal = 40 << 10, kSig = 48 << 10,
                   kAtom = 56 << 10, kCasWin = kAtom + 8, kCasVote = 57 << 10, kSet = 58 << 10, kMany = 59 << 10,
                   kAtom2 = 63 << 10, kSelfAtom = kAtom2 + 8, kWin = 64 << 10;
constexpr int kManyPerThread = 100;  // 2 threads: 400 descriptors per channel of 64 slots
constexpr uint64_t kLen = 2000;  // per source: 1999 bytes by put, the last one by put_signal

inline uint8_t pat(int rank, uint64_t i) { return static_cast<uint8_t>((i * 2654435761u >> 11) ^ (rank * 37 + 1)); }

#define REQ(cond, what)                                                                          \
  do {                                                                                           \
    if (!(cond)) return std::string("rank ") + std::to_string(r) + ": " + (what) + " [" #cond "]"; \
  } while (0)

inline CommConfig config(const std::string& transport, uint64_t timeout_ms = 20000) {
  CommConfig c;
  c.transport = transport;
  c.slots = 64;  // small: the test posts more operations than slots
  c.timeout = std::chrono::milliseconds(timeout_ms);
  c.memory = CommConfig::Memory::Host;  // host threads post, also where a GPU exists
  return c;
}

inline std::string st(Status s) { return status_string(s); }

// Every operation to every rank (itself included: the self path), then the
// checks each target can make on its own window.
// `want`: the path every other rank must get, `why` a part of its reason.
inline std::string all_ops(int r, int n, Bootstrap& bs, const CommConfig& cfg, dev::CommPath want,
                           const std::string& why) {
  Comm comm(bs, cfg);
  CommWindow& win = comm.alloc_symmetric(kWin);
  const dev::CommHandle c = comm.device_handle();
  const dev::WindowHandle w = win.handle();
  uint8_t* mine = static_cast<uint8_t*>(win.local());
  for (int p = 0; p < n; ++p) {
    REQ(comm.path(p) == (p == r ? dev::CommPath::Self : want), comm.report());
    if (p != r) REQ(comm.path_reason(p).find(why) != std::string::npos, comm.report());
  }
  for (uint64_t i = 0; i < kLen; ++i) mine[kSrc + i] = pat(r, i);
  Status s = dev::barrier(c);  // peers read my source only after I wrote it
  REQ(s == Status::Ok, "barrier: " + st(s) + " " + comm.device_error());

  for (int p = 0; p < n; ++p) {
    const uint64_t slot = kData + uint64_t(r) * kLen;
    REQ((s = dev::put(c, p, w, slot, w, kSrc, kLen - 1)) == Status::Ok, "put: " + st(s));
    REQ((s = dev::put_value(c, p, w, kVal + r * 16, 0x1122334455667788ull)) == Status::Ok, "put_value: " + st(s));
    REQ((s = dev::put_value(c, p, w, kVal + r * 16 + 8, 0xa1b2c3d4e5f6ull, 3)) == Status::Ok, "put_value 3: " + st(s));
    REQ((s = dev::get(c, p, w, kGet + uint64_t(p) * kLen, w, kSrc, kLen)) == Status::Ok, "get: " + st(s));
    uint64_t old = ~0ull;
    // Atomics on a word the peers also target: remote ranks only (the
    // transport's target applies atomics under its own lock, not atomic with
    // this rank's own CPU atomics: docs/COMM.md). The self path on its own word.
    const uint64_t word = p == r ? kSelfAtom : kAtom;
    REQ((s = dev::fetch_add(c, p, w, word, uint64_t(r) + 1, &old)) == Status::Ok, "fetch_add: " + st(s));
    REQ(old < uint64_t(n) * (n + 1) / 2, "fetch_add old " + std::to_string(old));
    if (p != r) {
      REQ((s = dev::compare_swap(c, p, w, kCasWin, 0, uint64_t(r) + 1, &old)) == Status::Ok, "cas: " + st(s));
      REQ(old <= uint64_t(n), "cas old " + std::to_string(old));
      REQ(dev::put_value(c, p, w, kCasVote + r * 8, old == 0 ? 1 : 0) == Status::Ok, "vote");
    } else {
      REQ(dev::compare_swap(c, p, w, kSelfAtom, r + 1, 99, &old) == Status::Ok && old == uint64_t(r) + 1, "self cas");
      REQ(dev::compare_swap(c, p, w, kSelfAtom, r + 1, 98, &old) == Status::Ok && old == 99, "self cas that fails");
    }
    REQ((s = dev::signal(c, p, w, kSet + r * 8, SigOp::Set, 1000 + r)) == Status::Ok, "signal set: " + st(s));
    // The last byte and the signal: the target checks every byte above once it sees the signal.
    REQ((s = dev::put_signal(c, p, w, slot + kLen - 1, w, kSrc + kLen - 1, 1, w, kSig + r * 8, SigOp::Add, 1)) ==
            Status::Ok,
        "put_signal: " + st(s));
  }
  // Two threads post to the right neighbour at once, many more operations
  // than its channel has slots: put_value and fetch_add reuse their scratch.
  const int right = (r + 1) % n;
  Status ts[2] = {Status::Ok, Status::Ok};
  auto many = [&](int t) {
    for (int i = t * kManyPerThread; i < (t + 1) * kManyPerThread && ts[t] == Status::Ok; ++i) {
      ts[t] = dev::put_value(c, right, w, kMany + uint64_t(i) * 8, 0x5000 + i);
      uint64_t old = 0;
      if (ts[t] == Status::Ok) ts[t] = dev::fetch_add(c, right, w, kAtom2, 1, &old);
    }
  };
  std::thread t1(many, 1);
  many(0);
  t1.join();
  REQ(ts[0] == Status::Ok && ts[1] == Status::Ok, "many: " + st(ts[0]) + " " + st(ts[1]) + " " + comm.device_error());
  REQ((s = dev::quiet(c)) == Status::Ok, "quiet: " + st(s) + " " + comm.device_error());
  for (int p = 0; p < n; ++p)
    for (uint64_t i = 0; i < kLen; ++i)
      REQ(mine[kGet + p * kLen + i] == pat(p, i), "get from rank " + std::to_string(p) + " byte " + std::to_string(i));

  for (int q = 0; q < n; ++q) {  // what every rank q did to me, seen through its signal
    uint64_t seen = 0;
    REQ((s = dev::wait_signal(c, w, kSig + q * 8, Cmp::Ge, 1, q, &seen)) == Status::Ok,
        "wait_signal from rank " + std::to_string(q) + ": " + st(s) + " " + comm.device_error());
    REQ(seen == 1, "signal from " + std::to_string(q) + " is " + std::to_string(seen));
    for (uint64_t i = 0; i < kLen; ++i)
      REQ(mine[kData + q * kLen + i] == pat(q, i), "data of rank " + std::to_string(q) + " byte " + std::to_string(i));
    uint64_t v8 = 0, v3 = 0;
    std::memcpy(&v8, mine + kVal + q * 16, 8);
    std::memcpy(&v3, mine + kVal + q * 16 + 8, 8);
    REQ(v8 == 0x1122334455667788ull && v3 == 0xd4e5f6ull, "put_value of rank " + std::to_string(q));
    REQ(dev::wait_signal(c, w, kSet + q * 8, Cmp::Eq, 1000 + q, q) == Status::Ok, "set signal of " + std::to_string(q));
  }
  REQ((s = dev::barrier(c)) == Status::Ok, "barrier 2: " + st(s) + " " + comm.device_error());
  uint64_t sum = 0, cas = 0, votes = 0;
  std::memcpy(&sum, mine + kAtom, 8);
  std::memcpy(&cas, mine + kCasWin, 8);
  for (int q = 0; q < n; ++q) votes += mine[kCasVote + q * 8];
  REQ(sum == uint64_t(n) * (n + 1) / 2 - (r + 1), "fetch_add sum " + std::to_string(sum));
  REQ(n == 1 || (cas >= 1 && cas <= uint64_t(n) && cas != uint64_t(r) + 1 && votes == 1),
      "cas " + std::to_string(cas) + " votes " + std::to_string(votes));
  REQ(comm.device_error().empty(), comm.device_error());
  uint64_t many_sum = 0;
  std::memcpy(&many_sum, mine + kAtom2, 8);
  REQ(many_sum == 2 * kManyPerThread, "fetch_add count " + std::to_string(many_sum));
  for (int i = 0; i < 2 * kManyPerThread; ++i) {
    uint64_t v = 0;
    std::memcpy(&v, mine + kMany + uint64_t(i) * 8, 8);
    REQ(v == 0x5000u + i, "put_value " + std::to_string(i) + " is " + std::to_string(v));
  }

  // Edges: each check at its exact bound, nothing posted when refused.
  REQ(dev::put(c, (r + 1) % n, w, kWin - 8, w, 0, 8) == Status::Ok, "put at the window's end");
  REQ(dev::put(c, (r + 1) % n, w, kWin - 8, w, 0, 9) == Status::InvalidArgument, "put 1 byte past the end");
  REQ(dev::put_value(c, (r + 1) % n, w, kWin - 8, 0x77, 8) == Status::Ok, "put_value at the window's end");
  REQ(dev::put_value(c, (r + 1) % n, w, kWin - 7, 0x77, 8) == Status::InvalidArgument, "put_value 1 byte past the end");
  REQ(dev::put_value(c, (r + 1) % n, w, kWin - 1, 0x77, 1) == Status::Ok, "1-byte put_value at the end");
  REQ(dev::put_value(c, (r + 1) % n, w, 0, 1, 0) == Status::InvalidArgument, "put_value of 0 bytes");
  REQ(dev::get(c, (r + 1) % n, w, kGet, w, kWin - 8, 8) == Status::Ok, "get from the window's end");
  REQ(dev::get(c, (r + 1) % n, w, kGet, w, kWin - 7, 8) == Status::InvalidArgument, "get 1 byte past the end");
  REQ(dev::get(c, (r + 1) % n, w, kWin - 7, w, 0, 8) == Status::InvalidArgument, "get into 1 byte past the end");
  REQ(dev::get(c, (r + 1) % n, w, 0, w, 0, 0) == Status::InvalidArgument, "get of 0 bytes");
  REQ(dev::fetch_add(c, (r + 1) % n, w, kWin - 8, 1) == Status::Ok, "fetch_add on the last word");
  REQ(dev::compare_swap(c, (r + 1) % n, w, kWin - 4, 0, 1) == Status::InvalidArgument, "misaligned compare_swap");
  REQ(dev::put_signal(c, (r + 1) % n, w, kWin - 8, w, 0, 9, w, kSig, SigOp::Add, 1) == Status::InvalidArgument,
      "put_signal data 1 byte past the end");
  REQ(dev::signal(c, (r + 1) % n, w, kSig, static_cast<SigOp>(3), 1) == Status::InvalidArgument, "signal op 3");
  REQ(dev::put(c, n, w, 0, w, 0, 8) == Status::InvalidArgument, "put to rank n");
  REQ(dev::put(c, -1, w, 0, w, 0, 8) == Status::InvalidArgument, "put to rank -1");
  REQ(dev::put_value(c, 0, w, 0, 1, 9) == Status::InvalidArgument, "put_value of 9 bytes");
  REQ(dev::signal(c, 0, w, kSig + 4, SigOp::Add, 1) == Status::InvalidArgument, "misaligned signal");
  REQ(dev::fetch_add(c, 0, w, kWin, 1) == Status::InvalidArgument, "fetch_add at the end");
  dev::CommHandle bad = c;  // a handle that is not one: refused, its pointers not followed
  bad.abi ^= 1;
  bad.state = nullptr;
  bad.peers = nullptr;
  REQ(dev::put(bad, 0, w, 0, w, 0, 8) == Status::InvalidArgument, "put on a bad handle");
  REQ(dev::barrier(bad) == Status::InvalidArgument, "barrier on a bad handle");
  dev::WindowHandle badw = w;
  badw.abi = 0;
  REQ(dev::get(c, 0, badw, 0, w, 0, 8) == Status::InvalidArgument, "get into a bad window");
  REQ(dev::quiet(c) == Status::Ok, "quiet after refusals");
  const std::string e = comm.device_error();  // the first refusal: the put 1 byte past the end
  REQ(e.find("put (rank " + std::to_string((r + 1) % n) + ") window 1 offset " + std::to_string(kWin - 8) +
              ": invalid argument") != std::string::npos,
      e);
  REQ((s = dev::barrier(c)) == Status::Ok, "barrier 3: " + st(s));
  comm.barrier();  // nobody targets my window after this
  return "";
}

// A barrier of the ranks below `victim` over the bootstrap's point-to-point
// calls (its collective barrier would wait for the dead rank).
inline void survivors_sync(Bootstrap& bs, int r, int victim) {
  const uint8_t b = 1;
  if (r == 0) {
    for (int q = 1; q < victim; ++q) bs.recv(q, 77);
    for (int q = 1; q < victim; ++q) bs.send(q, 77, &b, 1);
  } else {
    bs.send(0, 77, &b, 1);
    bs.recv(0, 77);
  }
}

// A rank that dies (SIGKILL, no goodbye): every other rank's next barrier
// ends with the peer-lost status, names the dead rank, within the bound.
inline std::string killed_rank(int r, int nr, Bootstrap& bs, const CommConfig& cfg) {
  auto owned = std::make_unique<Comm>(bs, cfg);
  Comm& comm = *owned;
  const dev::CommHandle c = comm.device_handle();
  Status s = dev::barrier(c);
  REQ(s == Status::Ok, "first barrier: " + st(s));
  comm.barrier();
  const int victim = nr - 1;
  if (r == victim) raise(SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  s = dev::barrier(c);
  const auto took = std::chrono::steady_clock::now() - t0;
  REQ(s == Status::TransportRetryExceeded, "barrier after the kill: " + st(s) + " " + comm.device_error());
  REQ(took < 20s, "took " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  const std::string e = comm.device_error();
  REQ(e.find("barrier (rank " + std::to_string(victim) + ")") != std::string::npos, e);
  REQ(!comm.peer_error(victim).empty(), "peer_error empty");
  survivors_sync(bs, r, victim);  // no survivor leaves while another still waits for it
  const auto t1 = std::chrono::steady_clock::now();
  owned.reset();  // teardown with a dead peer: bounded, and prompt
  const auto down = std::chrono::steady_clock::now() - t1;
  REQ(down < 5s, "~Comm took " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(down).count()) +
                     " ms");
  return "";
}

inline void expect_ok(const std::vector<RankResult>& res, int n) {
  ASSERT_EQ(res.size(), size_t(n));
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_FALSE(res[r].timed_out);
    EXPECT_EQ(res[r].exit_code, 0) << res[r].out;
  }
}

// killed_rank's outcome: the last rank died of SIGKILL, the others passed.
inline void expect_killed(const std::vector<RankResult>& res, int n) {
  ASSERT_EQ(res.size(), size_t(n));
  EXPECT_EQ(res[n - 1].exit_code, 128 + SIGKILL) << res[n - 1].out;
  for (int r = 0; r + 1 < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_FALSE(res[r].timed_out);
    EXPECT_EQ(res[r].exit_code, 0) << res[r].out;
  }
}

}  // namespace kinet::test
