// kinet transports — provider "cuda_ipc": the message engine over kinet's shm
// links, with GPU bytes moved GPU -> GPU through CUDA IPC instead of being
// staged through host memory in the messages.
//
// Requester: a put / put_signal whose source (a get whose destination) lies in
// a registered region of kind Gpu, inside one cudaMalloc allocation, travels
// as one request of any length up to kMaxOpBytes carrying an IPC reference
// (msg_wire.hpp: the allocation's 64-byte handle and the offset) instead of
// the bytes. Exported handles are cached per region. Anything else (host
// buffers, memory CUDA can't export, a peer in this same process, where CUDA
// can't open the handle) travels as with "shm".
//
// Target: after the engine's usual checks of its own range (key, bounds,
// access), the target maps the requester's allocation (cached per peer and
// handle, at most kMaxMappings per peer, least recently used closed first;
// every mapping of a peer is closed when the peer is lost, all of them when
// the transport is destroyed), checks offset + length against the real size
// of the mapped allocation (cuMemGetAddressRange, never a size the peer
// claims) and copies on a non-blocking stream of kinet's own (D2D into a Gpu
// region, D2H into a Host one; the reverse for a get), waiting for the copy
// with a bound (KINET_TIMEOUT_MS) before the next request runs, so a signal
// still lands after every earlier put. Failures, each logged once per peer and
// reason by the engine:
//   a target whose transport is not cuda_ipc        -> RemoteInvalidRequest "ipc unsupported"
//   the handle does not open here                   -> RemoteAccess "ipc open"
//   offset + length beyond the mapped allocation    -> RemoteAccess "ipc out of bounds"
//   the copy failed or timed out                    -> RemoteOperation "fault"
//                                                      (RemoteAccess when host memory faulted)
// (A malformed reference is RemoteInvalidRequest "malformed", by the decoder.)
// Limit: a mapping stays open until it is evicted or the peer is lost, so an
// allocation a peer freed after sending it by reference stays mapped here
// (and, as CUDA IPC goes, allocated) until then.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kinet/transport.hpp"
#include "providers/emu/safe_copy.hpp"
#include "transports/channel.hpp"
#include "transports/msg_wire.hpp"

namespace kinet::transport {

struct Registry;  // msg_registry.hpp

// What the IPC path needs from the GPU side. cuda_ipc_memory() is CUDA's; a
// test substitutes one over host memory to run the path on a CPU machine.
class IpcMemory {
 public:
  struct Alloc {
    uint64_t base = 0, size = 0;
    uint8_t handle[wire::kIpcHandleBytes] = {};
  };
  virtual ~IpcMemory() = default;
  // Whether registered regions of kind k may be exported (CUDA: Gpu only).
  virtual bool exports(MemoryKind k) const = 0;
  // The allocation holding p and its handle. False with *why.
  virtual bool export_alloc(const void* p, Alloc* out, std::string* why) = 0;
  // Maps a peer's allocation: its base here and its real size; null with *why.
  virtual void* open(const uint8_t handle[wire::kIpcHandleBytes], uint64_t* size, std::string* why) = 0;
  virtual void close(void* base) = 0;
  // The kind of memory open() returns (CUDA: Gpu).
  virtual MemoryKind mapped_kind() const = 0;
  // Copies n bytes, complete on return (bounded). Never throws.
  virtual emu::CopyResult copy(void* dst, MemoryKind dk, const void* src, MemoryKind sk, uint64_t n) = 0;
};

// CUDA's IpcMemory. Throws NotSupported "transport cuda_ipc: <reason>" when
// CUDA, a GPU or the driver's cuMemGetAddressRange is missing.
std::shared_ptr<IpcMemory> cuda_ipc_memory();

// The channel of provider "cuda_ipc": the shm channel, whose address carries
// a "KIPC" magic and a random token of this process ahead of shm's own (a
// peer's address without them is InvalidArgument: both sides must be
// cuda_ipc). describe(): "cuda_ipc over shm links, ...".
std::unique_ptr<Channel> make_cuda_ipc_channel(const TransportOptions& opt, uint64_t node);

struct IpcStats {
  uint64_t pulls = 0, pushes = 0, bytes = 0;  // target: copies done by reference
  uint64_t refs = 0;                          // requester: requests sent by reference
  uint64_t fallbacks = 0;  // requester: regions that could not be exported, and operations across two allocations
  uint64_t opens = 0, closes = 0;             // target: mappings
};

// The path of one MsgTransport. Used from the engine's poll thread (post,
// poll), except prepare(); the export cache is under Registry::mu.
class IpcPath {
 public:
  static constexpr size_t kMaxMappings = 256;  // per peer
  static constexpr size_t kMaxPeers = 65536;   // the engine's limit

  IpcPath(std::shared_ptr<IpcMemory> mem, std::string name);
  ~IpcPath();  // closes every mapping
  IpcPath(const IpcPath&) = delete;
  IpcPath& operator=(const IpcPath&) = delete;

  // A connected peer and its channel address (a peer in this process gets
  // no references: CUDA can't open a handle in the process that made it).
  void add_peer(uint32_t peer, const std::vector<uint8_t>& channel_address);
  // Requester: whether [p, p + n) (n > 0) goes to `peer` by reference; fills *ref.
  bool reference(Registry& reg, uint32_t peer, const void* p, uint64_t n, wire::IpcRef* ref);
  // A region was registered (key in reg): exports the allocation at its base
  // now, from the registering thread (which has a CUDA context), so the first
  // operation makes no driver call. Any thread; takes Registry::mu.
  void prepare(Registry& reg, uint32_t key, const void* base, uint64_t len);
  // Target: moves r.length bytes between the requester's memory that r.ipc
  // names and `local` (already checked against the target's region, kind
  // local_kind): pulls for Put / PutSignal, pushes for Get. The caller holds
  // Registry::mu. Ok, or the failure's status with the rejection's reason and
  // detail (see the top of this file).
  Status execute(uint32_t peer, const wire::Request& r, uint8_t* local, MemoryKind local_kind, std::string* reason,
                 std::string* detail);
  // Closes the mappings of a lost peer.
  void forget_peer(uint32_t peer);
  IpcStats stats() const;
  size_t mappings(uint32_t peer) const;  // open now, for tests

 private:
  struct Mapping {
    void* base = nullptr;
    uint64_t size = 0;
    uint64_t used = 0;  // tick of the last use
  };
  void close_all(std::unordered_map<std::string, Mapping>& m);
  // The exported allocation holding [p, p + n) of region `key` (cached), or
  // null when it can't be (the region is then staged). Registry::mu held.
  const IpcMemory::Alloc* exported(Registry& reg, uint32_t key, const void* p, uint64_t n);

  std::shared_ptr<IpcMemory> mem_;
  std::string name_;
  // [peer], written by connect() (which may run while poll() does) before the
  // engine publishes the peer: fixed storage, never resized.
  std::unique_ptr<std::atomic<bool>[]> same_process_;
  std::unordered_map<uint32_t, std::vector<IpcMemory::Alloc>> exports_;  // region key -> exported (Registry::mu)
  std::unordered_map<uint32_t, bool> unexportable_;                      // region key -> export failed (Registry::mu)
  std::unordered_map<uint32_t, std::unordered_map<std::string, Mapping>> maps_;   // peer -> handle -> mapping
  uint64_t tick_ = 0;
  struct Counters {
    std::atomic<uint64_t> pulls{0}, pushes{0}, bytes{0}, refs{0}, fallbacks{0}, opens{0}, closes{0};
  } n_;
};

}  // namespace kinet::transport
