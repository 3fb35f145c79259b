// kinet fabric — the responder side of one RDMA operation: the one check
// every fabric runs (in-process, shared memory, TCP) before a peer's request
// touches this process's memory, and the guarded memory access after it.
#pragma once
#include <cstdint>
#include <memory>

#include "fabric/wire.hpp"
#include "providers/emu/emu.hpp"

namespace kinet::fabric {

// The requester's side of one operation, as the responder sees it. Over a
// wire every one is host memory of the fabric (payload in the received frame,
// READ data and old value into the Response); in one process they are the
// requester's own buffers.
struct RequesterBuffers {
  MemoryKind payload_kind = MemoryKind::Host;  // WRITE: memory kind of rq.payload
  void* read_dst = nullptr;                    // READ: receives rq.len bytes
  MemoryKind read_kind = MemoryKind::Host;
  uint64_t* old_value = nullptr;               // atomics: receives the previous value (host byte order)
};

// Executes `rq` against `nic` (the responder) on behalf of QP rq.from_qpn of
// rq.from_node. Checks, in the order the hardware reports them, each failure
// an error-CQE syndrome and a reason naming the QP / key / range involved:
//   addressed to this NIC (rq.to_node), QP rq.to_qpn exists and is not
//   destroyed, in RTR or RTS, connected to exactly (from_node, from_qpn)
//                                                 -> kSynTransportRetry
//   kind known, atomics 8 bytes, buffers present  -> kSynRemoteInvalReq
//   rkey registered on `nic`, same PD as the QP, [raddr, raddr+len) inside
//   its region (no wrap), access right on the region and on the QP
//                                                 -> kSynRemoteAccess
//   atomic target 8-byte aligned                  -> kSynRemoteInvalReq
// Nothing is read or written before every check passed. Then the access
// itself through safe_copy / safe_atomic, with the QP's responder_mu held
// shared (teardown of the QP waits for it): a fault on the responder's memory
// is kSynRemoteAccess (kSynRemoteOp for GPU memory), on the requester's
// buffers kSynLocalProt (kSynLocalAccess).
// The caller holds emu::memory_guard() shared (the engine does around a WQE;
// a fabric's server thread must take it), so a deregistration can't free the
// region mid-copy. Never throws except std::bad_alloc.
// With `cache` (one per calling thread, e.g. a link's server), the peer QP
// found last is kept (weakly) and looked up again only when the QP number,
// the NIC or its set of QPs (Nic::qp_generation) changed.
struct QpCache {
  const emu::Nic* nic = nullptr;
  uint32_t qpn = 0;
  uint64_t gen = ~0ull;
  std::weak_ptr<emu::EmuQp> qp;
};
emu::Fault respond(emu::Nic& nic, const Request& rq, const RequesterBuffers& rb, QpCache* cache = nullptr);

}  // namespace kinet::fabric
