// kinet emu — the engine's pipelined execution for a QP whose peer is in
// another process (see the top of engine.cpp and fabric/remote_fabric.hpp).
#include <algorithm>

#include "fabric/remote_fabric.hpp"
#include "fabric/wire.hpp"
#include "providers/emu/engine_runner.hpp"

namespace kinet::emu::engine {

// One pass over a QP whose peer is in another process (see the top of
// engine.cpp). Returns true if anything happened. Caller holds qp.exec_mu.
// The Requests a pass starts leave together when it ends (RemotePeer::start:
// one send(2) for all the WQEs one doorbell announced, not one per WQE).
//
// Corking: a pass that started no Request of a signalled WQE (nobody polls
// for the completion of the others) while an answer of this QP is on its way
// leaves its Requests queued: the oldest unanswered Request sent without
// kAckLater has left, and a responder never holds such an answer back. The
// first pass after it arrives, or the next one that starts a Request of a
// signalled WQE (or a quiet's Flush), sends them all. A poster that rings a
// doorbell per WQE then costs a send(2) per round trip, not one per WQE. A
// pass that corks counts as work, so the engine thread keeps looking (no
// idle sleep) until the answer is in: a poster that polls memory, not its
// CQ, waits a round trip at most while the engine thread is busy (up to
// KINET_EMU_KICKED_IDLE_US more when its QPs are all kicked by posters and it
// rests; waking it from a corking pass cost more than it saved: write_bw
// and read_bw with a doorbell per WQE fell by a third). Only a deep pipeline
// corks (kCorkMinWindow WQEs in flight or more): a ping-pong, with one or
// two, sends at once and keeps its latency.
bool QpRunner::step_remote() {
  bool corked = false;
  {
    struct FlushAtEnd {
      QpRunner& r;
      bool& corked;
      ~FlushAtEnd() {
        const auto& u = r.qp_.urgent_seqs;
        const bool cork = !r.signaled_started_ && r.qp_.window.size() >= kCorkMinWindow && !u.empty() &&
                          u.front() <= r.qp_.peer->sent_through() && r.state() != QpState::Error;
        if (!cork) r.qp_.peer->flush();
        else corked = r.qp_.peer->has_queued();  // something waits: keep looking
      }
    } flush_at_end{*this, corked};
    if (pass_remote()) return true;
  }
  return corked;
}

bool QpRunner::pass_remote() {
  bool work = take_doorbell();
  for (;;) {
    if (state() == QpState::Error) {
      if (!flush_window()) return true;
      qp_.remote_out_bytes = 0;  // answers still due are dropped with their WQEs
      qp_.urgent_seqs.clear();
      while (qp_.sq_ci < qp_.sq_announced) {
        if (!flush_cqe(qp_.sq_ci, slot_opcode(qp_.sq_ci))) return true;
        ++qp_.sq_ci;
        work = true;
      }
      return work;
    }
    // Answers, in WQE order; nothing lands behind a WQE that failed. A QP's
    // Requests travel on one link and are answered in order (held answers
    // too), so once a WQE waits for an answer the later ones do: the walk
    // stops there instead of visiting the whole window on every pass (up to
    // kRemoteWindow WQEs; a posting thread runs a pass per doorbell).
    for (size_t i = 0; i < qp_.window.size(); ++i) {
      InFlight& e = qp_.window[i];
      work |= reap(e);
      if (e.fault_syndrome || e.reaped < e.sent) break;
    }
    while (!qp_.window.empty() && finished(qp_.window.front())) {
      if (!retire_remote_front()) return true;
      work = true;
      if (state() == QpState::Error) break;
    }
    if (state() == QpState::Error) continue;
    // The newest WQE may still have Requests to send.
    if (!qp_.window.empty()) {
      InFlight& b = qp_.window.back();
      work |= pump(b);
      if (b.sent < b.chunks.size() && !b.fault_syndrome) return work;
    }
    if (qp_.sq_ci >= qp_.sq_announced || qp_.window.size() >= kRemoteWindow) return work;
    // Issue the next WQE.
    InFlight& e = qp_.window.next();  // pushed below, or left for the next WQE
    e.reuse();
    e.idx = qp_.sq_ci;
    read_slot(e.idx, e.bb);
    std::string why;
    const bool decoded = decode_send_wqe(e.bb, &e.w, &why);
    Fault f = validate(e, decoded, why);
    MrEntry lmr[2];
    if (!f && e.w.opcode != prm::kNop) f = check_local(e.w, e.w.opcode != prm::kRdmaWrite, lmr);
    if (f) {
      if (!qp_.window.empty()) return work;  // errors complete in WQE order
      if (!complete_error(e.idx, e.w.opcode, e.w.total_len(), f)) return true;
      ++qp_.sq_ci;
      work = true;
      continue;
    }
    const bool reads_local = e.w.opcode == prm::kRdmaWrite && !e.w.is_inline && e.w.nsge > 0;
    if ((e.w.fence || reads_local) && window_has_read_or_atomic()) return work;
    plan(e);
    push_window(e);
    ++qp_.sq_ci;
    work = true;
    pump(e);
  }
}

uint64_t QpRunner::cost(const InFlight::Chunk& c) { return std::max(c.len, kMinChunkCost); }
bool QpRunner::finished(const InFlight& e) {
  return e.reaped == e.sent && (e.sent == e.chunks.size() || e.fault_syndrome);
}
void QpRunner::set_fault(InFlight& e, const Fault& f) {
  if (!e.fault_syndrome) e.fault_syndrome = f.syndrome, e.fault_why = f.why;
}

// The WQE's Requests: one per SGE (or one for inline data / no SGE, and
// one for an atomic), each split at kMaxChunk, remote addresses consecutive.
void QpRunner::plan(InFlight& e) {
  const DecodedWqe& w = e.w;
  if (w.opcode == prm::kNop) {
    // A signalled NOP (quiet) completes after everything before it: the
    // answers of earlier unsignalled WRITEs may be held back by the
    // responder (kAckLater), so when one is still unanswered it asks for
    // them with a Flush (any other answer comes by itself).
    if (!w.signaled) return;
    for (size_t k = 0; k < qp_.window.size(); ++k) {
      const InFlight& x = qp_.window[k];
      for (size_t i = x.reaped; i < x.sent; ++i)
        if (x.chunks[i].call->later) {
          e.chunks.emplace_back();
          return;
        }
    }
    return;
  }
  auto split = [&](int sge, uint64_t len, uint64_t raddr) {
    uint64_t off = 0;
    do {
      InFlight::Chunk c;
      c.sge = sge;
      c.sge_off = off;
      c.raddr = raddr + off;
      c.len = std::min<uint64_t>(len - off, fabric::kMaxChunk);
      e.chunks.push_back(std::move(c));
      off += e.chunks.back().len;
    } while (off < len);
    return raddr + len;
  };
  if (w.is_atomic()) {
    split(0, 8, w.raddr);
  } else if (w.opcode == prm::kRdmaWrite && (w.is_inline || w.nsge == 0)) {
    split(-1, w.inline_len, w.raddr);
  } else if (w.nsge == 0) {  // READ of nothing
    split(-1, 0, w.raddr);
  } else {
    uint64_t raddr = w.raddr;
    for (int i = 0; i < w.nsge; ++i) raddr = split(i, w.sge[i].len, raddr);
  }
}

// Sends the WQE's next Requests while the QP's budget allows (at least one
// when nothing is outstanding). A WRITE's payload is read here, under the
// guard and after checking its keys again.
bool QpRunner::pump(InFlight& e) {
  bool any = false;
  // The WRITE payload's staging copy, kept per engine thread: a fresh vector
  // per call cost an allocation, a zero-fill and page faults per chunk.
  thread_local std::vector<uint8_t> payload;
  // A large WRITE from host memory leaves from the region itself (send(2)
  // reads it: one copy fewer per byte), with the batch; the guard stays held
  // until start() has queued it, so a deregistration (drain_memory) either
  // sees it queued and sends it before it returns, or finds the key gone.
  std::shared_lock<std::shared_mutex> sending;
  while (e.sent < e.chunks.size() && !e.fault_syndrome &&
         (qp_.remote_out_bytes == 0 || qp_.remote_out_bytes + cost(e.chunks[e.sent]) <= kRemoteOutBytes)) {
    InFlight::Chunk& c = e.chunks[e.sent];
    const DecodedWqe& w = e.w;
    fabric::Request rq;
    rq.from_node = nic_.node;
    rq.from_qpn = qp_.qpn;
    rq.to_node = qp_.remote_node;
    rq.to_qpn = qp_.remote_qpn;
    rq.raddr = c.raddr;
    rq.rkey = w.rkey;
    rq.len = c.len;
    RemotePeer::Payload life = RemotePeer::Payload::UntilReturn;
    switch (w.opcode) {
      case prm::kNop:
        rq.kind = fabric::OpKind::Flush;
        rq.raddr = rq.rkey = 0;
        rq.len = 0;
        break;
      case prm::kRdmaWrite:
        rq.kind = fabric::OpKind::Write;
        // Nobody waits for an unsignalled WRITE's answer: the responder may
        // batch it (wire.hpp, kAckLater), unless the budget is half spent and
        // answers must come back to refill it.
        if (!w.signaled && qp_.remote_out_bytes + cost(c) <= kRemoteOutBytes / 2) rq.flags = fabric::kAckLater;
        if (c.sge < 0) {
          rq.payload = e.bb + prm::kSeg2 + prm::kInlineHeader + c.sge_off;
        } else {
          MrEntry lmr[2];
          std::shared_lock<std::shared_mutex> g(memory_guard());
          Fault f = check_local(w, false, lmr);  // still registered under the guard
          const auto* src = reinterpret_cast<const uint8_t*>(w.sge[c.sge].addr + c.sge_off);
          // In place only where start() sends the payload by itself, from
          // where it is, through the kernel (a smaller one is copied into a
          // batch, and a shm link copies it into its ring, with memcpy: an
          // unmapped page would crash them).
          const bool in_place = lmr[c.sge].kind == MemoryKind::Host && c.len >= RemotePeer::kGatherBytes &&
                                qp_.peer->payload_in_place();
          if (!f && in_place) {
            if (CopyResult r = probe_source(src, c.len)) f = local_copy_fault(r);
          } else if (!f) {
            if (payload.size() < c.len) payload.resize(c.len);
            if (CopyResult r = safe_copy(payload.data(), MemoryKind::Host, src, lmr[c.sge].kind, c.len))
              f = local_copy_fault(r);
          }
          if (f) {
            set_fault(e, f);
            break;
          }
          rq.payload = in_place ? src : payload.data();
          if (in_place) {
            sending = std::move(g);
            life = RemotePeer::Payload::UntilSent;  // deregistration sends it first (drain_memory)
          }
        }
        break;
      case prm::kRdmaRead:
        rq.kind = fabric::OpKind::Read;
        break;
      default:
        rq.kind = w.opcode == prm::kAtomicFa ? fabric::OpKind::FetchAdd : fabric::OpKind::CompareSwap;
        rq.operand = w.swap_add;
        rq.compare = w.opcode == prm::kAtomicFa ? 0 : w.compare;
    }
    if (e.fault_syndrome) break;
    c.call = qp_.peer->start(rq, life);
    if (sending.owns_lock()) sending.unlock();
    c.urgent = !(rq.flags & fabric::kAckLater);
    if (c.urgent) qp_.urgent_seqs.push_back(c.call->seq);
    if (w.signaled) signaled_started_ = true;  // a quiet's Flush too: only a signalled NOP sends one
    qp_.remote_out_bytes += cost(c);
    ++e.sent;
    any = true;
  }
  return any;
}

// Takes the WQE's answers that arrived, in order: the first error is kept;
// READ data and atomic old values land in local memory (keys checked again
// under the guard: a region deregistered meanwhile is a local protection
// error, never a write into freed memory).
bool QpRunner::reap(InFlight& e) {
  bool any = false;
  while (e.reaped < e.sent) {
    InFlight::Chunk& c = e.chunks[e.reaped];
    if (!c.call->done.load(std::memory_order_acquire)) break;
    const Call& a = *c.call;
    qp_.remote_out_bytes -= std::min(qp_.remote_out_bytes, cost(c));
    if (c.urgent && !qp_.urgent_seqs.empty()) qp_.urgent_seqs.pop_front();  // answers come in order
    if (e.fault_syndrome) {
      // an earlier chunk failed: later answers are dropped
    } else if (a.lost) {
      set_fault(e, {prm::kSynTransportRetry, "peer emu node " + hex(qp_.remote_node) + " at " +
                                                 qp_.peer->endpoint() + " lost: " + a.why});
    } else if (a.syndrome) {
      set_fault(e, {a.syndrome, a.why});
    } else if (e.w.opcode == prm::kRdmaRead || e.w.is_atomic()) {
      set_fault(e, land(e, c, a));
    }
    qp_.peer->recycle(std::move(c.call));  // its frame and itself, for reuse
    ++e.reaped;
    any = true;
  }
  return any;
}

Fault QpRunner::land(const InFlight& e, const InFlight::Chunk& c, const Call& a) {
  const DecodedWqe& w = e.w;
  const bool atomic = w.is_atomic();
  if (!atomic && a.len != c.len)
    return {prm::kSynRemoteOp, "peer answered " + std::to_string(a.len) + " bytes for a READ of " +
                                   std::to_string(c.len)};
  if (c.sge < 0 || c.len == 0) return {};
  MrEntry lmr[2];
  std::shared_lock<std::shared_mutex> g(memory_guard());
  if (Fault f = check_local(w, true, lmr)) return f;
  void* dst = reinterpret_cast<void*>(w.sge[c.sge].addr + c.sge_off);
  // The old value lands in the requester's buffer, host byte order.
  const CopyResult r = atomic ? safe_copy(dst, lmr[c.sge].kind, &a.old_value, MemoryKind::Host, 8)
                              : safe_copy(dst, lmr[c.sge].kind, a.data, MemoryKind::Host, c.len);
  if (r) return local_copy_fault(r);
  return {};
}

// Completes the oldest WQE once all its answers are in. False when its CQE
// does not fit (the QP is then in ERROR and the WQE stays for the flush).
bool QpRunner::retire_remote_front() {
  InFlight& e = qp_.window.front();
  bool ok;
  if (e.fault_syndrome) ok = complete_error(e.idx, e.w.opcode, e.w.total_len(), {e.fault_syndrome, e.fault_why});
  else ok = !e.w.signaled || write_cqe(e.idx, prm::kCqeReq, 0, e.w.opcode, static_cast<uint32_t>(e.w.total_len()));
  if (ok) qp_.window.pop_front();
  return ok;
}

}  // namespace kinet::emu::engine
