#include "core/cuda_shim.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "core/log.hpp"

#if KINET_HAVE_CUDA_HEADERS
#include <cuda_runtime_api.h>
#endif

namespace kinet::cuda {
namespace {
#if KINET_HAVE_CUDA_HEADERS
struct Api {
  bool ok = false;
  decltype(&::cudaGetDeviceCount) getDeviceCount = nullptr;
  decltype(&::cudaPointerGetAttributes) pointerGetAttributes = nullptr;
  decltype(&::cudaMemcpy) memcpy = nullptr;
  decltype(&::cudaMemset) memset = nullptr;
  decltype(&::cudaHostAlloc) hostAlloc = nullptr;
  decltype(&::cudaFreeHost) freeHost = nullptr;
  decltype(&::cudaMalloc) malloc = nullptr;
  decltype(&::cudaFree) free = nullptr;
  decltype(&::cudaGetErrorString) getErrorString = nullptr;
  decltype(&::cudaGetLastError) getLastError = nullptr;
  decltype(&::cudaMemcpyAsync) memcpyAsync = nullptr;
  decltype(&::cudaStreamCreateWithFlags) streamCreateWithFlags = nullptr;
  decltype(&::cudaStreamSynchronize) streamSynchronize = nullptr;
};

template <class F> bool sym(void* h, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(h, name));
  return f != nullptr;
}

const Api& api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = nullptr;
    for (const char* n : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}) {
      if ((h = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
    }
    if (!h) {
      KINET_LOG(Debug, "no CUDA runtime (libcudart) found: GPU memory unavailable");
      return;
    }
    bool ok = sym(h, "cudaGetDeviceCount", a.getDeviceCount) && sym(h, "cudaPointerGetAttributes", a.pointerGetAttributes) &&
              sym(h, "cudaMemcpy", a.memcpy) && sym(h, "cudaMemset", a.memset) && sym(h, "cudaHostAlloc", a.hostAlloc) &&
              sym(h, "cudaFreeHost", a.freeHost) && sym(h, "cudaMalloc", a.malloc) && sym(h, "cudaFree", a.free) &&
              sym(h, "cudaGetErrorString", a.getErrorString) && sym(h, "cudaGetLastError", a.getLastError) &&
              sym(h, "cudaMemcpyAsync", a.memcpyAsync) && sym(h, "cudaStreamCreateWithFlags", a.streamCreateWithFlags) &&
              sym(h, "cudaStreamSynchronize", a.streamSynchronize);
    if (!ok) {
      KINET_LOG(Warn, "libcudart lacks an expected symbol: GPU memory unavailable");
      return;
    }
    int n = 0;
    if (a.getDeviceCount(&n) != cudaSuccess || n <= 0) {
      a.getLastError();
      KINET_LOG(Debug, "CUDA runtime found but no GPU: GPU memory unavailable");
      return;
    }
    a.ok = true;
  });
  return a;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(ErrorCode::System, std::string(what) + " failed: " + api().getErrorString(e));
}
#endif
}  // namespace

bool available() {
#if KINET_HAVE_CUDA_HEADERS
  return api().ok;
#else
  return false;
#endif
}

MemoryKind pointer_kind(const void* p) {
#if KINET_HAVE_CUDA_HEADERS
  if (!available()) return MemoryKind::Host;
  cudaPointerAttributes at{};
  if (api().pointerGetAttributes(&at, p) != cudaSuccess) {
    api().getLastError();
    return MemoryKind::Host;
  }
  return at.type == cudaMemoryTypeDevice ? MemoryKind::Gpu : MemoryKind::Host;
#else
  (void)p;
  return MemoryKind::Host;
#endif
}

void copy(void* dst, const void* src, size_t n) {
#if KINET_HAVE_CUDA_HEADERS
  if (available()) {
    // A non-blocking stream of this thread's own: the engine's copies must not
    // wait for kernels on the legacy default stream (they may be the very
    // kernels waiting for this copy's completion).
    thread_local cudaStream_t stream = [] {
      cudaStream_t s = nullptr;
      check(api().streamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      return s;
    }();
    check(api().memcpyAsync(dst, src, n, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
    check(api().streamSynchronize(stream), "cudaStreamSynchronize");
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

void* alloc_pinned(size_t n) {
#if KINET_HAVE_CUDA_HEADERS
  if (available()) {
    void* p = nullptr;
    check(api().hostAlloc(&p, n, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
    std::memset(p, 0, n);
    return p;
  }
#endif
  void* p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096);
  if (!p) throw Error(ErrorCode::ResourceExhausted, "out of host memory allocating " + std::to_string(n) + " bytes");
  std::memset(p, 0, n);
  return p;
}

void free_pinned(void* p) {
  if (!p) return;
#if KINET_HAVE_CUDA_HEADERS
  if (available()) {
    api().freeHost(p);
    return;
  }
#endif
  std::free(p);
}

void* alloc_device(size_t n) {
#if KINET_HAVE_CUDA_HEADERS
  if (available()) {
    void* p = nullptr;
    check(api().malloc(&p, n), "cudaMalloc");
    check(api().memset(p, 0, n), "cudaMemset");
    return p;
  }
#endif
  (void)n;
  throw Error(ErrorCode::NotSupported, "GPU memory requested but no GPU is present (no CUDA runtime or no device)");
}

void free_device(void* p) {
#if KINET_HAVE_CUDA_HEADERS
  if (p && available()) api().free(p);
#else
  (void)p;
#endif
}
}  // namespace kinet::cuda
