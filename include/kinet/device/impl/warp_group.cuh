// kinet — warp aggregation for the shared-QP verbs (Sharing::Cta/Gpu) in
// device code: the lanes of one warp that call reserve/publish/ring_doorbell
// on the same QP at the same time act as one caller (one reservation atomic,
// one in-order publish, one doorbell attempt) instead of serialising on the
// QP's counters. Included by qp_funcs.cuh; device code on sm_80+ only
// (__reduce_*_sync); elsewhere KINET_WARP_AGGREGATE is 0 and every lane goes
// alone, as host threads do.
#pragma once
#include <cstdint>

namespace kinet::dev::detail {

#if KINET_ON_DEVICE && (__CUDA_ARCH__ >= 800)
#define KINET_WARP_AGGREGATE 1

__device__ __forceinline__ unsigned lanemask_lt() {
  unsigned m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

// The active lanes of this warp that use the same SqState right now (this
// lane included). Every lane of the result executes the caller's next
// group step with the same mask.
__device__ __forceinline__ unsigned same_qp_lanes(const SqState* s) {
  return __match_any_sync(__activemask(), reinterpret_cast<unsigned long long>(s));
}

// Lanes of g reserving n each with one fetch_add of the sum on *reserved:
// slots follow lane order. Lanes with a different n form their own group.
template <Scope Sc> __device__ __forceinline__ uint64_t group_fetch_add(uint64_t* reserved, unsigned g, uint32_t n) {
  const unsigned same_n = __match_any_sync(g, n);
  const unsigned leader = __ffs(same_n) - 1;
  const uint32_t rank = __popc(same_n & lanemask_lt());
  uint64_t base = 0;
  if (rank == 0) base = fetch_add_relaxed<Sc>(reserved, uint64_t{n} * __popc(same_n));
  base = __shfl_sync(same_n, base, leader);
  return base + uint64_t{rank} * n;
}

// Whether the lanes' ranges [first, first + n) of g tile one range without a
// gap: then *lo = its first index and *len = its length (identical in every
// lane). Ranges from reservations never overlap, so total length == span
// means contiguous. Offsets are taken relative to the lowest lane's first in
// 32 bits; ranges farther apart go alone (false).
__device__ __forceinline__ bool group_span(unsigned g, uint64_t first, uint32_t n, uint64_t* lo, uint32_t* len) {
  const uint64_t f0 = __shfl_sync(g, first, __ffs(g) - 1);
  const int64_t d = static_cast<int64_t>(first - f0);
  const bool fits = d > -(int64_t{1} << 30) && d < (int64_t{1} << 30) && n < (1u << 30);
  if (!__all_sync(g, fits)) return false;
  const int a = __reduce_min_sync(g, static_cast<int>(d));
  const int b = __reduce_max_sync(g, static_cast<int>(d + n));
  const unsigned total = __reduce_add_sync(g, n);
  if (static_cast<int64_t>(b) - a != static_cast<int64_t>(total)) return false;
  *lo = f0 + static_cast<uint64_t>(static_cast<int64_t>(a));
  *len = total;
  return true;
}

// The largest of the lanes' `upto` in g, when they lie within 2^30 of each
// other (else false: each lane rings for itself).
__device__ __forceinline__ bool group_max(unsigned g, uint64_t upto, uint64_t* hi) {
  const uint64_t u0 = __shfl_sync(g, upto, __ffs(g) - 1);
  const int64_t d = static_cast<int64_t>(upto - u0);
  if (!__all_sync(g, d > -(int64_t{1} << 30) && d < (int64_t{1} << 30))) return false;
  *hi = u0 + static_cast<uint64_t>(static_cast<int64_t>(__reduce_max_sync(g, static_cast<int>(d))));
  return true;
}
// The lowest `first` and the highest `end` of the lanes' ranges [first, end)
// in g (identical in every lane), when they lie within 2^30 of each other
// (else false: each lane goes alone).
__device__ __forceinline__ bool group_range(unsigned g, uint64_t first, uint64_t end, uint64_t* lo, uint64_t* hi) {
  const uint64_t f0 = __shfl_sync(g, first, __ffs(g) - 1);
  const int64_t a = static_cast<int64_t>(first - f0);
  const int64_t b = static_cast<int64_t>(end - f0);
  constexpr int64_t kLim = int64_t{1} << 30;
  if (!__all_sync(g, a > -kLim && a < kLim && b > -kLim && b < kLim)) return false;
  *lo = f0 + static_cast<uint64_t>(static_cast<int64_t>(__reduce_min_sync(g, static_cast<int>(a))));
  *hi = f0 + static_cast<uint64_t>(static_cast<int64_t>(__reduce_max_sync(g, static_cast<int>(b))));
  return true;
}
#else
#define KINET_WARP_AGGREGATE 0
#endif

}  // namespace kinet::dev::detail
