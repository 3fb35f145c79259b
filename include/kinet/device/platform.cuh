// kinet — host/device vocabulary shared by every header that is compiled both
// by nvcc (kernels) and by a plain C++20 compiler (host threads, the emulator).
// One macro set, one atomic wrapper, one named helper per ordering need.
#pragma once
#include <cstdint>
#include <cstddef>
#include <thread>

#if defined(__CUDACC__)
#include <cuda/atomic>
#include <atomic>
#include <chrono>
#define KINET_HD __host__ __device__ __forceinline__
#define KINET_HOST_DEVICE __host__ __device__
#else
#include <atomic>
#include <chrono>
// Forced inlining only where the optimiser runs after it: at -O0 it buys
// nothing and multiplies code size, compile time and sanitizer
// instrumentation (a file of typed verb tests compiled 4x slower under ASan).
#if defined(__OPTIMIZE__)
#define KINET_HD inline __attribute__((always_inline))
#else
#define KINET_HD inline
#endif
#define KINET_HOST_DEVICE
#endif

#if defined(__CUDA_ARCH__)
#define KINET_ON_DEVICE 1
#else
#define KINET_ON_DEVICE 0
#endif

namespace kinet {

// Visibility scope of an atomic or a fence. On the host every scope is the
// whole process (std::atomic_ref); on the GPU it selects .cta/.gpu/.sys.
enum class Scope : uint8_t { Thread, Cta, Gpu, System };

namespace detail {

KINET_HD constexpr uint32_t bswap32_constexpr(uint32_t x) {
  return (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) | (x << 24);
}

KINET_HD uint32_t bswap32(uint32_t x) {
#if KINET_ON_DEVICE
  return __byte_perm(x, 0, 0x0123);  // one PRMT
#else
  return __builtin_bswap32(x);
#endif
}
KINET_HD uint16_t bswap16(uint16_t x) { return static_cast<uint16_t>((x >> 8) | (x << 8)); }
KINET_HD uint64_t bswap64(uint64_t x) {
  return (static_cast<uint64_t>(bswap32(static_cast<uint32_t>(x))) << 32) |
         bswap32(static_cast<uint32_t>(x >> 32));
}

#if defined(__CUDACC__)
template <Scope S> struct cuda_scope;
template <> struct cuda_scope<Scope::Thread> { static constexpr auto v = cuda::thread_scope_thread; };
template <> struct cuda_scope<Scope::Cta> { static constexpr auto v = cuda::thread_scope_block; };
template <> struct cuda_scope<Scope::Gpu> { static constexpr auto v = cuda::thread_scope_device; };
template <> struct cuda_scope<Scope::System> { static constexpr auto v = cuda::thread_scope_system; };
template <class T, Scope S> using atomic_ref_t = cuda::atomic_ref<T, cuda_scope<S>::v>;
namespace mo = cuda::std;
#else
template <class T, Scope S> using atomic_ref_t = std::atomic_ref<T>;
namespace mo = std;
#endif

}  // namespace detail

// ---- atomics over plain memory (libcu++ on the GPU, std::atomic_ref on the host) ----
template <Scope S, class T> KINET_HD T load_relaxed(T* p) {
  return detail::atomic_ref_t<T, S>(*p).load(detail::mo::memory_order_relaxed);
}
template <Scope S, class T> KINET_HD T load_acquire(T* p) {
  return detail::atomic_ref_t<T, S>(*p).load(detail::mo::memory_order_acquire);
}
template <Scope S, class T> KINET_HD void store_relaxed(T* p, T v) {
  detail::atomic_ref_t<T, S>(*p).store(v, detail::mo::memory_order_relaxed);
}
template <Scope S, class T> KINET_HD void store_release(T* p, T v) {
  detail::atomic_ref_t<T, S>(*p).store(v, detail::mo::memory_order_release);
}
template <Scope S, class T> KINET_HD T fetch_add_relaxed(T* p, T v) {
  return detail::atomic_ref_t<T, S>(*p).fetch_add(v, detail::mo::memory_order_relaxed);
}
template <Scope S, class T> KINET_HD bool cas_relaxed(T* p, T& expected, T desired) {
  return detail::atomic_ref_t<T, S>(*p).compare_exchange_strong(
      expected, desired, detail::mo::memory_order_relaxed, detail::mo::memory_order_relaxed);
}
template <Scope S, class T> KINET_HD bool try_lock(T* p) {
  T expected = 0;
  return detail::atomic_ref_t<T, S>(*p).compare_exchange_strong(
      expected, T(1), detail::mo::memory_order_acquire, detail::mo::memory_order_relaxed);
}
template <Scope S, class T> KINET_HD void unlock(T* p) { store_release<S>(p, T(0)); }
// Raises *p to v if smaller; returns the old value.
template <Scope S, class T> KINET_HD T fetch_max_relaxed(T* p, T v) {
  detail::atomic_ref_t<T, S> r(*p);
  T cur = r.load(detail::mo::memory_order_relaxed);
  while (cur < v && !r.compare_exchange_weak(cur, v, detail::mo::memory_order_relaxed,
                                             detail::mo::memory_order_relaxed)) {
  }
  return cur;
}

// Publishes a 16-byte header {a, b} (16-byte aligned) after every earlier
// store of this thread, for a reader at scope S that acquire-loads the first
// word (the proxy thread reading a descriptor, kinet/device/proxy.cuh). GPU:
// one `st.release.<scope>.v2.u64`, so a reader over PCIe usually sees both
// words at once; the reader still checks a valid bit in each word, because a
// 16-byte store is not promised to be single-copy atomic. Host: b relaxed,
// then a with release (a reader that acquired a sees b).
template <Scope S> KINET_HD void store_release_pair(uint64_t* p, uint64_t a, uint64_t b) {
#if KINET_ON_DEVICE && (__CUDA_ARCH__ >= 700)
  if constexpr (S == Scope::System)
    asm volatile("st.release.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
  else if constexpr (S == Scope::Gpu)
    asm volatile("st.release.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
  else {
    store_relaxed<S>(p + 1, b);
    store_release<S>(p, a);
  }
#else
  store_relaxed<S>(p + 1, b);
  store_release<S>(p, a);
#endif
}

// ---- fences ----
template <Scope S> KINET_HD void fence_release() {
#if KINET_ON_DEVICE
  if constexpr (S == Scope::Cta) asm volatile("fence.acq_rel.cta;" ::: "memory");
  else if constexpr (S == Scope::Gpu) asm volatile("fence.acq_rel.gpu;" ::: "memory");
  else if constexpr (S == Scope::System) asm volatile("fence.acq_rel.sys;" ::: "memory");
#else
  if constexpr (S != Scope::Thread) std::atomic_thread_fence(std::memory_order_release);
#endif
}
template <Scope S> KINET_HD void fence_acquire() {
#if KINET_ON_DEVICE
  fence_release<S>();  // fence.acq_rel covers both directions
#else
  if constexpr (S != Scope::Thread) std::atomic_thread_fence(std::memory_order_acquire);
#endif
}

// Release-only fence: this thread's earlier memory operations (and those it
// observed, cumulatively) are ordered before its later stores at scope S. No
// acquire half: on sm_90 with PTX ISA >= 8.6 it is `fence.release`, which does
// not invalidate the SM's L1 as `fence.acq_rel` does (its acquire half); older
// targets fall back to `fence.acq_rel`. Host builds: a release fence.
template <Scope S> KINET_HD void fence_release_only() {
#if KINET_ON_DEVICE && (__CUDA_ARCH__ >= 900) && \
    (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8))
  if constexpr (S == Scope::Cta) asm volatile("fence.release.cta;" ::: "memory");
  else if constexpr (S == Scope::Gpu) asm volatile("fence.release.gpu;" ::: "memory");
  else if constexpr (S == Scope::System) asm volatile("fence.release.sys;" ::: "memory");
#else
  fence_release<S>();
#endif
}

// ---- host threads ringing a real NIC: device-memory and write-combining barriers ----
// The orderings rdma-core's providers use around a doorbell (its
// util/udma_barrier.h names them udma_to_device_barrier and
// mmio_wc_start / mmio_flush_writes); one helper per need. They order stores
// as a DMA device or the PCIe fabric observes them, which C++ atomics do not
// promise; the atomics around them remain for the threads (and the software
// NIC) that observe the same memory. Device code never calls them.

// Memory stores before it (WQEs, the doorbell record) are visible to the
// device's DMA reads before any store after it (an MMIO doorbell) reaches the
// device. x86-64: stores to write-back memory are already ordered (compiler
// barrier only); aarch64: `dmb oshst` (outer shareable: the device's domain).
inline void host_dma_barrier() {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("" ::: "memory");
#elif defined(__aarch64__)
  asm volatile("dmb oshst" ::: "memory");
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}
// Write-combining boundary, used before a store to a WC-mapped doorbell or
// BlueFlame window (nothing earlier, including other MMIO, is combined with or
// overtaken by it) and after it (the WC buffer is flushed towards the device
// now: no waiting for eviction, no combining with the next ring). x86-64:
// `sfence`; aarch64: `dsb st`.
inline void host_wc_barrier() {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("sfence" ::: "memory");
#elif defined(__aarch64__)
  asm volatile("dsb st" ::: "memory");
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// ---- time, for bounded waits ----
KINET_HD uint64_t now_ns() {
#if KINET_ON_DEVICE
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
#endif
}

// Back-off inside spin loops. On the host, waiting threads give the CPU
// away: the software NIC's engine may need it to make the awaited progress.
KINET_HD void spin_pause() {
#if KINET_ON_DEVICE
  __nanosleep(32);
#else
  std::this_thread::yield();
#endif
}

}  // namespace kinet
