// kinet proxy — what goes wrong: malformed descriptors (each check at its
// edge), target-side rejections, a lost peer, a peer that never answers,
// teardown with operations in flight, configuration errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include "core/cuda_shim.hpp"
#include "proxy_rig.hpp"

namespace kinet::test {
namespace {
using dev::ProxyDesc;
using dev::Sharing;
using dev::Ticket;

struct Case {
  const char* name;
  std::function<ProxyDesc(ProxyRig&)> make;
  Status want;
  const char* reason;  // a substring of last_error()
};

// Each case on a fresh channel: its status, the flush of the next descriptor,
// the reason the host reads, nothing reaching the transport when the proxy
// refused it itself.
TEST(ProxyFault, MalformedDescriptorsCompleteWithAnErrorAndAReason) {
  ProxyRig r(4096, 4096);
  auto ro = r.proxy->register_memory(r.local.p() + 2048, 1024, kRemoteRead);  // no kLocalWrite
  const uint64_t L = r.local.a(), R = r.remote.a();
  auto put = [&](uint64_t laddr, uint64_t len) { return dev::make_put(reinterpret_cast<void*>(laddr), r.lkey(), R, r.rkey, len, 0); };
  const std::vector<Case> cases = {
      {"opcode 0", [&](ProxyRig&) { auto d = put(L, 8); d.h0 &= ~0xffull; return d; }, Status::InvalidArgument,
       "unknown opcode 0x0"},
      {"opcode 7", [&](ProxyRig&) { auto d = put(L, 8); d.h0 = (d.h0 & ~0xffull) | 7; return d; },
       Status::InvalidArgument, "unknown opcode 0x7"},
      {"opcode 255", [&](ProxyRig&) { auto d = put(L, 8); d.h0 |= 0xff; return d; }, Status::InvalidArgument,
       "unknown opcode 0xff"},
      {"flag bit 3", [&](ProxyRig&) { auto d = put(L, 8); d.h0 |= 8ull << 8; return d; }, Status::InvalidArgument,
       "unknown flag bits 0x8"},
      {"h0 bit 24", [&](ProxyRig&) { auto d = put(L, 8); d.h0 |= 1ull << 24; return d; }, Status::InvalidArgument,
       "reserved header bits"},
      {"h0 bit 62", [&](ProxyRig&) { auto d = put(L, 8); d.h0 |= 1ull << 62; return d; }, Status::InvalidArgument,
       "reserved header bits"},
      {"h1 bit 32", [&](ProxyRig&) { auto d = put(L, 8); d.h1 |= 1ull << 32; return d; }, Status::InvalidArgument,
       "reserved header bits"},
      {"signal op on a put", [&](ProxyRig&) { auto d = put(L, 8); d.h0 |= 1ull << 16; return d; },
       Status::InvalidArgument, "put: signal operation 1"},
      {"put_signal op 3",
       [&](ProxyRig&) { auto d = put(L, 8); d.h0 = (d.h0 & ~0xffffffull) | 6 | (3ull << 16); return d; },
       Status::InvalidArgument, "put_signal: signal operation 3"},
      {"put length 0", [&](ProxyRig&) { return put(L, 0); }, Status::InvalidArgument, "put: length 0"},
      {"get length 0",
       [&](ProxyRig&) { return dev::make_get(r.local.p(), r.lkey(), R, r.rkey, 0, 0); }, Status::InvalidArgument,
       "get: length 0"},
      {"lkey 0", [&](ProxyRig&) { auto d = put(L, 8); d.h1 = 0; return d; }, Status::LocalProtection,
       "not a region registered"},
      {"unknown lkey", [&](ProxyRig&) { auto d = put(L, 8); d.h1 = 999; return d; }, Status::LocalProtection,
       "lkey 999: the lkey is not a region registered"},
      {"one byte before the region", [&](ProxyRig&) { return put(L - 1, 8); }, Status::LocalProtection,
       "is outside the region"},
      {"one byte past the region", [&](ProxyRig&) { return put(L + 4096 - 7, 8); }, Status::LocalProtection,
       "is outside the region"},
      {"length past the region", [&](ProxyRig&) { return put(L, 4097); }, Status::LocalProtection,
       "is outside the region"},
      {"wrapping length", [&](ProxyRig&) { return put(L + 1, ~0ull); }, Status::LocalProtection,
       "is outside the region"},
      {"get into a region without kLocalWrite",
       [&](ProxyRig&) { return dev::make_get(r.local.p() + 2048, ro->lkey(), R, r.rkey, 8, 0); },
       Status::LocalProtection, "registered without kLocalWrite"},
      {"misaligned atomic result",
       [&](ProxyRig&) { return dev::make_fetch_add(reinterpret_cast<uint64_t*>(L + 4), r.lkey(), R, r.rkey, 1, 0); },
       Status::InvalidArgument, "is not 8-byte aligned"},
      {"atomic result past the region",
       [&](ProxyRig&) { return dev::make_fetch_add(reinterpret_cast<uint64_t*>(L + 4096), r.lkey(), R, r.rkey, 1, 0); },
       Status::LocalProtection, "is outside the region"},
      {"unknown rkey id", [&](ProxyRig&) { auto d = put(L, 8); d.keys = 77; return d; }, Status::InvalidArgument,
       "rkey 77, raddr"},
      {"remote range past the target region",
       [&](ProxyRig&) { auto d = put(L, 16); d.raddr = R + 4096 - 8; return d; }, Status::RemoteAccess,
       "put failed: remote access error"},
      {"misaligned remote atomic",
       [&](ProxyRig&) { auto d = dev::make_fetch_add(r.local.u64(0), r.lkey(), R + 4, r.rkey, 1, 0); return d; },
       Status::RemoteInvalidRequest, "fetch_add failed: remote invalid request"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ProxyChannel& ch = r.channel(rig_channel_config(8));
    const dev::ProxyHandle h = ch.handle();
    const size_t before = r.t.log().size();
    Ticket t1, t2;
    ASSERT_EQ(post_raw(h, c.make(r), &t1), Status::Ok);
    ASSERT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), R, r.rkey, 8, 0, &t2), Status::Ok);
    EXPECT_EQ(dev::wait<X>(h, t1), c.want);
    EXPECT_EQ(dev::wait<X>(h, t2), Status::WrFlushed);  // the channel is in the error state
    EXPECT_EQ(dev::quiet<X>(h), Status::WrFlushed);
    EXPECT_EQ(ch.status(), c.want);
    const std::string e = ch.last_error();
    EXPECT_NE(e.find(c.reason), std::string::npos) << e;
    EXPECT_NE(e.find("channel " + std::to_string(ch.id()) + " (peer 0) descriptor 0: "), std::string::npos) << e;
    // Refused by the proxy or the transport's post: nothing queued. Rejected
    // by the target: that operation, and the next one if the proxy had
    // already handed it over (it still ends WrFlushed, as on a QP).
    const bool refused = c.want == Status::InvalidArgument || c.want == Status::LocalProtection;
    if (refused) EXPECT_EQ(r.t.log().size() - before, 0u);
    else EXPECT_GE(r.t.log().size() - before, 1u);
  }
  // The exact edges that pass: last byte of the region, whole region.
  for (auto d : {put(L + 4096 - 8, 8), put(L, 4096)}) {
    ProxyChannel& ch = r.channel(rig_channel_config(8));
    Ticket t;
    ASSERT_EQ(post_raw(ch.handle(), d, &t), Status::Ok);
    EXPECT_EQ(dev::wait<X>(ch.handle(), t), Status::Ok) << ch.last_error();
  }
}

TEST(ProxyFault, DeregisteredLkeyIsRefused) {
  ProxyRig r;
  auto extra = r.proxy->register_memory(r.local.p(), 64, kAccessAll);
  const Lkey gone = extra->lkey();
  extra.reset();
  ProxyChannel& ch = r.channel();
  Ticket t;
  ASSERT_EQ(dev::put<X>(ch.handle(), r.local.p(), gone, r.remote.a(), r.rkey, 8, 0, &t), Status::Ok);
  EXPECT_EQ(dev::wait<X>(ch.handle(), t), Status::LocalProtection);
  EXPECT_NE(ch.last_error().find("not a region registered"), std::string::npos) << ch.last_error();
}

TEST(ProxyFault, RegionOfAnotherTransportIsRefused) {
  FakeTransport t0, t1;
  const PeerId p = t0.connect({1}, "self");
  t1.connect({1}, "self");
  Bytes b(4096);
  Proxy proxy({&t0, &t1}, rig_proxy_config());
  auto on1 = proxy.register_memory(b.p(), b.n, kAccessAll, MemoryKind::Host, 1);
  auto on0 = proxy.register_memory(b.p(), b.n, kAccessAll, MemoryKind::Host, 0);
  ProxyChannel& ch = proxy.channel(p, rig_channel_config());
  const Rkey rk = ch.import_key(on0->remote_key());
  Ticket t;
  ASSERT_EQ(dev::put<X>(ch.handle(), b.p(), on1->lkey(), b.a() + 8, rk, 8, 0, &t), Status::Ok);
  EXPECT_EQ(dev::wait<X>(ch.handle(), t), Status::LocalProtection);
  EXPECT_NE(ch.last_error().find("registered with transport 1, the channel uses transport 0"), std::string::npos)
      << ch.last_error();
}

TEST(ProxyFault, LostPeerEndsInTransportRetryExceededWithTheReason) {
  ProxyRig r;
  ProxyChannel& ch = r.channel();
  const dev::ProxyHandle h = ch.handle();
  Ticket t;
  ASSERT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 8, 0, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  r.t.set_mode(FakeTransport::Mode::PeerLost);
  ASSERT_EQ(dev::get<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 8, 0, &t), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, t), Status::TransportRetryExceeded);
  EXPECT_EQ(ch.status(), Status::TransportRetryExceeded);
  EXPECT_NE(ch.last_error().find("descriptor 1: get failed: transport retry counter exceeded"), std::string::npos)
      << ch.last_error();
  EXPECT_NE(ch.last_error().find("peer lost: the fake peer was killed"), std::string::npos) << ch.last_error();
}

// A peer that never answers: waits end in TimeoutCompletion within the
// handle's bound; once the ring is full, a reservation ends TimeoutSqSpace
// and the channel is broken (QpBroken), as a QP's would be.
TEST(ProxyFault, PeerThatNeverAnswersEndsInBoundedTimeouts) {
  ProxyConfig pc = rig_proxy_config();
  pc.drain_timeout = std::chrono::milliseconds(100);
  ProxyRig r(1 << 16, 1 << 16, 4096, pc);
  ProxyChannel& ch = r.channel(rig_channel_config(4, /*timeout_ms=*/200));
  const dev::ProxyHandle h = ch.handle();
  r.t.set_mode(FakeTransport::Mode::BlackHole);
  Ticket t;
  ASSERT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 8, 0, &t), Status::Ok);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(dev::wait<X>(h, t), Status::TimeoutCompletion);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(200));
  EXPECT_LT(took, std::chrono::milliseconds(20000));
  EXPECT_EQ(ch.poster_error(), Status::TimeoutCompletion);
  // The proxy took 4 (its window), the ring holds 4 more; the 9th waits and times out.
  for (int i = 1; i < 8; ++i) ASSERT_EQ(dev::nop<X>(h, 0, &t), Status::Ok) << i;
  EXPECT_EQ(dev::nop<X>(h, 0, &t), Status::TimeoutSqSpace);
  EXPECT_EQ(dev::nop<X>(h, 0, &t), Status::QpBroken);
  uint64_t first = 0;
  EXPECT_EQ(dev::try_reserve<X>(h, 1, &first), Status::QpBroken);
  EXPECT_EQ(ch.poster_error(), Status::TimeoutCompletion);  // the first failure stays
}

TEST(ProxyFault, TryReserveSaysNoSpaceWithoutWaiting) {
  ProxyRig r;
  const dev::ProxyHandle h = r.channel(rig_channel_config(4)).handle();
  r.t.set_mode(FakeTransport::Mode::BlackHole);
  Ticket t;
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 8, 0, &t), Status::Ok);
  // The proxy hands the four to the transport, then frees their slots
  // (consumed): only after both is there room for four more.
  ASSERT_TRUE(eventually([&] {
    return r.t.log().size() == 4 && __atomic_load_n(&h.shared->consumed, __ATOMIC_ACQUIRE) == 4;
  }));
  uint64_t first = 0;
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(dev::try_reserve<X>(h, 1, &first), Status::Ok);
    dev::publish<X>(h, first, dev::make_nop(0));
  }
  EXPECT_EQ(dev::try_reserve<X>(h, 1, &first), Status::NoSpace);
  EXPECT_EQ(h.post->reserved, 8u);
  r.t.set_mode(FakeTransport::Mode::Normal);
  EXPECT_EQ(dev::quiet<X>(h), Status::Ok);
}

// Teardown with operations in flight: bounded by drain_timeout; what did not
// complete ends WrFlushed, and so do descriptors published afterwards.
TEST(ProxyFault, StopWithOperationsInFlightIsBoundedAndFlushes) {
  ProxyConfig pc = rig_proxy_config();
  pc.drain_timeout = std::chrono::milliseconds(100);
  ProxyRig r(1 << 16, 1 << 16, 4096, pc);
  ProxyChannel& ch = r.channel();
  const dev::ProxyHandle h = ch.handle();
  Ticket ok, stuck, late;
  ASSERT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 8, 0, &ok), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, ok), Status::Ok);
  r.t.set_mode(FakeTransport::Mode::BlackHole);
  ASSERT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 8, 0, &stuck), Status::Ok);
  ASSERT_TRUE(eventually([&] { return r.t.log().size() == 2; }));
  const auto t0 = std::chrono::steady_clock::now();
  r.proxy->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20000));
  EXPECT_EQ(dev::test<X>(h, ok), Status::Ok);
  EXPECT_EQ(dev::test<X>(h, stuck), Status::WrFlushed);
  ASSERT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 8, 0, &late), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, late), Status::WrFlushed);
  r.proxy->stop();  // idempotent
}

// A channel asked for after stop() would be served by no thread (its posters
// would wait out their timeout): refused, naming why.
TEST(ProxyFault, ChannelAfterStopIsRefused) {
  ProxyRig r;
  r.proxy->stop();
  try {
    r.channel();
    FAIL() << "a channel was made after stop()";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("the proxy was stopped"), std::string::npos) << e.what();
  }
}

// drain_timeout = milliseconds::max() ("as long as it takes") still waits:
// now() + max overflowed to a deadline in the past (no wait at all).
TEST(ProxyFault, HugeDrainTimeoutStillDrains) {
  ProxyConfig pc = rig_proxy_config();
  pc.drain_timeout = std::chrono::milliseconds::max();
  ProxyRig r(1 << 16, 1 << 16, 4096, pc);
  const dev::ProxyHandle h = r.channel().handle();
  r.t.set_mode(FakeTransport::Mode::BlackHole);
  Ticket t;
  ASSERT_EQ(dev::put<X>(h, r.local.p(), r.lkey(), r.remote.a(), r.rkey, 8, 0, &t), Status::Ok);
  ASSERT_TRUE(eventually([&] { return r.t.log().size() == 1; }));
  std::thread peer([&] {  // the peer answers 200 ms into the teardown
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    r.t.set_mode(FakeTransport::Mode::Normal);
  });
  const auto t0 = std::chrono::steady_clock::now();
  r.proxy->stop();
  const auto waited = std::chrono::steady_clock::now() - t0;
  peer.join();
  EXPECT_GE(waited, std::chrono::milliseconds(150));
  EXPECT_EQ(dev::test<X>(h, t), Status::Ok) << "teardown did not wait for the operation in flight";
}

// Teardown drains what the transport completes in time.
TEST(ProxyFault, DestructionDrainsOperationsInFlight) {
  ProxyRig r;
  const dev::ProxyHandle h = r.channel().handle();
  for (int i = 0; i < 50; ++i)
    ASSERT_EQ(dev::put<X>(h, r.local.p() + 8 * i, r.lkey(), r.remote.a() + 8 * i, r.rkey, 8), Status::Ok);
  ASSERT_TRUE(eventually([&] { return load_acquire<Scope::System>(&h.shared->consumed) == 50; }));
  r.proxy->stop();
  EXPECT_EQ(r.t.outstanding(), 0u);
  EXPECT_EQ(dev::quiet<X>(h), Status::Ok);
}

TEST(ProxyFault, ConfigurationErrorsNameTheValue) {
  FakeTransport t;
  const PeerId p = t.connect({1}, "self");
  auto expect_throw = [](auto f, ErrorCode code, const char* what) {
    try {
      f();
      ADD_FAILURE() << "no exception; expected " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_throw([&] { Proxy x(std::vector<Transport*>{}); }, ErrorCode::InvalidArgument, "no transport");
  expect_throw([&] { Proxy x(std::vector<Transport*>{&t, nullptr}); }, ErrorCode::InvalidArgument,
               "transport 1 is null");
  expect_throw([&] { ProxyConfig c; c.batch = 0; Proxy x(t, c); }, ErrorCode::InvalidArgument, "batch = 0");
  expect_throw([&] { ProxyConfig c; c.batch = 65537; Proxy x(t, c); }, ErrorCode::InvalidArgument, "batch = 65537");
  expect_throw([&] { ProxyConfig c; c.cpus = "0,x"; Proxy x(t, c); }, ErrorCode::InvalidArgument,
               "ProxyConfig::cpus '0,x'");
  for (const char* bad : {"0,", ",0", "0,,1", "-1", "1234567"})
    expect_throw([&] { ProxyConfig c; c.cpus = bad; Proxy x(t, c); }, ErrorCode::InvalidArgument,
                 (std::string("'") + bad + "' is not a comma-separated list").c_str());
  {
    ProxyConfig c;
    c.cpus = "0";  // pinning to CPU 0 works on any machine
    Proxy x(t, c);
  }
  // $KINET_PROXY_CPUS when ProxyConfig::cpus is empty; the config wins over it.
  ::setenv("KINET_PROXY_CPUS", "0,zero", 1);
  expect_throw([&] { Proxy x(t); }, ErrorCode::InvalidArgument, "KINET_PROXY_CPUS '0,zero'");
  {
    ProxyConfig c;
    c.cpus = "0";
    Proxy x(t, c);
  }
  ::unsetenv("KINET_PROXY_CPUS");
  Proxy proxy(t, rig_proxy_config());
  for (uint32_t slots : {0u, 1u, 3u, 100u, (1u << 20) + 1, 1u << 21}) {
    ProxyChannelConfig c = rig_channel_config(slots);
    expect_throw([&] { proxy.channel(p, c); }, ErrorCode::InvalidArgument,
                 ("slots = " + std::to_string(slots) + " is not a power of two").c_str());
  }
  EXPECT_EQ(proxy.channel(p, rig_channel_config(2)).handle().size(), 2u);
  EXPECT_EQ(proxy.channel(p, rig_channel_config(1u << 20)).handle().size(), 1u << 20);
  ProxyChannelConfig c = rig_channel_config();
  c.transport = 1;
  expect_throw([&] { proxy.channel(p, c); }, ErrorCode::InvalidArgument, "transport 1 does not exist");
  Bytes b(64);
  expect_throw([&] { proxy.register_memory(b.p(), 64, kAccessAll, MemoryKind::Host, 5); },
               ErrorCode::InvalidArgument, "transport 5 does not exist");
  if (!cuda::available()) {
    c.transport = 0;
    c.posters = Posters::Gpu;
    expect_throw([&] { proxy.channel(p, c); }, ErrorCode::NotSupported, "Posters::Gpu needs a CUDA GPU");
  }
}

}  // namespace
}  // namespace kinet::test
