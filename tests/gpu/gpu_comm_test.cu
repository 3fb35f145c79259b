// kinet GPU test: the communicator's device API from kernels, two processes
// on one GPU, once over the p2p path (CUDA IPC), once over the proxy path
// (tcp) and once over the gdaki path (RC QPs of the software NIC on its tcp
// fabric, rings and windows in GPU memory: kernels post WQEs and ring the
// emulated doorbell). Every operation, the warp and CTA puts, data verified
// byte for byte; then the local-completion counters (k_counters): a source
// rewritten as soon as wait_counter returned, counted warp / CTA puts and a
// counted warp / CTA put_signal, exact counts, a refused counter index.
// The processes are forked before any CUDA call (tests/multiproc/
// comm_ranks.hpp); exit code 77 = skipped (no GPU).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <kinet/comm.hpp>

#include "comm_paths.hpp"

namespace {
using namespace kinet;
using dev::Cmp;
using dev::SigOp;

constexpr uint64_t kSrc = 0, kData = 16 << 10, kGet = 24 << 10, kWarp = 32 << 10, kCta = 40 << 10, kVal = 56 << 10,
                   kSig = kVal + 64, kAtom = kVal + 128, kCas = kVal + 136, kWin = 64 << 10;
constexpr uint64_t kLen = 2000, kWarpLen = 4096, kCtaLen = 8192;

__host__ __device__ uint8_t pat(int rank, uint64_t i) { return uint8_t((i * 2654435761u >> 11) ^ (rank * 37 + 1)); }

// One thread: every operation to the other rank; step[0] = the first failing step, step[1] its status.
__global__ void k_ops(dev::CommHandle c, dev::WindowHandle w, int* step) {
  const int p = 1 - c.rank;
  uint64_t old = 0;
  Status s = Status::Ok;
  int i = 0;
  auto ok = [&](Status st) { ++i; s = st; return st == Status::Ok; };
  if (ok(dev::put(c, p, w, kData, w, kSrc, kLen - 1)) && ok(dev::put_value(c, p, w, kVal, 0x1122334455667788ull)) &&
      ok(dev::put_value(c, p, w, kVal + 8, 0xa1b2c3ull, 3)) && ok(dev::get(c, p, w, kGet, w, kSrc, kLen)) &&
      ok(dev::fetch_add(c, p, w, kAtom, c.rank + 1, &old)) && ok(dev::compare_swap(c, p, w, kCas, 0, c.rank + 7, &old)) &&
      ok(dev::put_signal(c, p, w, kData + kLen - 1, w, kSrc + kLen - 1, 1, w, kSig, SigOp::Add, 1)) &&
      ok(dev::signal(c, p, w, kSig + 8, SigOp::Set, 42)) && ok(dev::quiet(c)) &&
      ok(dev::wait_signal(c, w, kSig, Cmp::Ge, 1, p)) && ok(dev::wait_signal(c, w, kSig + 8, Cmp::Eq, 42, p)) &&
      ok(dev::barrier(c)))
    i = 0;
  step[0] = i;
  step[1] = int(s);
}

// A warp, then the whole CTA, move one buffer each; thread 0 signals and waits.
__global__ void k_group(dev::CommHandle c, dev::WindowHandle w, int* step) {
  const int p = 1 - c.rank;
  Status s = Status::Ok;
  if (threadIdx.x < 32) s = dev::warp_put(c, p, w, kWarp, w, kSrc, kWarpLen);
  if (s != Status::Ok) step[0] = 1, step[1] = int(s);
  s = dev::cta_put(c, p, w, kCta, w, kSrc, kCtaLen);
  if (s != Status::Ok) step[0] = 2, step[1] = int(s);
  if (threadIdx.x == 0 && step[0] == 0) {
    if ((s = dev::signal(c, p, w, kSig + 16, SigOp::Add, 1)) != Status::Ok) step[0] = 3, step[1] = int(s);
    else if ((s = dev::wait_signal(c, w, kSig + 16, Cmp::Ge, 1, p)) != Status::Ok) step[0] = 4, step[1] = int(s);
    else if ((s = dev::barrier(c)) != Status::Ok) step[0] = 5, step[1] = int(s);
  }
}

// Counters, on a window of its own with 3 counters: thread 0 rewrites one
// source kCRounds times, each put counted on counter 0 and waited for before
// the next rewrite; then a warp_put, a cta_put and a warp_put_signal counted
// on counter 1, and a cta_put_signal counted on counter 2, whose signals the
// peer waits for. step[0] = the first failing step, step[1] its status.
constexpr uint64_t kCChunk = 1024, kCRounds = 8, kCSrc = 60 << 10, kCRecv = 32 << 10, kCWarp = 16 << 10,
                   kCCta = 24 << 10, kCSig = 56 << 10;
__global__ void k_counters(dev::CommHandle c, dev::WindowHandle w, int* step) {
  using dev::CounterInc;
  const int p = 1 - c.rank;
  __shared__ int s_fail;
  Status s = Status::Ok;
  int i = 100;
  auto ok = [&](Status st) { ++i; s = st; return st == Status::Ok; };
  if (threadIdx.x == 0) {
    s_fail = 0;
    bool good = true;
    for (uint64_t k = 0; k < kCRounds && good; ++k) {
      for (uint64_t b = 0; b < kCChunk; ++b) w.local[kCSrc + b] = pat(c.rank * 31 + int(k), b);
      good = ok(dev::put(c, p, w, kCRecv + k * kCChunk, w, kCSrc, kCChunk, CounterInc{0})) &&
             ok(dev::wait_counter(c, w, 0, k + 1));
      if (good) i -= 2;  // same steps every round
    }
    if (!good) s_fail = 1, step[0] = i, step[1] = int(s);
  }
  __syncthreads();
  if (s_fail) return;
  // The group puts read the original source (kSrc of this window, by the host).
  Status g = Status::Ok;
  if (threadIdx.x < 32) g = dev::warp_put(c, p, w, kCWarp, w, 0, kWarpLen, CounterInc{1});
  if (g != Status::Ok) step[0] = 200, step[1] = int(g);
  g = dev::cta_put(c, p, w, kCCta, w, 0, kCtaLen, CounterInc{1});
  if (g != Status::Ok) step[0] = 201, step[1] = int(g);
  g = Status::Ok;
  if (threadIdx.x < 32)
    g = dev::warp_put_signal(c, p, w, kCRecv + kCRounds * kCChunk, w, 0, 64, w, kCSig + 8, SigOp::Add, 1,
                             CounterInc{1});
  if (g != Status::Ok) step[0] = 202, step[1] = int(g);
  g = dev::cta_put_signal(c, p, w, kCRecv + kCRounds * kCChunk + 64, w, 64, 64, w, kCSig, SigOp::Add, 1,
                          CounterInc{2});
  if (g != Status::Ok) step[0] = 203, step[1] = int(g);
  if (threadIdx.x != 0 || step[0] != 0) return;
  uint64_t v0 = 0, v1 = 0, v2 = 0;
  i = 300;
  if (ok(dev::wait_counter(c, w, 1, 3)) && ok(dev::quiet(c)) && ok(dev::read_counter(c, w, 0, &v0)) &&
      ok(dev::read_counter(c, w, 1, &v1)) && ok(dev::read_counter(c, w, 2, &v2)) &&
      ok(v0 == kCRounds && v1 == 3 && v2 == 1 ? Status::Ok : Status::Pending) &&
      ok(dev::put(c, p, w, 0, w, 0, 8, CounterInc{3}) == Status::InvalidArgument ? Status::Ok : Status::Pending) &&
      ok(dev::wait_signal(c, w, kCSig, Cmp::Eq, 1, p)) && ok(dev::wait_signal(c, w, kCSig + 8, Cmp::Eq, 1, p)) &&
      ok(dev::barrier(c)))
    return;
  step[0] = i;
  step[1] = int(s);
}

std::string run(int r, Bootstrap& bs, const std::string& path) {
  if (!test::have_gpu()) return test::kNoGpu;
  Comm comm(bs, test::gpu_comm_config(path, std::chrono::milliseconds(20000)));
  if (std::string e = test::check_comm_path(comm, path); !e.empty()) return e;
  CommWindow& win = comm.alloc_symmetric(kWin);
  CommWindow& cwin = comm.alloc_symmetric(kWin, 3);
  std::vector<uint8_t> h(kWin);
  for (uint64_t i = 0; i < kCtaLen; ++i) h[kSrc + i] = pat(r, i);
  if (cudaMemcpy(win.local(), h.data(), kCtaLen, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(cwin.local(), h.data(), kCtaLen, cudaMemcpyHostToDevice) != cudaSuccess)
    return "memcpy in";
  comm.barrier();
  int* step = nullptr;
  cudaMalloc(&step, 8);
  cudaMemset(step, 0, 8);
  // Both kernels loaded before either runs: under CUDA lazy loading (the
  // default) k_group's first launch, queued behind a k_ops that waits on the
  // proxy, stalled the proxy's GPU copies until k_ops timed out (H200). The
  // gdaki path has the same hazard: the software NIC's engine moves GPU
  // memory with CUDA copies while k_ops spins on its CQ.
  cudaFuncAttributes fa;
  if (cudaFuncGetAttributes(&fa, k_ops) != cudaSuccess || cudaFuncGetAttributes(&fa, k_group) != cudaSuccess ||
      cudaFuncGetAttributes(&fa, k_counters) != cudaSuccess)
    return "cudaFuncGetAttributes";
  k_ops<<<1, 1>>>(comm.device_handle(), win.handle(), step);
  k_group<<<1, 256>>>(comm.device_handle(), win.handle(), step);
  k_counters<<<1, 256>>>(comm.device_handle(), cwin.handle(), step);
  int hs[2] = {-1, -1};
  if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpy(hs, step, 8, cudaMemcpyDeviceToHost) != cudaSuccess)
    return "kernel failed";
  if (hs[0] != 0)
    return "step " + std::to_string(hs[0]) + ": " + status_string(Status(hs[1])) + " " + comm.device_error() +
           " | peer: " + comm.peer_error(1 - r) + " | " + comm.report();
  comm.barrier();
  cudaMemcpy(h.data(), win.local(), kWin, cudaMemcpyDeviceToHost);
  const int p = 1 - r;
  for (uint64_t i = 0; i < kLen; ++i)
    if (h[kData + i] != pat(p, i) || h[kGet + i] != pat(p, i)) return "data/get byte " + std::to_string(i);
  for (uint64_t i = 0; i < kWarpLen; ++i)
    if (h[kWarp + i] != pat(p, i)) return "warp_put byte " + std::to_string(i);
  for (uint64_t i = 0; i < kCtaLen; ++i)
    if (h[kCta + i] != pat(p, i)) return "cta_put byte " + std::to_string(i);
  uint64_t v[4];
  std::memcpy(v, &h[kVal], 16);
  std::memcpy(v + 2, &h[kAtom], 16);
  if (v[0] != 0x1122334455667788ull || v[1] != 0xa1b2c3ull) return "put_value";
  if (v[2] != uint64_t(p) + 1 || v[3] != uint64_t(p) + 7) return "atomics " + std::to_string(v[2]) + " " + std::to_string(v[3]);
  // Counters: every round's own bytes (a later rewrite of the source never
  // leaked in), the counted warp / CTA puts, the host's view of the counts.
  cudaMemcpy(h.data(), cwin.local(), kWin, cudaMemcpyDeviceToHost);
  for (uint64_t k = 0; k < kCRounds; ++k)
    for (uint64_t i = 0; i < kCChunk; ++i)
      if (h[kCRecv + k * kCChunk + i] != pat(p * 31 + int(k), i))
        return "counted round " + std::to_string(k) + " byte " + std::to_string(i) + ": a later source leaked in";
  for (uint64_t i = 0; i < kWarpLen; ++i)
    if (h[kCWarp + i] != pat(p, i)) return "counted warp_put byte " + std::to_string(i);
  for (uint64_t i = 0; i < kCtaLen; ++i)
    if (h[kCCta + i] != pat(p, i)) return "counted cta_put byte " + std::to_string(i);
  for (uint64_t i = 0; i < 128; ++i)
    if (h[kCRecv + kCRounds * kCChunk + i] != pat(p, i)) return "counted warp/cta put_signal byte " + std::to_string(i);
  if (cwin.counter(0) != kCRounds || cwin.counter(1) != 3 || cwin.counter(2) != 1)
    return "host counters " + std::to_string(cwin.counter(0)) + " " + std::to_string(cwin.counter(1)) + " " +
           std::to_string(cwin.counter(2));
  cudaFree(step);
  comm.barrier();
  return "";
}
}  // namespace

// KINET_COMM_TEST_ONLY=p2p|proxy|gdaki: that path alone (debugging).
int main() { return kinet::test::run_comm_paths(2, {"p2p", "proxy", "gdaki"}, run, std::chrono::seconds(120)); }
