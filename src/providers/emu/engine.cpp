// kinet emu — the engine: executes send WQEs as an mlx5 NIC would.
#include <chrono>
#include <cstring>
#include <thread>

#include "core/cuda_shim.hpp"
#include "core/log.hpp"
#include "providers/emu/decode.hpp"
#include "providers/emu/emu.hpp"

namespace kinet::emu {
namespace {

using kinet::detail::bswap32;


class QpRunner {
 public:
  QpRunner(Nic& nic, EmuQp& qp) : nic_(nic), qp_(qp) {}

  // Executes every WQE the doorbell record announces. Returns true if any work was done.
  bool step() {
    // A doorbell on a QP that is not in RTS is answered with an error CQE
    // (execute_one). Hardware would ignore a RESET QP's doorbell and leave
    // the poster waiting; the emulator reports the misuse instead.
    const uint32_t rec = bswap32(load_acquire<Scope::System>(&qp_.dbrec[mlx5::kSendDbrIndex])) & 0xffffu;
    const uint64_t target = qp_.sq_ci + static_cast<uint16_t>(rec - static_cast<uint16_t>(qp_.sq_ci));
    if (target == qp_.sq_ci) return false;
    while (qp_.sq_ci < target) {
      if (!execute_one(qp_.sq_ci)) return true;  // CQ overrun: stop here
      ++qp_.sq_ci;
    }
    return true;
  }

 private:
  Nic& nic_;
  EmuQp& qp_;

  uint32_t cq_size() const { return 1u << qp_.log_n; }

  // Writes one CQE. Everything but the last 4 bytes first; then the tail word
  // (wqe_counter, signature, op_own with the owner bit) with release, so a
  // poller that sees the owner flip sees the whole entry.
  bool write_cqe(uint64_t wqe_idx, uint8_t cqe_opcode, uint8_t syndrome, uint8_t wqe_opcode, uint32_t byte_cnt) {
    const uint32_t ci = bswap32(load_acquire<Scope::System>(&qp_.cq_dbrec[mlx5::kCqDbrConsumerIndex])) & 0xffffffu;
    if (((static_cast<uint32_t>(qp_.cq_pi) - ci) & 0xffffffu) >= cq_size()) {
      fail_qp("CQ overrun: " + std::to_string(cq_size()) + " CQEs outstanding and none consumed");
      return false;
    }
    uint8_t body[60] = {};
    const uint32_t bc = bswap32(byte_cnt);
    std::memcpy(body + 44, &bc, 4);
    if (cqe_opcode == mlx5::kCqeReqErr) {
      body[54] = 0;  // vendor syndrome: none in emu
      body[55] = syndrome;
    }
    const uint32_t sop = bswap32((uint32_t(wqe_opcode) << 24) | qp_.qpn);
    std::memcpy(body + 56, &sop, 4);
    const uint16_t wc = static_cast<uint16_t>(wqe_idx);
    const uint8_t owner = static_cast<uint8_t>((qp_.cq_pi >> qp_.log_n) & 1u);
    const uint8_t op_own = static_cast<uint8_t>((cqe_opcode << 4) | owner);
    const uint8_t tail_bytes[4] = {static_cast<uint8_t>(wc >> 8), static_cast<uint8_t>(wc), 0, op_own};
    uint32_t tail;
    std::memcpy(&tail, tail_bytes, 4);
    uint8_t* slot = reinterpret_cast<uint8_t*>(qp_.cqes + (qp_.cq_pi & (cq_size() - 1)));
    if (qp_.block_on_gpu) {
      cuda::copy(slot, body, sizeof body);
      cuda::copy(slot + 60, &tail, 4);
    } else {
      std::memcpy(slot, body, sizeof body);
      store_release<Scope::System>(reinterpret_cast<uint32_t*>(slot + 60), tail);
    }
    ++qp_.cq_pi;
    return true;
  }

  void fail_qp(const std::string& why) {
    {
      std::lock_guard<std::mutex> g(qp_.err_mu);
      if (qp_.last_error.empty()) qp_.last_error = why;
    }
    qp_.state.store(QpState::Error, std::memory_order_release);
    KINET_LOG(Warn, "%s: QP %s moved to ERROR: %s", nic_.name.c_str(), hex(qp_.qpn).c_str(), why.c_str());
  }

  bool execute_one(uint64_t idx) {
    uint8_t bb[64];
    const uint8_t* slot = qp_.sq + (idx & (cq_size() - 1)) * mlx5::kSendWqeBB;
    if (qp_.block_on_gpu) cuda::copy(bb, slot, sizeof bb);
    else std::memcpy(bb, slot, sizeof bb);
    DecodedWqe w;
    std::string why;
    const bool ok = decode_send_wqe(bb, &w, &why);

    const QpState st = qp_.state.load(std::memory_order_acquire);
    if (st == QpState::Error)  // flush: every WQE completes in error, signalled or not
      return write_cqe(idx, mlx5::kCqeReqErr, mlx5::kSynWrFlush, w.opcode, 0);

    Fault f;
    if (st != QpState::Rts) {
      f = {mlx5::kSynLocalQpOp, std::string("doorbell rung while the QP is in state ") + qp_state_name(st) +
                                    " (post only after to_rts())"};
    } else if (!ok) {
      f = {mlx5::kSynLocalQpOp, "malformed WQE: " + why};
    } else if (w.qpn != qp_.qpn) {
      f = {mlx5::kSynLocalQpOp, "WQE names QP " + hex(w.qpn) + " but was posted on QP " + hex(qp_.qpn)};
    } else if (w.wqe_index != static_cast<uint16_t>(idx)) {
      f = {mlx5::kSynLocalQpOp, "WQE index field " + std::to_string(w.wqe_index) + " does not match its slot (" +
                                    std::to_string(static_cast<uint16_t>(idx)) + ")"};
    } else {
      std::shared_lock<std::shared_mutex> g(memory_guard());
      f = execute(w);
    }
    if (f) {
      char head[96];
      std::snprintf(head, sizeof head, "WQE %llu %s %llu B: ", static_cast<unsigned long long>(idx),
                    opcode_name(w.opcode), static_cast<unsigned long long>(w.total_len()));
      {
        std::lock_guard<std::mutex> g(qp_.err_mu);
        if (qp_.last_error.empty()) qp_.last_error = head + f.why;
      }
      qp_.state.store(QpState::Error, std::memory_order_release);
      KINET_LOG(Info, "%s: QP %s: %s%s -> error CQE syndrome 0x%02x, QP in ERROR", nic_.name.c_str(),
                hex(qp_.qpn).c_str(), head, f.why.c_str(), f.syndrome);
      return write_cqe(idx, mlx5::kCqeReqErr, f.syndrome, w.opcode, 0);
    }
    if (w.signaled) return write_cqe(idx, mlx5::kCqeReq, 0, w.opcode, static_cast<uint32_t>(w.total_len()));
    return true;
  }

  // Local side: every SGE inside an MR of this Nic and the QP's PD.
  Fault check_local(const DecodedWqe& w, bool writes_local, MrEntry* mrs) {
    for (int i = 0; i < w.nsge; ++i) {
      const Sge& s = w.sge[i];
      if (!nic_.lookup_mr(s.lkey, &mrs[i]))
        return {mlx5::kSynLocalProt, "lkey " + hex(s.lkey) + " is not registered on " + nic_.name};
      const MrEntry& m = mrs[i];
      if (m.pd != qp_.pd)
        return {mlx5::kSynLocalProt, "lkey " + hex(s.lkey) + " belongs to another protection domain"};
      if (s.addr < m.addr || s.addr + s.len > m.addr + m.len || s.addr + s.len < s.addr)
        return {mlx5::kSynLocalProt, "local range [" + hex(s.addr) + ", +" + std::to_string(s.len) +
                                         ") is outside lkey " + hex(s.lkey) + "'s region [" + hex(m.addr) + ", +" +
                                         std::to_string(m.len) + ")"};
      if (writes_local && !(m.access & kLocalWrite))
        return {mlx5::kSynLocalProt, "lkey " + hex(s.lkey) + " lacks local write access"};
    }
    return {};
  }

  Fault execute(const DecodedWqe& w) {
    if (w.opcode == mlx5::kOpNop) return {};
    const uint64_t len = w.total_len();
    if (len > nic_.attr.max_msg)
      return {mlx5::kSynLocalLength, "message of " + std::to_string(len) + " bytes exceeds the device's max_msg " +
                                         std::to_string(nic_.attr.max_msg)};
    const bool is_atomic = w.opcode == mlx5::kOpAtomicFA || w.opcode == mlx5::kOpAtomicCS;
    if (is_atomic && w.sge[0].len != 8)
      return {mlx5::kSynLocalLength, "atomic result buffer of " + std::to_string(w.sge[0].len) + " bytes (must be 8)"};
    MrEntry lmr[3];
    if (Fault f = check_local(w, w.opcode != mlx5::kOpRdmaWrite, lmr)) return f;

    RemoteOp op{};
    op.raddr = w.raddr;
    op.rkey = w.rkey;
    auto run = [&](const RemoteOp& o) { return fabric().execute(nic_.node, qp_.qpn, qp_.remote_node, qp_.remote_qpn, o); };
    switch (w.opcode) {
      case mlx5::kOpRdmaWrite:
        op.kind = RemoteOp::Write;
        if (w.is_inline || w.nsge == 0) {
          op.src = w.inline_data;
          op.len = w.inline_len;
          return run(op);
        }
        for (int i = 0; i < w.nsge; ++i) {  // gather: one remote write per SGE, consecutive addresses
          op.src = reinterpret_cast<const void*>(w.sge[i].addr);
          op.src_kind = lmr[i].kind;
          op.len = w.sge[i].len;
          if (Fault f = run(op)) return f;
          op.raddr += op.len;
        }
        return {};
      case mlx5::kOpRdmaRead:
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
        op.kind = w.opcode == mlx5::kOpAtomicFA ? RemoteOp::FetchAdd : RemoteOp::CompareSwap;
        op.len = 8;
        op.operand = w.swap_add;
        op.compare = w.compare;
        op.old_value = &old;
        if (Fault f = run(op)) return f;
        // The old value lands in the requester's buffer, host byte order.
        if (lmr[0].kind == MemoryKind::Host) std::memcpy(reinterpret_cast<void*>(w.sge[0].addr), &old, 8);
        else cuda::copy(reinterpret_cast<void*>(w.sge[0].addr), &old, 8);
        return {};
      }
    }
  }
};
}  // namespace

bool Nic::lookup_mr(uint32_t key, MrEntry* out) {
  std::shared_lock<std::shared_mutex> g(mr_mu);
  auto it = mrs.find(key);
  if (it == mrs.end()) return false;
  *out = it->second;
  return true;
}

std::shared_ptr<EmuQp> Nic::find_qp(uint32_t qpn) {
  std::lock_guard<std::mutex> g(qp_mu);
  auto it = qps.find(qpn);
  return it == qps.end() ? nullptr : it->second;
}

void Nic::run_engine() {
  std::vector<std::shared_ptr<EmuQp>> snapshot;
  uint64_t seen_gen = ~0ull;
  uint32_t idle = 0;
  while (!stop.load(std::memory_order_acquire)) {
    const uint64_t gen = qp_generation.load(std::memory_order_acquire);
    if (gen != seen_gen) {
      std::lock_guard<std::mutex> g(qp_mu);
      snapshot.clear();
      for (auto& [n, qp] : qps) snapshot.push_back(qp);
      seen_gen = gen;
    }
    bool work = false;
    for (auto& qp : snapshot) {
      try {
        work |= QpRunner(*this, *qp).step();
      } catch (const std::exception& e) {
        // A data move or CQE write that CUDA refused (e.g. the GPU faulted):
        // the QP can't go on, the engine and the other QPs can.
        {
          std::lock_guard<std::mutex> g(qp->err_mu);
          if (qp->last_error.empty()) qp->last_error = std::string("NIC engine failed: ") + e.what();
        }
        qp->state.store(QpState::Error, std::memory_order_release);
        KINET_LOG(Error, "%s: QP %s moved to ERROR: %s", name.c_str(), hex(qp->qpn).c_str(), e.what());
      }
    }
    if (work) {
      idle = 0;
    } else if (++idle < 4096) {
      std::this_thread::yield();
    } else {
      // Long idle: sleep briefly so an idle software NIC costs no CPU.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}
}  // namespace kinet::emu
