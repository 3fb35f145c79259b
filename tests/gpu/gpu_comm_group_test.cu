// kinet GPU test: the communicator's group signals from kernels
// (warp_put_signal, cta_put_signal, warp_signal, cta_signal), two processes
// on one GPU, over the p2p path (CUDA IPC) and the proxy path (tcp). Each
// signal is applied exactly once per group call (an Add seen with its exact
// value), after the data of every thread of the group (checked in the kernel
// right after the wait), and bad arguments return InvalidArgument moving
// no data and applying no signal. Ranks forked before any CUDA call; exit
// code 77 = skipped (no GPU).
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

// Window layout (bytes). Odd lengths: the copies' byte tails run too.
constexpr uint64_t kSrc = 0, kWarpData = 16 << 10, kWarpParts = 24 << 10, kCtaData = 32 << 10, kCtaParts = 48 << 10,
                   kBad = 64 << 10, kSig = 80 << 10, kWin = 96 << 10;
constexpr uint64_t kWarpLen = 5001, kPartLen = 3001, kCtaLen = 12289, kBadLen = 4096;
// Signal words at kSig + 8 * i.
enum : uint64_t { kSigWarp = 0, kSigWarpParts, kSigCta, kSigCtaParts, kSigBad0, kSigBad1, kSigBad2, kSigBad3, kSigs };
constexpr uint64_t kWarpAdd = 5, kWarpSet = 77, kCtaSet = 0x1234, kCtaAdd = 3;

__host__ __device__ uint8_t pat(int rank, uint64_t i) { return uint8_t((i * 2654435761u >> 11) ^ (rank * 37 + 1)); }
__host__ __device__ uint64_t sig(uint64_t i) { return kSig + 8 * i; }

// step[0]: the first failing check (0: all passed), step[1]: its status or count.
__device__ void fail(int* step, int at, int what) {
  if (atomicCAS(&step[0], 0, at) == 0) step[1] = what;
}

// Thread 0: waits for the signal to equal v, then the data must be there.
__device__ void expect(const dev::CommHandle& c, const dev::WindowHandle& w, uint64_t s, uint64_t v, uint64_t off,
                       uint64_t len, int* step, int at) {
  const int p = 1 - c.rank;
  const Status st = dev::wait_signal(c, w, sig(s), Cmp::Eq, v, p);
  if (st != Status::Ok) return fail(step, at, int(st));
  int bad = 0;
  for (uint64_t i = 0; i < len; ++i) bad += w.local[off + i] != pat(p, i);
  if (bad) fail(step, at + 1, bad);
}

__global__ void k_group(dev::CommHandle c, dev::WindowHandle w, int* step) {
  const int p = 1 - c.rank;
  const bool warp0 = threadIdx.x < 32;
  Status s;
  auto want = [&](Status got, Status exp, int at) {
    if (got != exp && (threadIdx.x & 31) == 0) fail(step, at, int(got));
  };
  if (warp0) {
    want(dev::warp_put_signal(c, p, w, kWarpData, w, kSrc, kWarpLen, w, sig(kSigWarp), SigOp::Add, kWarpAdd), Status::Ok, 1);
    want(dev::warp_put(c, p, w, kWarpParts, w, kSrc, kPartLen), Status::Ok, 2);
    want(dev::warp_put(c, p, w, kWarpParts + kPartLen, w, kSrc + kPartLen, kPartLen), Status::Ok, 3);
    want(dev::warp_signal(c, p, w, sig(kSigWarpParts), SigOp::Set, kWarpSet), Status::Ok, 4);
    // Refused, nothing moved: a misaligned signal word, a peer out of range,
    // an unknown SigOp, a destination past the window's end.
    want(dev::warp_put_signal(c, p, w, kBad, w, kSrc, kBadLen, w, sig(kSigBad0) + 4, SigOp::Add, 1),
         Status::InvalidArgument, 5);
    want(dev::warp_put_signal(c, 2, w, kBad, w, kSrc, kBadLen, w, sig(kSigBad0), SigOp::Add, 1), Status::InvalidArgument, 6);
    want(dev::warp_signal(c, p, w, sig(kSigBad0), static_cast<SigOp>(9), 1), Status::InvalidArgument, 7);
    want(dev::warp_put_signal(c, p, w, kWin - 16, w, kSrc, 17, w, sig(kSigBad1), SigOp::Add, 1), Status::InvalidArgument, 8);
  }
  s = dev::cta_put_signal(c, p, w, kCtaData, w, kSrc, kCtaLen, w, sig(kSigCta), SigOp::Set, kCtaSet);
  want(s, Status::Ok, 10);
  want(dev::cta_put(c, p, w, kCtaParts, w, kSrc, kPartLen), Status::Ok, 11);
  want(dev::cta_put(c, p, w, kCtaParts + kPartLen, w, kSrc + kPartLen, kPartLen), Status::Ok, 12);
  want(dev::cta_signal(c, p, w, sig(kSigCtaParts), SigOp::Add, kCtaAdd), Status::Ok, 13);
  want(dev::cta_put_signal(c, p, w, kBad, w, kSrc, kBadLen, w, sig(kSigBad2) + 1, SigOp::Set, 1), Status::InvalidArgument, 14);
  want(dev::cta_signal(c, -1, w, sig(kSigBad2), SigOp::Add, 1), Status::InvalidArgument, 15);
  want(dev::cta_put_signal(c, p, w, kBad, w, kWin - 8, 16, w, sig(kSigBad3), SigOp::Add, 1), Status::InvalidArgument, 16);
  if (threadIdx.x == 0) {
    expect(c, w, kSigWarp, kWarpAdd, kWarpData, kWarpLen, step, 20);
    expect(c, w, kSigWarpParts, kWarpSet, kWarpParts, 2 * kPartLen, step, 22);
    expect(c, w, kSigCta, kCtaSet, kCtaData, kCtaLen, step, 24);
    expect(c, w, kSigCtaParts, kCtaAdd, kCtaParts, 2 * kPartLen, step, 26);
    if ((s = dev::quiet(c)) != Status::Ok) fail(step, 28, int(s));
    else if ((s = dev::barrier(c)) != Status::Ok) fail(step, 29, int(s));
  }
}

std::string run(int r, Bootstrap& bs, const std::string& path) {
  if (!test::have_gpu()) return test::kNoGpu;
  Comm comm(bs, test::gpu_comm_config(path, std::chrono::milliseconds(20000)));
  if (std::string e = test::check_comm_path(comm, path); !e.empty()) return e;
  CommWindow& win = comm.alloc_symmetric(kWin);
  std::vector<uint8_t> h(kWin);
  for (uint64_t i = 0; i < kCtaLen; ++i) h[kSrc + i] = pat(r, i);
  if (cudaMemcpy(win.local(), h.data(), kCtaLen, cudaMemcpyHostToDevice) != cudaSuccess) return "memcpy in";
  int* step = nullptr;
  if (cudaMalloc(&step, 8) != cudaSuccess || cudaMemset(step, 0, 8) != cudaSuccess) return "cudaMalloc";
  // Loaded before it waits on the other rank (CUDA lazy loading, docs/COMM.md).
  cudaFuncAttributes fa;
  if (cudaFuncGetAttributes(&fa, k_group) != cudaSuccess) return "cudaFuncGetAttributes";
  comm.barrier();
  k_group<<<1, 256>>>(comm.device_handle(), win.handle(), step);
  int hs[2] = {-1, -1};
  if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpy(hs, step, 8, cudaMemcpyDeviceToHost) != cudaSuccess)
    return "kernel failed";
  cudaFree(step);
  if (hs[0] != 0)
    return "check " + std::to_string(hs[0]) + ": " + std::to_string(hs[1]) + " (" + status_string(Status(hs[1])) +
           ") " + comm.device_error() + " | peer: " + comm.peer_error(1 - r) + " | " + comm.report();
  comm.barrier();  // both kernels done: every put and signal landed
  if (cudaMemcpy(h.data(), win.local(), kWin, cudaMemcpyDeviceToHost) != cudaSuccess) return "memcpy out";
  const int p = 1 - r;
  for (uint64_t i = 0; i < kWarpLen; ++i)
    if (h[kWarpData + i] != pat(p, i)) return "warp_put_signal byte " + std::to_string(i);
  for (uint64_t i = 0; i < 2 * kPartLen; ++i)
    if (h[kWarpParts + i] != pat(p, i) || h[kCtaParts + i] != pat(p, i)) return "warp/cta_put byte " + std::to_string(i);
  for (uint64_t i = 0; i < kCtaLen; ++i)
    if (h[kCtaData + i] != pat(p, i)) return "cta_put_signal byte " + std::to_string(i);
  for (uint64_t i = 0; i < kBadLen; ++i)
    if (h[kBad + i] != 0) return "a refused call wrote byte " + std::to_string(i);
  if (h[kWin - 16] != 0 || h[kWin - 1] != 0) return "a refused call wrote the window's end";
  uint64_t v[kSigs];
  std::memcpy(v, &h[kSig], sizeof v);
  const uint64_t exp[kSigs] = {kWarpAdd, kWarpSet, kCtaSet, kCtaAdd, 0, 0, 0, 0};
  for (uint64_t i = 0; i < kSigs; ++i)
    if (v[i] != exp[i])
      return "signal " + std::to_string(i) + " is " + std::to_string(v[i]) + ", expected " + std::to_string(exp[i]);
  comm.barrier();
  return "";
}
}  // namespace

// KINET_COMM_TEST_ONLY=p2p|proxy: that path alone (debugging).
int main() { return kinet::test::run_comm_paths(2, {"p2p", "proxy"}, run, std::chrono::seconds(120)); }
