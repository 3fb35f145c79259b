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

#include "concurrency_cases.hpp"
#include "emu_preamble.hpp"

namespace {

using namespace kinet::test::cases;

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
  // The engine thread alone executes, so operations are in flight when
  // to_error() lands (posters that run the NIC themselves finish too soon).
  ScopedEnv no_kick("KINET_EMU_HOST_KICK", "0");
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
  std::vector<int> flushes(kThreads, 0);
  std::vector<std::thread> ths;
  // Each thread posts until it has seen 8 operations flushed (bounded by
  // 1000 x per): however late to_error() lands, every thread sees it.
  for (int i = 0; i < kThreads; ++i)
    ths.emplace_back([&, i] {
      bool flushed = false;
      for (uint64_t k = 0; k < 1000 * per && flushes[i] < 8; ++k) {
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
          ++flushes[i];
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
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(flushes[i], 8) << "thread " << i << " was not flushed (" << ok_count[i] << " Ok)";
  }
  EXPECT_EQ(dev::quiet<Sharing::Cta>(h), Status::WrFlushed);
}

// Threads that only wait: several threads calling wait/test on tickets of one
// shared QP while others post. No ticket may report completion before its
// payload is in place.
TEST(EmuConcurrency, ConcurrentWaitersOnOneQp) {
  // As above: waiters must find tickets still pending while posters post.
  ScopedEnv no_kick("KINET_EMU_HOST_KICK", "0");
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
  // Every ticket is complete now: a waiter that got no CPU so far checks at once.
  wait_until([&] { return checks.load() > 0; }, std::chrono::seconds(10));
  stop = true;
  for (size_t i = kPosters; i < ths.size(); ++i) ths[i].join();
  EXPECT_EQ(qs, Status::Ok) << p.qa->last_error();
  for (size_t i = 0; i < errs.size(); ++i) EXPECT_EQ(errs[i], "") << "thread " << i;
  EXPECT_GT(checks.load(), 0u);
  for (int i = 0; i < kPosters; ++i)
    for (uint64_t v = 1; v <= per; ++v) ASSERT_EQ(*word(i, v), base + v) << "poster " << i << " word " << v;
}

}  // namespace
