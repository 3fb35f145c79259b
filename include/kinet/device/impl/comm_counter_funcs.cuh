// kinet — bodies of the communicator's local-completion counters
// (kinet/device/comm.cuh, "Counters").
//
// How a completion on the proxy and gdaki paths reaches a counter: a counted
// operation tags its ring slot (CommCounterTag: its ring index + 1 and its
// counter) before it is published; whoever progresses (comm_ctr_progress,
// under the track's lock) walks the slots between `credited` and the
// channel's / QP's completed index and adds 1 to the counter of each slot
// whose tag belongs to that index. A poster may overwrite a slot's tag only
// once the slot's previous operation (idx - ring size) was credited. Untagged
// operations leave stale tags behind, which the owner check skips: an
// operation without a counter writes nothing here.
#pragma once

namespace kinet::dev {
namespace detail {

// The track is set once by the host (when the first window with counters is
// made), possibly while posters run: read it atomically.
KINET_HD CommCounterTrack* comm_ctr_track(const CommPeer& p) {
  return load_relaxed<Scope::System>(const_cast<CommCounterTrack**>(&p.ctr));
}
KINET_HD CommCounterTag* comm_ctr_tags(CommCounterTrack* t) { return reinterpret_cast<CommCounterTag*>(t + 1); }
KINET_HD uint64_t comm_ring_size(const CommPeer& p) { return comm_gdaki(p.path) ? p.qp.size() : p.ch.size(); }

// Counter `index` of w ({value, failure} pair), or InvalidArgument recorded
// with the window and the counter (expected: how many the window has).
KINET_HD Status comm_ctr_at(const CommHandle& c, const WindowHandle& w, uint64_t index, int peer, CommOp op,
                            uint64_t** ctr, uint64_t value) {
  if (c.abi != kCommHandleAbi || w.abi != kWindowHandleAbi)
    return comm_fail(c, Status::InvalidArgument, peer, op, kNoWindow, index, value, 0, 2);
  if (index >= w.ncounters || w.counters == nullptr)
    return comm_fail(c, Status::InvalidArgument, peer, op, w.id, index, w.ncounters, 0, 2);
  *ctr = w.counters + 2 * uint64_t{index};
  return Status::Ok;
}

// +1 with release: the source's reads (or the completion acquired by the
// crediting thread) happen before whoever acquires the new value.
KINET_HD void comm_ctr_add(uint64_t* ctr) {
  kinet::detail::atomic_ref_t<uint64_t, Scope::System>(*ctr).fetch_add(1, kinet::detail::mo::memory_order_release);
}

// A counted operation failed: the first failure of the counter is kept.
KINET_HD void comm_ctr_failed(uint64_t* ctr, int peer, Status st) {
  uint64_t none = 0;
  const uint64_t v = uint64_t{static_cast<uint32_t>(peer)} << 32 | static_cast<uint32_t>(static_cast<int32_t>(st));
  kinet::detail::atomic_ref_t<uint64_t, Scope::System>(ctr[1]).compare_exchange_strong(
      none, v, kinet::detail::mo::memory_order_release, kinet::detail::mo::memory_order_relaxed);
}

// Credits the completions of `peer`'s channel or QP that arrived to the
// counters of the counted operations among them. One thread at a time; the
// others return at once. force: also when nothing counted is pending (a
// poster needs `credited` past a slot).
template <Sharing S> KINET_HD void comm_ctr_progress(const CommPeer& p, int peer, bool force) {
  constexpr Scope K = kScope<S>;
  CommCounterTrack* t = comm_ctr_track(p);
  if (t == nullptr) return;
  if (!force && load_relaxed<K>(&t->tagged) <= load_relaxed<K>(&t->credited)) return;
  if (!try_lock<K>(&t->lock)) return;
  // Completed index first, then the tags: a tag is written before its
  // operation is published, so every operation below `done` has its tag
  // (and `tagged`) visible once `done` was acquired.
  uint64_t done, ei = ~uint64_t{0};
  int32_t es;
  if (comm_gdaki(p.path)) {
    poll_cq<S>(p.qp);
    done = load_acquire<K>(&p.qp.state->completed);
    es = load_acquire<K>(&p.qp.state->error_status);
    if (es != 0) ei = p.qp.state->error_wqe;  // written before error_status's release
  } else {
    done = load_acquire<Scope::System>(&p.ch.shared->completed) & kProxyDoneIndex;  // without the error/closed flags
    es = load_acquire<Scope::System>(&p.ch.shared->error_status);
    if (es != 0) ei = load_relaxed<Scope::System>(&p.ch.shared->error_index);
  }
  const uint64_t from = load_relaxed<K>(&t->credited);
  const uint64_t tagged = load_relaxed<K>(&t->tagged);
  const uint64_t hi = done < tagged ? done : tagged;
  const uint64_t mask = comm_ring_size(p) - 1;
  CommCounterTag* tags = comm_ctr_tags(t);
  for (uint64_t i = from; i < hi; ++i) {
    CommCounterTag* g = &tags[i & mask];
    if (load_relaxed<K>(&g->owner) != i + 1) continue;  // not counted (a stale tag of an earlier lap)
    uint64_t* ctr = load_relaxed<K>(&g->counter);
    // Completed below the first failure: Ok. At it: that failure; after it: flushed.
    if (i < ei) comm_ctr_add(ctr);
    else comm_ctr_failed(ctr, peer, i == ei ? static_cast<Status>(es) : Status::WrFlushed);
  }
  if (done > from) store_release<K>(&t->credited, done);
  unlock<K>(&t->lock);
}

template <Sharing S> KINET_HD void comm_ctr_progress_all(const CommHandle& c) {
  for (int p = 0; p < c.size; ++p) comm_ctr_progress<S>(c.peers[p], p, false);
}

// Tags ring index idx of `peer` as a counted operation of ctr, once the
// slot's previous operation (idx - ring size) was credited. Bounded.
template <Sharing S> KINET_HD Status comm_ctr_tag(const CommHandle& c, int peer, uint64_t idx, uint64_t* ctr) {
  constexpr Scope K = kScope<S>;
  const CommPeer& p = c.peers[peer];
  CommCounterTrack* t = comm_ctr_track(p);
  if (t == nullptr) return Status::InvalidArgument;  // the host makes it with the first window that has counters
  const uint64_t n = comm_ring_size(p);
  if (idx >= n) {
    const uint64_t need = idx - n + 1, t0 = now_ns();
    while (load_acquire<K>(&t->credited) < need) {
      comm_ctr_progress<S>(p, peer, true);
      if (load_acquire<K>(&t->credited) >= need) break;
      if (now_ns() - t0 > c.timeout_ns) return Status::TimeoutCompletion;
      spin_pause();
    }
  }
  CommCounterTag* g = &comm_ctr_tags(t)[idx & (n - 1)];
  store_relaxed<K>(&g->counter, ctr);
  store_relaxed<K>(&g->owner, idx + 1);
  fetch_max_relaxed<K>(&t->tagged, idx + 1);
  return Status::Ok;  // the caller publishes (release) after this
}

// One counted descriptor on `peer`'s channel.
template <Sharing S> KINET_HD Status comm_post_counted(const CommHandle& c, int peer, const ProxyDesc& d, uint64_t* ctr) {
  const ProxyHandle& h = c.peers[peer].ch;
  uint64_t idx = 0;
  Status st = reserve<S>(h, 1, &idx);
  if (st != Status::Ok) return st;
  st = comm_ctr_tag<S>(c, peer, idx, ctr);
  publish<S>(h, idx, st == Status::Ok ? d : make_nop(0));  // the ring must not stop at our slot
  return st;
}

// One counted WQE on `peer`'s QP, written by prep(idx) with kSignal (its CQE
// is the count), then the doorbell.
template <Sharing S, class Prep>
KINET_HD Status comm_qp_counted(const CommHandle& c, int peer, uint64_t* ctr, Prep prep) {
  const QpHandle& q = c.peers[peer].qp;
  uint64_t idx = 0;
  Status st = reserve<S>(q, 1, &idx);
  if (st != Status::Ok) return st;
  const Status tag = comm_ctr_tag<S>(c, peer, idx, ctr);
  if (tag == Status::Ok) prep(idx);
  else prepare_nop<S>(q, idx, 0);  // the ring must not stop at our slot
  st = publish<S>(q, idx, 1);
  if (st == Status::Ok) st = ring_doorbell<S>(q, idx + 1);
  return tag != Status::Ok ? tag : st;
}

// Before a quiet of `peer`: how far its counted operations were tagged
// (0: none). comm_ctr_settle then waits until they are credited.
template <Sharing S> KINET_HD uint64_t comm_ctr_mark(const CommPeer& p) {
  CommCounterTrack* t = comm_ctr_track(p);
  return t ? load_relaxed<kScope<S>>(&t->tagged) : 0;
}

// After a quiet of `peer` that returned `quiet`. Ok: every counted operation
// below `want` completed, so this only waits for a crediting thread that
// holds the lock. A failed quiet: one crediting pass, so that what failed is
// recorded on its counters now (a later reset_counter then sticks), no wait.
// Returns `quiet`, or TimeoutCompletion.
template <Sharing S> KINET_HD Status comm_ctr_settle(const CommHandle& c, int peer, uint64_t want, Status quiet) {
  if (quiet != Status::Ok) {
    comm_ctr_progress<S>(c.peers[peer], peer, true);
    return quiet;
  }
  CommCounterTrack* t = comm_ctr_track(c.peers[peer]);
  const uint64_t t0 = now_ns();
  while (load_acquire<kScope<S>>(&t->credited) < want) {
    comm_ctr_progress<S>(c.peers[peer], peer, true);
    if (load_acquire<kScope<S>>(&t->credited) >= want) break;
    if (now_ns() - t0 > c.timeout_ns) return Status::TimeoutCompletion;
    spin_pause();
  }
  return Status::Ok;
}

// Whether an operation counted on ctr is still outstanding on `peer`.
template <Sharing S> KINET_HD bool comm_ctr_outstanding(const CommPeer& p, const uint64_t* ctr) {
  constexpr Scope K = kScope<S>;
  CommCounterTrack* t = comm_ctr_track(p);
  if (t == nullptr) return false;
  const uint64_t n = comm_ring_size(p), to = load_relaxed<K>(&t->tagged);
  uint64_t i = load_acquire<K>(&t->credited);
  if (to > n && i < to - n) i = to - n;
  CommCounterTag* tags = comm_ctr_tags(t);
  for (; i < to; ++i) {
    CommCounterTag* g = &tags[i & (n - 1)];
    if (load_relaxed<K>(&g->owner) == i + 1 && load_relaxed<K>(&g->counter) == ctr) return true;
  }
  return false;
}

// The status a counter wait ends with besides Ok and the timeout: a failure
// recorded on the counter, or a failed or lost peer (the monitor's mark, a
// failed or closed channel, a QP in error) with an operation of this counter
// outstanding (then also recorded on the counter). Recorded as op's
// failure. Ok: keep waiting.
template <Sharing S>
KINET_HD Status comm_ctr_trouble(const CommHandle& c, const WindowHandle& w, uint32_t index, uint64_t* ctr, CommOp op,
                                 uint64_t value, uint64_t seen) {
  const uint64_t f = load_acquire<Scope::System>(ctr + 1);
  if (f != 0)
    return comm_fail(c, static_cast<Status>(static_cast<int32_t>(static_cast<uint32_t>(f))),
                     static_cast<int>(static_cast<uint32_t>(f >> 32)), op, w.id, index, value, seen, 1);
  for (int p = 0; p < c.size; ++p) {
    const CommPeer& cp = c.peers[p];
    CommCounterTrack* t = comm_ctr_track(cp);
    if (t == nullptr || load_relaxed<kScope<S>>(&t->tagged) <= load_relaxed<kScope<S>>(&t->credited)) continue;
    const Status h = comm_peer_health<S>(c, p);
    if (h != Status::Ok && comm_ctr_outstanding<S>(cp, ctr)) {
      comm_ctr_failed(ctr, p, h);  // read_counter says so too, before the completion (if any) is credited
      return comm_fail(c, h, p, op, w.id, index, value, seen, 1);
    }
  }
  return Status::Ok;
}

}  // namespace detail

template <Sharing S>
KINET_HD Status read_counter(const CommHandle& c, const WindowHandle& w, uint32_t index, uint64_t* value) {
  uint64_t* ctr = nullptr;
  if (Status e = detail::comm_ctr_at(c, w, index, -1, CommOp::ReadCounter, &ctr); e != Status::Ok) return e;
  detail::comm_ctr_progress_all<S>(c);
  const uint64_t v = load_acquire<Scope::System>(ctr);
  if (value) *value = v;
  const uint64_t f = load_acquire<Scope::System>(ctr + 1);
  if (f == 0) return Status::Ok;
  return detail::comm_fail(c, static_cast<Status>(static_cast<int32_t>(static_cast<uint32_t>(f))),
                           static_cast<int>(static_cast<uint32_t>(f >> 32)), CommOp::ReadCounter, w.id, index, 0, v,
                           1);
}

template <Sharing S>
KINET_HD Status wait_counter(const CommHandle& c, const WindowHandle& w, uint32_t index, uint64_t value,
                             uint64_t* seen) {
  uint64_t* ctr = nullptr;
  if (Status e = detail::comm_ctr_at(c, w, index, -1, CommOp::WaitCounter, &ctr, value); e != Status::Ok) return e;
  const uint64_t t0 = now_ns();
  for (;;) {
    uint64_t v = load_acquire<Scope::System>(ctr);
    if (v < value) {
      detail::comm_ctr_progress_all<S>(c);
      v = load_acquire<Scope::System>(ctr);
    }
    if (seen) *seen = v;
    if (v >= value) return Status::Ok;
    if (Status t = detail::comm_ctr_trouble<S>(c, w, index, ctr, CommOp::WaitCounter, value, v); t != Status::Ok)
      return t;
    if (now_ns() - t0 > c.timeout_ns)
      return detail::comm_fail(c, Status::TimeoutCompletion, -1, CommOp::WaitCounter, w.id, index, value, v, 1);
    spin_pause();
  }
}

template <Sharing S>
KINET_HD Status reset_counter(const CommHandle& c, const WindowHandle& w, uint32_t index, uint64_t value) {
  uint64_t* ctr = nullptr;
  if (Status e = detail::comm_ctr_at(c, w, index, -1, CommOp::ResetCounter, &ctr, value); e != Status::Ok) return e;
  store_relaxed<Scope::System>(ctr + 1, uint64_t{0});
  store_release<Scope::System>(ctr, value);
  return Status::Ok;
}

}  // namespace kinet::dev
