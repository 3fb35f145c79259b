// kinet fabric — the responder side of one RDMA operation: the one check
// every fabric runs (in-process, shared memory, TCP) before a peer's request
// touches this process's memory, and the guarded memory access after it.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>
#include <memory>

#include "fabric/link.hpp"
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

// A WRITE whose payload follows its Request on `link`: a frame cut by
// Link::recv_split, rq.len bytes still to come. They go straight into the
// target region, part by part as they arrive, each part under
// emu::memory_guard() and respond()'s checks of the whole [raddr, +len)
// (the caller holds no guard; none is held while waiting for the peer): a
// deregistration or teardown between parts fails the next check, and
// nothing is placed after it. Host memory is received into in place (a
// region unmapped under its registration fails as remote access, the bytes
// are not taken there); GPU memory through `scratch`. After a failed check,
// a fault, or with `first` already set (e.g. no NIC: nic may then be null),
// the rest is read and dropped. Returns the first fault; every byte of the
// payload has been taken from the link. Throws what the link throws.
// A READ whose data goes out from where it is: respond()'s checks, then,
// with the same locks held, send(data) with the region's own bytes (host
// memory, every page of it readable a moment before: send must hand them to
// the kernel, e.g. Link::send_parts over a link that kernel_reads_body(),
// and may throw what the link throws) or with a copy in `scratch` (GPU
// memory). The caller holds emu::memory_guard() shared across the call.
// Returns the check's or the copy's fault; send was not called then.
emu::Fault respond_read_in_place(emu::Nic& nic, const Request& rq, QpCache* cache, std::vector<uint8_t>& scratch,
                                 const std::function<void(const uint8_t* data)>& send);

emu::Fault respond_from_link(emu::Nic* nic, const Request& rq, Link& link, QpCache* cache,
                             std::vector<uint8_t>& scratch, emu::Fault first = {});

}  // namespace kinet::fabric
