// Lifetimes and state changes of the emu control path: objects that outlive
// their device or PD fail with BadState instead of succeeding silently or
// timing out; reset() and connect()'s rollback; transitions are atomic under
// concurrent callers (nothing leaves ERROR but reset()); last_error() reports
// failures the device verbs recorded.
#include <atomic>
#include <thread>
#include <vector>

#include "ctl_test_util.hpp"
#include "emu_preamble.hpp"

namespace {

TEST(EmuLifetime, PdAfterDeviceClosed) {
  auto d = kinet::Device::open("emu");
  const std::string name = d->name();
  auto pd = d->alloc_pd();
  Buffer buf = alloc_buffer(4096);
  d.reset();
  EXPECT_TRUE(throws_exactly([&] { pd->reg_mr(buf.get(), 4096, kinet::kAccessAll); }, ErrorCode::BadState,
                             name + ": reg_mr: " + name + " was closed"));
  EXPECT_TRUE(throws_exactly([&] { pd->create_qp(); }, ErrorCode::BadState,
                             name + ": create_qp: " + name + " was closed"));
}

TEST(EmuLifetime, QpAfterDeviceClosed) {
  auto d = kinet::Device::open("emu");
  auto peer_d = kinet::Device::open("emu");
  const std::string name = d->name();
  auto pd = d->alloc_pd();
  auto peer_pd = peer_d->alloc_pd();
  auto peer = peer_pd->create_qp();
  auto q = pd->create_qp();
  auto q_init = pd->create_qp();
  q_init->to_init(kinet::kAccessAll);
  const kinet::QpInfo pi = peer->info();
  const std::string who = name + " QP " + hexs(q->qpn()) + ": ";
  const std::string who_init = name + " QP " + hexs(q_init->qpn()) + ": ";
  d.reset();
  const std::string closed = name + " was closed";
  EXPECT_TRUE(throws_exactly([&] { q->to_init(kinet::kAccessAll); }, ErrorCode::BadState, who + "to_init: " + closed));
  EXPECT_TRUE(throws_exactly([&] { q_init->to_rtr(pi); }, ErrorCode::BadState, who_init + "to_rtr: " + closed));
  EXPECT_TRUE(throws_exactly([&] { q->to_rts(); }, ErrorCode::BadState, who + "to_rts: " + closed));
  EXPECT_TRUE(throws_exactly([&] { q->to_error(); }, ErrorCode::BadState, who + "to_error: " + closed));
  EXPECT_TRUE(throws_exactly([&] { q->reset(); }, ErrorCode::BadState, who + "reset: " + closed));
  EXPECT_TRUE(throws_exactly([&] { q->info(); }, ErrorCode::BadState, who + "info: " + closed));
  EXPECT_TRUE(throws_exactly([&] { q->handle(); }, ErrorCode::BadState, who + "handle: " + closed));
  EXPECT_TRUE(throws_exactly([&] { q_init->connect(pi); }, ErrorCode::BadState, who_init + "to_init: " + closed));
  // Still answerable: its number, its state, its error text.
  EXPECT_NE(q->qpn(), 0u);
  EXPECT_NO_THROW(q->state());
  EXPECT_NO_THROW(q->last_error());
}

TEST(EmuLifetime, QpAfterPdDestroyed) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  const std::string who = d->name() + " QP " + hexs(q->qpn()) + ": ";
  pd.reset();
  EXPECT_EQ(q->state(), QpState::Error) << "a QP whose PD is gone is flushed";
  const std::string gone = "its protection domain was destroyed";
  EXPECT_TRUE(throws_exactly([&] { q->to_init(kinet::kAccessAll); }, ErrorCode::BadState, who + "to_init: " + gone));
  EXPECT_TRUE(throws_exactly([&] { q->reset(); }, ErrorCode::BadState, who + "reset: " + gone));
  EXPECT_TRUE(throws_exactly([&] { q->info(); }, ErrorCode::BadState, who + "info: " + gone));
  EXPECT_TRUE(throws_exactly([&] { q->handle(); }, ErrorCode::BadState, who + "handle: " + gone));
}

// The PD of the initiator goes while its QP is connected: the QP is in ERROR
// and what it posts with a handle taken before is flushed, not executed.
TEST(EmuLifetime, PostAfterPdDestroyedIsFlushed) {
  PairOptions o;
  o.cfg_a = test_qp_config(16);
  EmuPair p(o);
  Region& dst = p.reg_b(4096);
  Buffer src = alloc_buffer(4096);
  std::memset(src.get(), 0x5a, 4096);
  auto mr = p.pa->reg_mr(src.get(), 4096, kinet::kAccessAll);
  const kinet::Lkey lkey = mr->lkey();
  const dev::QpHandle h = p.h();
  p.pa.reset();
  EXPECT_EQ(p.qa->state(), QpState::Error);
  dev::Ticket t;
  ASSERT_EQ(dev::put<X>(h, src.get(), lkey, dst.addr(), dst.rkey(), 64, dev::kSignal, &t), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, t), Status::WrFlushed);
  EXPECT_EQ(dst.p()[0], 0) << "nothing moved on behalf of a destroyed PD";
}

TEST(EmuLifetime, ConnectRollsBackToReset) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  auto peer = pd->create_qp();
  kinet::QpInfo bad = peer->info();
  bad.port = 2;
  EXPECT_TRUE(throws_error([&] { q->connect(bad); }, ErrorCode::InvalidArgument, {"port 2"}));
  EXPECT_EQ(q->state(), QpState::Reset) << "a failed connect leaves nothing half-connected";
  kinet::QpInfo far = peer->info();
  far.node ^= 0xdeadbeef00ull;
  EXPECT_TRUE(throws_error([&] { q->connect(far); }, ErrorCode::NotFound, {"fabric address"}));
  EXPECT_EQ(q->state(), QpState::Reset);
  // Now it connects for real.
  EXPECT_NO_THROW(q->connect(peer->info()));
  EXPECT_EQ(q->state(), QpState::Rts);
  // connect() on a connected QP fails at to_init and leaves the connection alone.
  EXPECT_TRUE(throws_error([&] { q->connect(peer->info()); }, ErrorCode::BadState, {"to_init needs state RESET"}));
  EXPECT_EQ(q->state(), QpState::Rts);
}

TEST(EmuLifetime, ResetFromEveryState) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  auto peer = pd->create_qp();
  const kinet::QpInfo pi = peer->info();
  q->reset();
  EXPECT_EQ(q->state(), QpState::Reset);
  q->to_init(kinet::kAccessAll);
  q->reset();
  EXPECT_EQ(q->state(), QpState::Reset);
  q->to_init(kinet::kAccessAll);
  q->to_rtr(pi);
  q->reset();
  EXPECT_EQ(q->state(), QpState::Reset);
  q->connect(pi);
  q->reset();
  EXPECT_EQ(q->state(), QpState::Reset);
  q->to_error();
  q->reset();
  EXPECT_EQ(q->state(), QpState::Reset);
}

// After reset() from RTS or ERROR (nothing in flight), the QP connects again and moves data.
TEST(EmuLifetime, ReconnectAfterReset) {
  PairOptions o;
  o.cfg_a = test_qp_config(16);
  EmuPair p(o);
  Region& src = p.reg_a(4096);
  Region& dst = p.reg_b(4096);
  std::memset(src.p(), 0x77, 64);
  const kinet::QpInfo ib = p.qb->info();
  p.qa->to_error();
  p.qa->reset();
  p.qa->connect(ib);
  const dev::QpHandle h = p.h();
  dev::Ticket t;
  ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), 64, dev::kSignal, &t), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, t), Status::Ok) << p.qa->last_error();
  EXPECT_EQ(dst.p()[63], 0x77);
  p.qa->reset();
  p.qa->connect(ib);
  std::memset(src.p(), 0x78, 64);
  ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), 64, dev::kSignal, &t), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, t), Status::Ok) << p.qa->last_error();
  EXPECT_EQ(dst.p()[63], 0x78);
}

// reset() with a fault recorded and WQEs still announced: the error, the
// engine's progress and the rings all start over; more operations than ring
// slots then complete with their data.
TEST(EmuLifetime, ResetAfterFaultWithWqesInFlightStartsOver) {
  PairOptions o;
  o.cfg_a = test_qp_config(16);
  EmuPair p(o);
  Region& src = p.reg_a(4096);
  Region& dst = p.reg_b(4096);
  const kinet::QpInfo ib = p.qb->info();
  const dev::QpHandle h = p.h();
  dev::Ticket bad;
  ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), dst.addr(), kinet::Rkey{0x12345678}, 64, dev::kSignal, &bad),
            Status::Ok);
  for (int i = 0; i < 5; ++i)  // announced behind the fault, not waited for
    ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), 64), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, bad), Status::RemoteAccess);
  EXPECT_NE(p.qa->last_error(), "");
  p.qa->reset();
  EXPECT_EQ(p.qa->state(), QpState::Reset);
  EXPECT_EQ(p.qa->last_error(), "");
  p.qa->connect(ib);
  for (int i = 0; i < 48; ++i) {  // three laps of the 16-slot ring
    std::memset(src.p(), 0x40 + i, 64);
    dev::Ticket t;
    ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), 64, dev::kSignal, &t), Status::Ok);
    ASSERT_EQ(dev::wait<X>(h, t), Status::Ok) << "op " << i << ": " << p.qa->last_error();
    ASSERT_EQ(dst.p()[0], 0x40 + i);
    ASSERT_EQ(dst.p()[63], 0x40 + i);
  }
}

TEST(EmuLifetime, NothingLeavesErrorButReset) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  auto peer = pd->create_qp();
  q->to_init(kinet::kAccessAll);
  q->to_error();
  EXPECT_TRUE(throws_error([&] { q->to_rtr(peer->info()); }, ErrorCode::BadState, {"QP is in ERROR"}));
  EXPECT_TRUE(throws_error([&] { q->to_rts(); }, ErrorCode::BadState, {"QP is in ERROR"}));
  EXPECT_TRUE(throws_error([&] { q->to_init(0); }, ErrorCode::BadState, {"QP is in ERROR"}));
  EXPECT_EQ(q->state(), QpState::Error);
  q->reset();
  EXPECT_EQ(q->state(), QpState::Reset);
}

// A to_error() racing the connection steps is never undone: whatever
// interleaving, the QP ends in ERROR, and each step either succeeded or
// failed with BadState.
TEST(EmuLifetime, ConcurrentToErrorIsNeverUndone) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  auto peer = pd->create_qp();
  const kinet::QpInfo pi = peer->info();
  const int rounds = static_cast<int>(scaled(400, 50));
  for (int i = 0; i < rounds; ++i) {
    q->reset();
    std::atomic<bool> go{false};
    std::atomic<int> bad{0};
    std::thread a([&] {
      while (!go.load()) {
      }
      try {
        q->to_init(kinet::kAccessAll);
        q->to_rtr(pi);
        q->to_rts();
      } catch (const kinet::Error& e) {
        if (e.code() != ErrorCode::BadState) bad.fetch_add(1);
      }
    });
    std::thread b([&] {
      while (!go.load()) {
      }
      for (int k = 0; k < i % 7; ++k) std::this_thread::yield();
      q->to_error();
    });
    go.store(true);
    a.join();
    b.join();
    ASSERT_EQ(bad.load(), 0) << "round " << i;
    ASSERT_EQ(q->state(), QpState::Error) << "round " << i << ": to_error() was undone";
  }
}

// Two threads race the same transition: exactly one wins.
TEST(EmuLifetime, ConcurrentSameTransitionOneWins) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  const int rounds = static_cast<int>(scaled(300, 50));
  for (int i = 0; i < rounds; ++i) {
    q->reset();
    std::atomic<int> ok{0}, bad_state{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> th;
    for (int k = 0; k < 4; ++k)
      th.emplace_back([&] {
        while (!go.load()) {
        }
        try {
          q->to_init(kinet::kAccessAll);
          ok.fetch_add(1);
        } catch (const kinet::Error& e) {
          if (e.code() == ErrorCode::BadState) bad_state.fetch_add(1);
        }
      });
    go.store(true);
    for (auto& t : th) t.join();
    ASSERT_EQ(ok.load(), 1) << "round " << i;
    ASSERT_EQ(bad_state.load(), 3) << "round " << i;
    ASSERT_EQ(q->state(), QpState::Init);
  }
}

// last_error(): the error CQE's reason first; else the device verbs' own
// failure recorded in SqState::local_error; else empty.
TEST(EmuLifetime, LastErrorReportsDeviceSideFailure) {
  PairOptions o;
  o.cfg_a = test_qp_config(16);
  EmuPair p(o);
  EXPECT_EQ(p.qa->last_error(), "");
  const dev::QpHandle h = p.h();
  h.state->local_error = static_cast<uint8_t>(Status::TimeoutCompletion);
  EXPECT_EQ(p.qa->last_error(), "device verbs: timed out waiting for a completion (status 12)");
  h.state->local_error = static_cast<uint8_t>(Status::QpBroken);
  EXPECT_EQ(p.qa->last_error(), "device verbs: QP unusable after an earlier timeout (status 21)");
  // An error CQE's reason wins.
  Region& src = p.reg_a(4096);
  dev::Ticket t;
  ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), 0x1000, kinet::Rkey{htobe32(0x1234)}, 8, dev::kSignal, &t),
            Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, t), Status::RemoteAccess);
  EXPECT_TRUE(mentions_any(p.qa->last_error(), {"rkey 0x1234"})) << p.qa->last_error();
}

}  // namespace
