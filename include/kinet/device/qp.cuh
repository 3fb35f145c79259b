// kinet — device verbs: post RDMA work requests in the mlx5 wire format, ring
// the doorbell and poll completions, from CUDA threads or from host threads.
//
// Header-only. The same code is compiled by nvcc for kernels and by a plain
// C++20 compiler for host threads (tests, tools, the emulator's users).
//
// Posting is split in steps so callers can batch and cooperate:
//   reserve(n)   -> indices [first, first+n) of the send ring are yours
//   prepare_*()  -> write each 64-byte WQE into its slot
//   publish()    -> in reservation order, mark the slots ready
//   ring_doorbell() -> doorbell record, then doorbell word, for everything ready
// The one-call helpers (put, get, ...) do all four. Completions are tracked
// as tickets: the ring indices [first, idx) of an operation's WQEs.
//
// What a completion means (test()/wait() == Ok): the NIC is done with the
// operation's local buffers (a put's source may be reused, a get's or an
// atomic's destination holds the result) and, as far as RC guarantees, the
// data was placed at the responder. It does NOT mean that a third party (a
// kernel or a CPU thread on the target) can already see the data: the target
// observes remote writes only through its own acquire (e.g. an acquire load of
// a signal word written after the data, see put_signal) or an equivalent
// ordering step of its own.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kinet/device/platform.cuh"
#include "kinet/mlx5/wire.hpp"
#include "kinet/status.hpp"

namespace kinet {

// Memory keys as the NIC reads them: already big-endian. Made by the host
// (kinet::MemoryRegion::lkey()/rkey()); the hot path never swaps them.
struct Lkey { uint32_t be; };
struct Rkey { uint32_t be; };

namespace dev {

// Who may post to one QP concurrently. Selects the atomics' scope.
enum class Sharing : uint8_t {
  Exclusive,  // one thread owns the QP: plain loads and stores
  Cta,        // threads of one CTA (host builds: any threads)
  Gpu,        // threads of the whole GPU (host builds: any threads)
};
template <Sharing S> inline constexpr Scope kScope =
    S == Sharing::Exclusive ? Scope::Thread : (S == Sharing::Cta ? Scope::Cta : Scope::Gpu);

// Flags of one operation.
enum OpFlags : uint32_t {
  kSignal = 1u << 0,      // request a CQE for the (last) WQE of this operation
  kNoDoorbell = 1u << 1,  // publish but do not ring: a later op, ring_doorbell(), wait() or quiet() rings
  kFence = 1u << 2,       // NIC fence: wait for earlier reads/atomics of this QP before executing
};
// kFence matters after RDMA reads and atomics: RC lets the NIC start a later
// WQE before an earlier read or atomic has returned its data, so a WQE that
// must see the result of an earlier read/atomic (or must not overtake it at
// the responder) needs kFence. Writes and sends after writes are ordered
// without it.

// The WQEs of one operation: ring indices [first, idx). idx = 1 + the index
// of the last WQE (0 = nothing); first = the index of the first WQE. A
// Ticket{n} built by hand (first = 0) covers everything below n. An operation
// posted in several reservations on a shared QP (a split transfer larger
// than half the ring) may have other threads' WQEs inside [first, idx).
struct Ticket {
  uint64_t idx = 0;
  uint64_t first = 0;
};

// Most WQEs one put()/get() may need: 2^31 WQEs at the NIC's largest message
// (mlx5::kMaxMsgBytes) carry 2^61 bytes, beyond any address space, so a
// larger count can only come from a corrupted length.
inline constexpr uint64_t kMaxWqesPerTransfer = uint64_t{1} << 31;

// Posting bookkeeping of one QP, shared by the threads that post to it.
// Zero-initialised by the host; lives in memory all posting threads reach
// (GPU memory for kernels, host memory for host threads). Indices are
// free-running 64-bit counters; ring slot = index & (n - 1).
struct SqState {
  uint64_t reserved;   // next index to hand out
  uint64_t ready;      // every WQE below this is written and published
  uint64_t rung;       // every WQE below this has been announced to the NIC
  uint64_t signaled;   // 1 + index of the highest WQE prepared with kSignal (prepare_* raises it); the
                       // WQEs that close a signal period always request a CQE and are not counted here
  uint64_t completed;  // every WQE below this has completed (from CQEs)
  uint64_t error_wqe;  // ring index of the WQE of the first error CQE
  uint32_t cq_ci;      // CQEs consumed
  uint32_t db_lock;
  uint32_t cq_lock;
  int32_t error_status;  // Status of the first error CQE (0 = none)
  uint8_t error_syndrome;
  uint8_t error_vendor_syndrome;
  uint8_t broken;        // a reservation was abandoned after a timeout
  // Status of the first device-side failure of this QP (0 = none): one of
  // TimeoutSqSpace, TimeoutPublishOrder, TimeoutCompletion, TimeoutLock,
  // QpBroken. Written once (first one wins) by the verb that returns it, so
  // the host can say why a kernel gave up (QueuePair::last_error()).
  uint8_t local_error;
  // Debug builds: the abi word of a handle the verbs refused, so the host can
  // name the mismatch; meaningful when local_error is InvalidArgument (which
  // only that check records).
  uint32_t bad_abi;
};
static_assert(sizeof(SqState) == 72);

struct CqHandle {
  mlx5::Cqe64* cqes;  // 2^log_n entries
  uint32_t* dbrec;    // [0] consumer index (BE, low 24 bits)
  uint32_t log_n;
  uint32_t cqn;
};

// How a QP's posters tell the NIC about new WQEs (QpHandle::db_mode). Chosen
// per QP by the host (QpConfig::doorbell, $KINET_DOORBELL_MODE); every step
// before it (reserve, prepare, publish, the doorbell record) is the same.
enum class DoorbellMode : uint8_t {
  // The poster writes the 8-byte doorbell word to the doorbell register
  // (QpHandle::db: the UAR, mapped into the GPU for kernels).
  Uar = 0,
  // The poster copies the last announced WQE (64 bytes) into the BlueFlame
  // window (QpHandle::db, 64 bytes, of a BlueFlame-type UAR): its control
  // segment head is the doorbell and the NIC may execute the copy without
  // reading the ring. Bytes 8..63 are stored before the head.
  BlueFlame = 1,
  // The poster writes the doorbell record only (system scope); a CPU thread
  // of the provider watches the record and rings the doorbell register on the
  // posters' behalf (for GPUs that can't map the UAR). QpHandle::db is unused.
  CpuAssisted = 2,
};

// ABI guard of QpHandle: version << 16 | size in bytes. Bump the version
// whenever a field changes meaning or place; the size catches the rest.
inline constexpr uint32_t kQpHandleVersion = 2;
inline constexpr uint32_t kQpHandleBytes = 96;
inline constexpr uint32_t kQpHandleAbi = kQpHandleVersion << 16 | kQpHandleBytes;

// Trivially copyable device handle of one RC send queue and its CQ. Built by
// the host (kinet::QueuePair::handle()) and passed to kernels by value.
// Debug builds (!NDEBUG) of the verbs check `abi` at entry: a handle built for
// another layout (a kernel compiled against another kinet, a handle from
// zeroed or foreign memory) gets InvalidArgument, and, when its `state` is
// set, SqState::local_error = InvalidArgument and SqState::bad_abi = the word
// found (QueuePair::last_error() names the mismatch). Release builds do not
// check. prepare_* (void) do not check: reserve, which must come first, does.
struct QpHandle {
  uint32_t abi = kQpHandleAbi;  // first: readable whatever the rest of the layout is
  DoorbellMode db_mode = DoorbellMode::Uar;
  uint8_t rings_in_gpu_memory;  // selects the fence scope before the doorbell record
  // 1: host threads that post to this QP also run its NIC (the software NIC's
  // engine) for it, after each doorbell and each CQ poll (detail::host_kick),
  // so the NIC needs no busy thread of its own for them. Never read on the GPU.
  uint8_t host_kick;
  uint8_t pad0;
  uint8_t* sq;          // 2^log_n slots of 64 B
  uint32_t* dbrec;      // doorbell record; [1] = send producer index (BE)
  uint64_t* db;         // Uar: the doorbell register (UAR, or the emulator's); BlueFlame: the 64-byte window
  SqState* state;
  CqHandle cq;
  uint64_t timeout_ns;  // bound of every wait
  uint32_t log_n;
  uint32_t qpn;
  uint32_t qpn_be8;     // big-endian (qpn << 8): ctrl.qpn_ds = qpn_be8 | ds << 24
  uint32_t max_msg;     // most bytes one WQE carries, 1..mlx5::kMaxMsgBytes; larger transfers are split.
                        // Outside that range every verb that uses it returns InvalidArgument.
  uint32_t signal_period;  // power of two <= n/2: WQE i always requests a CQE when (i+1) % period == 0
  uint8_t pad[4];

  KINET_HD uint32_t size() const { return 1u << log_n; }
};
static_assert(sizeof(QpHandle) == kQpHandleBytes, "QpHandle changed size: update kQpHandleBytes (and the version)");
static_assert(std::is_trivially_copyable_v<QpHandle>, "QpHandle is passed to kernels by value");
static_assert(std::is_standard_layout_v<QpHandle>, "QpHandle is read by offset across compilers");
static_assert(offsetof(QpHandle, abi) == 0);

// ---------------------------------------------------------------------------
// Low-level steps. All take the sharing mode as a template parameter; every
// thread posting to one QP must use the same mode.

// Reserves n consecutive WQE slots (1 <= n <= size()/2) and stores the first
// index in *first. Waits (bounded) for free slots, ringing and polling the CQ
// meanwhile. A reservation must be published, even if unused (prepare_nop):
// later reservations wait for it. Shared QPs in kernels (sm_80+, see
// publish): lanes of a warp reserving together also wait for space together
// and return together (one status), so they stay one group for publish and
// ring_doorbell.
template <Sharing S> KINET_HD Status reserve(const QpHandle& q, uint32_t n, uint64_t* first);
// Like reserve, but never waits: returns NoSpace when the ring is full.
template <Sharing S> KINET_HD Status try_reserve(const QpHandle& q, uint32_t n, uint64_t* first);

// Writers of one 64-byte WQE at ring index idx. `flags`: kSignal, kFence.
// Threads of one CTA may prepare their own slots concurrently in every
// sharing mode (that is how coop.cuh's groups post).
// Contract: byte counts are <= q.max_msg (<= mlx5::kMaxMsgBytes, so bit 31 of
// a data segment's byte count, the inline flag, stays clear); debug builds
// assert it. Addresses and keys are not checked here: the NIC checks them and
// reports a bad one as an error CQE.
template <Sharing S> KINET_HD void prepare_nop(const QpHandle& q, uint64_t idx, uint32_t flags);
template <Sharing S> KINET_HD void prepare_write(const QpHandle& q, uint64_t idx, const void* laddr, Lkey lkey,
                                                 uint64_t raddr, Rkey rkey, uint32_t bytes, uint32_t flags);
// Inline write: the payload (<= mlx5::kMaxInlineOneBB bytes) is copied into the WQE.
template <Sharing S> KINET_HD void prepare_write_inline(const QpHandle& q, uint64_t idx, const void* data,
                                                        uint32_t bytes, uint64_t raddr, Rkey rkey, uint32_t flags);
template <Sharing S> KINET_HD void prepare_read(const QpHandle& q, uint64_t idx, void* laddr, Lkey lkey,
                                                uint64_t raddr, Rkey rkey, uint32_t bytes, uint32_t flags);
// 8-byte atomics on raddr (8-byte aligned); the old remote value lands at result.
template <Sharing S> KINET_HD void prepare_fetch_add(const QpHandle& q, uint64_t idx, uint64_t* result, Lkey lkey,
                                                     uint64_t raddr, Rkey rkey, uint64_t add, uint32_t flags);
template <Sharing S> KINET_HD void prepare_compare_swap(const QpHandle& q, uint64_t idx, uint64_t* result,
                                                        Lkey lkey, uint64_t raddr, Rkey rkey, uint64_t compare,
                                                        uint64_t swap, uint32_t flags);

// Marks [first, first+n) ready, in reservation order: waits (bounded) until
// every earlier reservation is published. WQE stores are visible to whoever
// rings the doorbell before the slots count as ready.
// Shared QPs in kernels (sm_80+): the lanes of one warp that call reserve,
// publish or ring_doorbell on the same QP at the same time are served as one
// caller (one reservation atomic for the lanes asking the same n, slots in
// lane order; one in-order publish when their ranges are adjacent; one
// doorbell attempt; publish and ring_doorbell give them one status). Lanes
// that arrive apart are served one by one, as host threads are: a per-lane
// branch that may leave the caller's loop (`if (..) { st = ring_doorbell(..);
// if (st) break; }`) keeps lanes apart for good; join it first, then test. A cooperative post per warp or CTA
// (coop.cuh) is still the cheapest way to post many WQEs.
template <Sharing S> KINET_HD Status publish(const QpHandle& q, uint64_t first, uint32_t n);

// Ensures every published WQE below `upto` has been announced to the NIC:
// doorbell record, then (by q.db_mode) the doorbell word, the BlueFlame copy
// of the last WQE, or nothing (CpuAssisted: the provider's thread rings).
// Any thread may ring for others.
template <Sharing S> KINET_HD Status ring_doorbell(const QpHandle& q, uint64_t upto);

// Consumes the CQEs that have arrived and advances the completed index.
// Returns Ok. Errors are recorded in the QP state and reported by
// test()/wait() for the tickets they concern.
template <Sharing S> KINET_HD Status poll_cq(const QpHandle& q);

// Ok when the ticket's WQEs completed, Pending when not yet, or the error of
// its completion: the fault's status when the faulting WQE lies in
// [t.first, t.idx) (for a split transfer: the status of the chunk that
// failed), WrFlushed when the fault came before t.first (the QP is in the
// error state). Ok means what "What a completion means" (top) says, no more.
template <Sharing S> KINET_HD Status test(const QpHandle& q, Ticket t);
// Waits (bounded by q.timeout_ns) for a ticket; returns as test() does, or
// TimeoutCompletion / QpBroken. If no WQE at or after the ticket requested a
// CQE, posts a signalled NOP so that one will come.
template <Sharing S> KINET_HD Status wait(const QpHandle& q, Ticket t);
// Waits for everything reserved so far on this QP. Ok, or the status of the
// last WQE reserved before the call (WrFlushed when an earlier WQE faulted).
template <Sharing S> KINET_HD Status quiet(const QpHandle& q);

// ---------------------------------------------------------------------------
// Exclusive QPs, step by step with the counters in the owner's hands.
// The steps above keep the counters in SqState, so each call reloads them
// from memory (one round trip per WQE: the compiler cannot keep them in
// registers across a WQE store). An SqCursor is a copy of them the owner
// holds in a local variable (registers) between open_cursor and close_cursor:
//   SqCursor c; open_cursor(q, &c);
//   reserve(q, c, n, &first); prepare_*<Sharing::Exclusive>(q, idx, ...);
//   publish(q, c, first, n); ring_doorbell(q, c, upto); ... close_cursor(q, c);
// While a cursor is open, SqState's reserved/ready/rung are stale:
// on q only the cursor's steps, prepare_*<Exclusive>, poll_cq<Exclusive> and
// test<Exclusive> may be called (they do not use those counters), by the
// owner. The other verbs (wait, quiet, put, ...) after close_cursor, which
// writes the counters back. A reserve that finds the ring full writes them
// back, waits as reserve<Exclusive> does (bounded; TimeoutSqSpace breaks the
// QP) and reloads them; `broken` is checked there and at open_cursor only
// (no one else may break an Exclusive QP while its owner posts).
struct SqCursor {
  uint64_t reserved;  // as SqState's
  uint64_t ready;
  uint64_t rung;
  uint64_t limit;     // SqState::completed + size() when last read: reserve without waiting below it
  uint32_t max_n;     // size() / 2: the most slots one reservation may take
};
// InvalidArgument (bad handle), QpBroken, or Ok with *c loaded. On failure
// *c is "not open": reserve and ring_doorbell return InvalidArgument for it
// and close_cursor does nothing.
KINET_HD Status open_cursor(const QpHandle& q, SqCursor* c);
// As reserve<Exclusive>; Ok, InvalidArgument (n, or a cursor not open),
// QpBroken or TimeoutSqSpace.
KINET_HD Status reserve(const QpHandle& q, SqCursor& c, uint32_t n, uint64_t* first);
// As publish<Exclusive> (ranges in reservation order); always Ok. Not checked
// (it is one store on the hot path): only ranges reserve(q, c, ...) handed out.
KINET_HD Status publish(const QpHandle& q, SqCursor& c, uint64_t first, uint32_t n);
// As ring_doorbell<Exclusive>: announces everything published; Ok, or
// InvalidArgument for a cursor not open.
KINET_HD Status ring_doorbell(const QpHandle& q, SqCursor& c, uint64_t upto);
// Writes the counters back to SqState (nothing for a cursor not open); the
// cursor is then spent.
KINET_HD void close_cursor(const QpHandle& q, const SqCursor& c);

// Exclusive QPs: every call on the QP comes from its one owner thread. After
// a cooperative post (coop.cuh warp_post<Exclusive> and the warp_*/cta_*
// helpers), the owner is the group's leader: only that thread may then
// test/wait/poll_cq/quiet or post singly. Debug device builds trap when two
// lanes of one warp call an Exclusive verb on the same QP at once.

// ---------------------------------------------------------------------------
// One-call operations: reserve, prepare, publish, ring (unless kNoDoorbell).
// *t (optional) receives the ticket. The payload of src may be reused only
// after the ticket completes. Transfers larger than q.max_msg are split into
// several WQEs; the ticket covers all of them.
// Lengths are checked before anything is posted: InvalidArgument, nothing
// reserved, when q.max_msg is outside 1..mlx5::kMaxMsgBytes or the transfer
// needs more than kMaxWqesPerTransfer WQEs (this covers bytes near SIZE_MAX).
// A split transfer stops at the first failure: a failing step's status, or,
// between two reservations, the QP's error status once an error CQE was seen
// (the fault's status if it lies in this transfer, else WrFlushed). When it
// stops after posting some WQEs, *t covers those: wait on it before reusing
// the buffer.

// RDMA write of bytes from src (registered under lkey) to raddr (rkey).
template <Sharing S> KINET_HD Status put(const QpHandle& q, const void* src, Lkey lkey, uint64_t raddr, Rkey rkey,
                                         size_t bytes, uint32_t flags = 0, Ticket* t = nullptr);
// RDMA write with the payload inside the WQE: src needs no registration and is
// reusable on return. bytes <= mlx5::kMaxInlineOneBB, else InvalidArgument.
template <Sharing S> KINET_HD Status put_inline(const QpHandle& q, const void* src, uint32_t bytes, uint64_t raddr,
                                                Rkey rkey, uint32_t flags = 0, Ticket* t = nullptr);
// RDMA read of bytes at raddr into dst. dst holds the data once the ticket completes.
template <Sharing S> KINET_HD Status get(const QpHandle& q, void* dst, Lkey lkey, uint64_t raddr, Rkey rkey,
                                         size_t bytes, uint32_t flags = 0, Ticket* t = nullptr);
// Remote 8-byte fetch-add / compare-and-swap; *result gets the old value once the ticket completes.
template <Sharing S> KINET_HD Status fetch_add(const QpHandle& q, uint64_t* result, Lkey lkey, uint64_t raddr,
                                               Rkey rkey, uint64_t add, uint32_t flags = 0, Ticket* t = nullptr);
template <Sharing S> KINET_HD Status compare_swap(const QpHandle& q, uint64_t* result, Lkey lkey, uint64_t raddr,
                                                  Rkey rkey, uint64_t compare, uint64_t swap, uint32_t flags = 0,
                                                  Ticket* t = nullptr);
// put, then a fetch-add of `add` on the remote signal word sig_raddr.
// scratch receives the old signal value; the ticket covers both.
// What it guarantees: the responder executes the fetch-add after it has
// executed the payload writes of this put and of every earlier write on this
// QP (RC orders an atomic behind earlier writes; no kFence needed for that).
// It does not by itself make the data visible to a kernel on the target,
// least of all where the target memory is written with relaxed ordering
// (PCIe relaxed ordering, GPU memory written by a NIC): the target must
// acquire-load the signal (system scope) before reading the data, and rely on
// nothing it read without that acquire. Operations that must come after an
// RDMA read or atomic of this QP need kFence (see kFence).
template <Sharing S> KINET_HD Status put_signal(const QpHandle& q, const void* src, Lkey lkey, uint64_t raddr,
                                                Rkey rkey, size_t bytes, uint64_t sig_raddr, Rkey sig_rkey,
                                                uint64_t add, uint64_t* scratch, Lkey scratch_lkey,
                                                uint32_t flags = 0, Ticket* t = nullptr);
// Exclusive QPs, the owner's posting loop in one call: posts `count` WQEs,
// WQE i written by make(idx, f) with one prepare_*<Sharing::Exclusive>(q, idx,
// ..., f) call (f: the caller's kFence on the first WQE, kSignal on the last),
// and rings the doorbell whenever the ring index reaches a multiple of
// db_every (a power of two) and after the last WQE (unless kNoDoorbell).
// The counters stay in registers for the whole call (an SqCursor, above):
// no SqState round trip per WQE, and ring space is checked once per run of
// slots the cursor knows are free, not per WQE. SqState is written back
// before any wait for free slots and when the call returns, so it is exact
// whenever no post_loop is running. make must not call other verbs on q.
// InvalidArgument (nothing posted) for count == 0, db_every not a power of
// two, or a reservation outstanding (reserved != ready). Waits for space
// like reserve() (bounded; TimeoutSqSpace breaks the QP); on a failure *t
// covers the WQEs posted before it.
template <class Make>
KINET_HD Status post_loop(const QpHandle& q, uint64_t count, uint32_t db_every, uint32_t flags, Ticket* t,
                          Make make);
// A NOP WQE (with kSignal: a completion marker).
template <Sharing S> KINET_HD Status nop(const QpHandle& q, uint32_t flags = 0, Ticket* t = nullptr);

}  // namespace dev
}  // namespace kinet

#include "kinet/device/impl/qp_funcs.cuh"
