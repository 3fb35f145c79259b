// kinet — transports: one-sided operations between processes (put, get,
// 64-bit atomics, signals) over UCX, libfabric, kinet's own TCP / shared-memory
// links, or within one process. The proxy backend, the communicator and the
// NCCL plugin run on them; kernels never see a transport.
//
//   auto t = Transport::open({.provider = "ucx", .name = "rank 0"});
//   ship t->address() to every peer (bootstrap allgather), then on each side:
//   PeerId p = t->connect(peer_address, "rank 1");
//   auto r = t->register_memory(buf, bytes, kRemoteWrite | kRemoteRead);
//   ship r->remote_key().serialize() to the peer; it calls import_key(p, key)
//   t->put(p, src, n, rkey_id, raddr, /*cookie=*/7);
//   while (t->poll(&c, 1) == 0) {}   // c.cookie == 7, c.status == Status::Ok
//
// Every transport here is a message transport: an operation travels as a
// message and the target's poll() executes it only after checking it against
// the target's registered regions: a key this transport issued and did not
// revoke, [raddr, raddr + len) inside that region (no wrap), the access right
// the operation needs, 8-byte alignment of atomics, and a sender this
// transport connected to. A buggy or hostile peer can't read or write outside
// what was registered: its operation completes at the requester with
// RemoteAccess or RemoteInvalidRequest and touches nothing.
//
// Provider "cuda_ipc" (peers on one host): the messages travel as with "shm",
// but a put / put_signal whose source (a get whose destination) lies in a
// region of kind Gpu registered on it carries a CUDA IPC handle instead of
// the bytes, and the target copies GPU -> GPU itself (no host staging, one
// message of any length up to kMaxOpBytes). Trust model: a CUDA IPC handle
// exposes the WHOLE allocation holding the buffer, not just the buffer, to the
// peer that opens it, so use cuda_ipc between trusted processes only (as CUDA
// IPC always is). The target still checks every operation on its own memory
// as above, and checks the requester's range against the real size of the
// allocation it mapped: a buggy peer's out-of-bounds operation is rejected
// (RemoteAccess) and touches nothing. A reference the target can't use is
// answered RemoteAccess (the handle does not open there, or the range lies
// outside the allocation) or RemoteInvalidRequest (malformed, or a target
// that is not cuda_ipc); a failed copy is RemoteOperation. One more
// consequence: the target writes a get's data straight into the requester's
// GPU memory, so after a get failed with TransportRetryExceeded a slow but
// alive target may still write its destination; keep that memory until the
// peer is gone. Both sides must open cuda_ipc (connect() of another
// provider's address is InvalidArgument).
//
// Environment: KINET_TRANSPORT (provider when Options::provider is empty;
// "auto" picks ucx, then ofi, then tcp), KINET_TRANSPORT_TIMEOUT_MS (peer
// timeout when Options::timeout is 0).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kinet/kinet.hpp"

namespace kinet {

// How a signal changes the 64-bit word at the target.
enum class SignalOp : uint8_t { Add = 1, Set = 2 };

struct TransportOptions {
  // "ucx", "ofi" (libfabric), "tcp" and "shm" (kinet's links), "cuda_ipc"
  // (shm plus CUDA IPC for GPU memory; NotSupported, with the reason, without
  // CUDA or a GPU), "loop" (this process only; tests), "auto" (never picks
  // cuda_ipc). Empty: KINET_TRANSPORT, default "auto".
  std::string provider;
  std::string name;                        // this side's name in messages ("rank 3")
  std::chrono::milliseconds timeout{0};    // 0: KINET_TRANSPORT_TIMEOUT_MS
};

using PeerId = uint32_t;  // dense from 0, in connect() order

// One finished operation.
struct Completion {
  uint64_t cookie;  // as passed when it was posted
  PeerId peer;
  Status status;    // Ok, or why it failed (see Transport)
};

// Registered local memory. Destruction deregisters: operations already
// executing against it finish first; once the destructor returns no peer's
// operation touches it and its key never matches again.
class TransportRegion {
 public:
  virtual ~TransportRegion() = default;
  virtual void* addr() const = 0;
  virtual size_t length() const = 0;
  virtual uint32_t access() const = 0;
  virtual MemoryKind kind() const = 0;
  // What a peer passes to import_key(): RemoteKey with provider
  // RemoteKey::kTransport, node = this transport's node id, rkey = the
  // region's key (never reused), packed = the provider's own bytes if any.
  virtual RemoteKey remote_key() const = 0;
};

// Threading: post calls (put ... signal) and poll() from one thread at a time
// (the proxy thread); register_memory(), a region's destructor, import_key()
// and peer_error() may run concurrently with them (NCCL registers while its
// progress thread runs). connect() from one thread at a time.
class Transport {
 public:
  // Largest put / get / put_signal payload one call may move (a NIC's usual
  // maximum message, 2 GiB): larger lengths are InvalidArgument, nothing queued.
  static constexpr uint64_t kMaxOpBytes = uint64_t{1} << 31;
  // Throws NotSupported naming the provider when it is not built in or can't
  // start here (with the library's reason), InvalidArgument for an unknown name.
  static std::unique_ptr<Transport> open(const TransportOptions& opt = {});
  // Providers built into this library, in "auto" order.
  static std::vector<std::string> providers();

  // Peers see "peer lost" on later operations. Operations still in flight are
  // dropped without completions: poll() until none is outstanding first.
  virtual ~Transport() = default;
  virtual const char* provider() const = 0;   // "ucx"
  virtual std::string describe() const = 0;   // e.g. "ucx 1.13 tcp on eth0", for logs and kinet-info
  virtual uint64_t node() const = 0;          // random 64-bit id of this transport

  // This side's address: the blob a peer passes to connect().
  virtual std::vector<uint8_t> address() const = 0;
  // Makes the peer at `address` reachable. Both sides connect to each other
  // before operations flow between them (exchange address() blobs through the
  // bootstrap, then every side connects to every other); an operation from a
  // sender this side did not connect to is rejected. Throws InvalidArgument
  // for a malformed blob (naming `name`), System when the peer is unreachable.
  virtual PeerId connect(const std::vector<uint8_t>& address, const std::string& name) = 0;

  // Registers [addr, addr + bytes) for local use and for peers' operations
  // allowed by `access` (Access bits). kind Gpu: GPU memory, copied through
  // CUDA by the transport. Throws InvalidArgument (null, 0 or wrapping range,
  // access beyond kAccessAll), NotSupported (Gpu without CUDA).
  virtual std::unique_ptr<TransportRegion> register_memory(void* addr, size_t bytes, uint32_t access,
                                                           MemoryKind kind = MemoryKind::Host) = 0;
  // Imports a key of `peer` (its TransportRegion::remote_key()) for
  // operations to that peer; returns a small id (dense from 0 per transport
  // until keys are released). Throws InvalidArgument: not a transport key, or
  // a node other than the peer's; ResourceExhausted: 2^20 keys imported and
  // not released.
  virtual uint32_t import_key(PeerId peer, const RemoteKey& key) = 0;
  // Forgets an imported key (its region deregistered at the peer, say): the
  // id no longer posts (InvalidArgument), and a later import_key may reuse
  // its place under another id, never this one. Operations posted with it
  // before are unaffected. Throws InvalidArgument for an id not imported, or
  // released already. A transport whose keys hold nothing does nothing.
  virtual void release_key(uint32_t key_id) { (void)key_id; }

  // Every operation completes once the target executed it (puts included)
  // and told this side so. Gets, atomics and every failure are answered at
  // once; a put, signal or put_signal that succeeded is acknowledged
  // cumulatively, in the target's next request to this side or else from
  // the target's next poll() call (one message per direction in a
  // ping-pong). So a side must keep calling poll() while a peer may wait
  // for its operations' completions (a proxy thread does): one that stops
  // polling right after the poll() that executed a put delays that put's
  // completion until it polls again, or until the requester's timeout
  // (TransportRetryExceeded). (A provider whose messages may arrive out of
  // order, ofi without FI_ORDER_SAS, answers every operation at once.)
  // A transfer larger than the backend's largest message travels in pieces;
  // it completes with the status of its first failing piece (earlier pieces
  // may have landed).
  // Posting: non-blocking. Ok: the operation is queued and completes later
  // through poll() with `cookie`; NoSpace: too many in flight, poll() and
  // retry; InvalidArgument: a bad peer, key id, local buffer or length (over
  // kMaxOpBytes), and nothing is queued; LocalAccess: a source in registered
  // GPU memory could not be read (CUDA failed or timed out; logged with the
  // reason), nothing is queued. Local buffers: host memory, or inside a region of
  // kind Gpu registered here; they must stay valid until the completion.
  // Failed operations complete with RemoteAccess / RemoteInvalidRequest (the
  // target's check), TransportRetryExceeded (the peer is lost or did not
  // answer within the timeout; peer_error() says which), WrFlushed (an
  // earlier failure to this peer).
  virtual Status put(PeerId peer, const void* src, uint64_t bytes, uint32_t key_id, uint64_t raddr,
                     uint64_t cookie) = 0;
  virtual Status get(PeerId peer, void* dst, uint64_t bytes, uint32_t key_id, uint64_t raddr, uint64_t cookie) = 0;
  // `*result` receives the previous value (host byte order) before the completion.
  virtual Status fetch_add(PeerId peer, uint64_t* result, uint32_t key_id, uint64_t raddr, uint64_t add,
                           uint64_t cookie) = 0;
  virtual Status compare_swap(PeerId peer, uint64_t* result, uint32_t key_id, uint64_t raddr, uint64_t compare,
                              uint64_t swap, uint64_t cookie) = 0;
  // Changes the 8-byte word at raddr, only after every earlier put and atomic
  // of this transport to `peer` has been applied there (what a waiter on the
  // signal may rely on). bytes == 0 in put_signal: a signal with no data
  // (key_id and raddr unused). The word needs kRemoteAtomic and 8-byte
  // alignment; a put_signal whose data failed does not signal.
  virtual Status signal(PeerId peer, uint32_t key_id, uint64_t raddr, SignalOp op, uint64_t value,
                        uint64_t cookie) = 0;
  virtual Status put_signal(PeerId peer, const void* src, uint64_t bytes, uint32_t key_id, uint64_t raddr,
                            uint32_t sig_key_id, uint64_t sig_raddr, SignalOp op, uint64_t value,
                            uint64_t cookie) = 0;

  // Runs the transport in both roles (sends what is queued, executes peers'
  // operations on this side's memory, sends the acknowledgements owed since
  // an earlier call, retires answers) and returns up to
  // `max` completions. Never blocks. A target-side rejection is logged once
  // per peer and reason, with a count.
  virtual size_t poll(Completion* out, size_t max) = 0;
  virtual size_t outstanding() const = 0;     // posted, not yet returned by poll()
  // Why `peer` failed ("peer lost: ...", "timeout after N ms waiting for ..."),
  // empty while it is healthy.
  virtual std::string peer_error(PeerId peer) const = 0;
};

}  // namespace kinet
