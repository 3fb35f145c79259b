// kinet emu — internal: the engine's per-QP runner, shared by engine.cpp (the
// engine loop, in-process execution, doorbells, CQEs) and engine_remote.cpp
// (pipelined execution for a QP whose peer is in another process). What it
// does is described at the top of engine.cpp.
#pragma once
#include <algorithm>
#include <cassert>
#include <cstring>
#include <string>

#include "core/cuda_shim.hpp"
#include "core/log.hpp"
#include "providers/emu/blueflame.hpp"
#include "providers/emu/decode.hpp"
#include "providers/emu/emu.hpp"
#include "providers/emu/prm.hpp"
#include "providers/emu/safe_copy.hpp"

namespace kinet::emu::engine {
using InFlight = EmuQp::InFlight;

inline constexpr size_t kWindow = 16;  // relaxed mode: WQEs issued and not yet completed
// Relaxed mode: a WRITE source larger than this is not copied aside; the
// WRITE waits for the outstanding READs/ATOMICs instead (in-order execution
// is always allowed).
inline constexpr uint64_t kMaxSnapshot = 1u << 20;
// Cross-process QPs: bytes requested and not yet answered (a chunk counts at
// least kMinChunkCost, so empty ones are bounded too), and WQEs in flight.
inline constexpr uint64_t kRemoteOutBytes = 16u << 20;
inline constexpr uint64_t kMinChunkCost = 4096;
inline constexpr size_t kRemoteWindow = 4096;
// Corking (engine_remote.cpp) needs at least this many WQEs in flight.
inline constexpr size_t kCorkMinWindow = 8;

inline uint32_t load_be32_acquire(uint32_t* p) {
  const uint32_t raw = load_acquire<Scope::System>(p);
  uint8_t b[4];
  std::memcpy(b, &raw, 4);
  return rd_be32(b);
}

class QpRunner {
 public:
  QpRunner(Nic& nic, EmuQp& qp) : nic_(nic), qp_(qp) {}

  // One pass over the QP: new doorbell, issue what it announced, retire.
  // Returns true if anything happened. Caller holds qp.exec_mu.
  bool step() {
    bool work = take_doorbell();
    bool issued = false;
    while (qp_.sq_ci < qp_.sq_announced) {
      const uint64_t idx = qp_.sq_ci;
      if (state() == QpState::Error) {
        if (!flush_window() || !flush_cqe(idx, slot_opcode(idx))) return true;
        ++qp_.sq_ci;
        work = true;
        continue;
      }
      InFlight& e = qp_.window.next();  // pushed below, or left for the next WQE
      e.reuse();
      e.idx = idx;
      read_slot(idx, e.bb);
      std::string why;
      const bool decoded = decode_send_wqe(e.bb, &e.w, &why);
      Fault f = validate(e, decoded, why);
      const bool big_write = e.w.opcode == prm::kRdmaWrite && e.w.total_len() > kMaxSnapshot;
      if (!f && (e.w.fence || big_write) && window_has_read_or_atomic()) {
        if (!retire_all()) return true;
        if (state() == QpState::Error) continue;  // an earlier WQE failed: this one is flushed
      }
      if (!f && nic_.relaxed) f = issue(e);
      if (f) {
        if (!retire_all()) return true;
        if (state() == QpState::Error) continue;
        if (!complete_error(idx, e.w.opcode, e.w.total_len(), f)) return true;
        ++qp_.sq_ci;
        work = true;
        continue;
      }
      push_window(e);
      ++qp_.sq_ci;
      issued = work = true;
      if (!nic_.relaxed) {
        if (!retire_all()) return true;
      } else if (qp_.window.size() >= kWindow) {
        if (!retire_front()) return true;
      }
    }
    // Relaxed: completions wait for a pass that issued nothing new.
    if (!issued && !qp_.window.empty()) {
      retire_all();
      work = true;
    }
    return work;
  }

  // One pass over a QP whose peer is in another process (engine_remote.cpp).
  // Returns true if anything happened. Caller holds qp.exec_mu.
  bool step_remote();
  bool pass_remote();  // step_remote's pass, without the flush at its end

  // Teardown: everything announced and not completed gets a flush CQE (as far
  // as the CQ has room); nothing is executed.
  void flush_all() {
    take_doorbell();
    qp_.state.store(QpState::Error, std::memory_order_release);
    if (!flush_window()) qp_.window.clear();
    while (qp_.sq_ci < qp_.sq_announced) {
      if (!flush_cqe(qp_.sq_ci, slot_opcode(qp_.sq_ci))) break;
      ++qp_.sq_ci;
    }
    qp_.sq_ci = qp_.sq_announced;
  }

  // Logs `msg` unless it repeats the previous message of this QP (same key):
  // then it is only counted, and the count is logged with the next different
  // message or at teardown.
  void log_once(const std::string& key, const std::string& msg) {
    if (key == qp_.repeat_key) {
      ++qp_.repeat_count;
      return;
    }
    log_repeats();
    qp_.repeat_key = key;
    KINET_LOG(Warn, "%s: QP %s: %s", nic_.name.c_str(), hex(qp_.qpn).c_str(), msg.c_str());
  }
  void log_repeats() {
    if (qp_.repeat_count)
      KINET_LOG(Warn, "%s: QP %s: the previous message repeated %llu more times", nic_.name.c_str(),
                hex(qp_.qpn).c_str(), static_cast<unsigned long long>(qp_.repeat_count));
    qp_.repeat_count = 0;
  }

  void fail_qp(const std::string& why) {
    {
      std::lock_guard<std::mutex> g(qp_.err_mu);
      if (qp_.last_error.empty()) qp_.last_error = why;
    }
    qp_.state.store(QpState::Error, std::memory_order_release);
  }

 private:
  Nic& nic_;
  EmuQp& qp_;
  bool signaled_started_ = false;  // this pass started a Request of a signalled WQE (step_remote)

  uint32_t depth() const { return 1u << qp_.log_n; }
  QpState state() const { return qp_.state.load(std::memory_order_acquire); }

  void read_slot(uint64_t idx, uint8_t* bb) {
    const uint8_t* s = qp_.sq + (idx & (depth() - 1)) * prm::kWqeBB;
    if (qp_.block_on_gpu) cuda::copy(bb, s, prm::kWqeBB);
    else std::memcpy(bb, s, prm::kWqeBB);
  }
  uint8_t slot_opcode(uint64_t idx) {
    uint8_t bb[prm::kWqeBB];
    read_slot(idx, bb);
    return bb[prm::kCtrlOpcode];
  }

  // ---- doorbells ----
  bool take_doorbell() {
    uint64_t word = std::atomic_ref<uint64_t>(*qp_.db).exchange(prm::kNoDoorbell, std::memory_order_acq_rel);
    if (word == prm::kNoDoorbell) return false;
    std::string bf_head, bf_copy;  // BlueFlame: the word is the head of a WQE copy (blueflame.hpp)
    if (qp_.db_mode == dev::DoorbellMode::BlueFlame) word = take_blueflame(qp_, word, &bf_head, &bf_copy);
    uint8_t b[8];
    std::memcpy(b, &word, 8);
    const uint32_t head = rd_be32(b), qpn_ds = rd_be32(b + 4);
    const uint16_t pi = static_cast<uint16_t>(head >> 8);
    const uint16_t rec = static_cast<uint16_t>(load_be32_acquire(&qp_.dbrec[prm::kDbrecSend]));
    const uint64_t base = qp_.sq_announced;
    const uint32_t ahead = static_cast<uint16_t>(pi - static_cast<uint16_t>(base));
    const uint32_t rec_ahead = static_cast<uint16_t>(rec - static_cast<uint16_t>(base));
    std::string why;
    if ((head & 0xff0000ffu) || (qpn_ds & 0xffu))
      why = "doorbell word " + hex(word) + " is malformed (its opmod, opcode and DS bytes must be 0)";
    else if ((qpn_ds >> 8) != qp_.qpn)
      why = "doorbell names QP " + hex(qpn_ds >> 8) + " but was written to the doorbell of QP " + hex(qp_.qpn);
    else if (ahead > depth())
      why = "doorbell announced WQE index " + std::to_string(pi) + ", " + std::to_string(ahead) +
            " WQEs past the last announced one (" + std::to_string(static_cast<uint16_t>(base)) +
            "): more than the ring holds (" + std::to_string(depth()) + ")";
    else if (ahead > rec_ahead)
      why = "doorbell announced WQE index " + std::to_string(pi) + " but the doorbell record says " +
            std::to_string(rec);
    else if (!bf_head.empty())
      why = bf_head;
    if (why.empty()) {
      if (!bf_copy.empty() && ahead != 0 && qp_.doorbell_fault_idx == ~0ull) {
        qp_.doorbell_fault_idx = base + ahead - 1;  // the WQE the copy is of
        qp_.doorbell_fault = bf_copy;
      }
      qp_.sq_announced = base + ahead;
      return ahead != 0;
    }
    // The first WQE this doorbell names completes with the error; the rest
    // it names (at most a ring) are flushed.
    if (qp_.doorbell_fault_idx == ~0ull) {
      qp_.doorbell_fault_idx = base;
      qp_.doorbell_fault = why;
    }
    qp_.sq_announced = base + std::clamp<uint32_t>(ahead, 1, depth());
    return true;
  }

  // ---- issue ----
  Fault validate(const InFlight& e, bool decoded, const std::string& why) {
    const DecodedWqe& w = e.w;
    const QpState st = state();
    if (e.idx == qp_.doorbell_fault_idx) return {prm::kSynLocalQpOp, qp_.doorbell_fault};
    if (st != QpState::Rts)
      return {prm::kSynLocalQpOp, std::string("doorbell rung while the QP is in state ") + qp_state_name(st) +
                                      " (post only after to_rts())"};
    if (!decoded) return {prm::kSynLocalQpOp, "malformed WQE: " + why};
    if (w.qpn != qp_.qpn)
      return {prm::kSynLocalQpOp, "WQE names QP " + hex(w.qpn) + " but was posted on QP " + hex(qp_.qpn)};
    if (w.wqe_index != static_cast<uint16_t>(e.idx))
      return {prm::kSynLocalQpOp, "WQE index field " + std::to_string(w.wqe_index) + " does not match its slot (" +
                                      std::to_string(static_cast<uint16_t>(e.idx)) + ")"};
    if (w.total_len() > nic_.attr.max_msg)
      return {prm::kSynLocalLength, "message of " + std::to_string(w.total_len()) +
                                        " bytes exceeds the device's max_msg " + std::to_string(nic_.attr.max_msg)};
    if (w.is_atomic() && w.sge[0].len != 8)
      return {prm::kSynLocalLength, "atomic result buffer of " + std::to_string(w.sge[0].len) + " bytes (must be 8)"};
    return {};
  }

  bool window_has_read_or_atomic() const {
    return !qp_.window.empty() && qp_.read_atomic_end > qp_.window.front().idx;
  }
  // Every push into the window goes through here (keeps read_atomic_end).
  // `e` is qp_.window.next(), filled in.
  void push_window(InFlight& e) {
    assert(&e == &qp_.window.next());
    if (e.w.opcode == prm::kRdmaRead || e.w.is_atomic()) qp_.read_atomic_end = e.idx + 1;
    qp_.window.push();
  }

  // Relaxed mode: local checks now (errors in WQE order), and the source of a
  // WRITE read now when an outstanding READ/ATOMIC may overwrite it later.
  Fault issue(InFlight& e) {
    MrEntry lmr[2];
    if (Fault f = check_local(e.w, e.w.opcode != prm::kRdmaWrite, lmr)) return f;
    if (e.w.opcode != prm::kRdmaWrite || e.w.is_inline || !window_has_read_or_atomic()) return {};
    e.snapshot.resize(e.w.total_len());
    std::shared_lock<std::shared_mutex> g(memory_guard());
    if (Fault f = check_local(e.w, false, lmr)) return f;  // still registered under the guard
    size_t off = 0;
    for (int i = 0; i < e.w.nsge; ++i) {
      const Sge& s = e.w.sge[i];
      if (CopyResult r = safe_copy(e.snapshot.data() + off, MemoryKind::Host, reinterpret_cast<void*>(s.addr),
                                   lmr[i].kind, s.len))
        return local_copy_fault(r);
      off += s.len;
    }
    return {};
  }

  static Fault local_copy_fault(const CopyResult& r) {
    return {r.cuda ? prm::kSynLocalAccess : prm::kSynLocalProt, r.why};
  }

  // Local side: every SGE inside an MR of this Nic and the QP's PD.
  Fault check_local(const DecodedWqe& w, bool writes_local, MrEntry* mrs) {
    for (int i = 0; i < w.nsge; ++i) {
      const Sge& s = w.sge[i];
      if (!nic_.lookup_mr(s.lkey, &mrs[i]))
        return {prm::kSynLocalProt, "lkey " + hex(s.lkey) + " is not registered on " + nic_.name};
      const MrEntry& m = mrs[i];
      if (m.pd != qp_.pd)
        return {prm::kSynLocalProt, "lkey " + hex(s.lkey) + " belongs to another protection domain"};
      if (s.addr < m.addr || s.addr + s.len > m.addr + m.len || s.addr + s.len < s.addr)
        return {prm::kSynLocalProt, "local range [" + hex(s.addr) + ", +" + std::to_string(s.len) +
                                        ") is outside lkey " + hex(s.lkey) + "'s region [" + hex(m.addr) + ", +" +
                                        std::to_string(m.len) + ")"};
      if (writes_local && !(m.access & kLocalWrite))
        return {prm::kSynLocalProt, "lkey " + hex(s.lkey) + " lacks local write access"};
    }
    return {};
  }

  // ---- retire ----
  bool retire_all() {
    while (!qp_.window.empty())
      if (!retire_front()) return false;
    return true;
  }

  // Completes the oldest issued WQE. False when its CQE does not fit (the QP
  // is then in ERROR and the WQE stays for the flush).
  bool retire_front() {
    InFlight& e = qp_.window.front();
    if (state() == QpState::Error) return flush_window();
    if (e.w.signaled && !cq_has_room()) return false;
    Fault f;
    {
      std::shared_lock<std::shared_mutex> g(memory_guard());
      f = execute(e);
    }
    bool ok;
    if (f) ok = complete_error(e.idx, e.w.opcode, e.w.total_len(), f);
    else ok = !e.w.signaled || write_cqe(e.idx, prm::kCqeReq, 0, e.w.opcode, static_cast<uint32_t>(e.w.total_len()));
    if (ok) qp_.window.pop_front();
    return ok;
  }

  bool flush_window() {
    while (!qp_.window.empty()) {
      if (!flush_cqe(qp_.window.front().idx, qp_.window.front().w.opcode)) return false;
      qp_.window.pop_front();
    }
    return true;
  }

  Fault execute(InFlight& e) {
    const DecodedWqe& w = e.w;
    if (w.opcode == prm::kNop) return {};
    MrEntry lmr[2];
    if (Fault f = check_local(w, w.opcode != prm::kRdmaWrite, lmr)) return f;
    RemoteOp op{};
    op.raddr = w.raddr;
    op.rkey = w.rkey;
    auto run = [&](const RemoteOp& o) { return fabric().execute(nic_.node, qp_.qpn, qp_.remote_node, qp_.remote_qpn, o); };
    switch (w.opcode) {
      case prm::kRdmaWrite: {
        op.kind = RemoteOp::Write;
        if (w.is_inline || w.nsge == 0) {
          op.src = e.bb + prm::kSeg2 + prm::kInlineHeader;  // the entry's own copy of the WQE
          op.len = w.inline_len;
          return run(op);
        }
        size_t off = 0;
        for (int i = 0; i < w.nsge; ++i) {  // gather: one remote write per SGE, consecutive addresses
          if (!e.snapshot.empty()) {
            op.src = e.snapshot.data() + off;
            op.src_kind = MemoryKind::Host;
          } else {
            op.src = reinterpret_cast<const void*>(w.sge[i].addr);
            op.src_kind = lmr[i].kind;
          }
          op.len = w.sge[i].len;
          if (Fault f = run(op)) return f;
          op.raddr += op.len;
          off += op.len;
        }
        return {};
      }
      case prm::kRdmaRead:
        op.kind = RemoteOp::Read;
        if (w.nsge == 0) return run(op);
        for (int i = 0; i < w.nsge; ++i) {  // scatter
          op.dst = reinterpret_cast<void*>(w.sge[i].addr);
          op.dst_kind = lmr[i].kind;
          op.len = w.sge[i].len;
          if (Fault f = run(op)) return f;
          op.raddr += op.len;
        }
        return {};
      default: {
        uint64_t old = 0;
        op.kind = w.opcode == prm::kAtomicFa ? RemoteOp::FetchAdd : RemoteOp::CompareSwap;
        op.len = 8;
        op.operand = w.swap_add;
        op.compare = w.compare;
        op.old_value = &old;
        if (Fault f = run(op)) return f;
        // The old value lands in the requester's buffer, host byte order.
        if (CopyResult r = safe_copy(reinterpret_cast<void*>(w.sge[0].addr), lmr[0].kind, &old, MemoryKind::Host, 8))
          return local_copy_fault(r);
        return {};
      }
    }
  }

  // ---- cross-process execution (engine_remote.cpp) ----
  static uint64_t cost(const InFlight::Chunk& c);
  static bool finished(const InFlight& e);
  void set_fault(InFlight& e, const Fault& f);
  void plan(InFlight& e);
  bool pump(InFlight& e);
  bool reap(InFlight& e);
  Fault land(const InFlight& e, const InFlight::Chunk& c, const Call& a);
  bool retire_remote_front();

  // ---- CQEs ----
  bool cq_has_room() {
    const uint32_t ci = load_be32_acquire(&qp_.cq_dbrec[prm::kCqDbrecCi]) & 0xffffffu;
    if (((static_cast<uint32_t>(qp_.cq_pi) - ci) & 0xffffffu) < depth()) return true;
    fail_qp("CQ overrun: " + std::to_string(depth()) + " CQEs outstanding and none consumed");
    log_once("cq-overrun", "CQ overrun: " + std::to_string(depth()) +
                               " CQEs outstanding and none consumed; the QP is in ERROR and waits for CQ space "
                               "(further overruns are counted)");
    return false;
  }

  bool complete_error(uint64_t idx, uint8_t opcode, uint64_t len, const Fault& f) {
    char head[96];
    std::snprintf(head, sizeof head, "WQE %llu %s %llu B: ", static_cast<unsigned long long>(idx), opcode_name(opcode),
                  static_cast<unsigned long long>(len));
    fail_qp(head + f.why);
    KINET_LOG(Info, "%s: QP %s: %s%s -> error CQE syndrome 0x%02x, QP in ERROR", nic_.name.c_str(),
              hex(qp_.qpn).c_str(), head, f.why.c_str(), f.syndrome);
    return write_cqe(idx, prm::kCqeReqErr, f.syndrome, opcode, 0);
  }
  bool flush_cqe(uint64_t idx, uint8_t opcode) { return write_cqe(idx, prm::kCqeReqErr, prm::kSynWrFlush, opcode, 0); }

  // Writes one CQE: everything but the last 4 bytes first, then the tail word
  // (wqe_counter, signature, op_own with the owner bit) with release, so a
  // poller that sees the owner flip sees the whole entry.
  bool write_cqe(uint64_t wqe_idx, uint8_t cqe_opcode, uint8_t syndrome, uint8_t wqe_opcode, uint32_t byte_cnt) {
    if (!cq_has_room()) return false;
    uint8_t c[64] = {};
    auto be32 = [](uint8_t* p, uint32_t v) {
      p[0] = uint8_t(v >> 24), p[1] = uint8_t(v >> 16), p[2] = uint8_t(v >> 8), p[3] = uint8_t(v);
    };
    be32(c + prm::kCqeByteCnt, byte_cnt);
    if (cqe_opcode == prm::kCqeReqErr) {
      c[prm::kCqeVendorSynd] = 0;  // emu has no vendor syndromes
      c[prm::kCqeSyndrome] = syndrome;
    }
    be32(c + prm::kCqeSopQpn, (uint32_t(wqe_opcode) << 24) | qp_.qpn);
    c[prm::kCqeWqeCounter] = uint8_t(wqe_idx >> 8);
    c[prm::kCqeWqeCounter + 1] = uint8_t(wqe_idx);
    c[prm::kCqeSignature] = 0;
    c[prm::kCqeOpOwn] = static_cast<uint8_t>((cqe_opcode << 4) | ((qp_.cq_pi >> qp_.log_n) & 1u));
    uint32_t tail;
    std::memcpy(&tail, c + prm::kCqeWqeCounter, 4);
    uint8_t* slot = reinterpret_cast<uint8_t*>(qp_.cqes) + (qp_.cq_pi & (depth() - 1)) * 64;
    if (qp_.block_on_gpu) {
      cuda::copy(slot, c, 60);
      cuda::copy(slot + 60, &tail, 4);
    } else {
      std::memcpy(slot, c, 60);
      store_release<Scope::System>(reinterpret_cast<uint32_t*>(slot + 60), tail);
    }
    ++qp_.cq_pi;
    return true;
  }
};
}  // namespace kinet::emu::engine
