// kinet emu — the software NIC. Internal header.
//
// A Nic is one emulated ConnectX: a memory-key table, QPs, and an engine
// thread that watches each QP's doorbell record and executes its send WQEs
// as the hardware does (in order per QP, keys/bounds/access checked, CQEs
// only when requested, error CQE + QP error state + flush on a fault).
// Nics of one process reach each other through the Fabric (fabric.hpp).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/reuse_ring.hpp"
#include "core/text.hpp"
#include "fabric/endpoint.hpp"
#include "kinet/kinet.hpp"
#include "providers/emu/decode.hpp"
#include "providers/emu/prm.hpp"

namespace kinet::emu {

// "0x1234": keys, QP numbers and addresses in messages.
using text::hex;

struct MrEntry {
  uint64_t addr = 0;
  uint64_t len = 0;
  uint32_t access = 0;
  uint32_t pd = 0;
  MemoryKind kind = MemoryKind::Host;
};

struct Nic;
class RemotePeer;
struct Call;

// ---- control path (ctl): numbering of live objects ----------------------------
// Memory keys and QP numbers are (index << 8 | generation). Indices are
// taken round robin from [1, limit], so a freed one is reused only after
// every other free index was; its generation is bumped on each release, so
// even then the old number doesn't name the new object (for 255 more reuses).
// Not thread-safe: the owner's mutex guards it.
struct IdSpace {
  uint32_t limit = 0;       // most ids alive at once (indices 1..limit)
  uint8_t first_gen = 0;    // generation of an index's first use
  uint32_t cursor = 0;      // last index handed out
  uint32_t live = 0;
  std::vector<uint8_t> gen;  // [index], grown as indices are first used
  std::vector<bool> used;
  // Takes a free index; false when `limit` are alive. May throw bad_alloc.
  bool take(uint32_t* id);
  void release(uint32_t id);
};

// One RC QP with its send ring and CQ, shared by the host object, the
// engine and the fabric (peers executing against it).
struct EmuQp {
  std::shared_ptr<Nic> nic;
  uint32_t qpn = 0;
  uint32_t pd = 0;
  QpConfig cfg;
  uint32_t log_n = 0;
  uint32_t max_msg = 0;
  // Memory the poster and the engine share.
  uint8_t* sq = nullptr;
  uint32_t* dbrec = nullptr;     // [1]: send counter
  uint64_t* db = nullptr;        // doorbell register (8 B "UAR")
  dev::SqState* qstate = nullptr;
  mlx5::Cqe64* cqes = nullptr;
  uint32_t* cq_dbrec = nullptr;  // [0]: consumer index
  uint8_t* block = nullptr;      // one allocation holding all of the above
  bool block_on_gpu = false;
  // The rings, records and doorbell word belong to someone else (the DevX
  // entry point, devx_nic.cpp: UMEM and UAR memory): ~EmuQp frees none of them.
  bool external_rings = false;
  dev::SqState* gpu_state = nullptr;  // posters == Gpu with host rings: the state alone in GPU memory
  // How posters ring (dev::DoorbellMode). BlueFlame: `db` is a 64-byte window
  // holding a copy of the last announced WQE, checked against the ring (engine.cpp).
  dev::DoorbellMode db_mode = dev::DoorbellMode::Uar;
  // Posted by host threads only, rings in host memory (QpHandle::host_kick):
  // they run the engine for this QP themselves (host_kick, engine.cpp), so
  // the engine thread looks at it only now and then when idle.
  bool host_kick = false;
  // Control state.
  std::atomic<QpState> state{QpState::Reset};
  uint32_t remote_access = 0;
  uint64_t remote_node = 0;
  uint32_t remote_qpn = 0;
  // Engine-side progress (under exec_mu: the engine thread, or a host
  // thread's kick, runs the QP).
  uint64_t sq_ci = 0;  // WQEs executed or flushed
  uint64_t cq_pi = 0;  // CQEs written
  mutable std::mutex err_mu;
  std::string last_error;
  // Control path (ctl): serialises the host's transitions (the NIC may still
  // move the state to ERROR concurrently: transitions compare-exchange).
  std::mutex ctl_mu;
  std::shared_ptr<const std::atomic<bool>> pd_destroyed;  // set by ~ProtectionDomain

  // ---- strict NIC: doorbells, relaxed execution, teardown (engine.cpp, fabric.cpp) ----
  // Held by the engine while it runs this QP, and by teardown to stop it.
  std::mutex exec_mu;
  // Held shared by a peer's engine while it executes an operation against
  // this QP (fabric.cpp); exclusively by teardown to wait those out.
  std::shared_mutex responder_mu;
  // Set once by ~QueuePair (never cleared, unlike the state): the engine and
  // the fabric stop touching this QP.
  std::atomic<bool> destroyed{false};
  // Engine-only: WQEs announced by doorbells so far (absolute index).
  uint64_t sq_announced = 0;
  // Engine-only: relaxed mode's issued-but-not-completed WQEs, oldest first.
  struct InFlight {
    uint64_t idx = 0;
    uint8_t bb[64];
    DecodedWqe w;
    std::vector<uint8_t> snapshot;  // WRITE source read at issue (an earlier read/atomic was outstanding)
    // A QP whose peer is in another process: the WQE's Requests (one per
    // SGE, split at fabric::kMaxChunk), how many were sent and how many
    // answers were taken, and the first fault (syndrome 0: none).
    struct Chunk {
      uint64_t raddr = 0, len = 0;
      int sge = -1;          // -1: inline data or no SGE
      uint64_t sge_off = 0;  // offset in that SGE (or in the inline data)
      std::shared_ptr<Call> call;
      bool urgent = false;  // sent without kAckLater: its answer comes at once
    };
    std::vector<Chunk> chunks;
    size_t sent = 0, reaped = 0;
    uint8_t fault_syndrome = 0;
    std::string fault_why;
    // As new, for a slot the window reuses: vectors keep their capacity
    // (but no large snapshot or chunk list outlives its WQE).
    void reuse() {
      idx = 0;
      w = DecodedWqe{};
      if (snapshot.capacity() > (64u << 10)) std::vector<uint8_t>().swap(snapshot);
      snapshot.clear();
      if (chunks.capacity() > 64) std::vector<Chunk>().swap(chunks);
      chunks.clear();
      sent = reaped = 0;
      fault_syndrome = 0;
      fault_why.clear();
    }
  };
  // Oldest first; a push takes window.next() (then reuse()), fills it in
  // place and goes through QpRunner::push_window.
  ReuseRing<InFlight> window;
  // 1 + the index of the newest READ or atomic pushed into the window (0:
  // none since the last reset). The window is in WQE order and retires from
  // the front, so one is still in it iff this is above the front's index:
  // window_has_read_or_atomic() in O(1) instead of a walk per WQE.
  uint64_t read_atomic_end = 0;
  // Cross-process peer (fabric/remote_fabric.hpp), set by to_rtr when the
  // remote QP lives in another process; written and read under exec_mu.
  std::shared_ptr<RemotePeer> peer;
  // Engine-only: bytes of this QP's Requests not yet answered (flow control).
  uint64_t remote_out_bytes = 0;
  // Engine-only: seqs of this QP's Requests sent without kAckLater (their
  // answers are never held back) and not yet answered, oldest first. While
  // the oldest has left, a pass that started nothing for a signalled WQE
  // leaves its Requests queued (QpRunner::step_remote).
  std::deque<uint64_t> urgent_seqs;
  // Engine-only: a bad doorbell, reported on the WQE at this index.
  uint64_t doorbell_fault_idx = ~0ull;
  std::string doorbell_fault;
  // Engine-only: a repeated error is logged once, then counted.
  std::string repeat_key;
  uint64_t repeat_count = 0;

  ~EmuQp();
};

struct Nic {
  std::string name;
  uint64_t node = 0;  // fabric address
  DeviceAttr attr;
  // Memory keys.
  std::shared_mutex mr_mu;
  std::unordered_map<uint32_t, MrEntry> mrs;
  uint8_t key_tag = 0;
  // QPs.
  std::mutex qp_mu;
  std::unordered_map<uint32_t, std::shared_ptr<EmuQp>> qps;
  std::atomic<uint64_t> qp_generation{0};
  std::atomic<uint32_t> next_pd{1};
  // Control path (ctl).
  IdSpace mr_ids;  // memory keys, under mr_mu
  IdSpace qp_ids;  // QP numbers, under qp_mu
  std::atomic<bool> closed{false};  // the Device object is gone: control calls throw BadState
  // Engine.
  std::atomic<bool> stop{false};
  std::thread engine;
  // The engine's idle sleep when every QP is kicked by its posters: ended
  // early by wake() (a QP created, the engine stopping).
  std::mutex idle_mu;
  std::condition_variable idle_cv;
  void wake() {
    std::lock_guard<std::mutex> g(idle_mu);
    idle_cv.notify_all();
  }
  // Stops and joins the engine thread (teardown).
  void stop_engine() {
    stop.store(true, std::memory_order_release);
    wake();
    if (engine.joinable()) engine.join();
  }

  // KINET_EMU_RELAXED != 0, read by start_engine(): relaxed execution (engine.cpp).
  bool relaxed = false;
  // On the cross-process fabric (DeviceOptions::emu_fabric, KINET_EMU_FABRIC):
  // its QPs' info carries the process's endpoint for `via`. Set at open.
  bool cross_process = false;
  fabric::Via via = fabric::Via::Tcp;

  bool lookup_mr(uint32_t key, MrEntry* out);
  std::shared_ptr<EmuQp> find_qp(uint32_t qpn);
  // Starts the engine thread. KINET_EMU_RELAXED is read here, before any
  // thread (the engine, or a poster's host_kick) runs a QP.
  void start_engine();
  void run_engine();
  // One pass over `qp` (doorbell, issue, retire); true if anything happened.
  // Caller holds qp.exec_mu, and qp is not destroyed. A CUDA failure on the
  // rings puts the QP in ERROR with the reason; nothing throws.
  bool run_qp(EmuQp& qp);
  // host_kick's table: a QP with host_kick is found by its doorbell word
  // from the moment it is created until quiesce_qp.
  static void add_kick(const std::shared_ptr<EmuQp>& qp);
  static void remove_kick(const EmuQp& qp);
  // Teardown of one QP (from ~QueuePair, any thread): QP to ERROR, every
  // announced-but-uncompleted WQE completed with a flush CQE, then waits until
  // neither this Nic's engine nor a peer's responder touches `qp`. After it
  // returns no byte moves on the QP's behalf.
  void quiesce_qp(EmuQp& qp);
  // modify-to-RESET of one QP (QueuePair::reset, with the QP already in
  // ERROR): waits until neither the engine nor a peer's responder is inside
  // it, discards the engine's progress and in-flight window, and runs
  // `reinit` (re-initialises the rings) while the engine is kept out.
  void reset_qp(EmuQp& qp, const std::function<void()>& reinit);
};

// A fault found while executing a WQE: the PRM syndrome of its error CQE
// and the reason, for QueuePair::last_error() and the log.
struct Fault {
  uint8_t syndrome = 0;
  std::string why;
  explicit operator bool() const { return syndrome != 0; }
};

// The responder half of one RDMA operation, as it travels to the peer.
struct RemoteOp {
  enum Kind : uint8_t { Write, Read, FetchAdd, CompareSwap } kind;
  uint64_t raddr;
  uint32_t rkey;
  uint64_t len;
  const void* src = nullptr;          // Write: the payload (in the requester's memory)
  MemoryKind src_kind = MemoryKind::Host;
  void* dst = nullptr;                // Read: where the payload goes (requester's memory)
  MemoryKind dst_kind = MemoryKind::Host;
  uint64_t operand = 0, compare = 0;  // atomics
  uint64_t* old_value = nullptr;      // atomics: receives the old remote value (host memory)
};

// Joins emulated NICs. Today one process (InProcessFabric); the interface is
// what a cross-process fabric (shared memory, sockets) implements: address
// assignment, reachability, and executing the responder side of an operation
// with the responder's checks (connection, rkey, bounds, access).
class Fabric {
 public:
  virtual ~Fabric() = default;
  // Gives `nic` an address and a name: `want` = "emu" (first free emuN) or "emuN". Throws if taken.
  virtual void attach(const std::shared_ptr<Nic>& nic, std::string_view want) = 0;
  virtual void detach(uint64_t node) = 0;
  virtual bool reachable(uint64_t node) = 0;
  // Executes `op` at QP `qpn` of `node` on behalf of QP from_qpn of from_node.
  virtual Fault execute(uint64_t from_node, uint32_t from_qpn, uint64_t node, uint32_t qpn, const RemoteOp& op) = 0;
};
Fabric& fabric();  // this process's fabric

// Held shared by an engine while it executes one WQE (local and remote
// memory accesses included); taken exclusively by deregistration after the
// key is gone, so no copy into a deregistered region is still in flight when
// reg_mr's object dies and the caller frees the memory.
std::shared_mutex& memory_guard();
// What deregistration does once the key is gone: waits out the WQEs that
// looked it up before (memory_guard() exclusively), then sends the WRITE
// payloads they queued in place on a link (RemotePeer::Payload::UntilSent),
// so that no byte is read from the region after this returns.
void drain_memory();

std::unique_ptr<Device> open_device(std::string_view name, const DeviceOptions& opt);

// Largest DeviceOptions::emu_max_mr / emu_max_qp: memory keys and QPNs are
// index << 8 | generation, keys with a 24-bit index, QPNs a 16-bit one.
inline constexpr uint32_t kMaxMrLimit = (1u << 24) - 1;
inline constexpr uint32_t kMaxQpLimit = (1u << 16) - 1;
// Throws InvalidArgument ("<who>: open: emu_max_mr ...") when opt's emu_max_mr
// or emu_max_qp is 0 or above those limits.
void check_id_limits(const std::string& who, const DeviceOptions& opt);

// ibv_reg_mr's check of host memory: every byte of [addr, addr+len) (no wrap)
// mapped and readable, and writable when `write`; else throws InvalidArgument
// naming the first bad byte (ResourceExhausted / System when /proc/self/maps
// can't be read). `who` prefixes the message.
void check_mapping(const std::string& who, uint64_t addr, uint64_t len, bool write);

}  // namespace kinet::emu
