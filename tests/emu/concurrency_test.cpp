// Many host threads posting to one QP (Sharing::Cta, Sharing::Gpu) and one
// thread per QP across several QPs (Sharing::Exclusive), through the software
// NIC. Each thread owns its regions and its data; every byte is verified, more
// operations than ring slots are posted, and a shared remote counter updated
// by all threads with fetch_add hands out every old value exactly once.
// Sizes scale with KINET_TEST_SCALE (the TSan build runs these at 20%).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "emu_preamble.hpp"

namespace {

constexpr size_t kSlot = 512;   // bytes per slot
constexpr int kSlots = 12;      // slots per thread (a thread reuses a slot after waiting)

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
template <Sharing S>
std::string lane_work(const QpHandle& h, const Lane& L, const Shared& sh, uint64_t ops, uint64_t seed,
                      std::vector<uint64_t>& olds) {
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
      const uint32_t flags = (rng() % 3 == 0) ? uint32_t(dev::kNoDoorbell) : (rng() % 5 == 0 ? uint32_t(dev::kSignal) : 0u);
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

Lane lane_of(const Layout& l, int i) {
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

Layout make_layout(EmuPair& p, int lanes, std::mt19937_64& rng) {
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
::testing::AssertionResult counter_consistent(std::vector<uint64_t> olds, uint64_t c0, uint64_t final_value) {
  std::sort(olds.begin(), olds.end());
  if (final_value != c0 + olds.size())
    return ::testing::AssertionFailure() << "counter " << final_value << ", expected " << c0 + olds.size();
  for (size_t i = 0; i < olds.size(); ++i)
    if (olds[i] != c0 + i)
      return ::testing::AssertionFailure() << "old values are not a permutation of [c0, c0+N): position " << i
                                           << " has " << olds[i] << ", expected " << c0 + i;
  return ::testing::AssertionSuccess();
}

template <Sharing S> void shared_qp(int threads) {
  KINET_TEST_RNG(rng);
  PairOptions o;
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

TEST(EmuConcurrency, EightThreadsShareOneQpCta) { shared_qp<Sharing::Cta>(test_threads(8)); }
TEST(EmuConcurrency, EightThreadsShareOneQpGpu) { shared_qp<Sharing::Gpu>(test_threads(8)); }

TEST(EmuConcurrency, ExclusiveOneThreadPerQp) {
  KINET_TEST_RNG(rng);
  constexpr int kQps = 4;
  PairOptions o;
  o.cfg_a = test_qp_config(16, 20000);
  o.cfg_b = test_qp_config(16, 20000);
  EmuPair p(o);
  std::vector<std::unique_ptr<kinet::QueuePair>> qa, qb;
  qa.push_back(nullptr);  // lane 0 uses the pair's own QPs
  qb.push_back(nullptr);
  for (int i = 1; i < kQps; ++i) {
    qa.push_back(p.pa->create_qp(o.cfg_a));
    qb.push_back(p.pb->create_qp(o.cfg_b));
    qa[i]->connect(qb[i]->info());
    qb[i]->connect(qa[i]->info());
  }
  std::vector<QpHandle> hs = {p.h()};
  for (int i = 1; i < kQps; ++i) hs.push_back(qa[i]->handle());
  const Layout l = make_layout(p, kQps, rng);
  uint64_t* counter = reinterpret_cast<uint64_t*>(l.tgt->p() + kQps * l.tgt_lane);
  const uint64_t c0 = random_u64(rng) >> 2;
  *counter = c0;
  const Shared sh{l.ini->lkey(), l.tgt->rkey(), reinterpret_cast<uint64_t>(counter)};
  const uint64_t ops = scaled(600, 8 * kSlots);  // per QP; the rings have 16 slots
  std::vector<std::string> errs(kQps);
  std::vector<std::vector<uint64_t>> olds(kQps);
  std::vector<uint64_t> seeds(kQps);
  for (auto& s : seeds) s = rng();
  std::vector<std::thread> ths;
  for (int i = 0; i < kQps; ++i)
    ths.emplace_back(
        [&, i] { errs[i] = lane_work<Sharing::Exclusive>(hs[i], lane_of(l, i), sh, ops, seeds[i], olds[i]); });
  for (auto& t : ths) t.join();
  for (int i = 0; i < kQps; ++i) EXPECT_EQ(errs[i], "") << "QP " << i;
  std::vector<uint64_t> all;
  for (auto& v : olds) all.insert(all.end(), v.begin(), v.end());
  EXPECT_TRUE(counter_consistent(all, c0, *counter)) << "fetch_add from several QPs on one word";
  for (int i = 0; i < kQps; ++i) EXPECT_GT(hs[i].state->reserved, 4u * 16) << "QP " << i;
  qa.clear();
  qb.clear();
}

// The host moves the QP to ERROR while threads post: every ticket is Ok up
// to some point and flushed after it (never Ok after a flushed one), no wait
// hangs, and the QP ends in ERROR.
TEST(EmuConcurrency, ToErrorWhileThreadsPost) {
  KINET_TEST_RNG(rng);
  PairOptions o;
  o.cfg_a = test_qp_config(32, 20000);
  EmuPair p(o);
  const QpHandle h = p.h();
  constexpr int kThreads = 4;
  const uint64_t per = scaled(400, 60);
  Region& src = p.reg_a(kThreads * 64);
  Region& dst = p.reg_b(kThreads * 64);
  fill_random(rng, src.p(), src.len);
  std::atomic<uint64_t> posted{0};
  std::vector<std::string> errs(kThreads);
  std::vector<uint64_t> ok_count(kThreads, 0);
  std::vector<std::thread> ths;
  for (int i = 0; i < kThreads; ++i)
    ths.emplace_back([&, i] {
      bool flushed = false;
      for (uint64_t k = 0; k < per; ++k) {
        Ticket t;
        Status st = dev::put<Sharing::Cta>(h, src.p() + 64 * i, src.lkey(), dst.addr() + 64 * i, dst.rkey(), 64,
                                           k % 3 ? 0u : uint32_t(dev::kSignal), &t);
        if (st == Status::Ok) st = dev::wait<Sharing::Cta>(h, t);
        ++posted;
        if (st == Status::Ok) {
          if (flushed) {
            errs[i] = "ticket " + std::to_string(t.idx) + " Ok after an earlier one was flushed";
            return;
          }
          ++ok_count[i];
        } else if (st == Status::WrFlushed) {
          flushed = true;
        } else {
          errs[i] = std::string("unexpected status ") + kinet::status_string(st);
          return;
        }
      }
    });
  wait_until([&] { return posted.load() >= kThreads * per / 3; }, std::chrono::seconds(20));
  p.qa->to_error();
  for (auto& t : ths) t.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(errs[i], "") << "thread " << i;
  EXPECT_EQ(p.qa->state(), kinet::QpState::Error);
  uint64_t oks = 0;
  for (auto c : ok_count) oks += c;
  EXPECT_LT(oks, kThreads * per) << "some operations must have been flushed";
  EXPECT_EQ(dev::quiet<Sharing::Cta>(h), Status::WrFlushed);
}

// Threads that only wait: several threads calling wait/test on tickets of one
// shared QP while others post. No ticket may report completion before its
// payload is in place.
TEST(EmuConcurrency, ConcurrentWaitersOnOneQp) {
  KINET_TEST_RNG(rng);
  PairOptions o;
  o.cfg_a = test_qp_config(32, 20000);
  EmuPair p(o);
  const QpHandle h = p.h();
  constexpr int kPosters = 3, kWaiters = 3;
  const uint64_t per = scaled(150, 40);
  // Poster i writes value v (inline) into its own word v-1: each word is
  // written once, so a waiter may read it as soon as its ticket completed.
  Region& dst = p.reg_b(8 * per * kPosters);
  fill_random(rng, dst.p(), dst.len);
  const uint64_t base = random_u64(rng) >> 1;
  std::atomic<uint64_t> published[kPosters];
  std::atomic<uint64_t> tickets[kPosters];
  for (int i = 0; i < kPosters; ++i) {
    published[i] = 0;
    tickets[i] = 0;
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> checks{0};
  std::vector<std::string> errs(kPosters + kWaiters);
  std::vector<std::thread> ths;
  auto word = [&](int i, uint64_t v) { return dst.u64(8 * (per * i + v - 1)); };
  for (int i = 0; i < kPosters; ++i)
    ths.emplace_back([&, i] {
      for (uint64_t v = 1; v <= per; ++v) {
        const uint64_t value = base + v;  // inline: the source is copied into the WQE
        Ticket t;
        const Status st = dev::put_inline<Sharing::Gpu>(h, &value, 8, reinterpret_cast<uint64_t>(word(i, v)),
                                                        dst.rkey(), v % 4 ? 0u : uint32_t(dev::kSignal), &t);
        if (st != Status::Ok) {
          errs[i] = std::string("put_inline: ") + kinet::status_string(st);
          return;
        }
        tickets[i].store(t.idx);
        published[i].store(v);
      }
    });
  for (int w = 0; w < kWaiters; ++w)
    ths.emplace_back([&, w] {
      std::mt19937_64 r(w);
      while (!stop.load()) {
        const int i = static_cast<int>(r() % kPosters);
        const uint64_t v = published[i].load();
        const Ticket t{tickets[i].load()};  // a ticket at or after the one of v
        if (v == 0) {
          std::this_thread::yield();
          continue;
        }
        const Status st = (r() & 1) ? dev::wait<Sharing::Gpu>(h, t) : dev::test<Sharing::Gpu>(h, t);
        if (st == Status::Pending) continue;
        if (st != Status::Ok) {
          errs[kPosters + w] = std::string("wait/test: ") + kinet::status_string(st);
          return;
        }
        const uint64_t seen = *word(i, v);
        ++checks;
        if (seen != base + v) {
          errs[kPosters + w] = "ticket " + std::to_string(t.idx) + " complete but poster " + std::to_string(i) +
                               " word " + std::to_string(v) + " holds " + std::to_string(seen);
          return;
        }
      }
    });
  for (int i = 0; i < kPosters; ++i) ths[i].join();
  const Status qs = dev::quiet<Sharing::Gpu>(h);
  stop = true;
  for (size_t i = kPosters; i < ths.size(); ++i) ths[i].join();
  EXPECT_EQ(qs, Status::Ok) << p.qa->last_error();
  for (size_t i = 0; i < errs.size(); ++i) EXPECT_EQ(errs[i], "") << "thread " << i;
  EXPECT_GT(checks.load(), 0u);
  for (int i = 0; i < kPosters; ++i)
    for (uint64_t v = 1; v <= per; ++v) ASSERT_EQ(*word(i, v), base + v) << "poster " << i << " word " << v;
}

}  // namespace
