// kinet-post-rate — the NIC stand-in: a persistent "retire" kernel, one warp
// per QP, that does on the GPU what a ConnectX does with a send queue, minus
// moving data. It polls the QP's doorbell record (send producer index, BE),
// reads the control segment of every announced WQE (checks opcode, WQE index,
// DS count, QP number), and for every WQE that asks for a completion
// (CQ_UPDATE) writes a 64-byte CQE in the PRM layout: bytes 0..59 first, then
// the last word (wqe_counter, signature, op_own) with a system-scope release
// store, the word dev::poll_cq reads with an acquire load. A malformed WQE
// gets an error CQE (syndrome "local QP operation error"). When the CQ looks
// full it re-reads the poster's CQ doorbell record (consumer index, BE).
//
// Reads only what a real NIC reads (QpHandle's rings, doorbell record, CQ and
// CQ doorbell record), never the poster's SqState: kinet's verbs and the bare
// kernel are retired by the same code. Its per-WQE check (wqe_ok) and CQE
// layout (write_cqe) are the device twins of tests/common/fake_ring.hpp's
// FakeRing::opcode/wqe_index/ds and FakeRing::complete, so the two can become
// one host/device header later.
//
// It also reports how often it found a full chunk (kChunk WQEs) waiting:
// near 100% means the stand-in, not the posting code, set the pace.
#pragma once
#include "common.hpp"

namespace kinet::bench {

namespace mlx5 = kinet::mlx5;
using kinet::Scope;
using kinet::detail::bswap16;
using kinet::detail::bswap32;

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

// --ncu mode, no retire kernel: the success CQEs for the first n WQEs of each
// of nqp fresh QPs (one per signal period, for indices P-1, 2P-1, ...),
// written before the posting kernel starts.
__global__ void k_prefill_cq(const kd::QpHandle* qps, uint32_t nqp, uint32_t n) {
  for (uint32_t qi = blockIdx.x; qi < nqp; qi += gridDim.x) {
    const kd::QpHandle q = qps[qi];
    const uint32_t P = q.signal_period;
    for (uint32_t k = threadIdx.x; k < n / P; k += blockDim.x) {
      uint4* e = reinterpret_cast<uint4*>(q.cq.cqes + k);
      const uint32_t widx = (k + 1) * P - 1;
      const uint32_t owner = (k >> q.cq.log_n) & 1u;
      e[0] = e[1] = make_uint4(0u, 0u, 0u, 0u);
      e[2] = make_uint4(0u, 0u, 0u, bswap32(kBytes));
      e[3] = make_uint4(0u, 0u, bswap32((static_cast<uint32_t>(mlx5::kOpRdmaWrite) << 24) | (q.qpn & 0xffffffu)),
                        static_cast<uint32_t>(bswap16(static_cast<uint16_t>(widx & 0xffffu))) |
                            (((static_cast<uint32_t>(mlx5::kCqeReq) << 4) | owner) << 24));
    }
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


}  // namespace kinet::bench
