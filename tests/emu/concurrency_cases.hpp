// kinet tests — host threads sharing one QP: each thread owns its regions and
// data, every byte is verified, more operations than ring slots are posted,
// and a shared remote counter updated by all threads with fetch_add hands out
// every old value exactly once. Shared by the software-NIC concurrency suite
// and the hw suite (`devices` names the two devices).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "emu_fixture.hpp"

namespace kinet::test::cases {

using dev::QpHandle;
using dev::Sharing;
using dev::Ticket;

inline constexpr size_t kSlot = 512;  // bytes per slot
inline constexpr int kSlots = 12;     // slots per thread (a thread reuses a slot after waiting)

// What one thread owns: a source area (initiator side), a destination area
// (target side), a remote area it reads back and a local area it reads into.
struct Lane {
  uint8_t* src;   // initiator, kSlots * kSlot
  uint8_t* dst;   // target
  uint8_t* rsrc;  // target, read by get
  uint8_t* ldst;  // initiator, written by get
  uint64_t* res;  // initiator, kSlots atomic results
  uint64_t dst_addr, rsrc_addr;
};

struct Shared {
  kinet::Lkey lkey;       // of the initiator region
  kinet::Rkey rkey;       // of the target region
  uint64_t counter_addr;  // target: shared fetch_add counter
};

// One thread's workload. Returns "" or the first problem found. Old values of
// the shared counter go to `olds`.
template <Sharing S> std::string lane_work(const QpHandle& h, const Lane& L, const Shared& sh, uint64_t ops,
                                           uint64_t seed, std::vector<uint64_t>& olds) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> want_dst(L.dst, L.dst + kSlots * kSlot), want_ldst(L.ldst, L.ldst + kSlots * kSlot);
  std::vector<int> kind(kSlots, -1);
  uint64_t done = 0;
  while (done < ops) {
    // One round: every slot gets one operation, then one wait, then verify.
    Ticket last;
    for (int k = 0; k < kSlots && done < ops; ++k, ++done) {
      uint8_t* s = L.src + k * kSlot;
      const uint32_t roll = static_cast<uint32_t>(rng() % 10);
      const uint32_t flags =
          (rng() % 3 == 0) ? uint32_t(dev::kNoDoorbell) : (rng() % 5 == 0 ? uint32_t(dev::kSignal) : 0u);
      const size_t n = 1 + rng() % kSlot;
      Status st;
      Ticket t;
      if (roll < 5) {  // put
        fill_distinct(rng, s, want_dst.data() + k * kSlot, n);
        std::memcpy(want_dst.data() + k * kSlot, s, n);
        st = dev::put<S>(h, s, sh.lkey, L.dst_addr + k * kSlot, sh.rkey, n, flags, &t);
      } else if (roll < 7) {  // put_inline from a stack buffer
        uint8_t tmp[kinet::mlx5::kMaxInlineOneBB];
        const uint32_t m = 1 + static_cast<uint32_t>(rng() % sizeof tmp);
        fill_distinct(rng, tmp, want_dst.data() + k * kSlot, m);
        std::memcpy(want_dst.data() + k * kSlot, tmp, m);
        st = dev::put_inline<S>(h, tmp, m, L.dst_addr + k * kSlot, sh.rkey, flags, &t);
      } else if (roll < 9) {  // get: fresh remote bytes into the local slot
        fill_distinct(rng, L.rsrc + k * kSlot, want_ldst.data() + k * kSlot, n);
        std::memcpy(want_ldst.data() + k * kSlot, L.rsrc + k * kSlot, n);
        st = dev::get<S>(h, L.ldst + k * kSlot, sh.lkey, L.rsrc_addr + k * kSlot, sh.rkey, n, flags, &t);
      } else {  // fetch_add on the counter every thread hits
        st = dev::fetch_add<S>(h, L.res + k, sh.lkey, sh.counter_addr, sh.rkey, 1, flags, &t);
      }
      kind[k] = roll < 9 ? 0 : 1;
      if (st != Status::Ok) return "op " + std::to_string(done) + ": post returned " + kinet::status_string(st);
      last = t;
    }
    // One wait covers every earlier operation of this thread (completions are in order).
    const Status ws = dev::wait<S>(h, last);
    if (ws != Status::Ok) return "op " + std::to_string(done) + ": wait returned " + kinet::status_string(ws);
    auto r1 = bytes_equal(L.dst, want_dst.data(), kSlots * kSlot, "target area");
    if (!r1) return "after op " + std::to_string(done) + ": " + r1.message();
    auto r2 = bytes_equal(L.ldst, want_ldst.data(), kSlots * kSlot, "get destination area");
    if (!r2) return "after op " + std::to_string(done) + ": " + r2.message();
    for (int k = 0; k < kSlots; ++k)
      if (kind[k] == 1) {
        olds.push_back(L.res[k]);
        kind[k] = -1;
      }
  }
  return {};
}

struct Layout {
  Region* ini;  // initiator region: src + ldst + res per lane
  Region* tgt;  // target region: dst + rsrc per lane, counter at the end
  size_t ini_lane, tgt_lane;
};

inline Lane lane_of(const Layout& l, int i) {
  Lane L;
  uint8_t* a = l.ini->p() + i * l.ini_lane;
  uint8_t* b = l.tgt->p() + i * l.tgt_lane;
  L.src = a;
  L.ldst = a + kSlots * kSlot;
  L.res = reinterpret_cast<uint64_t*>(a + 2 * kSlots * kSlot);
  L.dst = b;
  L.rsrc = b + kSlots * kSlot;
  L.dst_addr = reinterpret_cast<uint64_t>(L.dst);
  L.rsrc_addr = reinterpret_cast<uint64_t>(L.rsrc);
  return L;
}

inline Layout make_layout(EmuPair& p, int lanes, std::mt19937_64& rng) {
  Layout l;
  l.ini_lane = 2 * kSlots * kSlot + 8 * kSlots;
  l.tgt_lane = 2 * kSlots * kSlot;
  l.ini = &p.reg_a(lanes * l.ini_lane);
  l.tgt = &p.reg_b(lanes * l.tgt_lane + 64);
  fill_random(rng, l.ini->p(), l.ini->len);
  fill_random(rng, l.tgt->p(), l.tgt->len);
  return l;
}

// Every old value of a counter incremented by 1, N times from c0, appears once.
inline ::testing::AssertionResult counter_consistent(std::vector<uint64_t> olds, uint64_t c0, uint64_t final_value) {
  std::sort(olds.begin(), olds.end());
  if (final_value != c0 + olds.size())
    return ::testing::AssertionFailure() << "counter " << final_value << ", expected " << c0 + olds.size();
  for (size_t i = 0; i < olds.size(); ++i)
    if (olds[i] != c0 + i)
      return ::testing::AssertionFailure() << "old values are not a permutation of [c0, c0+N): position " << i
                                           << " has " << olds[i] << ", expected " << c0 + i;
  return ::testing::AssertionSuccess();
}

// `threads` host threads share QP a (mode S) on the devices of `devices`.
template <Sharing S> void shared_qp(int threads, const PairOptions& devices = {}) {
  KINET_TEST_RNG(rng);
  PairOptions o;
  o.device_a = devices.device_a;
  o.device_b = devices.device_b;
  o.cfg_a = test_qp_config(32, 20000);
  o.cfg_b = test_qp_config(32, 20000);
  EmuPair p(o);
  const Layout l = make_layout(p, threads, rng);
  uint64_t* counter = reinterpret_cast<uint64_t*>(l.tgt->p() + threads * l.tgt_lane);
  const uint64_t c0 = random_u64(rng) >> 2;
  *counter = c0;
  const Shared sh{l.ini->lkey(), l.tgt->rkey(), reinterpret_cast<uint64_t>(counter)};
  const uint64_t ops = scaled(240, 3 * kSlots);  // per thread; all threads together lap the 32-slot ring
  const QpHandle h = p.h();
  std::vector<std::string> errs(threads);
  std::vector<std::vector<uint64_t>> olds(threads);
  std::vector<uint64_t> seeds(threads);
  for (auto& s : seeds) s = rng();
  std::vector<std::thread> ths;
  for (int i = 0; i < threads; ++i)
    ths.emplace_back([&, i] { errs[i] = lane_work<S>(h, lane_of(l, i), sh, ops, seeds[i], olds[i]); });
  for (auto& t : ths) t.join();
  for (int i = 0; i < threads; ++i) EXPECT_EQ(errs[i], "") << "thread " << i << "; last_error: " << p.qa->last_error();
  ASSERT_EQ(dev::quiet<S>(h), Status::Ok) << p.qa->last_error();
  std::vector<uint64_t> all;
  for (auto& v : olds) all.insert(all.end(), v.begin(), v.end());
  EXPECT_TRUE(counter_consistent(all, c0, *counter));
  EXPECT_GT(h.state->reserved, 4u * 32) << "the ring must lap several times";
  EXPECT_EQ(p.qa->state(), kinet::QpState::Rts);
}

}  // namespace kinet::test::cases
