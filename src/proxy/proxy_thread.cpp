// kinet — the proxy thread's loop: take published descriptors in ring order,
// check them, hand them to the transport, publish completions in ring order.
#include "proxy/proxy_thread.hpp"

#include <chrono>
#include <cinttypes>
#include <cstdio>

#include "core/cpu_relax.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace kinet::proxy_detail {
namespace {
using dev::ProxyOp;

constexpr uint64_t kH0Reserved = (dev::kProxyValid - 1) & ~uint64_t{0xffffff};    // bits 24..62
constexpr uint64_t kH1Reserved = (dev::kProxyValid - 1) & ~uint64_t{0xffffffff};  // bits 32..62
// h0 bits a well-formed nop may have besides its opcode: the known flags.
constexpr uint64_t kNopFlags = uint64_t{dev::detail::kProxyKnownFlags} << 8;
// Passes that leave the transport alone while a backlog of operations that
// need none of it keeps the thread busy (see run()).
constexpr uint32_t kPollEvery = 8;
// Idle passes spun before cfg_.spin's clock is read; yields before sleeps.
constexpr uint32_t kSpinPasses = 64;
constexpr uint32_t kYieldPasses = 64;
const char* op_name(uint8_t op) {
  switch (static_cast<ProxyOp>(op)) {
    case ProxyOp::Nop: return "nop";
    case ProxyOp::Put: return "put";
    case ProxyOp::Get: return "get";
    case ProxyOp::FetchAdd: return "fetch_add";
    case ProxyOp::CompareSwap: return "compare_swap";
    case ProxyOp::PutSignal: return "put_signal";
  }
  return "unknown operation";
}

using text::hex;
}  // namespace

void Thread::add(ProxyChannel* c) {
  std::lock_guard<std::mutex> g(add_mu_);
  const size_t n = nchannels_.load(std::memory_order_relaxed);
  c->st_->local = static_cast<uint32_t>(n);
  channels_[n].store(c, std::memory_order_release);
  nchannels_.store(n + 1, std::memory_order_release);
}

void Thread::run() {
  using Clock = std::chrono::steady_clock;
  uint64_t idle = 0;       // passes in a row that found nothing to do
  uint32_t yields = 0, sleeps = 0;
  bool spinning = true;
  uint32_t unpolled = 0;   // passes in a row that left the transport alone
  Clock::time_point idle_since{};
  while (!stop_.load(std::memory_order_acquire)) {
    size_t work = 0;
    bool backlog = false;  // a channel had more published than one batch
    const size_t n = nchannels_.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) {
      const size_t k = drain(*channels_[i].load(std::memory_order_acquire));
      work += k;
      backlog |= k == cfg_.batch;
    }
    // The transport every pass, except while a backlog of descriptors that
    // need none of it (nops) keeps the thread busy and it holds none of our
    // operations: then every kPollEvery passes (it still serves its peers'
    // operations, the target role, and notices lost peers).
    if (!backlog || inflight_ != 0 || ++unpolled >= kPollEvery) {
      work += reap();
      unpolled = 0;
    }
    if (work) {
      idle = 0;
      spinning = true;
      yields = sleeps = 0;
      continue;
    }
    // Bounded backoff: poll flat out (a pause per pass) for cfg_.spin, so a
    // descriptor published meanwhile is seen within one pass; then yield;
    // then sleep, growing to max_sleep.
    if (idle++ == 0) idle_since = Clock::now();
    if (spinning) {
      if (idle < kSpinPasses || (idle & 15) != 0 || Clock::now() - idle_since < cfg_.spin) {
        cpu_relax();
        continue;
      }
      spinning = false;
    }
    if (yields < kYieldPasses || cfg_.max_sleep.count() <= 0) {
      ++yields;
      std::this_thread::yield();
      continue;
    }
    const uint32_t shift = sleeps < 6 ? sleeps++ : 6;
    std::this_thread::sleep_for(std::min<std::chrono::microseconds>(std::chrono::microseconds(1u << shift),
                                                                   cfg_.max_sleep));
  }
  // Teardown: no new descriptors; wait (bounded) for what the transport has.
  const size_t n = nchannels_.load(std::memory_order_acquire);
  auto busy = [&] {
    for (size_t i = 0; i < n; ++i)
      if (channels_[i].load(std::memory_order_relaxed)->st_->inflight) return true;
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + cfg_.drain_timeout;
  while (busy() && std::chrono::steady_clock::now() < deadline)
    if (!reap()) std::this_thread::yield();
  for (size_t i = 0; i < n; ++i) {
    ChannelState& s = *channels_[i].load(std::memory_order_relaxed)->st_;
    if (s.inflight)
      KINET_LOG(Warn, "proxy: channel %u (peer %u): %" PRIu64 " operations still in flight after %lld ms at teardown",
                s.id, s.peer, s.inflight, static_cast<long long>(cfg_.drain_timeout.count()));
    store_release<Scope::System>(&s.shared->closed, 1u);
    // The same news in the word posters poll (after closed: a poster seeing
    // the bit finds closed set).
    store_release<Scope::System>(&s.shared->completed, s.published | dev::kProxyDoneClosed |
                                                           (s.error_published ? dev::kProxyDoneError : 0));
  }
}

size_t Thread::drain(ProxyChannel& c) {
  ChannelState& s = *c.st_;
  const uint64_t size = uint64_t{1} << s.log_n;
  const uint64_t mask = size - 1;
  std::unique_lock<std::mutex> regions(proxy_->regions_mu_, std::defer_lock);
  size_t taken = 0;
  while (taken < cfg_.batch && s.head - s.completed < size) {
    dev::ProxyDesc* slot = &s.ring[s.head & mask];
    const uint64_t v = dev::detail::proxy_valid_bit(s.log_n, s.head);
    const uint64_t h0 = load_acquire<Scope::System>(&slot->h0);
    if ((h0 & dev::kProxyValid) != v) break;  // not published yet
    const uint64_t h1 = load_relaxed<Scope::System>(&slot->h1);
    if ((h1 & dev::kProxyValid) != v) break;  // torn header: its second word has not landed yet
    const size_t at = s.head & mask;
    int32_t st;
    if (s.failed) {
      st = static_cast<int32_t>(Status::WrFlushed);  // the error state: nothing more executes
    } else {
      if (((h0 >> 8) & dev::kFence) && s.inflight) break;  // after every earlier descriptor
      if ((h0 & ~dev::kProxyValid & ~kNopFlags) == static_cast<uint8_t>(ProxyOp::Nop) && !(h1 & kH1Reserved)) {
        st = 0;  // a well-formed nop: nothing to check further, nothing to execute
      } else {
        const dev::ProxyDesc d{h0, h1, slot->laddr, slot->raddr, slot->len, slot->arg, slot->sig_raddr, slot->keys};
        std::string why;
        const Status r = execute(c, s.head, d, regions, &why);
        if (r == Status::NoSpace) break;  // the transport is full: take it again on a later pass
        st = r == Status::Pending ? kInFlight : static_cast<int32_t>(r);
        if (st == kInFlight) {
          ++s.inflight;
          ++inflight_;
          s.ops[at] = static_cast<uint8_t>(h0);
        } else if (st != 0) {
          s.failed = true;
          s.reason[at] = std::move(why);
        }
      }
    }
    if (st == 0 && s.completed == s.head) {
      ++s.completed;  // done, and nothing before it is pending: no slot state needed
    } else {
      s.status[at] = st;
    }
    ++s.head;
    ++taken;
  }
  if (regions.owns_lock()) regions.unlock();
  if (taken) {
    // The slots were copied out: posters may reuse them.
    store_release<Scope::System>(&s.shared->consumed, s.head);
    advance(s);
  }
  return taken;
}

Status Thread::execute(ProxyChannel& c, uint64_t idx, const dev::ProxyDesc& d,
                       std::unique_lock<std::mutex>& regions, std::string* why) {
  ChannelState& s = *c.st_;
  const uint8_t op = static_cast<uint8_t>(d.h0);
  const uint32_t flags = static_cast<uint32_t>(d.h0 >> 8) & 0xffu;
  const uint8_t sig_op = static_cast<uint8_t>(d.h0 >> 16);
  const uint32_t lkey = static_cast<uint32_t>(d.h1);
  const uint32_t rkey = static_cast<uint32_t>(d.keys);
  const uint32_t sig_rkey = static_cast<uint32_t>(d.keys >> 32);
  auto invalid = [&](const std::string& w) {
    *why = w;
    return Status::InvalidArgument;
  };
  if ((d.h0 & kH0Reserved) || (d.h1 & kH1Reserved))
    return invalid("reserved header bits are set (header " + hex(d.h0) + " " + hex(d.h1) + ")");
  if (flags & ~dev::detail::kProxyKnownFlags) return invalid("unknown flag bits " + hex(flags));
  if (op < static_cast<uint8_t>(ProxyOp::Nop) || op > static_cast<uint8_t>(ProxyOp::PutSignal))
    return invalid("unknown opcode " + hex(op));
  if (op == static_cast<uint8_t>(ProxyOp::PutSignal) ? (sig_op != 1 && sig_op != 2) : sig_op != 0)
    return invalid(std::string(op_name(op)) + ": signal operation " + std::to_string(sig_op) + " is not valid here");
  // The local buffer [addr, addr + len) inside lkey's region of this transport.
  auto local = [&](uint64_t addr, uint64_t len, bool write) {
    Proxy::RegionEntry e;
    if (!regions.owns_lock()) regions.lock();  // held to the end of the pass over this channel
    const bool found = proxy_->lookup(lkey, &e);
    const bool ours = found && e.transport == index_;
    const bool inside = ours && addr >= e.base && len <= e.len && addr - e.base <= e.len - len;
    if (inside && (!write || (e.access & kLocalWrite))) return true;
    // The message only on failure: this runs for every descriptor.
    const std::string what = std::string(op_name(op)) + ": local buffer [" + hex(addr) + ", +" +
                             std::to_string(len) + ") under lkey " + std::to_string(lkey);
    if (!found) *why = what + ": the lkey is not a region registered with this proxy";
    else if (!ours)
      *why = what + ": the region is registered with transport " + std::to_string(e.transport) +
             ", the channel uses transport " + std::to_string(index_);
    else if (!inside)
      *why = what + " is outside the region [" + hex(e.base) + ", +" + std::to_string(e.len) + ")";
    else *why = what + ": the region was registered without kLocalWrite";
    return false;
  };
  const uint64_t cookie = uint64_t{s.local} << 32 | static_cast<uint32_t>(idx);
  Status r = Status::Ok;
  switch (static_cast<ProxyOp>(op)) {
    case ProxyOp::Nop: return Status::Ok;
    case ProxyOp::Put:
      if (d.len == 0) return invalid("put: length 0");
      if (!local(d.laddr, d.len, false)) return Status::LocalProtection;
      r = t_->put(s.peer, reinterpret_cast<const void*>(d.laddr), d.len, rkey, d.raddr, cookie);
      break;
    case ProxyOp::Get:
      if (d.len == 0) return invalid("get: length 0");
      if (!local(d.laddr, d.len, true)) return Status::LocalProtection;
      r = t_->get(s.peer, reinterpret_cast<void*>(d.laddr), d.len, rkey, d.raddr, cookie);
      break;
    case ProxyOp::FetchAdd:
    case ProxyOp::CompareSwap:
      if (d.laddr % 8) return invalid(std::string(op_name(op)) + ": result address " + hex(d.laddr) +
                                      " is not 8-byte aligned");
      if (!local(d.laddr, 8, true)) return Status::LocalProtection;
      r = op == static_cast<uint8_t>(ProxyOp::FetchAdd)
              ? t_->fetch_add(s.peer, reinterpret_cast<uint64_t*>(d.laddr), rkey, d.raddr, d.len, cookie)
              : t_->compare_swap(s.peer, reinterpret_cast<uint64_t*>(d.laddr), rkey, d.raddr, d.len, d.arg, cookie);
      break;
    case ProxyOp::PutSignal:
      if (d.len == 0) {
        r = t_->signal(s.peer, sig_rkey, d.sig_raddr, static_cast<SignalOp>(sig_op), d.arg, cookie);
      } else {
        if (!local(d.laddr, d.len, false)) return Status::LocalProtection;
        r = t_->put_signal(s.peer, reinterpret_cast<const void*>(d.laddr), d.len, rkey, d.raddr, sig_rkey,
                           d.sig_raddr, static_cast<SignalOp>(sig_op), d.arg, cookie);
      }
      break;
  }
  if (r == Status::Ok) return Status::Pending;
  if (r == Status::NoSpace) return r;
  *why = std::string(op_name(op)) + " (rkey " + std::to_string(rkey) + ", raddr " + hex(d.raddr) +
         "): the transport refused it: " + status_string(r);
  return r;
}

size_t Thread::reap() {
  Completion comps[64];
  const size_t n = t_->poll(comps, 64);
  const size_t nch = nchannels_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    const Completion& k = comps[i];
    const size_t local = static_cast<size_t>(k.cookie >> 32);
    if (local >= nch) {
      KINET_LOG(Error, "proxy: transport %s returned a completion with foreign cookie %" PRIx64, t_->provider(),
                k.cookie);
      continue;
    }
    ChannelState& s = *channels_[local].load(std::memory_order_relaxed)->st_;
    // The full ring index: within 2^32 above what completed last.
    const uint64_t idx = s.completed + static_cast<uint32_t>(static_cast<uint32_t>(k.cookie) -
                                                             static_cast<uint32_t>(s.completed));
    const size_t at = idx & ((uint64_t{1} << s.log_n) - 1);
    if (idx >= s.head || s.status[at] != kInFlight) {
      KINET_LOG(Error, "proxy: channel %u: completion for descriptor %" PRIu64 " that is not in flight", s.id, idx);
      continue;
    }
    --s.inflight;
    --inflight_;
    std::string why;
    if (k.status != Status::Ok) {
      why = std::string(op_name(s.ops[at])) + " failed: " + status_string(k.status);
      const std::string pe = t_->peer_error(s.peer);
      if (!pe.empty()) why += " (" + pe + ")";
    }
    finish(s, idx, static_cast<int32_t>(k.status), std::move(why));
  }
  if (n) {
    for (size_t i = 0; i < nch; ++i) advance(*channels_[i].load(std::memory_order_relaxed)->st_);
  }
  return n;
}

void Thread::finish(ChannelState& s, uint64_t idx, int32_t st, std::string why) {
  const size_t at = idx & ((uint64_t{1} << s.log_n) - 1);
  s.status[at] = st;
  if (st != 0) {
    s.failed = true;
    s.reason[at] = std::move(why);
  }
}

void Thread::advance(ChannelState& s) {
  const uint64_t mask = (uint64_t{1} << s.log_n) - 1;
  uint64_t c = s.completed;
  while (c < s.head && s.status[c & mask] >= 0) {
    const int32_t st = s.status[c & mask];
    if (st != 0 && !s.error_published) {
      // The first failure in ring order: posters read error_* after acquiring
      // a completed word past it (it carries kProxyDoneError from then on).
      store_relaxed<Scope::System>(&s.shared->error_index, c);
      store_release<Scope::System>(&s.shared->error_status, st);
      s.error_published = true;
      std::string msg = "channel " + std::to_string(s.id) + " (peer " + std::to_string(s.peer) + ") descriptor " +
                        std::to_string(c) + ": " + s.reason[c & mask];
      KINET_LOG(Warn, "proxy: %s", msg.c_str());
      std::lock_guard<std::mutex> g(s.err_mu);
      s.last_error = std::move(msg);
    }
    s.status[c & mask] = kFree;
    if (st != 0) s.reason.erase(c & mask);
    ++c;
  }
  s.completed = c;
  if (s.completed != s.published) {
    // One release store per pass, however many descriptors it completed.
    s.published = s.completed;
    store_release<Scope::System>(&s.shared->completed, s.published | (s.error_published ? dev::kProxyDoneError : 0));
  }
}

}  // namespace kinet::proxy_detail
