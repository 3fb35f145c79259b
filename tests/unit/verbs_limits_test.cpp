// Device verbs at their limits, on the fake NIC (tests/common/fake_ring.hpp):
// lengths (max_msg, the inline flag at bit 31, split counts near SIZE_MAX),
// the status of a split transfer whose chunk faults, a posting loop on a QP
// that went to the error state, saturated deadlines, and the reason a
// device-side failure leaves in SqState::local_error. Every test runs in all
// three sharing modes.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <limits>
#include <thread>

#include "fake_verbs.hpp"

namespace {

template <class T> class VerbsLimits : public ::testing::Test {};
TYPED_TEST_SUITE(VerbsLimits, kinet::test::SharingModes, kinet::test::SharingModeNames);

constexpr uint64_t kMax = m::kMaxMsgBytes;  // 2^30
// Addresses only: the fake NIC never dereferences them.
const void* const kSrc = reinterpret_cast<const void*>(uintptr_t{0x10000});
void* const kDst = reinterpret_cast<void*>(uintptr_t{0x20000});

uint32_t byte_count(const FakeRing& r, uint64_t idx) { return be32toh(r.data(idx).byte_count); }

// Layout the host reads (QueuePair::last_error()): keep stable.
static_assert(sizeof(dev::SqState) == 72);
static_assert(offsetof(dev::SqState, local_error) == 67);
static_assert(offsetof(dev::SqState, broken) == 66);

// ---- lengths ---------------------------------------------------------------

TYPED_TEST(VerbsLimits, HandleMaxMsgOutsideOneToTwoPow30IsInvalid) {
  constexpr Sharing S = TypeParam::value;
  for (uint32_t bad : {0u, uint32_t(kMax) + 1, 1u << 31, ~0u}) {
    FakeRing r(4, 4, 8, 200'000'000, bad);
    Ticket t{77, 66};
    EXPECT_EQ(dev::put<S>(r.h, kSrc, kLkey, 0x1000, kRkey, 8, 0, &t), Status::InvalidArgument) << bad;
    EXPECT_EQ(dev::get<S>(r.h, kDst, kLkey, 0x1000, kRkey, 8, 0, &t), Status::InvalidArgument) << bad;
    EXPECT_EQ(dev::put_signal<S>(r.h, kSrc, kLkey, 0x1000, kRkey, 8, 0x2000, kRkey, 1, nullptr, kLkey, 0, &t),
              Status::InvalidArgument)
        << bad;
    EXPECT_EQ(r.state.reserved, 0u) << "max_msg " << bad << ": nothing may be reserved";
    EXPECT_EQ(t.idx, 77u) << "a rejected call leaves the ticket alone";
    EXPECT_EQ(t.first, 66u);
  }
  // The edges that are valid: 1 and 2^30.
  for (uint32_t good : {1u, uint32_t(kMax)}) {
    FakeRing r(4, 4, 8, 200'000'000, good);
    Ticket t;
    ASSERT_EQ(dev::put<S>(r.h, kSrc, kLkey, 0x1000, kRkey, 1, 0, &t), Status::Ok) << good;
    EXPECT_EQ(t.idx, 1u);
  }
}

// bytes = max_msg, max_msg + 1, 2^31 - 1, 2^31: split so that no byte count
// reaches bit 31 (the inline flag).
TYPED_TEST(VerbsLimits, SplitAtTheNicMaximumNeverSetsTheInlineBit) {
  constexpr Sharing S = TypeParam::value;
  struct Case {
    uint64_t bytes;
    std::vector<uint32_t> lens;
  };
  const Case cases[] = {
      {kMax, {uint32_t(kMax)}},
      {kMax + 1, {uint32_t(kMax), 1}},
      {(uint64_t{1} << 31) - 1, {uint32_t(kMax), uint32_t(kMax) - 1}},
      {uint64_t{1} << 31, {uint32_t(kMax), uint32_t(kMax)}},
      {(uint64_t{1} << 31) + 1, {uint32_t(kMax), uint32_t(kMax), 1}},
  };
  for (const Case& c : cases) {
    for (bool is_get : {false, true}) {
      FakeRing r(4, 4, 8);  // max_msg = 2^30
      Ticket t;
      const Status st = is_get ? dev::get<S>(r.h, kDst, kLkey, 0x1000, kRkey, c.bytes, 0, &t)
                               : dev::put<S>(r.h, kSrc, kLkey, 0x1000, kRkey, c.bytes, 0, &t);
      ASSERT_EQ(st, Status::Ok) << c.bytes;
      ASSERT_EQ(t.first, 0u);
      ASSERT_EQ(t.idx, c.lens.size()) << c.bytes;
      for (uint64_t i = 0; i < c.lens.size(); ++i) {
        EXPECT_EQ(r.opcode(i), is_get ? m::kOpRdmaRead : m::kOpRdmaWrite);
        EXPECT_EQ(byte_count(r, i), c.lens[i]) << "bytes " << c.bytes << " WQE " << i;
        EXPECT_EQ(byte_count(r, i) & m::kInlineSegFlag, 0u) << "bytes " << c.bytes << " WQE " << i;
        EXPECT_EQ(r.raddr(i), 0x1000u + i * kMax);
      }
    }
  }
}

// Lengths whose WQE count is absurd are refused before anything is reserved:
// SIZE_MAX (where bytes + max_msg - 1 overflows), 2^62, and one byte past the
// bound kMaxWqesPerTransfer at max_msg 2^30 and at max_msg 1.
TYPED_TEST(VerbsLimits, AbsurdLengthsAreInvalidWithNothingPosted) {
  constexpr Sharing S = TypeParam::value;
  const size_t kBound = dev::kMaxWqesPerTransfer;
  struct Case {
    uint32_t max_msg;
    size_t bytes;
  };
  const Case cases[] = {{uint32_t(kMax), SIZE_MAX},
                        {uint32_t(kMax), SIZE_MAX - kMax + 2},
                        {uint32_t(kMax), size_t{1} << 62},
                        {uint32_t(kMax), kBound * kMax + 1},
                        {1, kBound + 1},
                        {1, SIZE_MAX}};
  for (const Case& c : cases) {
    FakeRing r(4, 4, 8, 200'000'000, c.max_msg);
    Ticket t;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(dev::put<S>(r.h, kSrc, kLkey, 0x1000, kRkey, c.bytes, 0, &t), Status::InvalidArgument)
        << "max_msg " << c.max_msg << " bytes " << c.bytes;
    EXPECT_EQ(dev::get<S>(r.h, kDst, kLkey, 0x1000, kRkey, c.bytes, 0, &t), Status::InvalidArgument)
        << "max_msg " << c.max_msg << " bytes " << c.bytes;
    EXPECT_LT(kinet::test::seconds_since(t0), 1.0);
    EXPECT_EQ(r.state.reserved, 0u);
    EXPECT_EQ(r.send_pi(), 0u);
    EXPECT_EQ(t.idx, 0u);
    EXPECT_EQ(r.state.local_error, 0u) << "a refused argument is not a QP failure";
  }
}

// The largest accepted transfer (exactly kMaxWqesPerTransfer WQEs) is posted;
// on a QP already in the error state it stops after the first reservation with
// WrFlushed (the fault came before it) and a ticket covering what it posted.
TYPED_TEST(VerbsLimits, LargestTransferOnAnErrorQpStopsAfterOneReservation) {
  constexpr Sharing S = TypeParam::value;
  for (uint32_t max_msg : {uint32_t(kMax), 1u}) {
    FakeRing r(4, 4, 8, 2'000'000'000ull, max_msg);
    Ticket bad;
    ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &bad), Status::Ok);
    r.complete(0, m::kSynRemoteAccess);
    ASSERT_EQ(dev::wait<S>(r.h, bad), Status::RemoteAccess);
    const size_t bytes = size_t{dev::kMaxWqesPerTransfer} * max_msg;
    Ticket t;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(dev::put<S>(r.h, kSrc, kLkey, 0x1000, kRkey, bytes, 0, &t), Status::WrFlushed) << max_msg;
    EXPECT_LT(kinet::test::seconds_since(t0), 1.0);
    EXPECT_EQ(r.state.reserved, 1u + 8u) << "one reservation of half the ring";
    EXPECT_EQ(t.first, 1u);
    EXPECT_EQ(t.idx, 9u);
    EXPECT_EQ(r.send_pi(), 9u) << "what was published is announced";
    EXPECT_EQ(dev::test<S>(r.h, t), Status::Pending);
  }
}

// A transfer split into several WQEs whose 2nd chunk faults reports that
// chunk's status, not WrFlushed; operations after it are flushed.
TYPED_TEST(VerbsLimits, SplitTransferReportsTheStatusOfItsFaultingChunk) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 8, 200'000'000, /*max_msg=*/100);
  Ticket before, split, after;
  ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &before), Status::Ok);  // WQE 0
  ASSERT_EQ(dev::put<S>(r.h, kSrc, kLkey, 0x1000, kRkey, 250, dev::kSignal, &split), Status::Ok);  // 1, 2, 3
  ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &after), Status::Ok);  // WQE 4
  EXPECT_EQ(split.first, 1u);
  EXPECT_EQ(split.idx, 4u);
  r.complete(0);
  r.complete(2, m::kSynLocalProt);  // the 2nd chunk
  r.complete(3, m::kSynWrFlush);
  r.complete(4, m::kSynWrFlush);
  EXPECT_EQ(dev::wait<S>(r.h, before), Status::Ok);
  EXPECT_EQ(dev::test<S>(r.h, split), Status::LocalProtection);
  EXPECT_EQ(dev::wait<S>(r.h, split), Status::LocalProtection);
  EXPECT_EQ(dev::wait<S>(r.h, after), Status::WrFlushed);
  // The exact edges of [first, idx): a fault at `first` is the ticket's own;
  // at idx it is after the ticket.
  EXPECT_EQ(dev::test<S>(r.h, Ticket{4, 2}), Status::LocalProtection);
  EXPECT_EQ(dev::test<S>(r.h, Ticket{4, 3}), Status::WrFlushed);
  EXPECT_EQ(dev::test<S>(r.h, Ticket{2, 0}), Status::Ok);
  EXPECT_EQ(dev::test<S>(r.h, Ticket{3, 0}), Status::LocalProtection) << "a hand-made Ticket{n} covers [0, n)";
  // quiet() keeps its meaning: the status of the last WQE reserved.
  EXPECT_EQ(dev::quiet<S>(r.h), Status::WrFlushed);
  EXPECT_EQ(r.state.local_error, 0u) << "error CQEs are not device-side failures";
}

// A huge transfer that faults while it is being posted (a NIC thread answers)
// returns the fault's status promptly instead of posting for minutes.
TYPED_TEST(VerbsLimits, TransferStopsPostingOnceTheQpFaulted) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(3, 3, 4, 5'000'000'000ull, /*max_msg=*/4096);  // 8 slots, reservations of 4
  constexpr uint64_t kFault = 5;
  std::atomic<bool> stop{false};
  std::thread nic([&] {
    uint64_t seen = 0;
    while (!stop.load()) {
      const uint16_t pi = static_cast<uint16_t>(r.send_pi());
      while (static_cast<uint16_t>(seen) != pi) {
        if (seen == kFault) r.complete(seen, m::kSynRemoteAccess);
        else if (r.wants_cqe(seen)) r.complete(seen, seen > kFault ? m::kSynWrFlush : 0);
        ++seen;
      }
      std::this_thread::yield();
    }
  });
  Ticket t;
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = dev::put<S>(r.h, kSrc, kLkey, 0x1000, kRkey, size_t{1} << 40, dev::kSignal, &t);
  const double secs = kinet::test::seconds_since(t0);
  const Status ws = dev::wait<S>(r.h, t);
  stop = true;
  nic.join();
  EXPECT_EQ(st, Status::RemoteAccess);
  EXPECT_LT(secs, 2.0);
  EXPECT_EQ(t.first, 0u);
  EXPECT_GT(t.idx, kFault);
  EXPECT_LE(t.idx, 64u) << "stops within a few reservations of the error CQE";
  EXPECT_EQ(t.idx, r.state.reserved) << "the ticket covers everything the transfer posted";
  EXPECT_EQ(ws, Status::RemoteAccess);
}

TYPED_TEST(VerbsLimits, TicketsNameTheirFirstAndLastWqe) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 8, 200'000'000, /*max_msg=*/64);
  alignas(8) static uint64_t scratch;
  Ticket t;
  ASSERT_EQ(dev::nop<S>(r.h, 0, &t), Status::Ok);
  EXPECT_EQ(t.first, 0u);
  EXPECT_EQ(t.idx, 1u);
  ASSERT_EQ(dev::put<S>(r.h, kSrc, kLkey, 0x1000, kRkey, 129, 0, &t), Status::Ok);
  EXPECT_EQ(t.first, 1u);
  EXPECT_EQ(t.idx, 4u);
  ASSERT_EQ(dev::put_signal<S>(r.h, kSrc, kLkey, 0x1000, kRkey, 65, 0x2000, kRkey, 1, &scratch, kLkey, 0, &t),
            Status::Ok);
  EXPECT_EQ(t.first, 4u) << "put_signal's ticket starts at its first data WQE";
  EXPECT_EQ(t.idx, 7u);
  EXPECT_EQ(r.opcode(6), m::kOpAtomicFA);
  ASSERT_EQ(dev::fetch_add<S>(r.h, &scratch, kLkey, 0x2000, kRkey, 1, 0, &t), Status::Ok);
  EXPECT_EQ(t.first, 7u);
  EXPECT_EQ(t.idx, 8u);
}

TYPED_TEST(VerbsLimits, PrepareAssertsItsByteCountInDebugBuilds) {
  constexpr Sharing S = TypeParam::value;
  FakeRing r(4, 4, 8, 200'000'000, /*max_msg=*/100);
  // Release builds do not check (documented contract); debug builds abort.
  EXPECT_DEBUG_DEATH(dev::prepare_write<S>(r.h, 0, kSrc, kLkey, 0x1000, kRkey, 101, 0), "bytes > q.max_msg");
  EXPECT_DEBUG_DEATH(dev::prepare_read<S>(r.h, 0, kDst, kLkey, 0x1000, kRkey, 101, 0), "bytes > q.max_msg");
#ifndef NDEBUG  // (a release build would write one byte past the WQE)
  uint8_t payload[64] = {};
  EXPECT_DEATH(dev::prepare_write_inline<S>(r.h, 0, payload, m::kMaxInlineOneBB + 1, 0x1000, kRkey, 0),
               "larger than one basic block");
#endif
  dev::prepare_write<S>(r.h, 1, kSrc, kLkey, 0x1000, kRkey, 100, 0);  // the edge is fine
  EXPECT_EQ(byte_count(r, 1), 100u);
}

// ---- deadlines ---------------------------------------------------------------

TEST(VerbsDeadline, SaturatesInsteadOfWrapping) {
  for (uint64_t timeout : {~uint64_t{0}, ~uint64_t{0} - 1, uint64_t{1} << 63}) {
    const kinet::dev::detail::Deadline d(timeout);
    EXPECT_EQ(d.expired(), false) << timeout;
    EXPECT_GT(d.end, kinet::now_ns()) << timeout;
  }
  const kinet::dev::detail::Deadline zero(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_TRUE(zero.expired());
}

// timeout_ns = UINT64_MAX used to wrap to "already expired": every wait failed
// at once. Now it waits until the completion comes.
TYPED_TEST(VerbsLimits, HugeTimeoutWaitsForTheCompletion) {
  constexpr Sharing S = TypeParam::value;
  for (uint64_t timeout : {~uint64_t{0}, ~uint64_t{0} - 12345}) {
    FakeRing r(4, 4, 8, timeout);
    Ticket t;
    ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &t), Status::Ok);
    std::thread nic([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      r.complete(0);
    });
    const Status st = dev::wait<S>(r.h, t);
    nic.join();
    EXPECT_EQ(st, Status::Ok) << timeout;
    EXPECT_EQ(r.state.local_error, 0u);
  }
}

// ---- SqState::local_error: the first device-side failure, for the host ------

TYPED_TEST(VerbsLimits, LocalErrorRecordsTheFirstFailure) {
  constexpr Sharing S = TypeParam::value;
  {  // full ring, nothing completes: TimeoutSqSpace, then QpBroken does not overwrite it
    FakeRing r(2, 2, 2, 20'000'000);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(dev::nop<S>(r.h, 0), Status::Ok);
    EXPECT_EQ(r.state.local_error, 0u) << "successful posts leave no reason";
    EXPECT_EQ(dev::nop<S>(r.h, 0), Status::TimeoutSqSpace);
    EXPECT_EQ(r.state.local_error, uint8_t(Status::TimeoutSqSpace));
    EXPECT_EQ(dev::nop<S>(r.h, 0), Status::QpBroken);
    EXPECT_EQ(r.state.local_error, uint8_t(Status::TimeoutSqSpace)) << "the first failure wins";
  }
  {  // a completion that never comes
    FakeRing r(4, 4, 8, 20'000'000);
    Ticket t;
    ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &t), Status::Ok);
    EXPECT_EQ(dev::wait<S>(r.h, t), Status::TimeoutCompletion);
    EXPECT_EQ(r.state.local_error, uint8_t(Status::TimeoutCompletion));
    EXPECT_EQ(dev::quiet<S>(r.h), Status::TimeoutCompletion);
    EXPECT_EQ(r.state.local_error, uint8_t(Status::TimeoutCompletion));
  }
  {  // a QP broken by someone else: the verb that reports it records QpBroken
    for (int which = 0; which < 3; ++which) {
      FakeRing r(4, 4, 8, 20'000'000);
      Ticket t;
      ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &t), Status::Ok);
      r.state.broken = 1;
      uint64_t first;
      const Status st = which == 0   ? dev::reserve<S>(r.h, 1, &first)
                        : which == 1 ? dev::try_reserve<S>(r.h, 1, &first)
                                     : dev::wait<S>(r.h, t);
      EXPECT_EQ(st, Status::QpBroken) << which;
      EXPECT_EQ(r.state.local_error, uint8_t(Status::QpBroken)) << which;
    }
  }
  {  // a wait bounded by a zero timeout still records why it ended
    FakeRing r(4, 4, 8, 0);
    Ticket t;
    ASSERT_EQ(dev::nop<S>(r.h, dev::kSignal, &t), Status::Ok);
    EXPECT_EQ(dev::wait<S>(r.h, t), Status::TimeoutCompletion);
    EXPECT_EQ(r.state.local_error, uint8_t(Status::TimeoutCompletion));
  }
}

template <Sharing S> void shared_mode_lock_and_order_failures() {
  {  // the doorbell lock is held forever by a thread that died
    FakeRing r(4, 4, 8, 20'000'000);
    uint64_t first = 0;
    ASSERT_EQ(dev::reserve<S>(r.h, 1, &first), Status::Ok);
    dev::prepare_nop<S>(r.h, first, 0);
    ASSERT_EQ(dev::publish<S>(r.h, first, 1), Status::Ok);
    r.state.db_lock = 1;
    EXPECT_EQ(dev::ring_doorbell<S>(r.h, first + 1), Status::TimeoutLock);
    EXPECT_EQ(r.state.local_error, uint8_t(Status::TimeoutLock));
    EXPECT_EQ(r.send_pi(), 0u);
  }
  {  // an earlier reservation is never published
    FakeRing r(4, 4, 8, 20'000'000);
    uint64_t a = 0, b = 0;
    ASSERT_EQ(dev::reserve<S>(r.h, 1, &a), Status::Ok);
    ASSERT_EQ(dev::reserve<S>(r.h, 1, &b), Status::Ok);
    dev::prepare_nop<S>(r.h, b, 0);
    EXPECT_EQ(dev::publish<S>(r.h, b, 1), Status::TimeoutPublishOrder);
    EXPECT_EQ(r.state.local_error, uint8_t(Status::TimeoutPublishOrder));
    uint64_t c;
    EXPECT_EQ(dev::reserve<S>(r.h, 1, &c), Status::QpBroken);
    EXPECT_EQ(r.state.local_error, uint8_t(Status::TimeoutPublishOrder)) << "the first failure wins";
  }
}
TEST(VerbsLocalError, CtaLockAndPublishOrder) { shared_mode_lock_and_order_failures<Sharing::Cta>(); }
TEST(VerbsLocalError, GpuLockAndPublishOrder) { shared_mode_lock_and_order_failures<Sharing::Gpu>(); }

// Many threads fail at once: exactly one reason is kept, and it is one of theirs.
TEST(VerbsLocalError, ConcurrentFailuresKeepOneReason) {
  FakeRing r(2, 2, 2, 30'000'000);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(dev::nop<Sharing::Gpu>(r.h, 0), Status::Ok);
  std::vector<std::thread> ths;
  std::atomic<int> timeouts{0}, broken{0}, other{0};
  for (int i = 0; i < 4; ++i)
    ths.emplace_back([&] {
      const Status st = dev::nop<Sharing::Gpu>(r.h, 0);
      (st == Status::TimeoutSqSpace ? timeouts : st == Status::QpBroken ? broken : other)++;
    });
  for (auto& th : ths) th.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GE(timeouts.load(), 1);
  EXPECT_EQ(std::atomic_ref<uint8_t>(r.state.local_error).load(), uint8_t(Status::TimeoutSqSpace));
}

}  // namespace
