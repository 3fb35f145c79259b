// kinet-post-rate — the posting kernels that go through kinet's device verbs
// (kinet/device/qp.cuh, coop.cuh). Each unit (thread, warp or CTA) posts
// p.per_unit RDMA-write WQEs and ends with quiet() on its QP(s).
//   k_thread<S>   every thread reserves, prepares, publishes and, when its
//                 ring index closes a group of db_batch, rings (thread-excl,
//                 thread-cta, thread-gpu rows); k_thread_cursor the same
//                 steps on an SqCursor (thread-cursor rows).
//   k_warp<S,lib> 32 WQEs per batch: lane 0 reserves, every lane prepares,
//                 lane 0 publishes and rings (warp-coop; lib: dev::warp_put).
//   k_cta<lib>    blockDim WQEs per batch, thread 0 reserves/publishes/rings
//                 (cta-coop; lib: dev::cta_put).
// Deadlock rules: in the cooperative kernels only lane 0 / thread 0 spins;
// in the per-thread shared modes lanes of one warp wait for each other in
// publish(), which relies on independent thread scheduling (sm_70+) and is
// bounded by the QP's timeout (a reported timeout, never a hang).
#pragma once
#include "common.hpp"
#include "kinet/device/coop.cuh"

namespace kinet::bench {

namespace mlx5 = kinet::mlx5;
using kinet::Status;
using kinet::detail::bswap32;

template <Sharing S>
__device__ __forceinline__ void prep(const kd::QpHandle& q, uint64_t idx) {
  const uint64_t off = (idx & 0xfffu) << 6;
  kd::prepare_write<S>(q, idx, reinterpret_cast<const void*>(kLaddr + off), kinet::Lkey{kLkeyBe}, kRaddr + off,
                       kinet::Rkey{kRkeyBe}, kBytes, 0u);
}

__device__ __forceinline__ void note_err(const PostParams& p, uint32_t& nerr, Status st, int where) {
  ++nerr;
  atomicCAS(p.first_err, 0, (where << 16) | static_cast<int>(st));
}

// Per-thread posting: every thread reserves, prepares, publishes and (every
// db_batch ring indices) rings on its own.
template <Sharing S, bool kInject = false>
__global__ void __launch_bounds__(1024, 1) k_thread(PostParams p) {
  const uint32_t tid = threadIdx.x;
  const uint32_t gtid = blockIdx.x * blockDim.x + tid;
  uint32_t qi;
  if (p.map == kMapThread) qi = gtid;
  else if (p.map == kMapCta) qi = blockIdx.x % p.nqp;
  else qi = (gtid >> 5) % p.nqp;
  const kd::QpHandle q = p.qps[qi];
  uint32_t nerr = 0;
  unsigned long long posted = 0;
  const uint32_t B = p.db_batch;
  for (uint32_t k = 0; k < p.per_unit; ++k) {
    uint64_t i = 0;
    Status st = kd::reserve<S>(q, 1, &i);
    if (st != Status::Ok) {
      note_err(p, nerr, st, kWhereReserve);
      break;
    }
    prep<S>(q, i);
    if constexpr (kInject) {
      if (qi == 0 && i == p.inject_idx) {  // turn the RDMA write into a SEND: the stand-in NIC must reject it
        uint32_t* w0 = reinterpret_cast<uint32_t*>(q.sq + static_cast<size_t>(i & (q.size() - 1u)) * 64u);
        *w0 = bswap32((bswap32(*w0) & ~0xffu) | mlx5::kOpSend);
      }
    }
    st = kd::publish<S>(q, i, 1);
    if (st != Status::Ok) {
      note_err(p, nerr, st, kWherePublish);
      break;
    }
    ++posted;
    // Shared QPs: the ring decision is warp-uniform (every lane calls
    // ring_doorbell when any lane's index closes a batch; the lanes ring as
    // one, up to the highest index, so still one doorbell per B ring indices),
    // as a caller should write it for the verbs' warp aggregation (qp.cuh).
    bool ring = B <= 1 || ((i + 1) & (B - 1)) == 0;
    if constexpr (S != Sharing::Exclusive) ring = __any_sync(__activemask(), ring);
    if (ring) st = kd::ring_doorbell<S>(q, i + 1);
    if (st != Status::Ok) {
      note_err(p, nerr, st, kWhereRing);
      break;
    }
  }
  // quiet(): once per QP owner (thread), per CTA (thread-cta) or per warp (thread-gpu).
  bool do_quiet;
  if (p.map == kMapThread) {
    do_quiet = true;
  } else if (p.map == kMapCta) {
    __syncthreads();
    do_quiet = tid == 0;
  } else {
    __syncwarp();
    do_quiet = (tid & 31u) == 0;
  }
  if (do_quiet) {
    const Status st = kd::quiet<S>(q);
    if (st != Status::Ok) note_err(p, nerr, st, kWhereQuiet);
  }
  if (posted) atomicAdd(p.posted, posted);
  p.err_count[gtid] += nerr;
}

// thread-loop rows: every thread owns QP gtid and posts its per_unit WQEs
// with one dev::post_loop call (doorbell at ring indices multiple of
// db_batch, and after the last), then quiet().
__global__ void __launch_bounds__(1024, 1) k_thread_loop(PostParams p) {
  const uint32_t gtid = blockIdx.x * blockDim.x + threadIdx.x;
  const kd::QpHandle q = p.qps[gtid];
  uint32_t nerr = 0;
  kd::Ticket t;
  Status st = kd::post_loop(q, p.per_unit, p.db_batch <= 1 ? 1u : p.db_batch, 0u, &t,
                            [&](uint64_t idx, uint32_t) { prep<Sharing::Exclusive>(q, idx); });
  if (st != Status::Ok) note_err(p, nerr, st, kWherePost);
  st = kd::quiet<Sharing::Exclusive>(q);
  if (st != Status::Ok) note_err(p, nerr, st, kWhereQuiet);
  const unsigned long long posted = t.idx - t.first;
  if (posted) atomicAdd(p.posted, posted);
  p.err_count[gtid] += nerr;
}

// thread-cursor rows: k_thread's per-step calls (reserve, prepare, publish,
// ring every db_batch ring indices) on an SqCursor held in registers:
// every thread owns QP gtid.
__global__ void __launch_bounds__(1024, 1) k_thread_cursor(PostParams p) {
  const uint32_t gtid = blockIdx.x * blockDim.x + threadIdx.x;
  const kd::QpHandle q = p.qps[gtid];
  uint32_t nerr = 0;
  unsigned long long posted = 0;
  const uint32_t B = p.db_batch;
  kd::SqCursor c;
  Status st = kd::open_cursor(q, &c);
  if (st != Status::Ok) note_err(p, nerr, st, kWhereReserve);
  for (uint32_t k = 0; k < p.per_unit && st == Status::Ok; ++k) {
    uint64_t i = 0;
    st = kd::reserve(q, c, 1, &i);
    if (st != Status::Ok) {
      note_err(p, nerr, st, kWhereReserve);
      break;
    }
    prep<Sharing::Exclusive>(q, i);
    kd::publish(q, c, i, 1);
    ++posted;
    if (B <= 1 || ((i + 1) & (B - 1)) == 0) kd::ring_doorbell(q, c, i + 1);
  }
  kd::close_cursor(q, c);
  st = kd::quiet<Sharing::Exclusive>(q);  // rings the tail, then waits
  if (st != Status::Ok) note_err(p, nerr, st, kWhereQuiet);
  if (posted) atomicAdd(p.posted, posted);
  p.err_count[gtid] += nerr;
}

// Warp-cooperative posting, 32 WQEs per batch. Exclusive: warp w owns QPs
// w, w + nw, w + 2nw, ... and alternates batches among them. Shared (Cta/Gpu):
// warps_per_qp consecutive warps share QP w / warps_per_qp. kLib: through
// dev::warp_put instead of the spelled-out steps.
template <Sharing S, bool kLib>
__global__ void __launch_bounds__(1024, 1) k_warp(PostParams p) {
  const uint32_t lane = threadIdx.x & 31u;
  const uint32_t wpc = blockDim.x >> 5;
  const uint32_t gw = blockIdx.x * wpc + (threadIdx.x >> 5);
  const uint32_t nw = gridDim.x * wpc;
  uint32_t q0, stride, m;
  if constexpr (S == Sharing::Exclusive) {
    q0 = gw;
    stride = nw;
    m = gw < p.nqp ? (p.nqp - gw + nw - 1) / nw : 0;  // host guarantees nw <= nqp
  } else {
    q0 = gw / p.warps_per_qp;
    stride = 0;
    m = q0 < p.nqp ? 1 : 0;
  }
  uint32_t nerr = 0;
  unsigned long long posted = 0;
  const uint32_t nb = m ? p.per_unit / 32u : 0;
  kd::QpHandle q = p.qps[q0 < p.nqp ? q0 : 0];
  for (uint32_t b = 0; b < nb; ++b) {
    if (m > 1) q = p.qps[q0 + (b % m) * stride];
    if constexpr (kLib) {
      // Each lane its own addresses, as a real caller would.
      const uint64_t off = static_cast<uint64_t>((b * 32u + lane) & 0xfffu) << 6;
      const Status st = kd::warp_put<S>(q, reinterpret_cast<const void*>(kLaddr + off), kinet::Lkey{kLkeyBe},
                                        kRaddr + off, kinet::Rkey{kRkeyBe}, kBytes, 0u, nullptr);
      if (st != Status::Ok) {  // uniform: warp_put hands every lane the same status
        if (lane == 0) note_err(p, nerr, st, kWherePost);
        break;
      }
    } else {
      uint64_t first = 0;
      int st = 0;
      if (lane == 0) {
        st = static_cast<int>(kd::reserve<S>(q, 32u, &first));
        if (st != 0) note_err(p, nerr, static_cast<Status>(st), kWhereReserve);
      }
      st = __shfl_sync(kFull, st, 0);
      if (st != 0) break;  // warp-uniform
      first = __shfl_sync(kFull, first, 0);
      // Only lane 0 touches the QP's counters: prepare_write<S> writes the WQE
      // (and, for the one lane per batch whose WQE closes a signal period,
      // raises state->signaled; lane 0 reads it after the __syncwarp).
      prep<S>(q, first + lane);
      // The lanes' WQE stores are ordered before lane 0's publish and doorbell
      // fence (bar.warp.sync orders memory among its participants).
      __syncwarp();
      if (lane == 0) {
        Status s2 = kd::publish<S>(q, first, 32u);
        if (s2 != Status::Ok) {
          note_err(p, nerr, s2, kWherePublish);
        } else {
          s2 = kd::ring_doorbell<S>(q, first + 32u);
          if (s2 != Status::Ok) note_err(p, nerr, s2, kWhereRing);
        }
        st = static_cast<int>(s2);
      }
      st = __shfl_sync(kFull, st, 0);
      if (st != 0) break;
    }
    posted += 32u;
  }
  __syncwarp();
  if (lane == 0) {
    for (uint32_t j = 0; j < m; ++j) {
      if (m > 1) q = p.qps[q0 + j * stride];
      const Status st = kd::quiet<S>(q);
      if (st != Status::Ok) note_err(p, nerr, st, kWhereQuiet);
    }
    if (posted) atomicAdd(p.posted, posted);
  }
  p.err_count[blockIdx.x * blockDim.x + threadIdx.x] += nerr;
}

// CTA-cooperative posting: one QP per CTA, blockDim WQEs per batch.
// Thread 0 alone touches the counters (Exclusive); every thread writes its
// WQE with prepare_write<Cta>, whose only difference from <Exclusive> is that
// raising state->signaled is an atomic max: several threads of a batch may
// close a signal period at once. kLib: through dev::cta_put<Exclusive>.
template <bool kLib>
__global__ void __launch_bounds__(1024, 1) k_cta(PostParams p) {
  __shared__ unsigned long long s_first;
  __shared__ int s_res;  // reserve status of this batch
  __shared__ int s_pub;  // publish/ring status of this batch (separate: no reuse race)
  const uint32_t tid = threadIdx.x;
  const uint32_t n = blockDim.x;
  const kd::QpHandle q = p.qps[blockIdx.x % p.nqp];
  uint32_t nerr = 0;
  unsigned long long posted = 0;
  const uint32_t nb = p.per_unit / n;
  for (uint32_t b = 0; b < nb; ++b) {
    if constexpr (kLib) {
      const uint64_t off = static_cast<uint64_t>((b * n + tid) & 0xfffu) << 6;
      const Status st = kd::cta_put<Sharing::Exclusive>(q, reinterpret_cast<const void*>(kLaddr + off),
                                                        kinet::Lkey{kLkeyBe}, kRaddr + off, kinet::Rkey{kRkeyBe},
                                                        kBytes, 0u, nullptr);
      if (st != Status::Ok) {  // uniform across the CTA
        if (tid == 0) note_err(p, nerr, st, kWherePost);
        break;
      }
    } else {
      if (tid == 0) {
        uint64_t first = 0;
        const Status st = kd::reserve<Sharing::Exclusive>(q, n, &first);
        if (st != Status::Ok) note_err(p, nerr, st, kWhereReserve);
        s_first = first;
        s_res = static_cast<int>(st);
      }
      __syncthreads();
      if (s_res != 0) break;  // CTA-uniform
      const uint64_t first = s_first;
      prep<Sharing::Cta>(q, first + tid);
      __syncthreads();  // every WQE store of the CTA before thread 0's publish
      if (tid == 0) {
        Status st = kd::publish<Sharing::Exclusive>(q, first, n);
        if (st != Status::Ok) {
          note_err(p, nerr, st, kWherePublish);
        } else {
          st = kd::ring_doorbell<Sharing::Exclusive>(q, first + n);
          if (st != Status::Ok) note_err(p, nerr, st, kWhereRing);
        }
        s_pub = static_cast<int>(st);
      }
      __syncthreads();
      if (s_pub != 0) break;  // CTA-uniform
    }
    posted += n;
  }
  __syncthreads();
  if (tid == 0) {
    const Status st = kd::quiet<Sharing::Exclusive>(q);
    if (st != Status::Ok) note_err(p, nerr, st, kWhereQuiet);
    if (posted) atomicAdd(p.posted, posted);
  }
  p.err_count[blockIdx.x * blockDim.x + tid] += nerr;
}
}  // namespace kinet::bench
