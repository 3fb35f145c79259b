// kinet — bodies of the one-call device verbs declared in kinet/device/qp.cuh
// (put, get, atomics, nop, post_loop), built on the steps in qp_funcs.cuh.
#pragma once

namespace kinet::dev {

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

template <class Make>
KINET_HD Status post_loop(const QpHandle& q, uint64_t count, uint32_t db_every, uint32_t flags, Ticket* t,
                          Make make) {
  if (count == 0 || db_every == 0 || (db_every & (db_every - 1)) != 0) return Status::InvalidArgument;
  SqCursor c;
  Status st = open_cursor(q, &c);
  if (st != Status::Ok) return st;
  if (c.ready != c.reserved) return Status::InvalidArgument;  // a reservation is outstanding
  const uint64_t first = c.reserved, mask = db_every - 1;
  uint64_t k = 0;
  auto post = [&](uint64_t idx) {  // WQE k at ring index idx, reserved
    uint32_t f = 0;
    if (k == 0) f |= flags & kFence;
    if (k + 1 == count) f |= flags & kSignal;
    make(idx, f);
    publish(q, c, idx, 1);
    if (((idx + 1) & mask) == 0 || (k + 1 == count && !(flags & kNoDoorbell))) ring_doorbell(q, c, idx + 1);
    ++k;
  };
  while (k < count) {
    // Runs of as many WQEs as the cursor knows are free, with no check per
    // WQE; a full ring waits in reserve() (bounded) for one more slot.
    const uint64_t room = c.limit > c.reserved ? c.limit - c.reserved : 0;
    if (room == 0) {
      uint64_t idx;
      st = reserve(q, c, 1, &idx);
      if (st != Status::Ok) break;
      post(idx);
      continue;
    }
    const uint64_t end = k + (room < count - k ? room : count - k);
    while (k < end) post(c.reserved++);
  }
  close_cursor(q, c);
  if (t && c.ready > first) *t = Ticket{c.ready, first};
  return st;
}

}  // namespace kinet::dev
