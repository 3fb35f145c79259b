// kinet emu — the in-process fabric: NICs of one process reach each other's
// QPs and memory directly. The responder's checks live here, so a
// cross-process fabric would run the same checks on its side.
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "providers/emu/emu.hpp"
#include "providers/emu/prm.hpp"
#include "providers/emu/safe_copy.hpp"

namespace kinet::emu {
namespace {
using namespace prm;

// A failed copy as the requester's error CQE: the requester's memory is the
// local side (local protection, or local access for CUDA), the responder's
// the remote side (remote access, or remote operation for CUDA).
Fault copy_fault(const CopyResult& r, bool local_side) {
  if (local_side) return {r.cuda ? kSynLocalAccess : kSynLocalProt, "local memory: " + r.why};
  return {r.cuda ? kSynRemoteOp : kSynRemoteAccess, "remote memory: " + r.why};
}

uint64_t random_node() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v))  // 8 bytes never come back short
    throw Error(ErrorCode::System, std::string("emu: getrandom for a fabric address: ") + std::strerror(errno));
  return v;
}

class InProcessFabric final : public Fabric {
 public:
  void attach(const std::shared_ptr<Nic>& nic, std::string_view want) override {
    std::lock_guard<std::mutex> g(mu_);
    if (want == "emu") {
      for (int i = 0;; ++i) {
        std::string n = "emu" + std::to_string(i);
        if (!name_taken(n)) {
          nic->name = n;
          break;
        }
      }
    } else {
      if (name_taken(std::string(want)))
        throw Error(ErrorCode::BadState, std::string(want) + " is already open in this process");
      nic->name = std::string(want);
    }
    // 64 random bits: unique across processes and hosts (a clash with a
    // live NIC of this process is drawn again; 0 is never an address).
    do nic->node = random_node();
    while (nic->node == 0 || nics_.count(nic->node));
    nics_[nic->node] = nic;
  }

  void detach(uint64_t node) override {
    std::lock_guard<std::mutex> g(mu_);
    nics_.erase(node);
  }

  bool reachable(uint64_t node) override { return find(node) != nullptr; }

  Fault execute(uint64_t from_node, uint32_t from_qpn, uint64_t node, uint32_t qpn, const RemoteOp& op) override {
    std::shared_ptr<Nic> rnic = find(node);
    std::shared_ptr<EmuQp> peer = rnic ? rnic->find_qp(qpn) : nullptr;
    const std::string gone = "peer QP " + hex(qpn) + " does not answer (destroyed, or its device closed)";
    if (!peer) return {kSynTransportRetry, gone};
    // Held while the responder side runs: ~QueuePair of the peer waits for it.
    std::shared_lock<std::shared_mutex> busy(peer->responder_mu);
    if (peer->destroyed.load(std::memory_order_acquire)) return {kSynTransportRetry, gone};
    const QpState ps = peer->state.load(std::memory_order_acquire);
    if (ps != QpState::Rtr && ps != QpState::Rts)
      return {kSynTransportRetry, "peer QP " + hex(peer->qpn) + " on " + rnic->name + " is in state " +
                                               qp_state_name(ps) + " and does not answer"};
    if (peer->remote_node != from_node || peer->remote_qpn != from_qpn)
      return {kSynTransportRetry, "peer QP " + hex(peer->qpn) + " is connected to another QP"};
    MrEntry mr;
    if (!rnic->lookup_mr(op.rkey, &mr))
      return {kSynRemoteAccess, "rkey " + hex(op.rkey) + " is not registered on " + rnic->name};
    if (mr.pd != peer->pd)
      return {kSynRemoteAccess, "rkey " + hex(op.rkey) + " belongs to another protection domain on " + rnic->name};
    if (op.raddr < mr.addr || op.raddr + op.len > mr.addr + mr.len || op.raddr + op.len < op.raddr)
      return {kSynRemoteAccess, "remote range [" + hex(op.raddr) + ", +" + std::to_string(op.len) +
                                          ") is outside rkey " + hex(op.rkey) + "'s region [" + hex(mr.addr) + ", +" +
                                          std::to_string(mr.len) + ") on " + rnic->name};
    const bool atomic = op.kind == RemoteOp::FetchAdd || op.kind == RemoteOp::CompareSwap;
    const uint32_t need = op.kind == RemoteOp::Write ? kRemoteWrite : op.kind == RemoteOp::Read ? kRemoteRead : kRemoteAtomic;
    const char* what = need == kRemoteWrite ? "remote write" : need == kRemoteRead ? "remote read" : "remote atomic";
    if (!(mr.access & need))
      return {kSynRemoteAccess, "rkey " + hex(op.rkey) + " on " + rnic->name + " was registered without " + what};
    if (!(peer->remote_access & need))
      return {kSynRemoteAccess, "peer QP " + hex(peer->qpn) + " on " + rnic->name + " does not accept " + what};
    if (atomic && (op.raddr & 7))
      return {kSynRemoteInvalReq, "atomic target " + hex(op.raddr) + " is not 8-byte aligned"};

    uint8_t* target = reinterpret_cast<uint8_t*>(op.raddr);
    switch (op.kind) {
      case RemoteOp::Write:
        if (CopyResult r = safe_copy(target, mr.kind, op.src, op.src_kind, op.len))
          return copy_fault(r, r.side == CopyResult::Src);
        break;
      case RemoteOp::Read:
        if (CopyResult r = safe_copy(op.dst, op.dst_kind, target, mr.kind, op.len))
          return copy_fault(r, r.side == CopyResult::Dst);
        break;
      default:  // 8 bytes in host byte order at the target (mlx5's host-endianness atomic mode)
        if (CopyResult r = safe_atomic(reinterpret_cast<uint64_t*>(target), mr.kind, op.kind == RemoteOp::FetchAdd,
                                       op.operand, op.compare, op.old_value))
          return copy_fault(r, false);
    }
    return {};
  }

 private:
  std::mutex mu_;
  std::map<uint64_t, std::weak_ptr<Nic>> nics_;

  std::shared_ptr<Nic> find(uint64_t node) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = nics_.find(node);
    return it == nics_.end() ? nullptr : it->second.lock();
  }
  bool name_taken(const std::string& n) {
    for (auto& [node, w] : nics_)
      if (auto p = w.lock(); p && p->name == n) return true;
    return false;
  }
};
}  // namespace

// Both immortal: devices held in globals are destroyed at exit(), after
// function-local statics would be.
std::shared_mutex& memory_guard() {
  static auto* m = new std::shared_mutex;
  return *m;
}

Fabric& fabric() {
  static auto* f = new InProcessFabric;
  return *f;
}
}  // namespace kinet::emu
