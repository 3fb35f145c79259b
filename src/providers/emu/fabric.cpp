// kinet emu — the in-process fabric: NICs of one process reach each other's
// QPs and memory directly. The responder's checks live here, so a
// cross-process fabric would run the same checks on its side.
#include <cstring>
#include <map>
#include <mutex>

#include "core/cuda_shim.hpp"
#include "providers/emu/emu.hpp"

namespace kinet::emu {
namespace {

void move_bytes(void* dst, MemoryKind dk, const void* src, MemoryKind sk, size_t n) {
  if (n == 0) return;
  if (dk == MemoryKind::Host && sk == MemoryKind::Host) std::memcpy(dst, src, n);
  else cuda::copy(dst, src, n);
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
    nic->node = next_node_++;
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
    if (!peer)
      return {mlx5::kSynTransportRetryExc, "peer QP " + hex(qpn) + " does not answer (destroyed, or its device closed)"};
    const QpState ps = peer->state.load(std::memory_order_acquire);
    if (ps != QpState::Rtr && ps != QpState::Rts)
      return {mlx5::kSynTransportRetryExc, "peer QP " + hex(peer->qpn) + " on " + rnic->name + " is in state " +
                                               qp_state_name(ps) + " and does not answer"};
    if (peer->remote_node != from_node || peer->remote_qpn != from_qpn)
      return {mlx5::kSynTransportRetryExc, "peer QP " + hex(peer->qpn) + " is connected to another QP"};
    MrEntry mr;
    if (!rnic->lookup_mr(op.rkey, &mr))
      return {mlx5::kSynRemoteAccess, "rkey " + hex(op.rkey) + " is not registered on " + rnic->name};
    if (mr.pd != peer->pd)
      return {mlx5::kSynRemoteAccess, "rkey " + hex(op.rkey) + " belongs to another protection domain on " + rnic->name};
    if (op.raddr < mr.addr || op.raddr + op.len > mr.addr + mr.len || op.raddr + op.len < op.raddr)
      return {mlx5::kSynRemoteAccess, "remote range [" + hex(op.raddr) + ", +" + std::to_string(op.len) +
                                          ") is outside rkey " + hex(op.rkey) + "'s region [" + hex(mr.addr) + ", +" +
                                          std::to_string(mr.len) + ") on " + rnic->name};
    const bool atomic = op.kind == RemoteOp::FetchAdd || op.kind == RemoteOp::CompareSwap;
    const uint32_t need = op.kind == RemoteOp::Write ? kRemoteWrite : op.kind == RemoteOp::Read ? kRemoteRead : kRemoteAtomic;
    const char* what = need == kRemoteWrite ? "remote write" : need == kRemoteRead ? "remote read" : "remote atomic";
    if (!(mr.access & need))
      return {mlx5::kSynRemoteAccess, "rkey " + hex(op.rkey) + " on " + rnic->name + " was registered without " + what};
    if (!(peer->remote_access & need))
      return {mlx5::kSynRemoteAccess, "peer QP " + hex(peer->qpn) + " on " + rnic->name + " does not accept " + what};
    if (atomic && (op.raddr & 7))
      return {mlx5::kSynRemoteInvalReq, "atomic target " + hex(op.raddr) + " is not 8-byte aligned"};

    uint8_t* target = reinterpret_cast<uint8_t*>(op.raddr);
    switch (op.kind) {
      case RemoteOp::Write: move_bytes(target, mr.kind, op.src, op.src_kind, op.len); break;
      case RemoteOp::Read: move_bytes(op.dst, op.dst_kind, target, mr.kind, op.len); break;
      default: {  // 8 bytes in host byte order at the target (mlx5's host-endianness atomic mode)
        uint64_t old;
        if (mr.kind == MemoryKind::Host) {
          std::atomic_ref<uint64_t> a(*reinterpret_cast<uint64_t*>(target));
          if (op.kind == RemoteOp::FetchAdd) {
            old = a.fetch_add(op.operand, std::memory_order_seq_cst);
          } else {
            old = op.compare;
            a.compare_exchange_strong(old, op.operand, std::memory_order_seq_cst);
          }
        } else {  // GPU memory: atomic among NIC atomics of this NIC, not with GPU threads
          std::lock_guard<std::mutex> g(rnic->gpu_atomic_mu);
          cuda::copy(&old, target, 8);
          const uint64_t nv = op.kind == RemoteOp::FetchAdd ? old + op.operand : (old == op.compare ? op.operand : old);
          if (nv != old) cuda::copy(target, &nv, 8);
        }
        *op.old_value = old;
      }
    }
    return {};
  }

 private:
  std::mutex mu_;
  std::map<uint64_t, std::weak_ptr<Nic>> nics_;
  uint64_t next_node_ = 1;

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

std::shared_mutex& memory_guard() {
  static std::shared_mutex m;
  return m;
}

Fabric& fabric() {
  static InProcessFabric f;
  return f;
}
}  // namespace kinet::emu
