// kinet tests — the data-path cases: every operation byte for byte, ring
// wrap-around, doorbell batching, ordering, on any pair of devices that run the
// mlx5 wire format. Host threads post with the device verbs on QP a against
// memory registered on device b; every byte is checked against fresh random
// data, and bytes outside what an operation should touch are checked
// unchanged. The software-NIC data suite (tests/emu/data_path_test.cpp) runs
// them on "emu", the hw suite (tests/hw) on a ConnectX; `devices` names the
// two devices (PairOptions::device_a/_b), everything else is the case's own.
#pragma once
#include <endian.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "emu_fixture.hpp"

namespace kinet::test::cases {

using dev::Sharing;
using dev::Ticket;

// The devices of `devices` with QP config c on both sides.
inline PairOptions with_cfg(const QpConfig& c, const PairOptions& devices = {}) {
  PairOptions o;
  o.device_a = devices.device_a;
  o.device_b = devices.device_b;
  o.cfg_a = c;
  o.cfg_b = c;
  return o;
}

inline std::vector<size_t> transfer_sizes(std::mt19937_64& rng) {
  std::vector<size_t> s = {1,  2,  3,  5,   7,   8,    9,    13,   15,   16,    17,    31,
                           63, 64, 65, 127, 255, 1000, 4095, 4096, 4097, 65535, 65537, 1u << 20};
  for (int i = 0; i < 6; ++i) s.push_back((rng() % (1u << 20)) | 1);  // random odd sizes
  return s;
}

template <Sharing S> void PutEverySize(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  EmuPair p(with_cfg(test_qp_config(), devices));
  const size_t kMax = (1u << 20) + 64;
  Region& src = p.reg_a(kMax);
  Region& dst = p.reg_b(kMax);
  fill_random(rng, dst.p(), kMax);
  std::vector<uint8_t> want(dst.p(), dst.p() + kMax);
  const auto h = p.h();
  for (size_t n : transfer_sizes(rng)) {
    SCOPED_TRACE("size " + std::to_string(n));
    const size_t lo = rng() % 64, ro = rng() % 64;  // unaligned addresses too
    fill_distinct(rng, src.p() + lo, want.data() + ro, n);
    std::memcpy(want.data() + ro, src.p() + lo, n);
    Ticket t;
    const uint32_t flags = (rng() & 1) ? uint32_t(dev::kSignal) : 0u;
    ASSERT_EQ(dev::put<S>(h, src.p() + lo, src.lkey(), dst.addr() + ro, dst.rkey(), n, flags, &t), Status::Ok);
    ASSERT_EQ(dev::wait<S>(h, t), Status::Ok) << p.qa->last_error();
    ASSERT_TRUE(bytes_equal(dst.p(), want.data(), kMax, "target region after put"));
  }
  EXPECT_EQ(p.qa->state(), kinet::QpState::Rts);
  EXPECT_EQ(p.qa->last_error(), "");
}

template <Sharing S> void PutZeroBytesIsANoOp(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  EmuPair p(with_cfg(test_qp_config(), devices));
  Region& src = p.reg_a(64);
  Region& dst = p.reg_b(64);
  fill_random(rng, src.p(), 64);
  fill_distinct(rng, dst.p(), src.p(), 64);
  std::vector<uint8_t> want(dst.p(), dst.p() + 64);
  Ticket t;
  ASSERT_EQ(dev::put<S>(p.h(), src.p(), src.lkey(), dst.addr(), dst.rkey(), 0, dev::kSignal, &t), Status::Ok);
  EXPECT_EQ(dev::wait<S>(p.h(), t), Status::Ok) << p.qa->last_error();
  EXPECT_TRUE(bytes_equal(dst.p(), want.data(), 64, "target after a 0-byte put"));
}

template <Sharing S> void PutInlineEverySizeAndSourceReusableOnReturn(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  EmuPair p(with_cfg(test_qp_config(), devices));
  Region& dst = p.reg_b(4096);
  fill_random(rng, dst.p(), 4096);
  std::vector<uint8_t> want(dst.p(), dst.p() + 4096);
  const auto h = p.h();
  for (uint32_t n = 1; n <= kinet::mlx5::kMaxInlineOneBB; ++n) {
    SCOPED_TRACE("inline size " + std::to_string(n));
    const size_t ro = rng() % (4096 - 32);
    uint8_t payload[32];
    fill_distinct(rng, payload, want.data() + ro, n);
    std::memcpy(want.data() + ro, payload, n);
    Ticket t;
    ASSERT_EQ(dev::put_inline<S>(h, payload, n, dst.addr() + ro, dst.rkey(), 0, &t), Status::Ok);
    // The payload lives in the WQE: the source may change right away.
    std::memset(payload, 0, sizeof payload);
    ASSERT_EQ(dev::wait<S>(h, t), Status::Ok) << p.qa->last_error();
    ASSERT_TRUE(bytes_equal(dst.p(), want.data(), 4096, "target after put_inline"));
  }
  // 29 bytes does not fit one basic block: rejected before anything is posted.
  uint8_t big[64];
  fill_random(rng, big, sizeof big);
  const uint64_t reserved = h.state->reserved;
  EXPECT_EQ(dev::put_inline<S>(h, big, 29, dst.addr(), dst.rkey()), Status::InvalidArgument);
  EXPECT_EQ(dev::put_inline<S>(h, big, 64, dst.addr(), dst.rkey()), Status::InvalidArgument);
  EXPECT_EQ(h.state->reserved, reserved);
  EXPECT_EQ(dev::quiet<S>(h), Status::Ok);
  EXPECT_TRUE(bytes_equal(dst.p(), want.data(), 4096, "target after rejected put_inline"));
}

template <Sharing S> void GetEverySize(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  EmuPair p(with_cfg(test_qp_config(), devices));
  const size_t kMax = (1u << 20) + 64;
  Region& local = p.reg_a(kMax);
  Region& remote = p.reg_b(kMax);
  fill_random(rng, local.p(), kMax);
  std::vector<uint8_t> want(local.p(), local.p() + kMax);
  const auto h = p.h();
  for (size_t n : transfer_sizes(rng)) {
    SCOPED_TRACE("size " + std::to_string(n));
    const size_t lo = rng() % 64, ro = rng() % 64;
    fill_distinct(rng, remote.p() + ro, want.data() + lo, n);
    std::memcpy(want.data() + lo, remote.p() + ro, n);
    std::vector<uint8_t> remote_before(remote.p(), remote.p() + kMax);
    Ticket t;
    ASSERT_EQ(dev::get<S>(h, local.p() + lo, local.lkey(), remote.addr() + ro, remote.rkey(), n, 0, &t), Status::Ok);
    ASSERT_EQ(dev::wait<S>(h, t), Status::Ok) << p.qa->last_error();
    ASSERT_TRUE(bytes_equal(local.p(), want.data(), kMax, "local region after get"));
    ASSERT_TRUE(bytes_equal(remote.p(), remote_before.data(), kMax, "remote region after get (must be unchanged)"));
  }
}

template <Sharing S> void FetchAddReturnsOldAndUpdatesRemote(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  EmuPair p(with_cfg(test_qp_config(), devices));
  Region& res = p.reg_a(4096);
  Region& rem = p.reg_b(4096);
  fill_random(rng, res.p(), 4096);
  fill_random(rng, rem.p(), 4096);
  const auto h = p.h();
  for (int i = 0; i < 64; ++i) {
    const size_t slot = 8 * (rng() % 512);
    const size_t rslot = 8 * (rng() % 512);
    std::vector<uint8_t> rem_before(rem.p(), rem.p() + 4096);
    const uint64_t old = *rem.u64(slot);
    *res.u64(rslot) = random_u64(rng, old);
    const uint64_t add = i == 0 ? ~uint64_t{0} : random_u64(rng);  // includes wrap-around (adding -1)
    Ticket t;
    ASSERT_EQ(dev::fetch_add<S>(h, res.u64(rslot), res.lkey(), rem.addr() + slot, rem.rkey(), add, 0, &t), Status::Ok);
    ASSERT_EQ(dev::wait<S>(h, t), Status::Ok) << p.qa->last_error();
    EXPECT_EQ(*res.u64(rslot), old) << "old value returned";
    EXPECT_EQ(*rem.u64(slot), old + add) << "remote updated";
    std::memcpy(rem_before.data() + slot, rem.u64(slot), 8);
    ASSERT_TRUE(bytes_equal(rem.p(), rem_before.data(), 4096, "remote bytes around the atomic"));
  }
}

template <Sharing S> void CompareSwapSuccessAndFailure(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  EmuPair p(with_cfg(test_qp_config(), devices));
  Region& res = p.reg_a(64);
  Region& rem = p.reg_b(64);
  fill_random(rng, res.p(), 64);
  fill_random(rng, rem.p(), 64);
  const auto h = p.h();
  for (int i = 0; i < 32; ++i) {
    const uint64_t old = *rem.u64(8);
    const uint64_t swp = random_u64(rng, old);
    const bool succeed = i % 2 == 0;
    const uint64_t cmp = succeed ? old : random_u64(rng, old);
    *res.u64(16) = random_u64(rng, old);
    Ticket t;
    ASSERT_EQ(dev::compare_swap<S>(h, res.u64(16), res.lkey(), rem.addr() + 8, rem.rkey(), cmp, swp, dev::kSignal, &t),
              Status::Ok);
    ASSERT_EQ(dev::wait<S>(h, t), Status::Ok) << p.qa->last_error();
    EXPECT_EQ(*res.u64(16), old) << "old value returned (" << (succeed ? "success" : "failure") << " case)";
    EXPECT_EQ(*rem.u64(8), succeed ? swp : old) << (succeed ? "swapped" : "unchanged on mismatch");
  }
}

template <Sharing S> void NopCompletes(const PairOptions& devices = {}) {
  EmuPair p(with_cfg(test_qp_config(), devices));
  const auto h = p.h();
  Ticket t1, t2;
  ASSERT_EQ(dev::nop<S>(h, dev::kSignal, &t1), Status::Ok);
  EXPECT_EQ(dev::wait<S>(h, t1), Status::Ok);
  ASSERT_EQ(dev::nop<S>(h, 0, &t2), Status::Ok);
  EXPECT_EQ(dev::wait<S>(h, t2), Status::Ok);
  EXPECT_EQ(t2.idx, t1.idx + 1);
}

// put_signal: the target sees the signal word move and then finds the
// payload of that put (and of every earlier one) in place.
template <Sharing S> void PutSignalDataVisibleWhenSignalSeen(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  EmuPair p(with_cfg(test_qp_config(16), devices));  // 16 slots: the loop laps the ring
  const uint32_t kOps = static_cast<uint32_t>(scaled(200, 40));
  const size_t kSlot = 4096;
  Region& src = p.reg_a(kSlot * kOps);
  Region& scratch = p.reg_a(64);
  Region& dst = p.reg_b(kSlot * kOps);
  Region& sig = p.reg_b(64);
  fill_random(rng, dst.p(), kSlot * kOps);
  std::vector<size_t> len(kOps);
  for (uint32_t i = 0; i < kOps; ++i) {
    len[i] = 1 + rng() % kSlot;
    fill_distinct(rng, src.p() + i * kSlot, dst.p() + i * kSlot, len[i]);
  }
  const uint64_t sig0 = random_u64(rng) >> 1;
  *sig.u64(0) = sig0;
  // The target: a thread that watches the signal word only.
  std::atomic<int> failures{0};
  std::string first_failure;
  std::thread target([&] {
    for (uint32_t i = 0; i < kOps; ++i) {
      const bool seen = wait_until(
          [&] { return std::atomic_ref<uint64_t>(*sig.u64(0)).load(std::memory_order_acquire) - sig0 >= i + 1; },
          std::chrono::seconds(20));
      if (!seen) {
        if (failures++ == 0) first_failure = "signal " + std::to_string(i + 1) + " never arrived";
        return;
      }
      if (std::memcmp(dst.p() + i * kSlot, src.p() + i * kSlot, len[i]) != 0) {
        if (failures++ == 0) first_failure = "payload " + std::to_string(i) + " not in place when its signal was seen";
      }
    }
  });
  const auto h = p.h();
  Status st = Status::Ok;
  for (uint32_t i = 0; i < kOps && st == Status::Ok; ++i)
    st = dev::put_signal<S>(h, src.p() + i * kSlot, src.lkey(), dst.addr() + i * kSlot, dst.rkey(), len[i], sig.addr(),
                            sig.rkey(), 1, scratch.u64(0), scratch.lkey(), 0, nullptr);
  const Status qs = st == Status::Ok ? dev::quiet<S>(h) : st;
  target.join();
  ASSERT_EQ(st, Status::Ok) << p.qa->last_error();
  ASSERT_EQ(qs, Status::Ok) << p.qa->last_error();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_EQ(*sig.u64(0), sig0 + kOps);
  EXPECT_EQ(*scratch.u64(0), sig0 + kOps - 1) << "scratch holds the old value of the last signal";
  for (uint32_t i = 0; i < kOps; ++i)
    ASSERT_TRUE(bytes_equal(dst.p() + i * kSlot, src.p() + i * kSlot, len[i], "payload " + std::to_string(i)));
}

inline void QpMaxMsgBelowDeviceMax(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  kinet::QpConfig c = test_qp_config(32);
  c.max_msg = 1000;  // not a power of two
  EmuPair p(with_cfg(c, devices));
  const auto h = p.h();
  ASSERT_EQ(h.max_msg, 1000u);
  const size_t n = 100 * 1024 + 7;
  Region& src = p.reg_a(n);
  Region& dst = p.reg_b(n);
  fill_random(rng, dst.p(), n);
  fill_distinct(rng, src.p(), dst.p(), n);
  Ticket t;
  ASSERT_EQ(dev::put<Sharing::Exclusive>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), n, dev::kSignal, &t),
            Status::Ok);
  EXPECT_EQ(t.idx, (n + 999) / 1000);
  ASSERT_EQ(dev::wait<Sharing::Exclusive>(h, t), Status::Ok) << p.qa->last_error();
  EXPECT_TRUE(bytes_equal(dst.p(), src.p(), n, "put split at QpConfig.max_msg"));
}

inline void UnsignalledTicketStillCompletes(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  kinet::QpConfig c = test_qp_config(64);
  c.signal_period = 32;
  EmuPair p(with_cfg(c, devices));
  const auto h = p.h();
  ASSERT_EQ(h.signal_period, 32u);
  Region& src = p.reg_a(64 * 40);
  Region& dst = p.reg_b(64 * 40);
  fill_random(rng, dst.p(), 64 * 40);
  fill_distinct(rng, src.p(), dst.p(), 64 * 40);
  // One unsignalled put, waited on alone: wait() must post a signalled NOP.
  Ticket t;
  ASSERT_EQ(dev::put<Sharing::Exclusive>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), 64, 0, &t), Status::Ok);
  EXPECT_EQ(t.idx, 1u);
  ASSERT_EQ(dev::wait<Sharing::Exclusive>(h, t), Status::Ok) << p.qa->last_error();
  EXPECT_TRUE(bytes_equal(dst.p(), src.p(), 64, "unsignalled put"));
  // Many unsignalled puts; wait on one in the middle.
  std::vector<Ticket> ts(39);
  for (int i = 1; i < 40; ++i)
    ASSERT_EQ(dev::put<Sharing::Exclusive>(h, src.p() + 64 * i, src.lkey(), dst.addr() + 64 * i, dst.rkey(), 64, 0,
                                           &ts[i - 1]),
              Status::Ok);
  ASSERT_EQ(dev::wait<Sharing::Exclusive>(h, ts[10]), Status::Ok);
  EXPECT_TRUE(bytes_equal(dst.p(), src.p(), 64 * 12, "puts up to the waited ticket"));
  ASSERT_EQ(dev::quiet<Sharing::Exclusive>(h), Status::Ok);
  EXPECT_TRUE(bytes_equal(dst.p(), src.p(), 64 * 40, "all puts after quiet"));
}

inline void TestIsPendingBeforeCompletionAndTicketZeroIsOk(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  EmuPair p(with_cfg(test_qp_config(), devices));
  const auto h = p.h();
  EXPECT_EQ(dev::test<Sharing::Exclusive>(h, Ticket{}), Status::Ok);
  EXPECT_EQ(dev::wait<Sharing::Exclusive>(h, Ticket{}), Status::Ok);
  Region& src = p.reg_a(256);
  Region& dst = p.reg_b(256);
  fill_random(rng, dst.p(), 256);
  fill_distinct(rng, src.p(), dst.p(), 256);
  std::vector<uint8_t> before(dst.p(), dst.p() + 256);
  Ticket t;
  // Published but not announced: the NIC cannot have completed it.
  ASSERT_EQ(dev::put<Sharing::Exclusive>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), 256,
                                         dev::kSignal | dev::kNoDoorbell, &t),
            Status::Ok);
  EXPECT_EQ(dev::test<Sharing::Exclusive>(h, t), Status::Pending);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(dev::test<Sharing::Exclusive>(h, t), Status::Pending);
  EXPECT_TRUE(bytes_equal(dst.p(), before.data(), 256, "target before the doorbell (NIC ran an un-rung WQE)"));
  ASSERT_EQ(dev::ring_doorbell<Sharing::Exclusive>(h, t.idx), Status::Ok);
  EXPECT_EQ(dev::wait<Sharing::Exclusive>(h, t), Status::Ok) << p.qa->last_error();
  EXPECT_EQ(dev::test<Sharing::Exclusive>(h, t), Status::Ok);
  EXPECT_TRUE(bytes_equal(dst.p(), src.p(), 256, "target after the doorbell"));
}

inline void BatchedOpsRunOnlyAfterOneDoorbell(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  EmuPair p(with_cfg(test_qp_config(256), devices));
  const auto h = p.h();
  constexpr int kOps = 100;  // fits the ring: no forced doorbell
  Region& src = p.reg_a(128 * kOps);
  Region& dst = p.reg_b(128 * kOps);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "ring_doorbell" : "quiet");
    fill_random(rng, dst.p(), 128 * kOps);
    fill_distinct(rng, src.p(), dst.p(), 128 * kOps);
    std::vector<uint8_t> before(dst.p(), dst.p() + 128 * kOps);
    const uint32_t pi_before = be32toh(h.dbrec[kinet::mlx5::kSendDbrIndex]);
    Ticket last;
    std::vector<size_t> len(kOps);
    for (int i = 0; i < kOps; ++i) {
      len[i] = 1 + rng() % 128;
      ASSERT_EQ(dev::put<Sharing::Exclusive>(h, src.p() + 128 * i, src.lkey(), dst.addr() + 128 * i, dst.rkey(), len[i],
                                             dev::kNoDoorbell, &last),
                Status::Ok);
    }
    EXPECT_EQ(be32toh(h.dbrec[kinet::mlx5::kSendDbrIndex]), pi_before) << "kNoDoorbell must not touch the record";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(bytes_equal(dst.p(), before.data(), 128 * kOps, "target before the doorbell"));
    if (round == 0) {
      ASSERT_EQ(dev::ring_doorbell<Sharing::Exclusive>(h, last.idx), Status::Ok);
    }
    ASSERT_EQ(dev::quiet<Sharing::Exclusive>(h), Status::Ok) << p.qa->last_error();
    EXPECT_EQ(dev::test<Sharing::Exclusive>(h, last), Status::Ok);
    // Every op's bytes: exactly its length written, the rest of its slot untouched.
    for (int i = 0; i < kOps; ++i) {
      const uint8_t* d = dst.p() + 128 * i;
      ASSERT_TRUE(bytes_equal(d, src.p() + 128 * i, len[i], "op " + std::to_string(i)));
      ASSERT_TRUE(
          bytes_equal(d + len[i], before.data() + 128 * i + len[i], 128 - len[i], "op " + std::to_string(i) + " tail"));
    }
  }
}

// Mixed operations over a 16-slot ring, > 100 laps, each op verified.
inline void WrapAroundManyLapsMixedOps(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  constexpr uint32_t kDepth = 16;
  EmuPair p(with_cfg(test_qp_config(kDepth), devices));
  const auto h = p.h();
  const uint64_t kTotal = scaled(2400, 100 * kDepth + 1);
  constexpr int kBatch = 24;  // more than the ring: reserve must wait inside a batch
  constexpr size_t kSlot = 256;
  Region& lsrc = p.reg_a(kSlot * kBatch);
  Region& ldst = p.reg_a(kSlot * kBatch);
  Region& lres = p.reg_a(8 * kBatch);
  Region& rdst = p.reg_b(kSlot * kBatch);
  Region& rsrc = p.reg_b(kSlot * kBatch);
  Region& ratom = p.reg_b(8 * kBatch);
  enum Op { Put, PutInline, Get, FetchAdd, CompareSwap, Nop, kNumOps };
  uint64_t done = 0, counts[kNumOps] = {};
  while (done < kTotal) {
    fill_random(rng, rdst.p(), kSlot * kBatch);
    fill_random(rng, ldst.p(), kSlot * kBatch);
    fill_random(rng, ratom.p(), 8 * kBatch);
    fill_random(rng, lres.p(), 8 * kBatch);
    fill_distinct(rng, lsrc.p(), rdst.p(), kSlot * kBatch);
    fill_distinct(rng, rsrc.p(), ldst.p(), kSlot * kBatch);
    std::vector<uint8_t> want_r(rdst.p(), rdst.p() + kSlot * kBatch), want_l(ldst.p(), ldst.p() + kSlot * kBatch);
    std::vector<uint64_t> want_atom(kBatch), want_res(kBatch);
    for (int i = 0; i < kBatch; ++i) {
      want_atom[i] = *ratom.u64(8 * i);
      want_res[i] = *lres.u64(8 * i);
    }
    for (int i = 0; i < kBatch; ++i, ++done) {
      const Op op = static_cast<Op>(rng() % kNumOps);
      ++counts[op];
      const uint32_t flags = (rng() % 4 == 0) ? uint32_t(dev::kSignal) : 0u;
      const size_t n = 1 + rng() % kSlot;
      Status st = Status::Ok;
      switch (op) {
        case Put:
          st = dev::put<Sharing::Exclusive>(h, lsrc.p() + kSlot * i, lsrc.lkey(), rdst.addr() + kSlot * i, rdst.rkey(),
                                            n, flags);
          std::memcpy(want_r.data() + kSlot * i, lsrc.p() + kSlot * i, n);
          break;
        case PutInline: {
          const uint32_t m = 1 + static_cast<uint32_t>(rng() % kinet::mlx5::kMaxInlineOneBB);
          st = dev::put_inline<Sharing::Exclusive>(h, lsrc.p() + kSlot * i, m, rdst.addr() + kSlot * i, rdst.rkey(),
                                                   flags);
          std::memcpy(want_r.data() + kSlot * i, lsrc.p() + kSlot * i, m);
          break;
        }
        case Get:
          st = dev::get<Sharing::Exclusive>(h, ldst.p() + kSlot * i, ldst.lkey(), rsrc.addr() + kSlot * i, rsrc.rkey(),
                                            n, flags);
          std::memcpy(want_l.data() + kSlot * i, rsrc.p() + kSlot * i, n);
          break;
        case FetchAdd: {
          const uint64_t add = random_u64(rng);
          st = dev::fetch_add<Sharing::Exclusive>(h, lres.u64(8 * i), lres.lkey(), ratom.addr() + 8 * i, ratom.rkey(),
                                                  add, flags);
          want_res[i] = want_atom[i];
          want_atom[i] += add;
          break;
        }
        case CompareSwap: {
          const bool hit = rng() & 1;
          const uint64_t swp = random_u64(rng, want_atom[i]);
          st = dev::compare_swap<Sharing::Exclusive>(h, lres.u64(8 * i), lres.lkey(), ratom.addr() + 8 * i,
                                                     ratom.rkey(), hit ? want_atom[i] : ~want_atom[i], swp, flags);
          want_res[i] = want_atom[i];
          if (hit) want_atom[i] = swp;
          break;
        }
        case Nop:
        case kNumOps:
          st = dev::nop<Sharing::Exclusive>(h, flags);
          break;
      }
      ASSERT_EQ(st, Status::Ok) << "op " << done << ": " << p.qa->last_error();
    }
    ASSERT_EQ(dev::quiet<Sharing::Exclusive>(h), Status::Ok) << "after op " << done << ": " << p.qa->last_error();
    ASSERT_TRUE(
        bytes_equal(rdst.p(), want_r.data(), kSlot * kBatch, "remote after batch ending at " + std::to_string(done)));
    ASSERT_TRUE(
        bytes_equal(ldst.p(), want_l.data(), kSlot * kBatch, "local after batch ending at " + std::to_string(done)));
    for (int i = 0; i < kBatch; ++i) {
      ASSERT_EQ(*ratom.u64(8 * i), want_atom[i]) << "atomic target " << i << " batch ending at " << done;
      ASSERT_EQ(*lres.u64(8 * i), want_res[i]) << "atomic result " << i << " batch ending at " << done;
    }
  }
  EXPECT_GE(h.state->reserved, 100u * kDepth);
  for (int k = 0; k < kNumOps; ++k) EXPECT_GT(counts[k], 0u) << "op kind " << k << " never ran";
}

// More than 2^16 WQEs: the 16-bit WQE counter of CQEs and of the doorbell
// record wraps; the library's 64-bit indices must not.
inline void SixteenBitCounterWraps(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  EmuPair p(with_cfg(test_qp_config(256), devices));
  const auto h = p.h();
  Region& src = p.reg_a(64);
  Region& dst = p.reg_b(64);
  const uint64_t kTotal = 70000;
  for (uint64_t i = 0; i < kTotal; ++i) {
    if (i % 4096 == 4095) {
      fill_distinct(rng, src.p(), dst.p(), 64);
      Ticket t;
      ASSERT_EQ(dev::put<Sharing::Exclusive>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), 64, 0, &t), Status::Ok);
      ASSERT_EQ(dev::wait<Sharing::Exclusive>(h, t), Status::Ok) << "at " << i << ": " << p.qa->last_error();
      ASSERT_TRUE(bytes_equal(dst.p(), src.p(), 64, "put at op " + std::to_string(i)));
    } else {
      ASSERT_EQ(dev::nop<Sharing::Exclusive>(h, dev::kNoDoorbell * (i % 8 != 0)), Status::Ok)
          << "at " << i << ": " << p.qa->last_error();
    }
  }
  ASSERT_EQ(dev::quiet<Sharing::Exclusive>(h), Status::Ok) << p.qa->last_error();
  EXPECT_GE(h.state->completed, kTotal);
}

inline void TryReserveNoSpaceOnFullRingDoesNotBlock(const PairOptions& devices = {}) {
  EmuPair p(with_cfg(test_qp_config(16, 5000), devices));
  const auto h = p.h();
  uint64_t a = 0, b = 0, c = 0;
  ASSERT_EQ(dev::try_reserve<Sharing::Exclusive>(h, 8, &a), Status::Ok);
  ASSERT_EQ(dev::try_reserve<Sharing::Exclusive>(h, 8, &b), Status::Ok);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(dev::try_reserve<Sharing::Exclusive>(h, 1, &c), Status::NoSpace);
  EXPECT_LT(seconds_since(t0), 0.5) << "try_reserve must return at once, not after the 5 s timeout";
  for (uint64_t i = a; i < a + 16; ++i) dev::prepare_nop<Sharing::Exclusive>(h, i, 0);
  ASSERT_EQ(dev::publish<Sharing::Exclusive>(h, a, 8), Status::Ok);
  ASSERT_EQ(dev::publish<Sharing::Exclusive>(h, b, 8), Status::Ok);
  ASSERT_EQ(dev::quiet<Sharing::Exclusive>(h), Status::Ok) << p.qa->last_error();
  ASSERT_EQ(dev::try_reserve<Sharing::Exclusive>(h, 8, &c), Status::Ok);
  EXPECT_GE(c, 16u);
  dev::prepare_nop<Sharing::Exclusive>(h, c, 0);
  for (uint64_t i = c + 1; i < c + 8; ++i) dev::prepare_nop<Sharing::Exclusive>(h, i, 0);
  ASSERT_EQ(dev::publish<Sharing::Exclusive>(h, c, 8), Status::Ok);
  EXPECT_EQ(dev::quiet<Sharing::Exclusive>(h), Status::Ok) << p.qa->last_error();
}

// kFence: the write waits for the earlier read of this QP, so the read
// returns the bytes from before the write.
inline void ReadThenFencedWriteToSameAddress(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  EmuPair p(with_cfg(test_qp_config(64), devices));
  const auto h = p.h();
  Region& local = p.reg_a(2 * 4096);
  Region& remote = p.reg_b(4096);
  for (int round = 0; round < 20; ++round) {
    fill_random(rng, remote.p(), 4096);
    fill_distinct(rng, local.p(), remote.p(), 4096);         // the new bytes to write
    fill_distinct(rng, local.p() + 4096, remote.p(), 4096);  // where the read lands
    std::vector<uint8_t> old(remote.p(), remote.p() + 4096), neu(local.p(), local.p() + 4096);
    Ticket t;
    ASSERT_EQ(dev::get<Sharing::Exclusive>(h, local.p() + 4096, local.lkey(), remote.addr(), remote.rkey(), 4096,
                                           dev::kNoDoorbell),
              Status::Ok);
    ASSERT_EQ(
        dev::put<Sharing::Exclusive>(h, local.p(), local.lkey(), remote.addr(), remote.rkey(), 4096, dev::kFence, &t),
        Status::Ok);
    ASSERT_EQ(dev::wait<Sharing::Exclusive>(h, t), Status::Ok) << p.qa->last_error();
    ASSERT_TRUE(bytes_equal(local.p() + 4096, old.data(), 4096, "read before the fenced write"));
    ASSERT_TRUE(bytes_equal(remote.p(), neu.data(), 4096, "remote after the fenced write"));
  }
}

// Both directions at once: each side's engine executes its own QP's WQEs
// against the other side's memory.
inline void BothDirectionsConcurrently(const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  EmuPair p(with_cfg(test_qp_config(32), devices));
  const size_t n = 64 * 1024;
  Region& a_src = p.reg_a(n);
  Region& a_dst = p.reg_a(n);
  Region& b_src = p.reg_b(n);
  Region& b_dst = p.reg_b(n);
  fill_random(rng, a_dst.p(), n);
  fill_random(rng, b_dst.p(), n);
  fill_distinct(rng, a_src.p(), b_dst.p(), n);
  fill_distinct(rng, b_src.p(), a_dst.p(), n);
  auto pump = [](const dev::QpHandle& h, const Region& src, const Region& dst, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 512) {
      const Status st = dev::put<Sharing::Exclusive>(h, src.p() + off, src.lkey(), dst.addr() + off, dst.rkey(), 512);
      if (st != Status::Ok) return st;
    }
    return dev::quiet<Sharing::Exclusive>(h);
  };
  Status sa = Status::Pending, sb = Status::Pending;
  std::thread tb([&] { sb = pump(p.qb->handle(), b_src, a_dst, n); });
  sa = pump(p.h(), a_src, b_dst, n);
  tb.join();
  EXPECT_EQ(sa, Status::Ok) << p.qa->last_error();
  EXPECT_EQ(sb, Status::Ok) << p.qb->last_error();
  EXPECT_TRUE(bytes_equal(b_dst.p(), a_src.p(), n, "a -> b"));
  EXPECT_TRUE(bytes_equal(a_dst.p(), b_src.p(), n, "b -> a"));
}

}  // namespace kinet::test::cases
