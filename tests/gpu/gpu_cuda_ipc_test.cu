// kinet GPU test: transport provider "cuda_ipc" (src/transports/ipc_path.*)
// between two processes on one GPU. The parent (no arguments) checks for a
// GPU (none: exit 77) and spawns this binary twice, fresh processes with no
// CUDA state: --role requester|target --transport cuda_ipc --id <hex>.
// They meet through kinet::Bootstrap, exchange address and keys, connect.
//   Phase 1, the Transport API from a host thread, cudaMalloc'd Gpu regions:
//     a 64 MiB put, more puts than the engine's depth, put_signal, signal,
//     fetch_add, get, a put into and a get from a Host region of the target,
//     a put from pageable host memory; the requester checks what it got, the
//     target its memory byte for byte; both print the IPC path's counters
//     (GPU data by reference, no host staging: fallbacks must be 0).
//   Phase 2, a kernel drives the proxy (kinet/proxy.hpp, device/proxy.cuh)
//     over the same cuda_ipc transport: the poster of tests/proxy/poster.hpp,
//     data verified on both sides.
// Every wait is bounded: operations by the transport's timeout, the bootstrap
// by its own, the children by the parent's deadline (120 s). Any mismatch
// prints "FAIL <what>" and exits non-zero.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <kinet/bootstrap.hpp>
#include <kinet/kinet.hpp>
#include <kinet/proxy.hpp>

#include "../proxy/poster.hpp"
#include "gpu_harness.hpp"
#include "two_procs.hpp"
#include "transports/ipc_path.hpp"
#include "transports/msg_engine.hpp"

namespace {
using namespace kinet;
using namespace kinet::dev;
using namespace kgt::two;  // the two-process harness, pattern() and k_poster
using Clock = std::chrono::steady_clock;

// Target GPU region T.
constexpr size_t kBig = size_t{64} << 20;              // one put of 64 MiB
constexpr size_t kMany = 3000, kManyChunk = 64;         // more puts than the engine's depth (1024)
constexpr size_t kGetLen = 100000 + 3;
constexpr size_t kPsLen = 5000, kHostPutLen = 1000;
constexpr size_t T_BIG = 0, T_MANY = kBig, T_GET = T_MANY + kMany * kManyChunk, T_PS = T_GET + 131072,
                 T_HOSTPUT = T_PS + 8192, T_WORDS = T_HOSTPUT + 4096, T_BYTES = T_WORDS + 64;
// Target Host region H.
constexpr size_t H_PUT = 0, H_PUT_LEN = 4096, H_GET = 8192, H_GET_LEN = 5000, H_BYTES = 65536;
// Requester GPU region R: [0, kBig) the source; then the get destinations.
constexpr size_t R_GET = kBig, R_GETH = R_GET + 131072, R_BYTES = R_GETH + 8192;
constexpr uint64_t kWord0 = 1000;

std::vector<uint8_t> blob(const std::vector<std::vector<uint8_t>>& parts) {
  std::vector<uint8_t> out;
  for (auto& p : parts) {
    const uint32_t n = static_cast<uint32_t>(p.size());
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(&n), reinterpret_cast<const uint8_t*>(&n) + 4);
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}
std::vector<std::vector<uint8_t>> unblob(const std::vector<uint8_t>& b) {
  std::vector<std::vector<uint8_t>> out;
  size_t at = 0;
  while (at + 4 <= b.size()) {
    uint32_t n = 0;
    std::memcpy(&n, b.data() + at, 4);
    if (n > b.size() - at - 4) throw Error(ErrorCode::InvalidArgument, "bad blob from the peer");
    out.emplace_back(b.begin() + at + 4, b.begin() + at + 4 + n);
    at += 4 + n;
  }
  return out;
}

std::string stats_line(Transport& t) {
  auto* m = dynamic_cast<transport::MsgTransport*>(&t);
  const transport::IpcPath* p = m ? m->ipc_path() : nullptr;
  if (!p) return "no IPC path";
  const transport::IpcStats s = p->stats();
  char b[256];
  std::snprintf(b, sizeof b,
                "by reference: %llu sent, %llu pulled, %llu pushed, %.1f MiB copied; %llu mappings opened, %llu "
                "closed; %llu regions staged (fallbacks)",
                (unsigned long long)s.refs, (unsigned long long)s.pulls, (unsigned long long)s.pushes,
                s.bytes / 1048576.0, (unsigned long long)s.opens, (unsigned long long)s.closes,
                (unsigned long long)s.fallbacks);
  return b;
}
transport::IpcStats stats(Transport& t) {
  auto* m = dynamic_cast<transport::MsgTransport*>(&t);
  return m && m->ipc_path() ? m->ipc_path()->stats() : transport::IpcStats{};
}

// Posts with `post` (retrying NoSpace) and polls until `n` completions are in; bounded.
struct Driver {
  Transport& t;
  PeerId peer;
  std::vector<Completion> done;
  size_t posted = 0;
  std::string post_error;  // the first operation that could not be posted
  template <class F> Status post(F&& f, const char* what = "an operation") {
    const auto end = Clock::now() + std::chrono::milliseconds(2 * kTimeoutMs);
    for (;;) {
      const Status s = f();
      if (s != Status::NoSpace || Clock::now() > end) {
        if (s == Status::Ok) ++posted;
        else if (post_error.empty()) post_error = std::string(what) + " posted " + status_string(s);
        return s;
      }
      drain();
    }
  }
  void drain() {
    Completion c[64];
    const size_t k = t.poll(c, 64);
    done.insert(done.end(), c, c + k);
  }
  // Waits for every posted operation; returns the first non-Ok completion's
  // description, or "" when all were Ok.
  std::string finish() {
    if (!post_error.empty()) return post_error;
    const auto end = Clock::now() + std::chrono::milliseconds(2 * kTimeoutMs);
    while (done.size() < posted && Clock::now() < end) drain();
    if (done.size() < posted)
      return std::to_string(posted - done.size()) + " operations never completed (" + t.peer_error(peer) + ")";
    for (const Completion& c : done)
      if (c.status != Status::Ok)
        return "operation " + std::to_string(c.cookie) + " completed " + status_string(c.status) + " (" +
               t.peer_error(peer) + ")";
    done.clear();
    posted = 0;
    return "";
  }
};

int phase1_requester(Transport& t, PeerId p, uint32_t kt, uint32_t kh, uint64_t tbase, uint64_t hbase, uint8_t* r) {
  const char* who = "requester";
  Driver d{t, p};
  const std::vector<uint8_t> src = pattern(kBig, 0);
  // 1. One 64 MiB put, timed.
  const auto t0 = Clock::now();
  if (Status s = d.post([&] { return t.put(p, r, kBig, kt, tbase + T_BIG, 1); }); s != Status::Ok)
    return fail(who, std::string("64 MiB put posted ") + status_string(s));
  if (std::string e = d.finish(); !e.empty()) return fail(who, "64 MiB put: " + e);
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  std::printf("requester: 64 MiB put by reference: %.0f us, %.2f GB/s\n", us, kBig / us / 1e3);
  // 2. More puts than the depth.
  for (size_t i = 0; i < kMany; ++i)
    if (Status s = d.post([&] {
          return t.put(p, r + i * kManyChunk, kManyChunk, kt, tbase + T_MANY + i * kManyChunk, 100 + i);
        });
        s != Status::Ok)
      return fail(who, "put " + std::to_string(i) + " posted " + status_string(s));
  // 3. put_signal, signal, fetch_add.
  uint64_t old = 0;
  d.post([&] { return t.put_signal(p, r + 100, kPsLen, kt, tbase + T_PS, kt, tbase + T_WORDS, SignalOp::Add, 1, 2); },
         "put_signal");
  d.post([&] { return t.signal(p, kt, tbase + T_WORDS + 8, SignalOp::Set, 42, 3); }, "signal");
  d.post([&] { return t.fetch_add(p, &old, kt, tbase + T_WORDS + 16, 5, 4); }, "fetch_add");
  // 4. get (pushed into R), a put into the target's Host region, a get from it.
  d.post([&] { return t.get(p, r + R_GET, kGetLen, kt, tbase + T_GET, 5); }, "get");
  d.post([&] { return t.put(p, r + 200, H_PUT_LEN, kh, hbase + H_PUT, 6); }, "put into the Host region");
  d.post([&] { return t.get(p, r + R_GETH, H_GET_LEN, kh, hbase + H_GET, 7); }, "get from the Host region");
  // 5. From pageable host memory: staged, as with shm.
  std::vector<uint8_t> hostsrc = pattern(kHostPutLen, 3);
  d.post([&] { return t.put(p, hostsrc.data(), kHostPutLen, kt, tbase + T_HOSTPUT, 8); }, "put from host memory");
  if (std::string e = d.finish(); !e.empty()) return fail(who, e);
  if (old != kWord0) return fail(who, "fetch_add returned " + std::to_string(old) + ", expected 1000");
  std::vector<uint8_t> got(kGetLen);
  cudaMemcpy(got.data(), r + R_GET, kGetLen, cudaMemcpyDeviceToHost);
  const std::vector<uint8_t> theirs = pattern(kGetLen, 1);
  if (got != theirs) return fail(who, "get (GPU -> GPU, pushed) data wrong");
  got.resize(H_GET_LEN);
  cudaMemcpy(got.data(), r + R_GETH, H_GET_LEN, cudaMemcpyDeviceToHost);
  if (got != pattern(H_GET_LEN, 2)) return fail(who, "get from the target's Host region data wrong");
  const transport::IpcStats s = stats(t);
  std::printf("requester: phase 1 %s\n", stats_line(t).c_str());
  // Every GPU-sourced put and every get into R went by reference; the pageable put did not.
  const uint64_t want = 1 + kMany + 1 + 1 + 1 + 1;
  if (s.refs != want || s.fallbacks != 0)
    return fail(who, "expected " + std::to_string(want) + " requests by reference and 0 fallbacks");
  return 0;
}

int phase1_target_check(Transport& t, const uint8_t* tg, const uint8_t* h) {
  const char* who = "target";
  const std::vector<uint8_t> src = pattern(kBig, 0);
  std::vector<uint8_t> got(T_BYTES);
  cudaMemcpy(got.data(), tg, T_BYTES, cudaMemcpyDeviceToHost);
  if (std::memcmp(got.data() + T_BIG, src.data(), kBig) != 0) {
    size_t i = 0;
    while (got[T_BIG + i] == src[i]) ++i;
    return fail(who, "64 MiB put: first wrong byte at offset " + std::to_string(i));
  }
  if (std::memcmp(got.data() + T_MANY, src.data(), kMany * kManyChunk) != 0)
    return fail(who, "the many puts' data wrong");
  if (std::memcmp(got.data() + T_PS, src.data() + 100, kPsLen) != 0) return fail(who, "put_signal data wrong");
  if (std::memcmp(got.data() + T_HOSTPUT, pattern(kHostPutLen, 3).data(), kHostPutLen) != 0)
    return fail(who, "put from pageable host memory wrong");
  uint64_t w[3];
  std::memcpy(w, got.data() + T_WORDS, 24);
  if (w[0] != 1 || w[1] != 42 || w[2] != kWord0 + 5)
    return fail(who, "words: put_signal " + std::to_string(w[0]) + " (1), signal " + std::to_string(w[1]) +
                         " (42), fetch_add " + std::to_string(w[2]) + " (1005)");
  if (std::memcmp(h + H_PUT, src.data() + 200, H_PUT_LEN) != 0) return fail(who, "put into the Host region wrong");
  const transport::IpcStats s = stats(t);
  std::printf("target: phase 1 %s\n", stats_line(t).c_str());
  if (s.pulls != 1 + kMany + 1 + 1 || s.pushes != 2)
    return fail(who, "expected " + std::to_string(1 + kMany + 2) + " pulls and 2 pushes");
  return 0;
}

int child(Child& c) {
  const char* who = c.who;
  const bool req = c.req;
  const std::string& provider = c.opts.provider;
  const std::unique_ptr<Bootstrap>& bs = c.bs;
  std::unique_ptr<Transport> t;
  std::string skip;
  try {
    t = Transport::open(c.opts);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::NotSupported) throw;
    skip = e.what();
  }
  // Both learn whether both could open before either waits on the other.
  const uint8_t ok = skip.empty();
  const auto oks = bs->allgather(&ok, 1);
  if (!skip.empty() || oks[0][0] == 0 || oks[1][0] == 0) {
    std::printf("%s: SKIP %s\n", who, skip.empty() ? "the peer could not open cuda_ipc" : skip.c_str());
    return 77;
  }
  std::printf("%s: %s\n", who, t->describe().c_str());
  // ---- phase 1 ----
  uint8_t* g = nullptr;
  const size_t gbytes = req ? R_BYTES : T_BYTES;
  if (cudaMalloc(&g, gbytes) != cudaSuccess) return fail(who, "cudaMalloc");
  std::vector<uint8_t> host(H_BYTES, 0);
  {
    std::vector<uint8_t> init(gbytes, 0);
    if (req) {
      const std::vector<uint8_t> src = pattern(kBig, 0);
      std::memcpy(init.data(), src.data(), kBig);
    } else {
      const std::vector<uint8_t> gp = pattern(kGetLen, 1);
      std::memcpy(init.data() + T_GET, gp.data(), kGetLen);
      std::memcpy(init.data() + T_WORDS + 16, &kWord0, 8);
      const std::vector<uint8_t> hp = pattern(H_GET_LEN, 2);
      std::memcpy(host.data() + H_GET, hp.data(), H_GET_LEN);
    }
    cudaMemcpy(g, init.data(), gbytes, cudaMemcpyHostToDevice);
  }
  auto rg = t->register_memory(g, gbytes, kAccessAll, MemoryKind::Gpu);
  auto rh = t->register_memory(host.data(), H_BYTES, kAccessAll, MemoryKind::Host);
  const auto mine = blob({t->address(), rg->remote_key().serialize(), rh->remote_key().serialize()});
  const auto all = bs->allgather(mine.data(), mine.size());
  const auto peer = unblob(all[req ? 1 : 0]);
  if (peer.size() != 3) return fail(who, "bad blob from the peer");
  const PeerId p = t->connect(peer[0], req ? "target" : "requester");
  const RemoteKey kg = RemoteKey::deserialize(peer[1].data(), peer[1].size());
  const RemoteKey kh = RemoteKey::deserialize(peer[2].data(), peer[2].size());
  bs->barrier();  // both connected
  int rc = 0;
  if (req) {
    rc = phase1_requester(*t, p, t->import_key(p, kg), t->import_key(p, kh), kg.addr, kh.addr, g);
    bs->barrier();  // the requester is done
  } else {
    // Serve (the transport's target role) until the requester is done.
    std::atomic<bool> stop{false};
    std::thread server([&] {
      Completion c[16];
      while (!stop.load(std::memory_order_relaxed)) t->poll(c, 16);
    });
    bs->barrier();
    stop = true;
    server.join();
    rc = phase1_target_check(*t, g, host.data());
  }
  const uint8_t ok1 = rc == 0;
  const auto ok1s = bs->allgather(&ok1, 1);
  if (ok1s[0][0] == 0 || ok1s[1][0] == 0) return rc ? rc : fail(who, "the peer failed phase 1");
  std::printf("%s: phase 1 OK\n", who);
  // ---- phase 2: a kernel through the proxy over cuda_ipc ----
  constexpr size_t kBuf = kgt::two::kPosterBuf;
  Proxy proxy(*t);
  uint8_t* buf = nullptr;
  if (cudaMalloc(&buf, kBuf) != cudaSuccess) return fail(who, "cudaMalloc");
  kgt::two::poster_fill(buf, req, kWord0);
  auto reg = proxy.register_memory(buf, kBuf, kAccessAll, MemoryKind::Gpu);
  const auto key = reg->remote_key().serialize();
  const auto keys = bs->allgather(key.data(), key.size());
  const RemoteKey rkey = RemoteKey::deserialize(keys[req ? 1 : 0].data(), keys[req ? 1 : 0].size());
  const transport::IpcStats before = stats(*t);
  if (req) {
    ProxyChannelConfig cc;
    cc.slots = 16;
    cc.posters = Posters::Gpu;
    cc.timeout = std::chrono::milliseconds(kTimeoutMs);
    ProxyChannel& ch = proxy.channel(p, cc);
    if (!kgt::preload(k_poster<Sharing::Exclusive, ProxyHandle>)) return fail(who, "loading the kernel");
    rc = kgt::two::poster_requester(who, ch, buf, reg->lkey(), rkey.addr, ch.import_key(rkey), kWord0, "kernel's ");
    if (rc == 0 && stats(*t).refs <= before.refs) rc = fail(who, "the kernel's puts did not go by reference");
  }
  bs->barrier();  // the requester's kernel is done
  if (!req) {
    rc = kgt::two::poster_target(who, buf, "kernel's ");
    if (rc == 0 && stats(*t).pulls <= before.pulls) rc = fail(who, "the kernel's puts were not pulled by reference");
  }
  std::printf("%s: phase 2 %s\n", who, stats_line(*t).c_str());
  bs->barrier();  // both verified: tear down together
  reg.reset();
  rg.reset();
  rh.reset();
  cudaFree(buf);
  cudaFree(g);
  if (rc == 0) std::printf("%s over %s: OK\n", who, provider.c_str());
  return rc;
}

KGT_TEST(cuda_ipc_two_processes_one_gpu) {
  setenv("KINET_SOCKET_IFNAME", "=lo", 1);  // the bootstrap meets on loopback
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);  // kernels load before anything waits on them
  const int rc = kgt::two::run_pair("cuda_ipc", "cuda_ipc: two processes, one GPU");
  CHECK(rc != 1, "two processes over cuda_ipc failed (see the FAIL lines above)");
  if (rc == 77) KGT_SKIP("cuda_ipc could not open (see the SKIP lines above)");
}
}  // namespace

int main(int argc, char** argv) { return kgt::two::main(argc, argv, false, child); }
