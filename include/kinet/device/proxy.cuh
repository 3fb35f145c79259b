// kinet — the proxy backend's device API: kernels (and host threads) hand
// one-sided operations to CPU proxy threads through a descriptor ring in
// pinned host memory; the proxy executes them on a kinet::Transport (UCX,
// libfabric, TCP, ...) and reports completions where the poster polls them.
//
// Header-only, compiled by nvcc for kernels and by a plain C++20 compiler for
// host threads, like qp.cuh. The one-call operations have THE SAME NAMES AND
// SIGNATURES as qp.cuh's, overloaded on the handle type, so one kernel
// source runs over either backend:
//
//   template <class H> __device__ void send(const H& h, ...) {
//     dev::put<Sharing::Gpu>(h, src, lkey, raddr, rkey, n, 0, &t);
//     dev::wait<Sharing::Gpu>(h, t);
//   }
//
// Ring: 2^log_n descriptors of 64 bytes (one slot per operation: every
// operation's arguments fit, so there are no multi-slot descriptors and no
// in-order publish). Free-running 64-bit indices; slot = index & (n - 1). A
// poster reserves an index (an atomic on ProxyPostState::reserved, scoped by
// Sharing; warp-aggregated for shared handles in kernels), waits (bounded)
// until the proxy has consumed that slot's previous occupant (re-reading the
// proxy's consumer index only when its cached copy says the ring is full, and
// then only the posters whose slots are among the next kProxyRefreshWindow to
// be freed: the rest wait on the cache, so many waiting posters do not flood
// PCIe with reads), writes the body (three 16-byte stores on a GPU), and
// publishes with ONE 16-byte release store of the header. The header's valid bit is the lap parity (set on even laps, clear
// on odd ones), in both header words, so slots never need clearing and a torn
// header is never taken for a published one.
//
// Keys mean something else than on a QP (the types are shared so the calls
// are the same):
//   Lkey{id}: ProxyRegion::lkey(), the proxy's number for a region registered
//             through Proxy::register_memory; the proxy checks every local
//             buffer against it. NOT an mlx5 lkey, not big-endian.
//   Rkey{id}: ProxyChannel::import_key() (= the Transport's import_key id for
//             the channel's peer). NOT an mlx5 rkey, not big-endian.
// Handing a QP's keys to a proxy handle (or the reverse) is a bug the target
// or the proxy reports as an error completion, never a crash.
//
// Completions: the proxy executes a channel's descriptors in ring order and
// advances ProxyShared::completed in order. A descriptor that fails (a
// malformed one, a target-side rejection, a lost peer) puts the channel in
// the error state, as an error CQE puts a QP: its ticket gets the failure's
// status, every later descriptor completes WrFlushed without executing, and
// the host reads why through ProxyChannel::last_error(). What Ok means is
// what qp.cuh says for a QP: the local buffers may be reused (a get's or an
// atomic's result is in place); a third party on the target sees data only
// through its own acquire of a signal written after it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kinet/device/qp.cuh"

namespace kinet::dev {

// Operation codes of a descriptor (ProxyDesc::h0 bits 0-7).
enum class ProxyOp : uint8_t { Nop = 1, Put = 2, Get = 3, FetchAdd = 4, CompareSwap = 5, PutSignal = 6 };

// One ring slot. Fields by operation:
//   h0     bits 0-7 ProxyOp, 8-15 flags (kSignal|kNoDoorbell|kFence), 16-23
//          SignalOp (PutSignal: 1 add, 2 set), 24-62 zero, 63 valid
//   h1     bits 0-31 lkey id, 32-62 zero, 63 valid (the same bit as h0's)
//   laddr  Put/PutSignal: source; Get: destination; atomics: result word
//   raddr  target address
//   len    Put/Get/PutSignal: bytes (PutSignal may be 0: signal only);
//          FetchAdd: the addend; CompareSwap: the compare value
//   arg    CompareSwap: the swap value; PutSignal: the signal value
//   sig_raddr  PutSignal: the signal word's address
//   keys   bits 0-31 rkey id, 32-63 the signal's rkey id (PutSignal)
// Anything else (an unknown opcode or flag, nonzero reserved bits, a length
// of 0 where data moves, a local range outside the lkey's region or wrapping)
// completes with an error status; the proxy never executes it.
struct alignas(64) ProxyDesc {
  uint64_t h0;
  uint64_t h1;
  uint64_t laddr;
  uint64_t raddr;
  uint64_t len;
  uint64_t arg;
  uint64_t sig_raddr;
  uint64_t keys;
};
static_assert(sizeof(ProxyDesc) == 64);
inline constexpr uint64_t kProxyValid = uint64_t{1} << 63;

// Posters' counters of one channel, zeroed by the host; in memory every
// poster reaches (GPU memory for kernels, host memory for host threads).
struct ProxyPostState {
  uint64_t reserved;        // next ring index to hand out
  uint64_t consumed_cache;  // last consumer index a poster read (a lower bound)
  uint32_t broken;          // a reservation was abandoned after a timeout: later posts get QpBroken
  int32_t local_error;      // first device-side failure (TimeoutSqSpace, TimeoutCompletion, QpBroken,
                            // InvalidArgument for a bad abi word); first one wins
  uint32_t bad_abi;         // debug builds: the abi word of a refused handle
  uint32_t pad;
};
static_assert(sizeof(ProxyPostState) == 32);

// Written by the proxy thread, read by posters: pinned host memory, mapped
// into the GPU when CUDA is present. consumed and completed on their own
// cache lines (posters poll completed, the proxy writes both).
struct ProxyShared {
  alignas(64) uint64_t consumed;  // every slot below it was copied out by the proxy: free
  // The word posters poll (one read, a PCIe read from a GPU, answers a test
  // in the common case): bits 0-61 (kProxyDoneIndex) every descriptor below
  // this index completed, in ring order; kProxyDoneError: error_* below are
  // set (the first failure lies below the index); kProxyDoneClosed: closed
  // is set. Read it through the mask (ProxyChannel::completed() does).
  alignas(64) uint64_t completed;
  uint64_t error_index;           // ring index of the first failure (valid when error_status != 0)
  int32_t error_status;           // its Status; 0 = none. Written once, before completed passes it
  uint32_t closed;                // the proxy stopped serving: unfinished tickets end WrFlushed
};
static_assert(sizeof(ProxyShared) == 128);
inline constexpr uint64_t kProxyDoneClosed = uint64_t{1} << 63;
inline constexpr uint64_t kProxyDoneError = uint64_t{1} << 62;
inline constexpr uint64_t kProxyDoneIndex = kProxyDoneError - 1;

inline constexpr uint32_t kProxyHandleVersion = 1;
inline constexpr uint32_t kProxyHandleBytes = 48;
inline constexpr uint32_t kProxyHandleAbi = kProxyHandleVersion << 16 | kProxyHandleBytes;
// Distinct from every QpHandle abi word (version in the high half, size below).
static_assert(kProxyHandleAbi != kQpHandleAbi);

// Trivially copyable handle of one (transport, peer) channel, built by the
// host (ProxyChannel::handle()) and passed to kernels by value. Debug builds
// check `abi` at entry (InvalidArgument; recorded in post->bad_abi).
struct ProxyHandle {
  uint32_t abi = kProxyHandleAbi;  // first: readable whatever the rest of the layout is
  uint32_t log_n;                  // ring of 2^log_n descriptors
  ProxyDesc* ring;                 // pinned host memory
  ProxyPostState* post;
  ProxyShared* shared;             // pinned host memory
  uint64_t timeout_ns;             // bound of every wait
  uint32_t channel;                // the proxy's channel number (for messages)
  uint32_t pad;

  KINET_HD uint32_t size() const { return 1u << log_n; }
};
static_assert(sizeof(ProxyHandle) == kProxyHandleBytes, "ProxyHandle changed size: update kProxyHandleBytes");
static_assert(std::is_trivially_copyable_v<ProxyHandle>, "ProxyHandle is passed to kernels by value");
static_assert(std::is_standard_layout_v<ProxyHandle>, "ProxyHandle is read by offset across compilers");
static_assert(offsetof(ProxyHandle, abi) == 0);

// ---------------------------------------------------------------------------
// Low-level steps (Sharing as in qp.cuh: every poster of a channel uses the
// same mode).

// Reserves n consecutive slots (1 <= n <= size()) and stores the first index
// in *first; waits (bounded by timeout_ns) until the proxy has freed them.
// InvalidArgument (n out of range, bad abi), QpBroken (an earlier
// reservation timed out), TimeoutSqSpace (the proxy did not free the slots in
// time: the channel is then broken, because the abandoned slots stop it).
// Every reserved slot must be published (publish_nop when unused): the proxy
// executes in ring order and waits at an unpublished slot.
template <Sharing S> KINET_HD Status reserve(const ProxyHandle& h, uint32_t n, uint64_t* first);
// Like reserve, but NoSpace instead of waiting when the ring looks full
// (reserves nothing then).
template <Sharing S> KINET_HD Status try_reserve(const ProxyHandle& h, uint32_t n, uint64_t* first);
// Writes descriptor d (valid bits ignored) into reserved slot idx and
// publishes it. Slots may be published in any order.
template <Sharing S> KINET_HD void publish(const ProxyHandle& h, uint64_t idx, const ProxyDesc& d);
// Descriptor builders for publish (flags as the one-call operations take them).
KINET_HD ProxyDesc make_put(const void* src, Lkey lkey, uint64_t raddr, Rkey rkey, uint64_t bytes, uint32_t flags);
KINET_HD ProxyDesc make_get(void* dst, Lkey lkey, uint64_t raddr, Rkey rkey, uint64_t bytes, uint32_t flags);
KINET_HD ProxyDesc make_fetch_add(uint64_t* result, Lkey lkey, uint64_t raddr, Rkey rkey, uint64_t add,
                                  uint32_t flags);
KINET_HD ProxyDesc make_compare_swap(uint64_t* result, Lkey lkey, uint64_t raddr, Rkey rkey, uint64_t compare,
                                     uint64_t swap, uint32_t flags);
KINET_HD ProxyDesc make_nop(uint32_t flags);

// Ok when the ticket's descriptors completed, Pending when not yet, the
// failure's status when the channel's first failure lies in [t.first, t.idx),
// WrFlushed when it came before t.first or when the proxy stopped serving the
// channel (ProxyShared::closed) before the ticket completed.
template <Sharing S> KINET_HD Status test(const ProxyHandle& h, Ticket t);
// test() until it is not Pending, bounded by timeout_ns: TimeoutCompletion.
template <Sharing S> KINET_HD Status wait(const ProxyHandle& h, Ticket t);
// Waits for everything reserved so far: Ok, or the status of the last
// descriptor reserved before the call (WrFlushed when an earlier one failed).
template <Sharing S> KINET_HD Status quiet(const ProxyHandle& h);

// ---------------------------------------------------------------------------
// One-call operations: reserve one slot, write, publish. Signatures as in
// qp.cuh. `flags`: kSignal (accepted; every descriptor completes anyway),
// kNoDoorbell (accepted; the proxy polls the ring, there is nothing to wake),
// kFence (the proxy executes this descriptor only after every earlier one of
// the channel completed: needed after a get or an atomic whose result must be
// in place first). Other flag bits: InvalidArgument, nothing posted.
// Transfers are never split (the transport moves any size); bytes == 0:
// InvalidArgument, nothing posted.
template <Sharing S> KINET_HD Status put(const ProxyHandle& h, const void* src, Lkey lkey, uint64_t raddr, Rkey rkey,
                                         size_t bytes, uint32_t flags = 0, Ticket* t = nullptr);
template <Sharing S> KINET_HD Status get(const ProxyHandle& h, void* dst, Lkey lkey, uint64_t raddr, Rkey rkey,
                                         size_t bytes, uint32_t flags = 0, Ticket* t = nullptr);
template <Sharing S> KINET_HD Status fetch_add(const ProxyHandle& h, uint64_t* result, Lkey lkey, uint64_t raddr,
                                               Rkey rkey, uint64_t add, uint32_t flags = 0, Ticket* t = nullptr);
template <Sharing S> KINET_HD Status compare_swap(const ProxyHandle& h, uint64_t* result, Lkey lkey, uint64_t raddr,
                                                  Rkey rkey, uint64_t compare, uint64_t swap, uint32_t flags = 0,
                                                  Ticket* t = nullptr);
// put, then an add of `add` to the 8-byte signal word, applied at the target
// only after this put's data and every earlier put and atomic of the channel
// (Transport::signal's promise; the proxy keeps ring order). bytes == 0: the
// signal alone. Differences from the QP: `scratch` and `scratch_lkey` are
// not used (a transport signal returns no old value); sig_raddr needs 8-byte
// alignment at the target as on the QP.
template <Sharing S> KINET_HD Status put_signal(const ProxyHandle& h, const void* src, Lkey lkey, uint64_t raddr,
                                                Rkey rkey, size_t bytes, uint64_t sig_raddr, Rkey sig_rkey,
                                                uint64_t add, uint64_t* scratch, Lkey scratch_lkey,
                                                uint32_t flags = 0, Ticket* t = nullptr);
// A descriptor that moves nothing: completes after every earlier one.
template <Sharing S> KINET_HD Status nop(const ProxyHandle& h, uint32_t flags = 0, Ticket* t = nullptr);

}  // namespace kinet::dev

#include "kinet/device/impl/proxy_funcs.cuh"
