// kinet — the communicator's device API: one-sided operations on symmetric
// windows of other ranks, whatever path serves each peer.
//
// Header-only, compiled by nvcc for kernels and by a plain C++20 compiler for
// host threads (tests, CPU-only users), like qp.cuh and proxy.cuh. The host
// side (kinet/comm.hpp) builds the handles; kernels take them by value:
//
//   __global__ void k(dev::CommHandle c, dev::WindowHandle w) {
//     int peer = (c.rank + 1) % c.size;
//     dev::put_signal(c, peer, w, 0, w, 4096, 4096, w, 8192, dev::SigOp::Add, 1);
//     dev::wait_signal(c, w, 8192, dev::Cmp::Ge, 1);
//   }
//
// Each operation dispatches on the peer's path (CommHandle::peers[peer].path):
//   Self   the caller's own rank: plain copies and atomics on the window.
//   P2p    the peer's window is mapped here (CUDA IPC): vectorised stores and
//          system-scope atomics on the mapping.
//   Proxy  a descriptor on the peer's proxy channel (kinet/device/proxy.cuh):
//          a CPU proxy thread executes it on the communicator's transport.
//   Gdaki  WQEs on the RC queue pair to the peer (kinet/device/qp.cuh): the
//          caller posts them and rings the doorbell of the NIC (a ConnectX,
//          or the software NIC "emu" on its cross-process fabric) itself.
//
// Addresses are (window, byte offset) pairs: the same window has the same
// size on every rank (symmetric), so an offset names the same place on every
// rank. A source or destination on the caller's side lies in the caller's
// own part of a window (for the proxy and gdaki: its registration is what
// lets the proxy thread or the NIC read or write it).
//
// Completion and ordering (the weakest promise over every path):
//   put / get / put_value return once the operation is handed off; the
//   source may be reused (put) or the destination read (get) only after
//   quiet() returned Ok.
//   put_signal / signal change the peer's 8-byte signal word only after the
//   data of this call and every earlier put / put_value / atomic of this
//   rank to that peer are in place there: a waiter on the signal that saw
//   the new value sees the data.
//   fetch_add / compare_swap block until the old value is known.
//   quiet(): every operation this rank posted so far is complete.
//   Atomics and signals on host-memory windows: those of remote ranks
//   (applied by the transport under its lock) are not atomic with respect to
//   the own rank's (self path, CPU atomics) on the same word; see docs/COMM.md.
//   fence(peer): puts posted after it reach the peer after those before it
//   (for the proxy and gdaki paths it is a quiet of that peer's channel / QP).
//   Gdaki: put_signal / signal with Add is an RDMA fetch-add the responder
//   executes after the earlier writes and atomics of the QP (RC order); with
//   Set it is an 8-byte inline RDMA write with the NIC fence (behind earlier
//   reads and atomics too) relying on RC's in-order placement of writes of one
//   QP (see docs/COMM.md for where that is weaker); quiet() waits for every
//   WQE posted to every gdaki QP (RC completions: the data is placed at the
//   responder, qp.cuh "What a completion means").
//   barrier(): quiet, then every rank arrives; afterwards every rank's data
//   written before its barrier is visible. ONE thread per rank calls it.
//
// Local-completion counters (per window; see "Counters" below): a put or
// put_signal given CounterInc{i} adds 1 to counter i of its SOURCE window
// once its source may be reused. Earlier than (or at) quiet(); NOT a promise
// that the peer sees the data.
//
// Every wait is bounded by CommHandle::timeout_ns. A failed operation returns
// its Status and records the first failure of this rank in CommState (which
// peer, which operation, window and offset, what was expected and seen);
// Comm::device_error() on the host spells it out. A peer known to be lost
// (the host's monitor saw its transport fail) ends the waits that involve it
// at once with TransportRetryExceeded; a gdaki peer whose QP reported an
// error CQE ends them with that CQE's status (a lost peer: the software NIC's
// fabric and a ConnectX both report TransportRetryExceeded).
//
// Sharing (as in qp.cuh): S is how many threads use the handle at once;
// the default, Gpu, is right for kernels and for several host threads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kinet/device/proxy.cuh"

namespace kinet::dev {

enum class CommPath : uint32_t { Self = 1, P2p = 2, Proxy = 3, Gdaki = 4 };
// How a signal changes the 8-byte word (kinet::SignalOp's values).
enum class SigOp : uint32_t { Add = 1, Set = 2 };
// wait_signal's comparison: word <cmp> value.
enum class Cmp : uint32_t { Eq = 1, Ne = 2, Gt = 3, Ge = 4, Lt = 5, Le = 6 };
// Operations, as recorded in CommState::err_op.
enum class CommOp : uint32_t {
  None = 0, Put, PutValue, Get, PutSignal, Signal, WaitSignal, FetchAdd, CompareSwap, Quiet, Fence, Barrier,
  WaitCounter, ReadCounter, ResetCounter,
};

// The option that makes a put / put_signal count its local completion on
// counter `index` of its source window (WindowHandle::counters).
// CounterInc{kNoCounter} (the default argument): not counted. kNoCounter is
// wider than any counter index (ncounters is 32-bit), so no computed index
// can become it by accident: an index >= ncounters, 2^32-1 included, is an
// InvalidArgument.
inline constexpr uint64_t kNoCounter = ~uint64_t{0};
struct CounterInc {
  uint64_t index;
};

// 3: WindowHandle::counters/ncounters, CommPeer::ctr
inline constexpr uint32_t kCommHandleVersion = 3;  // 2: CommPeer::qp, WindowHandle::qp_lkey (Gdaki)
inline constexpr uint32_t kWindowHandleBytes = 56;
inline constexpr uint32_t kCommHandleBytes = 104;
inline constexpr uint32_t kWindowHandleAbi = 0xC0000000u | kCommHandleVersion << 16 | kWindowHandleBytes;
inline constexpr uint32_t kCommHandleAbi = 0xC0000000u | kCommHandleVersion << 16 | kCommHandleBytes;

// One peer's part of a window.
struct CommWindowPeer {
  uint64_t raddr;   // the window's address in the peer's process (Proxy, Gdaki)
  uint8_t* mapped;  // the peer's window mapped here (Self, P2p); null otherwise
  uint32_t rkey;    // Proxy: the Rkey id on the peer's channel; Gdaki: the peer's MR rkey (big-endian, Rkey::be)
  uint32_t pad;
};
static_assert(sizeof(CommWindowPeer) == 24);

// A symmetric window, by value to kernels (Comm's windows build it).
struct WindowHandle {
  uint32_t abi = kWindowHandleAbi;  // first: readable whatever the rest of the layout is
  uint32_t id;                      // the window's number in its Comm (for messages)
  uint8_t* local;                   // this rank's part
  uint64_t bytes;                   // size of every rank's part
  uint32_t lkey;                    // Proxy: this rank's part as a proxy Lkey id
  uint32_t qp_lkey;                 // Gdaki: this rank's part's MR lkey (big-endian, Lkey::be)
  const CommWindowPeer* peers;      // [CommHandle::size], memory the posters read
  // Local-completion counters of this rank's part: ncounters pairs of 8-byte
  // words {value, failure}; failure = 0, or the first counted operation that
  // failed: (uint64_t(peer) << 32) | uint32_t(Status). Null when ncounters is 0.
  uint64_t* counters;
  uint32_t ncounters;
  uint32_t pad;
};
static_assert(sizeof(WindowHandle) == kWindowHandleBytes, "update kWindowHandleBytes");
static_assert(std::is_trivially_copyable_v<WindowHandle> && std::is_standard_layout_v<WindowHandle>);
static_assert(offsetof(WindowHandle, abi) == 0);

// A scratch slot for an atomic's result on the proxy path: owner is 0 when
// free, ring index + 1 of the poster reading its result otherwise.
struct CommAtomicSlot {
  uint64_t value;
  uint64_t owner;
};

// Counter bookkeeping of one proxy channel or gdaki QP (CommPeer::ctr):
// which ring slot carries a counted operation, and how far completions were
// credited to the counters. 64 bytes, then CommCounterTag[ring size].
struct CommCounterTag {
  uint64_t owner;     // ring index + 1 of the counted operation in this slot (stale when not equal)
  uint64_t* counter;  // its counter's {value, failure} pair
};
struct CommCounterTrack {
  uint64_t credited;  // every counted operation below this ring index was counted (or its failure recorded)
  uint64_t tagged;    // 1 + the highest ring index tagged
  uint32_t lock;      // held by the thread crediting
  uint32_t pad[11];
};
static_assert(sizeof(CommCounterTrack) == 64 && sizeof(CommCounterTag) == 16);

struct CommPeer {
  uint32_t path;                    // CommPath
  uint32_t scratch_lkey;            // Proxy: Lkey id of the scratch below; Gdaki: the scratch MR's lkey (Lkey::be)
  ProxyHandle ch;                   // Proxy: the channel to this peer
  uint64_t* put_scratch;            // Proxy: [ch.size()] sources of put_value, by ring slot;
                                    // Gdaki: [1] where signal fetch-adds return the old value (never read)
  CommAtomicSlot* atomic_scratch;   // Proxy: [ch.size()], Gdaki: [qp.size()] results of atomics, by ring slot
  CommCounterTrack* ctr;            // Proxy, Gdaki: counter bookkeeping; null until a window has counters
  QpHandle qp;                      // Gdaki: the RC QP to this peer
};
static_assert(sizeof(CommPeer) == 80 + sizeof(QpHandle));
static_assert(std::is_trivially_copyable_v<CommPeer>);

// Mutable state of one rank, in memory every poster reaches.
struct CommState {
  uint64_t barrier_epoch;  // barriers this rank entered
  int32_t err_status;      // first failure (Status); 0: none. Written last, with release
  int32_t err_peer;        // -1: none in particular
  uint32_t err_op;         // CommOp
  uint32_t err_window;     // window id, or ~0u
  uint64_t err_offset;
  uint64_t err_expected;   // what was waited for (a signal value, a barrier epoch)
  uint64_t err_seen;       // what was there at the end
  uint32_t err_lock;
  uint32_t err_counter;    // 1: err_offset is a counter index; 2: that index was refused (err_expected: the count)
};
static_assert(sizeof(CommState) == 56);

// The communicator, by value to kernels (Comm::device_handle()).
struct CommHandle {
  uint32_t abi = kCommHandleAbi;  // first
  int32_t rank;
  int32_t size;
  uint32_t pad;
  const CommPeer* peers;          // [size]
  CommState* state;
  const uint32_t* peer_down;      // [size]: nonzero once the host saw the peer's transport fail
  uint64_t timeout_ns;            // bound of every wait
  WindowHandle barrier;           // internal window: size 8-byte arrival counters, one per rank
};
static_assert(sizeof(CommHandle) == kCommHandleBytes, "update kCommHandleBytes");
static_assert(std::is_trivially_copyable_v<CommHandle> && std::is_standard_layout_v<CommHandle>);
static_assert(offsetof(CommHandle, abi) == 0);

// ---------------------------------------------------------------------------
// Thread variants. Any thread may call them (S = how many share the handle).
// Common errors: InvalidArgument (bad abi word, peer out of [0, size), a range
// outside the window, a misaligned signal or atomic word (8 bytes), bytes 0
// in get, nbytes outside 1..8 in put_value); the proxy's statuses
// (TimeoutSqSpace, QpBroken, WrFlushed, the transport's failure); on the
// gdaki path the QP's (the same names, and the error CQE's status).

// Copies [src_off, src_off + bytes) of my part of `src` to
// [dst_off, dst_off + bytes) of `peer`'s part of `dst`. bytes == 0: Ok, nothing.
// ctr: see "Counters" below (default: not counted).
template <Sharing S = Sharing::Gpu>
KINET_HD Status put(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off, const WindowHandle& src,
                    uint64_t src_off, uint64_t bytes, CounterInc ctr = CounterInc{kNoCounter});
// Writes the low `nbytes` (1..8) bytes of `value` (little-endian) to
// `peer`'s part of dst at dst_off. No source buffer needed.
template <Sharing S = Sharing::Gpu>
KINET_HD Status put_value(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off, uint64_t value,
                          uint32_t nbytes = 8);
// Copies [src_off, +bytes) of `peer`'s part of src into my part of dst.
template <Sharing S = Sharing::Gpu>
KINET_HD Status get(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off, const WindowHandle& src,
                    uint64_t src_off, uint64_t bytes);
// put, then the signal word at sig_off of `peer`'s part of sig changes
// (op, value) after the data (see the ordering above). bytes == 0: signal only.
// ctr: see "Counters" below (default: not counted).
template <Sharing S = Sharing::Gpu>
KINET_HD Status put_signal(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                           const WindowHandle& src, uint64_t src_off, uint64_t bytes, const WindowHandle& sig,
                           uint64_t sig_off, SigOp op, uint64_t value, CounterInc ctr = CounterInc{kNoCounter});
template <Sharing S = Sharing::Gpu>
KINET_HD Status signal(const CommHandle& c, int peer, const WindowHandle& sig, uint64_t sig_off, SigOp op,
                       uint64_t value);
// Waits until the word at sig_off of MY part of sig compares true with
// value; *seen (optional) gets the last value read. `from`: the rank expected
// to signal, or -1; when that rank is lost the wait ends with
// TransportRetryExceeded at once. TimeoutCompletion past timeout_ns.
template <Sharing S = Sharing::Gpu>
KINET_HD Status wait_signal(const CommHandle& c, const WindowHandle& sig, uint64_t sig_off, Cmp cmp, uint64_t value,
                            int from = -1, uint64_t* seen = nullptr);
// 64-bit atomics on `peer`'s part of w at off; *old gets the previous value.
template <Sharing S = Sharing::Gpu>
KINET_HD Status fetch_add(const CommHandle& c, int peer, const WindowHandle& w, uint64_t off, uint64_t add,
                          uint64_t* old = nullptr);
template <Sharing S = Sharing::Gpu>
KINET_HD Status compare_swap(const CommHandle& c, int peer, const WindowHandle& w, uint64_t off, uint64_t compare,
                             uint64_t swap, uint64_t* old = nullptr);
template <Sharing S = Sharing::Gpu> KINET_HD Status quiet(const CommHandle& c);
template <Sharing S = Sharing::Gpu> KINET_HD Status fence(const CommHandle& c, int peer);
template <Sharing S = Sharing::Gpu> KINET_HD Status barrier(const CommHandle& c);

// ---------------------------------------------------------------------------
// Counters: local completion, per window.
//
// A window made with counters (CommConfig::counters, or the `counters`
// argument of alloc_symmetric / register_window) has that many 64-bit
// counters in this rank's memory: not part of the symmetric bytes, never seen
// by peers, zero at creation. put and put_signal given CounterInc{i} add 1 to
// counter i of their SOURCE window (`src`) once the operation is locally
// complete: its source bytes have been read and may be overwritten. Each
// counted call that returned Ok adds exactly 1 if its operation completes Ok,
// at the latest by the time quiet() (or fence(peer), barrier()) returns Ok
// (put_signal with bytes == 0 counts too: once the signal is handed over).
// Per path:
//   Self, P2p  the stores are the local completion: the counter is added to
//              (release, system scope) before the call returns.
//   Proxy      once the proxy completed the descriptor (the transport is done
//              with the source; kinet's transports complete a put when the
//              target answered, so today it comes with remote placement).
//   Gdaki      once the CQE of the operation's last WQE arrived (a counted
//              operation requests one; RC sends it after the responder's ack).
// Local completion is NOT remote visibility: a peer sees the data only
// through a signal written after it (put_signal + wait_signal) or a barrier.
// A counter says the source is free, never that the data arrived, even on
// paths where it happens to come that late.
// Counting is done by the threads that progress: read_counter, wait_counter,
// quiet, fence, barrier and counted posts credit the completions that have
// arrived; between those the word in memory (CommWindow::counter on the host)
// is a lower bound. Operations posted without a counter cost nothing more.
// A counted operation that fails (an error CQE, a failed or closed channel,
// its peer lost while a wait_counter found it outstanding) is not counted:
// its status and peer go to the counter's failure word, and
// read_counter / wait_counter return that status (first failure wins;
// reset_counter clears it). Errors of a counted post: InvalidArgument for an
// index >= src.ncounters (nothing posted; the error record names the window
// and the counter); TimeoutCompletion when the operation that last used the
// ring slot did not complete within timeout_ns (the slot is posted as a NOP,
// nothing moves).

// Counter `index` of my part of w, after crediting the completions that
// arrived, into *value. Ok, or the failure recorded on the counter (*value
// still set); InvalidArgument (bad handle, index >= w.ncounters).
template <Sharing S = Sharing::Gpu>
KINET_HD Status read_counter(const CommHandle& c, const WindowHandle& w, uint32_t index, uint64_t* value);
// Waits until counter `index` of my part of w is >= value; *seen (optional)
// gets the last value read. Ok; TimeoutCompletion past timeout_ns (the error
// record names the window, the counter, the value waited for and the value
// seen); at once, the status of a counted operation of this counter that
// failed, or of a failed or lost peer with one outstanding; InvalidArgument.
template <Sharing S = Sharing::Gpu>
KINET_HD Status wait_counter(const CommHandle& c, const WindowHandle& w, uint32_t index, uint64_t value,
                             uint64_t* seen = nullptr);
// Sets counter `index` to value and clears its failure word. Operations
// counted on it that are still in flight add to the new value: reset when
// none is (after wait_counter reached their count, or after quiet()).
template <Sharing S = Sharing::Gpu>
KINET_HD Status reset_counter(const CommHandle& c, const WindowHandle& w, uint32_t index, uint64_t value = 0);

#if defined(__CUDACC__)
// ---------------------------------------------------------------------------
// Group variants (kernels only; bodies in impl/comm_funcs.cuh, beside
// warp_put / cta_put). The group moves ONE buffer together: every thread of
// the group calls with the same arguments and gets the same status. Warp: the
// active lanes (__activemask()); CTA: every thread of the block (it
// synchronises the block: call it where all threads reach it).
//   P2p, Self: the group copies the data (16 bytes per thread per step), then
//   ONE thread applies the signal after a system-scope release fence.
//   Other paths (Proxy): ONE thread posts the put_signal descriptor.
// Ordering: the signal changes only after this call's data AND every earlier
// put / put_value / atomic of EVERY thread of the group to that peer (the
// group synchronises before the signal), besides the thread variants'
// promise. Arguments are checked before anything moves: a bad argument
// moves no data and applies no signal (same errors as put_signal / signal).

// warp_put + the signal of put_signal. bytes == 0: signal only. ctr: see
// "Counted group calls" below (default: not counted).
template <Sharing S = Sharing::Gpu>
__device__ Status warp_put_signal(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                                  const WindowHandle& src, uint64_t src_off, uint64_t bytes, const WindowHandle& sig,
                                  uint64_t sig_off, SigOp op, uint64_t value, CounterInc ctr = CounterInc{kNoCounter});
template <Sharing S = Sharing::Gpu>
__device__ Status cta_put_signal(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                                 const WindowHandle& src, uint64_t src_off, uint64_t bytes, const WindowHandle& sig,
                                 uint64_t sig_off, SigOp op, uint64_t value, CounterInc ctr = CounterInc{kNoCounter});
// The signal alone, after the group's earlier operations (e.g. after several
// warp_put / cta_put calls of the group to that peer).
template <Sharing S = Sharing::Gpu>
__device__ Status warp_signal(const CommHandle& c, int peer, const WindowHandle& sig, uint64_t sig_off, SigOp op,
                              uint64_t value);
template <Sharing S = Sharing::Gpu>
__device__ Status cta_signal(const CommHandle& c, int peer, const WindowHandle& sig, uint64_t sig_off, SigOp op,
                             uint64_t value);
// warp_put / cta_put: the group's put of ONE buffer (bodies and details in
// impl/comm_group_funcs.cuh, "Warp and CTA variants").
// Counted group calls (a ctr other than the default): the group's ONE buffer
// is ONE operation, counted once on counter ctr.index of src (P2p, Self: by
// one thread after the group's copy; other paths: as the thread variant
// counts it).
template <Sharing S = Sharing::Gpu>
__device__ Status warp_put(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                           const WindowHandle& src, uint64_t src_off, uint64_t bytes,
                           CounterInc ctr = CounterInc{kNoCounter});
template <Sharing S = Sharing::Gpu>
__device__ Status cta_put(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                          const WindowHandle& src, uint64_t src_off, uint64_t bytes,
                          CounterInc ctr = CounterInc{kNoCounter});
#endif  // __CUDACC__

// What a path is called in messages.
KINET_HD const char* comm_path_name(uint32_t p) {
  return p == uint32_t(CommPath::Self)    ? "self"
         : p == uint32_t(CommPath::P2p)   ? "p2p"
         : p == uint32_t(CommPath::Proxy) ? "proxy"
         : p == uint32_t(CommPath::Gdaki) ? "gdaki"
                                          : "none";
}

}  // namespace kinet::dev

#include "kinet/device/impl/comm_funcs.cuh"
#include "kinet/device/impl/comm_counter_funcs.cuh"
#include "kinet/device/impl/comm_group_funcs.cuh"
