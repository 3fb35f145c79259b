// kinet fabric — the responder check and memory access (responder.hpp).
#include "fabric/responder.hpp"

#include <chrono>
#include <functional>
#include <mutex>
#include <span>
#include <shared_mutex>
#include <string>

#include "providers/emu/prm.hpp"
#include "providers/emu/safe_copy.hpp"

namespace kinet::fabric {
namespace {
using namespace emu::prm;
using emu::CopyResult;
using emu::Fault;
using emu::hex;

// A failed copy as the requester's error CQE: the requester's buffers are the
// local side, the responder's region the remote side.
Fault copy_fault(const CopyResult& r, bool local_side) {
  if (local_side) return {r.cuda ? kSynLocalAccess : kSynLocalProt, "local memory: " + r.why};
  return {r.cuda ? kSynRemoteOp : kSynRemoteAccess, "remote memory: " + r.why};
}

// The operation's own shape (what decode() guarantees for wire requests; an
// in-process caller is checked the same way).
Fault check_shape(const Request& rq, const RequesterBuffers& rb) {
  const auto k = static_cast<uint8_t>(rq.kind);
  if (k < static_cast<uint8_t>(OpKind::Write) || k > static_cast<uint8_t>(OpKind::CompareSwap))
    return {kSynRemoteInvalReq, "unknown operation kind " + std::to_string(k)};
  const bool atomic = rq.kind == OpKind::FetchAdd || rq.kind == OpKind::CompareSwap;
  if (atomic && rq.len != 8)
    return {kSynRemoteInvalReq, std::string(op_kind_name(rq.kind)) + " of " + std::to_string(rq.len) +
                                    " bytes (atomics are 8 bytes)"};
  if (atomic && !rb.old_value)
    return {kSynRemoteInvalReq, std::string(op_kind_name(rq.kind)) + " without a result buffer"};
  if (rq.kind == OpKind::Write && rq.len && !rq.payload)
    return {kSynRemoteInvalReq, "WRITE of " + std::to_string(rq.len) + " bytes without its payload"};
  if (rq.kind == OpKind::Read && rq.len && !rb.read_dst)
    return {kSynRemoteInvalReq, "READ of " + std::to_string(rq.len) + " bytes without a destination"};
  return {};
}

// respond()'s checks, then access(target, kind of the region) with the QP's
// responder_mu held shared. rb null: a WRITE or READ whose data `access`
// moves itself (respond_from_link, respond_read_in_place), so no requester
// buffer is looked for.
template <class Access>
Fault checked(emu::Nic& nic, const Request& rq, const RequesterBuffers* rb, QpCache* cache, Access&& access) {
  // Built only when needed: respond() runs per operation.
  auto gone = [&rq] {
    return Fault{kSynTransportRetry, "peer QP " + hex(rq.to_qpn) + " does not answer (destroyed, or its device closed)"};
  };
  if (rq.to_node != nic.node)
    return {kSynTransportRetry, "request for node " + hex(rq.to_node) + " reached node " + hex(nic.node) + " (" +
                                    nic.name + ")"};
  std::shared_ptr<emu::EmuQp> peer;
  if (cache) {
    const uint64_t gen = nic.qp_generation.load(std::memory_order_acquire);
    if (cache->nic != &nic || cache->qpn != rq.to_qpn || cache->gen != gen) {
      cache->qp = nic.find_qp(rq.to_qpn);
      cache->nic = &nic;
      cache->qpn = rq.to_qpn;
      cache->gen = gen;
    }
    peer = cache->qp.lock();
  } else {
    peer = nic.find_qp(rq.to_qpn);
  }
  if (!peer) return gone();
  // Held while the responder side runs: ~QueuePair of the peer waits for it.
  std::shared_lock<std::shared_mutex> busy(peer->responder_mu);
  if (peer->destroyed.load(std::memory_order_acquire)) return gone();
  const QpState ps = peer->state.load(std::memory_order_acquire);
  if (ps != QpState::Rtr && ps != QpState::Rts)
    return {kSynTransportRetry, "peer QP " + hex(peer->qpn) + " on " + nic.name + " is in state " +
                                    qp_state_name(ps) + " and does not answer"};
  if (peer->remote_node != rq.from_node || peer->remote_qpn != rq.from_qpn)
    return {kSynTransportRetry, "peer QP " + hex(peer->qpn) + " is connected to another QP"};
  if (rb) {
    if (Fault f = check_shape(rq, *rb)) return f;
  } else if (rq.kind != OpKind::Write && rq.kind != OpKind::Read) {
    return {kSynRemoteInvalReq, std::string(op_kind_name(rq.kind)) + " where a WRITE or READ moves its own data"};
  }
  emu::MrEntry mr;
  if (!nic.lookup_mr(rq.rkey, &mr))
    return {kSynRemoteAccess, "rkey " + hex(rq.rkey) + " is not registered on " + nic.name};
  if (mr.pd != peer->pd)
    return {kSynRemoteAccess, "rkey " + hex(rq.rkey) + " belongs to another protection domain on " + nic.name};
  // Inside [mr.addr, mr.addr + mr.len), written so that no sum can wrap.
  if (rq.raddr < mr.addr || rq.len > mr.len || rq.raddr - mr.addr > mr.len - rq.len)
    return {kSynRemoteAccess, "remote range [" + hex(rq.raddr) + ", +" + std::to_string(rq.len) +
                                  ") is outside rkey " + hex(rq.rkey) + "'s region [" + hex(mr.addr) + ", +" +
                                  std::to_string(mr.len) + ") on " + nic.name};
  const bool atomic = rq.kind == OpKind::FetchAdd || rq.kind == OpKind::CompareSwap;
  const uint32_t need = rq.kind == OpKind::Write ? kRemoteWrite : rq.kind == OpKind::Read ? kRemoteRead : kRemoteAtomic;
  const char* what = need == kRemoteWrite ? "remote write" : need == kRemoteRead ? "remote read" : "remote atomic";
  if (!(mr.access & need))
    return {kSynRemoteAccess, "rkey " + hex(rq.rkey) + " on " + nic.name + " was registered without " + what};
  if (!(peer->remote_access & need))
    return {kSynRemoteAccess, "peer QP " + hex(peer->qpn) + " on " + nic.name + " does not accept " + what};
  if (atomic && (rq.raddr & 7))
    return {kSynRemoteInvalReq, "atomic target " + hex(rq.raddr) + " is not 8-byte aligned"};

  return access(reinterpret_cast<uint8_t*>(rq.raddr), mr.kind);
}
}  // namespace

Fault respond(emu::Nic& nic, const Request& rq, const RequesterBuffers& rb, QpCache* cache) {
  return checked(nic, rq, &rb, cache, [&](uint8_t* target, MemoryKind kind) -> Fault {
    switch (rq.kind) {
      case OpKind::Write:
        if (CopyResult r = emu::safe_copy(target, kind, rq.payload, rb.payload_kind, rq.len))
          return copy_fault(r, r.side == CopyResult::Src);
        break;
      case OpKind::Read:
        if (CopyResult r = emu::safe_copy(rb.read_dst, rb.read_kind, target, kind, rq.len))
          return copy_fault(r, r.side == CopyResult::Dst);
        break;
      default:  // 8 bytes in host byte order at the target (mlx5's host-endianness atomic mode)
        if (CopyResult r = emu::safe_atomic(reinterpret_cast<uint64_t*>(target), kind, rq.kind == OpKind::FetchAdd,
                                            rq.operand, rq.compare, rb.old_value))
          return copy_fault(r, false);
    }
    return {};
  });
}

Fault respond_read_in_place(emu::Nic& nic, const Request& rq, QpCache* cache, std::vector<uint8_t>& scratch,
                            const std::function<void(const uint8_t* data)>& send) {
  if (rq.kind != OpKind::Read) return {kSynRemoteInvalReq, "a READ was expected"};
  return checked(nic, rq, nullptr, cache, [&](uint8_t* target, MemoryKind kind) -> Fault {
    const CopyResult r = kind == MemoryKind::Host ? emu::probe_source(target, rq.len)
                                                  : (scratch.resize(rq.len),
                                                     emu::safe_copy(scratch.data(), MemoryKind::Host, target, kind, rq.len));
    if (r) return copy_fault(r, r.side == CopyResult::Dst);
    send(kind == MemoryKind::Host ? target : scratch.data());
    return {};
  });
}

Fault respond_from_link(emu::Nic* nic, const Request& rq, Link& link, QpCache* cache, std::vector<uint8_t>& scratch,
                        Fault f) {
  constexpr size_t kStage = 256 * 1024;  // GPU targets and dropped bytes go through scratch in parts of this
  if (!nic && !f) f = {kSynTransportRetry, "no NIC for a WRITE's payload"};
  uint64_t off = 0;
  bool dry = false;  // the last attempt found nothing: wait before the next (not before the first: the
                     // payload usually follows its head at once, and a poll(2) per WRITE cost more)
  while (off < rq.len) {
    const size_t want = static_cast<size_t>(rq.len - off);
    const std::span<const uint8_t> ahead = link.rest_buffered(want);
    if (ahead.empty() && dry && !link.wait_rest(Clock::now() + std::chrono::seconds(1)))
      continue;  // a peer may stall mid-frame; close() ends the wait (it throws)
    size_t got = ahead.size();
    if (!f) {
      std::shared_lock<std::shared_mutex> guard(emu::memory_guard());
      f = checked(*nic, rq, nullptr, cache, [&](uint8_t* target, MemoryKind kind) -> Fault {
        uint8_t* const at = target + off;
        if (!ahead.empty()) {
          if (CopyResult r = emu::safe_copy(at, kind, ahead.data(), MemoryKind::Host, ahead.size()))
            return copy_fault(r, false);
          return {};
        }
        bool bad = false;
        if (kind == MemoryKind::Host) {
          got = link.recv_rest(at, want, &bad);
          if (bad)
            return {kSynRemoteAccess, "remote memory: [" + hex(reinterpret_cast<uint64_t>(at)) + ", +" +
                                          std::to_string(want) + ") is not writable (unmapped under its registration?)"};
          return {};
        }
        scratch.resize(std::min(want, kStage));
        got = link.recv_rest(scratch.data(), scratch.size(), &bad);
        if (got)
          if (CopyResult r = emu::safe_copy(at, kind, scratch.data(), MemoryKind::Host, got)) return copy_fault(r, false);
        return {};
      });
    }
    if (f && got == 0) {  // dropped: read into scratch (already taken read-ahead bytes count as got)
      bool bad = false;
      scratch.resize(std::min(want, kStage));
      got = link.recv_rest(scratch.data(), scratch.size(), &bad);
    }
    dry = got == 0;
    off += got;
  }
  return f;
}

}  // namespace kinet::fabric
