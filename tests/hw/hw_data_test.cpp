// The hw suite: the software-NIC data suite's cases (tests/emu/data_cases.hpp)
// and fault cases (tests/emu/fault_rig.hpp) on a real ConnectX through the
// mlx5 provider, posted by host threads: every operation byte for byte, more
// WQEs than ring slots, error CQEs with their exact PRM syndromes, a QP in
// error flushing. The device: $KINET_HW_DEVICE or the first mlx5 device
// (hw_device.hpp); with none every test is SKIPPED, saying exactly why.
// With KINET_HW_DEVICE=mlx5_emu the same tests run on the mlx5 provider over
// the software NIC (ctest: hw.on_mlx5_emu), which proves they can pass and fail.
#include "concurrency_cases.hpp"
#include "data_cases.hpp"
#include "fault_rig.hpp"
#include "hw_device.hpp"
#include "kinet/mlx5/syndrome.hpp"
#include "sharing_modes.hpp"

namespace {
using kinet::QpState;
using kinet::Status;
using kinet::dev::QpHandle;
using kinet::dev::Sharing;
using kinet::dev::Ticket;
namespace dev = kinet::dev;
namespace m = kinet::mlx5;
namespace cases = kinet::test::cases;
namespace hw = kinet::test::hw;
using namespace kinet::test;
constexpr Sharing X = Sharing::Exclusive;

// ---- what was opened ------------------------------------------------------------------

TEST(HwDevice, OpensAsTheMlx5ProviderAndConnects) {
  KINET_HW_DEVICE_OR_SKIP();
  EmuPair p(cases::with_cfg(test_qp_config(64), hw::devices()));
  EXPECT_EQ(p.da->attr().provider, "mlx5") << p.da->name();
  EXPECT_EQ(p.qa->info().provider, 2) << "ConnectX RC wire";
  EXPECT_EQ(p.qa->state(), QpState::Rts);
  EXPECT_EQ(p.qb->state(), QpState::Rts);
  const QpHandle h = p.h();
  EXPECT_EQ(h.abi, dev::kQpHandleAbi);
  EXPECT_EQ(h.size(), 64u);
  EXPECT_EQ(h.qpn, p.qa->qpn());
  EXPECT_GE(h.max_msg, 1u << 20) << "the transfers below need 1 MiB WQEs";
  EXPECT_EQ(p.qa->last_error(), "");
}

// ---- every operation, byte for byte (host threads; each sharing mode) ---------------

template <class T> class HwData : public ::testing::Test {};
TYPED_TEST_SUITE(HwData, SharingModes, SharingModeNames);

#define KINET_HW_TYPED_CASE(Name)                 \
  TYPED_TEST(HwData, Name) {                      \
    KINET_HW_DEVICE_OR_SKIP();                    \
    cases::Name<TypeParam::value>(hw::devices()); \
  }
KINET_HW_TYPED_CASE(PutEverySize)
KINET_HW_TYPED_CASE(PutZeroBytesIsANoOp)
KINET_HW_TYPED_CASE(PutInlineEverySizeAndSourceReusableOnReturn)
KINET_HW_TYPED_CASE(GetEverySize)
KINET_HW_TYPED_CASE(FetchAddReturnsOldAndUpdatesRemote)
KINET_HW_TYPED_CASE(CompareSwapSuccessAndFailure)
KINET_HW_TYPED_CASE(NopCompletes)
KINET_HW_TYPED_CASE(PutSignalDataVisibleWhenSignalSeen)

#define KINET_HW_CASE(Suite, Name) \
  TEST(Suite, Name) {              \
    KINET_HW_DEVICE_OR_SKIP();     \
    cases::Name(hw::devices());    \
  }
KINET_HW_CASE(HwSplit, QpMaxMsgBelowDeviceMax)
KINET_HW_CASE(HwSignalling, UnsignalledTicketStillCompletes)
KINET_HW_CASE(HwSignalling, TestIsPendingBeforeCompletionAndTicketZeroIsOk)
KINET_HW_CASE(HwDoorbell, BatchedOpsRunOnlyAfterOneDoorbell)
KINET_HW_CASE(HwRing, WrapAroundManyLapsMixedOps)
KINET_HW_CASE(HwRing, SixteenBitCounterWraps)
KINET_HW_CASE(HwRing, TryReserveNoSpaceOnFullRingDoesNotBlock)
KINET_HW_CASE(HwOrdering, ReadThenFencedWriteToSameAddress)
KINET_HW_CASE(HwTopology, BothDirectionsConcurrently)

// ---- host threads sharing one QP (concurrency_cases.hpp) ------------------------------

TEST(HwConcurrency, EightThreadsShareOneQpCta) {
  KINET_HW_DEVICE_OR_SKIP();
  cases::shared_qp<Sharing::Cta>(test_threads(8), hw::devices());
}
TEST(HwConcurrency, EightThreadsShareOneQpGpu) {
  KINET_HW_DEVICE_OR_SKIP();
  cases::shared_qp<Sharing::Gpu>(test_threads(8), hw::devices());
}

// ---- error CQEs: exact syndromes, then everything after is flushed -------------------

// A key the device never handed out: the same mkey index with another key
// byte (the low 8 bits), so it can't be another live region's key.
kinet::Rkey bad_rkey(const Region& r) { return kinet::Rkey{r.rkey().be ^ htobe32(0x5a)}; }
kinet::Lkey bad_lkey(const Region& r) { return kinet::Lkey{r.lkey().be ^ htobe32(0x5a)}; }

// The words last_error() has for this syndrome on the mlx5 provider (it reports the CQE, no NIC text).
std::string syndrome_words(uint8_t syn) {
  char b[32];
  std::snprintf(b, sizeof b, "CQE syndrome 0x%x,", syn);
  return b;
}

void run_fault(FaultRig& r, std::mt19937_64& rng, const BadOp& bad, Status want, uint8_t syn) {
  const std::string words = syndrome_words(syn);
  r.run(rng, bad, want, {words.c_str()}, syn);
}

PairOptions hw_fault_options(uint32_t access_b = kinet::kAccessAll) { return fault_options(access_b, hw::devices()); }

TEST(HwFault, BadRkeyOnWrite) {
  KINET_HW_DEVICE_OR_SKIP();
  KINET_TEST_RNG(rng);
  FaultRig r(hw_fault_options());
  run_fault(
      r, rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::put<X>(h, r.la->p(), r.la->lkey(), r.rb->addr(), bad_rkey(*r.rb), 512, 0, t);
      },
      Status::RemoteAccess, m::kSynRemoteAccess);
}

TEST(HwFault, BadRkeyOnRead) {
  KINET_HW_DEVICE_OR_SKIP();
  KINET_TEST_RNG(rng);
  FaultRig r(hw_fault_options());
  run_fault(
      r, rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::get<X>(h, r.la->p() + 2048, r.la->lkey(), r.rb->addr(), bad_rkey(*r.rb), 512, 0, t);
      },
      Status::RemoteAccess, m::kSynRemoteAccess);
}

TEST(HwFault, BadRkeyOnInlinePut) {
  KINET_HW_DEVICE_OR_SKIP();
  KINET_TEST_RNG(rng);
  FaultRig r(hw_fault_options());
  run_fault(
      r, rng,
      [&](const QpHandle& h, Ticket* t) {
        const uint8_t d[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        return dev::put_inline<X>(h, d, 8, r.rb->addr(), bad_rkey(*r.rb), 0, t);
      },
      Status::RemoteAccess, m::kSynRemoteAccess);
}

TEST(HwFault, BadLkey) {
  KINET_HW_DEVICE_OR_SKIP();
  KINET_TEST_RNG(rng);
  FaultRig r(hw_fault_options());
  run_fault(
      r, rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::put<X>(h, r.la->p(), bad_lkey(*r.la), r.rb->addr(), r.rb->rkey(), 512, 0, t);
      },
      Status::LocalProtection, m::kSynLocalProt);
}

// One byte past the end: the edge itself.
TEST(HwFault, WriteOneBytePastTheRegion) {
  KINET_HW_DEVICE_OR_SKIP();
  KINET_TEST_RNG(rng);
  FaultRig r(hw_fault_options());
  run_fault(
      r, rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::put<X>(h, r.la->p(), r.la->lkey(), r.rb->addr() + r.rb->len - 100, r.rb->rkey(), 101, 0, t);
      },
      Status::RemoteAccess, m::kSynRemoteAccess);
}

TEST(HwFault, ReadBelowTheRegion) {
  KINET_HW_DEVICE_OR_SKIP();
  KINET_TEST_RNG(rng);
  FaultRig r(hw_fault_options());
  run_fault(
      r, rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::get<X>(h, r.la->p() + 2048, r.la->lkey(), r.rb->addr() - 8, r.rb->rkey(), 64, 0, t);
      },
      Status::RemoteAccess, m::kSynRemoteAccess);
}

TEST(HwFault, AtomicPastTheRegion) {
  KINET_HW_DEVICE_OR_SKIP();
  KINET_TEST_RNG(rng);
  FaultRig r(hw_fault_options());
  run_fault(
      r, rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::fetch_add<X>(h, r.res->u64(0), r.res->lkey(), r.rb->addr() + r.rb->len, r.rb->rkey(), 1, 0, t);
      },
      Status::RemoteAccess, m::kSynRemoteAccess);
}

TEST(HwFault, RegionWithoutRemoteWrite) {
  KINET_HW_DEVICE_OR_SKIP();
  KINET_TEST_RNG(rng);
  FaultRig r(hw_fault_options());
  Region& ro = r.p.reg_b(4096, kinet::kLocalWrite | kinet::kRemoteRead | kinet::kRemoteAtomic);
  run_fault(
      r, rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::put<X>(h, r.la->p(), r.la->lkey(), ro.addr(), ro.rkey(), 256, 0, t);
      },
      Status::RemoteAccess, m::kSynRemoteAccess);
}

TEST(HwFault, RegionWithoutRemoteRead) {
  KINET_HW_DEVICE_OR_SKIP();
  KINET_TEST_RNG(rng);
  FaultRig r(hw_fault_options());
  Region& wo = r.p.reg_b(4096, kinet::kLocalWrite | kinet::kRemoteWrite | kinet::kRemoteAtomic);
  run_fault(
      r, rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::get<X>(h, r.la->p() + 2048, r.la->lkey(), wo.addr(), wo.rkey(), 256, 0, t);
      },
      Status::RemoteAccess, m::kSynRemoteAccess);
}

TEST(HwFault, RegionWithoutRemoteAtomic) {
  KINET_HW_DEVICE_OR_SKIP();
  KINET_TEST_RNG(rng);
  FaultRig r(hw_fault_options());
  Region& na = r.p.reg_b(4096, kinet::kLocalWrite | kinet::kRemoteWrite | kinet::kRemoteRead);
  run_fault(
      r, rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::compare_swap<X>(h, r.res->u64(0), r.res->lkey(), na.addr(), na.rkey(), 1, 2, 0, t);
      },
      Status::RemoteAccess, m::kSynRemoteAccess);
}

TEST(HwFault, TargetQpDoesNotAcceptRemoteWrite) {
  KINET_HW_DEVICE_OR_SKIP();
  KINET_TEST_RNG(rng);
  FaultRig r(hw_fault_options(kinet::kRemoteRead | kinet::kRemoteAtomic));
  run_fault(
      r, rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::put<X>(h, r.la->p(), r.la->lkey(), r.rb->addr() + 3000, r.rb->rkey(), 256, 0, t);
      },
      Status::RemoteAccess, m::kSynRemoteAccess);
}

// The host moves the QP to ERROR: what is posted then completes flushed
// (syndrome 0x05) and changes nothing.
TEST(HwFault, QpInErrorFlushes) {
  KINET_HW_DEVICE_OR_SKIP();
  qp_in_error_flushes(hw_fault_options(), {"CQE syndrome 0x5,"});
}

}  // namespace
