// kinet — cooperative posting from kernels: a warp or a CTA posts one WQE per
// thread with ONE reservation, ONE in-order publish and ONE doorbell.
// Device-only (nvcc). Host threads use the per-thread verbs in qp.cuh.
#pragma once
#if !defined(__CUDACC__)
#error "kinet/device/coop.cuh is for CUDA code"
#endif
#include "kinet/device/qp.cuh"

namespace kinet::dev {

// Every active lane of the calling warp posts one WQE, built by
// make(idx, flags) (a prepare_* call for slot idx). Lanes get consecutive
// slots in lane order. The caller's kSignal goes on the last WQE, kFence on
// the first. All active lanes receive the same status and ticket (the end of
// the batch: [first WQE, 1 + last WQE); an error CQE of any lane's WQE is that
// fault's status for all of them). S is the sharing mode of the QP among
// warps: Exclusive when this warp alone posts to it (only the leader lane,
// the lowest active one, touches the counters).
// Exclusive: afterwards ONLY the leader lane may wait/test/poll_cq/quiet the
// QP (or post to it singly); the other lanes hold the same ticket but must
// not use it on the QP. Debug device builds trap when several lanes do.
// Must be called by all active lanes, with the same q and flags, and at most
// q.size()/2 lanes.
template <Sharing S, class Make>
__device__ Status warp_post(const QpHandle& q, uint32_t flags, Ticket* t, Make make);

// The whole CTA (every thread, as a barrier) posts one WQE per thread.
// blockDim.x*y*z <= q.size()/2. Uses 16 bytes of static shared memory.
// Exclusive: afterwards only thread 0 of the CTA may wait/test/poll the QP.
template <Sharing S, class Make>
__device__ Status cta_post(const QpHandle& q, uint32_t flags, Ticket* t, Make make);

// Convenience: one RDMA write / read / fetch-add per lane or thread, each
// with its own addresses. bytes <= q.max_msg (no splitting here) and q.max_msg
// in 1..mlx5::kMaxMsgBytes, else InvalidArgument for the whole group, nothing
// posted. The leader rule of warp_post / cta_post applies.
template <Sharing S>
__device__ Status warp_put(const QpHandle& q, const void* src, Lkey lkey, uint64_t raddr, Rkey rkey, uint32_t bytes,
                           uint32_t flags = 0, Ticket* t = nullptr);
template <Sharing S>
__device__ Status warp_get(const QpHandle& q, void* dst, Lkey lkey, uint64_t raddr, Rkey rkey, uint32_t bytes,
                           uint32_t flags = 0, Ticket* t = nullptr);
template <Sharing S>
__device__ Status warp_fetch_add(const QpHandle& q, uint64_t* result, Lkey lkey, uint64_t raddr, Rkey rkey,
                                 uint64_t add, uint32_t flags = 0, Ticket* t = nullptr);
template <Sharing S>
__device__ Status cta_put(const QpHandle& q, const void* src, Lkey lkey, uint64_t raddr, Rkey rkey, uint32_t bytes,
                          uint32_t flags = 0, Ticket* t = nullptr);
template <Sharing S>
__device__ Status cta_get(const QpHandle& q, void* dst, Lkey lkey, uint64_t raddr, Rkey rkey, uint32_t bytes,
                          uint32_t flags = 0, Ticket* t = nullptr);

// ---------------------------------------------------------------------------
namespace detail {
__device__ __forceinline__ uint32_t group_flags(uint32_t flags, uint32_t rank, uint32_t n) {
  uint32_t f = 0;
  if (rank == n - 1) f |= flags & kSignal;
  if (rank == 0) f |= flags & kFence;
  return f;
}
}  // namespace detail

template <Sharing S, class Make>
__device__ Status warp_post(const QpHandle& q, uint32_t flags, Ticket* t, Make make) {
  const unsigned mask = __activemask();
  const unsigned lane = threadIdx.x & 31u;  // callers use 1-D lane numbering within the warp
  const uint32_t rank = __popc(mask & ((1u << lane) - 1u));
  const uint32_t n = __popc(mask);
  const int leader = __ffs(mask) - 1;
  uint64_t first = 0;
  int st = 0;
  if (rank == 0) st = static_cast<int>(reserve<S>(q, n, &first));
  st = __shfl_sync(mask, st, leader);
  if (st != 0) return static_cast<Status>(st);
  first = __shfl_sync(mask, first, leader);
  make(first + rank, detail::group_flags(flags, rank, n));
  // Lanes' WQE stores are ordered before the leader's publish (bar.warp.sync
  // orders memory among its participants; publish's release is cumulative).
  __syncwarp(mask);
  if (rank == 0) {
    st = static_cast<int>(publish<S>(q, first, n));
    if (st == 0 && !(flags & kNoDoorbell)) st = static_cast<int>(ring_doorbell<S>(q, first + n));
  }
  st = __shfl_sync(mask, st, leader);
  if (t) *t = Ticket{first + n, first};
  return static_cast<Status>(st);
}

template <Sharing S, class Make>
__device__ Status cta_post(const QpHandle& q, uint32_t flags, Ticket* t, Make make) {
  __shared__ uint64_t s_first;
  __shared__ int s_status;
  const uint32_t n = blockDim.x * blockDim.y * blockDim.z;
  const uint32_t rank = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  if (rank == 0) s_status = static_cast<int>(reserve<S>(q, n, &s_first));
  __syncthreads();
  const int st0 = s_status;
  const uint64_t first = s_first;
  if (st0 == 0) make(first + rank, detail::group_flags(flags, rank, n));
  // All WQE stores of the CTA happen before thread 0's publish.
  __syncthreads();
  if (rank == 0 && st0 == 0) {
    int st = static_cast<int>(publish<S>(q, first, n));
    if (st == 0 && !(flags & kNoDoorbell)) st = static_cast<int>(ring_doorbell<S>(q, first + n));
    s_status = st;
  }
  __syncthreads();
  const int st = s_status;
  __syncthreads();  // s_status may be reused by the next call
  if (t && st0 == 0) *t = Ticket{first + n, first};
  return static_cast<Status>(st);
}

template <Sharing S>
__device__ Status warp_put(const QpHandle& q, const void* src, Lkey lkey, uint64_t raddr, Rkey rkey, uint32_t bytes,
                           uint32_t flags, Ticket* t) {
  if (__any_sync(__activemask(), bytes > q.max_msg || !detail::max_msg_ok(q))) return Status::InvalidArgument;
  return warp_post<S>(q, flags, t, [&](uint64_t idx, uint32_t f) {
    prepare_write<S>(q, idx, src, lkey, raddr, rkey, bytes, f);
  });
}
template <Sharing S>
__device__ Status warp_get(const QpHandle& q, void* dst, Lkey lkey, uint64_t raddr, Rkey rkey, uint32_t bytes,
                           uint32_t flags, Ticket* t) {
  if (__any_sync(__activemask(), bytes > q.max_msg || !detail::max_msg_ok(q))) return Status::InvalidArgument;
  return warp_post<S>(q, flags, t, [&](uint64_t idx, uint32_t f) {
    prepare_read<S>(q, idx, dst, lkey, raddr, rkey, bytes, f);
  });
}
template <Sharing S>
__device__ Status warp_fetch_add(const QpHandle& q, uint64_t* result, Lkey lkey, uint64_t raddr, Rkey rkey,
                                 uint64_t add, uint32_t flags, Ticket* t) {
  return warp_post<S>(q, flags, t, [&](uint64_t idx, uint32_t f) {
    prepare_fetch_add<S>(q, idx, result, lkey, raddr, rkey, add, f);
  });
}
template <Sharing S>
__device__ Status cta_put(const QpHandle& q, const void* src, Lkey lkey, uint64_t raddr, Rkey rkey, uint32_t bytes,
                          uint32_t flags, Ticket* t) {
  if (__syncthreads_or(bytes > q.max_msg || !detail::max_msg_ok(q))) return Status::InvalidArgument;
  return cta_post<S>(q, flags, t, [&](uint64_t idx, uint32_t f) {
    prepare_write<S>(q, idx, src, lkey, raddr, rkey, bytes, f);
  });
}
template <Sharing S>
__device__ Status cta_get(const QpHandle& q, void* dst, Lkey lkey, uint64_t raddr, Rkey rkey, uint32_t bytes,
                          uint32_t flags, Ticket* t) {
  if (__syncthreads_or(bytes > q.max_msg || !detail::max_msg_ok(q))) return Status::InvalidArgument;
  return cta_post<S>(q, flags, t, [&](uint64_t idx, uint32_t f) {
    prepare_read<S>(q, idx, dst, lkey, raddr, rkey, bytes, f);
  });
}

}  // namespace kinet::dev
