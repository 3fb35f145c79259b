// kinet proxy — host threads post through the proxy (kinet/device/proxy.cuh)
// over an in-process transport: every operation byte for byte, more
// descriptors than ring slots, lap parity, many threads on one shared handle,
// ring order (signals after data, kFence), out-of-order publishing and torn
// headers.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "proxy_rig.hpp"

namespace kinet::test {
namespace {
using dev::Sharing;
using dev::Ticket;

// The data-path tests run over the fake transport and over "loop" (the
// message engine in this process).
class ProxyOver : public ::testing::TestWithParam<Backend> {
 protected:
  bool fake() const { return GetParam() == Backend::Fake; }
};
INSTANTIATE_TEST_SUITE_P(Backends, ProxyOver, ::testing::Values(Backend::Fake, Backend::Loop),
                         [](const auto& i) { return std::string(backend_name(i.param)); });

TEST_P(ProxyOver, EveryOperationByteForByte) {
  KINET_TEST_RNG(rng);
  ProxyRig r(1 << 16, 1 << 16, 4096, rig_proxy_config(), GetParam());
  ProxyChannel& ch = r.channel();
  const dev::ProxyHandle h = ch.handle();
  fill_random(rng, r.local.p(), 8192);
  fill_distinct(rng, r.remote.p(), r.local.p(), 8192);
  Ticket t;
  // put: 3000 bytes to remote+8
  ASSERT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a() + 8, r.rkey, 3000, 0, &t), Status::Ok);
  EXPECT_EQ(t.idx, 1u);
  EXPECT_EQ(t.first, 0u);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  EXPECT_EQ(std::memcmp(r.remote.p() + 8, r.local.p(), 3000), 0);
  // get: 2000 bytes from remote+4096 into local+4096
  std::vector<uint8_t> want(r.remote.p() + 4096, r.remote.p() + 6096);
  ASSERT_EQ(dev::get<X>(h, r.local.p() + 4096, r.lkey(), r.remote.a() + 4096, r.rkey, 2000, 0, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  EXPECT_EQ(std::memcmp(r.local.p() + 4096, want.data(), 2000), 0);
  // fetch_add, compare_swap (hit, then miss)
  const uint64_t w0 = random_u64(rng);
  *r.remote.u64(8192) = w0;
  ASSERT_EQ(dev::fetch_add<X>(h, r.local.u64(8192), r.lkey(), r.remote.a() + 8192, r.rkey, 5, 0, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  EXPECT_EQ(*r.local.u64(8192), w0);
  EXPECT_EQ(*r.remote.u64(8192), w0 + 5);
  ASSERT_EQ(dev::compare_swap<X>(h, r.local.u64(8200), r.lkey(), r.remote.a() + 8192, r.rkey, w0 + 5, 77, 0, &t),
            Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  EXPECT_EQ(*r.local.u64(8200), w0 + 5);
  EXPECT_EQ(*r.remote.u64(8192), 77u);
  ASSERT_EQ(dev::compare_swap<X>(h, r.local.u64(8208), r.lkey(), r.remote.a() + 8192, r.rkey, 1, 2, 0, &t),
            Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  EXPECT_EQ(*r.local.u64(8208), 77u);
  EXPECT_EQ(*r.remote.u64(8192), 77u);
  // put_signal: 500 bytes, then +3 on the signal word; and a signal alone (0 bytes)
  *r.remote.u64(8400) = 10;
  ASSERT_EQ(dev::put_signal<X>(h, r.local.p() + 100, r.lkey(), r.remote.a() + 5000, r.rkey, 500,
                               r.remote.a() + 8400, r.rkey, 3, nullptr, Lkey{0}, 0, &t),
            Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  EXPECT_EQ(*r.remote.u64(8400), 13u);
  EXPECT_EQ(std::memcmp(r.remote.p() + 5000, r.local.p() + 100, 500), 0);
  ASSERT_EQ(dev::put_signal<X>(h, nullptr, r.lkey(), 0, r.rkey, 0, r.remote.a() + 8400, r.rkey, 4, nullptr,
                               Lkey{0}, 0, &t),
            Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  EXPECT_EQ(*r.remote.u64(8400), 17u);
  // nop and quiet; flags accepted
  ASSERT_EQ(dev::nop<X>(h, dev::kSignal | dev::kNoDoorbell, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  ASSERT_EQ(dev::quiet<X>(h), Status::Ok);
  EXPECT_EQ(ch.completed(), 8u);
  EXPECT_EQ(ch.status(), Status::Ok);
  EXPECT_EQ(ch.last_error(), "");
  if (!fake()) return;
  const auto log = r.t.log();
  ASSERT_EQ(log.size(), 7u);  // the nop never reaches the transport
  EXPECT_EQ(std::string({log[0].op, log[1].op, log[2].op, log[3].op, log[4].op, log[5].op, log[6].op}), "pgfccSs");
}

// Device-side argument checks: nothing is reserved.
TEST(Proxy, DeviceApiRefusesBadArgumentsBeforeReserving) {
  ProxyRig r;
  const dev::ProxyHandle h = r.channel().handle();
  Ticket t{42, 41};
  EXPECT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 0, 0, &t), Status::InvalidArgument);
  EXPECT_EQ(dev::get<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 0, 0, &t), Status::InvalidArgument);
  EXPECT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 8, 1u << 3, &t), Status::InvalidArgument);
  EXPECT_EQ(dev::nop<X>(h, 0x80000000u, &t), Status::InvalidArgument);
  uint64_t first = 0;
  EXPECT_EQ(dev::reserve<X>(h, 0, &first), Status::InvalidArgument);
  EXPECT_EQ(dev::reserve<X>(h, h.size() + 1, &first), Status::InvalidArgument);
  EXPECT_EQ(dev::try_reserve<X>(h, 0, &first), Status::InvalidArgument);
  EXPECT_EQ(h.post->reserved, 0u);
  EXPECT_EQ(t.idx, 42u);  // untouched
  // n == size() is allowed
  ASSERT_EQ(dev::reserve<X>(h, h.size(), &first), Status::Ok);
  for (uint32_t i = 0; i < h.size(); ++i) dev::publish<X>(h, first + i, dev::make_nop(0));
  EXPECT_EQ(dev::quiet<X>(h), Status::Ok);
}

TEST(Proxy, HandleAbiIsChecked) {
#ifdef NDEBUG
  GTEST_SKIP() << "release build: the verbs check the abi word only in debug builds";
#else
  ProxyRig r;
  dev::ProxyHandle h = r.channel().handle();
  h.abi = dev::kQpHandleAbi;
  Ticket t;
  EXPECT_EQ(dev::nop<X>(h, 0, &t), Status::InvalidArgument);
  EXPECT_EQ(h.post->bad_abi, dev::kQpHandleAbi);
  EXPECT_EQ(h.post->local_error, static_cast<int32_t>(Status::InvalidArgument));
#endif
}

TEST_P(ProxyOver, MoreDescriptorsThanSlotsAndLapParity) {
  KINET_TEST_RNG(rng);
  ProxyRig r(1 << 16, 1 << 16, 4096, rig_proxy_config(), GetParam());
  ProxyChannel& ch = r.channel(rig_channel_config(8));
  const dev::ProxyHandle h = ch.handle();
  fill_random(rng, r.local.p(), 8192);
  // Lap 0: valid bit set in both header words of slot 0; lap 1: clear.
  Ticket t;
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(dev::put<X>(h, r.local.p() + 8 * i, r.lkey(), r.remote.a() + 8 * i, r.rkey, 8, 0, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  EXPECT_EQ(h.ring[0].h0 & dev::kProxyValid, dev::kProxyValid);
  EXPECT_EQ(h.ring[0].h1 & dev::kProxyValid, dev::kProxyValid);
  ASSERT_EQ(dev::put<X>(h, r.local.p() + 64, r.lkey(), r.remote.a() + 64, r.rkey, 8, 0, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  EXPECT_EQ(h.ring[0].h0 & dev::kProxyValid, 0u);
  EXPECT_EQ(h.ring[0].h1 & dev::kProxyValid, 0u);
  // Many laps without waiting in between: reservations wait for slots.
  const uint64_t n = scaled(1000, 100);
  for (uint64_t i = 9; i < n; ++i)
    ASSERT_EQ(dev::put<X>(h, r.local.p() + 8 * i, r.lkey(), r.remote.a() + 8 * i, r.rkey, 8, 0, &t), Status::Ok)
        << i;
  EXPECT_EQ(t.idx, n);
  ASSERT_EQ(dev::quiet<X>(h), Status::Ok);
  EXPECT_EQ(std::memcmp(r.remote.p(), r.local.p(), 8 * n), 0);
  EXPECT_EQ(ch.completed(), n);
}

TEST(Proxy, TransportFullIsRetriedNotLost) {
  KINET_TEST_RNG(rng);
  ProxyRig r(1 << 16, 1 << 16, /*capacity=*/2);
  const dev::ProxyHandle h = r.channel(rig_channel_config(32)).handle();
  fill_random(rng, r.local.p(), 4096);
  const uint64_t n = 300;
  for (uint64_t i = 0; i < n; ++i)
    ASSERT_EQ(dev::put<X>(h, r.local.p() + 8 * i, r.lkey(), r.remote.a() + 8 * i, r.rkey, 8), Status::Ok);
  ASSERT_EQ(dev::quiet<X>(h), Status::Ok);
  EXPECT_EQ(std::memcmp(r.remote.p(), r.local.p(), 8 * n), 0);
  EXPECT_GT(r.t.nospace(), 0u);  // the path under test was taken
  const auto log = r.t.log();
  ASSERT_EQ(log.size(), n);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(log[i].raddr, r.remote.a() + 8 * i) << "ring order broken at " << i;
}

template <Sharing S> void shared_handle_many_threads(Backend b) {
  KINET_TEST_RNG(rng);
  const int threads = test_threads(8);
  const uint64_t per = scaled(400, 40);
  ProxyRig r(threads * per * 8, threads * per * 8, 4096, rig_proxy_config(), b);
  ProxyChannel& ch = r.channel(rig_channel_config(16));
  const dev::ProxyHandle h = ch.handle();
  fill_random(rng, r.local.p(), r.local.n);
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int k = 0; k < threads; ++k)
    ts.emplace_back([&, k] {
      Ticket t;
      for (uint64_t i = 0; i < per; ++i) {
        const uint64_t off = (k * per + i) * 8;
        if (dev::put<S>(h, r.local.p() + off, r.lkey(), r.remote.a() + off, r.rkey, 8, 0, &t) != Status::Ok) ++bad;
      }
      if (dev::wait<S>(h, t) != Status::Ok) ++bad;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  ASSERT_EQ(dev::quiet<S>(h), Status::Ok);
  EXPECT_EQ(ch.completed(), threads * per);
  EXPECT_EQ(std::memcmp(r.remote.p(), r.local.p(), threads * per * 8), 0);
}
TEST_P(ProxyOver, ManyThreadsOneSharedHandleCta) { shared_handle_many_threads<Sharing::Cta>(GetParam()); }
TEST_P(ProxyOver, ManyThreadsOneSharedHandleGpu) { shared_handle_many_threads<Sharing::Gpu>(GetParam()); }

// The proxy hands a channel's operations to the transport in ring order: the
// signal of a put_signal goes after all earlier data (the transport's signal
// promise does the rest); a waiter that acquires the signal sees the data.
TEST_P(ProxyOver, SignalAfterEarlierDataInRingOrder) {
  KINET_TEST_RNG(rng);
  ProxyRig r(1 << 16, 1 << 16, 4096, rig_proxy_config(), GetParam());
  const dev::ProxyHandle h = r.channel().handle();
  fill_random(rng, r.local.p(), 4096);
  for (int i = 0; i < 20; ++i)
    ASSERT_EQ(dev::put<X>(h, r.local.p() + 100 * i, r.lkey(), r.remote.a() + 100 * i, r.rkey, 100), Status::Ok);
  ASSERT_EQ(dev::put_signal<X>(h, r.local.p() + 2000, r.lkey(), r.remote.a() + 2000, r.rkey, 100,
                               r.remote.a() + 8000, r.rkey, 1, nullptr, Lkey{0}),
            Status::Ok);
  uint64_t* sig = r.remote.u64(8000);
  if (fake()) {
    // A waiter on the signal alone (the fake applies it with a release store).
    ASSERT_TRUE(eventually([&] { return load_acquire<Scope::System>(sig) == 1; }));
    EXPECT_EQ(std::memcmp(r.remote.p(), r.local.p(), 2100), 0);
  }
  // loop: the engine writes the signal word with a plain copy, so a host
  // waiter has nothing to acquire; the completions order it instead.
  ASSERT_EQ(dev::quiet<X>(h), Status::Ok);
  EXPECT_EQ(load_acquire<Scope::System>(sig), 1u);
  EXPECT_EQ(std::memcmp(r.remote.p(), r.local.p(), 2100), 0);
  if (!fake()) return;
  const auto log = r.t.log();
  ASSERT_EQ(log.size(), 21u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(log[i].op, 'p');
  EXPECT_EQ(log[20].op, 'S');
  ASSERT_EQ(dev::quiet<X>(h), Status::Ok);
}

// kFence: not handed to the transport while an earlier operation is in flight.
TEST(Proxy, FenceWaitsForEarlierOperations) {
  ProxyRig r;
  const dev::ProxyHandle h = r.channel().handle();
  r.t.set_mode(FakeTransport::Mode::BlackHole);
  Ticket tg, tp, tn;
  ASSERT_EQ(dev::get<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 64, 0, &tg), Status::Ok);
  ASSERT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a() + 64, r.rkey, 64, dev::kFence, &tp), Status::Ok);
  ASSERT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a() + 128, r.rkey, 64, 0, &tn), Status::Ok);
  ASSERT_TRUE(eventually([&] { return r.t.log().size() == 1; }));
  // The proxy keeps polling: give it many passes to (wrongly) post the fenced one.
  const uint64_t p0 = r.t.polls();
  ASSERT_TRUE(eventually([&] { return r.t.polls() > p0 + 200; }));
  EXPECT_EQ(r.t.log().size(), 1u);
  EXPECT_EQ(dev::test<X>(h, tg), Status::Pending);
  r.t.set_mode(FakeTransport::Mode::Normal);
  ASSERT_EQ(dev::wait<X>(h, tn), Status::Ok);
  const auto log = r.t.log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].op, 'g');
  EXPECT_EQ(log[1].raddr, r.remote.a() + 64);
  EXPECT_EQ(log[2].raddr, r.remote.a() + 128);
}

// Slots may be published in any order; the proxy executes in ring order and
// waits at the first unpublished slot.
TEST(Proxy, OutOfOrderPublishExecutesInRingOrder) {
  ProxyRig r;
  ProxyChannel& ch = r.channel();
  const dev::ProxyHandle h = ch.handle();
  uint64_t first = 0;
  ASSERT_EQ(dev::reserve<X>(h, 2, &first), Status::Ok);
  dev::publish<X>(h, first + 1, dev::make_put(r.local.p(), r.lkey(), r.remote.a() + 8, r.rkey, 8, 0));
  const uint64_t p0 = r.t.polls();
  ASSERT_TRUE(eventually([&] { return r.t.polls() > p0 + 200; }));
  EXPECT_EQ(ch.completed(), 0u);
  EXPECT_EQ(r.t.log().size(), 0u);
  dev::publish<X>(h, first, dev::make_put(r.local.p(), r.lkey(), r.remote.a(), r.rkey, 8, 0));
  ASSERT_EQ(dev::wait<X>(h, Ticket{first + 2, first}), Status::Ok);
  const auto log = r.t.log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].raddr, r.remote.a());
  EXPECT_EQ(log[1].raddr, r.remote.a() + 8);
}

// A header whose second word has not landed (a torn 16-byte store, as a
// PCIe reader might see it) is not taken for a published descriptor; nor is
// a slot still holding the previous lap's descriptor.
TEST(Proxy, TornHeaderIsNotExecuted) {
  ProxyRig r;
  ProxyChannel& ch = r.channel(rig_channel_config(4));
  const dev::ProxyHandle h = ch.handle();
  uint64_t idx = 0;
  ASSERT_EQ(dev::reserve<X>(h, 1, &idx), Status::Ok);
  dev::ProxyDesc d = dev::make_put(r.local.p(), r.lkey(), r.remote.a(), r.rkey, 8, 0);
  dev::ProxyDesc* s = &h.ring[idx];
  s->laddr = d.laddr;
  s->raddr = d.raddr;
  s->len = d.len;
  s->keys = d.keys;
  store_relaxed<Scope::System>(&s->h1, d.h1);  // valid bit missing
  store_release<Scope::System>(&s->h0, d.h0 | dev::kProxyValid);
  const uint64_t p0 = r.t.polls();
  ASSERT_TRUE(eventually([&] { return r.t.polls() > p0 + 200; }));
  EXPECT_EQ(ch.completed(), 0u);
  EXPECT_EQ(r.t.log().size(), 0u);
  store_release<Scope::System>(&s->h1, d.h1 | dev::kProxyValid);
  ASSERT_EQ(dev::wait<X>(h, Ticket{idx + 1, idx}), Status::Ok);
  EXPECT_EQ(r.t.log().size(), 1u);
  // Lap 1 of slot 0 expects the valid bit clear: the old lap-0 header stays unexecuted.
  Ticket t;
  for (int i = 0; i < 3; ++i) ASSERT_EQ(dev::nop<X>(h, 0, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  ASSERT_EQ(dev::reserve<X>(h, 1, &idx), Status::Ok);
  EXPECT_EQ(idx, 4u);
  const uint64_t p1 = r.t.polls();
  ASSERT_TRUE(eventually([&] { return r.t.polls() > p1 + 200; }));
  EXPECT_EQ(ch.completed(), 4u);
  dev::publish<X>(h, idx, dev::make_nop(0));
  ASSERT_EQ(dev::wait<X>(h, Ticket{5, 4}), Status::Ok);
}

}  // namespace
}  // namespace kinet::test
