// kinet — bodies of the proxy device API declared in kinet/device/proxy.cuh,
// and (nvcc only) its warp and CTA variants.
#pragma once

namespace kinet::dev {
namespace detail {

inline constexpr uint32_t kProxyKnownFlags = kSignal | kNoDoorbell | kFence;

// The valid bit a descriptor at ring index idx carries: set on even laps.
KINET_HD uint64_t proxy_valid_bit(uint32_t log_n, uint64_t idx) {
  return ((idx >> log_n) & 1) ? 0 : kProxyValid;
}

KINET_HD uint64_t proxy_h0(ProxyOp op, uint32_t flags, uint8_t sig_op = 0) {
  return uint64_t{static_cast<uint8_t>(op)} | uint64_t{flags & 0xffu} << 8 | uint64_t{sig_op} << 16;
}

// ---- ordering: one named helper per need --------------------------------

// The slot at `end - size()` and below were copied out by the proxy before
// this poster overwrites them: the proxy's release store of `consumed`,
// acquired here (or through the cache, which is raised only after such an
// acquire, by a release CAS). Returns the consumer index seen; the cache
// never moves backwards (proxy_wait_space relies on it).
template <Sharing S> KINET_HD uint64_t proxy_read_consumed(const ProxyHandle& h) {
  const uint64_t c = load_acquire<Scope::System>(&h.shared->consumed);
  if constexpr (S == Sharing::Exclusive) {
    store_relaxed<Scope::Thread>(&h.post->consumed_cache, c);  // one poster: no one else reads it
  } else {
    kinet::detail::atomic_ref_t<uint64_t, kScope<S>> r(h.post->consumed_cache);
    uint64_t cur = r.load(kinet::detail::mo::memory_order_relaxed);
    while (cur < c && !r.compare_exchange_weak(cur, c, kinet::detail::mo::memory_order_release,
                                               kinet::detail::mo::memory_order_relaxed)) {
    }
  }
  return c;
}

// Posters waiting for space whose first slot lies this close to the cached
// consumer index (+ ring size) read the proxy's index themselves; the others
// wait for them to raise the cache. The first waiter (lowest index) is always
// within the window: every slot before it went to a poster that saw space,
// through the cache or through a read that raised the cache first.
inline constexpr uint64_t kProxyRefreshWindow = 64;

// Records the first device-side failure (ProxyPostState::local_error).
template <Sharing S> KINET_HD Status proxy_fail(const ProxyHandle& h, Status st) {
  int32_t none = 0;
  cas_relaxed<kScope<S>>(&h.post->local_error, none, static_cast<int32_t>(st));
  return st;
}

template <Sharing S> KINET_HD bool proxy_handle_ok(const ProxyHandle& h) {
#ifndef NDEBUG
  if (h.abi == kProxyHandleAbi) return true;
  if (h.post) {
    store_relaxed<Scope::System>(&h.post->bad_abi, h.abi);
    proxy_fail<S>(h, Status::InvalidArgument);
  }
  return false;
#else
  (void)h;
  return true;
#endif
}

// Takes n indices from the reservation counter.
template <Sharing S> KINET_HD uint64_t proxy_take(const ProxyHandle& h, uint32_t n) {
  uint64_t* r = &h.post->reserved;
  if constexpr (S == Sharing::Exclusive) {
    const uint64_t f = load_relaxed<Scope::Thread>(r);
    store_relaxed<Scope::Thread>(r, f + n);
    return f;
  } else {
#if KINET_WARP_AGGREGATE
    // Lanes of this warp posting to the same channel now: one atomic.
    const unsigned g = __match_any_sync(__activemask(), reinterpret_cast<unsigned long long>(h.post));
    return group_fetch_add<kScope<S>>(r, g, n);
#else
    return fetch_add_relaxed<kScope<S>>(r, uint64_t{n});
#endif
  }
}

// Waits (bounded) until the indices [first, end) fit in the ring.
template <Sharing S> KINET_HD Status proxy_wait_space(const ProxyHandle& h, uint64_t first, uint64_t end) {
  const uint64_t n = h.size();
  uint64_t c = load_acquire<kScope<S>>(&h.post->consumed_cache);
  if (end <= c + n) return Status::Ok;
  const uint64_t t0 = now_ns();
  for (;;) {
    if (S == Sharing::Exclusive || first < c + n + kProxyRefreshWindow) {
      c = proxy_read_consumed<S>(h);
      if (end <= c + n) return Status::Ok;
    }
    if (now_ns() - t0 > h.timeout_ns) {
      // The reserved slots will never be published: the proxy would wait at
      // them forever. Later posts get QpBroken.
      store_relaxed<kScope<S>>(&h.post->broken, 1u);
      return proxy_fail<S>(h, Status::TimeoutSqSpace);
    }
    spin_pause();
    c = load_acquire<kScope<S>>(&h.post->consumed_cache);
    if (end <= c + n) return Status::Ok;
  }
}

template <Sharing S> KINET_HD Status proxy_post_one(const ProxyHandle& h, const ProxyDesc& d, Ticket* t) {
  uint64_t idx = 0;
  const Status st = reserve<S>(h, 1, &idx);
  if (st != Status::Ok) return st;
  publish<S>(h, idx, d);
  if (t) *t = Ticket{idx + 1, idx};
  return Status::Ok;
}

}  // namespace detail

template <Sharing S> KINET_HD Status reserve(const ProxyHandle& h, uint32_t n, uint64_t* first) {
  if (!detail::proxy_handle_ok<S>(h)) return Status::InvalidArgument;
  if (n == 0 || n > h.size()) return Status::InvalidArgument;
  if (load_relaxed<kScope<S>>(&h.post->broken)) return detail::proxy_fail<S>(h, Status::QpBroken);
  const uint64_t f = detail::proxy_take<S>(h, n);
  *first = f;
  return detail::proxy_wait_space<S>(h, f, f + n);
}

template <Sharing S> KINET_HD Status try_reserve(const ProxyHandle& h, uint32_t n, uint64_t* first) {
  if (!detail::proxy_handle_ok<S>(h)) return Status::InvalidArgument;
  if (n == 0 || n > h.size()) return Status::InvalidArgument;
  if (load_relaxed<kScope<S>>(&h.post->broken)) return detail::proxy_fail<S>(h, Status::QpBroken);
  uint64_t* r = &h.post->reserved;
  uint64_t f = load_relaxed<kScope<S>>(r);
  for (;;) {
    if (f + n > load_acquire<kScope<S>>(&h.post->consumed_cache) + h.size() &&
        f + n > detail::proxy_read_consumed<S>(h) + h.size())
      return Status::NoSpace;
    if constexpr (S == Sharing::Exclusive) {
      store_relaxed<Scope::Thread>(r, f + n);
      break;
    } else if (cas_relaxed<kScope<S>>(r, f, f + n)) {
      break;
    }
  }
  *first = f;
  return Status::Ok;
}

template <Sharing S> KINET_HD void publish(const ProxyHandle& h, uint64_t idx, const ProxyDesc& d) {
  ProxyDesc* s = &h.ring[idx & (h.size() - 1)];
#if KINET_ON_DEVICE
  // Three 16-byte stores (the body is 16-byte aligned): fewer, larger writes
  // over PCIe than six 8-byte ones.
  ulonglong2* b = reinterpret_cast<ulonglong2*>(&s->laddr);
  b[0] = make_ulonglong2(d.laddr, d.raddr);
  b[1] = make_ulonglong2(d.len, d.arg);
  b[2] = make_ulonglong2(d.sig_raddr, d.keys);
#else
  s->laddr = d.laddr;
  s->raddr = d.raddr;
  s->len = d.len;
  s->arg = d.arg;
  s->sig_raddr = d.sig_raddr;
  s->keys = d.keys;
#endif
  const uint64_t v = detail::proxy_valid_bit(h.log_n, idx);
  // The body above, then the header, for the proxy thread (system scope: it
  // reads host memory that this GPU writes over PCIe).
  store_release_pair<Scope::System>(&s->h0, (d.h0 & ~kProxyValid) | v, (d.h1 & ~kProxyValid) | v);
}

KINET_HD ProxyDesc make_put(const void* src, Lkey lkey, uint64_t raddr, Rkey rkey, uint64_t bytes, uint32_t flags) {
  return ProxyDesc{detail::proxy_h0(ProxyOp::Put, flags), lkey.be, reinterpret_cast<uint64_t>(src), raddr, bytes,
                   0, 0, rkey.be};
}
KINET_HD ProxyDesc make_get(void* dst, Lkey lkey, uint64_t raddr, Rkey rkey, uint64_t bytes, uint32_t flags) {
  return ProxyDesc{detail::proxy_h0(ProxyOp::Get, flags), lkey.be, reinterpret_cast<uint64_t>(dst), raddr, bytes,
                   0, 0, rkey.be};
}
KINET_HD ProxyDesc make_fetch_add(uint64_t* result, Lkey lkey, uint64_t raddr, Rkey rkey, uint64_t add,
                                  uint32_t flags) {
  return ProxyDesc{detail::proxy_h0(ProxyOp::FetchAdd, flags), lkey.be, reinterpret_cast<uint64_t>(result), raddr,
                   add, 0, 0, rkey.be};
}
KINET_HD ProxyDesc make_compare_swap(uint64_t* result, Lkey lkey, uint64_t raddr, Rkey rkey, uint64_t compare,
                                     uint64_t swap, uint32_t flags) {
  return ProxyDesc{detail::proxy_h0(ProxyOp::CompareSwap, flags), lkey.be, reinterpret_cast<uint64_t>(result),
                   raddr, compare, swap, 0, rkey.be};
}
KINET_HD ProxyDesc make_nop(uint32_t flags) { return ProxyDesc{detail::proxy_h0(ProxyOp::Nop, flags), 0, 0, 0, 0, 0, 0, 0}; }

template <Sharing S> KINET_HD Status test(const ProxyHandle& h, Ticket t) {
  if (!detail::proxy_handle_ok<S>(h)) return Status::InvalidArgument;
  // One read in the common case (a healthy, open channel).
  const uint64_t w = load_acquire<Scope::System>(&h.shared->completed);
  const uint64_t done = w & kProxyDoneIndex;
  if (!(w & (kProxyDoneError | kProxyDoneClosed))) return done >= t.idx ? Status::Ok : Status::Pending;
  if (w & kProxyDoneError) {
    // error_* were written before the release of the word that carries the bit.
    const int32_t es = load_relaxed<Scope::System>(&h.shared->error_status);
    const uint64_t ei = load_relaxed<Scope::System>(&h.shared->error_index);
    if (ei < t.idx && (done >= t.idx || (w & kProxyDoneClosed)))
      return ei >= t.first ? static_cast<Status>(es) : Status::WrFlushed;
  }
  if (done >= t.idx) return Status::Ok;
  return (w & kProxyDoneClosed) ? Status::WrFlushed : Status::Pending;
}

template <Sharing S> KINET_HD Status wait(const ProxyHandle& h, Ticket t) {
  Status st = test<S>(h, t);
  if (st != Status::Pending) return st;
  const uint64_t t0 = now_ns();
  for (;;) {
    st = test<S>(h, t);
    if (st != Status::Pending) return st;
    if (now_ns() - t0 > h.timeout_ns) return detail::proxy_fail<S>(h, Status::TimeoutCompletion);
    spin_pause();
  }
}

template <Sharing S> KINET_HD Status quiet(const ProxyHandle& h) {
  if (!detail::proxy_handle_ok<S>(h)) return Status::InvalidArgument;
  const uint64_t r = load_relaxed<kScope<S>>(&h.post->reserved);
  if (r == 0) return Status::Ok;
  return wait<S>(h, Ticket{r, r - 1});
}

template <Sharing S> KINET_HD Status put(const ProxyHandle& h, const void* src, Lkey lkey, uint64_t raddr, Rkey rkey,
                                         size_t bytes, uint32_t flags, Ticket* t) {
  if (bytes == 0 || (flags & ~detail::kProxyKnownFlags)) return Status::InvalidArgument;
  return detail::proxy_post_one<S>(h, make_put(src, lkey, raddr, rkey, bytes, flags), t);
}
template <Sharing S> KINET_HD Status get(const ProxyHandle& h, void* dst, Lkey lkey, uint64_t raddr, Rkey rkey,
                                         size_t bytes, uint32_t flags, Ticket* t) {
  if (bytes == 0 || (flags & ~detail::kProxyKnownFlags)) return Status::InvalidArgument;
  return detail::proxy_post_one<S>(h, make_get(dst, lkey, raddr, rkey, bytes, flags), t);
}
template <Sharing S> KINET_HD Status fetch_add(const ProxyHandle& h, uint64_t* result, Lkey lkey, uint64_t raddr,
                                               Rkey rkey, uint64_t add, uint32_t flags, Ticket* t) {
  if (flags & ~detail::kProxyKnownFlags) return Status::InvalidArgument;
  return detail::proxy_post_one<S>(h, make_fetch_add(result, lkey, raddr, rkey, add, flags), t);
}
template <Sharing S> KINET_HD Status compare_swap(const ProxyHandle& h, uint64_t* result, Lkey lkey, uint64_t raddr,
                                                  Rkey rkey, uint64_t compare, uint64_t swap, uint32_t flags,
                                                  Ticket* t) {
  if (flags & ~detail::kProxyKnownFlags) return Status::InvalidArgument;
  return detail::proxy_post_one<S>(h, make_compare_swap(result, lkey, raddr, rkey, compare, swap, flags), t);
}
template <Sharing S> KINET_HD Status put_signal(const ProxyHandle& h, const void* src, Lkey lkey, uint64_t raddr,
                                                Rkey rkey, size_t bytes, uint64_t sig_raddr, Rkey sig_rkey,
                                                uint64_t add, uint64_t* scratch, Lkey scratch_lkey, uint32_t flags,
                                                Ticket* t) {
  (void)scratch;
  (void)scratch_lkey;
  if (flags & ~detail::kProxyKnownFlags) return Status::InvalidArgument;
  ProxyDesc d = make_put(src, lkey, raddr, rkey, bytes, flags);
  d.h0 = detail::proxy_h0(ProxyOp::PutSignal, flags, 1 /* SignalOp::Add */);
  d.arg = add;
  d.sig_raddr = sig_raddr;
  d.keys |= uint64_t{sig_rkey.be} << 32;
  return detail::proxy_post_one<S>(h, d, t);
}
template <Sharing S> KINET_HD Status nop(const ProxyHandle& h, uint32_t flags, Ticket* t) {
  if (flags & ~detail::kProxyKnownFlags) return Status::InvalidArgument;
  return detail::proxy_post_one<S>(h, make_nop(flags), t);
}

// ---------------------------------------------------------------------------
// Cooperative variants (names of coop.cuh, overloaded on ProxyHandle): ONE
// reservation for the group, each thread writes and publishes its own slot
// (slots need no in-order publish). All threads get the same status and the
// ticket of the whole group's range. Any sharing mode; Exclusive: only this
// warp / CTA posts to the channel. Must be called by all active lanes (warp)
// or all threads (CTA); group size <= h.size(). bytes == 0 in any lane:
// InvalidArgument for the group, nothing posted.
#if defined(__CUDACC__)
template <Sharing S, class Make>
__device__ Status warp_post(const ProxyHandle& h, uint32_t flags, Ticket* t, Make make) {
  const unsigned mask = __activemask();
  unsigned lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  const uint32_t rank = __popc(mask & ((1u << lane) - 1u));
  const uint32_t n = __popc(mask);
  const int leader = __ffs(mask) - 1;
  uint64_t first = 0;
  int st = 0;
  if (__any_sync(mask, (flags & ~detail::kProxyKnownFlags) != 0)) return Status::InvalidArgument;
  if (rank == 0) {
    // The leader alone: reserve<S> must not aggregate with itself across lanes.
    if (!detail::proxy_handle_ok<S>(h) || n > h.size()) st = static_cast<int>(Status::InvalidArgument);
    else if (load_relaxed<kScope<S>>(&h.post->broken)) st = static_cast<int>(detail::proxy_fail<S>(h, Status::QpBroken));
    else {
      first = S == Sharing::Exclusive ? detail::proxy_take<S>(h, n) : fetch_add_relaxed<kScope<S>>(&h.post->reserved, uint64_t{n});
      st = static_cast<int>(detail::proxy_wait_space<S>(h, first, first + n));
    }
  }
  st = __shfl_sync(mask, st, leader);
  if (st != 0) return static_cast<Status>(st);
  first = __shfl_sync(mask, first, leader);
  publish<S>(h, first + rank, make(rank == n - 1 ? flags : (flags & ~kSignal)));
  if (t) *t = Ticket{first + n, first};
  return Status::Ok;
}

template <Sharing S, class Make>
__device__ Status cta_post(const ProxyHandle& h, uint32_t flags, Ticket* t, Make make) {
  __shared__ uint64_t s_first;
  __shared__ int s_status;
  const uint32_t n = blockDim.x * blockDim.y * blockDim.z;
  const uint32_t rank = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  if (rank == 0) {
    int st = 0;
    if (!detail::proxy_handle_ok<S>(h) || n > h.size() || (flags & ~detail::kProxyKnownFlags))
      st = static_cast<int>(Status::InvalidArgument);
    else if (load_relaxed<kScope<S>>(&h.post->broken)) st = static_cast<int>(detail::proxy_fail<S>(h, Status::QpBroken));
    else {
      uint64_t f = S == Sharing::Exclusive ? detail::proxy_take<S>(h, n)
                                            : fetch_add_relaxed<kScope<S>>(&h.post->reserved, uint64_t{n});
      s_first = f;
      st = static_cast<int>(detail::proxy_wait_space<S>(h, f, f + n));
    }
    s_status = st;
  }
  __syncthreads();
  const int st = s_status;
  const uint64_t first = s_first;
  __syncthreads();  // s_* may be reused by the next call
  if (st != 0) return static_cast<Status>(st);
  publish<S>(h, first + rank, make(rank == n - 1 ? flags : (flags & ~kSignal)));
  if (t) *t = Ticket{first + n, first};
  return Status::Ok;
}

template <Sharing S>
__device__ Status warp_put(const ProxyHandle& h, const void* src, Lkey lkey, uint64_t raddr, Rkey rkey, uint32_t bytes,
                           uint32_t flags = 0, Ticket* t = nullptr) {
  if (__any_sync(__activemask(), bytes == 0)) return Status::InvalidArgument;
  return warp_post<S>(h, flags, t, [&](uint32_t f) { return make_put(src, lkey, raddr, rkey, bytes, f); });
}
template <Sharing S>
__device__ Status warp_get(const ProxyHandle& h, void* dst, Lkey lkey, uint64_t raddr, Rkey rkey, uint32_t bytes,
                           uint32_t flags = 0, Ticket* t = nullptr) {
  if (__any_sync(__activemask(), bytes == 0)) return Status::InvalidArgument;
  return warp_post<S>(h, flags, t, [&](uint32_t f) { return make_get(dst, lkey, raddr, rkey, bytes, f); });
}
template <Sharing S>
__device__ Status warp_fetch_add(const ProxyHandle& h, uint64_t* result, Lkey lkey, uint64_t raddr, Rkey rkey,
                                 uint64_t add, uint32_t flags = 0, Ticket* t = nullptr) {
  return warp_post<S>(h, flags, t, [&](uint32_t f) { return make_fetch_add(result, lkey, raddr, rkey, add, f); });
}
template <Sharing S>
__device__ Status cta_put(const ProxyHandle& h, const void* src, Lkey lkey, uint64_t raddr, Rkey rkey, uint32_t bytes,
                          uint32_t flags = 0, Ticket* t = nullptr) {
  if (__syncthreads_or(bytes == 0)) return Status::InvalidArgument;
  return cta_post<S>(h, flags, t, [&](uint32_t f) { return make_put(src, lkey, raddr, rkey, bytes, f); });
}
template <Sharing S>
__device__ Status cta_get(const ProxyHandle& h, void* dst, Lkey lkey, uint64_t raddr, Rkey rkey, uint32_t bytes,
                          uint32_t flags = 0, Ticket* t = nullptr) {
  if (__syncthreads_or(bytes == 0)) return Status::InvalidArgument;
  return cta_post<S>(h, flags, t, [&](uint32_t f) { return make_get(dst, lkey, raddr, rkey, bytes, f); });
}
#endif  // __CUDACC__

}  // namespace kinet::dev
