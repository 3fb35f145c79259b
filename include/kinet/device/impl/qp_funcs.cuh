// kinet — bodies of the device verbs declared in kinet/device/qp.cuh.
#pragma once
#include <cassert>
#include <cstring>

#include "kinet/mlx5/syndrome.hpp"

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
// by other threads, observed through an acquire of `ready`) are visible to
// the NIC before the record says they exist. Rings in host memory are read by
// a CPU engine or over PCIe: system scope. Rings in GPU memory are read by the
// NIC through the GPU's L2: GPU scope is what the NIC needs there. Host
// builds use a release store (ThreadSanitizer does not model fences).
KINET_HD void store_dbrec_after_wqes(const QpHandle& q, uint32_t value_be) {
  uint32_t* rec = &q.dbrec[mlx5::kSendDbrIndex];
#if KINET_ON_DEVICE
  if (q.rings_in_gpu_memory) fence_release<Scope::Gpu>();
  else fence_release<Scope::System>();
  store_relaxed<Scope::System>(rec, value_be);
#else
  store_release<Scope::System>(rec, value_be);
#endif
}
// The doorbell record is visible before the doorbell word reaches the NIC,
// which reads the record when the doorbell rings.
KINET_HD void order_dbrec_before_doorbell() { fence_release<Scope::System>(); }

// The doorbell word: one 8-byte MMIO-style store.
KINET_HD void store_doorbell(uint64_t* db, uint64_t word) {
#if KINET_ON_DEVICE && (__CUDA_ARCH__ >= 700)
  asm volatile("st.mmio.relaxed.sys.global.b64 [%0], %1;" ::"l"(db), "l"(word) : "memory");
#else
  store_relaxed<Scope::System>(db, word);
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
// (so free slots always come back, whatever the caller asked).
template <Sharing S> KINET_HD uint8_t completion_flags(const QpHandle& q, uint64_t idx, uint32_t flags) {
  const bool sig = (flags & kSignal) || (((idx + 1) & (q.signal_period - 1)) == 0);
  uint8_t f = 0;
  if (sig) {
    f |= mlx5::kCtrlCqUpdate;
    // Atomic even for Exclusive QPs: the lanes of a cooperative group
    // (coop.cuh) prepare their own slots concurrently. Only signalled WQEs
    // pay for it.
    constexpr Scope sc = S == Sharing::Exclusive ? Scope::Cta : kScope<S>;
    fetch_max_relaxed<sc>(&q.state->signaled, idx + 1);
  }
  if (flags & kFence) f |= mlx5::kCtrlFence;
  return f;
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

// Rings for everything published so far. Caller holds the doorbell lock (or owns the QP).
template <Sharing S> KINET_HD void ring_locked(const QpHandle& q) {
  SqState* s = q.state;
  const uint64_t pi = ld<S>(&s->ready);
  if (pi == s->rung) return;
  store_dbrec_after_wqes(q, bswap32(static_cast<uint32_t>(pi) & 0xffffu));
  order_dbrec_before_doorbell();
  store_doorbell(q.db, mlx5::doorbell_word(static_cast<uint32_t>(pi), q.qpn_be8));
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

}  // namespace detail

// ---------------------------------------------------------------------------
template <Sharing S> KINET_HD Status reserve(const QpHandle& q, uint32_t n, uint64_t* first) {
  SqState* s = q.state;
  detail::check_exclusive_owner<S>(q);
  if (n == 0 || n > q.size() / 2) return Status::InvalidArgument;
  if (detail::ld<S>(&s->broken)) return detail::fail<S>(q, Status::QpBroken);
  uint64_t idx;
  if constexpr (S == Sharing::Exclusive) {
    idx = s->reserved;
    s->reserved = idx + n;
  } else {
    idx = fetch_add_relaxed<kScope<S>>(&s->reserved, uint64_t(n));
  }
  *first = idx;
  if (idx + n - detail::ld<S>(&s->completed) <= q.size()) return Status::Ok;
  detail::Deadline dl(q.timeout_ns);
  for (;;) {
    detail::kick<S>(q);
    poll_cq<S>(q);
    if (idx + n - detail::ld<S>(&s->completed) <= q.size()) return Status::Ok;
    if (dl.expired()) {
      // The slots stay reserved and unpublished: the queue cannot go on.
      // The reason first: whoever then sees `broken` finds it recorded.
      detail::fail<S>(q, Status::TimeoutSqSpace);
      detail::st_rel<S>(&s->broken, uint8_t(1));
      return Status::TimeoutSqSpace;
    }
    spin_pause();
  }
}

template <Sharing S> KINET_HD Status try_reserve(const QpHandle& q, uint32_t n, uint64_t* first) {
  SqState* s = q.state;
  detail::check_exclusive_owner<S>(q);
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

template <Sharing S> KINET_HD Status publish(const QpHandle& q, uint64_t first, uint32_t n) {
  SqState* s = q.state;
  detail::check_exclusive_owner<S>(q);
  if constexpr (S == Sharing::Exclusive) {
    s->ready = first + n;
    return Status::Ok;
  } else {
    if (load_acquire<kScope<S>>(&s->ready) != first) {
      detail::Deadline dl(q.timeout_ns);
      while (load_acquire<kScope<S>>(&s->ready) != first) {
        if (dl.expired()) {
          detail::fail<S>(q, Status::TimeoutPublishOrder);  // the reason before `broken`
          store_release<kScope<S>>(&s->broken, uint8_t(1));
          return Status::TimeoutPublishOrder;
        }
        spin_pause();
      }
    }
    // Release: this thread's WQE stores happen-before any acquire of `ready`.
    store_release<kScope<S>>(&s->ready, first + n);
    return Status::Ok;
  }
}

template <Sharing S> KINET_HD Status ring_doorbell(const QpHandle& q, uint64_t upto) {
  SqState* s = q.state;
  detail::check_exclusive_owner<S>(q);
  if constexpr (S == Sharing::Exclusive) {
    detail::ring_locked<S>(q);
    return Status::Ok;
  } else {
    detail::Deadline dl(q.timeout_ns);
    for (;;) {
      if (load_acquire<kScope<S>>(&s->rung) >= upto) return Status::Ok;
      if (try_lock<kScope<S>>(&s->db_lock)) {
        detail::ring_locked<S>(q);
        unlock<kScope<S>>(&s->db_lock);
        if (load_acquire<kScope<S>>(&s->rung) >= upto) return Status::Ok;
      }
      if (dl.expired()) return detail::fail<S>(q, Status::TimeoutLock);
      spin_pause();
    }
  }
}

template <Sharing S> KINET_HD Status poll_cq(const QpHandle& q) {
  SqState* s = q.state;
  detail::check_exclusive_owner<S>(q);
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
  if (t.idx == 0) return Status::Ok;
  if (detail::ld<S>(&s->completed) >= t.idx) return detail::completed_status<S>(q, t);
  uint64_t sig = (S == Sharing::Exclusive) ? s->signaled : load_relaxed<kScope<S>>(&s->signaled);
  if (sig < t.idx) {
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
namespace detail {
// Posts ceil(bytes / max_msg) WQEs (1 for bytes == 0) built by make(idx, offset, len, flags),
// in reservations of at most half the ring. Only the last WQE gets the caller's kSignal,
// only the first the caller's kFence. Lengths are checked before anything is reserved.
template <Sharing S, class Make>
KINET_HD Status post_chunked(const QpHandle& q, size_t bytes, uint32_t flags, Ticket* t, Make make) {
  if (!max_msg_ok(q)) return Status::InvalidArgument;
  // ceil without (bytes + max_msg - 1), which overflows near SIZE_MAX.
  const uint64_t b = bytes;
  const uint64_t nw = b == 0 ? 1 : b / q.max_msg + (b % q.max_msg != 0 ? 1 : 0);
  if (nw > kMaxWqesPerTransfer) return Status::InvalidArgument;
  uint64_t done = 0;
  size_t off = 0;
  uint64_t start = 0, end = 0;  // [start, end): the WQEs published so far
  // Stops the transfer: *t covers what was published, so the caller can wait
  // for it before reusing the buffer.
  auto stop = [&](Status st) {
    if (t && done > 0) *t = Ticket{end, start};
    return st;
  };
  while (done < nw) {
    if (done > 0) {
      // Between reservations: once an error CQE was seen the QP is in the
      // error state and the rest would be flushed: stop now, not after
      // posting for minutes.
      const int32_t es = load_acquire<kScope<S>>(&q.state->error_status);
      if (es != 0) {
        // A fault after this transfer's WQEs (another thread's) still flushes its rest.
        const Status st = status_of_range(es, q.state->error_wqe, start, end);
        return stop(st == Status::Ok ? Status::WrFlushed : st);
      }
    }
    const uint32_t g = static_cast<uint32_t>((nw - done) < q.size() / 2 ? (nw - done) : q.size() / 2);
    uint64_t first;
    Status st = reserve<S>(q, g, &first);
    if (st != Status::Ok) return stop(st);
    // reserve() may have polled the error CQE while it waited for space:
    // the reservation is then published as NOPs (later ones wait for it).
    if (done > 0) {
      const int32_t es = load_acquire<kScope<S>>(&q.state->error_status);
      if (es != 0) {
        for (uint32_t k = 0; k < g; ++k) prepare_nop<S>(q, first + k, 0);
        st = publish<S>(q, first, g);
        if (st == Status::Ok) st = ring_doorbell<S>(q, first + g);
        if (st != Status::Ok) return stop(st);
        const Status fs = status_of_range(es, q.state->error_wqe, start, end);
        end = first + g;
        return stop(fs == Status::Ok ? Status::WrFlushed : fs);
      }
    }
    for (uint32_t k = 0; k < g; ++k) {
      const size_t len = (bytes - off) < q.max_msg ? (bytes - off) : q.max_msg;
      const bool last = done + k + 1 == nw;
      uint32_t f = (flags & kFence) && done + k == 0 ? uint32_t(kFence) : 0u;
      if (last) f |= flags & kSignal;
      make(first + k, off, static_cast<uint32_t>(len), f);
      off += len;
    }
    st = publish<S>(q, first, g);
    if (st != Status::Ok) return stop(st);
    if (done == 0) start = first;
    end = first + g;
    done += g;
    if (!(flags & kNoDoorbell) || done < nw) {
      st = ring_doorbell<S>(q, first + g);
      if (st != Status::Ok) return stop(st);
    }
  }
  if (t) *t = Ticket{end, start};
  return Status::Ok;
}

template <Sharing S, class Make>
KINET_HD Status post_one(const QpHandle& q, uint32_t flags, Ticket* t, Make make) {
  uint64_t idx;
  Status st = reserve<S>(q, 1, &idx);
  if (st != Status::Ok) return st;
  make(idx, flags & (kSignal | kFence));
  st = publish<S>(q, idx, 1);
  if (st != Status::Ok) return st;
  if (t) *t = Ticket{idx + 1, idx};
  if (flags & kNoDoorbell) return Status::Ok;
  return ring_doorbell<S>(q, idx + 1);
}
}  // namespace detail

template <Sharing S> KINET_HD Status put(const QpHandle& q, const void* src, Lkey lkey, uint64_t raddr, Rkey rkey,
                                         size_t bytes, uint32_t flags, Ticket* t) {
  const uint8_t* s8 = static_cast<const uint8_t*>(src);
  return detail::post_chunked<S>(q, bytes, flags, t, [&](uint64_t idx, size_t off, uint32_t len, uint32_t f) {
    prepare_write<S>(q, idx, s8 + off, lkey, raddr + off, rkey, len, f);
  });
}

template <Sharing S> KINET_HD Status put_inline(const QpHandle& q, const void* src, uint32_t bytes, uint64_t raddr,
                                                Rkey rkey, uint32_t flags, Ticket* t) {
  if (bytes > mlx5::kMaxInlineOneBB) return Status::InvalidArgument;
  return detail::post_one<S>(q, flags, t, [&](uint64_t idx, uint32_t f) {
    prepare_write_inline<S>(q, idx, src, bytes, raddr, rkey, f);
  });
}

template <Sharing S> KINET_HD Status get(const QpHandle& q, void* dst, Lkey lkey, uint64_t raddr, Rkey rkey,
                                         size_t bytes, uint32_t flags, Ticket* t) {
  uint8_t* d8 = static_cast<uint8_t*>(dst);
  return detail::post_chunked<S>(q, bytes, flags, t, [&](uint64_t idx, size_t off, uint32_t len, uint32_t f) {
    prepare_read<S>(q, idx, d8 + off, lkey, raddr + off, rkey, len, f);
  });
}

template <Sharing S> KINET_HD Status fetch_add(const QpHandle& q, uint64_t* result, Lkey lkey, uint64_t raddr,
                                               Rkey rkey, uint64_t add, uint32_t flags, Ticket* t) {
  return detail::post_one<S>(q, flags, t, [&](uint64_t idx, uint32_t f) {
    prepare_fetch_add<S>(q, idx, result, lkey, raddr, rkey, add, f);
  });
}

template <Sharing S> KINET_HD Status compare_swap(const QpHandle& q, uint64_t* result, Lkey lkey, uint64_t raddr,
                                                  Rkey rkey, uint64_t compare, uint64_t swap, uint32_t flags,
                                                  Ticket* t) {
  return detail::post_one<S>(q, flags, t, [&](uint64_t idx, uint32_t f) {
    prepare_compare_swap<S>(q, idx, result, lkey, raddr, rkey, compare, swap, f);
  });
}

template <Sharing S> KINET_HD Status put_signal(const QpHandle& q, const void* src, Lkey lkey, uint64_t raddr,
                                                Rkey rkey, size_t bytes, uint64_t sig_raddr, Rkey sig_rkey,
                                                uint64_t add, uint64_t* scratch, Lkey scratch_lkey, uint32_t flags,
                                                Ticket* t) {
  // The data WQEs are published without a doorbell; the atomic's doorbell
  // announces both. RC ordering keeps the atomic behind the writes.
  Ticket data, sig;
  Status st = put<S>(q, src, lkey, raddr, rkey, bytes, (flags & kFence) | kNoDoorbell, &data);
  if (st == Status::Ok) st = fetch_add<S>(q, scratch, scratch_lkey, sig_raddr, sig_rkey, add, flags & ~kFence, &sig);
  if (t && data.idx != 0) *t = Ticket{sig.idx != 0 ? sig.idx : data.idx, data.first};
  return st;
}

template <Sharing S> KINET_HD Status nop(const QpHandle& q, uint32_t flags, Ticket* t) {
  return detail::post_one<S>(q, flags, t, [&](uint64_t idx, uint32_t f) { prepare_nop<S>(q, idx, f); });
}

}  // namespace kinet::dev
