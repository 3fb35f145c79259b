// kinet — bodies of the device verbs declared in kinet/device/qp.cuh.
#pragma once
#include <cassert>
#include <cstring>

#include "kinet/mlx5/syndrome.hpp"
#include "kinet/device/impl/warp_group.cuh"

namespace kinet::dev {
namespace detail {

using kinet::detail::bswap16;
using kinet::detail::bswap32;
using kinet::detail::bswap64;

// ---- ordering: one named helper per need --------------------------------

// The WQE stores of this thread are visible to threads sharing the QP before
// its slots count as published (the release store of `ready` carries them).
// Nothing else needed: publish() uses a release store.

// Writes the doorbell record such that the published WQEs (possibly written
// by other threads, observed through an acquire of `ready` or a warp/CTA
// barrier) are visible to the NIC before the record says they exist. Rings in
// host memory are read by a CPU engine or over PCIe: system scope. Rings in
// GPU memory are read by the NIC through the GPU's L2: GPU scope is what the
// NIC needs there, unless a CPU thread reads the record and rings for us
// (CpuAssisted): then system scope. One release store (cumulative, like the
// fence it replaces): `fence.acq_rel` + relaxed store would also invalidate
// the SM's L1 (its acquire half), which nothing here needs and which made
// every later SqState load an L2 round trip. Host builds: the DMA barrier a
// real NIC needs, then a release store.
KINET_HD void store_dbrec_after_wqes(const QpHandle& q, uint32_t value_be) {
  uint32_t* rec = &q.dbrec[mlx5::kSendDbrIndex];
#if KINET_ON_DEVICE && (__CUDA_ARCH__ >= 700)
  if (q.rings_in_gpu_memory && q.db_mode != DoorbellMode::CpuAssisted)
    asm volatile("st.release.gpu.b32 [%0], %1;" ::"l"(rec), "r"(value_be) : "memory");
  else asm volatile("st.release.sys.b32 [%0], %1;" ::"l"(rec), "r"(value_be) : "memory");
#else
#if !KINET_ON_DEVICE
  host_dma_barrier();
#endif
  store_release<Scope::System>(rec, value_be);
#endif
}
// The doorbell record is visible before the doorbell word (or BlueFlame copy)
// reaches the NIC, which reads the record when the doorbell rings. Only later
// stores (the doorbell) need ordering: release-only where the target has it.
// Host builds: also the write-combining boundary before the MMIO store.
KINET_HD void order_dbrec_before_doorbell() {
  fence_release_only<Scope::System>();
#if !KINET_ON_DEVICE
  host_wc_barrier();
#endif
}

// The doorbell word: one 8-byte MMIO-style store. Host builds: flushed out of
// the write-combining buffer at once.
KINET_HD void store_doorbell(uint64_t* db, uint64_t word) {
#if KINET_ON_DEVICE && (__CUDA_ARCH__ >= 700)
  asm volatile("st.mmio.relaxed.sys.global.b64 [%0], %1;" ::"l"(db), "l"(word) : "memory");
#else
  store_relaxed<Scope::System>(db, word);
#if !KINET_ON_DEVICE
  host_wc_barrier();
#endif
#endif
}

// BlueFlame: the 64 bytes of WQE `wqe` into the window bf, bytes 8..63 first,
// then the control segment head (bytes 0..7), which the NIC takes as the
// doorbell. Hardware accepts the 64 bytes in any order; the software NIC
// reads the head first (release/acquire on the host) and retries a copy that
// has not fully landed, so kernels pay no extra fence for the order.
KINET_HD void store_blueflame(uint64_t* bf, const uint8_t* wqe) {
#if KINET_ON_DEVICE && (__CUDA_ARCH__ >= 700)
  const uint64_t* w = reinterpret_cast<const uint64_t*>(wqe);  // a 64-byte aligned ring slot
#pragma unroll
  for (int i = 1; i < 8; ++i)
    asm volatile("st.mmio.relaxed.sys.global.b64 [%0], %1;" ::"l"(bf + i), "l"(w[i]) : "memory");
  asm volatile("st.mmio.relaxed.sys.global.b64 [%0], %1;" ::"l"(bf), "l"(w[0]) : "memory");
#else
  uint64_t w[8];
  std::memcpy(w, wqe, sizeof w);
  for (int i = 1; i < 8; ++i) store_relaxed<Scope::System>(bf + i, w[i]);
  store_release<Scope::System>(bf, w[0]);
#if !KINET_ON_DEVICE
  host_wc_barrier();
#endif
#endif
}

// Reads the last 4 bytes of a CQE (wqe_counter, signature, op_own) with
// acquire semantics: every other field of the CQE read afterwards is the one
// the NIC wrote before it handed the entry over. The NIC (or the emulator)
// writes this word last.
KINET_HD uint32_t load_cqe_tail_acquire(const mlx5::Cqe64* cqe) {
  auto* w = reinterpret_cast<uint32_t*>(const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(cqe)) + 60);
  return load_acquire<Scope::System>(w);
}

// WQE slot store: 4 x 16-byte stores; streaming on the GPU (written once,
// read by the NIC, not by this SM again).
KINET_HD void store_wqe(uint8_t* slot, const void* bb) {
#if KINET_ON_DEVICE
  const uint4* s = reinterpret_cast<const uint4*>(bb);
  uint4* d = reinterpret_cast<uint4*>(slot);
#pragma unroll
  for (int i = 0; i < 4; ++i) __stcs(d + i, s[i]);
#else
  std::memcpy(slot, bb, mlx5::kSendWqeBB);
#endif
}

// ---- tiny segment setters (host-order values in, big-endian out) --------
struct alignas(16) WqeBB {
  mlx5::CtrlSeg ctrl;
  mlx5::RaddrSeg raddr;
  uint8_t seg2[16];
  uint8_t seg3[16];
};
static_assert(sizeof(WqeBB) == mlx5::kSendWqeBB);

KINET_HD void set_ctrl(mlx5::CtrlSeg& c, const QpHandle& q, uint64_t idx, uint8_t opcode, uint32_t ds,
                       uint8_t fm_ce_se) {
  c.opmod_idx_opcode = bswap32((static_cast<uint32_t>(idx & 0xffff) << 8) | opcode);
  c.qpn_ds = q.qpn_be8 | (ds << 24);
  c.signature = 0;
  c.dci_stream_channel_id[0] = c.dci_stream_channel_id[1] = 0;
  c.fm_ce_se = fm_ce_se;
  c.imm = 0;
}
KINET_HD void set_raddr(mlx5::RaddrSeg& r, uint64_t raddr, Rkey rkey) {
  r.raddr = bswap64(raddr);
  r.rkey = rkey.be;
  r.reserved = 0;
}
KINET_HD void set_data(void* seg, uint32_t bytes, Lkey lkey, const void* addr) {
  auto* d = reinterpret_cast<mlx5::DataSeg*>(seg);
  d->byte_count = bswap32(bytes);
  d->lkey = lkey.be;
  d->addr = bswap64(reinterpret_cast<uint64_t>(addr));
}
KINET_HD void set_atomic(void* seg, uint64_t swap_add, uint64_t compare) {
  auto* a = reinterpret_cast<mlx5::AtomicSeg*>(seg);
  a->swap_add = bswap64(swap_add);
  a->compare = bswap64(compare);
}


template <Sharing S, class T> KINET_HD T ld(T* p) {
  if constexpr (S == Sharing::Exclusive) return *p;
  else return load_acquire<kScope<S>>(p);
}
template <Sharing S, class T> KINET_HD void st_rel(T* p, T v) {
  if constexpr (S == Sharing::Exclusive) *p = v;
  else store_release<kScope<S>>(p, v);
}

// Requests a CQE for WQE idx when asked, or when idx closes a signal period
// (so free slots always come back, whatever the caller asked). Only kSignal
// raises `signaled`: the periodic requests are known from `ready` alone
// (periodic_end), so publishing costs nothing for them.
template <Sharing S> KINET_HD uint8_t completion_flags(const QpHandle& q, uint64_t idx, uint32_t flags) {
  const bool periodic = ((idx + 1) & (q.signal_period - 1)) == 0;
  uint8_t f = 0;
  if (periodic || (flags & kSignal)) f |= mlx5::kCtrlCqUpdate;
  if (flags & kSignal) {
    // Atomic even for Exclusive QPs: the lanes of a cooperative group
    // (coop.cuh) prepare their own slots concurrently.
    constexpr Scope sc = S == Sharing::Exclusive ? Scope::Cta : kScope<S>;
    fetch_max_relaxed<sc>(&q.state->signaled, idx + 1);
  }
  if (flags & kFence) f |= mlx5::kCtrlFence;
  return f;
}

// 1 + the index of the last WQE below `ready` that closes a signal period
// (and so requests a CQE whatever the caller asked), or 0 if none does.
KINET_HD uint64_t periodic_end(const QpHandle& q, uint64_t ready) {
  return ready & ~static_cast<uint64_t>(q.signal_period - 1);
}

KINET_HD uint8_t* slot(const QpHandle& q, uint64_t idx) {
  return q.sq + (static_cast<size_t>(idx & (q.size() - 1)) * mlx5::kSendWqeBB);
}

// Status of WQEs [first, end) once the QP reported an error: the fault's
// status when the faulting WQE is one of them, Ok when it came after them,
// WrFlushed when it came before them.
KINET_HD Status status_of_range(int32_t es, uint64_t error_wqe, uint64_t first, uint64_t end) {
  if (error_wqe >= end) return Status::Ok;
  if (error_wqe >= first) return static_cast<Status>(es);
  return Status::WrFlushed;
}

// Status of a completed ticket, from the first error the CQ reported.
template <Sharing S> KINET_HD Status completed_status(const QpHandle& q, Ticket t) {
  const int32_t es = load_acquire<kScope<S>>(&q.state->error_status);
  if (es == 0) return Status::Ok;
  return status_of_range(es, q.state->error_wqe, t.first, t.idx);  // error_wqe: written before the release of es
}

// Records the first device-side failure of the QP (SqState::local_error) and
// returns it: `return fail<S>(q, Status::TimeoutLock);`.
template <Sharing S> KINET_HD Status fail(const QpHandle& q, Status st) {
  uint8_t* p = &q.state->local_error;
  if constexpr (S == Sharing::Exclusive) {
    if (*p == 0) *p = static_cast<uint8_t>(st);
  } else {
    uint8_t none = 0;
    cas_relaxed<kScope<S>>(p, none, static_cast<uint8_t>(st));
  }
  return st;
}

// Debug builds: the handle has this header's layout (QpHandle::abi). A
// mismatch is recorded in q.state (bad_abi = the word found, then
// local_error = InvalidArgument, which nothing else records) when it is set;
// the verb returns InvalidArgument.
template <Sharing S> KINET_HD bool handle_ok(const QpHandle& q) {
#ifndef NDEBUG
  if (q.abi == kQpHandleAbi) return true;
  if (q.state) {
    store_relaxed<Scope::System>(&q.state->bad_abi, q.abi);
    fail<S>(q, Status::InvalidArgument);  // only this check records InvalidArgument
  }
  return false;
#else
  (void)q;
  return true;
#endif
}

// A handle's max_msg is usable: 1..kMaxMsgBytes (larger would let a byte
// count reach the inline flag, bit 31).
KINET_HD bool max_msg_ok(const QpHandle& q) { return q.max_msg != 0 && q.max_msg <= mlx5::kMaxMsgBytes; }

// Debug device builds: two lanes of one warp using one Exclusive QP at the
// same time (typically every lane waiting after warp_post<Exclusive>) is a
// data race on its counters; trap. Lanes with QPs of their own pass.
template <Sharing S> KINET_HD void check_exclusive_owner(const QpHandle& q) {
#if KINET_ON_DEVICE && !defined(NDEBUG) && (__CUDA_ARCH__ >= 700)
  if constexpr (S == Sharing::Exclusive) {
    const unsigned same = __match_any_sync(__activemask(), reinterpret_cast<unsigned long long>(q.state));
    assert(__popc(same) == 1 && "Exclusive QP used by several lanes at once (only the leader may use it)");
  }
#else
  (void)q;
#endif
}

// End of a bounded wait. Saturates: a timeout too large to add to the clock
// (up to UINT64_MAX ns) means "as late as the clock goes", never "already".
struct Deadline {
  uint64_t end;
  KINET_HD explicit Deadline(uint64_t timeout_ns) {
    const uint64_t now = now_ns();
    end = timeout_ns > ~uint64_t{0} - now ? ~uint64_t{0} : now + timeout_ns;
  }
  KINET_HD bool expired() const { return now_ns() > end; }
};

#if !KINET_ON_DEVICE
// QpHandle::host_kick: runs the software NIC's engine for the QP whose
// doorbell word is `db` on the calling host thread, if no other thread runs
// it now; nothing for an unknown or destroyed QP. Defined in libkinet
// (providers/emu); weak, so that the verbs stay header-only for programs
// without libkinet (their handles never set host_kick).
__attribute__((weak)) void host_kick(const uint64_t* db) noexcept;
// Kicks q's NIC when q asks for it and libkinet is linked.
inline void maybe_host_kick(const QpHandle& q) {
  if (q.host_kick && host_kick) host_kick(q.db);
}
#endif

// Announces every WQE below ring index pi (> 0) to the NIC: doorbell record,
// then what q.db_mode rings with. Does not touch SqState.
KINET_HD void ring_at(const QpHandle& q, uint64_t pi) {
  store_dbrec_after_wqes(q, bswap32(static_cast<uint32_t>(pi) & 0xffffu));
  if (q.db_mode == DoorbellMode::CpuAssisted) return;  // the provider's CPU thread rings from the record
  order_dbrec_before_doorbell();
  if (q.db_mode == DoorbellMode::BlueFlame) store_blueflame(q.db, slot(q, pi - 1));
  else store_doorbell(q.db, mlx5::doorbell_word(static_cast<uint32_t>(pi), q.qpn_be8));
#if !KINET_ON_DEVICE
  maybe_host_kick(q);
#endif
}

// Rings for everything published so far. Caller holds the doorbell lock (or owns the QP).
template <Sharing S> KINET_HD void ring_locked(const QpHandle& q) {
  SqState* s = q.state;
  const uint64_t pi = ld<S>(&s->ready);
  if (pi == s->rung) return;
  ring_at(q, pi);
  st_rel<S>(&s->rung, pi);
}

// Rings whatever is published and not yet rung, without waiting for the lock.
template <Sharing S> KINET_HD void kick(const QpHandle& q) {
  SqState* s = q.state;
  if constexpr (S == Sharing::Exclusive) {
    ring_locked<S>(q);
  } else {
    if (ld<S>(&s->rung) >= ld<S>(&s->ready)) return;
    if (try_lock<kScope<S>>(&s->db_lock)) {
      ring_locked<S>(q);
      unlock<kScope<S>>(&s->db_lock);
    }
  }
}

// reserve()'s wait until ring indices below `end` are free (the CQ polled
// up to end - size). On timeout the QP breaks: the caller's slots stay
// reserved and unpublished, so the queue cannot go on.
template <Sharing S> KINET_HD Status wait_space(const QpHandle& q, uint64_t end) {
  SqState* s = q.state;
  Deadline dl(q.timeout_ns);
  for (;;) {
    kick<S>(q);
    poll_cq<S>(q);
    if (end - ld<S>(&s->completed) <= q.size()) return Status::Ok;
    if (dl.expired()) {
      fail<S>(q, Status::TimeoutSqSpace);  // the reason before `broken`
      st_rel<S>(&s->broken, uint8_t(1));
      return Status::TimeoutSqSpace;
    }
    spin_pause();
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------
template <Sharing S> KINET_HD Status reserve(const QpHandle& q, uint32_t n, uint64_t* first) {
  SqState* s = q.state;
  detail::check_exclusive_owner<S>(q);
  if (!detail::handle_ok<S>(q)) return Status::InvalidArgument;
  if (n == 0 || n > q.size() / 2) return Status::InvalidArgument;
  uint64_t idx;
  if constexpr (S == Sharing::Exclusive) {
    // Fast path: the three loads are independent and feed one branch, so
    // they cost one round trip, not two (broken used to gate the others).
    const uint8_t br = s->broken;
    idx = s->reserved;
    const uint64_t comp = s->completed;
    if ((br == 0) & (idx + n - comp <= q.size())) {
      s->reserved = idx + n;
      *first = idx;
      return Status::Ok;
    }
    if (br) return detail::fail<S>(q, Status::QpBroken);
    s->reserved = idx + n;
  } else {
    if (detail::ld<S>(&s->broken)) return detail::fail<S>(q, Status::QpBroken);
#if KINET_WARP_AGGREGATE
    const unsigned g = detail::same_qp_lanes(s);
    idx = detail::group_fetch_add<kScope<S>>(&s->reserved, g, n);
    *first = idx;
    const bool room = idx + n - detail::ld<S>(&s->completed) <= q.size();
    if (__all_sync(g, room)) return Status::Ok;
    // Some lane must wait for space: the group waits as one (its leader, for
    // the highest end) and leaves together. Lanes that went on alone would
    // split the warp's later reserve/publish/ring into small groups taking
    // turns on the in-order publish for the rest of the kernel. Only when
    // the group's span fits in the ring: otherwise that wait would need the
    // group's own unpublished slots completed, and the lanes go alone.
    uint64_t lo, hi;
    if (__popc(g) > 1 && detail::group_range(g, idx, idx + n, &lo, &hi) && hi - lo <= q.size()) {
      int st = 0;
      if (__popc(g & detail::lanemask_lt()) == 0) st = static_cast<int>(detail::wait_space<S>(q, hi));
      return static_cast<Status>(__shfl_sync(g, st, __ffs(g) - 1));
    }
    if (room) return Status::Ok;
#else
    idx = fetch_add_relaxed<kScope<S>>(&s->reserved, uint64_t(n));
    if (idx + n - detail::ld<S>(&s->completed) <= q.size()) {
      *first = idx;
      return Status::Ok;
    }
#endif
  }
  *first = idx;
  return detail::wait_space<S>(q, idx + n);
}

template <Sharing S> KINET_HD Status try_reserve(const QpHandle& q, uint32_t n, uint64_t* first) {
  SqState* s = q.state;
  detail::check_exclusive_owner<S>(q);
  if (!detail::handle_ok<S>(q)) return Status::InvalidArgument;
  if (n == 0 || n > q.size() / 2) return Status::InvalidArgument;
  if (detail::ld<S>(&s->broken)) return detail::fail<S>(q, Status::QpBroken);
  for (int polled = 0;;) {
    uint64_t r = (S == Sharing::Exclusive) ? s->reserved : load_relaxed<kScope<S>>(&s->reserved);
    if (r + n - detail::ld<S>(&s->completed) > q.size()) {
      if (polled++) return Status::NoSpace;
      detail::kick<S>(q);
      poll_cq<S>(q);
      continue;
    }
    if constexpr (S == Sharing::Exclusive) {
      s->reserved = r + n;
      *first = r;
      return Status::Ok;
    } else {
      if (cas_relaxed<kScope<S>>(&s->reserved, r, r + n)) {
        *first = r;
        return Status::Ok;
      }
    }
  }
}

template <Sharing S> KINET_HD void prepare_nop(const QpHandle& q, uint64_t idx, uint32_t flags) {
  detail::WqeBB bb{};
  detail::set_ctrl(bb.ctrl, q, idx, mlx5::kOpNop, 1, detail::completion_flags<S>(q, idx, flags));
  detail::store_wqe(detail::slot(q, idx), &bb);
}

template <Sharing S> KINET_HD void prepare_write(const QpHandle& q, uint64_t idx, const void* laddr, Lkey lkey,
                                                 uint64_t raddr, Rkey rkey, uint32_t bytes, uint32_t flags) {
  detail::WqeBB bb{};
  assert(bytes <= q.max_msg && q.max_msg <= mlx5::kMaxMsgBytes && "prepare_write: bytes > q.max_msg");
  detail::set_ctrl(bb.ctrl, q, idx, mlx5::kOpRdmaWrite, 3, detail::completion_flags<S>(q, idx, flags));
  detail::set_raddr(bb.raddr, raddr, rkey);
  detail::set_data(bb.seg2, bytes, lkey, laddr);
  detail::store_wqe(detail::slot(q, idx), &bb);
}

template <Sharing S> KINET_HD void prepare_write_inline(const QpHandle& q, uint64_t idx, const void* data,
                                                        uint32_t bytes, uint64_t raddr, Rkey rkey, uint32_t flags) {
  assert(bytes <= mlx5::kMaxInlineOneBB && "prepare_write_inline: payload larger than one basic block");
  detail::WqeBB bb{};
  const uint32_t ds = 2 + (sizeof(mlx5::InlineSeg) + bytes + mlx5::kSendWqeDS - 1) / mlx5::kSendWqeDS;
  detail::set_ctrl(bb.ctrl, q, idx, mlx5::kOpRdmaWrite, ds, detail::completion_flags<S>(q, idx, flags));
  detail::set_raddr(bb.raddr, raddr, rkey);
  reinterpret_cast<mlx5::InlineSeg*>(bb.seg2)->byte_count = detail::bswap32(mlx5::kInlineSegFlag | bytes);
  uint8_t* dst = bb.seg2 + sizeof(mlx5::InlineSeg);
  const uint8_t* src = static_cast<const uint8_t*>(data);
  for (uint32_t i = 0; i < bytes; ++i) dst[i] = src[i];
  detail::store_wqe(detail::slot(q, idx), &bb);
}

template <Sharing S> KINET_HD void prepare_read(const QpHandle& q, uint64_t idx, void* laddr, Lkey lkey,
                                                uint64_t raddr, Rkey rkey, uint32_t bytes, uint32_t flags) {
  detail::WqeBB bb{};
  assert(bytes <= q.max_msg && q.max_msg <= mlx5::kMaxMsgBytes && "prepare_read: bytes > q.max_msg");
  detail::set_ctrl(bb.ctrl, q, idx, mlx5::kOpRdmaRead, 3, detail::completion_flags<S>(q, idx, flags));
  detail::set_raddr(bb.raddr, raddr, rkey);
  detail::set_data(bb.seg2, bytes, lkey, laddr);
  detail::store_wqe(detail::slot(q, idx), &bb);
}

template <Sharing S> KINET_HD void prepare_fetch_add(const QpHandle& q, uint64_t idx, uint64_t* result, Lkey lkey,
                                                     uint64_t raddr, Rkey rkey, uint64_t add, uint32_t flags) {
  detail::WqeBB bb{};
  detail::set_ctrl(bb.ctrl, q, idx, mlx5::kOpAtomicFA, 4, detail::completion_flags<S>(q, idx, flags));
  detail::set_raddr(bb.raddr, raddr, rkey);
  detail::set_atomic(bb.seg2, add, 0);
  detail::set_data(bb.seg3, sizeof(uint64_t), lkey, result);
  detail::store_wqe(detail::slot(q, idx), &bb);
}

template <Sharing S> KINET_HD void prepare_compare_swap(const QpHandle& q, uint64_t idx, uint64_t* result,
                                                        Lkey lkey, uint64_t raddr, Rkey rkey, uint64_t compare,
                                                        uint64_t swap, uint32_t flags) {
  detail::WqeBB bb{};
  detail::set_ctrl(bb.ctrl, q, idx, mlx5::kOpAtomicCS, 4, detail::completion_flags<S>(q, idx, flags));
  detail::set_raddr(bb.raddr, raddr, rkey);
  detail::set_atomic(bb.seg2, swap, compare);
  detail::set_data(bb.seg3, sizeof(uint64_t), lkey, result);
  detail::store_wqe(detail::slot(q, idx), &bb);
}

namespace detail {
// publish() of one caller's range on a shared QP: its turn, then the release.
template <Sharing S> KINET_HD Status publish_range(const QpHandle& q, uint64_t first, uint32_t n) {
  SqState* s = q.state;
  if (load_acquire<kScope<S>>(&s->ready) != first) {
    Deadline dl(q.timeout_ns);
    while (load_acquire<kScope<S>>(&s->ready) != first) {
      if (dl.expired()) {
        fail<S>(q, Status::TimeoutPublishOrder);  // the reason before `broken`
        store_release<kScope<S>>(&s->broken, uint8_t(1));
        return Status::TimeoutPublishOrder;
      }
      spin_pause();
    }
  }
  // Release: the WQE stores (this thread's, and its warp's ordered before by
  // __syncwarp) happen-before any acquire of `ready` (the ringing thread's).
  store_release<kScope<S>>(&s->ready, first + n);
  return Status::Ok;
}

// ring_doorbell() of one caller on a shared QP.
template <Sharing S> KINET_HD Status ring_upto(const QpHandle& q, uint64_t upto) {
  SqState* s = q.state;
  Deadline dl(q.timeout_ns);
  for (;;) {
    if (load_acquire<kScope<S>>(&s->rung) >= upto) return Status::Ok;
    if (try_lock<kScope<S>>(&s->db_lock)) {
      ring_locked<S>(q);
      unlock<kScope<S>>(&s->db_lock);
      if (load_acquire<kScope<S>>(&s->rung) >= upto) return Status::Ok;
    }
    if (dl.expired()) return fail<S>(q, Status::TimeoutLock);
    spin_pause();
  }
}
}  // namespace detail

template <Sharing S> KINET_HD Status publish(const QpHandle& q, uint64_t first, uint32_t n) {
  SqState* s = q.state;
  detail::check_exclusive_owner<S>(q);
  if (!detail::handle_ok<S>(q)) return Status::InvalidArgument;
  if constexpr (S == Sharing::Exclusive) {
    s->ready = first + n;
    return Status::Ok;
  } else {
#if KINET_WARP_AGGREGATE
    // Lanes publishing adjacent ranges of one QP together: one turn for all.
    const unsigned g = detail::same_qp_lanes(s);
    uint64_t lo;
    uint32_t len;
    if (__popc(g) > 1 && detail::group_span(g, first, n, &lo, &len)) {
      const int leader = __ffs(g) - 1;
      __syncwarp(g);  // every lane's WQE stores before the leader's release of `ready`
      int st = 0;
      if (__popc(g & detail::lanemask_lt()) == 0) st = static_cast<int>(detail::publish_range<S>(q, lo, len));
      return static_cast<Status>(__shfl_sync(g, st, leader));
    }
#endif
    return detail::publish_range<S>(q, first, n);
  }
}

template <Sharing S> KINET_HD Status ring_doorbell(const QpHandle& q, uint64_t upto) {
  detail::check_exclusive_owner<S>(q);
  if (!detail::handle_ok<S>(q)) return Status::InvalidArgument;
  if constexpr (S == Sharing::Exclusive) {
    detail::ring_locked<S>(q);
    return Status::Ok;
  } else {
#if KINET_WARP_AGGREGATE
    // Lanes ringing one QP together: the one with the highest target rings for all.
    const unsigned g = detail::same_qp_lanes(q.state);
    uint64_t hi;
    if (__popc(g) > 1 && detail::group_max(g, upto, &hi)) {
      const int leader = __ffs(g) - 1;
      int st = 0;
      if (__popc(g & detail::lanemask_lt()) == 0) st = static_cast<int>(detail::ring_upto<S>(q, hi));
      st = __shfl_sync(g, st, leader);
      // A lane whose own target was reached is done, whatever stopped the others.
      if (st != 0 && load_acquire<kScope<S>>(&q.state->rung) >= upto) st = 0;
      return static_cast<Status>(st);
    }
#endif
    return detail::ring_upto<S>(q, upto);
  }
}

template <Sharing S> KINET_HD Status poll_cq(const QpHandle& q) {
  SqState* s = q.state;
  detail::check_exclusive_owner<S>(q);
  if (!detail::handle_ok<S>(q)) return Status::InvalidArgument;
#if !KINET_ON_DEVICE
  detail::maybe_host_kick(q);  // answers that arrived become CQEs now
#endif
  if constexpr (S != Sharing::Exclusive) {
    if (!try_lock<kScope<S>>(&s->cq_lock)) return Status::Ok;  // another thread is draining
  }
  const uint32_t log_n = q.cq.log_n;
  const uint32_t mask = (1u << log_n) - 1;
  uint32_t ci = s->cq_ci;
  uint64_t comp = s->completed;
  bool any = false;
  for (;;) {
    const mlx5::Cqe64* cqe = q.cq.cqes + (ci & mask);
    const uint32_t tail = detail::load_cqe_tail_acquire(cqe);
    const uint8_t op_own = static_cast<uint8_t>(tail >> 24);
    const uint8_t opcode = mlx5::cqe_opcode(op_own);
    if (opcode == mlx5::kCqeInvalid || mlx5::cqe_owner(op_own) != mlx5::cqe_sw_owner(ci, log_n)) break;
    const uint16_t wc = detail::bswap16(static_cast<uint16_t>(tail & 0xffffu));
    const uint64_t idx = comp + static_cast<uint16_t>(wc - static_cast<uint16_t>(comp));
    if ((opcode == mlx5::kCqeReqErr || opcode == mlx5::kCqeRespErr) && s->error_status == 0) {
      const auto* e = reinterpret_cast<const mlx5::ErrCqe*>(cqe);
      s->error_wqe = idx;
      s->error_syndrome = e->syndrome;
      s->error_vendor_syndrome = e->vendor_err_synd;
      store_release<kScope<S>>(
          &s->error_status, static_cast<int32_t>(mlx5::status_from_syndrome(e->syndrome)));
    }
    comp = idx + 1;
    ++ci;
    any = true;
  }
  if (any) {
    s->cq_ci = ci;
    // CQE reads are done before the NIC learns it may overwrite the entries.
    store_release<Scope::System>(&q.cq.dbrec[mlx5::kCqDbrConsumerIndex], detail::bswap32(ci & 0xffffffu));
    detail::st_rel<S>(&s->completed, comp);
  }
  if constexpr (S != Sharing::Exclusive) unlock<kScope<S>>(&s->cq_lock);
  return Status::Ok;
}

template <Sharing S> KINET_HD Status test(const QpHandle& q, Ticket t) {
  detail::check_exclusive_owner<S>(q);
  if (!detail::handle_ok<S>(q)) return Status::InvalidArgument;
  if (t.idx == 0) return Status::Ok;
  if (detail::ld<S>(&q.state->completed) < t.idx) {
    poll_cq<S>(q);
    if (detail::ld<S>(&q.state->completed) < t.idx) return Status::Pending;
  }
  return detail::completed_status<S>(q, t);
}

template <Sharing S> KINET_HD Status wait(const QpHandle& q, Ticket t) {
  SqState* s = q.state;
  detail::check_exclusive_owner<S>(q);
  if (!detail::handle_ok<S>(q)) return Status::InvalidArgument;
  if (t.idx == 0) return Status::Ok;
  if (detail::ld<S>(&s->completed) >= t.idx) return detail::completed_status<S>(q, t);
  // Will a CQE come at or after the ticket? kSignal WQEs raise `signaled`;
  // periodic requests are every published WQE that closes a period.
  const uint64_t sig = (S == Sharing::Exclusive) ? s->signaled : load_relaxed<kScope<S>>(&s->signaled);
  const uint64_t rdy = (S == Sharing::Exclusive) ? s->ready : load_relaxed<kScope<S>>(&s->ready);
  if (sig < t.idx && detail::periodic_end(q, rdy) < t.idx) {
    Status st = nop<S>(q, kSignal, nullptr);  // a CQE at or after the ticket
    if (st != Status::Ok) return st;
  }
  detail::Deadline dl(q.timeout_ns);
  for (;;) {
    detail::kick<S>(q);
    poll_cq<S>(q);
    if (detail::ld<S>(&s->completed) >= t.idx) return detail::completed_status<S>(q, t);
    if (detail::ld<S>(&s->broken)) return detail::fail<S>(q, Status::QpBroken);
    if (dl.expired()) return detail::fail<S>(q, Status::TimeoutCompletion);
    spin_pause();
  }
}

template <Sharing S> KINET_HD Status quiet(const QpHandle& q) {
  const uint64_t r = (S == Sharing::Exclusive) ? q.state->reserved : load_relaxed<kScope<S>>(&q.state->reserved);
  return wait<S>(q, Ticket{r, r == 0 ? 0 : r - 1});  // the last WQE reserved: stable meaning of quiet()
}

// ---------------------------------------------------------------------------
// SqCursor: the Exclusive steps on the owner's copy of the counters.
KINET_HD Status open_cursor(const QpHandle& q, SqCursor* c) {
  constexpr Sharing X = Sharing::Exclusive;
  detail::check_exclusive_owner<X>(q);
  *c = SqCursor{};  // max_n == 0: not open (the other steps refuse it, close does nothing)
  if (!detail::handle_ok<X>(q)) return Status::InvalidArgument;
  const SqState* s = q.state;
  if (s->broken) return detail::fail<X>(q, Status::QpBroken);
  *c = SqCursor{s->reserved, s->ready, s->rung, s->completed + q.size(), q.size() / 2};
  return Status::Ok;
}

KINET_HD void close_cursor(const QpHandle& q, const SqCursor& c) {
  if (c.max_n == 0) return;  // never opened, or open_cursor failed
  SqState* s = q.state;
  s->reserved = c.reserved;
  s->ready = c.ready;
  s->rung = c.rung;
}

KINET_HD Status reserve(const QpHandle& q, SqCursor& c, uint32_t n, uint64_t* first) {
  // One test for both: n in 1..size/2 and room below the limit.
  if ((n - 1u < c.max_n) & (c.reserved + n <= c.limit)) {
    *first = c.reserved;
    c.reserved += n;
    return Status::Ok;
  }
  if (n == 0 || n > c.max_n) return Status::InvalidArgument;
  // Ring full as far as the cursor knows: reserve<Exclusive> on the written-
  // back counters polls the CQ, kicks and waits; then reload what it moved.
  close_cursor(q, c);
  const Status st = reserve<Sharing::Exclusive>(q, n, first);
  const SqState* s = q.state;
  c.reserved = s->reserved;  // also past a TimeoutSqSpace's abandoned slots
  c.rung = s->rung;
  c.limit = s->completed + q.size();
  return st;
}

KINET_HD Status publish(const QpHandle& q, SqCursor& c, uint64_t first, uint32_t n) {
  (void)q;
  c.ready = first + n;
  return Status::Ok;
}

KINET_HD Status ring_doorbell(const QpHandle& q, SqCursor& c, uint64_t upto) {
  (void)upto;  // Exclusive: everything published is announced
  if (c.max_n == 0) return Status::InvalidArgument;  // not open
  if (c.ready != c.rung) {
    detail::ring_at(q, c.ready);
    c.rung = c.ready;
  }
  return Status::Ok;
}

}  // namespace kinet::dev

#include "kinet/device/impl/ops_funcs.cuh"
