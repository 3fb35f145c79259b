// kinet tests — the fault rig: a QP pair, a good operation, one bad one, more
// after it; checks the bad one's status (and, when given, its exact CQE
// syndrome), that everything after it is flushed, the QP's state and message,
// and that no registered byte changed that a successful operation did not
// write. Shared by the software-NIC fault suite and the hw suite.
#pragma once
#include <chrono>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <vector>

#include "emu_fixture.hpp"
#include "kinet/mlx5/syndrome.hpp"

namespace kinet::test {

inline constexpr uint64_t kTimeoutMs = 2000;

// Device names come from `devices` (its device_a/device_b), the rest is the rig's.
inline PairOptions fault_options(uint32_t access_b = kinet::kAccessAll, const PairOptions& devices = {}) {
  PairOptions o;
  o.device_a = devices.device_a;
  o.device_b = devices.device_b;
  o.cfg_a = test_qp_config(64, kTimeoutMs);
  o.cfg_b = test_qp_config(64, kTimeoutMs);
  o.access_b = access_b;
  return o;
}

using BadOp = std::function<Status(const dev::QpHandle&, dev::Ticket*)>;

// A QP pair with scratch regions on both sides and the expected content of
// every registered byte.
class FaultRig {
  static constexpr dev::Sharing X = dev::Sharing::Exclusive;

 public:
  explicit FaultRig(const PairOptions& o = fault_options()) : p(o) {
    la = &p.reg_a(16384);
    res = &p.reg_a(64);
    rb = &p.reg_b(16384);
  }

  EmuPair p;
  Region *la, *res, *rb;
  std::vector<std::vector<uint8_t>> want_a, want_b;

  // Fresh random content in every region; remembered as expected.
  void randomize(std::mt19937_64& rng) {
    want_a.clear();
    want_b.clear();
    for (auto& r : p.ra) {
      fill_random(rng, r->p(), r->len);
      want_a.emplace_back(r->p(), r->p() + r->len);
    }
    for (auto& r : p.rb) {
      fill_random(rng, r->p(), r->len);
      want_b.emplace_back(r->p(), r->p() + r->len);
    }
  }
  size_t index_a(const Region* r) const {
    for (size_t i = 0; i < p.ra.size(); ++i)
      if (p.ra[i].get() == r) return i;
    return ~size_t{0};
  }

  // A successful operation before the fault: get rb[0, 1024) -> la[0, 1024).
  dev::Ticket good_op() {
    dev::Ticket t;
    EXPECT_EQ(dev::get<X>(p.h(), la->p(), la->lkey(), rb->addr(), rb->rkey(), 1024, 0, &t), Status::Ok);
    std::memcpy(want_a[index_a(la)].data(), rb->p(), 1024);
    return t;
  }

  // Operations after the fault, each of which would change bytes if executed.
  std::vector<dev::Ticket> later_ops(std::mt19937_64& rng) {
    std::vector<dev::Ticket> ts;
    dev::Ticket t;
    const auto h = p.h();
    EXPECT_EQ(dev::put<X>(h, la->p() + 4096, la->lkey(), rb->addr() + 4096, rb->rkey(), 1000, 0, &t), Status::Ok);
    ts.push_back(t);
    EXPECT_EQ(dev::get<X>(h, la->p() + 8192, la->lkey(), rb->addr() + 8192, rb->rkey(), 999, dev::kSignal, &t),
              Status::Ok);
    ts.push_back(t);
    uint8_t inl[16];
    fill_random(rng, inl, sizeof inl);
    EXPECT_EQ(dev::put_inline<X>(h, inl, 16, rb->addr() + 12288, rb->rkey(), 0, &t), Status::Ok);
    ts.push_back(t);
    EXPECT_EQ(dev::fetch_add<X>(h, res->u64(0), res->lkey(), rb->addr() + 12800, rb->rkey(), 1, 0, &t), Status::Ok);
    ts.push_back(t);
    EXPECT_EQ(dev::nop<X>(h, 0, &t), Status::Ok);
    ts.push_back(t);
    return ts;
  }

  ::testing::AssertionResult unchanged_except_expected() const {
    for (size_t i = 0; i < p.ra.size(); ++i) {
      auto r = bytes_equal(p.ra[i]->p(), want_a[i].data(), p.ra[i]->len, "initiator region " + std::to_string(i));
      if (!r) return r;
    }
    for (size_t i = 0; i < p.rb.size(); ++i) {
      auto r = bytes_equal(p.rb[i]->p(), want_b[i].data(), p.rb[i]->len, "target region " + std::to_string(i));
      if (!r) return r;
    }
    return ::testing::AssertionSuccess();
  }

  // The whole story: good op, bad op, later ops; statuses, state, message, bytes.
  // `syndrome` >= 0: the exact CQE syndrome the faulting WQE must complete with.
  void run(std::mt19937_64& rng, const BadOp& bad, Status want, std::initializer_list<const char*> words,
           int syndrome = -1) {
    randomize(rng);
    const auto t0 = std::chrono::steady_clock::now();
    const dev::Ticket g = good_op();
    dev::Ticket b;
    ASSERT_EQ(bad(p.h(), &b), Status::Ok) << "posting the bad operation itself must succeed (the NIC checks)";
    const std::vector<dev::Ticket> later = later_ops(rng);
    const auto h = p.h();
    EXPECT_EQ(dev::wait<X>(h, g), Status::Ok) << "the operation before the fault";
    EXPECT_EQ(dev::wait<X>(h, b), want) << "the faulting operation; last_error: " << p.qa->last_error();
    EXPECT_EQ(dev::test<X>(h, b), want);
    for (size_t i = 0; i < later.size(); ++i)
      EXPECT_EQ(dev::wait<X>(h, later[i]), Status::WrFlushed) << "operation " << i << " after the fault";
    // And one more posted after the error was seen.
    dev::Ticket after;
    ASSERT_EQ(dev::put<X>(h, la->p(), la->lkey(), rb->addr() + 2048, rb->rkey(), 64, dev::kSignal, &after), Status::Ok);
    EXPECT_EQ(dev::wait<X>(h, after), Status::WrFlushed) << "operation posted after the error CQE was seen";
    EXPECT_EQ(dev::quiet<X>(h), Status::WrFlushed);
    EXPECT_LT(seconds_since(t0), kTimeoutMs / 1000.0) << "fault reporting must not rely on timeouts";
    EXPECT_EQ(p.qa->state(), QpState::Error);
    const std::string le = p.qa->last_error();
    EXPECT_FALSE(le.empty());
    EXPECT_TRUE(mentions_any(le, words)) << "last_error() = \"" << le << "\"";
    EXPECT_TRUE(unchanged_except_expected());
    EXPECT_EQ(h.state->error_wqe, b.idx - 1);
    if (syndrome >= 0) {
      EXPECT_EQ(int(h.state->error_syndrome), syndrome) << "CQE syndrome of the faulting WQE";
    }
  }
};

// The host moves a connected QP to ERROR after a good put: what is posted
// then (a put, a fetch_add, a signalled nop) completes WrFlushed with CQE
// syndrome 0x05, error_wqe names the first of them, and the target keeps
// every byte. `words`: what last_error() mentions (none: not checked).
// Shared by the software-NIC fault suite and the hw suite.
inline void qp_in_error_flushes(const PairOptions& o, std::initializer_list<const char*> words) {
  constexpr dev::Sharing X = dev::Sharing::Exclusive;
  KINET_TEST_RNG(rng);
  EmuPair p(o);
  Region& src = p.reg_a(4096);
  Region& dst = p.reg_b(4096);
  fill_random(rng, dst.p(), 4096);
  fill_distinct(rng, src.p(), dst.p(), 4096);
  const dev::QpHandle h = p.h();
  dev::Ticket t;
  ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), 100, 0, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok) << p.qa->last_error();
  std::vector<uint8_t> before(dst.p(), dst.p() + 4096);
  p.qa->to_error();
  EXPECT_EQ(p.qa->state(), QpState::Error);
  dev::Ticket t1, t2, t3;
  ASSERT_EQ(dev::put<X>(h, src.p() + 100, src.lkey(), dst.addr() + 100, dst.rkey(), 100, 0, &t1), Status::Ok);
  ASSERT_EQ(dev::fetch_add<X>(h, src.u64(512), src.lkey(), dst.addr() + 512, dst.rkey(), 1, 0, &t2), Status::Ok);
  ASSERT_EQ(dev::nop<X>(h, dev::kSignal, &t3), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, t1), Status::WrFlushed);
  EXPECT_EQ(dev::wait<X>(h, t2), Status::WrFlushed);
  EXPECT_EQ(dev::wait<X>(h, t3), Status::WrFlushed);
  EXPECT_EQ(dev::quiet<X>(h), Status::WrFlushed);
  EXPECT_EQ(int(h.state->error_syndrome), int(mlx5::kSynWrFlush));
  EXPECT_EQ(h.state->error_wqe, t1.idx - 1) << "the first WQE posted in ERROR";
  if (words.size()) {
    EXPECT_TRUE(mentions_any(p.qa->last_error(), words)) << p.qa->last_error();
  }
  EXPECT_TRUE(bytes_equal(dst.p(), before.data(), 4096, "target after posting on an ERROR QP"));
}

}  // namespace kinet::test
