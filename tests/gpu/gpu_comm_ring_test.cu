// kinet GPU test: four processes on one GPU sum their vectors with a ring
// all-reduce written with the communicator's device API (the GPU twin of
// examples/ring_allreduce.cpp), once per path: p2p (CUDA IPC), proxy (tcp)
// and gdaki (the software NIC's RC QPs on its tcp fabric). Each rank's CTA
// reduces the chunk it received; thread 0 moves chunks with put_signal and
// waits for the left neighbour's signal. Every rank checks every value of the
// result. Forks before any CUDA call; exit code 77 = skipped (no GPU).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <kinet/comm.hpp>

#include "comm_paths.hpp"

namespace {
using namespace kinet;

constexpr int kRanks = 4;
constexpr uint64_t kCount = 64 << 10;  // uint64 values per rank (512 KiB), a multiple of kRanks
// Window: data[kCount] | incoming[kCount] | reduce-scatter and all-gather signal words.
constexpr uint64_t kData = 0, kIn = kCount * 8, kSigRs = 2 * kCount * 8, kSigAg = kSigRs + 8, kBytes = kSigAg + 8;

__host__ __device__ uint64_t initial(int rank, uint64_t i) { return (uint64_t(rank) + 1) * 1000003u + i * (rank + 3); }

// One CTA. err[0] = the failing step + 1, err[1] its status.
__global__ void k_ring(dev::CommHandle c, dev::WindowHandle w, int* err) {
  const int n = c.size, right = (c.rank + 1) % n, left = (c.rank + n - 1) % n;
  const uint64_t chunk = kCount / n, cb = chunk * 8;
  auto mod = [n](int i) { return uint64_t((i % n + n) % n); };
  auto* data = reinterpret_cast<uint64_t*>(w.local + kData);
  const auto* in = reinterpret_cast<const uint64_t*>(w.local + kIn);
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  auto step = [&](int at, Status s) {
    if (s != Status::Ok && !failed) failed = 1, err[0] = at + 1, err[1] = int(s);
  };
  for (int s = 0; s < n - 1; ++s) {  // reduce-scatter: afterwards chunk rank+1 is complete here
    const uint64_t out = mod(c.rank - s), got = mod(c.rank - s - 1);
    if (threadIdx.x == 0) {
      step(s, dev::put_signal(c, right, w, kIn + out * cb, w, kData + out * cb, cb, w, kSigRs, dev::SigOp::Add, 1));
      if (!failed) step(s, dev::wait_signal(c, w, kSigRs, dev::Cmp::Ge, uint64_t(s) + 1, left));
    }
    __syncthreads();
    if (failed) return;
    for (uint64_t i = threadIdx.x; i < chunk; i += blockDim.x) data[got * chunk + i] += in[got * chunk + i];
    __syncthreads();  // the next put reads the chunk just reduced
  }
  for (int s = 0; s < n - 1; ++s) {  // all-gather: pass each complete chunk on
    const uint64_t out = mod(c.rank + 1 - s);
    if (threadIdx.x == 0) {
      const int at = n - 1 + s;
      step(at, dev::put_signal(c, right, w, kData + out * cb, w, kData + out * cb, cb, w, kSigAg, dev::SigOp::Add, 1));
      if (!failed) step(at, dev::wait_signal(c, w, kSigAg, dev::Cmp::Ge, uint64_t(s) + 1, left));
    }
    __syncthreads();
    if (failed) return;
  }
  if (threadIdx.x == 0) step(2 * n, dev::quiet(c));
}

std::string run(int r, Bootstrap& bs, const std::string& path) {
  if (!test::have_gpu()) return test::kNoGpu;
  Comm comm(bs, test::gpu_comm_config(path, std::chrono::milliseconds(30000)));
  if (std::string e = test::check_comm_path(comm, path); !e.empty()) return e;
  CommWindow& win = comm.alloc_symmetric(kBytes);
  std::vector<uint64_t> h(kCount);
  for (uint64_t i = 0; i < kCount; ++i) h[i] = initial(r, i);
  if (cudaMemcpy(win.local(), h.data(), kCount * 8, cudaMemcpyHostToDevice) != cudaSuccess) return "memcpy in";
  int* err = nullptr;
  if (cudaMalloc(&err, 8) != cudaSuccess || cudaMemset(err, 0, 8) != cudaSuccess) return "cudaMalloc";
  cudaFuncAttributes fa;  // load the module before the peers start waiting (see gpu_comm_test.cu)
  if (cudaFuncGetAttributes(&fa, k_ring) != cudaSuccess) return "cudaFuncGetAttributes";
  comm.barrier();
  k_ring<<<1, 256>>>(comm.device_handle(), win.handle(), err);
  int he[2] = {-1, -1};
  if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpy(he, err, 8, cudaMemcpyDeviceToHost) != cudaSuccess)
    return std::string("kernel failed: ") + cudaGetErrorString(cudaGetLastError());
  if (he[0] != 0)
    return "step " + std::to_string(he[0] - 1) + ": " + status_string(Status(he[1])) + " " + comm.device_error() +
           " | " + comm.report();
  comm.barrier();
  if (cudaMemcpy(h.data(), win.local(), kCount * 8, cudaMemcpyDeviceToHost) != cudaSuccess) return "memcpy out";
  for (uint64_t i = 0; i < kCount; ++i) {
    uint64_t want = 0;
    for (int q = 0; q < kRanks; ++q) want += initial(q, i);
    if (h[i] != want)
      return "value " + std::to_string(i) + " is " + std::to_string(h[i]) + ", expected " + std::to_string(want);
  }
  cudaFree(err);
  comm.barrier();
  return "";
}
}  // namespace

// KINET_COMM_TEST_ONLY=p2p|proxy|gdaki: that path alone (debugging).
int main() {
  const std::string note =
      " (" + std::to_string(kRanks) + " ranks, ring all-reduce of " + std::to_string(kCount) + " values)";
  return kinet::test::run_comm_paths(kRanks, {"p2p", "proxy", "gdaki"}, run, std::chrono::seconds(180), note);
}
