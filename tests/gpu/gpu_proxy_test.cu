// kinet GPU test: kernels post through the proxy backend (kinet/proxy.hpp,
// kinet/device/proxy.cuh).
//   - one process over "loop": the SAME templated kernel (tests/proxy/
//     poster.hpp) over an emu QP and over the proxy, GPU memory on both
//     sides, same statuses and bytes;
//   - many CTAs of posters on one shared channel (warp-aggregated
//     reservations), and the warp_put / cta_put variants;
//   - two processes on one GPU over "tcp", "ucx" and "ofi" (each skipped
//     when not built or can't start; the binary spawns itself as
//     --role requester|target --id HEX; exit 77 without a GPU).
// Every wait is bounded: device waits by the channel timeout, the bootstrap
// by its timeout, the children by the parent's deadline.
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

namespace {
using namespace kinet;
using namespace kinet::dev;
using namespace kgt::two;  // the two-process harness, pattern() and k_poster
using kinet::test::PosterArgs;

// Every thread of every CTA: one 8-byte put of its own slot, then waits for it.
template <class H> __global__ void k_many(H h, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk, int* bad) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  Ticket t;
  Status s = put<Sharing::Gpu>(h, src + 8 * i, lk, raddr + 8 * i, rk, 8, 0, &t);
  if (s == Status::Ok) s = wait<Sharing::Gpu>(h, t);
  if (s != Status::Ok) atomicAdd(bad, 1);
}
// The same with warp_put (mode 0) or cta_put (mode 1).
__global__ void k_group(ProxyHandle h, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk, int mode, int* bad) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  Ticket t;
  Status s = mode == 0 ? warp_put<Sharing::Gpu>(h, src + 8 * i, lk, raddr + 8 * i, rk, 8, 0, &t)
                       : cta_put<Sharing::Gpu>(h, src + 8 * i, lk, raddr + 8 * i, rk, 8, 0, &t);
  if (s == Status::Ok) s = wait<Sharing::Gpu>(h, t);
  if (s != Status::Ok) atomicAdd(bad, 1);
}

struct Loop {
  std::unique_ptr<Transport> a, b;
  PeerId ab = 0;
  std::unique_ptr<Proxy> proxy;
  Loop() {
    TransportOptions o;
    o.provider = "loop";
    o.name = "gpu side";
    a = Transport::open(o);
    o.name = "target side";
    b = Transport::open(o);
    ab = a->connect(b->address(), "target side");
    b->connect(a->address(), "gpu side");
    proxy = std::make_unique<Proxy>(std::vector<Transport*>{a.get(), b.get()});
  }
};

ProxyChannelConfig gpu_channel(uint32_t slots) {
  ProxyChannelConfig c;
  c.slots = slots;
  c.posters = Posters::Gpu;
  c.timeout = std::chrono::milliseconds(kTimeoutMs);
  return c;
}

// The poster's run over one backend: local and remote in GPU memory.
struct Run {
  int st = -1;
  std::vector<uint8_t> local, remote;
};

KGT_TEST(proxy_one_kernel_source_over_emu_qp_and_proxy) {
  using kinet::test::kPosterLocalBytes;
  using kinet::test::kPosterRemoteBytes;
  const uint64_t word0 = 1000;
  std::vector<uint8_t> l0 = pattern(kPosterLocalBytes, 0), r0 = pattern(kPosterRemoteBytes, 1);
  std::memcpy(r0.data() + 8192, &word0, 8);
  std::memset(l0.data() + 8192, 0, kPosterLocalBytes - 8192);
  std::memset(r0.data() + 8200, 0, 8);
  uint8_t *lb = nullptr, *rb = nullptr;
  int* st = nullptr;
  CUDA_OK(cudaMalloc(&lb, kPosterLocalBytes));
  CUDA_OK(cudaMalloc(&rb, kPosterRemoteBytes));
  CUDA_OK(cudaMalloc(&st, sizeof(int)));
  auto reset = [&] {
    cudaMemcpy(lb, l0.data(), l0.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(rb, r0.data(), r0.size(), cudaMemcpyHostToDevice);
    cudaMemset(st, 0xff, sizeof(int));
  };
  auto collect = [&](Run& r) {
    cudaMemcpy(&r.st, st, sizeof(int), cudaMemcpyDeviceToHost);
    r.local.resize(kPosterLocalBytes);
    r.remote.resize(kPosterRemoteBytes);
    cudaMemcpy(r.local.data(), lb, r.local.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(r.remote.data(), rb, r.remote.size(), cudaMemcpyDeviceToHost);
  };
  const uint32_t many = kinet::test::kPosterMaxMany;
  Run emu_run, proxy_run;
  {
    auto da = Device::open("emu"), db = Device::open("emu");
    auto pa = da->alloc_pd(), pb = db->alloc_pd();
    auto ma = pa->reg_mr(lb, kPosterLocalBytes, kAccessAll);
    auto mb = pb->reg_mr(rb, kPosterRemoteBytes, kAccessAll);
    QpConfig cfg;
    cfg.sq_depth = 64;
    cfg.timeout_ms = kTimeoutMs;
    cfg.posters = Posters::Gpu;
    auto qa = pa->create_qp(cfg), qb = pb->create_qp(cfg);
    qa->connect(qb->info());
    qb->connect(qa->info());
    reset();
    k_poster<Sharing::Exclusive><<<1, 1>>>(qa->handle(),
                                           PosterArgs{lb, ma->lkey(), reinterpret_cast<uint64_t>(rb), mb->rkey(),
                                                      word0, many},
                                           st);
    CUDA_OK(cudaDeviceSynchronize());
    collect(emu_run);
  }
  {
    Loop L;
    auto lr = L.proxy->register_memory(lb, kPosterLocalBytes, kAccessAll, MemoryKind::Gpu, 0);
    auto rr = L.proxy->register_memory(rb, kPosterRemoteBytes, kAccessAll, MemoryKind::Gpu, 1);
    ProxyChannel& ch = L.proxy->channel(L.ab, gpu_channel(16));
    const Rkey rk = ch.import_key(rr->remote_key());
    reset();
    k_poster<Sharing::Exclusive><<<1, 1>>>(ch.handle(),
                                           PosterArgs{lb, lr->lkey(), reinterpret_cast<uint64_t>(rb), rk, word0, many},
                                           st);
    CUDA_OK(cudaDeviceSynchronize());
    collect(proxy_run);
    CHECK(proxy_run.st == 0, "proxy: status %d (%s) | %s", proxy_run.st, status_string(static_cast<Status>(proxy_run.st)),
          ch.last_error().c_str());
  }
  CHECK(emu_run.st == 0, "emu QP: status %d (%s)", emu_run.st, status_string(static_cast<Status>(emu_run.st)));
  CHECK(std::memcmp(emu_run.local.data(), proxy_run.local.data(), 8224) == 0, "local bytes differ between backends");
  CHECK(emu_run.remote == proxy_run.remote, "remote bytes differ between backends");
  CHECK(std::memcmp(proxy_run.remote.data(), l0.data(), 3000) == 0, "put data wrong");
  CHECK(std::memcmp(proxy_run.local.data() + 4096, r0.data() + 4096, 2000) == 0, "get data wrong");
  uint64_t res[3], sig;
  std::memcpy(res, proxy_run.local.data() + 8192, 24);
  std::memcpy(&sig, proxy_run.remote.data() + 8200, 8);
  CHECK(res[0] == word0 && res[1] == word0 + 5 && res[2] == 77, "atomic results %llu %llu %llu",
        (unsigned long long)res[0], (unsigned long long)res[1], (unsigned long long)res[2]);
  CHECK(sig == 1, "signal word %llu", (unsigned long long)sig);
  cudaFree(lb);
  cudaFree(rb);
  cudaFree(st);
}

KGT_TEST(proxy_many_ctas_one_shared_channel_and_group_variants) {
  constexpr int kBlocks = 16, kThreads = 128;
  constexpr size_t n = size_t{kBlocks} * kThreads * 8;
  std::vector<uint8_t> src = pattern(n, 2);
  uint8_t *lb = nullptr, *rb = nullptr;
  int* bad = nullptr;
  CUDA_OK(cudaMalloc(&lb, n));
  CUDA_OK(cudaMalloc(&rb, n));
  CUDA_OK(cudaMalloc(&bad, sizeof(int)));
  cudaMemcpy(lb, src.data(), n, cudaMemcpyHostToDevice);
  Loop L;
  auto lr = L.proxy->register_memory(lb, n, kAccessAll, MemoryKind::Gpu, 0);
  auto rr = L.proxy->register_memory(rb, n, kAccessAll, MemoryKind::Gpu, 1);
  for (int mode = -1; mode <= 1; ++mode) {
    ProxyChannel& ch = L.proxy->channel(L.ab, gpu_channel(256));  // fewer slots than posters
    const Rkey rk = ch.import_key(rr->remote_key());
    cudaMemset(rb, 0, n);
    cudaMemset(bad, 0, sizeof(int));
    if (mode < 0) k_many<<<kBlocks, kThreads>>>(ch.handle(), lb, lr->lkey(), reinterpret_cast<uint64_t>(rb), rk, bad);
    else k_group<<<kBlocks, kThreads>>>(ch.handle(), lb, lr->lkey(), reinterpret_cast<uint64_t>(rb), rk, mode, bad);
    CUDA_OK(cudaDeviceSynchronize());
    int h_bad = -1;
    cudaMemcpy(&h_bad, bad, sizeof(int), cudaMemcpyDeviceToHost);
    CHECK(h_bad == 0, "mode %d: %d threads failed | %s", mode, h_bad, ch.last_error().c_str());
    std::vector<uint8_t> got(n);
    cudaMemcpy(got.data(), rb, n, cudaMemcpyDeviceToHost);
    CHECK(got == src, "mode %d: remote bytes differ", mode);
    CHECK(ch.completed() == uint64_t{kBlocks} * kThreads, "mode %d: %llu completed", mode,
          (unsigned long long)ch.completed());
  }
  lr.reset();
  rr.reset();
  cudaFree(lb);
  cudaFree(rb);
  cudaFree(bad);
}

// ---- two processes over tcp --------------------------------------------------

std::vector<uint8_t> blob_pair(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  std::vector<uint8_t> out(4);
  const uint32_t n = static_cast<uint32_t>(a.size());
  std::memcpy(out.data(), &n, 4);
  out.insert(out.end(), a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// Requester: a kernel runs the poster through its proxy into the target's
// GPU memory. Target: its proxy thread serves the operations (the transport's
// target role); it checks its memory after the requester is done.
int child(Child& c) {
  const char* who = c.who;
  const bool req = c.req;
  const std::string& provider = c.opts.provider;
  auto t = Transport::open(c.opts);
  Proxy proxy(*t);
  uint8_t* buf = nullptr;
  if (cudaMalloc(&buf, kgt::two::kPosterBuf) != cudaSuccess) return fail(who, "cudaMalloc");
  const uint64_t word0 = 1000;
  kgt::two::poster_fill(buf, req, word0);
  auto reg = proxy.register_memory(buf, kgt::two::kPosterBuf, kAccessAll, MemoryKind::Gpu);
  const auto mine = blob_pair(t->address(), reg->remote_key().serialize());
  const auto all = c.bs->allgather(mine.data(), mine.size());
  const auto& peer = all[req ? 1 : 0];
  uint32_t n = 0;
  if (peer.size() < 4) return fail(who, "short blob from the peer");
  std::memcpy(&n, peer.data(), 4);
  if (n > peer.size() - 4) return fail(who, "bad blob from the peer");
  const std::vector<uint8_t> addr(peer.data() + 4, peer.data() + 4 + n);
  const RemoteKey rkey = RemoteKey::deserialize(peer.data() + 4 + n, peer.size() - 4 - n);
  const PeerId p = t->connect(addr, req ? "target" : "requester");
  c.bs->barrier();  // both connected
  int rc = 0;
  if (req) {
    ProxyChannel& ch = proxy.channel(p, gpu_channel(16));
    rc = kgt::two::poster_requester(who, ch, buf, reg->lkey(), rkey.addr, ch.import_key(rkey), word0, "");
  }
  c.bs->barrier();  // the requester is done
  if (!req) rc = kgt::two::poster_target(who, buf, "");
  c.bs->barrier();  // both verified: tear down together
  reg.reset();
  cudaFree(buf);
  if (rc == 0) std::printf("%s over %s: OK\n", who, provider.c_str());
  return rc;
}

KGT_TEST(proxy_two_processes_one_gpu) {
  setenv("KINET_SOCKET_IFNAME", "=lo", 1);  // both processes meet on loopback
  int ran = 0;
  for (const char* p : {"tcp", "ucx", "ofi"}) {
    const int rc = kgt::two::run_pair(p, std::string("proxy: two processes, one GPU, over ") + p);
    CHECK(rc != 1, "two processes over %s failed", p);
    ran += rc == 0;
  }
  if (ran == 0) KGT_SKIP("no transport could start");
}
}  // namespace

int main(int argc, char** argv) { return kgt::two::main(argc, argv, true, child); }
