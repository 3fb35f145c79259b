// kinet-proxy-bench — kernels (see kernels.hpp).
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "kernels.hpp"

namespace kpb {
using namespace kinet;
using namespace kinet::dev;

namespace {
__global__ void k_bare(uint64_t* to_cpu, uint64_t* to_gpu, uint32_t iters, uint64_t timeout_ns, uint64_t* out) {
  const uint64_t t0 = now_ns();
  for (uint32_t i = 1; i <= iters; ++i) {
    store_release<Scope::System>(to_cpu, uint64_t{i});
    const uint64_t w0 = now_ns();
    while (load_acquire<Scope::System>(to_gpu) != i) {
      if (now_ns() - w0 > timeout_ns) {
        out[1] = i;  // the CPU never answered round trip i
        return;
      }
    }
  }
  out[0] = now_ns() - t0;
}

__global__ void k_proxy_rtt(ProxyHandle h, const void* src, Lkey lk, uint64_t raddr, Rkey rk, uint64_t sig_raddr,
                            const uint64_t* sig, uint32_t iters, uint64_t* out) {
  const uint64_t t0 = now_ns();
  const uint64_t base = load_acquire<Scope::System>(const_cast<uint64_t*>(sig));
  for (uint32_t i = 1; i <= iters; ++i) {
    const Status s = put_signal<Sharing::Exclusive>(h, src, lk, raddr, rk, 8, sig_raddr, rk, 1, nullptr, Lkey{0});
    if (s != Status::Ok) {
      out[1] = static_cast<uint64_t>(s);
      return;
    }
    const uint64_t w0 = now_ns();
    while (load_acquire<Scope::System>(const_cast<uint64_t*>(sig)) < base + i) {
      if (now_ns() - w0 > h.timeout_ns) {
        out[1] = static_cast<uint64_t>(Status::TimeoutCompletion);
        return;
      }
    }
  }
  out[0] = now_ns() - t0;
  out[1] = static_cast<uint64_t>(quiet<Sharing::Exclusive>(h));
}

__global__ void k_throughput(const ProxyHandle* hs, uint32_t nh, uint32_t per_thread, bool put_op, const uint8_t* src,
                             Lkey lk, uint64_t raddr, Rkey rk, int* bad) {
  const ProxyHandle h = hs[blockIdx.x % nh];
  const uint64_t g = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  Ticket t;
  Status s = Status::Ok;
  for (uint32_t i = 0; i < per_thread && s == Status::Ok; ++i)
    s = put_op ? put<Sharing::Gpu>(h, src, lk, raddr + 8 * g, rk, 8, 0, &t) : nop<Sharing::Gpu>(h, 0, &t);
  if (s == Status::Ok) s = wait<Sharing::Gpu>(h, t);
  if (s != Status::Ok) atomicAdd(bad, 1);
}

bool ok(cudaError_t e, const char* what, std::string* err) {
  if (e == cudaSuccess) return true;
  *err = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}
}  // namespace

std::string gpu_name() {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "unknown GPU";
  return p.name;
}

void* alloc_mapped(size_t bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) return nullptr;
  std::memset(p, 0, bytes);
  return p;
}
void free_mapped(void* p) { cudaFreeHost(p); }

double bare_round_trip_ns(uint32_t iters, std::string* err) {
  uint64_t* flags = nullptr;  // [0] to the CPU, [8] back to the GPU (own cache lines)
  uint64_t* out = nullptr;
  if (!ok(cudaHostAlloc(&flags, 128, cudaHostAllocMapped), "cudaHostAlloc", err)) return -1;
  if (!ok(cudaMallocHost(&out, 16), "cudaMallocHost", err)) return -1;
  flags[0] = flags[8] = 0;
  out[0] = out[1] = 0;
  std::atomic<bool> stop{false};
  std::thread cpu([&] {
    uint64_t seen = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t v = std::atomic_ref<uint64_t>(flags[0]).load(std::memory_order_acquire);
      if (v != seen) {
        seen = v;
        std::atomic_ref<uint64_t>(flags[8]).store(v, std::memory_order_release);
      }
    }
  });
  k_bare<<<1, 1>>>(flags, flags + 8, iters, 10'000'000'000ull, out);
  const cudaError_t e = cudaDeviceSynchronize();
  stop = true;
  cpu.join();
  double r = -1;
  if (ok(e, "bare kernel", err)) {
    if (out[1]) *err = "the CPU did not answer round trip " + std::to_string(out[1]) + " within 10 s";
    else r = static_cast<double>(out[0]) / iters;
  }
  cudaFreeHost(flags);
  cudaFreeHost(out);
  return r;
}

double proxy_round_trip_ns(const ProxyHandle& h, const void* src, Lkey lkey, uint64_t raddr, Rkey rkey,
                           uint64_t sig_raddr, const uint64_t* sig, uint32_t iters, std::string* err) {
  uint64_t* out = nullptr;
  if (!ok(cudaMallocHost(&out, 16), "cudaMallocHost", err)) return -1;
  out[0] = out[1] = 0;
  k_proxy_rtt<<<1, 1>>>(h, src, lkey, raddr, rkey, sig_raddr, sig, iters, out);
  double r = -1;
  if (ok(cudaDeviceSynchronize(), "proxy round-trip kernel", err)) {
    if (out[1]) *err = std::string("proxy round trip: ") + status_string(static_cast<Status>(out[1]));
    else r = static_cast<double>(out[0]) / iters;
  }
  cudaFreeHost(out);
  return r;
}

double proxy_throughput(const std::vector<ProxyHandle>& handles, uint32_t ctas, uint32_t threads,
                        uint32_t per_thread, bool put_op, const void* src, Lkey lkey, uint64_t raddr, Rkey rkey,
                        std::string* err) {
  ProxyHandle* dh = nullptr;
  int* bad = nullptr;
  if (!ok(cudaMalloc(&dh, handles.size() * sizeof(ProxyHandle)), "cudaMalloc", err)) return -1;
  if (!ok(cudaMalloc(&bad, sizeof(int)), "cudaMalloc", err)) return -1;
  cudaMemcpy(dh, handles.data(), handles.size() * sizeof(ProxyHandle), cudaMemcpyHostToDevice);
  cudaMemset(bad, 0, sizeof(int));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  k_throughput<<<ctas, threads>>>(dh, static_cast<uint32_t>(handles.size()), per_thread, put_op,
                                  static_cast<const uint8_t*>(src), lkey, raddr, rkey, bad);
  cudaEventRecord(b);
  double r = -1;
  if (ok(cudaEventSynchronize(b), "throughput kernel", err)) {
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    int h_bad = 0;
    cudaMemcpy(&h_bad, bad, sizeof(int), cudaMemcpyDeviceToHost);
    if (h_bad) *err = std::to_string(h_bad) + " posters failed";
    else r = double(ctas) * threads * per_thread / (ms * 1e-3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(dh);
  cudaFree(bad);
  return r;
}

}  // namespace kpb
