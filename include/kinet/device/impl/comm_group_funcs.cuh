// kinet — bodies of the communicator's group operations (kinet/device/comm.cuh):
// warp_put, cta_put, warp_put_signal, cta_put_signal, warp_signal, cta_signal
// (counted or not: CounterInc ctr). nvcc only.
#pragma once
#if defined(__CUDACC__)

namespace kinet::dev {

// ---------------------------------------------------------------------------
// Warp and CTA variants: the group moves ONE buffer together (every lane or
// thread calls with the same arguments; all get the same status). P2p and
// Self: the group copies 16 bytes per thread per step; Proxy: one thread
// posts one descriptor. Warp: all active lanes; CTA: every thread (a barrier).
namespace detail {
// The leader's checks of a direct group put (nothing moves when they fail).
template <Sharing S>
__device__ __forceinline__ Status comm_group_put_check(const CommHandle& c, int peer, const WindowHandle& dst,
                                                       uint64_t dst_off, const WindowHandle& src, uint64_t src_off,
                                                       uint64_t bytes, uint64_t ctr_index) {
  if (Status e = comm_check(c, peer, dst, dst_off, bytes, CommOp::Put); e != Status::Ok) return e;
  if (src.abi != kWindowHandleAbi || !in_window(src, src_off, bytes))
    return comm_fail(c, Status::InvalidArgument, peer, CommOp::Put, src.id, src_off);
  uint64_t* ctr = nullptr;
  if (ctr_index != kNoCounter) return comm_ctr_at(c, src, ctr_index, peer, CommOp::Put, &ctr);
  return Status::Ok;
}

template <Sharing S>
__device__ Status warp_put(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                           const WindowHandle& src, uint64_t src_off, uint64_t bytes, uint64_t ctr_index) {
  const unsigned mask = __activemask();
  unsigned lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  const uint32_t rank = __popc(mask & ((1u << lane) - 1u));
  const int leader = __ffs(mask) - 1;
  int st = 0;
  const bool direct = c.abi == kCommHandleAbi && peer >= 0 && peer < c.size && comm_direct(c.peers[peer].path);
  if (!direct || bytes == 0) {
    if (rank == 0) st = static_cast<int>(comm_put<S>(c, peer, dst, dst_off, src, src_off, bytes, ctr_index));
    return static_cast<Status>(__shfl_sync(mask, st, leader));
  }
  if (rank == 0) st = static_cast<int>(comm_group_put_check<S>(c, peer, dst, dst_off, src, src_off, bytes, ctr_index));
  st = __shfl_sync(mask, st, leader);
  if (st != 0) return static_cast<Status>(st);
  group_copy(dst.peers[peer].mapped + dst_off, src.local + src_off, bytes, rank, __popc(mask));
  __syncwarp(mask);  // every lane's reads of the source before the count
  if (rank == 0 && ctr_index != kNoCounter) comm_ctr_add(src.counters + 2 * uint64_t{ctr_index});
  return Status::Ok;
}

template <Sharing S>
__device__ Status cta_put(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                          const WindowHandle& src, uint64_t src_off, uint64_t bytes, uint64_t ctr_index) {
  __shared__ int s_status;
  const uint32_t n = blockDim.x * blockDim.y * blockDim.z;
  const uint32_t rank = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const bool in_comm = c.abi == kCommHandleAbi && peer >= 0 && peer < c.size;
  // Every thread loads the peer's path and the destination's mapping before
  // the barrier, independently: the two loads overlap each other and the
  // leader's checks (which then find them cached) instead of following them
  // (+0.01-0.02 of cudaMemcpy's rate at 16-32 MiB on an H200, where a put is
  // one wave of CTAs: docs/PERFORMANCE.md section 8). The mapping is read
  // only under the checks comm_check reads it under (handle word, peer in range).
  uint8_t* const mapped = in_comm && dst.abi == kWindowHandleAbi ? dst.peers[peer].mapped : nullptr;
  const bool direct = in_comm && comm_direct(c.peers[peer].path);
  if (rank == 0) {
    int st = 0;
    if (!direct || bytes == 0) st = static_cast<int>(comm_put<S>(c, peer, dst, dst_off, src, src_off, bytes, ctr_index));
    else st = static_cast<int>(comm_group_put_check<S>(c, peer, dst, dst_off, src, src_off, bytes, ctr_index));
    s_status = st;
  }
  __syncthreads();
  const int st = s_status;
  if (st == 0 && direct && bytes) group_copy(mapped + dst_off, src.local + src_off, bytes, rank, n);
  __syncthreads();  // the copy is done (before the count) and s_status may be reused
  if (rank == 0 && st == 0 && direct && bytes && ctr_index != kNoCounter)
    comm_ctr_add(src.counters + 2 * uint64_t{ctr_index});
  return static_cast<Status>(st);
}
}  // namespace detail

template <Sharing S>
__device__ Status warp_put(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                           const WindowHandle& src, uint64_t src_off, uint64_t bytes, CounterInc ctr) {
  return detail::warp_put<S>(c, peer, dst, dst_off, src, src_off, bytes, ctr.index);
}
template <Sharing S>
__device__ Status cta_put(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                          const WindowHandle& src, uint64_t src_off, uint64_t bytes, CounterInc ctr) {
  return detail::cta_put<S>(c, peer, dst, dst_off, src, src_off, bytes, ctr.index);
}

// warp_put_signal / cta_put_signal / warp_signal / cta_signal (comm.cuh).
namespace detail {

// Whether the group copies itself (peer's memory mapped here). Any other
// path goes through the thread variant in one thread.
__device__ __forceinline__ bool comm_group_direct(const CommHandle& c, int peer) {
  return c.abi == kCommHandleAbi && peer >= 0 && peer < c.size && comm_direct(c.peers[peer].path);
}

// comm_signal's checks for a direct peer, before anything moves.
__device__ __forceinline__ Status comm_group_check(const CommHandle& c, int peer, const WindowHandle& dst,
                                                   uint64_t dst_off, const WindowHandle& src, uint64_t src_off,
                                                   uint64_t bytes, const WindowHandle& sig, uint64_t sig_off, SigOp op,
                                                   CommOp what, uint64_t ctr_index) {
  if (Status e = comm_check(c, peer, sig, sig_off, 8, what); e != Status::Ok) return e;
  if ((sig_off & 7) != 0 || (op != SigOp::Add && op != SigOp::Set))
    return comm_fail(c, Status::InvalidArgument, peer, what, sig.id, sig_off);
  if (bytes != 0) {
    if (Status e = comm_check(c, peer, dst, dst_off, bytes, what); e != Status::Ok) return e;
    if (src.abi != kWindowHandleAbi || !in_window(src, src_off, bytes))
      return comm_fail(c, Status::InvalidArgument, peer, what, src.id, src_off);
  }
  uint64_t* ctr = nullptr;
  if (ctr_index != kNoCounter) return comm_ctr_at(c, src, ctr_index, peer, what, &ctr);
  return Status::Ok;
}

// One thread, after the group synchronised: the group's stores before the
// signal (the barrier orders them before this thread's release fence, which
// is cumulative).
// Then the count, if any: the group's reads of the source are done.
__device__ __forceinline__ void comm_group_apply_signal(const WindowHandle& sig, int peer, uint64_t sig_off, SigOp op,
                                                        uint64_t value, const WindowHandle& src, uint64_t ctr_index) {
  uint64_t* w = reinterpret_cast<uint64_t*>(sig.peers[peer].mapped + sig_off);
  fence_release<Scope::System>();
  if (op == SigOp::Add) fetch_add_relaxed<Scope::System>(w, value);
  else store_release<Scope::System>(w, value);
  if (ctr_index != kNoCounter) comm_ctr_add(src.counters + 2 * uint64_t{ctr_index});
}

template <Sharing S>
__device__ Status warp_comm_signal(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                                   const WindowHandle& src, uint64_t src_off, uint64_t bytes, const WindowHandle& sig,
                                   uint64_t sig_off, SigOp op, uint64_t value, CommOp what, uint64_t ctr_index) {
  const unsigned mask = __activemask();
  unsigned lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  const uint32_t rank = __popc(mask & ((1u << lane) - 1u));
  const int leader = __ffs(mask) - 1;
  const bool direct = comm_group_direct(c, peer);
  int st = 0;
  if (direct) {
    if (rank == 0)
      st = static_cast<int>(comm_group_check(c, peer, dst, dst_off, src, src_off, bytes, sig, sig_off, op, what, ctr_index));
    st = __shfl_sync(mask, st, leader);
    if (st != 0) return static_cast<Status>(st);
    if (bytes) group_copy(dst.peers[peer].mapped + dst_off, src.local + src_off, bytes, rank, __popc(mask));
  }
  __syncwarp(mask);  // every lane's data and earlier operations before the signal (or the descriptor)
  if (direct) {
    if (rank == 0) comm_group_apply_signal(sig, peer, sig_off, op, value, src, ctr_index);
    return Status::Ok;
  }
  if (rank == 0)
    st = static_cast<int>(
        comm_signal<S>(c, peer, dst, dst_off, src, src_off, bytes, sig, sig_off, op, value, what, ctr_index));
  return static_cast<Status>(__shfl_sync(mask, st, leader));
}

template <Sharing S>
__device__ Status cta_comm_signal(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                                  const WindowHandle& src, uint64_t src_off, uint64_t bytes, const WindowHandle& sig,
                                  uint64_t sig_off, SigOp op, uint64_t value, CommOp what, uint64_t ctr_index) {
  // Two words: a thread that left the previous call may write s_check while
  // others still read that call's s_done (and s_done is written only after
  // every thread passed this call's first barrier).
  __shared__ int s_check, s_done;
  const uint32_t n = blockDim.x * blockDim.y * blockDim.z;
  const uint32_t rank = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const bool direct = comm_group_direct(c, peer);
  if (rank == 0)
    s_check = direct ? static_cast<int>(
                           comm_group_check(c, peer, dst, dst_off, src, src_off, bytes, sig, sig_off, op, what, ctr_index))
                     : 0;
  __syncthreads();
  const int st = s_check;
  if (st == 0 && direct && bytes)
    group_copy(dst.peers[peer].mapped + dst_off, src.local + src_off, bytes, rank, n);
  __syncthreads();  // every thread's data and earlier operations before the signal (or the descriptor)
  if (st != 0) return static_cast<Status>(st);
  if (direct) {
    if (rank == 0) comm_group_apply_signal(sig, peer, sig_off, op, value, src, ctr_index);
    return Status::Ok;
  }
  if (rank == 0)
    s_done = static_cast<int>(
        comm_signal<S>(c, peer, dst, dst_off, src, src_off, bytes, sig, sig_off, op, value, what, ctr_index));
  __syncthreads();
  return static_cast<Status>(s_done);
}

}  // namespace detail

template <Sharing S>
__device__ Status warp_put_signal(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                                  const WindowHandle& src, uint64_t src_off, uint64_t bytes, const WindowHandle& sig,
                                  uint64_t sig_off, SigOp op, uint64_t value, CounterInc ctr) {
  return detail::warp_comm_signal<S>(c, peer, dst, dst_off, src, src_off, bytes, sig, sig_off, op, value,
                                     CommOp::PutSignal, ctr.index);
}

template <Sharing S>
__device__ Status cta_put_signal(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                                 const WindowHandle& src, uint64_t src_off, uint64_t bytes, const WindowHandle& sig,
                                 uint64_t sig_off, SigOp op, uint64_t value, CounterInc ctr) {
  return detail::cta_comm_signal<S>(c, peer, dst, dst_off, src, src_off, bytes, sig, sig_off, op, value,
                                    CommOp::PutSignal, ctr.index);
}

template <Sharing S>
__device__ Status warp_signal(const CommHandle& c, int peer, const WindowHandle& sig, uint64_t sig_off, SigOp op,
                              uint64_t value) {
  return detail::warp_comm_signal<S>(c, peer, sig, 0, sig, 0, 0, sig, sig_off, op, value, CommOp::Signal,
                                     kNoCounter);
}

template <Sharing S>
__device__ Status cta_signal(const CommHandle& c, int peer, const WindowHandle& sig, uint64_t sig_off, SigOp op,
                             uint64_t value) {
  return detail::cta_comm_signal<S>(c, peer, sig, 0, sig, 0, 0, sig, sig_off, op, value, CommOp::Signal,
                                    kNoCounter);
}

}  // namespace kinet::dev
#endif  // __CUDACC__
