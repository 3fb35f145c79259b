// Device verbs (kinet/device/qp.cuh) on host threads against a fake NIC: the
// test writes the CQEs. Checks the bookkeeping that every provider relies on:
// tickets, selective signalling, doorbell record and word, CQ owner bits over
// laps, 16-bit WQE counters, error CQEs -> statuses, bounded waits, full rings.
// Every test runs in all three sharing modes.
#include <chrono>
#include <cstring>

#include "fake_verbs.hpp"

namespace {

template <class T> class Verbs : public ::testing::Test {};
TYPED_TEST_SUITE(Verbs, kinet::test::SharingModes, kinet::test::SharingModeNames);


TYPED_TEST(Verbs, TicketZeroIsAlwaysOk) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 4);
  EXPECT_EQ(dev::test<S>(r.h, Ticket{}), Status::Ok);
  EXPECT_EQ(dev::wait<S>(r.h, Ticket{}), Status::Ok);
  EXPECT_EQ(r.state.reserved, 0u);  // wait(0) posts nothing
}

TYPED_TEST(Verbs, TicketIsOnePlusRingIndexAndPendingUntilCqe) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 4);
  Ticket t1, t2;
  ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &t1), Status::Ok);
  ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &t2), Status::Ok);
  EXPECT_EQ(t1.idx, 1u);
  EXPECT_EQ(t2.idx, 2u);
  EXPECT_EQ(dev::test<S>(r.h, t1), Status::Pending);
  EXPECT_EQ(dev::test<S>(r.h, t2), Status::Pending);
  r.complete(0);
  EXPECT_EQ(dev::test<S>(r.h, t1), Status::Ok);
  EXPECT_EQ(dev::test<S>(r.h, t2), Status::Pending);
  r.complete(1);
  EXPECT_EQ(dev::test<S>(r.h, t2), Status::Ok);
  EXPECT_EQ(dev::wait<S>(r.h, t2), Status::Ok);
  EXPECT_EQ(r.state.completed, 2u);
  // The CQ doorbell record carries the consumer index, big-endian.
  EXPECT_EQ(be32toh(r.cq_dbrec[m::kCqDbrConsumerIndex]), 2u);
}

TYPED_TEST(Verbs, DoorbellRecordAndWord) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 8);
  Ticket t;
  ASSERT_EQ(dev::nop<S>(r.h, 0, &t), Status::Ok);
  EXPECT_EQ(r.send_pi(), 1u);
  // Doorbell word = a control segment's first 8 bytes holding the new
  // producer index and the QP number: BE(pi << 8), BE(qpn << 8).
  uint8_t want[8] = {0, 0, 1, 0, uint8_t(r.h.qpn >> 16), uint8_t(r.h.qpn >> 8), uint8_t(r.h.qpn), 0};
  uint64_t word;
  std::memcpy(&word, want, 8);
  EXPECT_EQ(r.db, word);
  EXPECT_EQ(r.state.rung, 1u);

  // kNoDoorbell: published, not announced.
  ASSERT_EQ(dev::nop<S>(r.h, dev::kNoDoorbell, &t), Status::Ok);
  ASSERT_EQ(dev::nop<S>(r.h, dev::kNoDoorbell, &t), Status::Ok);
  EXPECT_EQ(r.state.ready, 3u);
  EXPECT_EQ(r.state.rung, 1u);
  EXPECT_EQ(r.send_pi(), 1u);
  ASSERT_EQ(dev::ring_doorbell<S>(r.h, t.idx), Status::Ok);
  EXPECT_EQ(r.send_pi(), 3u);
  want[2] = 3;
  std::memcpy(&word, want, 8);
  EXPECT_EQ(r.db, word);
  EXPECT_EQ(r.state.rung, 3u);
}

TYPED_TEST(Verbs, SelectiveSignallingFollowsPeriod) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 4);  // period 4: WQEs 3, 7, 11, ... always signalled
  for (int i = 0; i < 8; ++i) ASSERT_EQ(dev::nop<S>(r.h, i == 1 ? uint32_t(dev::kSignal) : 0u), Status::Ok);
  for (uint64_t i = 0; i < 8; ++i) {
    const bool want = i == 1 || i == 3 || i == 7;
    EXPECT_EQ(r.wants_cqe(i), want) << "WQE " << i;
    EXPECT_EQ(r.opcode(i), m::kOpNop);
    EXPECT_EQ(r.wqe_index(i), i);
  }
  EXPECT_EQ(r.state.signaled, 2u) << "only kSignal counts: the periodic requests follow from `ready`";
}

TYPED_TEST(Verbs, WaitOnUnsignalledTicketPostsSignalledNop) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 8, /*timeout_ns=*/50'000'000);
  Ticket t;
  ASSERT_EQ(dev::nop<S>(r.h, 0, &t), Status::Ok);
  ASSERT_FALSE(r.wants_cqe(0));
  const auto t0 = std::chrono::steady_clock::now();
  // Nobody completes anything: the wait is bounded and says what it waited for.
  EXPECT_EQ(dev::wait<S>(r.h, t), Status::TimeoutCompletion);
  const double s = kinet::test::seconds_since(t0);
  EXPECT_GE(s, 0.045);
  EXPECT_LT(s, 5.0);
  // It posted a signalled NOP after the ticket and rang for it.
  EXPECT_EQ(r.state.reserved, 2u);
  EXPECT_EQ(r.opcode(1), m::kOpNop);
  EXPECT_TRUE(r.wants_cqe(1));
  EXPECT_EQ(r.send_pi(), 2u);
  // One CQE for the NOP completes both.
  r.complete(1);
  EXPECT_EQ(dev::wait<S>(r.h, t), Status::Ok);
  EXPECT_EQ(r.state.completed, 2u);
  // A second wait on a signalled ticket posts nothing more.
  Ticket t2;
  ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &t2), Status::Ok);
  EXPECT_EQ(dev::test<S>(r.h, t2), Status::Pending);
  r.complete(2);
  EXPECT_EQ(dev::wait<S>(r.h, t2), Status::Ok);
  EXPECT_EQ(r.state.reserved, 3u);
}

// wait() knows the periodic CQE requests from `ready`: a ticket at or below
// a published period end needs no NOP; one past it does.
TYPED_TEST(Verbs, WaitCountsPeriodicRequestsFromReady) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 4, 50'000'000);  // period 4: WQE 3 requests a CQE
  Ticket t2, t4;
  for (int i = 0; i < 5; ++i) ASSERT_EQ(dev::nop<S>(r.h, 0, i == 2 ? &t2 : &t4), Status::Ok);
  EXPECT_EQ(r.state.signaled, 0u);
  r.complete(3);
  EXPECT_EQ(dev::wait<S>(r.h, t2), Status::Ok);
  EXPECT_EQ(r.state.reserved, 5u) << "WQE 3's periodic CQE covers WQE 2: no NOP";
  EXPECT_EQ(dev::wait<S>(r.h, t4), Status::TimeoutCompletion);
  EXPECT_EQ(r.state.reserved, 6u) << "nothing published at or after WQE 4 asks a CQE: one NOP";
  EXPECT_TRUE(r.wants_cqe(5));
  EXPECT_EQ(r.state.signaled, 6u);
}

TYPED_TEST(Verbs, QuietCoversEverythingReserved) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 8, 50'000'000);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(dev::nop<S>(r.h, dev::kNoDoorbell), Status::Ok);
  EXPECT_EQ(dev::quiet<S>(r.h), Status::TimeoutCompletion);
  EXPECT_EQ(r.send_pi(), r.state.reserved) << "quiet rings for everything published";
  r.complete(r.state.reserved - 1);
  EXPECT_EQ(dev::quiet<S>(r.h), Status::Ok);
}

TYPED_TEST(Verbs, ErrorCqeGivesFaultThenFlushed) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 8);
  Ticket t[5];
  for (auto& x : t) ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &x), Status::Ok);
  r.complete(0);
  r.complete(2, m::kSynRemoteAccess);
  r.complete(3, m::kSynWrFlush);
  r.complete(4, m::kSynWrFlush);
  EXPECT_EQ(dev::test<S>(r.h, t[0]), Status::Ok);
  EXPECT_EQ(dev::test<S>(r.h, t[1]), Status::Ok) << "WQE 1 completed before the faulting WQE 2";
  EXPECT_EQ(dev::test<S>(r.h, t[2]), Status::RemoteAccess);
  EXPECT_EQ(dev::wait<S>(r.h, t[2]), Status::RemoteAccess);
  EXPECT_EQ(dev::test<S>(r.h, t[3]), Status::WrFlushed);
  EXPECT_EQ(dev::wait<S>(r.h, t[4]), Status::WrFlushed);
  EXPECT_EQ(r.state.error_wqe, 2u);
  EXPECT_EQ(r.state.error_syndrome, m::kSynRemoteAccess);
  EXPECT_EQ(r.state.error_vendor_syndrome, 0x42);
  EXPECT_EQ(r.state.error_status, static_cast<int32_t>(Status::RemoteAccess));
}

TYPED_TEST(Verbs, EveryErrorSyndromeMapsToItsStatus) {
  constexpr Sharing S = TypeParam::value;
  const std::pair<uint8_t, Status> cases[] = {
      {m::kSynLocalLength, Status::LocalLength},       {m::kSynLocalQpOp, Status::LocalQpOp},
      {m::kSynLocalProt, Status::LocalProtection},     {m::kSynWrFlush, Status::WrFlushed},
      {m::kSynRemoteInvalReq, Status::RemoteInvalidRequest}, {m::kSynRemoteAccess, Status::RemoteAccess},
      {m::kSynTransportRetryExc, Status::TransportRetryExceeded}, {0x77, Status::UnknownCqeError}};
  for (auto [syn, want] : cases) {
    FakeRing r(4, 4, 8);
    Ticket t;
    ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &t), Status::Ok);
    r.complete(0, syn);
    EXPECT_EQ(dev::wait<S>(r.h, t), want) << "syndrome " << int(syn);
  }
  // A responder error CQE counts too.
  FakeRing r(4, 4, 8);
  Ticket t;
  ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &t), Status::Ok);
  r.complete(0, m::kSynRemoteOp, m::kCqeRespErr);
  EXPECT_EQ(dev::wait<S>(r.h, t), Status::RemoteOperation);
}

TYPED_TEST(Verbs, TryReserveReturnsNoSpaceWithoutBlocking) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 8, /*timeout_ns=*/5'000'000'000ull);
  uint64_t a = 99, b = 99, c = 99;
  EXPECT_EQ(dev::try_reserve<S>(r.h, 0, &c), Status::InvalidArgument);
  EXPECT_EQ(dev::try_reserve<S>(r.h, 9, &c), Status::InvalidArgument) << "more than half the ring";
  EXPECT_EQ(dev::reserve<S>(r.h, 0, &c), Status::InvalidArgument);
  EXPECT_EQ(dev::reserve<S>(r.h, 9, &c), Status::InvalidArgument);
  ASSERT_EQ(dev::try_reserve<S>(r.h, 8, &a), Status::Ok);
  ASSERT_EQ(dev::try_reserve<S>(r.h, 8, &b), Status::Ok);
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 8u);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(dev::try_reserve<S>(r.h, 1, &c), Status::NoSpace);
  EXPECT_LT(kinet::test::seconds_since(t0), 0.5) << "try_reserve must not wait for the 5 s timeout";
  EXPECT_EQ(r.state.reserved, 16u) << "a failed try_reserve reserves nothing";
  for (uint64_t i = 0; i < 16; ++i) dev::prepare_nop<S>(r.h, i, 0);
  ASSERT_EQ(dev::publish<S>(r.h, a, 8), Status::Ok);
  ASSERT_EQ(dev::publish<S>(r.h, b, 8), Status::Ok);
  ASSERT_EQ(dev::ring_doorbell<S>(r.h, 16), Status::Ok);
  EXPECT_EQ(dev::try_reserve<S>(r.h, 1, &c), Status::NoSpace);
  r.complete(7);  // frees 0..7
  ASSERT_EQ(dev::try_reserve<S>(r.h, 8, &c), Status::Ok);
  EXPECT_EQ(c, 16u);
  EXPECT_EQ(dev::try_reserve<S>(r.h, 1, &c), Status::NoSpace);
}

TYPED_TEST(Verbs, ReserveTimesOutThenQpIsBroken) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(2, 2, 2, /*timeout_ns=*/30'000'000);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(dev::nop<S>(r.h, 0), Status::Ok);
  const auto t0 = std::chrono::steady_clock::now();
  Ticket t;
  EXPECT_EQ(dev::nop<S>(r.h, 0, &t), Status::TimeoutSqSpace);
  EXPECT_GE(kinet::test::seconds_since(t0), 0.025);
  EXPECT_LT(kinet::test::seconds_since(t0), 5.0);
  EXPECT_EQ(dev::nop<S>(r.h, 0, &t), Status::QpBroken);
  uint64_t first;
  EXPECT_EQ(dev::try_reserve<S>(r.h, 1, &first), Status::QpBroken);
}

TYPED_TEST(Verbs, PutSplitsAtMaxMsg) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 16 / 2, 1'000'000'000, /*max_msg=*/100);
  alignas(8) static uint8_t src[1000];
  const uint64_t raddr = 0x7000'0000'1000ull;
  Ticket t;
  ASSERT_EQ(dev::put<S>(r.h, src, kLkey, raddr, kRkey, 345, dev::kSignal | dev::kFence, &t), Status::Ok);
  ASSERT_EQ(t.idx, 4u);
  const uint32_t lens[] = {100, 100, 100, 45};
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(r.opcode(i), m::kOpRdmaWrite);
    EXPECT_EQ(r.ds(i), 3u);
    EXPECT_EQ(r.raddr(i), raddr + 100 * i);
    EXPECT_EQ(be32toh(r.data(i).byte_count), lens[i]);
    EXPECT_EQ(be64toh(r.data(i).addr), reinterpret_cast<uint64_t>(src) + 100 * i);
    EXPECT_EQ(r.data(i).lkey, kLkey.be);
    EXPECT_EQ(r.wants_cqe(i), i == 3) << "only the last WQE carries the caller's kSignal";
    EXPECT_EQ(r.fenced(i), i == 0) << "only the first WQE carries the caller's kFence";
  }
  EXPECT_EQ(r.send_pi(), 4u);

  // Exactly max_msg: one WQE. Zero bytes: one WQE.
  ASSERT_EQ(dev::put<S>(r.h, src, kLkey, raddr, kRkey, 100, 0, &t), Status::Ok);
  EXPECT_EQ(t.idx, 5u);
  ASSERT_EQ(dev::put<S>(r.h, src, kLkey, raddr, kRkey, 0, 0, &t), Status::Ok);
  EXPECT_EQ(t.idx, 6u);
  EXPECT_EQ(be32toh(r.data(5).byte_count), 0u);
}

TYPED_TEST(Verbs, SplitLargerThanHalfTheRingWaitsForCompletions) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(3, 3, 4, 2'000'000'000ull, /*max_msg=*/10);  // 8 slots
  alignas(8) static uint8_t dst[200];
  // 19 WQEs on an 8-slot ring: the verb must reserve in pieces of <= 4 and
  // wait for completions in between. Play the NIC from a helper thread.
  std::atomic<bool> stop{false};
  std::thread nic([&] {
    uint64_t seen = 0;
    while (!stop.load()) {
      const uint16_t pi = static_cast<uint16_t>(r.send_pi());
      while (static_cast<uint16_t>(seen) != pi) {
        if (r.wants_cqe(seen)) r.complete(seen);
        ++seen;
      }
      std::this_thread::yield();
    }
  });
  Ticket t;
  const Status st = dev::get<S>(r.h, dst, kLkey, 0x1000, kRkey, 185, dev::kSignal, &t);
  const Status ws = st == Status::Ok ? dev::wait<S>(r.h, t) : st;
  stop = true;
  nic.join();
  ASSERT_EQ(st, Status::Ok);
  EXPECT_EQ(ws, Status::Ok);
  EXPECT_EQ(t.idx, 19u);
  // Last WQE (index 18, slot 2): the 5-byte tail.
  EXPECT_EQ(r.opcode(18), m::kOpRdmaRead);
  EXPECT_EQ(be32toh(r.data(18).byte_count), 5u);
  EXPECT_EQ(be64toh(r.data(18).addr), reinterpret_cast<uint64_t>(dst) + 180);
  EXPECT_EQ(r.raddr(18), 0x1000u + 180);
}

TYPED_TEST(Verbs, PutInlineLimits) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 8);
  uint8_t buf[64];
  for (int i = 0; i < 64; ++i) buf[i] = static_cast<uint8_t>(i + 1);
  Ticket t;
  EXPECT_EQ(dev::put_inline<S>(r.h, buf, 29, 0x1000, kRkey, 0, &t), Status::InvalidArgument);
  EXPECT_EQ(dev::put_inline<S>(r.h, buf, 64, 0x1000, kRkey, 0, &t), Status::InvalidArgument);
  EXPECT_EQ(r.state.reserved, 0u) << "a rejected put_inline reserves nothing";
  ASSERT_EQ(dev::put_inline<S>(r.h, buf, 28, 0x1000, kRkey, 0, &t), Status::Ok);
  EXPECT_EQ(r.ds(0), 4u);
  EXPECT_EQ(be32toh(*reinterpret_cast<const uint32_t*>(r.slot(0) + 32)), m::kInlineSegFlag | 28u);
  EXPECT_EQ(std::memcmp(r.slot(0) + 36, buf, 28), 0);
}

TYPED_TEST(Verbs, AtomicsAndPutSignal) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 8);
  alignas(8) static uint64_t res, scratch;
  alignas(8) static uint8_t src[64];
  Ticket t;
  ASSERT_EQ(dev::fetch_add<S>(r.h, &res, kLkey, 0x2000, kRkey, 5, 0, &t), Status::Ok);
  EXPECT_EQ(r.opcode(0), m::kOpAtomicFA);
  EXPECT_EQ(r.ds(0), 4u);
  ASSERT_EQ(dev::compare_swap<S>(r.h, &res, kLkey, 0x2000, kRkey, 1, 2, 0, &t), Status::Ok);
  EXPECT_EQ(r.opcode(1), m::kOpAtomicCS);
  // put_signal: the write(s), then the fetch-add on the signal word, one doorbell.
  const uint32_t pi_before = r.send_pi();
  ASSERT_EQ(dev::put_signal<S>(r.h, src, kLkey, 0x3000, kRkey, 64, 0x4000, kRkey, 1, &scratch, kLkey, dev::kSignal,
                               &t),
            Status::Ok);
  EXPECT_EQ(pi_before, 2u);
  EXPECT_EQ(t.idx, 4u);
  EXPECT_EQ(r.opcode(2), m::kOpRdmaWrite);
  EXPECT_EQ(r.opcode(3), m::kOpAtomicFA);
  EXPECT_EQ(r.raddr(3), 0x4000u);
  EXPECT_TRUE(r.wants_cqe(3));
  EXPECT_FALSE(r.wants_cqe(2));
  EXPECT_EQ(r.send_pi(), 4u);
}

TYPED_TEST(Verbs, CqOwnerBitOverManyLaps) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(3, 2, 4);  // 8 WQE slots, 4 CQEs: the CQ laps every 4 completions
  for (uint64_t i = 0; i < 50; ++i) {
    Ticket t;
    ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &t), Status::Ok) << i;
    ASSERT_EQ(dev::test<S>(r.h, t), Status::Pending) << i << ": a stale CQE from the previous lap was taken";
    r.complete(i);
    ASSERT_EQ(dev::wait<S>(r.h, t), Status::Ok) << i;
    ASSERT_EQ(r.state.completed, i + 1);
  }
  EXPECT_EQ(r.state.cq_ci, 50u);
}

TYPED_TEST(Verbs, SixteenBitWqeCounterWraps) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 8);
  // Start just below 2^16 (indices are free-running 64-bit counters).
  const uint64_t base = 65530;
  r.state.reserved = r.state.ready = r.state.rung = r.state.completed = r.state.signaled = base;
  for (uint64_t i = base; i < base + 12; ++i) {
    Ticket t;
    ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &t), Status::Ok);
    EXPECT_EQ(t.idx, i + 1);
    EXPECT_EQ(r.wqe_index(i), static_cast<uint16_t>(i));
    EXPECT_EQ(r.send_pi(), static_cast<uint16_t>(i + 1));
    r.complete(i);
    ASSERT_EQ(dev::wait<S>(r.h, t), Status::Ok);
    EXPECT_EQ(r.state.completed, i + 1);
  }
}

TEST(VerbsCta, PublishOutOfOrderTimesOut) {
  FakeRing r(4, 4, 8, /*timeout_ns=*/30'000'000);
  uint64_t a = 0, b = 0;
  ASSERT_EQ(dev::reserve<Sharing::Cta>(r.h, 1, &a), Status::Ok);
  ASSERT_EQ(dev::reserve<Sharing::Cta>(r.h, 1, &b), Status::Ok);
  dev::prepare_nop<Sharing::Cta>(r.h, b, 0);
  // b cannot be published before a: bounded wait, then the QP is broken.
  EXPECT_EQ(dev::publish<Sharing::Cta>(r.h, b, 1), Status::TimeoutPublishOrder);
  uint64_t c = 0;
  EXPECT_EQ(dev::reserve<Sharing::Cta>(r.h, 1, &c), Status::QpBroken);
}

// post_loop: an Exclusive owner's loop in one call, counters in registers.
TEST(PostLoop, PostsRingsAndSignalsLikeSingleVerbs) {
  FakeRing r(4, 4, 4);  // 16 slots, period 4: WQEs 3, 7 signalled by the period
  std::vector<uint32_t> pi_seen;
  Ticket t;
  ASSERT_EQ(dev::post_loop(r.h, 10, 4, dev::kSignal | dev::kFence, &t,
                           [&](uint64_t idx, uint32_t f) {
                             pi_seen.push_back(r.send_pi());
                             dev::prepare_nop<Sharing::Exclusive>(r.h, idx, f);
                           }),
            Status::Ok);
  EXPECT_EQ(t.idx, 10u);
  EXPECT_EQ(t.first, 0u);
  // Rung when the ring index reached 4 and 8 (seen by WQEs 4 and 8), and after the last.
  const std::vector<uint32_t> want_pi{0, 0, 0, 0, 4, 4, 4, 4, 8, 8};
  EXPECT_EQ(pi_seen, want_pi);
  EXPECT_EQ(r.send_pi(), 10u);
  for (uint64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(r.wqe_index(i), i);
    EXPECT_EQ(r.wants_cqe(i), i == 3 || i == 7 || i == 9) << "WQE " << i;
    EXPECT_EQ(r.fenced(i), i == 0) << "WQE " << i;
  }
  EXPECT_EQ(r.state.reserved, 10u);
  EXPECT_EQ(r.state.ready, 10u);
  EXPECT_EQ(r.state.rung, 10u);
  EXPECT_EQ(r.state.signaled, 10u);
  for (uint64_t i : {3, 7, 9}) r.complete(i);
  EXPECT_EQ(dev::quiet<Sharing::Exclusive>(r.h), Status::Ok);
  EXPECT_EQ(r.state.reserved, 10u) << "quiet needed no NOP: signaled was exact";
}

TEST(PostLoop, NoDoorbellLeavesTheTailUnrung) {
  FakeRing r(4, 4, 4);
  ASSERT_EQ(dev::post_loop(r.h, 6, 4, dev::kNoDoorbell, nullptr,
                           [&](uint64_t idx, uint32_t f) { dev::prepare_nop<Sharing::Exclusive>(r.h, idx, f); }),
            Status::Ok);
  EXPECT_EQ(r.send_pi(), 4u);
  EXPECT_EQ(r.state.rung, 4u);
  EXPECT_EQ(r.state.ready, 6u);
  EXPECT_EQ(r.state.signaled, 0u);  // no kSignal (WQE 3's periodic request follows from `ready`)
}

TEST(PostLoop, RejectsBadArgumentsBeforePosting) {
  FakeRing r(4, 4, 4);
  auto make = [&](uint64_t idx, uint32_t f) { dev::prepare_nop<Sharing::Exclusive>(r.h, idx, f); };
  EXPECT_EQ(dev::post_loop(r.h, 0, 4, 0, nullptr, make), Status::InvalidArgument);
  EXPECT_EQ(dev::post_loop(r.h, 1, 0, 0, nullptr, make), Status::InvalidArgument);
  EXPECT_EQ(dev::post_loop(r.h, 1, 3, 0, nullptr, make), Status::InvalidArgument);
  uint64_t first;
  ASSERT_EQ(dev::reserve<Sharing::Exclusive>(r.h, 1, &first), Status::Ok);
  EXPECT_EQ(dev::post_loop(r.h, 1, 1, 0, nullptr, make), Status::InvalidArgument) << "reservation outstanding";
  EXPECT_EQ(r.state.reserved, 1u);
  EXPECT_EQ(r.state.ready, 0u);
  EXPECT_EQ(r.state.local_error, 0u);
  r.state.broken = 1;
  EXPECT_EQ(dev::post_loop(r.h, 1, 1, 0, nullptr, make), Status::QpBroken);
  EXPECT_EQ(r.state.local_error, uint8_t(Status::QpBroken));
}

TEST(PostLoop, WaitsForSpaceThenWraps) {
  FakeRing r(2, 3, 2);  // 4 slots, period 2: WQEs 1, 3, 5, 7 signalled
  r.complete(1);        // the CQEs the full ring will find when it polls
  r.complete(3);
  Ticket t;
  ASSERT_EQ(dev::post_loop(r.h, 8, 1, 0, &t,
                           [&](uint64_t idx, uint32_t f) { dev::prepare_nop<Sharing::Exclusive>(r.h, idx, f); }),
            Status::Ok);
  EXPECT_EQ(t.idx, 8u);
  EXPECT_EQ(r.state.completed, 4u);
  EXPECT_EQ(r.state.reserved, 8u);
  EXPECT_EQ(r.state.rung, 8u);
  for (uint64_t i = 4; i < 8; ++i) EXPECT_EQ(r.wqe_index(i), i);
}

TEST(PostLoop, FullRingTimesOutAndBreaksTheQp) {
  FakeRing r(2, 2, 2, /*timeout_ns=*/20'000'000);
  Ticket t;
  EXPECT_EQ(dev::post_loop(r.h, 6, 1, 0, &t,
                           [&](uint64_t idx, uint32_t f) { dev::prepare_nop<Sharing::Exclusive>(r.h, idx, f); }),
            Status::TimeoutSqSpace);
  EXPECT_EQ(t.idx, 4u) << "the ticket covers the 4 WQEs posted";
  EXPECT_EQ(t.first, 0u);
  EXPECT_EQ(r.state.ready, 4u);
  EXPECT_EQ(r.state.reserved, 5u) << "slot 4 stays reserved, unpublished";
  EXPECT_EQ(r.state.broken, 1u);
  EXPECT_EQ(r.state.local_error, uint8_t(Status::TimeoutSqSpace));
}

// SqCursor: the Exclusive steps with the counters in the caller's variable.
TEST(SqCursor, StepsPostRingAndSignalLikeTheSqStateSteps) {
  FakeRing r(4, 4, 4);  // 16 slots, period 4
  dev::SqCursor c;
  ASSERT_EQ(dev::open_cursor(r.h, &c), Status::Ok);
  for (uint64_t k = 0; k < 10; ++k) {
    uint64_t idx = 99;
    ASSERT_EQ(dev::reserve(r.h, c, 1, &idx), Status::Ok);
    EXPECT_EQ(idx, k);
    dev::prepare_nop<Sharing::Exclusive>(r.h, idx, k == 9 ? dev::kSignal : 0u);
    ASSERT_EQ(dev::publish(r.h, c, idx, 1), Status::Ok);
    if ((idx + 1) % 4 == 0) {
      ASSERT_EQ(dev::ring_doorbell(r.h, c, idx + 1), Status::Ok);
    }
  }
  // The cursor holds the counters; SqState has not moved (only kSignal's max).
  EXPECT_EQ(r.state.reserved, 0u);
  EXPECT_EQ(r.state.ready, 0u);
  EXPECT_EQ(r.state.rung, 0u);
  EXPECT_EQ(r.state.signaled, 10u) << "kSignal raises SqState::signaled itself";
  EXPECT_EQ(c.reserved, 10u);
  EXPECT_EQ(c.ready, 10u);
  EXPECT_EQ(c.rung, 8u);
  EXPECT_EQ(r.send_pi(), 8u);
  ASSERT_EQ(dev::ring_doorbell(r.h, c, 10), Status::Ok);
  EXPECT_EQ(r.send_pi(), 10u);
  EXPECT_EQ(r.db, kinet::mlx5::doorbell_word(10, r.h.qpn_be8)) << "the doorbell word carries the new index";
  dev::close_cursor(r.h, c);
  EXPECT_EQ(r.state.reserved, 10u);
  EXPECT_EQ(r.state.ready, 10u);
  EXPECT_EQ(r.state.rung, 10u);
  EXPECT_EQ(r.state.signaled, 10u);
  for (uint64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(r.wqe_index(i), i);
    EXPECT_EQ(r.wants_cqe(i), i == 3 || i == 7 || i == 9) << "WQE " << i;
  }
  for (uint64_t i : {3, 7, 9}) r.complete(i);
  EXPECT_EQ(dev::quiet<Sharing::Exclusive>(r.h), Status::Ok);
  EXPECT_EQ(r.state.reserved, 10u) << "quiet needed no NOP: signaled was exact";
}

TEST(SqCursor, RingsNothingTwiceAndTestWorksWhileOpen) {
  FakeRing r(4, 4, 4);
  dev::SqCursor c;
  ASSERT_EQ(dev::open_cursor(r.h, &c), Status::Ok);
  uint64_t a;
  ASSERT_EQ(dev::reserve(r.h, c, 2, &a), Status::Ok);
  dev::prepare_nop<Sharing::Exclusive>(r.h, a, 0);
  dev::prepare_nop<Sharing::Exclusive>(r.h, a + 1, dev::kSignal);
  ASSERT_EQ(dev::ring_doorbell(r.h, c, 2), Status::Ok);
  EXPECT_EQ(r.send_pi(), 0u) << "nothing published yet: nothing to announce";
  ASSERT_EQ(dev::publish(r.h, c, a, 2), Status::Ok);
  ASSERT_EQ(dev::ring_doorbell(r.h, c, 2), Status::Ok);
  EXPECT_EQ(r.send_pi(), 2u);
  r.db = 0;
  ASSERT_EQ(dev::ring_doorbell(r.h, c, 2), Status::Ok);
  EXPECT_EQ(r.db, 0u) << "a second ring with nothing new stores no doorbell";
  EXPECT_EQ(dev::test<Sharing::Exclusive>(r.h, Ticket{2, 0}), Status::Pending);
  r.complete(1);
  EXPECT_EQ(dev::test<Sharing::Exclusive>(r.h, Ticket{2, 0}), Status::Ok);
  dev::close_cursor(r.h, c);
  EXPECT_EQ(r.state.completed, 2u);
}

TEST(SqCursor, FullRingWritesBackWaitsAndReloads) {
  FakeRing r(2, 3, 2);  // 4 slots, period 2: WQEs 1, 3, 5 signalled
  dev::SqCursor c;
  ASSERT_EQ(dev::open_cursor(r.h, &c), Status::Ok);
  EXPECT_EQ(c.limit, 4u);
  for (uint64_t k = 0; k < 4; ++k) {
    uint64_t idx;
    ASSERT_EQ(dev::reserve(r.h, c, 1, &idx), Status::Ok);
    dev::prepare_nop<Sharing::Exclusive>(r.h, idx, 0);
    dev::publish(r.h, c, idx, 1);
  }
  EXPECT_EQ(r.send_pi(), 0u) << "published, not rung";
  r.complete(1);
  uint64_t idx;
  // Ring full: the counters go back to SqState, reserve<Exclusive> rings
  // what is published (kick), polls the CQE and hands out slot 4.
  ASSERT_EQ(dev::reserve(r.h, c, 1, &idx), Status::Ok);
  EXPECT_EQ(idx, 4u);
  EXPECT_EQ(r.send_pi(), 4u) << "the wait rang the published WQEs";
  EXPECT_EQ(c.rung, 4u);
  EXPECT_EQ(c.reserved, 5u);
  EXPECT_EQ(c.limit, 6u) << "completed (2) + 4";
  EXPECT_EQ(r.state.completed, 2u);
  dev::prepare_nop<Sharing::Exclusive>(r.h, idx, 0);
  dev::publish(r.h, c, idx, 1);
  dev::ring_doorbell(r.h, c, 5);
  dev::close_cursor(r.h, c);
  EXPECT_EQ(r.state.reserved, 5u);
  EXPECT_EQ(r.state.ready, 5u);
  EXPECT_EQ(r.state.rung, 5u);
  EXPECT_EQ(r.wqe_index(4), 4u);
}

TEST(SqCursor, BadCountsBrokenQpsAndTimeouts) {
  FakeRing r(2, 2, 2, /*timeout_ns=*/20'000'000);
  dev::SqCursor c;
  ASSERT_EQ(dev::open_cursor(r.h, &c), Status::Ok);
  uint64_t idx = 77;
  EXPECT_EQ(dev::reserve(r.h, c, 0, &idx), Status::InvalidArgument);
  EXPECT_EQ(dev::reserve(r.h, c, 3, &idx), Status::InvalidArgument) << "more than half of 4 slots";
  EXPECT_EQ(idx, 77u);
  EXPECT_EQ(c.reserved, 0u);
  for (uint64_t k = 0; k < 2; ++k) {
    ASSERT_EQ(dev::reserve(r.h, c, 2, &idx), Status::Ok);
    dev::prepare_nop<Sharing::Exclusive>(r.h, idx, 0);
    dev::prepare_nop<Sharing::Exclusive>(r.h, idx + 1, 0);
    dev::publish(r.h, c, idx, 2);
  }
  // No CQE ever comes: the bounded wait breaks the QP.
  EXPECT_EQ(dev::reserve(r.h, c, 1, &idx), Status::TimeoutSqSpace);
  EXPECT_EQ(idx, 4u);
  EXPECT_EQ(c.reserved, 5u) << "slot 4 stays reserved, unpublished, as reserve<Exclusive> leaves it";
  dev::close_cursor(r.h, c);
  EXPECT_EQ(r.state.reserved, 5u);
  EXPECT_EQ(r.state.ready, 4u);
  EXPECT_EQ(r.state.broken, 1u);
  EXPECT_EQ(r.state.local_error, uint8_t(Status::TimeoutSqSpace));
  EXPECT_EQ(dev::open_cursor(r.h, &c), Status::QpBroken);
  FakeRing r2(2, 2, 2);
  r2.state.broken = 1;
  EXPECT_EQ(dev::open_cursor(r2.h, &c), Status::QpBroken);
  EXPECT_EQ(r2.state.local_error, uint8_t(Status::QpBroken)) << "the verb that reports it records it";
  // A cursor that failed to open is refused by the steps and changes nothing.
  r2.state.broken = 0;
  r2.state.reserved = r2.state.ready = r2.state.rung = 7;
  EXPECT_EQ(dev::reserve(r2.h, c, 1, &idx), Status::InvalidArgument);
  dev::publish(r2.h, c, 0, 1);
  EXPECT_EQ(dev::ring_doorbell(r2.h, c, 1), Status::InvalidArgument);
  EXPECT_EQ(r2.db, 0u) << "no doorbell for a cursor that is not open";
  dev::close_cursor(r2.h, c);
  EXPECT_EQ(r2.state.reserved, 7u);
  EXPECT_EQ(r2.state.ready, 7u);
  EXPECT_EQ(r2.state.rung, 7u);
}

}  // namespace
