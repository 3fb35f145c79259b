#include "core/cuda_shim.hpp"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/dl_util.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

#if KINET_HAVE_CUDA_HEADERS
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>
#endif

namespace kinet::cuda {
namespace {
#if KINET_HAVE_CUDA_HEADERS
// Only calls that never synchronise the device (measured on an H200 while a
// kernel spun on another stream: cudaFree, cudaFreeHost and cudaHostUnregister
// each waited for the kernel; everything below returned at once).
struct Api {
  bool ok = false;
  int ngpu = 0;
  decltype(&::cudaGetDeviceCount) getDeviceCount = nullptr;
  decltype(&::cudaGetDevice) getDevice = nullptr;
  decltype(&::cudaSetDevice) setDevice = nullptr;
  decltype(&::cudaPointerGetAttributes) pointerGetAttributes = nullptr;
  decltype(&::cudaHostAlloc) hostAlloc = nullptr;
  decltype(&::cudaMalloc) malloc = nullptr;
  decltype(&::cudaGetErrorString) getErrorString = nullptr;
  decltype(&::cudaGetLastError) getLastError = nullptr;
  decltype(&::cudaMemcpyAsync) memcpyAsync = nullptr;
  decltype(&::cudaMemsetAsync) memsetAsync = nullptr;
  decltype(&::cudaStreamCreateWithFlags) streamCreateWithFlags = nullptr;
  decltype(&::cudaStreamQuery) streamQuery = nullptr;
  // Optional (mapping a NIC's doorbell page): null when missing.
  decltype(&::cudaHostRegister) hostRegister = nullptr;
  decltype(&::cudaHostGetDevicePointer) hostGetDevicePointer = nullptr;
  decltype(&::cudaHostUnregister) hostUnregister = nullptr;
  // The driver's dma-buf export (libcuda.so.1; CUDA 11.7+): null when missing.
  decltype(&::cuMemGetHandleForAddressRange) memGetHandleForAddressRange = nullptr;
  // The driver's module loading mode (CUDA 11.7+): null when missing.
  decltype(&::cuModuleGetLoadingMode) moduleGetLoadingMode = nullptr;
};

using dl::sym;

const Api& api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dl::open_cudart();
    if (!h) {
      KINET_LOG(Debug, "no CUDA runtime (libcudart) found: GPU memory unavailable");
      return;
    }
    bool ok = sym(h, "cudaGetDeviceCount", a.getDeviceCount) && sym(h, "cudaGetDevice", a.getDevice) &&
              sym(h, "cudaSetDevice", a.setDevice) && sym(h, "cudaPointerGetAttributes", a.pointerGetAttributes) &&
              sym(h, "cudaHostAlloc", a.hostAlloc) && sym(h, "cudaMalloc", a.malloc) &&
              sym(h, "cudaGetErrorString", a.getErrorString) && sym(h, "cudaGetLastError", a.getLastError) &&
              sym(h, "cudaMemcpyAsync", a.memcpyAsync) && sym(h, "cudaMemsetAsync", a.memsetAsync) &&
              sym(h, "cudaStreamCreateWithFlags", a.streamCreateWithFlags) && sym(h, "cudaStreamQuery", a.streamQuery);
    if (!ok) {
      KINET_LOG(Warn, "libcudart lacks an expected symbol: GPU memory unavailable");
      return;
    }
    if (!(sym(h, "cudaHostRegister", a.hostRegister) && sym(h, "cudaHostGetDevicePointer", a.hostGetDevicePointer) &&
          sym(h, "cudaHostUnregister", a.hostUnregister)))
      a.hostRegister = nullptr;
    if (void* drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL))
    {
      sym(drv, "cuMemGetHandleForAddressRange", a.memGetHandleForAddressRange);
      sym(drv, "cuModuleGetLoadingMode", a.moduleGetLoadingMode);
    }
    if (a.getDeviceCount(&a.ngpu) != cudaSuccess || a.ngpu <= 0) {
      a.getLastError();
      KINET_LOG(Debug, "CUDA runtime found but no GPU: GPU memory unavailable");
      return;
    }
    a.ok = true;
  });
  return a;
}

[[noreturn]] void fail(cudaError_t e, const std::string& what) {
  api().getLastError();  // a sticky-free error must not be blamed on the user's next call
  const ErrorCode c = e == cudaErrorMemoryAllocation ? ErrorCode::ResourceExhausted : ErrorCode::System;
  throw Error(c, what + " failed: " + api().getErrorString(e));
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(e, what);
}

// Makes `dev` current on this thread for a scope and restores the caller's.
class DeviceScope {
 public:
  explicit DeviceScope(int dev) {
    check(api().getDevice(&prev_), "cudaGetDevice");
    if (prev_ != dev) check(api().setDevice(dev), "cudaSetDevice");
  }
  ~DeviceScope() {
    int cur = -1;
    if (api().getDevice(&cur) == cudaSuccess && cur != prev_) api().setDevice(prev_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = 0;
};

// Blocks kept for reuse (see free_pinned), and idle streams per GPU. Never
// destroyed: a Device held in a global may free its rings during exit().
struct Pool {
  std::mutex mu;
  std::vector<std::vector<cudaStream_t>> idle_streams;           // [gpu]
  std::map<std::pair<int, size_t>, std::vector<void*>> free_blocks;  // (gpu or -1 for pinned, size class)
  std::unordered_map<void*, std::pair<int, size_t>> live;           // block -> (gpu or -1, size class)
};
Pool& pool() {
  static Pool* p = [] {
    auto* q = new Pool;
    q->idle_streams.resize(static_cast<size_t>(api().ngpu));
    return q;
  }();
  return *p;
}

// Blocks come in powers of two from 256 B, so a freed block fits the next
// request of its class and what is kept stays under twice the peak in use.
size_t size_class(size_t n) {
  if (n > (size_t(1) << 62)) throw Error(ErrorCode::ResourceExhausted, "allocation of " + std::to_string(n) + " bytes");
  size_t c = 256;
  while (c < n) c <<= 1;
  return c;
}

void* take_block(int dev, size_t cls) {
  Pool& p = pool();
  std::lock_guard<std::mutex> g(p.mu);
  auto it = p.free_blocks.find({dev, cls});
  if (it == p.free_blocks.end() || it->second.empty()) return nullptr;
  void* b = it->second.back();
  it->second.pop_back();
  p.live[b] = {dev, cls};
  return b;
}
void add_live(void* b, int dev, size_t cls) {
  Pool& p = pool();
  std::lock_guard<std::mutex> g(p.mu);
  p.live[b] = {dev, cls};
}
void give_back(void* b, bool want_gpu) {
  Pool& p = pool();
  std::lock_guard<std::mutex> g(p.mu);
  auto it = p.live.find(b);
  if (it == p.live.end() || (it->second.first >= 0) != want_gpu) {
    KINET_LOG(Error, "cuda shim: free of %p, which is not a live %s block of this library: ignored", b,
              want_gpu ? "GPU" : "pinned");
    return;
  }
  p.free_blocks[it->second].push_back(b);
  p.live.erase(it);
}

// A stream of the shim's own on one GPU, non-blocking (no ordering with the
// legacy default stream), held by one caller at a time.
class StreamLease {
 public:
  explicit StreamLease(int dev) : dev_(dev) {
    Pool& p = pool();
    {
      std::lock_guard<std::mutex> g(p.mu);
      auto& v = p.idle_streams[static_cast<size_t>(dev)];
      if (!v.empty()) {
        s_ = v.back();
        v.pop_back();
        return;
      }
    }
    check(api().streamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~StreamLease() {
    if (!s_) return;  // abandoned: work is still queued on it
    Pool& p = pool();
    std::lock_guard<std::mutex> g(p.mu);
    p.idle_streams[static_cast<size_t>(dev_)].push_back(s_);
  }
  StreamLease(const StreamLease&) = delete;
  StreamLease& operator=(const StreamLease&) = delete;
  cudaStream_t get() const { return s_; }

  // Waits, bounded by default_timeout_ms(), for the work queued so far. On
  // timeout the stream is abandoned (never reused: its work is still queued).
  // what(): the operation, for the error message (built only on failure).
  template <class What> void wait(const What& what) {
    uint64_t ms = default_timeout_ms();
    if (ms == 0 || ms > 86'400'000ull) ms = 86'400'000ull;  // saturate: never an instant or endless wait
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (uint32_t spins = 0;; ++spins) {
      const cudaError_t e = api().streamQuery(s_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) {
        s_ = nullptr;
        fail(e, what());
      }
      if (std::chrono::steady_clock::now() > deadline) {
        s_ = nullptr;
        throw Error(ErrorCode::System,
                    what() + " did not complete within " + std::to_string(ms) + " ms (KINET_TIMEOUT_MS): the GPU did not run it" +
                        (lazy_loading() ? " (CUDA lazy loading is on: a kernel launched for the first time while "
                                          "another kernel waits for kinet stalls kinet's copies; set "
                                          "CUDA_MODULE_LOADING=EAGER)"
                                        : ""));
      }
      if (spins > 256) std::this_thread::yield();
    }
  }

 private:
  int dev_;
  cudaStream_t s_ = nullptr;
};

// Where p lies: on GPU *dev (Device), in page-locked host memory (Pinned) or
// in pageable host memory (Pageable).
enum class Where { Device, Pinned, Pageable };
Where where(const void* p, int* dev) {
  cudaPointerAttributes at{};
  if (api().pointerGetAttributes(&at, p) != cudaSuccess) {
    api().getLastError();
    return Where::Pageable;
  }
  if (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged) {
    *dev = at.device;
    return Where::Device;
  }
  return at.type == cudaMemoryTypeHost ? Where::Pinned : Where::Pageable;
}

using text::hexp;
#endif
}  // namespace

bool available() {
#if KINET_HAVE_CUDA_HEADERS
  return api().ok;
#else
  return false;
#endif
}

bool lazy_loading() {
#if KINET_HAVE_CUDA_HEADERS
  if (!available() || !api().moduleGetLoadingMode) return false;
  CUmoduleLoadingMode m{};
  return api().moduleGetLoadingMode(&m) == CUDA_SUCCESS && m == CU_MODULE_LAZY_LOADING;
#else
  return false;
#endif
}

void warn_if_lazy_loading(const char* who) {
  if (!lazy_loading()) return;
  static std::once_flag once;
  std::call_once(once, [who] {
    // Info, not Warn: programs that load their kernels first are right.
    KINET_LOG(Info,
              "%s: CUDA lazy loading is on (CUDA_MODULE_LOADING unset or LAZY): a kernel's first launch while "
              "another kernel waits on kinet stalls kinet's GPU copies until that wait times out. Set "
              "CUDA_MODULE_LOADING=EAGER, or load each kernel first (cudaFuncGetAttributes)",
              who);
  });
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

namespace {
struct Stage {
  void* p = nullptr;
  ~Stage() { free_pinned(p); }
};
// One asynchronous copy on a stream of ours, then the bounded wait.
void copy_async(int dev, void* dst, const void* src, size_t n) {
  StreamLease s(dev);
  auto what = [&] {
    return "CUDA copy of " + std::to_string(n) + " bytes from " + hexp(src) + " to " + hexp(dst) + " on GPU " +
           std::to_string(dev);
  };
  const cudaError_t e = api().memcpyAsync(dst, src, n, cudaMemcpyDefault, s.get());
  if (e != cudaSuccess) fail(e, what());
  s.wait(what);
}
}  // namespace

uint8_t* staging() {
  static thread_local Stage stage;
  if (!stage.p) stage.p = alloc_pinned(kStagingBytes);
  return static_cast<uint8_t*>(stage.p);
}

void copy(void* dst, const void* src, size_t n) {
#if KINET_HAVE_CUDA_HEADERS
  if (n == 0) return;
  if (available()) {
    int dev = -1;
    // src first: a copy between two GPUs runs on the destination's, as before.
    const Where ws = where(src, &dev), wd = where(dst, &dev);
    if (dev >= 0) {
      DeviceScope ds(dev);
      if (wd != Where::Pageable && ws != Where::Pageable) return copy_async(dev, dst, src, n);
      // Pageable memory goes through pinned staging: CUDA copies it
      // synchronously inside the driver, where no bound of ours applies (two
      // processes on one GPU, both with kernels running, hung there).
      uint8_t* b = staging();
      for (size_t off = 0; off < n; off += kStagingBytes) {
        const size_t k = n - off < kStagingBytes ? n - off : kStagingBytes;
        uint8_t* d = static_cast<uint8_t*>(dst) + off;
        const uint8_t* sp = static_cast<const uint8_t*>(src) + off;
        if (ws == Where::Pageable) {
          std::memcpy(b, sp, k);
          copy_async(dev, d, b, k);
        } else {
          copy_async(dev, b, sp, k);
          std::memcpy(d, b, k);
        }
      }
      return;
    }
  }
#endif
  std::memcpy(dst, src, n);
}

void* alloc_pinned(size_t n) {
#if KINET_HAVE_CUDA_HEADERS
  if (available()) {
    const size_t cls = size_class(n);
    void* p = take_block(-1, cls);
    if (!p) {
      check(api().hostAlloc(&p, cls, cudaHostAllocMapped | cudaHostAllocPortable),
            ("cudaHostAlloc of " + std::to_string(cls) + " bytes").c_str());
      add_live(p, -1, cls);
    }
    std::memset(p, 0, n);
    return p;
  }
#endif
  // As size_class: rounding a size near SIZE_MAX up to pages wraps to 0,
  // and aligned_alloc(0) then "succeeds" for the memset below to crash in.
  if (n > (size_t(1) << 62)) throw Error(ErrorCode::ResourceExhausted, "allocation of " + std::to_string(n) + " bytes");
  void* p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096);
  if (!p) throw Error(ErrorCode::ResourceExhausted, "out of host memory allocating " + std::to_string(n) + " bytes");
  std::memset(p, 0, n);
  return p;
}

void free_pinned(void* p) {
  if (!p) return;
#if KINET_HAVE_CUDA_HEADERS
  if (available()) {
    give_back(p, false);
    return;
  }
#endif
  std::free(p);
}

void* alloc_device(size_t n) {
#if KINET_HAVE_CUDA_HEADERS
  if (available()) {
    int dev = 0;
    check(api().getDevice(&dev), "cudaGetDevice");
    const size_t cls = size_class(n);
    void* p = take_block(dev, cls);
    if (!p) {
      check(api().malloc(&p, cls), ("cudaMalloc of " + std::to_string(cls) + " bytes on GPU " + std::to_string(dev)).c_str());
      add_live(p, dev, cls);
    }
    // Zeroed on our stream: cudaMemset would queue behind the legacy stream's
    // kernels and clear the block after it is in use. On failure the block is
    // not reused (a late memset could still land in it).
    StreamLease s(dev);
    auto what = [&] { return "zeroing " + std::to_string(n) + " bytes of GPU memory on GPU " + std::to_string(dev); };
    const cudaError_t e = api().memsetAsync(p, 0, n, s.get());
    if (e != cudaSuccess) fail(e, what());
    s.wait(what);
    return p;
  }
#endif
  (void)n;
  throw Error(ErrorCode::NotSupported, "GPU memory requested but no GPU is present (no CUDA runtime or no device)");
}

void free_device(void* p) {
#if KINET_HAVE_CUDA_HEADERS
  if (p && available()) give_back(p, true);
#else
  (void)p;
#endif
}
void* map_io_memory(void* p, size_t n, std::string* why) {
#if KINET_HAVE_CUDA_HEADERS
  const Api& a = api();
  if (!a.ok) return *why = "no CUDA runtime with a GPU", nullptr;
  if (!a.hostRegister) return *why = "the CUDA runtime lacks cudaHostRegister", nullptr;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n + page - 1) & ~(page - 1);
  void* b = reinterpret_cast<void*>(base);
  if (cudaError_t e = a.hostRegister(b, end - base, cudaHostRegisterIoMemory | cudaHostRegisterMapped |
                                                        cudaHostRegisterPortable);
      e != cudaSuccess) {
    a.getLastError();
    return *why = std::string("cudaHostRegister(cudaHostRegisterIoMemory) of ") + hexp(b) + " failed: " +
                  a.getErrorString(e) + " (needs a GPU and driver that map PCIe I/O memory)",
           nullptr;
  }
  void* d = nullptr;
  if (cudaError_t e = a.hostGetDevicePointer(&d, b, 0); e != cudaSuccess) {
    a.getLastError();
    a.hostUnregister(b);
    return *why = std::string("cudaHostGetDevicePointer of ") + hexp(b) + " failed: " + a.getErrorString(e), nullptr;
  }
  return static_cast<uint8_t*>(d) + (reinterpret_cast<uintptr_t>(p) - base);
#else
  (void)p, (void)n;
  *why = "this libkinet was built without CUDA's headers";
  return nullptr;
#endif
}

void unmap_io_memory(void* p) {
#if KINET_HAVE_CUDA_HEADERS
  if (!p || !api().hostUnregister) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  if (cudaError_t e = api().hostUnregister(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~(page - 1)));
      e != cudaSuccess) {
    api().getLastError();
    KINET_LOG(Error, "cudaHostUnregister of %s failed: %s", hexp(p).c_str(), api().getErrorString(e));
  }
#else
  (void)p;
#endif
}

int dmabuf_fd(const void* p, size_t n, uint64_t* offset, std::string* why) {
#if KINET_HAVE_CUDA_HEADERS
  const Api& a = api();
  if (!a.ok) return *why = "no CUDA runtime with a GPU", -1;
  if (!a.memGetHandleForAddressRange)
    return *why = "libcuda.so.1 lacks cuMemGetHandleForAddressRange (CUDA 11.7 or newer exports GPU memory as dma-buf)",
           -1;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n + page - 1) & ~(page - 1);
  int fd = -1;
  if (CUresult r = a.memGetHandleForAddressRange(&fd, static_cast<CUdeviceptr>(base), end - base,
                                                 CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
      r != CUDA_SUCCESS)
    return *why = "cuMemGetHandleForAddressRange(DMA_BUF_FD) of " + hexp(p) + " failed (CUresult " +
                  std::to_string(static_cast<int>(r)) + "; needs the open GPU kernel module and a kernel with dma-buf)",
           -1;
  *offset = reinterpret_cast<uintptr_t>(p) - base;
  return fd;
#else
  (void)p, (void)n, (void)offset;
  *why = "this libkinet was built without CUDA's headers";
  return -1;
#endif
}

}  // namespace kinet::cuda
