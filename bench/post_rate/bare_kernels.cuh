// kinet-post-rate — the bare baseline: the least a kernel must do to post the
// same WQEs to the same rings, retired by the same NIC stand-in, without
// kinet's device verbs. Per row it has the same launch shape, the same ring
// and CQ, the same 64-byte WQE bytes (RDMA write, CQ_UPDATE on every index
// closing a signal period), the same doorbell target and the same orderings
// a real NIC needs (WQE stores -> fence.acq_rel.gpu -> doorbell record ->
// fence.acq_rel.sys -> st.mmio doorbell; CQE tail read with ld.acquire.sys;
// CQ doorbell record written with a system-scope release after each drain).
// What it leaves out is bookkeeping: an exclusive owner keeps its counters in
// registers and writes them to SqState once per launch (so the host checks
// both kinds of run the same way); a shared QP is posted a warp at a time
// (one reservation atomic and one in-order publish per 32 WQEs, the doorbell
// rung by the warp that holds the publish order, so no doorbell lock).
// The difference kinet / bare is what kinet's verbs cost; see bench/OPTIMIZE.md.
#pragma once
#include "common.hpp"

namespace kinet::bench {

namespace mlx5 = kinet::mlx5;
using kinet::Scope;
using kinet::Status;
using kinet::detail::bswap16;
using kinet::detail::bswap32;
using kinet::detail::bswap64;

__device__ __forceinline__ void bare_err(const PostParams& p, uint32_t& nerr, Status st, int where) {
  ++nerr;
  atomicCAS(p.first_err, 0, (where << 16) | static_cast<int>(st));
}

__device__ __forceinline__ uint4 split64(uint64_t a, uint64_t b) {
  return make_uint4(static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32), static_cast<uint32_t>(b),
                    static_cast<uint32_t>(b >> 32));
}

// The bytes prepare_write writes for ring index idx (kinet_kernels.cuh's prep):
// control, remote-address and data segments, 16 zero bytes; streaming stores.
__device__ __forceinline__ void bare_write_wqe(const kd::QpHandle& q, uint64_t idx, bool signal) {
  const uint64_t off = (idx & 0xfffu) << 6;
  const uint32_t fm = signal ? static_cast<uint32_t>(mlx5::kCtrlCqUpdate) << 24 : 0u;
  uint4* d = reinterpret_cast<uint4*>(q.sq + static_cast<size_t>(idx & (q.size() - 1u)) * mlx5::kSendWqeBB);
  __stcs(d + 0, make_uint4(bswap32((static_cast<uint32_t>(idx & 0xffffu) << 8) | mlx5::kOpRdmaWrite),
                           q.qpn_be8 | (3u << 24), fm, 0u));
  const uint64_t rbe = bswap64(kRaddr + off);
  __stcs(d + 1, make_uint4(static_cast<uint32_t>(rbe), static_cast<uint32_t>(rbe >> 32), kRkeyBe, 0u));
  const uint64_t lbe = bswap64(kLaddr + off);
  __stcs(d + 2, make_uint4(bswap32(kBytes), kLkeyBe, static_cast<uint32_t>(lbe), static_cast<uint32_t>(lbe >> 32)));
  __stcs(d + 3, make_uint4(0u, 0u, 0u, 0u));
}

// A NOP that asks for a CQE (what quiet() posts when no WQE at or after its
// ticket is signalled).
__device__ __forceinline__ void bare_write_nop(const kd::QpHandle& q, uint64_t idx) {
  uint4* d = reinterpret_cast<uint4*>(q.sq + static_cast<size_t>(idx & (q.size() - 1u)) * mlx5::kSendWqeBB);
  __stcs(d + 0, make_uint4(bswap32((static_cast<uint32_t>(idx & 0xffffu) << 8) | mlx5::kOpNop),
                           q.qpn_be8 | (1u << 24), static_cast<uint32_t>(mlx5::kCtrlCqUpdate) << 24, 0u));
  __stcs(d + 1, make_uint4(0u, 0u, 0u, 0u));
  __stcs(d + 2, make_uint4(0u, 0u, 0u, 0u));
  __stcs(d + 3, make_uint4(0u, 0u, 0u, 0u));
}

// Announces ring indices below pi: the WQEs (this thread's, or ordered before
// it by __syncwarp/__syncthreads/an acquire) before the doorbell record, which
// the stand-in reads with a GPU-scope acquire; the record before the doorbell
// word, which crosses PCIe.
// dbrec_release (--bare-dbrec-release, an experiment for bench/OPTIMIZE.md):
// the record as one st.release.gpu instead of fence.acq_rel.gpu + relaxed
// store, the same ordering for a GPU-scope reader without the L1 invalidation.
__device__ __forceinline__ void bare_ring(const kd::QpHandle& q, uint64_t pi, bool dbrec_release) {
  const uint32_t rec = bswap32(static_cast<uint32_t>(pi) & 0xffffu);
  if (dbrec_release) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(q.dbrec + mlx5::kSendDbrIndex), "r"(rec) : "memory");
  } else {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    asm volatile("st.relaxed.sys.global.b32 [%0], %1;" ::"l"(q.dbrec + mlx5::kSendDbrIndex), "r"(rec) : "memory");
  }
  asm volatile("fence.acq_rel.sys;" ::: "memory");
  asm volatile("st.mmio.relaxed.sys.global.b64 [%0], %1;" ::"l"(q.db),
               "l"(mlx5::doorbell_word(static_cast<uint32_t>(pi), q.qpn_be8))
               : "memory");
}

// An exclusive owner's counters, in registers during a launch.
struct BareQ {
  uint64_t pi = 0;         // next ring index
  uint64_t completed = 0;  // every WQE below has completed
  uint64_t sig = 0;        // 1 + highest index signalled on request (the periodic ones follow from pi)
  uint64_t rung = 0;       // announced up to here
  uint32_t cq_ci = 0;      // CQEs consumed
};
__device__ __forceinline__ BareQ bare_load(const SqStateT* s) {
  BareQ b;
  b.pi = s->reserved;
  b.completed = s->completed;
  b.sig = s->signaled;
  b.rung = s->rung;
  b.cq_ci = s->cq_ci;
  return b;
}
// Written back once per launch in SqState's layout, so the host's checks
// (reserved == ready == rung == retired, completed) cover bare runs too.
__device__ __forceinline__ void bare_store(SqStateT* s, const BareQ& b) {
  s->reserved = b.pi;
  s->ready = b.pi;
  s->rung = b.rung;
  s->completed = b.completed;
  s->signaled = b.sig;
  s->cq_ci = b.cq_ci;
}

// Drains the CQEs the stand-in handed over (acquire of each tail word), then
// tells it with one release store of the CQ doorbell record. Returns the
// status of an error CQE, Ok otherwise.
__device__ __forceinline__ Status bare_poll(const kd::QpHandle& q, uint64_t& completed, uint32_t& cq_ci) {
  const uint32_t log_n = q.cq.log_n, mask = (1u << log_n) - 1u;
  uint32_t ci = cq_ci;
  Status st = Status::Ok;
  for (;;) {
    const mlx5::Cqe64* e = q.cq.cqes + (ci & mask);
    const uint32_t tail = kinet::load_acquire<Scope::System>(
        reinterpret_cast<uint32_t*>(const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(e)) + 60));
    const uint8_t op_own = static_cast<uint8_t>(tail >> 24);
    const uint8_t opc = mlx5::cqe_opcode(op_own);
    if (opc == mlx5::kCqeInvalid || mlx5::cqe_owner(op_own) != mlx5::cqe_sw_owner(ci, log_n)) break;
    if ((opc == mlx5::kCqeReqErr || opc == mlx5::kCqeRespErr) && st == Status::Ok)
      st = mlx5::status_from_syndrome(reinterpret_cast<const mlx5::ErrCqe*>(e)->syndrome);
    const uint16_t wc = bswap16(static_cast<uint16_t>(tail & 0xffffu));
    completed = completed + static_cast<uint16_t>(wc - static_cast<uint16_t>(completed)) + 1u;
    ++ci;
  }
  if (ci != cq_ci) {
    cq_ci = ci;
    kinet::store_release<Scope::System>(&q.cq.dbrec[mlx5::kCqDbrConsumerIndex], bswap32(ci & 0xffffffu));
  }
  return st;
}

// Exclusive: waits (bounded) until n more slots are free.
__device__ __forceinline__ bool bare_space(const kd::QpHandle& q, BareQ& b, uint32_t n, const PostParams& p,
                                           uint32_t& nerr) {
  if (b.pi + n - b.completed <= q.size()) return true;
  const uint64_t end = kinet::now_ns() + q.timeout_ns;
  for (;;) {
    const Status st = bare_poll(q, b.completed, b.cq_ci);
    if (st != Status::Ok) {
      bare_err(p, nerr, st, kWherePoll);
      return false;
    }
    if (b.pi + n - b.completed <= q.size()) return true;
    if (kinet::now_ns() > end) {
      bare_err(p, nerr, Status::TimeoutSqSpace, kWhereReserve);
      return false;
    }
  }
}

// Exclusive quiet: a signalled NOP when nothing at or after the last index
// asks for a CQE, a doorbell for what is not announced, then a bounded wait.
__device__ __forceinline__ void bare_quiet(const kd::QpHandle& q, BareQ& b, const PostParams& p, uint32_t& nerr) {
  if (b.completed >= b.pi) return;
  const uint64_t periodic = b.pi & ~static_cast<uint64_t>(q.signal_period - 1u);
  if (b.sig < b.pi && periodic < b.pi) {
    if (!bare_space(q, b, 1, p, nerr)) return;
    bare_write_nop(q, b.pi);
    b.sig = ++b.pi;
  }
  if (b.rung != b.pi) {
    bare_ring(q, b.pi, p.bare_dbrec_release != 0);
    b.rung = b.pi;
  }
  const uint64_t end = kinet::now_ns() + q.timeout_ns;
  while (b.completed < b.pi) {
    const Status st = bare_poll(q, b.completed, b.cq_ci);
    if (st != Status::Ok) {
      bare_err(p, nerr, st, kWherePoll);
      return;
    }
    if (kinet::now_ns() > end) {
      bare_err(p, nerr, Status::TimeoutCompletion, kWhereQuiet);
      return;
    }
  }
}

// ---- thread-excl: every thread owns QP gtid ---------------------------------
template <bool kInject = false>
__global__ void __launch_bounds__(1024, 1) b_thread(PostParams p) {
  const uint32_t gtid = blockIdx.x * blockDim.x + threadIdx.x;
  const kd::QpHandle q = p.qps[gtid];
  uint32_t nerr = 0;
  unsigned long long posted = 0;
  const uint32_t B = p.db_batch, P = q.signal_period;
  BareQ b = bare_load(q.state);
  for (uint32_t k = 0; k < p.per_unit; ++k) {
    if (!bare_space(q, b, 1, p, nerr)) break;
    const uint64_t i = b.pi++;
    const bool sig = ((i + 1) & (P - 1u)) == 0;
    bare_write_wqe(q, i, sig);
    if constexpr (kInject) {
      if (gtid == 0 && i == p.inject_idx) {  // a SEND: the stand-in must reject it
        uint32_t* w0 = reinterpret_cast<uint32_t*>(q.sq + static_cast<size_t>(i & (q.size() - 1u)) * 64u);
        *w0 = bswap32((bswap32(*w0) & ~0xffu) | mlx5::kOpSend);
      }
    }
    ++posted;
    if (B <= 1 || ((i + 1) & (B - 1u)) == 0) {
      bare_ring(q, b.pi, p.bare_dbrec_release != 0);
      b.rung = b.pi;
    }
  }
  bare_quiet(q, b, p, nerr);
  bare_store(q.state, b);
  if (posted) atomicAdd(p.posted, posted);
  p.err_count[gtid] += nerr;
}

// ---- warp-coop, exclusive: warp w owns QPs w, w + nw, ... --------------------
__global__ void __launch_bounds__(1024, 1) b_warp(PostParams p) {
  const uint32_t lane = threadIdx.x & 31u;
  const uint32_t wpc = blockDim.x >> 5;
  const uint32_t gw = blockIdx.x * wpc + (threadIdx.x >> 5);
  const uint32_t nw = gridDim.x * wpc;
  const uint32_t m = gw < p.nqp ? (p.nqp - gw + nw - 1) / nw : 0;
  const uint32_t nb = m ? p.per_unit / 32u : 0;
  uint32_t nerr = 0;
  unsigned long long posted = 0;
  kd::QpHandle q = p.qps[gw < p.nqp ? gw : 0];
  const uint32_t P = q.signal_period;
  BareQ b;
  if (lane == 0 && m) b = bare_load(q.state);
  for (uint32_t bi = 0; bi < nb; ++bi) {
    if (m > 1 && bi > 0) {  // several QPs per warp: counters follow the QP (lane 0 only)
      if (lane == 0) bare_store(q.state, b);
      q = p.qps[gw + (bi % m) * nw];
      if (lane == 0) b = bare_load(q.state);
    }
    int ok = 1;
    uint64_t first = 0;
    if (lane == 0) {
      ok = bare_space(q, b, 32u, p, nerr) ? 1 : 0;
      first = b.pi;
    }
    ok = __shfl_sync(kFull, ok, 0);
    if (!ok) break;  // warp-uniform
    first = __shfl_sync(kFull, first, 0);
    const uint64_t i = first + lane;
    bare_write_wqe(q, i, ((i + 1) & (P - 1u)) == 0);
    __syncwarp();  // every lane's WQE stores before lane 0's fences
    if (lane == 0) {
      b.pi = first + 32u;
      bare_ring(q, b.pi, p.bare_dbrec_release != 0);
      b.rung = b.pi;
    }
    posted += 32u;
  }
  __syncwarp();
  if (lane == 0 && m) {
    if (m > 1) bare_store(q.state, b);
    for (uint32_t j = 0; j < m; ++j) {
      if (m > 1) {
        q = p.qps[gw + j * nw];
        b = bare_load(q.state);
      }
      bare_quiet(q, b, p, nerr);
      bare_store(q.state, b);
    }
    if (posted) atomicAdd(p.posted, posted);
  }
  p.err_count[blockIdx.x * blockDim.x + threadIdx.x] += nerr;
}

// ---- cta-coop: one QP per CTA, blockDim WQEs per batch ----------------------
__global__ void __launch_bounds__(1024, 1) b_cta(PostParams p) {
  __shared__ unsigned long long s_first;
  __shared__ int s_ok;
  const uint32_t tid = threadIdx.x, n = blockDim.x;
  const kd::QpHandle q = p.qps[blockIdx.x % p.nqp];
  const uint32_t P = q.signal_period;
  uint32_t nerr = 0;
  unsigned long long posted = 0;
  BareQ b;
  if (tid == 0) b = bare_load(q.state);
  const uint32_t nb = p.per_unit / n;
  for (uint32_t bi = 0; bi < nb; ++bi) {
    if (tid == 0) {
      s_ok = bare_space(q, b, n, p, nerr) ? 1 : 0;
      s_first = b.pi;
    }
    __syncthreads();
    if (!s_ok) break;  // CTA-uniform
    const uint64_t first = s_first;
    const uint64_t i = first + tid;
    bare_write_wqe(q, i, ((i + 1) & (P - 1u)) == 0);
    __syncthreads();  // every WQE store of the CTA before thread 0's fences; s_first/s_ok reusable
    if (tid == 0) {
      b.pi = first + n;
      bare_ring(q, b.pi, p.bare_dbrec_release != 0);
      b.rung = b.pi;
    }
    posted += n;
  }
  __syncthreads();
  if (tid == 0) {
    bare_quiet(q, b, p, nerr);
    bare_store(q.state, b);
    if (posted) atomicAdd(p.posted, posted);
  }
  p.err_count[blockIdx.x * blockDim.x + tid] += nerr;
}

// ---- shared QPs, warp-aggregated -------------------------------------------
// Lane 0 of each warp reserves 32 slots with one atomic, all lanes write, lane
// 0 waits for its turn (ready == first), rings while it holds the turn (so
// doorbells go out in order without a lock) and hands the turn on with a
// release store of ready. One doorbell per warp batch (32 WQEs): rows with a
// doorbell every 1 WQE get one per 32 here. CQ draining: whoever takes cq_lock. kWarpUnit: the
// row's unit is a warp posting per_unit WQEs (warp-coop rows); otherwise a
// thread posting per_unit WQEs (thread-cta / thread-gpu rows: a warp of such
// threads posts 32 per round).
// Slots [first, first + n) are free once completed reaches this.
__device__ __forceinline__ uint64_t space_need(uint64_t first, uint32_t n, uint32_t size) {
  return first + n > size ? first + n - size : 0;
}

// Drains the CQ if no other thread is doing it.
template <Sharing S> __device__ __forceinline__ Status shared_poll(const kd::QpHandle& q) {
  constexpr Scope sc = kd::kScope<S>;
  SqStateT* s = q.state;
  if (!kinet::try_lock<sc>(&s->cq_lock)) return Status::Ok;
  uint64_t comp = s->completed;
  uint32_t ci = s->cq_ci;
  const Status st = bare_poll(q, comp, ci);
  s->cq_ci = ci;
  kinet::store_release<sc>(&s->completed, comp);
  kinet::unlock<sc>(&s->cq_lock);
  return st;
}

// Waits (bounded) until completed >= need.
template <Sharing S>
__device__ __forceinline__ bool shared_wait_completed(const kd::QpHandle& q, uint64_t need, Status on_timeout,
                                                      int where, const PostParams& p, uint32_t& nerr) {
  constexpr Scope sc = kd::kScope<S>;
  if (kinet::load_acquire<sc>(&q.state->completed) >= need) return true;
  const uint64_t end = kinet::now_ns() + q.timeout_ns;
  for (;;) {
    const Status st = shared_poll<S>(q);
    if (st != Status::Ok) {
      bare_err(p, nerr, st, kWherePoll);
      return false;
    }
    if (kinet::load_acquire<sc>(&q.state->completed) >= need) return true;
    if (kinet::now_ns() > end) {
      bare_err(p, nerr, on_timeout, where);
      return false;
    }
    __nanosleep(32);
  }
}

// Lane 0: waits for the turn (ready == first), records a requested CQE
// (sig_end, 0 = none; the periodic ones follow from `ready`), rings when
// asked, hands the turn on.
template <Sharing S>
__device__ __forceinline__ bool shared_publish(const kd::QpHandle& q, uint64_t first, uint32_t n, uint64_t sig_end,
                                               bool ring, const PostParams& p, uint32_t& nerr) {
  constexpr Scope sc = kd::kScope<S>;
  SqStateT* s = q.state;
  if (kinet::load_acquire<sc>(&s->ready) != first) {
    const uint64_t end = kinet::now_ns() + q.timeout_ns;
    while (kinet::load_acquire<sc>(&s->ready) != first) {
      if (kinet::now_ns() > end) {
        bare_err(p, nerr, Status::TimeoutPublishOrder, kWherePublish);
        return false;
      }
      __nanosleep(32);
    }
  }
  // Holding the turn: every earlier WQE is published (acquire above), so the
  // doorbell may announce everything below first + n; no doorbell lock.
  if (sig_end) kinet::store_relaxed<sc>(&s->signaled, sig_end);
  if (ring) {
    bare_ring(q, first + n, p.bare_dbrec_release != 0);
    kinet::store_relaxed<sc>(&s->rung, first + n);
  }
  kinet::store_release<sc>(&s->ready, first + n);
  return true;
}

template <Sharing S, bool kWarpUnit>
__global__ void __launch_bounds__(1024, 1) b_shared(PostParams p) {
  constexpr Scope sc = kd::kScope<S>;
  const uint32_t lane = threadIdx.x & 31u;
  const uint32_t gtid = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t gw = gtid >> 5;
  uint32_t qi;
  if (p.map == kMapCta) qi = blockIdx.x % p.nqp;
  else if (p.map == kMapWarp) qi = gw % p.nqp;
  else qi = gw / p.warps_per_qp;  // kMapWarpGroup
  const bool active = qi < p.nqp;
  const kd::QpHandle q = p.qps[active ? qi : 0];
  const uint32_t P = q.signal_period;
  const uint32_t rounds = active ? (kWarpUnit ? p.per_unit / 32u : p.per_unit) : 0;
  uint32_t nerr = 0;
  unsigned long long posted = 0;
  uint64_t last_end = 0;  // lane 0: 1 + this warp's last index
  for (uint32_t r = 0; r < rounds; ++r) {
    int ok = 1;
    uint64_t first = 0;
    if (lane == 0) {
      first = kinet::fetch_add_relaxed<sc>(&q.state->reserved, uint64_t{32});
      ok = shared_wait_completed<S>(q, space_need(first, 32u, q.size()), Status::TimeoutSqSpace, kWhereReserve, p, nerr);
    }
    ok = __shfl_sync(kFull, ok, 0);
    if (!ok) break;  // warp-uniform
    first = __shfl_sync(kFull, first, 0);
    const uint64_t i = first + lane;
    bare_write_wqe(q, i, ((i + 1) & (P - 1u)) == 0);
    __syncwarp();  // the lanes' WQE stores before lane 0's release of ready
    if (lane == 0) {
      // One doorbell per warp batch whatever B: a batch left unannounced
      // could hold back the completions a later warp waits for.
      ok = shared_publish<S>(q, first, 32u, 0, true, p, nerr) ? 1 : 0;
      last_end = first + 32u;
    }
    ok = __shfl_sync(kFull, ok, 0);
    if (!ok) break;
    posted += 32u;
  }
  __syncwarp();
  if (lane == 0 && last_end) {  // quiet: this warp's WQEs have completed
    SqStateT* s = q.state;
    bool ok = true;
    if (kinet::load_relaxed<sc>(&s->signaled) < last_end) {
      // Nothing at or after our last index asks for a CQE (yet): a signalled NOP.
      const uint64_t f = kinet::fetch_add_relaxed<sc>(&s->reserved, uint64_t{1});
      ok = shared_wait_completed<S>(q, space_need(f, 1u, q.size()), Status::TimeoutSqSpace, kWhereQuiet, p, nerr);
      if (ok) {
        bare_write_nop(q, f);
        ok = shared_publish<S>(q, f, 1u, f + 1u, true, p, nerr);
      }
    }
    if (ok) shared_wait_completed<S>(q, last_end, Status::TimeoutCompletion, kWhereQuiet, p, nerr);
  }
  if (lane == 0 && posted) atomicAdd(p.posted, posted);
  p.err_count[gtid] += nerr;
}

}  // namespace kinet::bench
