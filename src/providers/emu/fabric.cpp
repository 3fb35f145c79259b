// kinet emu — the in-process fabric: NICs of one process reach each other's
// QPs and memory directly. The responder's checks and memory access are
// fabric::respond() (src/fabric/responder.cpp), which every fabric runs.
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "fabric/responder.hpp"
#include "providers/emu/emu.hpp"
#include "providers/emu/prm.hpp"

namespace kinet::emu {
namespace {
using namespace prm;

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
    if (!rnic) return {kSynTransportRetry, "peer QP " + hex(qpn) + " does not answer (destroyed, or its device closed)"};
    fabric::Request rq;
    rq.from_node = from_node;
    rq.from_qpn = from_qpn;
    rq.to_node = node;
    rq.to_qpn = qpn;
    rq.kind = op.kind == RemoteOp::Write  ? fabric::OpKind::Write
              : op.kind == RemoteOp::Read ? fabric::OpKind::Read
              : op.kind == RemoteOp::FetchAdd ? fabric::OpKind::FetchAdd
                                              : fabric::OpKind::CompareSwap;
    rq.raddr = op.raddr;
    rq.rkey = op.rkey;
    rq.len = op.len;
    rq.operand = op.operand;
    rq.compare = op.compare;
    rq.payload = static_cast<const uint8_t*>(op.src);
    fabric::RequesterBuffers rb;
    rb.payload_kind = op.src_kind;
    rb.read_dst = op.dst;
    rb.read_kind = op.dst_kind;
    rb.old_value = op.old_value;
    return fabric::respond(*rnic, rq, rb);
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
