// kinet-post-rate — how many mlx5 send WQEs per second CUDA kernels build and
// publish with kinet's device verbs, with no NIC in the machine.
//
// Every QP has its send ring, CQ, posting state (dev::SqState) and doorbell
// records in GPU memory, as on real hardware with GPU-memory rings; the
// doorbell register is 8 bytes of pinned, mapped host memory, so every
// doorbell is a real store across PCIe (st.mmio.relaxed.sys).
//
// The "NIC" is a persistent retire kernel launched FIRST on its own stream,
// one warp per QP. It polls the QP's doorbell record, reads the control
// segment of every announced WQE (checks opcode, WQE index, DS count, QP
// number), and for every WQE that asks for a completion (CQ_UPDATE) writes a
// 64-byte CQE in the PRM layout: bytes 0..59 first, then the last word
// (wqe_counter, signature, op_own) with a system-scope release store, the
// word dev::poll_cq reads with an acquire load. It never moves data: the
// addresses and keys in the WQEs are dummies. A malformed WQE gets an error
// CQE (syndrome "local QP operation error"), so the poster reports it at once.
//
// The retire kernel also reports how often it found a full chunk (256 WQEs)
// waiting ("ret%"): near 100% means the NIC stand-in, not the posting code,
// set that row's pace (the number is then a lower bound of the posting rate).
//
// The posting kernel is launched second, on another stream, once every CTA
// of the retire kernel has signalled that it is resident. Each unit (thread,
// warp or CTA) posts W WQEs and ends with quiet() on its QP(s). Timing: CUDA
// events around the posting kernel; calibration runs first (the first one is
// the warm-up) size W so one timed run lasts about --target-ms. The retire
// kernel stops when the host raises a flag in device memory (a copy on a third
// stream): idle warps polling pinned host memory flood PCIe and slow every
// system-scope fence of the posters tenfold.
//
// Modes (one output row each):
//   thread-excl  each thread owns a QP: reserve<Exclusive>(1), prepare_write,
//                publish, ring_doorbell every B WQEs (the row's "db" column;
//                1 = every WQE).
//   warp-coop    one warp per batch of 32: lane 0 reserves 32 slots, the
//                index is broadcast with __shfl_sync, every lane prepares its
//                slot, __syncwarp, lane 0 publishes and rings once. Exclusive
//                when the warp owns its QP(s); reserve/publish/ring<Cta or Gpu>
//                by lane 0 when several warps share a QP.
//   warp_put-lib the same through dev::warp_put (kinet/device/coop.cuh).
//   thread-cta   every thread of a CTA posts individually with Sharing::Cta,
//                one QP per CTA; the thread whose ring index closes a group of
//                B (db column) rings.
//   cta-coop     thread 0 reserves blockDim slots, shared memory broadcast,
//                __syncthreads, every thread prepares, __syncthreads, thread 0
//                publishes and rings once.
//   cta_put-lib  the same through dev::cta_put (kinet/device/coop.cuh).
//   thread-gpu   every thread of the grid posts individually with
//                Sharing::Gpu; warp w uses QP w % Q.
// The CTA x QP table sweeps warp-coop with 8 warps per CTA.
//
// Deadlock rules kept here: (1) the retire kernel is resident before any
// posting CTA starts (handshake through pinned memory, bounded); (2) posting
// CTAs <= SMs - retire CTAs and both kernels have occupancy >= 1; (3) in the
// cooperative modes only lane 0 / thread 0 ever spins, the other threads wait
// at __shfl_sync/__syncwarp/__syncthreads; (4) in the per-thread shared modes
// (thread-cta, thread-gpu) lanes of one warp do wait for each other in
// publish(): that relies on independent thread scheduling (sm_70+) and every
// such wait is bounded by the QP's timeout, so the worst case is a reported
// timeout, never a hang; (5) the host bounds every wait and, on a hang, dumps
// the queue state and exits.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kinet/device/coop.cuh"
#include "kinet/device/qp.cuh"
#include "kinet/mlx5/wire.hpp"

namespace {

using kinet::Scope;
using kinet::Status;
namespace kd = kinet::dev;
namespace mlx5 = kinet::mlx5;
using kd::Sharing;
using kinet::detail::bswap16;
using kinet::detail::bswap32;
// The posting-state type (dev::SqState today) as the handle names it.
using SqStateT = std::remove_pointer_t<decltype(kd::QpHandle::state)>;

constexpr uint32_t kFull = 0xffffffffu;
constexpr uint32_t kChunk = 256;  // WQEs a retire warp examines per pass (8 per lane)
constexpr uint32_t kChunkWords = kChunk / 32;
constexpr uint32_t kStateStride = 256;  // bytes between two QPs' SqState (own L2 lines)
constexpr uint32_t kDbrecStride = 64;   // bytes between two doorbell records / two doorbell registers
constexpr uint64_t kStopPollNs = 2000;  // idle retire warps read the stop flag (device memory) this often
constexpr uint64_t kLaddr = 0x7f0000000000ull;  // dummy local / remote addresses: nothing moves
constexpr uint64_t kRaddr = 0x7e0000000000ull;
constexpr uint32_t kBytes = 8;
constexpr uint32_t kLkeyBe = kinet::detail::bswap32_constexpr(0x00c0ffeeu);
constexpr uint32_t kRkeyBe = kinet::detail::bswap32_constexpr(0x00beef01u);
constexpr uint8_t kBadVendorSyndrome = 0x6b;  // marks the retire kernel's error CQEs

enum Where : int { kWhereReserve = 1, kWherePublish = 2, kWhereRing = 3, kWhereQuiet = 4, kWherePost = 5 };
enum Map : uint32_t { kMapThread = 0, kMapCta = 1, kMapWarp = 2 };

struct PostParams {
  const kd::QpHandle* qps;
  uint32_t nqp;
  uint32_t per_unit;      // WQEs per unit (thread / warp / CTA)
  uint32_t db_batch;      // per-thread modes: ring when (idx+1) % db_batch == 0 (1 = every WQE)
  uint32_t map;           // per-thread modes: which QP a thread uses
  uint32_t warps_per_qp;  // warp modes with shared QPs
  unsigned long long* posted;  // WQEs published (writes only, not quiet()'s NOPs)
  uint32_t* err_count;         // per thread: non-Ok statuses seen (accumulates over launches)
  int* first_err;              // (where << 16) | status of the first error, 0 = none
  unsigned long long inject_idx;  // self-test (--inject-bad): QP 0's WQE at this ring index gets a bad opcode
};

struct ConsStats {  // one per QP, written by its retire warp
  unsigned long long writes, nops, bad, cqes, err_cqes;
  unsigned long long done;           // progress: WQEs retired so far (updated every pass)
  unsigned long long first_bad_idx;   // ring index of the first malformed WQE
  unsigned long long last_write_end;  // 1 + ring index of the last RDMA write retired
  uint32_t first_bad_w0, first_bad_w1;  // its first two control words, host order
  uint32_t has_bad, timed_out, cq_timeout, finished;
  // Is the stand-in NIC keeping up? Passes over the ring, passes that found
  // a full chunk waiting, and the largest backlog (announced - retired) seen.
  uint32_t passes, full_passes, max_backlog;
  uint32_t pad[7];
};
static_assert(sizeof(ConsStats) == 128);

struct ConsParams {
  const kd::QpHandle* qps;
  uint32_t nqp;
  uint32_t* stop;     // device memory: set by the host (a copy) after the last posting kernel
  uint32_t* started;  // pinned host: one word per retire CTA
  ConsStats* stats;   // device, one per QP
  uint64_t max_ns;    // hard bound of the retire kernel's run time
  uint32_t cqe_release_gpu;  // diagnostic: release the CQE's last word at GPU instead of system scope
};

// ---------------------------------------------------------------------------
// Posting side

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
    if (B <= 1 || ((i + 1) & (B - 1)) == 0) {
      st = kd::ring_doorbell<S>(q, i + 1);
      if (st != Status::Ok) {
        note_err(p, nerr, st, kWhereRing);
        break;
      }
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

// ---------------------------------------------------------------------------
// Retire side (plays the NIC)

// Is this control segment the one the poster wrote for ring index idx?
__device__ __forceinline__ bool wqe_ok(const kd::QpHandle& q, uint64_t idx, uint32_t w0, uint32_t w1) {
  const uint32_t opc = w0 & 0xffu, widx = (w0 >> 8) & 0xffffu, ds = w1 & 0x3fu, qpn = w1 >> 8;
  return widx == (static_cast<uint32_t>(idx) & 0xffffu) && qpn == q.qpn &&
         ((opc == mlx5::kOpRdmaWrite && ds == 3u) || (opc == mlx5::kOpNop && ds == 1u));
}

// CQE for WQE widx at CQ index cqi: bytes 0..59 with plain stores, then the
// last word (wqe_counter BE16, signature, op_own) with a system-scope release.
// A malformed WQE gets an error CQE (local QP operation error).
__device__ __forceinline__ void write_cqe(const kd::QpHandle& q, uint64_t cqi, uint64_t widx, bool gpu_scope) {
  uint8_t* e = reinterpret_cast<uint8_t*>(q.cq.cqes + (cqi & ((1ull << q.cq.log_n) - 1)));
  const uint8_t* s = q.sq + static_cast<size_t>(widx & (q.size() - 1u)) * mlx5::kSendWqeBB;
  // The slot cannot be reused before this CQE is out: re-reading it is safe.
  // Both loads are issued together (one L2 round trip).
  const uint2 cw = __ldcg(reinterpret_cast<const uint2*>(s));
  const uint32_t bc = __ldcg(reinterpret_cast<const unsigned int*>(s + 32));  // data segment byte_count (BE)
  const uint32_t w0 = bswap32(cw.x);
  const bool bad = !wqe_ok(q, widx, w0, bswap32(cw.y));
  const uint32_t opc = w0 & 0xffu;
  const uint32_t byte_cnt_be = (!bad && opc == mlx5::kOpRdmaWrite) ? bc : 0u;
  uint4* e4 = reinterpret_cast<uint4*>(e);
  e4[0] = make_uint4(0u, 0u, 0u, 0u);
  e4[1] = make_uint4(0u, 0u, 0u, 0u);
  e4[2] = make_uint4(0u, 0u, 0u, byte_cnt_be);  // 32 srqn, 36 imm, 40 app/app_op/app_info, 44 byte_cnt
  // 48..55: timestamp (success) or ..., vendor_err_synd at 54, syndrome at 55 (error)
  const uint32_t w13 =
      bad ? ((static_cast<uint32_t>(kBadVendorSyndrome) << 16) | (static_cast<uint32_t>(mlx5::kSynLocalQpOp) << 24))
          : 0u;
  *reinterpret_cast<uint2*>(e + 48) = make_uint2(0u, w13);
  *reinterpret_cast<uint32_t*>(e + 56) = bswap32((opc << 24) | (q.qpn & 0xffffffu));  // sop_drop_qpn
  const uint32_t owner = static_cast<uint32_t>((cqi >> q.cq.log_n) & 1u);
  const uint32_t op = bad ? mlx5::kCqeReqErr : mlx5::kCqeReq;
  const uint32_t tail =
      static_cast<uint32_t>(bswap16(static_cast<uint16_t>(widx & 0xffffu))) | (((op << 4) | owner) << 24);
  if (gpu_scope) kinet::store_release<Scope::Gpu>(reinterpret_cast<uint32_t*>(e + 60), tail);
  else kinet::store_release<Scope::System>(reinterpret_cast<uint32_t*>(e + 60), tail);
}

// One warp per QP. All control flow is warp-uniform: lane 0 reads the shared
// words and broadcasts them.
__global__ void __launch_bounds__(1024, 1) k_consumer(ConsParams p) {
  __shared__ uint32_t s_pass[32][3];  // per warp: passes, full passes, max backlog (shared memory: no stall)
  const uint32_t lane = threadIdx.x & 31u;
  const uint32_t wib = threadIdx.x >> 5;
  if (lane < 3) s_pass[wib][lane] = 0;
  __syncwarp();
  if (threadIdx.x == 0) kinet::store_release<Scope::System>(p.started + blockIdx.x, 1u);
  const uint32_t gw = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (gw >= p.nqp) return;
  const kd::QpHandle q = p.qps[gw];
  ConsStats* cs = p.stats + gw;
  const uint32_t mask = q.size() - 1u;
  const uint64_t cq_n = 1ull << q.cq.log_n;
  uint64_t done = 0, announced = 0, cq_pi = 0, ci = 0, last_write_end = 0;
  uint32_t n_w = 0, n_nop = 0, n_bad = 0;  // per lane (a lane sees 1/32 of the WQEs)
  uint32_t n_cqe = 0, n_err = 0;  // warp-uniform
  uint32_t has_bad = 0, timed_out = 0, cq_timeout = 0;
  bool stopping = false;
  uint64_t t0 = 0, last_check = 0;  // lane 0 only
  if (lane == 0) t0 = last_check = kinet::now_ns();
  for (;;) {
    if (announced == done) {
      uint32_t raw = 0;
      if (lane == 0) raw = kinet::load_acquire<Scope::Gpu>(q.dbrec + mlx5::kSendDbrIndex);
      raw = __shfl_sync(kFull, raw, 0);
      const uint16_t pi16 = static_cast<uint16_t>(bswap32(raw) & 0xffffu);
      // The producer is never more than the ring size (< 2^16) ahead of `done`.
      announced = done + static_cast<uint16_t>(pi16 - static_cast<uint16_t>(done));
      // Lane 0's acquire is ordered before every lane's WQE reads below
      // (bar.warp.sync orders memory among its participants).
      __syncwarp();
      if (announced == done) {
        if (stopping) break;  // stop seen and nothing left: done
        int act = 0;
        if (lane == 0) {
          const uint64_t t = kinet::now_ns();
          if (t - last_check >= kStopPollNs) {
            last_check = t;
            if (kinet::load_acquire<Scope::System>(p.stop) != 0) act = 1;
          }
          if (act == 0 && t - t0 > p.max_ns) act = 2;
        }
        act = __shfl_sync(kFull, act, 0);
        if (act == 1) stopping = true;  // one more look at the doorbell record, then exit
        else if (act == 2) {
          timed_out = 1;
          break;
        }
        continue;
      }
    }
    const uint64_t backlog = announced - done;
    const uint32_t n = static_cast<uint32_t>(min(backlog, static_cast<uint64_t>(kChunk)));
    if (lane == 0) {
      s_pass[wib][0] += 1;
      s_pass[wib][1] += n == kChunk;
      if (backlog > s_pass[wib][2]) s_pass[wib][2] = static_cast<uint32_t>(backlog);
    }
    uint4 c[kChunkWords];
#pragma unroll
    for (uint32_t k = 0; k < kChunkWords; ++k) {
      const uint32_t j = k * 32u + lane;
      c[k] = make_uint4(0u, 0u, 0u, 0u);
      // L2 reads (the acquire of the doorbell record by lane 0 + __shfl_sync
      // order them after the poster's WQE stores).
      if (j < n) c[k] = __ldcg(reinterpret_cast<const uint4*>(q.sq + static_cast<size_t>((done + j) & mask) * 64u));
    }
    uint32_t sig[kChunkWords];
    uint32_t nsig = 0, nbad = 0, lastw = 0;
#pragma unroll
    for (uint32_t k = 0; k < kChunkWords; ++k) {
      const uint32_t j = k * 32u + lane;
      const bool valid = j < n;
      const uint32_t w0 = bswap32(c[k].x), w1 = bswap32(c[k].y);
      const uint32_t fm = c[k].z >> 24;  // byte 11: fm_ce_se
      const bool ok = wqe_ok(q, done + j, w0, w1);
      const bool is_w = (w0 & 0xffu) == mlx5::kOpRdmaWrite;
      if (valid) {
        if (!ok) ++n_bad;
        else if (is_w) ++n_w;
        else ++n_nop;
      }
      const uint32_t badm = __ballot_sync(kFull, valid && !ok);
      const uint32_t wm = __ballot_sync(kFull, valid && ok && is_w);
      if (wm) lastw = k * 32u + 32u - static_cast<uint32_t>(__clz(static_cast<int>(wm)));
      sig[k] = __ballot_sync(kFull, valid && (!ok || (fm & mlx5::kCtrlCqUpdate) != 0));
      nsig += __popc(sig[k]);
      nbad += __popc(badm);
      if (badm != 0 && !has_bad) {  // first malformed WQE of this QP: its words go straight to the stats
        const uint32_t src = static_cast<uint32_t>(__ffs(badm) - 1);
        if (lane == src) {
          cs->first_bad_idx = done + k * 32u + src;
          cs->first_bad_w0 = w0;
          cs->first_bad_w1 = w1;
        }
        has_bad = 1;
      }
    }
    if (nsig != 0) {
      if (cq_pi + nsig - ci > cq_n) {  // cached consumer index says full: re-read the poster's
        uint64_t tw = 0;
        if (lane == 0) tw = kinet::now_ns();
        bool ok = false;
        for (;;) {
          uint32_t raw = 0;
          if (lane == 0) raw = kinet::load_acquire<Scope::System>(q.cq.dbrec + mlx5::kCqDbrConsumerIndex);
          raw = __shfl_sync(kFull, raw, 0);
          const uint32_t ci24 = bswap32(raw) & 0xffffffu;
          ci = cq_pi - ((cq_pi - ci24) & 0xffffffull);
          if (cq_pi + nsig - ci <= cq_n) {
            ok = true;
            break;
          }
          int give_up = 0;
          if (lane == 0) give_up = (stopping || kinet::now_ns() - tw > q.timeout_ns) ? 1 : 0;
          give_up = __shfl_sync(kFull, give_up, 0);
          if (give_up) break;
          __nanosleep(128);
        }
        if (!ok) {
          cq_timeout = 1;
          break;
        }
      }
      // Every lane's reads of this chunk's WQEs are done before any CQE frees their slots.
      __syncwarp();
      for (uint32_t r0 = 0; r0 < nsig; r0 += 32u) {
        const uint32_t r = r0 + lane;  // this lane writes the r-th CQE of the chunk
        uint32_t rr = r;
        int jj = -1;
#pragma unroll
        for (uint32_t k = 0; k < kChunkWords; ++k) {
          const uint32_t cnt = __popc(sig[k]);
          if (jj < 0) {
            if (rr < cnt) {
              uint32_t mm = sig[k];
              for (uint32_t t = 0; t < rr; ++t) mm &= mm - 1u;
              const uint32_t bit = static_cast<uint32_t>(__ffs(mm) - 1);
              jj = static_cast<int>(k * 32u + bit);
            } else {
              rr -= cnt;
            }
          }
        }
        if (r < nsig) write_cqe(q, cq_pi + r, done + static_cast<uint32_t>(jj), p.cqe_release_gpu != 0);
      }
      cq_pi += nsig;
      n_cqe += nsig;
      n_err += nbad;
    }
    if (lastw) last_write_end = done + lastw;
    done += n;
    if (lane == 0) *reinterpret_cast<volatile unsigned long long*>(&cs->done) = done;
  }
  unsigned long long t_w = n_w, t_nop = n_nop, t_bad = n_bad;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    t_w += __shfl_xor_sync(kFull, t_w, o);
    t_nop += __shfl_xor_sync(kFull, t_nop, o);
    t_bad += __shfl_xor_sync(kFull, t_bad, o);
  }
  if (lane == 0) {
    cs->writes = t_w;
    cs->nops = t_nop;
    cs->bad = t_bad;
    cs->cqes = n_cqe;
    cs->err_cqes = n_err;
    cs->done = done;
    cs->last_write_end = last_write_end;
    cs->has_bad = has_bad;
    cs->timed_out = timed_out;
    cs->cq_timeout = cq_timeout;
    cs->passes = s_pass[wib][0];
    cs->full_passes = s_pass[wib][1];
    cs->max_backlog = s_pass[wib][2];
    cs->finished = 1;
  }
}

// Every CQE invalid (opcode 15) with owner 1, so the first lap (owner 0) is recognised.
__global__ void k_init_cq(mlx5::Cqe64* cqes, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint4* e = reinterpret_cast<uint4*>(cqes + i);
    e[0] = e[1] = e[2] = make_uint4(0u, 0u, 0u, 0u);
    e[3] = make_uint4(0u, 0u, 0u, static_cast<uint32_t>(mlx5::kCqeInitOpOwn) << 24);
  }
}

// ---------------------------------------------------------------------------
// Host side

enum class Kind { Thread, Warp, WarpLib, Cta, CtaLib };

struct Config {
  std::string mode;   // row label: thread-excl, warp-coop, ...
  std::string group;  // single, warp, cta, gpu-shared, whole-gpu, table
  Kind kind = Kind::Thread;
  Sharing sharing = Sharing::Exclusive;
  uint32_t map = kMapThread;
  uint32_t ctas = 1, tpc = 1, qps = 1, db_batch = 1;
  // derived
  uint32_t units = 1;  // threads / warps / CTAs that each post W
  uint32_t gran = 1;   // W is a multiple of this
  uint32_t qps_used = 1, warps_per_qp = 1;
  uint32_t cons_ctas = 1, cons_tpb = 32;
  bool table = false;
};

struct Result {
  Config cfg;
  bool ran = false, skipped = false, verified = false;
  std::string note;  // why skipped / why not verified
  std::string warn;  // verified, but something worth reporting
  uint32_t wqes_per_unit = 0;
  uint64_t wqes = 0;  // per timed run
  double seconds = 0, mwqe = 0, mwqe_min = 0, mwqe_max = 0;
  int reps = 0;
  uint64_t nops = 0;
  double retire_full_pct = 0;  // % of retire passes that found a full chunk waiting (high = NIC stand-in bound)
  uint32_t retire_max_backlog = 0;
};

struct Options {
  bool quick = false, dry_run = false, fake = false, csv = false;
  std::string json, csv_file, only;
  double target_ms = 40, max_seconds = 170;
  int reps = 3, device = 0, sms_override = 0;
  uint32_t log_depth = 11, signal_period = 64, warps_per_cta = 8;
  uint64_t timeout_ms = 5000;
  long long inject_idx = -1;  // self-test of the failure path
  bool cqe_release_gpu = false;
};

Options g_opt;
std::vector<Result> g_results;
std::string g_device_name = "?";
int g_sms = 0;
auto g_t_start = std::chrono::steady_clock::now();

double elapsed_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_t_start).count();
}

const char* sharing_name(Sharing s) {
  return s == Sharing::Exclusive ? "exclusive" : (s == Sharing::Cta ? "cta" : "gpu");
}

void write_outputs();  // JSON / CSV with whatever rows exist

[[noreturn]] void die(int code) {
  std::fflush(stdout);
  write_outputs();
  std::fflush(stdout);
  std::fflush(stderr);
  // _Exit: a kernel may still be running; do not run CUDA's teardown.
  std::_Exit(code);
}

void fatal_cuda(cudaError_t e, const char* what, const char* file, int line) {
  std::fprintf(stderr, "FATAL: %s failed at %s:%d: %s (%s)\n", what, file, line, cudaGetErrorName(e),
               cudaGetErrorString(e));
  die(2);
}
#define CK(call)                                                           \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    if (e_ != cudaSuccess) fatal_cuda(e_, #call, __FILE__, __LINE__);      \
  } while (0)

uint32_t ceil_div(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }
uint32_t cons_ctas_for(uint32_t qps) { return ceil_div(qps, 32); }
// Most CTAs a posting kernel may use next to the retire kernel of qps QPs.
uint32_t max_ctas(uint32_t qps) {
  const uint32_t c = cons_ctas_for(qps);
  return static_cast<uint32_t>(g_sms) > c ? static_cast<uint32_t>(g_sms) - c : 0;
}
// Most CTAs when every CTA has its own QP (qps = ctas).
uint32_t max_ctas_qp_per_cta() {
  uint32_t best = 0;
  for (uint32_t c = 1; c <= 4096; ++c)
    if (c + cons_ctas_for(c) <= static_cast<uint32_t>(g_sms)) best = c;
  return best;
}

void finish(Config& c) {
  c.cons_ctas = cons_ctas_for(c.qps);
  c.cons_tpb = std::min<uint32_t>(c.qps, 32) * 32;
}

Config make_thread(const std::string& mode, const std::string& group, Sharing s, uint32_t map, uint32_t ctas,
                   uint32_t tpc, uint32_t qps, uint32_t db) {
  Config c;
  c.mode = mode;
  c.group = group;
  c.kind = Kind::Thread;
  c.sharing = s;
  c.map = map;
  c.ctas = ctas;
  c.tpc = tpc;
  c.qps = qps;
  c.db_batch = db;
  c.units = ctas * tpc;
  c.gran = 1;
  if (map == kMapThread) c.qps_used = std::min(c.units, qps);
  else if (map == kMapCta) c.qps_used = std::min(ctas, qps);
  else c.qps_used = std::min(ceil_div(c.units, 32), qps);
  finish(c);
  return c;
}

Config make_warp(const std::string& group, uint32_t ctas, uint32_t wpc, uint32_t qps, bool lib = false,
                 bool table = false) {
  Config c;
  c.mode = lib ? "warp_put-lib" : "warp-coop";
  c.group = group;
  c.kind = lib ? Kind::WarpLib : Kind::Warp;
  c.ctas = ctas;
  c.tpc = wpc * 32;
  c.qps = qps;
  c.db_batch = 32;
  c.table = table;
  const uint32_t nw = ctas * wpc;
  c.units = nw;
  if (nw <= qps) {
    c.sharing = Sharing::Exclusive;
    c.gran = 32 * ceil_div(qps, nw);
    c.qps_used = qps;
    c.warps_per_qp = 1;
  } else {
    const uint32_t k = ceil_div(nw, qps);
    c.warps_per_qp = k;
    c.qps_used = ceil_div(nw, k);
    c.sharing = (k <= wpc && wpc % k == 0) ? Sharing::Cta : Sharing::Gpu;
    c.gran = 32;
  }
  finish(c);
  return c;
}

Config make_cta(const std::string& group, uint32_t ctas, uint32_t tpc, bool lib = false) {
  Config c;
  c.mode = lib ? "cta_put-lib" : "cta-coop";
  c.group = group;
  c.kind = lib ? Kind::CtaLib : Kind::Cta;
  c.sharing = Sharing::Exclusive;
  c.ctas = ctas;
  c.tpc = tpc;
  c.qps = ctas;
  c.qps_used = ctas;
  c.db_batch = tpc;
  c.units = ctas;
  c.gran = tpc;
  finish(c);
  return c;
}

std::vector<Config> build_sweep() {
  std::vector<Config> v;
  const bool q = g_opt.quick;
  const uint32_t wpc = g_opt.warps_per_cta;
  const uint32_t pc = max_ctas_qp_per_cta();  // e.g. 128 on a 132-SM H200
  const uint32_t p128 = max_ctas(128), p256 = max_ctas(256);
  // (a) single thread
  v.push_back(make_thread("thread-excl", "single", Sharing::Exclusive, kMapThread, 1, 1, 1, 1));
  v.push_back(make_thread("thread-excl", "single", Sharing::Exclusive, kMapThread, 1, 1, 1, 32));
  if (!q) v.push_back(make_thread("thread-excl", "single", Sharing::Exclusive, kMapThread, 1, 32, 32, 32));
  if (!q) v.push_back(make_thread("thread-excl", "single", Sharing::Exclusive, kMapThread, 4, 32, 128, 32));
  // (b) one warp per QP
  v.push_back(make_warp("warp", 1, 1, 1));
  v.push_back(make_warp("warp", 1, 8, 8));
  if (!q) v.push_back(make_warp("warp", 1, 1, 1, /*lib=*/true));
  // (c) CTA-shared QP
  v.push_back(make_thread("thread-cta", "cta", Sharing::Cta, kMapCta, 1, 256, 1, 32));
  if (!q) v.push_back(make_thread("thread-cta", "cta", Sharing::Cta, kMapCta, 1, 256, 1, 1));
  v.push_back(make_cta("cta", 1, 256));
  if (!q) v.push_back(make_cta("cta", 1, 1024));
  if (!q) v.push_back(make_cta("cta", 1, 256, /*lib=*/true));
  if (!q) v.push_back(make_thread("thread-cta", "cta", Sharing::Cta, kMapCta, pc, 256, pc, 32));
  v.push_back(make_cta("cta", pc, 256));
  if (!q) v.push_back(make_cta("cta", pc, 1024));
  if (!q) v.push_back(make_cta("cta", pc, 256, /*lib=*/true));
  // (d) GPU-shared QPs, every thread posting on its own
  v.push_back(make_thread("thread-gpu", "gpu-shared", Sharing::Gpu, kMapWarp, 4, 256, 1, 32));
  if (!q) v.push_back(make_thread("thread-gpu", "gpu-shared", Sharing::Gpu, kMapWarp, 32, 256, 8, 32));
  if (!q) v.push_back(make_thread("thread-gpu", "gpu-shared", Sharing::Gpu, kMapWarp, max_ctas(32), 256, 32, 32));
  // whole-GPU candidates (the best row overall is reported)
  v.push_back(make_warp("whole-gpu", p128, 4, 128));
  if (!q) v.push_back(make_warp("whole-gpu", p128, 16, 128));
  if (!q) v.push_back(make_warp("whole-gpu", p128, 32, 128));
  v.push_back(make_warp("whole-gpu", p256, 8, 256));
  if (!q) v.push_back(make_warp("whole-gpu", p256, 2, 256));
  if (!q) v.push_back(make_warp("whole-gpu", 4, 32, 128, /*lib=*/true));
  // CTA x QP table, warp-coop
  const std::vector<uint32_t> dims = q ? std::vector<uint32_t>{1, 8, 128}
                                       : std::vector<uint32_t>{1, 2, 4, 8, 16, 32, 64, 128};
  for (uint32_t ctas : dims)
    for (uint32_t qps : dims) v.push_back(make_warp("table", ctas, wpc, qps, false, /*table=*/true));
  if (!g_opt.only.empty()) {
    std::vector<Config> f;
    for (auto& c : v)
      if (c.mode.find(g_opt.only) != std::string::npos || c.group.find(g_opt.only) != std::string::npos)
        f.push_back(c);
    v.swap(f);
  }
  return v;
}

// ---- device resources -------------------------------------------------------
struct Dev {
  uint32_t qmax = 0, log_n = 0, depth = 0;
  uint8_t* sq = nullptr;
  mlx5::Cqe64* cq = nullptr;
  uint8_t* states = nullptr;
  uint8_t* dbrec = nullptr;
  uint8_t* cqdbrec = nullptr;
  kd::QpHandle* handles = nullptr;
  ConsStats* stats = nullptr;
  uint32_t* err_count = nullptr;
  size_t err_slots = 0;
  unsigned long long* posted = nullptr;
  int* first_err = nullptr;
  // pinned, mapped host memory
  uint8_t* h_db = nullptr;  // doorbell registers
  uint8_t* d_db = nullptr;
  uint32_t* h_flags = nullptr;  // [64..] started per retire CTA; [0] staging word for the stop copy
  uint32_t* d_flags = nullptr;
  uint32_t* d_stop = nullptr;  // device memory: polling host memory from idle retire warps floods PCIe
  int* h_first_err = nullptr;   // pinned staging for quick checks
  cudaStream_t s_cons = nullptr, s_post = nullptr, s_diag = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  std::vector<kd::QpHandle> host_handles;
};
Dev g;
constexpr uint32_t kStartedOffset = 64;
constexpr uint32_t kMaxConsCtas = 256;

uint32_t* h_started() { return g.h_flags + kStartedOffset; }

void host_store(uint32_t* p, uint32_t v) { std::atomic_ref<uint32_t>(*p).store(v, std::memory_order_seq_cst); }
uint32_t host_load(uint32_t* p) { return std::atomic_ref<uint32_t>(*p).load(std::memory_order_acquire); }

// Bounded wait for an event/stream. Returns false on timeout; any CUDA error is fatal.
bool wait_done(cudaEvent_t ev, cudaStream_t st, double timeout_s, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t r = ev ? cudaEventQuery(ev) : cudaStreamQuery(st);
    if (r == cudaSuccess) return true;
    if (r != cudaErrorNotReady) fatal_cuda(r, what, __FILE__, __LINE__);
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Raises the retire kernel's stop flag: a copy into device memory on its own
// stream, which runs next to the kernels. Returns false if it did not land.
bool set_stop() {
  g.h_flags[0] = 1;
  if (cudaMemcpyAsync(g.d_stop, g.h_flags, sizeof(uint32_t), cudaMemcpyHostToDevice, g.s_diag) != cudaSuccess)
    return false;
  const auto t0 = std::chrono::steady_clock::now();
  cudaError_t r;
  while ((r = cudaStreamQuery(g.s_diag)) == cudaErrorNotReady &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  return r == cudaSuccess;
}

void alloc_device(uint32_t qmax, size_t max_threads) {
  g.qmax = qmax;
  g.log_n = g_opt.log_depth;
  g.depth = 1u << g.log_n;
  const size_t ring_bytes = static_cast<size_t>(qmax) * g.depth * mlx5::kSendWqeBB;
  CK(cudaMalloc(&g.sq, ring_bytes));
  CK(cudaMalloc(&g.cq, static_cast<size_t>(qmax) * g.depth * sizeof(mlx5::Cqe64)));
  CK(cudaMalloc(&g.states, static_cast<size_t>(qmax) * kStateStride));
  CK(cudaMalloc(&g.dbrec, static_cast<size_t>(qmax) * kDbrecStride));
  CK(cudaMalloc(&g.cqdbrec, static_cast<size_t>(qmax) * kDbrecStride));
  CK(cudaMalloc(&g.handles, static_cast<size_t>(qmax) * sizeof(kd::QpHandle)));
  CK(cudaMalloc(&g.stats, static_cast<size_t>(qmax) * sizeof(ConsStats)));
  g.err_slots = max_threads;
  CK(cudaMalloc(&g.err_count, max_threads * sizeof(uint32_t)));
  CK(cudaMalloc(&g.posted, sizeof(unsigned long long)));
  CK(cudaMalloc(&g.first_err, sizeof(int)));
  CK(cudaMalloc(&g.d_stop, sizeof(uint32_t)));
  CK(cudaHostAlloc(&g.h_db, static_cast<size_t>(qmax) * kDbrecStride, cudaHostAllocMapped | cudaHostAllocPortable));
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&g.d_db), g.h_db, 0));
  std::memset(g.h_db, 0, static_cast<size_t>(qmax) * kDbrecStride);
  CK(cudaHostAlloc(&g.h_flags, (kStartedOffset + kMaxConsCtas) * sizeof(uint32_t),
                   cudaHostAllocMapped | cudaHostAllocPortable));
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&g.d_flags), g.h_flags, 0));
  std::memset(g.h_flags, 0, (kStartedOffset + kMaxConsCtas) * sizeof(uint32_t));
  CK(cudaHostAlloc(&g.h_first_err, sizeof(int), cudaHostAllocDefault));
  CK(cudaStreamCreateWithFlags(&g.s_cons, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&g.s_post, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&g.s_diag, cudaStreamNonBlocking));
  CK(cudaEventCreate(&g.e0));
  CK(cudaEventCreate(&g.e1));

  g.host_handles.resize(qmax);
  for (uint32_t i = 0; i < qmax; ++i) {
    kd::QpHandle h{};
    h.sq = g.sq + static_cast<size_t>(i) * g.depth * mlx5::kSendWqeBB;
    h.dbrec = reinterpret_cast<uint32_t*>(g.dbrec + static_cast<size_t>(i) * kDbrecStride);
    h.db = reinterpret_cast<uint64_t*>(g.d_db + static_cast<size_t>(i) * kDbrecStride);
    h.state = reinterpret_cast<SqStateT*>(g.states + static_cast<size_t>(i) * kStateStride);
    h.cq.cqes = g.cq + static_cast<size_t>(i) * g.depth;
    h.cq.dbrec = reinterpret_cast<uint32_t*>(g.cqdbrec + static_cast<size_t>(i) * kDbrecStride);
    h.cq.log_n = g.log_n;
    h.cq.cqn = 0x400 + i;
    h.timeout_ns = g_opt.timeout_ms * 1000000ull;
    h.log_n = g.log_n;
    h.qpn = 0x1000 + i;
    h.qpn_be8 = bswap32(h.qpn << 8);
    h.max_msg = 1u << 30;
    h.signal_period = g_opt.signal_period;
    h.rings_in_gpu_memory = 1;
    g.host_handles[i] = h;
  }
  CK(cudaMemcpy(g.handles, g.host_handles.data(), qmax * sizeof(kd::QpHandle), cudaMemcpyHostToDevice));
}

const void* post_kernel(const Config& c) {
  switch (c.kind) {
    case Kind::Thread:
      if (c.sharing == Sharing::Exclusive && g_opt.inject_idx >= 0)
        return reinterpret_cast<const void*>(&k_thread<Sharing::Exclusive, true>);
      if (c.sharing == Sharing::Exclusive) return reinterpret_cast<const void*>(&k_thread<Sharing::Exclusive>);
      if (c.sharing == Sharing::Cta) return reinterpret_cast<const void*>(&k_thread<Sharing::Cta>);
      return reinterpret_cast<const void*>(&k_thread<Sharing::Gpu>);
    case Kind::Warp:
      if (c.sharing == Sharing::Exclusive) return reinterpret_cast<const void*>(&k_warp<Sharing::Exclusive, false>);
      if (c.sharing == Sharing::Cta) return reinterpret_cast<const void*>(&k_warp<Sharing::Cta, false>);
      return reinterpret_cast<const void*>(&k_warp<Sharing::Gpu, false>);
    case Kind::WarpLib:
      if (c.sharing == Sharing::Exclusive) return reinterpret_cast<const void*>(&k_warp<Sharing::Exclusive, true>);
      if (c.sharing == Sharing::Cta) return reinterpret_cast<const void*>(&k_warp<Sharing::Cta, true>);
      return reinterpret_cast<const void*>(&k_warp<Sharing::Gpu, true>);
    case Kind::Cta: return reinterpret_cast<const void*>(&k_cta<false>);
    case Kind::CtaLib: return reinterpret_cast<const void*>(&k_cta<true>);
  }
  return nullptr;
}

PostParams post_params(const Config& c, uint32_t W) {
  PostParams p{};
  p.qps = g.handles;
  p.nqp = c.qps;
  p.per_unit = W;
  p.db_batch = c.db_batch;
  p.map = c.map;
  p.warps_per_qp = c.warps_per_qp;
  p.posted = g.posted;
  p.err_count = g.err_count;
  p.first_err = g.first_err;
  p.inject_idx = g_opt.inject_idx >= 0 ? static_cast<unsigned long long>(g_opt.inject_idx) : ~0ull;
  return p;
}

void launch_post(const Config& c, uint32_t W) {
  PostParams p = post_params(c, W);
  void* args[] = {&p};
  CK(cudaLaunchKernel(post_kernel(c), dim3(c.ctas), dim3(c.tpc), args, 0, g.s_post));
}

std::string decode_err(int fe) {
  if (fe == 0) return "none";
  static const char* where[] = {"?", "reserve", "publish", "ring_doorbell", "quiet", "warp_put/cta_put"};
  const int w = fe >> 16, s = fe & 0xffff;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s returned %d (%s)", (w >= 0 && w <= 5) ? where[w] : "?", s,
                kinet::status_string(static_cast<Status>(s)));
  return buf;
}

// Host-side view of the queues after a hang: copied on a third stream while the kernels run.
void dump_state(const Config& c, const char* why) {
  std::fprintf(stderr, "HANG: %s (config %s ctas=%u tpc=%u qps=%u). Queue state:\n", why, c.mode.c_str(), c.ctas,
               c.tpc, c.qps);
  std::vector<uint8_t> st(static_cast<size_t>(c.qps) * kStateStride);
  std::vector<ConsStats> cs(c.qps);
  int fe = 0;
  unsigned long long posted = 0;
  bool ok = cudaMemcpyAsync(st.data(), g.states, st.size(), cudaMemcpyDeviceToHost, g.s_diag) == cudaSuccess &&
            cudaMemcpyAsync(cs.data(), g.stats, cs.size() * sizeof(ConsStats), cudaMemcpyDeviceToHost,
                            g.s_diag) == cudaSuccess &&
            cudaMemcpyAsync(&fe, g.first_err, sizeof fe, cudaMemcpyDeviceToHost, g.s_diag) == cudaSuccess &&
            cudaMemcpyAsync(&posted, g.posted, sizeof posted, cudaMemcpyDeviceToHost, g.s_diag) == cudaSuccess;
  if (ok) {
    const auto t0 = std::chrono::steady_clock::now();
    cudaError_t r;
    while ((r = cudaStreamQuery(g.s_diag)) == cudaErrorNotReady &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ok = r == cudaSuccess;
  }
  if (!ok) {
    std::fprintf(stderr, "  (could not read device state back)\n");
    return;
  }
  std::fprintf(stderr, "  first posting error: %s; WQEs posted so far (finished units): %llu\n",
               decode_err(fe).c_str(), posted);
  for (uint32_t i = 0; i < c.qps; ++i) {
    SqStateT s;
    std::memcpy(&s, st.data() + static_cast<size_t>(i) * kStateStride, sizeof s);
    const bool odd = s.reserved != s.ready || s.ready != s.rung || s.completed != s.reserved || s.broken ||
                     s.error_status != 0 || cs[i].done != s.rung;
    if (i < 4 || odd)
      std::fprintf(stderr,
                   "  qp %3u: reserved %llu ready %llu rung %llu completed %llu signaled %llu cq_ci %u broken %u "
                   "err %d | retire: done %llu bad %llu\n",
                   i, (unsigned long long)s.reserved, (unsigned long long)s.ready, (unsigned long long)s.rung,
                   (unsigned long long)s.completed, (unsigned long long)s.signaled, s.cq_ci, s.broken,
                   s.error_status, cs[i].done, cs[i].bad);
  }
}

// Sets stop and waits (bounded) for the retire kernel.
bool stop_consumer(const Config& c) {
  if (!set_stop()) {
    dump_state(c, "could not set the stop flag");
    return false;
  }
  if (!wait_done(nullptr, g.s_cons, 10.0, "retire kernel")) {
    dump_state(c, "the retire kernel did not exit within 10 s of the stop flag");
    return false;
  }
  return true;
}

// One posting kernel with a bounded wait; returns seconds (events), or < 0 on a device-reported error.
double timed_post(const Config& c, uint32_t W, uint64_t& expected, int& first_err) {
  CK(cudaEventRecord(g.e0, g.s_post));
  launch_post(c, W);
  CK(cudaEventRecord(g.e1, g.s_post));
  expected += static_cast<uint64_t>(c.units) * W;
  const double host_timeout = 3.0 * g_opt.timeout_ms / 1000.0 + 30.0;
  if (!wait_done(g.e1, nullptr, host_timeout, "posting kernel")) {
    char why[160];
    std::snprintf(why, sizeof why, "posting kernel still running after %.0f s (W=%u)", host_timeout, W);
    dump_state(c, why);
    set_stop();
    die(3);
  }
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, g.e0, g.e1));
  CK(cudaMemcpyAsync(g.h_first_err, g.first_err, sizeof(int), cudaMemcpyDeviceToHost, g.s_post));
  if (!wait_done(nullptr, g.s_post, 10.0, "error readback")) {
    std::fprintf(stderr, "FATAL: error readback did not finish\n");
    die(3);
  }
  first_err = *g.h_first_err;
  return ms / 1000.0;
}

uint32_t round_w(double w, const Config& c) {
  const double cap = std::min(static_cast<double>(1u << 30), 4.0e9 / c.units);
  w = std::clamp(w, static_cast<double>(c.gran), std::max(cap, static_cast<double>(c.gran)));
  uint64_t r = static_cast<uint64_t>(w / c.gran + 0.5) * c.gran;
  if (r < c.gran) r = c.gran;
  return static_cast<uint32_t>(r);
}

Result run_config(const Config& c) {
  Result r;
  r.cfg = c;
  // ---- can it run at all? ----
  char buf[512];
  if (c.kind == Kind::Cta || c.kind == Kind::CtaLib) {
    if (2 * c.tpc > g.depth) {
      std::snprintf(buf, sizeof buf, "ring depth %u < 2 x %u threads", g.depth, c.tpc);
      r.skipped = true;
      r.note = buf;
      return r;
    }
  }
  if (c.ctas == 0 || c.ctas + c.cons_ctas > static_cast<uint32_t>(g_sms) || c.cons_ctas > kMaxConsCtas) {
    std::snprintf(buf, sizeof buf, "%u posting CTAs + %u retire CTAs > %d SMs", c.ctas, c.cons_ctas, g_sms);
    r.skipped = true;
    r.note = buf;
    return r;
  }
  if (static_cast<size_t>(c.ctas) * c.tpc > g.err_slots || c.qps > g.qmax) {
    r.skipped = true;
    r.note = "internal: sweep larger than allocation";
    return r;
  }
  int occ_post = 0, occ_cons = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_post, post_kernel(c), static_cast<int>(c.tpc), 0));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_cons, reinterpret_cast<const void*>(&k_consumer),
                                                   static_cast<int>(c.cons_tpb), 0));
  if (occ_post < 1 || occ_cons < 1) {
    std::snprintf(buf, sizeof buf, "occupancy: posting %d CTA/SM at %u threads, retire %d CTA/SM at %u threads",
                  occ_post, c.tpc, occ_cons, c.cons_tpb);
    r.skipped = true;
    r.note = buf;
    return r;
  }
  // ---- fresh queues ----
  const size_t nq = c.qps;
  CK(cudaMemsetAsync(g.states, 0, nq * kStateStride, g.s_cons));
  CK(cudaMemsetAsync(g.dbrec, 0, nq * kDbrecStride, g.s_cons));
  CK(cudaMemsetAsync(g.cqdbrec, 0, nq * kDbrecStride, g.s_cons));
  CK(cudaMemsetAsync(g.sq, 0, nq * g.depth * mlx5::kSendWqeBB, g.s_cons));
  CK(cudaMemsetAsync(g.stats, 0, nq * sizeof(ConsStats), g.s_cons));
  CK(cudaMemsetAsync(g.err_count, 0, static_cast<size_t>(c.ctas) * c.tpc * sizeof(uint32_t), g.s_cons));
  CK(cudaMemsetAsync(g.posted, 0, sizeof(unsigned long long), g.s_cons));
  CK(cudaMemsetAsync(g.first_err, 0, sizeof(int), g.s_cons));
  CK(cudaMemsetAsync(g.d_stop, 0, sizeof(uint32_t), g.s_cons));
  k_init_cq<<<256, 256, 0, g.s_cons>>>(g.cq, nq * g.depth);
  CK(cudaGetLastError());
  if (!wait_done(nullptr, g.s_cons, 10.0, "queue reset")) {
    std::fprintf(stderr, "FATAL: queue reset did not finish in 10 s\n");
    die(3);
  }
  for (uint32_t i = 0; i < c.cons_ctas; ++i) host_store(h_started() + i, 0);
  // ---- the NIC stand-in first ----
  ConsParams cp{};
  cp.qps = g.handles;
  cp.nqp = c.qps;
  cp.stop = g.d_stop;
  cp.started = g.d_flags + kStartedOffset;
  cp.stats = g.stats;
  cp.max_ns = 300ull * 1000000000ull;  // never reached in a healthy run; the host stops it
  cp.cqe_release_gpu = g_opt.cqe_release_gpu ? 1u : 0u;
  k_consumer<<<c.cons_ctas, c.cons_tpb, 0, g.s_cons>>>(cp);
  CK(cudaGetLastError());
  {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      uint32_t n = 0;
      for (uint32_t i = 0; i < c.cons_ctas; ++i) n += host_load(h_started() + i) != 0;
      if (n == c.cons_ctas) break;
      const cudaError_t q = cudaStreamQuery(g.s_cons);
      if (q != cudaErrorNotReady && q != cudaSuccess) fatal_cuda(q, "retire kernel start", __FILE__, __LINE__);
      if (q == cudaSuccess) {
        std::fprintf(stderr, "FATAL: retire kernel exited before all %u CTAs reported (%u did)\n", c.cons_ctas, n);
        die(3);
      }
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
        std::fprintf(stderr, "FATAL: only %u of %u retire CTAs resident after 10 s\n", n, c.cons_ctas);
        set_stop();
        die(3);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  // ---- calibrate (first run = warm-up), then timed runs ----
  uint64_t expected = 0;
  int fe = 0;
  const double target = g_opt.target_ms / 1000.0;
  uint32_t W = round_w(std::max<double>(c.gran, 16384.0 / c.units), c);
  double t = timed_post(c, W, expected, fe);
  for (int i = 0; i < 6 && fe == 0 && t < 0.4 * target; ++i) {
    const uint32_t W2 = round_w(W * std::min(64.0, target / std::max(t, 2e-5)), c);
    if (W2 <= W) break;
    W = W2;
    t = timed_post(c, W, expected, fe);
  }
  std::vector<double> times;
  if (fe == 0) {
    W = round_w(W * target / std::max(t, 1e-6), c);
    for (int i = 0; i < g_opt.reps && fe == 0; ++i) times.push_back(timed_post(c, W, expected, fe));
  }
  const bool stopped = stop_consumer(c);
  if (!stopped) {
    std::fprintf(stderr, "FATAL: cannot continue with a running retire kernel\n");
    die(3);
  }
  // ---- verify ----
  std::vector<uint8_t> st(nq * kStateStride);
  std::vector<ConsStats> cs(nq);
  std::vector<uint32_t> errs(static_cast<size_t>(c.ctas) * c.tpc);
  unsigned long long posted = 0;
  CK(cudaMemcpyAsync(st.data(), g.states, st.size(), cudaMemcpyDeviceToHost, g.s_cons));
  CK(cudaMemcpyAsync(cs.data(), g.stats, nq * sizeof(ConsStats), cudaMemcpyDeviceToHost, g.s_cons));
  CK(cudaMemcpyAsync(errs.data(), g.err_count, errs.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost, g.s_cons));
  CK(cudaMemcpyAsync(&posted, g.posted, sizeof posted, cudaMemcpyDeviceToHost, g.s_cons));
  CK(cudaMemcpyAsync(&fe, g.first_err, sizeof fe, cudaMemcpyDeviceToHost, g.s_cons));
  if (!wait_done(nullptr, g.s_cons, 10.0, "result readback")) {
    std::fprintf(stderr, "FATAL: result readback did not finish\n");
    die(3);
  }
  std::string why;
  auto fail = [&](const std::string& s) {
    if (!why.empty()) why += "; ";
    why += s;
  };
  uint64_t err_threads = 0, writes = 0, nops = 0, bad = 0, passes = 0, full_passes = 0;
  uint32_t max_backlog = 0;
  for (uint32_t e : errs) err_threads += e != 0;
  if (fe != 0 || err_threads) {
    std::snprintf(buf, sizeof buf, "%llu threads saw errors, first: %s", (unsigned long long)err_threads,
                  decode_err(fe).c_str());
    fail(buf);
  }
  if (posted != expected) {
    std::snprintf(buf, sizeof buf, "posted %llu WQEs, expected %llu", posted, (unsigned long long)expected);
    fail(buf);
  }
  int qp_reports = 0;
  uint32_t warn_qps = 0;
  uint64_t warn_nops = 0;
  for (uint32_t i = 0; i < c.qps; ++i) {
    SqStateT s;
    std::memcpy(&s, st.data() + static_cast<size_t>(i) * kStateStride, sizeof s);
    const ConsStats& x = cs[i];
    writes += x.writes;
    nops += x.nops;
    bad += x.bad;
    passes += x.passes;
    full_passes += x.full_passes;
    max_backlog = std::max(max_backlog, x.max_backlog);
    std::string q;
    if (!x.finished) q += " retire warp did not finish;";
    if (x.timed_out) q += " retire warp hit its deadline;";
    if (x.cq_timeout) q += " retire warp found the CQ full;";
    if (x.bad) {
      std::snprintf(buf, sizeof buf,
                    " %llu malformed WQEs, first at index %llu: opcode 0x%02x wqe_index 0x%04x (expected 0x%04llx) "
                    "ds %u qpn 0x%x;",
                    x.bad, x.first_bad_idx, x.first_bad_w0 & 0xff, (x.first_bad_w0 >> 8) & 0xffff,
                    x.first_bad_idx & 0xffff, x.first_bad_w1 & 0x3f, x.first_bad_w1 >> 8);
      q += buf;
    }
    const uint64_t retired = x.writes + x.nops + x.bad;
    if (s.broken || s.error_status) {
      std::snprintf(buf, sizeof buf, " SqState broken=%u error_status=%d;", s.broken, s.error_status);
      q += buf;
    }
    if (s.ready != s.reserved || s.rung != s.reserved || retired != s.reserved) {
      std::snprintf(buf, sizeof buf, " reserved %llu ready %llu rung %llu retired %llu;",
                    (unsigned long long)s.reserved, (unsigned long long)s.ready, (unsigned long long)s.rung,
                    (unsigned long long)retired);
      q += buf;
    }
    // quiet()'s contract: everything reserved before it completed. Every
    // write was reserved before some quiet() on its QP, so the last write
    // must have completed.
    if (s.completed > s.reserved || s.completed < x.last_write_end) {
      std::snprintf(buf, sizeof buf, " completed %llu, last RDMA write ends at %llu, reserved %llu;",
                    (unsigned long long)s.completed, x.last_write_end, (unsigned long long)s.reserved);
      q += buf;
    } else if (c.sharing == Sharing::Exclusive && s.completed != s.reserved) {
      // An exclusive owner's quiet() posts a NOP only when no WQE at or after
      // its ticket asked for a CQE, and then waits for that NOP. A NOP left
      // uncompleted means SqState::signaled was lower than the last signalled
      // WQE: several threads raised it with plain stores (prepare_*<Exclusive>
      // from every thread of a cooperative batch) and a lower value won.
      ++warn_qps;
      warn_nops += s.reserved - s.completed;
    }
    if (!q.empty() && qp_reports++ < 3) fail("qp " + std::to_string(i) + ":" + q);
  }
  if (warn_qps) {
    std::snprintf(buf, sizeof buf,
                  "on %u QPs quiet() left %llu NOP(s) it posted uncompleted: SqState::signaled under-counted "
                  "(racy plain updates from several threads of a batch)",
                  warn_qps, (unsigned long long)warn_nops);
    r.warn = buf;
  }
  if (qp_reports > 3) fail("(" + std::to_string(qp_reports - 3) + " more QPs with problems)");
  if (writes != posted) {
    std::snprintf(buf, sizeof buf, "retire kernel saw %llu RDMA writes, posters published %llu",
                  (unsigned long long)writes, posted);
    fail(buf);
  }
  if (bad) {
    std::snprintf(buf, sizeof buf, "%llu malformed WQEs", (unsigned long long)bad);
    fail(buf);
  }
  r.ran = true;
  r.verified = why.empty() && !times.empty();
  if (times.empty() && why.empty()) why = "no timed run";
  r.note = why;
  r.nops = nops;
  r.retire_full_pct = passes ? 100.0 * full_passes / passes : 0;
  r.retire_max_backlog = max_backlog;
  r.wqes_per_unit = W;
  r.wqes = static_cast<uint64_t>(c.units) * W;
  r.reps = static_cast<int>(times.size());
  if (!times.empty()) {
    std::vector<double> s = times;
    std::sort(s.begin(), s.end());
    r.seconds = s[s.size() / 2];
    r.mwqe = r.wqes / r.seconds / 1e6;
    r.mwqe_min = r.wqes / s.back() / 1e6;
    r.mwqe_max = r.wqes / s.front() / 1e6;
  }
  return r;
}

// ---- output ---------------------------------------------------------------
std::string fmt_rate(double m) {
  char b[32];
  if (m <= 0) return "-";
  if (m >= 1000) std::snprintf(b, sizeof b, "%.0f", m);
  else if (m >= 10) std::snprintf(b, sizeof b, "%.1f", m);
  else std::snprintf(b, sizeof b, "%.2f", m);
  return b;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      o += ' ';
    } else {
      o += ch;
    }
  }
  return o;
}

void write_outputs() {
  static bool written = false;  // die() may call twice
  if (written) return;
  written = true;
  if (!g_opt.json.empty()) {
    FILE* f = std::fopen(g_opt.json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s: %s\n", g_opt.json.c_str(), std::strerror(errno));
    } else {
      std::fprintf(f, "{\n  \"tool\": \"kinet-post-rate\",\n  \"device\": \"%s\",\n  \"sms\": %d,\n",
                   json_escape(g_device_name).c_str(), g_sms);
      std::fprintf(f,
                   "  \"params\": {\"ring_depth\": %u, \"signal_period\": %u, \"timeout_ms\": %llu, "
                   "\"target_ms\": %.1f, \"reps\": %d, \"warps_per_cta_table\": %u, \"quick\": %s},\n",
                   1u << g_opt.log_depth, g_opt.signal_period, (unsigned long long)g_opt.timeout_ms,
                   g_opt.target_ms, g_opt.reps, g_opt.warps_per_cta, g_opt.quick ? "true" : "false");
      std::fprintf(f, "  \"rows\": [\n");
      for (size_t i = 0; i < g_results.size(); ++i) {
        const Result& r = g_results[i];
        const Config& c = r.cfg;
        std::fprintf(f,
                     "    {\"mode\": \"%s\", \"group\": \"%s\", \"table\": %s, \"sharing\": \"%s\", \"ctas\": %u, "
                     "\"threads_per_cta\": %u, \"qps\": %u, \"qps_used\": %u, \"units\": %u, "
                     "\"wqes_per_unit\": %u, \"wqes\": %llu, \"seconds\": %.9f, \"mwqe_per_s\": %.3f, "
                     "\"mwqe_per_s_min\": %.3f, \"mwqe_per_s_max\": %.3f, \"reps\": %d, \"doorbell_batch\": %u, "
                     "\"quiet_nops\": %llu, \"retire_full_pass_pct\": %.1f, \"retire_max_backlog\": %u, "
                     "\"ran\": %s, \"skipped\": %s, \"verified\": %s, \"note\": \"%s\", "
                     "\"warning\": \"%s\"}%s\n",
                     c.mode.c_str(), c.group.c_str(), c.table ? "true" : "false", sharing_name(c.sharing), c.ctas,
                     c.tpc, c.qps, c.qps_used, c.units, r.wqes_per_unit, (unsigned long long)r.wqes, r.seconds,
                     r.mwqe, r.mwqe_min, r.mwqe_max, r.reps, c.db_batch, (unsigned long long)r.nops,
                     r.retire_full_pct, r.retire_max_backlog, r.ran ? "true" : "false", r.skipped ? "true" : "false", r.verified ? "true" : "false",
                     json_escape(r.note).c_str(), json_escape(r.warn).c_str(), i + 1 < g_results.size() ? "," : "");
      }
      std::fprintf(f, "  ]\n}\n");
      std::fclose(f);
      std::printf("wrote %s (%zu rows)\n", g_opt.json.c_str(), g_results.size());
    }
  }
  if (g_opt.csv || !g_opt.csv_file.empty()) {
    FILE* f = stdout;
    if (!g_opt.csv_file.empty()) {
      f = std::fopen(g_opt.csv_file.c_str(), "w");
      if (!f) {
        std::fprintf(stderr, "cannot write %s: %s\n", g_opt.csv_file.c_str(), std::strerror(errno));
        return;
      }
    }
    std::fprintf(f,
                 "mode,group,sharing,ctas,threads_per_cta,qps,qps_used,wqes,seconds,mwqe_per_s,doorbell_batch,"
                 "verified\n");
    for (const Result& r : g_results) {
      const Config& c = r.cfg;
      std::fprintf(f, "%s,%s,%s,%u,%u,%u,%u,%llu,%.9f,%.3f,%u,%s\n", c.mode.c_str(), c.group.c_str(),
                   sharing_name(c.sharing), c.ctas, c.tpc, c.qps, c.qps_used, (unsigned long long)r.wqes, r.seconds,
                   r.mwqe, c.db_batch, r.skipped ? "skipped" : (r.verified ? "yes" : "NO"));
    }
    if (f != stdout) {
      std::fclose(f);
      std::printf("wrote %s\n", g_opt.csv_file.c_str());
    }
  }
}

void print_row_line(size_t i, size_t n, const Result& r) {
  const Config& c = r.cfg;
  char cfg[128];
  std::snprintf(cfg, sizeof cfg, "%-12s %-9s ctas=%-3u thr=%-4u qps=%-3u db=%-4u", c.mode.c_str(),
                sharing_name(c.sharing), c.ctas, c.tpc, c.qps, c.db_batch);
  if (r.skipped) {
    std::printf("[%3zu/%zu] %s SKIP: %s\n", i + 1, n, cfg, r.note.c_str());
  } else {
    std::printf("[%3zu/%zu] %s W=%-8u %8.3f ms %9s MWQE/s ret %3.0f%%/%-5u %s%s%s%s%s\n", i + 1, n, cfg,
                r.wqes_per_unit, r.seconds * 1e3, fmt_rate(r.mwqe).c_str(), r.retire_full_pct,
                r.retire_max_backlog, r.verified ? "ok" : "FAIL", r.verified ? "" : ": ",
                r.verified ? "" : r.note.c_str(), r.warn.empty() ? "" : " WARNING: ", r.warn.c_str());
  }
  std::fflush(stdout);
}

int print_summary() {
  std::printf("\n==================== kinet-post-rate summary ====================\n");
  std::printf("device: %s, %d SMs; ring depth %u, signal period %u, timed runs %d x ~%.0f ms (median)\n",
              g_device_name.c_str(), g_sms, 1u << g_opt.log_depth, g_opt.signal_period, g_opt.reps,
              g_opt.target_ms);
  std::printf("ret%% = share of the retire kernel's passes that found >= %u WQEs waiting: near 100 means the\n"
              "NIC stand-in, not the posting code, set the pace of that row.\n",
              kChunk);
  std::printf("\n%-12s %-10s %-9s %5s %5s %4s %5s %12s %10s %5s  %s\n", "mode", "group", "sharing", "ctas", "thr",
              "qps", "db", "WQEs/run", "MWQE/s", "ret%", "check");
  int fails = 0, ran = 0;
  for (const Result& r : g_results) {
    if (r.ran && !r.verified) ++fails;
    if (r.ran) ++ran;
    if (r.cfg.table) continue;
    const Config& c = r.cfg;
    std::printf("%-12s %-10s %-9s %5u %5u %4u %5u %12llu %10s %5.0f  %s\n", c.mode.c_str(), c.group.c_str(),
                sharing_name(c.sharing), c.ctas, c.tpc, c.qps, c.db_batch, (unsigned long long)r.wqes,
                fmt_rate(r.mwqe).c_str(), r.retire_full_pct, r.skipped ? "skip" : (r.verified ? (r.warn.empty() ? "ok" : "ok*") : "FAIL"));
  }
  // CTA x QP table
  std::vector<uint32_t> rows, cols;
  for (const Result& r : g_results)
    if (r.cfg.table) {
      if (std::find(rows.begin(), rows.end(), r.cfg.ctas) == rows.end()) rows.push_back(r.cfg.ctas);
      if (std::find(cols.begin(), cols.end(), r.cfg.qps) == cols.end()) cols.push_back(r.cfg.qps);
    }
  if (!rows.empty()) {
    std::sort(rows.begin(), rows.end());
    std::sort(cols.begin(), cols.end());
    std::printf("\nwarp-coop scaling, M WQE/s (rows: CTAs of %u warps; columns: QPs; suffix: e exclusive, "
                "c CTA-shared, g GPU-shared; ! = not verified)\n",
                g_opt.warps_per_cta);
    std::printf("%6s", "CTAs");
    for (uint32_t q : cols) std::printf(" %8u", q);
    std::printf("\n");
    for (uint32_t ct : rows) {
      std::printf("%6u", ct);
      for (uint32_t q : cols) {
        const Result* f = nullptr;
        for (const Result& r : g_results)
          if (r.cfg.table && r.cfg.ctas == ct && r.cfg.qps == q) f = &r;
        if (!f || !f->ran) {
          std::printf(" %8s", f && f->skipped ? "skip" : "-");
          continue;
        }
        const char suf = f->cfg.sharing == Sharing::Exclusive ? 'e' : (f->cfg.sharing == Sharing::Cta ? 'c' : 'g');
        std::string s = fmt_rate(f->mwqe) + suf + (f->verified ? "" : "!");
        std::printf(" %8s", s.c_str());
      }
      std::printf("\n");
    }
  }
  // headline numbers
  const Result* best = nullptr;
  for (const Result& r : g_results)
    if (r.verified && (!best || r.mwqe > best->mwqe)) best = &r;
  std::printf("\n");
  for (const Result& r : g_results)
    if (r.cfg.group == "single" && r.cfg.units == 1 && r.ran)
      std::printf("single thread, doorbell every %u WQE%s: %s M WQE/s%s\n", r.cfg.db_batch,
                  r.cfg.db_batch > 1 ? "s" : "", fmt_rate(r.mwqe).c_str(), r.verified ? "" : " (NOT verified)");
  if (best) {
    std::printf("best whole-GPU rate: %s M WQE/s = %s (%s, %u CTAs x %u threads, %u QPs, doorbell every %u)\n",
                fmt_rate(best->mwqe).c_str(), best->cfg.mode.c_str(), sharing_name(best->cfg.sharing),
                best->cfg.ctas, best->cfg.tpc, best->cfg.qps, best->cfg.db_batch);
    std::printf("goal >= 400 M WQE/s across the GPU: %s\n", best->mwqe >= 400 ? "MET" : "NOT met");
  }
  std::printf("verification: %d of %d configurations ran, %d FAILED%s  (elapsed %.1f s)\n", ran,
              static_cast<int>(g_results.size()), fails,
              fails ? "" : (ran ? " -> PASS" : " -> NOTHING RAN"), elapsed_s());
  for (const Result& r : g_results)
    if (!r.warn.empty())
      std::printf("  WARNING (ok*) %s ctas=%u thr=%u qps=%u: %s\n", r.cfg.mode.c_str(), r.cfg.ctas, r.cfg.tpc,
                  r.cfg.qps, r.warn.c_str());
  if (fails) {
    std::printf("FAIL\n");
    for (const Result& r : g_results)
      if (r.ran && !r.verified)
        std::printf("  FAIL %s ctas=%u thr=%u qps=%u: %s\n", r.cfg.mode.c_str(), r.cfg.ctas, r.cfg.tpc, r.cfg.qps,
                    r.note.c_str());
  }
  return fails;
}

void usage() {
  std::printf(
      "kinet-post-rate: mlx5 WQEs per second built and published by CUDA kernels with kinet's device verbs\n"
      "(rings in GPU memory, doorbells to pinned host memory, a retire kernel playing the NIC; no NIC needed)\n\n"
      "  --quick             small sweep (about 20 configurations)\n"
      "  --json FILE         all rows as JSON (plot: bench/plot_post_rate.py FILE)\n"
      "  --csv[=FILE]        all rows as CSV (stdout, or FILE)\n"
      "  --only WORD         only rows whose mode or group contains WORD (thread-excl, warp-coop, cta-coop,\n"
      "                      thread-cta, thread-gpu, table, whole-gpu, single, ...)\n"
      "  --target-ms MS      length of one timed run (default 40)\n"
      "  --reps N            timed runs per row, median reported (default 3)\n"
      "  --log-depth N       send ring / CQ depth 2^N, 9..15 (default 11)\n"
      "  --signal-period N   CQE every N WQEs, power of two, 8..depth/2 (default 64)\n"
      "  --warps-per-cta N   warps per CTA in the CTA x QP table (default 8)\n"
      "  --timeout-ms MS     bound of every device-side wait (QpHandle::timeout_ns; default 5000)\n"
      "  --max-seconds S     skip the remaining rows after S seconds (default 170)\n"
      "  --device N          CUDA device (default 0)\n"
      "  --dry-run [--sms N] list the sweep without touching a GPU (--fake: also print made-up results)\n"
      "  --inject-bad IDX    self-test: thread-excl rows corrupt QP 0's WQE at ring index IDX; they must FAIL\n"
      "  --cqe-release-gpu   diagnostic: the retire kernel releases CQEs at GPU scope (default: system)\n");
}

bool parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto need = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--quick") g_opt.quick = true;
    else if (a == "--json") g_opt.json = need("--json");
    else if (a == "--csv") g_opt.csv = true;
    else if (a.rfind("--csv=", 0) == 0) g_opt.csv_file = a.substr(6);
    else if (a == "--only") g_opt.only = need("--only");
    else if (a == "--target-ms") g_opt.target_ms = std::atof(need("--target-ms"));
    else if (a == "--reps") g_opt.reps = std::atoi(need("--reps"));
    else if (a == "--log-depth") g_opt.log_depth = static_cast<uint32_t>(std::atoi(need("--log-depth")));
    else if (a == "--signal-period") g_opt.signal_period = static_cast<uint32_t>(std::atoi(need("--signal-period")));
    else if (a == "--warps-per-cta") g_opt.warps_per_cta = static_cast<uint32_t>(std::atoi(need("--warps-per-cta")));
    else if (a == "--timeout-ms") g_opt.timeout_ms = static_cast<uint64_t>(std::atoll(need("--timeout-ms")));
    else if (a == "--max-seconds") g_opt.max_seconds = std::atof(need("--max-seconds"));
    else if (a == "--device") g_opt.device = std::atoi(need("--device"));
    else if (a == "--dry-run") g_opt.dry_run = true;
    else if (a == "--fake") g_opt.fake = true;
    else if (a == "--sms") g_opt.sms_override = std::atoi(need("--sms"));
    else if (a == "--inject-bad") g_opt.inject_idx = std::atoll(need("--inject-bad"));
    else if (a == "--cqe-release-gpu") g_opt.cqe_release_gpu = true;
    else if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    } else {
      std::fprintf(stderr, "unknown option %s (--help lists them)\n", a.c_str());
      return false;
    }
  }
  const uint32_t depth = 1u << std::min<uint32_t>(g_opt.log_depth, 31);
  if (g_opt.log_depth < 9 || g_opt.log_depth > 15) {
    std::fprintf(stderr, "--log-depth must be 9..15 (the retire kernel's 16-bit index arithmetic)\n");
    return false;
  }
  if (g_opt.signal_period < 8 || (g_opt.signal_period & (g_opt.signal_period - 1)) ||
      g_opt.signal_period > depth / 2) {
    std::fprintf(stderr, "--signal-period must be a power of two in 8..%u\n", depth / 2);
    return false;
  }
  if (g_opt.warps_per_cta < 1 || g_opt.warps_per_cta > 32) {
    std::fprintf(stderr, "--warps-per-cta must be 1..32\n");
    return false;
  }
  if (g_opt.reps < 1 || g_opt.target_ms <= 0 || g_opt.timeout_ms < 10) {
    std::fprintf(stderr, "bad --reps / --target-ms / --timeout-ms\n");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (!parse(argc, argv)) return 2;
  if (g_opt.quick) {
    if (g_opt.reps == 3) g_opt.reps = 2;
    if (g_opt.target_ms == 40) g_opt.target_ms = 20;
  }
  if (g_opt.dry_run) {
    g_sms = g_opt.sms_override > 0 ? g_opt.sms_override : 132;
    g_device_name = "dry run (no GPU)";
    const auto sweep = build_sweep();
    std::printf("dry run: %zu configurations for %d SMs\n", sweep.size(), g_sms);
    for (size_t i = 0; i < sweep.size(); ++i) {
      Result r;
      r.cfg = sweep[i];
      if (g_opt.fake) {
        r.ran = r.verified = true;
        r.wqes_per_unit = r.cfg.gran * 64;
        r.wqes = static_cast<uint64_t>(r.cfg.units) * r.wqes_per_unit;
        r.mwqe = r.mwqe_min = r.mwqe_max = 0.5 * r.cfg.units * (r.cfg.kind == Kind::Thread ? 1 : 20);
        r.seconds = r.wqes / (r.mwqe * 1e6);
        r.reps = g_opt.reps;
      } else {
        r.skipped = true;
        r.note = "dry run";
      }
      if (r.cfg.ctas + r.cfg.cons_ctas > static_cast<uint32_t>(g_sms)) {
        r.ran = r.verified = false;
        r.skipped = true;
        r.note = "too many CTAs";
      }
      g_results.push_back(r);
      print_row_line(i, sweep.size(), r);
    }
    write_outputs();
    print_summary();
    return 0;
  }

  // cudaDeviceMapHost must be set before the context exists.
  const cudaError_t fl = cudaSetDeviceFlags(cudaDeviceMapHost);
  if (fl != cudaSuccess && fl != cudaErrorSetOnActiveProcess) fatal_cuda(fl, "cudaSetDeviceFlags", __FILE__, __LINE__);
  int ndev = 0;
  const cudaError_t de = cudaGetDeviceCount(&ndev);
  if (de != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "FATAL: no CUDA device (%s)\n", cudaGetErrorString(de));
    return 2;
  }
  CK(cudaSetDevice(g_opt.device));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, g_opt.device));
  g_device_name = prop.name;
  g_sms = prop.multiProcessorCount;
  if (g_opt.sms_override > 0 && g_opt.sms_override < g_sms) g_sms = g_opt.sms_override;
  int can_map = 0, concurrent = 0, clock_khz = 0;
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, g_opt.device));
  CK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, g_opt.device));
  CK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentKernels, g_opt.device));
  std::printf("kinet-post-rate on %s (sm_%d%d, %d SMs, %.0f MHz), ring depth %u, signal period %u, timeout %llu ms\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount, clock_khz / 1000.0,
              1u << g_opt.log_depth, g_opt.signal_period, (unsigned long long)g_opt.timeout_ms);
  if (!can_map || !concurrent) {
    std::fprintf(stderr, "FATAL: device cannot map host memory (%d) or run kernels concurrently (%d)\n", can_map,
                 concurrent);
    return 2;
  }
  if (prop.major < 7) {
    std::fprintf(stderr, "FATAL: needs sm_70 or newer (independent thread scheduling, st.mmio)\n");
    return 2;
  }

  const auto sweep = build_sweep();
  uint32_t qmax = 1;
  size_t max_threads = 32;
  for (const auto& c : sweep) {
    qmax = std::max(qmax, c.qps);
    max_threads = std::max(max_threads, static_cast<size_t>(c.ctas) * c.tpc);
  }
  alloc_device(qmax, max_threads);
  {  // registers and spills: a posting kernel that spills measures the spill
    struct K {
      const char* name;
      const void* fn;
    } ks[] = {
        {"k_thread<Exclusive>", reinterpret_cast<const void*>(&k_thread<Sharing::Exclusive>)},
        {"k_thread<Cta>", reinterpret_cast<const void*>(&k_thread<Sharing::Cta>)},
        {"k_thread<Gpu>", reinterpret_cast<const void*>(&k_thread<Sharing::Gpu>)},
        {"k_warp<Exclusive>", reinterpret_cast<const void*>(&k_warp<Sharing::Exclusive, false>)},
        {"k_warp<Cta>", reinterpret_cast<const void*>(&k_warp<Sharing::Cta, false>)},
        {"k_warp<Gpu>", reinterpret_cast<const void*>(&k_warp<Sharing::Gpu, false>)},
        {"k_warp<Exclusive,lib>", reinterpret_cast<const void*>(&k_warp<Sharing::Exclusive, true>)},
        {"k_cta", reinterpret_cast<const void*>(&k_cta<false>)},
        {"k_cta<lib>", reinterpret_cast<const void*>(&k_cta<true>)},
        {"k_consumer", reinterpret_cast<const void*>(&k_consumer)},
    };
    std::printf("kernels (registers / local bytes):");
    for (const K& k : ks) {
      cudaFuncAttributes a{};
      CK(cudaFuncGetAttributes(&a, k.fn));
      std::printf(" %s %d/%zu", k.name, a.numRegs, a.localSizeBytes);
    }
    std::printf("\n");
  }
  std::printf("%zu configurations; QPs allocated: %u (%.1f MiB of rings + CQs)\n", sweep.size(), qmax,
              2.0 * qmax * (1u << g_opt.log_depth) * 64 / 1048576.0);

  int fails = 0;
  for (size_t i = 0; i < sweep.size(); ++i) {
    if (elapsed_s() > g_opt.max_seconds) {
      std::printf("time budget of %.0f s used: skipping the remaining %zu configurations\n", g_opt.max_seconds,
                  sweep.size() - i);
      for (size_t j = i; j < sweep.size(); ++j) {
        Result r;
        r.cfg = sweep[j];
        r.skipped = true;
        r.note = "time budget";
        g_results.push_back(r);
      }
      break;
    }
    if (fails >= 3) {
      std::printf("3 configurations failed verification: skipping the remaining %zu\n", sweep.size() - i);
      for (size_t j = i; j < sweep.size(); ++j) {
        Result r;
        r.cfg = sweep[j];
        r.skipped = true;
        r.note = "skipped after 3 failures";
        g_results.push_back(r);
      }
      break;
    }
    Result r = run_config(sweep[i]);
    if (r.ran && !r.verified) ++fails;
    g_results.push_back(r);
    print_row_line(i, sweep.size(), r);
  }
  write_outputs();  // before the summary: the summary must be the last thing printed
  const int nfail = print_summary();
  std::fflush(stdout);
  const bool any_ran = std::any_of(g_results.begin(), g_results.end(), [](const Result& r) { return r.ran; });
  return (nfail || !any_ran) ? 1 : 0;
}
