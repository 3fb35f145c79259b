// kinet — bodies of the communicator's device API (kinet/device/comm.cuh)
// and, for nvcc, its warp and CTA variants.
#pragma once
#if !KINET_ON_DEVICE
#include <cstring>
#endif

namespace kinet::dev {
namespace detail {

inline constexpr uint32_t kNoWindow = ~0u;

// Self and P2p: the peer's part is mapped here and moved by loads and stores.
KINET_HD bool comm_direct(uint32_t path) {
  return path == static_cast<uint32_t>(CommPath::Self) || path == static_cast<uint32_t>(CommPath::P2p);
}
KINET_HD bool comm_gdaki(uint32_t path) { return path == static_cast<uint32_t>(CommPath::Gdaki); }

// Records this rank's first failure (later ones only return their status).
// The fields are written before the release of err_status the host acquires.
// counter: CommState::err_counter (1: off is a counter index; 2: that index was refused).
KINET_HD Status comm_fail(const CommHandle& c, Status st, int peer, CommOp op, uint32_t win, uint64_t off,
                          uint64_t expected = 0, uint64_t seen = 0, uint32_t counter = 0) {
  CommState* s = c.abi == kCommHandleAbi ? c.state : nullptr;  // a bad handle's pointers are not followed
  if (s && try_lock<Scope::System>(&s->err_lock)) {
    s->err_peer = peer;
    s->err_op = static_cast<uint32_t>(op);
    s->err_window = win;
    s->err_offset = off;
    s->err_expected = expected;
    s->err_seen = seen;
    s->err_counter = counter;
    store_release<Scope::System>(&s->err_status, static_cast<int32_t>(st));
  }
  return st;
}

KINET_HD bool in_window(const WindowHandle& w, uint64_t off, uint64_t n) { return off <= w.bytes && n <= w.bytes - off; }

// Counters (bodies in comm_counter_funcs.cuh).
KINET_HD Status comm_ctr_at(const CommHandle& c, const WindowHandle& w, uint64_t index, int peer, CommOp op,
                            uint64_t** ctr, uint64_t value = 0);
KINET_HD void comm_ctr_add(uint64_t* ctr);
template <Sharing S> KINET_HD Status comm_post_counted(const CommHandle& c, int peer, const ProxyDesc& d, uint64_t* ctr);
template <Sharing S, class Prep>
KINET_HD Status comm_qp_counted(const CommHandle& c, int peer, uint64_t* ctr, Prep prep);
template <Sharing S> KINET_HD uint64_t comm_ctr_mark(const CommPeer& p);
template <Sharing S> KINET_HD Status comm_ctr_settle(const CommHandle& c, int peer, uint64_t want, Status quiet);

// The checks every peer operation makes on the handle, the peer and one
// range of the peer's part of w (mapped there when the path is Self or P2p).
KINET_HD Status comm_check(const CommHandle& c, int peer, const WindowHandle& w, uint64_t off, uint64_t n, CommOp op) {
  if (c.abi != kCommHandleAbi || w.abi != kWindowHandleAbi)
    return comm_fail(c, Status::InvalidArgument, peer, op, kNoWindow, off);
  if (peer < 0 || peer >= c.size || !in_window(w, off, n)) return comm_fail(c, Status::InvalidArgument, peer, op, w.id, off);
  if (comm_direct(c.peers[peer].path) && w.peers[peer].mapped == nullptr)
    return comm_fail(c, Status::InvalidArgument, peer, op, w.id, off);  // not mapped: a window of another Comm?
  return Status::Ok;
}

// One thread's share of a group copy (rank of count threads), 16 bytes at a
// time when both sides allow it. Four independent 16-byte loads per thread
// are in flight before their stores: one at a time left an HBM-bound copy
// near 0.85x cudaMemcpy on an H200 (docs/PERFORMANCE.md section 8).
// Streaming (evict-first) hints were tried and cost up to 40 % where the
// data fits in the L2, as a receiver reading it soon would have it.
KINET_HD void group_copy(uint8_t* d, const uint8_t* s, uint64_t n, uint32_t rank, uint32_t count) {
#if KINET_ON_DEVICE
  uint64_t i = rank;
  if (((reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(s)) & 15) == 0) {
    constexpr uint32_t kInFlight = 4;
    const uint64_t n16 = n / 16, stride = count;
    const uint4* s16 = reinterpret_cast<const uint4*>(s);
    uint4* d16 = reinterpret_cast<uint4*>(d);
    for (; i + (kInFlight - 1) * stride < n16; i += kInFlight * stride) {
      uint4 v[kInFlight];
#pragma unroll
      for (uint32_t u = 0; u < kInFlight; ++u) v[u] = s16[i + u * stride];
#pragma unroll
      for (uint32_t u = 0; u < kInFlight; ++u) d16[i + u * stride] = v[u];
    }
    if (i + stride < n16) {  // the rest: two in flight, then one (a predicated round of four was slower)
      const uint4 a = s16[i], b = s16[i + stride];
      d16[i] = a;
      d16[i + stride] = b;
      i += 2 * stride;
    }
    if (i < n16) d16[i] = s16[i];
    i = n16 * 16 + rank;
  }
  for (; i < n; i += count) d[i] = s[i];
#else
  if (rank == 0) std::memcpy(d, s, n);
  (void)count;
#endif
}

// Waits (bounded) until the channel completed every descriptor below `end`.
template <Sharing S> KINET_HD Status comm_wait_completed(const ProxyHandle& h, uint64_t end) {
  return dev::wait<S>(h, Ticket{end, end - 1});
}

// Posts d on the peer's channel through reserve + publish.
template <Sharing S> KINET_HD Status comm_post(const ProxyHandle& h, const ProxyDesc& d, uint64_t* idx_out = nullptr) {
  uint64_t idx = 0;
  const Status st = reserve<S>(h, 1, &idx);
  if (st != Status::Ok) return st;
  publish<S>(h, idx, d);
  if (idx_out) *idx_out = idx;
  return Status::Ok;
}

template <Sharing S>
KINET_HD Status comm_signal(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                            const WindowHandle& src, uint64_t src_off, uint64_t bytes, const WindowHandle& sig,
                            uint64_t sig_off, SigOp op, uint64_t value, CommOp what, uint64_t ctr_index = kNoCounter) {
  if (Status e = comm_check(c, peer, sig, sig_off, 8, what); e != Status::Ok) return e;
  if ((sig_off & 7) != 0 || (op != SigOp::Add && op != SigOp::Set))
    return comm_fail(c, Status::InvalidArgument, peer, what, sig.id, sig_off);
  if (bytes != 0) {
    if (Status e = comm_check(c, peer, dst, dst_off, bytes, what); e != Status::Ok) return e;
    if (src.abi != kWindowHandleAbi || !in_window(src, src_off, bytes))
      return comm_fail(c, Status::InvalidArgument, peer, what, src.id, src_off);
  }
  uint64_t* ctr = nullptr;
  if (ctr_index != kNoCounter)
    if (Status e = comm_ctr_at(c, src, ctr_index, peer, what, &ctr); e != Status::Ok) return e;
  const CommPeer& p = c.peers[peer];
  if (comm_direct(p.path)) {
    if (bytes) group_copy(dst.peers[peer].mapped + dst_off, src.local + src_off, bytes, 0, 1);
    uint64_t* w = reinterpret_cast<uint64_t*>(sig.peers[peer].mapped + sig_off);
    // The data (and every earlier store of this thread) before the signal.
    fence_release<Scope::System>();
    if (op == SigOp::Add) fetch_add_relaxed<Scope::System>(w, value);
    else store_release<Scope::System>(w, value);
    if (ctr) comm_ctr_add(ctr);  // the source was read by the copy above
    return Status::Ok;
  }
  if (comm_gdaki(p.path)) {
    // The data's WQEs wait for the signal's doorbell. Add: a fetch-add, which
    // the responder executes after the QP's earlier writes and atomics (RC);
    // its old value goes to the peer's discard word. Set: an inline 8-byte
    // write, NIC-fenced behind earlier reads and atomics, placed after the
    // earlier writes of the QP (RC order).
    Status st = Status::Ok;
    if (bytes)
      st = dev::put<S>(p.qp, src.local + src_off, Lkey{src.qp_lkey}, dst.peers[peer].raddr + dst_off,
                       Rkey{dst.peers[peer].rkey}, bytes, kNoDoorbell, nullptr);
    const uint64_t sraddr = sig.peers[peer].raddr + sig_off;
    const Rkey srk{sig.peers[peer].rkey};
    if (st == Status::Ok && ctr) {
      // The signal's WQE carries the count: its CQE comes after the data's
      // (one QP completes in order).
      st = comm_qp_counted<S>(c, peer, ctr, [&](uint64_t idx) {
        if (op == SigOp::Add)
          prepare_fetch_add<S>(p.qp, idx, p.put_scratch, Lkey{p.scratch_lkey}, sraddr, srk, value, kSignal);
        else
          prepare_write_inline<S>(p.qp, idx, &value, 8, sraddr, srk, kFence | kSignal);
      });
    } else if (st == Status::Ok && op == SigOp::Add)
      st = dev::fetch_add<S>(p.qp, p.put_scratch, Lkey{p.scratch_lkey}, sraddr, srk, value, 0, nullptr);
    else if (st == Status::Ok)
      st = dev::put_inline<S>(p.qp, &value, 8, sraddr, srk, kFence, nullptr);
    return st == Status::Ok ? st : comm_fail(c, st, peer, what, sig.id, sig_off);
  }
  ProxyDesc d{};
  d.h0 = proxy_h0(ProxyOp::PutSignal, 0, static_cast<uint8_t>(op));
  if (bytes) {
    d.h1 = src.lkey;
    d.laddr = reinterpret_cast<uint64_t>(src.local + src_off);
    d.raddr = dst.peers[peer].raddr + dst_off;
    d.keys = dst.peers[peer].rkey;
  }
  d.len = bytes;
  d.arg = value;
  d.sig_raddr = sig.peers[peer].raddr + sig_off;
  d.keys |= uint64_t{sig.peers[peer].rkey} << 32;
  const Status st = ctr ? comm_post_counted<S>(c, peer, d, ctr) : comm_post<S>(p.ch, d);
  return st == Status::Ok ? st : comm_fail(c, st, peer, what, sig.id, sig_off);
}

// Every operation posted to one peer complete (Proxy: its channel; Gdaki:
// its QP; Self / P2p: nothing to wait for).
template <Sharing S> KINET_HD Status comm_quiet_peer(const CommPeer& p) {
  if (p.path == static_cast<uint32_t>(CommPath::Proxy)) return dev::quiet<S>(p.ch);
  if (comm_gdaki(p.path)) return dev::quiet<S>(p.qp);
  return Status::Ok;
}

KINET_HD bool compare(uint64_t v, Cmp cmp, uint64_t x) {
  switch (cmp) {
    case Cmp::Eq: return v == x;
    case Cmp::Ne: return v != x;
    case Cmp::Gt: return v > x;
    case Cmp::Ge: return v >= x;
    case Cmp::Lt: return v < x;
    case Cmp::Le: return v <= x;
  }
  return false;
}

// Whether the channel to `peer` failed or was closed, or the host saw the
// peer lost: the status to end a wait on that peer with, Ok when healthy.
template <Sharing S> KINET_HD Status comm_peer_health(const CommHandle& c, int peer) {
  if (load_relaxed<Scope::System>(const_cast<uint32_t*>(&c.peer_down[peer]))) return Status::TransportRetryExceeded;
  const CommPeer& p = c.peers[peer];
  if (comm_gdaki(p.path)) {
    // The QP's first error CQE (a lost peer: TransportRetryExceeded). Polling
    // here takes the CQEs of operations nobody waits for (barrier arrivals).
    poll_cq<S>(p.qp);
    const int32_t es = load_acquire<kScope<S>>(&p.qp.state->error_status);
    if (es != 0) return static_cast<Status>(es);
  }
  if (p.path == static_cast<uint32_t>(CommPath::Proxy)) {
    // A channel serves one peer, so a first error of WrFlushed means its
    // transport had already failed that peer (lost, or silent past the
    // timeout) before this channel's operation left: the peer is lost.
    const int32_t es = load_acquire<Scope::System>(&p.ch.shared->error_status);
    if (es == static_cast<int32_t>(Status::WrFlushed)) return Status::TransportRetryExceeded;
    if (es != 0) return static_cast<Status>(es);
    if (load_acquire<Scope::System>(&p.ch.shared->closed)) return Status::WrFlushed;
  }
  return Status::Ok;
}

// Gdaki: the result lands in the scratch slot of the WQE's ring slot. The
// slot's previous WQE (idx - n) completed once reserve() handed out idx; the
// slot is ours once no earlier poster still reads its result there (owner 0;
// a poster holds it as idx + 1 until it has read), as on the proxy path.
template <Sharing S>
KINET_HD Status comm_atomic_qp(const CommHandle& c, int peer, const WindowHandle& w, uint64_t off, bool add,
                               uint64_t a, uint64_t b, uint64_t* old) {
  const CommOp what = add ? CommOp::FetchAdd : CommOp::CompareSwap;
  const CommPeer& p = c.peers[peer];
  const QpHandle& q = p.qp;
  uint64_t idx = 0;
  Status st = reserve<S>(q, 1, &idx);
  if (st != Status::Ok) return comm_fail(c, st, peer, what, w.id, off);
  CommAtomicSlot* slot = &p.atomic_scratch[idx & (q.size() - 1)];
  const uint64_t t0 = now_ns();
  kinet::detail::atomic_ref_t<uint64_t, Scope::System> own(slot->owner);
  for (uint64_t free = 0; !own.compare_exchange_strong(free, idx + 1, kinet::detail::mo::memory_order_acquire,
                                                       kinet::detail::mo::memory_order_relaxed);
       free = 0) {
    if (now_ns() - t0 > c.timeout_ns) {
      prepare_nop<S>(q, idx, 0);  // the ring must not stop at our slot
      publish<S>(q, idx, 1);
      return comm_fail(c, Status::TimeoutCompletion, peer, what, w.id, off, idx + 1, free);
    }
    spin_pause();
  }
  const uint64_t raddr = w.peers[peer].raddr + off;
  const Rkey rk{w.peers[peer].rkey};
  if (add) prepare_fetch_add<S>(q, idx, &slot->value, Lkey{p.scratch_lkey}, raddr, rk, a, kSignal);
  else prepare_compare_swap<S>(q, idx, &slot->value, Lkey{p.scratch_lkey}, raddr, rk, a, b, kSignal);
  st = publish<S>(q, idx, 1);
  if (st == Status::Ok) st = ring_doorbell<S>(q, idx + 1);
  if (st == Status::Ok) st = dev::wait<S>(q, Ticket{idx + 1, idx});
  // Written by the NIC before the CQE wait() acquired; system scope: the
  // NIC's write bypasses this SM's L1.
  const uint64_t v = load_relaxed<Scope::System>(&slot->value);
  store_release<Scope::System>(&slot->owner, uint64_t{0});
  if (st != Status::Ok) return comm_fail(c, st, peer, what, w.id, off, idx + 1);
  if (old) *old = v;
  return Status::Ok;
}

template <Sharing S>
KINET_HD Status comm_atomic(const CommHandle& c, int peer, const WindowHandle& w, uint64_t off, bool add, uint64_t a,
                            uint64_t b, uint64_t* old) {
  const CommOp what = add ? CommOp::FetchAdd : CommOp::CompareSwap;
  if (Status e = comm_check(c, peer, w, off, 8, what); e != Status::Ok) return e;
  if (off & 7) return comm_fail(c, Status::InvalidArgument, peer, what, w.id, off);
  const CommPeer& p = c.peers[peer];
  uint64_t v = 0;
  if (comm_direct(p.path)) {
    uint64_t* word = reinterpret_cast<uint64_t*>(w.peers[peer].mapped + off);
    if (add) {
      v = fetch_add_relaxed<Scope::System>(word, a);
    } else {
      v = a;
      cas_relaxed<Scope::System>(word, v, b);  // v: the old value either way
    }
    if (old) *old = v;
    return Status::Ok;
  }
  if (comm_gdaki(p.path)) return comm_atomic_qp<S>(c, peer, w, off, add, a, b, old);
  // Proxy: the result lands in the scratch slot of this descriptor's ring
  // slot. It is ours once the slot's previous descriptor (ring index idx - n)
  // completed and no earlier atomic poster still reads its result there
  // (owner 0; a poster holds it as idx + 1 until it has read).
  uint64_t idx = 0;
  Status st = reserve<S>(p.ch, 1, &idx);
  if (st != Status::Ok) return comm_fail(c, st, peer, what, w.id, off);
  const uint64_t n = p.ch.size();
  CommAtomicSlot* slot = &p.atomic_scratch[idx & (n - 1)];
  if (idx >= n && (st = comm_wait_completed<S>(p.ch, idx - n + 1)) != Status::Ok) {
    publish<S>(p.ch, idx, make_nop(0));  // the ring must not stop at our slot
    return comm_fail(c, st, peer, what, w.id, off);
  }
  const uint64_t t0 = now_ns();
  // Acquire: the previous user's read of the value happens before the
  // proxy's next write of it (a CAS with acquire, not a separate fence:
  // ThreadSanitizer does not model fences).
  kinet::detail::atomic_ref_t<uint64_t, Scope::System> own(slot->owner);
  for (uint64_t free = 0; !own.compare_exchange_strong(free, idx + 1, kinet::detail::mo::memory_order_acquire,
                                                       kinet::detail::mo::memory_order_relaxed);
       free = 0) {
    if (now_ns() - t0 > c.timeout_ns) {
      publish<S>(p.ch, idx, make_nop(0));
      return comm_fail(c, Status::TimeoutCompletion, peer, what, w.id, off, idx + 1, free);
    }
    spin_pause();
  }
  const uint64_t raddr = w.peers[peer].raddr + off;
  const Rkey rk{w.peers[peer].rkey};
  publish<S>(p.ch, idx,
             add ? make_fetch_add(&slot->value, Lkey{p.scratch_lkey}, raddr, rk, a, 0)
                 : make_compare_swap(&slot->value, Lkey{p.scratch_lkey}, raddr, rk, a, b, 0));
  st = dev::wait<S>(p.ch, Ticket{idx + 1, idx});
  v = slot->value;  // written by the proxy before the completion wait() acquired
  store_release<Scope::System>(&slot->owner, uint64_t{0});
  if (st != Status::Ok) return comm_fail(c, st, peer, what, w.id, off, idx + 1);
  if (old) *old = v;
  return Status::Ok;
}

}  // namespace detail

namespace detail {
template <Sharing S>
KINET_HD Status comm_put(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                         const WindowHandle& src, uint64_t src_off, uint64_t bytes, uint64_t ctr_index) {
  if (Status e = comm_check(c, peer, dst, dst_off, bytes, CommOp::Put); e != Status::Ok) return e;
  if (src.abi != kWindowHandleAbi || !in_window(src, src_off, bytes))
    return comm_fail(c, Status::InvalidArgument, peer, CommOp::Put, src.id, src_off);
  uint64_t* ctr = nullptr;
  if (ctr_index != kNoCounter)
    if (Status e = comm_ctr_at(c, src, ctr_index, peer, CommOp::Put, &ctr); e != Status::Ok) return e;
  if (bytes == 0) {
    if (ctr) comm_ctr_add(ctr);  // nothing to read: complete at once
    return Status::Ok;
  }
  const CommPeer& p = c.peers[peer];
  if (comm_direct(p.path)) {
    group_copy(dst.peers[peer].mapped + dst_off, src.local + src_off, bytes, 0, 1);
    if (ctr) comm_ctr_add(ctr);  // the copy read the source
    return Status::Ok;
  }
  const uint8_t* from = src.local + src_off;
  const uint64_t raddr = dst.peers[peer].raddr + dst_off;
  const Rkey rk{dst.peers[peer].rkey};
  Status st;
  if (comm_gdaki(p.path)) {
    const QpHandle& q = p.qp;
    if (!ctr) {
      st = dev::put<S>(q, from, Lkey{src.qp_lkey}, raddr, rk, bytes, 0, nullptr);
    } else if (max_msg_ok(q) && bytes <= q.max_msg) {  // one WQE, counted by its CQE
      st = comm_qp_counted<S>(c, peer, ctr, [&](uint64_t idx) {
        prepare_write<S>(q, idx, from, Lkey{src.qp_lkey}, raddr, rk, static_cast<uint32_t>(bytes), kSignal);
      });
    } else {  // split: the WQEs, then a counted NOP whose CQE follows theirs
      st = dev::put<S>(q, from, Lkey{src.qp_lkey}, raddr, rk, bytes, kNoDoorbell, nullptr);
      if (st == Status::Ok)
        st = comm_qp_counted<S>(c, peer, ctr, [&](uint64_t idx) { prepare_nop<S>(q, idx, kSignal); });
    }
  } else if (!ctr) {
    st = dev::put<S>(p.ch, from, Lkey{src.lkey}, raddr, rk, bytes, 0, nullptr);
  } else {
    st = comm_post_counted<S>(c, peer, make_put(from, Lkey{src.lkey}, raddr, rk, bytes, 0), ctr);
  }
  return st == Status::Ok ? st : comm_fail(c, st, peer, CommOp::Put, dst.id, dst_off);
}
}  // namespace detail

template <Sharing S>
KINET_HD Status put(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off, const WindowHandle& src,
                    uint64_t src_off, uint64_t bytes, CounterInc ctr) {
  return detail::comm_put<S>(c, peer, dst, dst_off, src, src_off, bytes, ctr.index);
}

template <Sharing S>
KINET_HD Status put_value(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off, uint64_t value,
                          uint32_t nbytes) {
  if (nbytes == 0 || nbytes > 8) return detail::comm_fail(c, Status::InvalidArgument, peer, CommOp::PutValue, dst.id, dst_off);
  if (Status e = detail::comm_check(c, peer, dst, dst_off, nbytes, CommOp::PutValue); e != Status::Ok) return e;
  const CommPeer& p = c.peers[peer];
  if (detail::comm_direct(p.path)) {
    detail::group_copy(dst.peers[peer].mapped + dst_off, reinterpret_cast<const uint8_t*>(&value), nbytes, 0, 1);
    return Status::Ok;
  }
  if (detail::comm_gdaki(p.path)) {  // inline: the value travels in the WQE, no source buffer
    const Status st = dev::put_inline<S>(p.qp, &value, nbytes, dst.peers[peer].raddr + dst_off,
                                         Rkey{dst.peers[peer].rkey}, 0, nullptr);
    return st == Status::Ok ? st : detail::comm_fail(c, st, peer, CommOp::PutValue, dst.id, dst_off);
  }
  // The source is the scratch word of this descriptor's ring slot, free once
  // the slot's previous descriptor (idx - n) completed.
  uint64_t idx = 0;
  Status st = reserve<S>(p.ch, 1, &idx);
  if (st != Status::Ok) return detail::comm_fail(c, st, peer, CommOp::PutValue, dst.id, dst_off);
  const uint64_t n = p.ch.size();
  if (idx >= n && (st = detail::comm_wait_completed<S>(p.ch, idx - n + 1)) != Status::Ok) {
    publish<S>(p.ch, idx, make_nop(0));
    return detail::comm_fail(c, st, peer, CommOp::PutValue, dst.id, dst_off);
  }
  uint64_t* src = &p.put_scratch[idx & (n - 1)];
  *src = value;  // published below with release
  publish<S>(p.ch, idx,
             make_put(src, Lkey{p.scratch_lkey}, dst.peers[peer].raddr + dst_off, Rkey{dst.peers[peer].rkey}, nbytes, 0));
  return Status::Ok;
}

template <Sharing S>
KINET_HD Status get(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off, const WindowHandle& src,
                    uint64_t src_off, uint64_t bytes) {
  if (Status e = detail::comm_check(c, peer, src, src_off, bytes, CommOp::Get); e != Status::Ok) return e;
  if (bytes == 0 || dst.abi != kWindowHandleAbi || !detail::in_window(dst, dst_off, bytes))
    return detail::comm_fail(c, Status::InvalidArgument, peer, CommOp::Get, dst.id, dst_off);
  const CommPeer& p = c.peers[peer];
  if (detail::comm_direct(p.path)) {
    detail::group_copy(dst.local + dst_off, src.peers[peer].mapped + src_off, bytes, 0, 1);
    return Status::Ok;
  }
  if (detail::comm_gdaki(p.path)) {
    const Status st = dev::get<S>(p.qp, dst.local + dst_off, Lkey{dst.qp_lkey}, src.peers[peer].raddr + src_off,
                                  Rkey{src.peers[peer].rkey}, bytes, 0, nullptr);
    return st == Status::Ok ? st : detail::comm_fail(c, st, peer, CommOp::Get, src.id, src_off);
  }
  const Status st = dev::get<S>(p.ch, dst.local + dst_off, Lkey{dst.lkey}, src.peers[peer].raddr + src_off,
                                Rkey{src.peers[peer].rkey}, bytes, 0, nullptr);
  return st == Status::Ok ? st : detail::comm_fail(c, st, peer, CommOp::Get, src.id, src_off);
}

template <Sharing S>
KINET_HD Status put_signal(const CommHandle& c, int peer, const WindowHandle& dst, uint64_t dst_off,
                           const WindowHandle& src, uint64_t src_off, uint64_t bytes, const WindowHandle& sig,
                           uint64_t sig_off, SigOp op, uint64_t value, CounterInc ctr) {
  return detail::comm_signal<S>(c, peer, dst, dst_off, src, src_off, bytes, sig, sig_off, op, value, CommOp::PutSignal,
                                ctr.index);
}

template <Sharing S>
KINET_HD Status signal(const CommHandle& c, int peer, const WindowHandle& sig, uint64_t sig_off, SigOp op,
                       uint64_t value) {
  return detail::comm_signal<S>(c, peer, sig, 0, sig, 0, 0, sig, sig_off, op, value, CommOp::Signal);
}

template <Sharing S>
KINET_HD Status wait_signal(const CommHandle& c, const WindowHandle& sig, uint64_t sig_off, Cmp cmp, uint64_t value,
                            int from, uint64_t* seen) {
  if (c.abi != kCommHandleAbi || sig.abi != kWindowHandleAbi || !detail::in_window(sig, sig_off, 8) || (sig_off & 7) ||
      from < -1 || from >= c.size || cmp < Cmp::Eq || cmp > Cmp::Le)
    return detail::comm_fail(c, Status::InvalidArgument, from, CommOp::WaitSignal, sig.id, sig_off, value);
  uint64_t* w = reinterpret_cast<uint64_t*>(sig.local + sig_off);
  const uint64_t t0 = now_ns();
  for (;;) {
    const uint64_t v = load_acquire<Scope::System>(w);
    if (seen) *seen = v;
    if (detail::compare(v, cmp, value)) return Status::Ok;
    if (from >= 0 && from != c.rank) {
      if (Status h = detail::comm_peer_health<S>(c, from); h != Status::Ok)
        return detail::comm_fail(c, h, from, CommOp::WaitSignal, sig.id, sig_off, value, v);
    }
    if (now_ns() - t0 > c.timeout_ns)
      return detail::comm_fail(c, Status::TimeoutCompletion, from, CommOp::WaitSignal, sig.id, sig_off, value, v);
    spin_pause();
  }
}

template <Sharing S>
KINET_HD Status fetch_add(const CommHandle& c, int peer, const WindowHandle& w, uint64_t off, uint64_t add,
                          uint64_t* old) {
  return detail::comm_atomic<S>(c, peer, w, off, true, add, 0, old);
}

template <Sharing S>
KINET_HD Status compare_swap(const CommHandle& c, int peer, const WindowHandle& w, uint64_t off, uint64_t compare,
                             uint64_t swap, uint64_t* old) {
  return detail::comm_atomic<S>(c, peer, w, off, false, compare, swap, old);
}

template <Sharing S> KINET_HD Status quiet(const CommHandle& c) {
  if (c.abi != kCommHandleAbi) return detail::comm_fail(c, Status::InvalidArgument, -1, CommOp::Quiet, detail::kNoWindow, 0);
  for (int p = 0; p < c.size; ++p) {
    const uint64_t mark = detail::comm_ctr_mark<S>(c.peers[p]);  // counted operations posted before this quiet
    Status st = detail::comm_quiet_peer<S>(c.peers[p]);
    if (mark) st = detail::comm_ctr_settle<S>(c, p, mark, st);
    if (st != Status::Ok) return detail::comm_fail(c, st, p, CommOp::Quiet, detail::kNoWindow, 0);
  }
  fence_release<Scope::System>();  // P2p / Self stores
  return Status::Ok;
}

template <Sharing S> KINET_HD Status fence(const CommHandle& c, int peer) {
  if (c.abi != kCommHandleAbi || peer < 0 || peer >= c.size)
    return detail::comm_fail(c, Status::InvalidArgument, peer, CommOp::Fence, detail::kNoWindow, 0);
  const uint64_t mark = detail::comm_ctr_mark<S>(c.peers[peer]);
  Status st = detail::comm_quiet_peer<S>(c.peers[peer]);
  if (mark) st = detail::comm_ctr_settle<S>(c, peer, mark, st);
  if (st != Status::Ok) return detail::comm_fail(c, st, peer, CommOp::Fence, detail::kNoWindow, 0);
  fence_release<Scope::System>();
  return Status::Ok;
}

template <Sharing S> KINET_HD Status barrier(const CommHandle& c) {
  if (c.abi != kCommHandleAbi) return detail::comm_fail(c, Status::InvalidArgument, -1, CommOp::Barrier, detail::kNoWindow, 0);
  const WindowHandle& b = c.barrier;
  const uint64_t epoch = load_relaxed<Scope::System>(&c.state->barrier_epoch) + 1;
  store_relaxed<Scope::System>(&c.state->barrier_epoch, epoch);
  const uint64_t mine = static_cast<uint64_t>(c.rank) * 8;
  // Quiet, then arrive at every peer, even after a peer failed: the healthy
  // ones must not wait for this rank in vain (they then see the rank that
  // really failed). The first failure is this call's status.
  int bad = -1;
  Status first = Status::Ok;
  for (int p = 0; p < c.size; ++p) {
    const uint64_t mark = detail::comm_ctr_mark<S>(c.peers[p]);
    Status st = detail::comm_quiet_peer<S>(c.peers[p]);
    if (mark) st = detail::comm_ctr_settle<S>(c, p, mark, st);
    if (st != Status::Ok && bad < 0) bad = p, first = st;
  }
  fence_release<Scope::System>();  // P2p / Self stores before the arrivals
  for (int p = 0; p < c.size; ++p) {
    if (p == c.rank || p == bad) continue;
    const Status st = detail::comm_signal<S>(c, p, b, 0, b, 0, 0, b, mine, SigOp::Add, 1, CommOp::Barrier);
    if (st != Status::Ok && bad < 0) bad = p, first = st;
  }
  if (bad >= 0) return detail::comm_fail(c, first, bad, CommOp::Barrier, detail::kNoWindow, 0);
  const uint64_t t0 = now_ns();
  for (int p = 0; p < c.size; ++p) {
    if (p == c.rank) continue;
    uint64_t* w = reinterpret_cast<uint64_t*>(b.local + static_cast<uint64_t>(p) * 8);
    for (;;) {
      const uint64_t v = load_acquire<Scope::System>(w);
      if (v >= epoch) break;
      if (Status h = detail::comm_peer_health<S>(c, p); h != Status::Ok)
        return detail::comm_fail(c, h, p, CommOp::Barrier, b.id, static_cast<uint64_t>(p) * 8, epoch, v);
      if (now_ns() - t0 > c.timeout_ns)
        return detail::comm_fail(c, Status::TimeoutCompletion, p, CommOp::Barrier, b.id, static_cast<uint64_t>(p) * 8,
                                 epoch, v);
      spin_pause();
    }
  }
  return Status::Ok;
}

}  // namespace kinet::dev
