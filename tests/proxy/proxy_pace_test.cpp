// kinet proxy — the proxy thread's fast paths keep the documented semantics:
// a nop completes in ring order behind operations in flight; the completed
// word's flag bits (error, closed) give each ticket its status; posters
// waiting beyond the refresh window of the consumer index still progress; a
// backlog of nops does not keep the thread from polling its transport.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "proxy_rig.hpp"

namespace kinet::test {
namespace {
using dev::Sharing;
using dev::Ticket;

TEST(ProxyPace, NopCompletesOnlyAfterEarlierOperations) {
  ProxyRig r;
  ProxyChannel& ch = r.channel();
  const dev::ProxyHandle h = ch.handle();
  Ticket n0, p, n1, n2;
  // Nothing pending before it: done at once.
  ASSERT_EQ(dev::nop<X>(h, 0, &n0), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, n0), Status::Ok);
  r.t.set_mode(FakeTransport::Mode::BlackHole);
  ASSERT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 8, 0, &p), Status::Ok);
  ASSERT_EQ(dev::nop<X>(h, 0, &n1), Status::Ok);
  ASSERT_EQ(dev::nop<X>(h, dev::kSignal, &n2), Status::Ok);
  ASSERT_TRUE(eventually([&] { return load_acquire<Scope::System>(&h.shared->consumed) == 4; }));
  const uint64_t p0 = r.t.polls();
  ASSERT_TRUE(eventually([&] { return r.t.polls() > p0 + 200; }));
  EXPECT_EQ(dev::test<X>(h, n1), Status::Pending);  // behind the put in flight
  EXPECT_EQ(dev::test<X>(h, n2), Status::Pending);
  EXPECT_EQ(ch.completed(), 1u);
  r.t.set_mode(FakeTransport::Mode::Normal);
  EXPECT_EQ(dev::wait<X>(h, n2), Status::Ok);
  EXPECT_EQ(dev::test<X>(h, p), Status::Ok);
  EXPECT_EQ(ch.completed(), 4u);
}

// The completed word carries kProxyDoneError once the first failure is
// passed and kProxyDoneClosed after stop(); ProxyChannel::completed() masks
// them; each ticket keeps its own status.
TEST(ProxyPace, FailureThenStopGiveEachTicketItsStatus) {
  ProxyRig r;
  ProxyChannel& ch = r.channel();
  const dev::ProxyHandle h = ch.handle();
  Ticket ok, bad, flushed, late;
  ASSERT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 8, 0, &ok), Status::Ok);
  dev::ProxyDesc d = dev::make_nop(0);
  d.h0 |= uint64_t{1} << 30;  // reserved bit
  ASSERT_EQ(post_raw(h, d, &bad), Status::Ok);
  ASSERT_EQ(dev::nop<X>(h, 0, &flushed), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, flushed), Status::WrFlushed);
  EXPECT_EQ(dev::test<X>(h, ok), Status::Ok);
  EXPECT_EQ(dev::test<X>(h, bad), Status::InvalidArgument);
  const uint64_t w = load_acquire<Scope::System>(&h.shared->completed);
  EXPECT_EQ(w, 3u | dev::kProxyDoneError);
  EXPECT_EQ(ch.completed(), 3u);
  r.proxy->stop();
  EXPECT_EQ(load_acquire<Scope::System>(&h.shared->completed), 3u | dev::kProxyDoneError | dev::kProxyDoneClosed);
  EXPECT_EQ(h.shared->closed, 1u);
  EXPECT_EQ(ch.completed(), 3u);
  EXPECT_EQ(dev::test<X>(h, ok), Status::Ok);
  EXPECT_EQ(dev::test<X>(h, bad), Status::InvalidArgument);
  EXPECT_EQ(dev::test<X>(h, Ticket{3, 0}), Status::InvalidArgument);  // a range holding the failure
  ASSERT_EQ(dev::nop<X>(h, 0, &late), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, late), Status::WrFlushed);
  EXPECT_EQ(ch.status(), Status::InvalidArgument);
}

// Malformed nops take the checked path, not the fast one; well-formed flags pass.
TEST(ProxyPace, MalformedNopsAreRefused) {
  ProxyRig r;
  struct Case {
    uint64_t h0_or, h1_or;
    Status want;
    const char* reason;
  };
  const Case cases[] = {
      {8ull << 8, 0, Status::InvalidArgument, "unknown flag bits 0x8"},
      {1ull << 16, 0, Status::InvalidArgument, "nop: signal operation 1"},
      {1ull << 24, 0, Status::InvalidArgument, "reserved header bits"},
      {0, 1ull << 32, Status::InvalidArgument, "reserved header bits"},
      {0, 1ull << 62, Status::InvalidArgument, "reserved header bits"},
      {uint64_t{dev::kSignal | dev::kNoDoorbell | dev::kFence} << 8, 0xffffffffull, Status::Ok, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    ProxyChannel& ch = r.channel(rig_channel_config(8));
    dev::ProxyDesc d = dev::make_nop(0);
    d.h0 |= c.h0_or;
    d.h1 |= c.h1_or;
    Ticket t;
    ASSERT_EQ(post_raw(ch.handle(), d, &t), Status::Ok);
    EXPECT_EQ(dev::wait<X>(ch.handle(), t), c.want);
    EXPECT_NE(ch.last_error().find(c.reason), std::string::npos) << ch.last_error();
  }
}

// Reservations larger than the refresh window, from several threads on one
// small ring: most waiters sit beyond the window and rely on the others to
// raise the cached consumer index. None may time out.
TEST(ProxyPace, WaitersBeyondTheRefreshWindowProgress) {
  ProxyRig r;
  ProxyChannel& ch = r.channel(rig_channel_config(256, 20000));
  const dev::ProxyHandle h = ch.handle();
  const int threads = test_threads(6);
  const uint32_t chunk = 200;  // > kProxyRefreshWindow: a waiter's `first` lies far past the cache
  static_assert(200 > dev::detail::kProxyRefreshWindow);
  const uint64_t rounds = scaled(40, 8);
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int k = 0; k < threads; ++k)
    ts.emplace_back([&] {
      for (uint64_t i = 0; i < rounds; ++i) {
        uint64_t first = 0;
        if (dev::reserve<Sharing::Gpu>(h, chunk, &first) != Status::Ok) {
          ++bad;
          return;
        }
        for (uint32_t j = 0; j < chunk; ++j) dev::publish<Sharing::Gpu>(h, first + j, dev::make_nop(0));
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0) << "poster error " << status_string(ch.poster_error());
  EXPECT_EQ(dev::quiet<Sharing::Gpu>(h), Status::Ok);
  EXPECT_EQ(ch.completed(), uint64_t{chunk} * rounds * threads);
  // The cache never runs ahead of the proxy.
  EXPECT_LE(h.post->consumed_cache, load_acquire<Scope::System>(&h.shared->consumed));
}

// batch = 1 makes every pass that finds a nop a backlog pass, in which the
// thread polls its transport only every kPollEvery (8) passes, not never: it
// still serves its peers and notices lost ones. The transport records how
// far the proxy had consumed at each poll: no gap may exceed 8 descriptors.
TEST(ProxyPace, NopBacklogStillPollsTheTransport) {
  std::atomic<uint64_t> last{0}, max_gap{0};  // before the rig: the hook outlives the proxy
  std::atomic<dev::ProxyShared*> watch{nullptr};
  ProxyConfig pc = rig_proxy_config();
  pc.batch = 1;
  ProxyRig r(1 << 16, 1 << 16, 4096, pc);
  r.t.set_on_poll([&] {
    dev::ProxyShared* s = watch.load(std::memory_order_acquire);
    if (!s) return;
    const uint64_t c = load_acquire<Scope::System>(&s->consumed);
    const uint64_t gap = c - last.load(std::memory_order_relaxed);
    if (gap > max_gap.load(std::memory_order_relaxed)) max_gap.store(gap, std::memory_order_relaxed);
    last.store(c, std::memory_order_relaxed);
  });
  const uint32_t n = 1u << 14;
  ProxyChannel& ch = r.channel(rig_channel_config(n));
  const dev::ProxyHandle h = ch.handle();
  watch.store(h.shared, std::memory_order_release);
  uint64_t first = 0;
  ASSERT_EQ(dev::reserve<X>(h, n, &first), Status::Ok);
  for (uint32_t i = 1; i < n; ++i) dev::publish<X>(h, first + i, dev::make_nop(0));
  dev::publish<X>(h, first, dev::make_nop(0));  // the proxy was waiting here: the backlog starts
  ASSERT_EQ(dev::wait<X>(h, Ticket{first + n, first}), Status::Ok);
  r.proxy->stop();  // no poll after this
  EXPECT_EQ(last.load(), n);
  EXPECT_LE(max_gap.load(), 8u) << "nops drained between two transport polls";
  EXPECT_GE(max_gap.load(), 2u);  // the backlog did skip polls
}

}  // namespace
}  // namespace kinet::test
