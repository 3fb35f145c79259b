// End-to-end data path through the software NIC: the cases of data_cases.hpp
// (shared with the hw suite) on two "emu" devices, and what only the software
// NIC can be asked (its emu_max_msg limit, several devices in one process).
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "data_cases.hpp"
#include "emu_preamble.hpp"
#include "sharing_modes.hpp"

namespace {
namespace cases = kinet::test::cases;
using cases::with_cfg;

template <class T> class EmuData : public ::testing::Test {};
TYPED_TEST_SUITE(EmuData, SharingModes, SharingModeNames);

TYPED_TEST(EmuData, PutEverySize) { cases::PutEverySize<TypeParam::value>(); }

TYPED_TEST(EmuData, PutZeroBytesIsANoOp) { cases::PutZeroBytesIsANoOp<TypeParam::value>(); }

TYPED_TEST(EmuData, PutInlineEverySizeAndSourceReusableOnReturn) {
  cases::PutInlineEverySizeAndSourceReusableOnReturn<TypeParam::value>();
}

TYPED_TEST(EmuData, GetEverySize) { cases::GetEverySize<TypeParam::value>(); }

TYPED_TEST(EmuData, FetchAddReturnsOldAndUpdatesRemote) {
  cases::FetchAddReturnsOldAndUpdatesRemote<TypeParam::value>();
}

TYPED_TEST(EmuData, CompareSwapSuccessAndFailure) { cases::CompareSwapSuccessAndFailure<TypeParam::value>(); }

TYPED_TEST(EmuData, NopCompletes) { cases::NopCompletes<TypeParam::value>(); }

// put_signal: the target sees the signal word move and then finds the
// payload of that put (and of every earlier one) in place.
TYPED_TEST(EmuData, PutSignalDataVisibleWhenSignalSeen) {
  cases::PutSignalDataVisibleWhenSignalSeen<TypeParam::value>();
}

// ---------------------------------------------------------------------------

TEST(EmuSplit, TransferLargerThanDeviceMaxMsgIsSplit) {
  KINET_TEST_RNG(rng);
  PairOptions o = with_cfg(test_qp_config());
  o.dev_a.emu_max_msg = 4096;
  o.dev_b.emu_max_msg = 4096;
  EmuPair p(o);
  EXPECT_EQ(p.da->attr().max_msg, 4096u);
  const auto h = p.h();
  ASSERT_EQ(h.max_msg, 4096u) << "QpConfig.max_msg 0 = the device's max";
  const size_t n = (1u << 20) + 13;
  Region& src = p.reg_a(n + 64);
  Region& back = p.reg_a(n + 64);
  Region& dst = p.reg_b(n + 64);
  fill_random(rng, dst.p(), n + 64);
  fill_distinct(rng, src.p(), dst.p() + 3, n);
  fill_distinct(rng, back.p(), src.p(), n + 64);
  std::vector<uint8_t> want(dst.p(), dst.p() + n + 64);
  std::memcpy(want.data() + 3, src.p(), n);
  std::vector<uint8_t> back_want(back.p(), back.p() + n + 64);
  std::memcpy(back_want.data() + 1, src.p(), n);

  Ticket t;
  const uint64_t before = h.state->reserved;
  ASSERT_EQ(dev::put<Sharing::Exclusive>(h, src.p(), src.lkey(), dst.addr() + 3, dst.rkey(), n, 0, &t), Status::Ok);
  EXPECT_EQ(t.idx - before, (n + 4095) / 4096) << "one WQE per 4096 bytes";
  ASSERT_EQ(dev::wait<Sharing::Exclusive>(h, t), Status::Ok) << p.qa->last_error();
  EXPECT_TRUE(bytes_equal(dst.p(), want.data(), n + 64, "split put"));
  // And back, split the same way.
  ASSERT_EQ(dev::get<Sharing::Exclusive>(h, back.p() + 1, back.lkey(), dst.addr() + 3, dst.rkey(), n, 0, &t),
            Status::Ok);
  ASSERT_EQ(dev::wait<Sharing::Exclusive>(h, t), Status::Ok) << p.qa->last_error();
  EXPECT_TRUE(bytes_equal(back.p(), back_want.data(), n + 64, "split get"));
}

TEST(EmuSplit, QpMaxMsgBelowDeviceMax) { cases::QpMaxMsgBelowDeviceMax(); }

TEST(EmuSignalling, UnsignalledTicketStillCompletes) { cases::UnsignalledTicketStillCompletes(); }

TEST(EmuSignalling, TestIsPendingBeforeCompletionAndTicketZeroIsOk) {
  cases::TestIsPendingBeforeCompletionAndTicketZeroIsOk();
}

TEST(EmuDoorbell, BatchedOpsRunOnlyAfterOneDoorbell) { cases::BatchedOpsRunOnlyAfterOneDoorbell(); }

// Mixed operations over a 16-slot ring, > 100 laps, each op verified.
TEST(EmuRing, WrapAroundManyLapsMixedOps) { cases::WrapAroundManyLapsMixedOps(); }

// More than 2^16 WQEs: the 16-bit WQE counter of CQEs and of the doorbell
// record wraps; the library's 64-bit indices must not.
TEST(EmuRing, SixteenBitCounterWraps) { cases::SixteenBitCounterWraps(); }

TEST(EmuRing, TryReserveNoSpaceOnFullRingDoesNotBlock) { cases::TryReserveNoSpaceOnFullRingDoesNotBlock(); }

// kFence: the write waits for the earlier read of this QP, so the read
// returns the bytes from before the write.
TEST(EmuOrdering, ReadThenFencedWriteToSameAddress) { cases::ReadThenFencedWriteToSameAddress(); }

// Both directions at once: each side's engine executes its own QP's WQEs
// against the other side's memory.
TEST(EmuTopology, BothDirectionsConcurrently) { cases::BothDirectionsConcurrently(); }

TEST(EmuTopology, LoopbackBetweenTwoQpsOfOneDevice) {
  KINET_TEST_RNG(rng);
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q1 = pd->create_qp(test_qp_config(32));
  auto q2 = pd->create_qp(test_qp_config(32));
  q1->connect(q2->info());
  q2->connect(q1->info());
  {
    Region src = make_region(*pd, 8192), dst = make_region(*pd, 8192);
    fill_random(rng, dst.p(), 8192);
    fill_distinct(rng, src.p(), dst.p(), 8192);
    Ticket t;
    ASSERT_EQ(dev::put<Sharing::Exclusive>(q1->handle(), src.p(), src.lkey(), dst.addr(), dst.rkey(), 8192, 0, &t),
              Status::Ok);
    ASSERT_EQ(dev::wait<Sharing::Exclusive>(q1->handle(), t), Status::Ok) << q1->last_error();
    EXPECT_TRUE(bytes_equal(dst.p(), src.p(), 8192, "loopback put"));
    // And the other direction.
    fill_distinct(rng, dst.p(), src.p(), 8192);
    ASSERT_EQ(dev::put<Sharing::Exclusive>(q2->handle(), dst.p(), dst.lkey(), src.addr(), src.rkey(), 8192, 0, &t),
              Status::Ok);
    ASSERT_EQ(dev::wait<Sharing::Exclusive>(q2->handle(), t), Status::Ok) << q2->last_error();
    EXPECT_TRUE(bytes_equal(src.p(), dst.p(), 8192, "loopback put back"));
  }
}

TEST(EmuTopology, SeveralQpPairsBetweenTwoDevicesDoNotInterfere) {
  KINET_TEST_RNG(rng);
  auto da = kinet::Device::open("emu");
  auto db = kinet::Device::open("emu");
  auto pa = da->alloc_pd();
  auto pb = db->alloc_pd();
  constexpr int kQps = 4;
  std::vector<std::unique_ptr<kinet::QueuePair>> qa, qb;
  for (int i = 0; i < kQps; ++i) {
    qa.push_back(pa->create_qp(test_qp_config(16)));
    qb.push_back(pb->create_qp(test_qp_config(16)));
  }
  for (int i = 0; i < kQps; ++i) {
    qa[i]->connect(qb[i]->info());
    qb[i]->connect(qa[i]->info());
  }
  {
    Region src = make_region(*pa, 4096 * kQps), dst = make_region(*pb, 4096 * kQps);
    for (int round = 0; round < 20; ++round) {
      fill_random(rng, dst.p(), 4096 * kQps);
      fill_distinct(rng, src.p(), dst.p(), 4096 * kQps);
      for (int k = 0; k < 16; ++k)  // interleave: 16 chunks of 256 B per QP
        for (int i = 0; i < kQps; ++i)
          ASSERT_EQ(dev::put<Sharing::Exclusive>(qa[i]->handle(), src.p() + 4096 * i + 256 * k, src.lkey(),
                                                 dst.addr() + 4096 * i + 256 * k, dst.rkey(), 256, 0),
                    Status::Ok);
      for (int i = 0; i < kQps; ++i)
        ASSERT_EQ(dev::quiet<Sharing::Exclusive>(qa[i]->handle()), Status::Ok) << qa[i]->last_error();
      ASSERT_TRUE(bytes_equal(dst.p(), src.p(), 4096 * kQps, "round " + std::to_string(round)));
    }
  }
  qa.clear();
  qb.clear();
}

}  // namespace
