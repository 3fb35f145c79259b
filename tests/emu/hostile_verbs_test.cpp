// The device verbs' low-level steps and tickets misused as a hostile user
// would, and many posting threads whose peer dies under them. Every wait is
// bounded and ends with an exact status.
#include <atomic>
#include <cstring>
#include <functional>
#include <cstdint>
#include <thread>
#include <vector>

#include "ctl_test_util.hpp"
#include "emu_preamble.hpp"

namespace {

PairOptions short_bound(uint64_t ms = 300) {
  PairOptions o;
  o.cfg_a = test_qp_config(64, ms);
  o.cfg_b = test_qp_config(64, ms);
  return o;
}

// Reservations of 0 or more than half the ring: InvalidArgument, nothing taken.
TEST(EmuHostileVerbs, ReserveSizes) {
  EmuPair p(short_bound());
  const dev::QpHandle h = p.h();
  uint64_t first = 77;
  for (uint32_t n : {0u, h.size() / 2 + 1, h.size(), 0xffffffffu}) {
    EXPECT_EQ(dev::reserve<X>(h, n, &first), Status::InvalidArgument) << n;
    EXPECT_EQ(dev::try_reserve<X>(h, n, &first), Status::InvalidArgument) << n;
  }
  EXPECT_EQ(first, 77u);
  EXPECT_EQ(h.state->reserved, 0u);
  ASSERT_EQ(dev::reserve<X>(h, h.size() / 2, &first), Status::Ok);
  EXPECT_EQ(first, 0u);
  for (uint32_t k = 0; k < h.size() / 2; ++k) dev::prepare_nop<X>(h, first + k, 0);
  ASSERT_EQ(dev::publish<X>(h, first, h.size() / 2), Status::Ok);
  EXPECT_EQ(dev::quiet<X>(h), Status::Ok);
}

// A ticket past everything reserved can never complete: the wait ends
// within the bound, it does not hang.
TEST(EmuHostileVerbs, TicketFromTheFuture) {
  EmuPair p(short_bound());
  const dev::QpHandle h = p.h();
  for (uint64_t idx : {uint64_t{1} << 40, ~uint64_t{0}}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = dev::wait<X>(h, dev::Ticket{idx, idx - 1});
    EXPECT_EQ(s, Status::TimeoutCompletion);
    EXPECT_LT(seconds_since(t0), 2.0);
  }
  EXPECT_EQ(dev::test<X>(h, dev::Ticket{0, 0}), Status::Ok);  // covers nothing
}

// Ringing past what was published, or publishing what was never reserved:
// bounded waits named after what they waited for.
TEST(EmuHostileVerbs, RingAndPublishPastTheReservations) {
  {
    EmuPair p(short_bound());
    const dev::QpHandle h = p.h();
    const auto t0 = std::chrono::steady_clock::now();
    // It rings what is published (nothing), it does not wait for the rest.
    EXPECT_EQ(dev::ring_doorbell<X>(h, 1000), Status::Ok);
    EXPECT_LT(seconds_since(t0), 2.0);
    EXPECT_EQ(h.state->rung, 0u) << "nothing was published: nothing may be announced";
  }
  {
    EmuPair p(short_bound());
    const dev::QpHandle h = p.h();
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(dev::publish<dev::Sharing::Gpu>(h, 5, 1), Status::TimeoutPublishOrder);
    EXPECT_LT(seconds_since(t0), 2.0);
  }
}

// Many threads post (Cta and Gpu sharing) while the peer QP, then its whole
// device, is destroyed by another thread (allowed: the peer is not this QP;
// destroying the posting QP itself under its posters is not, see
// ~QueuePair). Exactly one operation sees the fault (transport retries
// exceeded: the peer does not answer), every other one after it is flushed,
// and every thread ends within the bound.
template <dev::Sharing S>
void peer_dies_under_posters(bool whole_device) {
  EmuPair p;
  Region& a = p.reg_a(1 << 16);
  Region& b = p.reg_b(1 << 16);
  const dev::QpHandle h = p.h();
  const kinet::Lkey lk = a.lkey();
  const kinet::Rkey rk = b.rkey();
  const int n = test_threads(8);
  std::atomic<int> retry{0}, flushed{0}, other{0}, started{0};
  std::vector<std::thread> th;
  for (int i = 0; i < n; ++i)
    th.emplace_back([&, i] {
      ++started;
      for (int k = 0; k < 1000000; ++k) {
        dev::Ticket t;
        Status s = dev::put<S>(h, a.p() + 1024 * (i % 64), lk, b.addr() + 1024 * (i % 64), rk, 1024, 0, &t);
        if (s == Status::Ok) s = dev::wait<S>(h, t);
        if (s == Status::Ok) continue;
        (s == Status::TransportRetryExceeded ? retry : s == Status::WrFlushed ? flushed : other)++;
        return;
      }
    });
  while (started.load() < n) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto t0 = std::chrono::steady_clock::now();
  // The peer's registrations stay: only the QP (or the device) goes, so the
  // first fault is the peer not answering, not a key that vanished first.
  if (whole_device) p.db.reset();
  else p.qb.reset();
  for (auto& t : th) t.join();
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(retry.load(), 1);
  EXPECT_EQ(flushed.load(), n - 1);
  EXPECT_EQ(p.qa->state(), QpState::Error);
  EXPECT_TRUE(mentions_any(p.qa->last_error(), {"does not answer"})) << p.qa->last_error();
}
TEST(EmuHostileVerbs, PeerQpDestroyedUnderCtaPosters) { peer_dies_under_posters<dev::Sharing::Cta>(false); }
TEST(EmuHostileVerbs, PeerDeviceClosedUnderGpuPosters) { peer_dies_under_posters<dev::Sharing::Gpu>(true); }

// An atomic whose local data segment is not exactly 8 bytes (patched in the
// ring: the verbs always write 8): a local length error at 7 and 9, the
// result buffer and the remote word untouched; 8 is fine.
TEST(EmuHostileVerbs, AtomicResultLengthAtItsEdges) {
  for (uint32_t len : {7u, 8u, 9u}) {
    SCOPED_TRACE(len);
    EmuPair p(short_bound(2000));
    Region& a = p.reg_a(64);
    Region& b = p.reg_b(64);
    *b.u64() = 5;
    std::memset(a.p(), 0xee, 64);
    const dev::QpHandle h = p.h();
    uint64_t idx = 0;
    ASSERT_EQ(dev::reserve<X>(h, 1, &idx), Status::Ok);
    dev::prepare_fetch_add<X>(h, idx, a.u64(), a.lkey(), b.addr(), b.rkey(), 1, dev::kSignal);
    uint8_t* bc = h.sq + (idx & (h.size() - 1)) * 64 + 48;  // data segment byte count (BE), after ctrl/raddr/atomic
    ASSERT_EQ(bc[3], 8);
    bc[3] = static_cast<uint8_t>(len);
    ASSERT_EQ(dev::publish<X>(h, idx, 1), Status::Ok);
    ASSERT_EQ(dev::ring_doorbell<X>(h, idx + 1), Status::Ok);
    const Status s = dev::wait<X>(h, dev::Ticket{idx + 1, idx});
    if (len == 8) {
      EXPECT_EQ(s, Status::Ok);
      EXPECT_EQ(*a.u64(), 5u);
      EXPECT_EQ(*b.u64(), 6u);
      continue;
    }
    EXPECT_EQ(s, Status::LocalLength);
    EXPECT_EQ(*b.u64(), 5u);
    EXPECT_EQ(a.p()[0], 0xee);
    const std::string want = "atomic result buffer of " + std::to_string(len) + " bytes (must be 8)";
    EXPECT_NE(p.qa->last_error().find(want), std::string::npos) << p.qa->last_error();
  }
}

// One WQE prepared by the verbs, then one field patched in the ring before
// it is published: the NIC must answer with a local QP operation error that
// names the field, and move nothing.
struct PatchedRun {
  Status status;
  std::string error;
  uint64_t target;
};
PatchedRun run_patched(bool inline_write, const std::function<void(uint8_t*)>& patch) {
  EmuPair p(short_bound(2000));
  Region& a = p.reg_a(64);
  Region& b = p.reg_b(64);
  *b.u64() = 5;
  const dev::QpHandle h = p.h();
  uint64_t idx = 0;
  EXPECT_EQ(dev::reserve<X>(h, 1, &idx), Status::Ok);
  const uint32_t word = 0x01020304;
  if (inline_write) dev::prepare_write_inline<X>(h, idx, &word, 4, b.addr(), b.rkey(), dev::kSignal);
  else dev::prepare_fetch_add<X>(h, idx, a.u64(), a.lkey(), b.addr(), b.rkey(), 1, dev::kSignal);
  patch(h.sq + (idx & (h.size() - 1)) * 64);
  EXPECT_EQ(dev::publish<X>(h, idx, 1), Status::Ok);
  EXPECT_EQ(dev::ring_doorbell<X>(h, idx + 1), Status::Ok);
  PatchedRun r;
  r.status = dev::wait<X>(h, dev::Ticket{idx + 1, idx});
  r.error = p.qa->last_error();
  r.target = *b.u64();
  return r;
}

TEST(EmuHostileVerbs, PatchedInlineDsAndAtomicCompare) {
  PatchedRun ok = run_patched(true, [](uint8_t*) {});
  EXPECT_EQ(ok.status, Status::Ok);
  EXPECT_EQ(ok.target & 0xffffffffu, 0x01020304u);
  // Inline 4 bytes: ctrl + raddr + (4-byte header + 4 bytes) = DS 3; DS 4 claims a segment it does not use.
  PatchedRun ds = run_patched(true, [](uint8_t* w) {
    ASSERT_EQ(w[7], 3);
    w[7] = 4;
  });
  EXPECT_EQ(ds.status, Status::LocalQpOp);
  EXPECT_NE(ds.error.find("malformed WQE: inline WQE of 4 bytes with DS 4 (expected 3)"), std::string::npos)
      << ds.error;
  EXPECT_EQ(ds.target, 5u);
  PatchedRun fa = run_patched(false, [](uint8_t*) {});
  EXPECT_EQ(fa.status, Status::Ok);
  EXPECT_EQ(fa.target, 6u);
  // FETCH_ADD's compare field (atomic segment bytes 8..15, WQE bytes 40..47) must be 0.
  PatchedRun cmp = run_patched(false, [](uint8_t* w) { w[47] = 1; });
  EXPECT_EQ(cmp.status, Status::LocalQpOp);
  EXPECT_NE(cmp.error.find("malformed WQE: ATOMIC_FA compare field is not 0"), std::string::npos) << cmp.error;
  EXPECT_EQ(cmp.target, 5u);
}

// Objects used after their parents died: host calls throw BadState.
TEST(EmuHostileVerbs, UseAfterParentsDied) {
  auto d = kinet::Device::open("emu");
  const std::string name = d->name();
  auto pd = d->alloc_pd();
  Buffer buf = alloc_buffer(64);
  auto mr = pd->reg_mr(buf.get(), 64, kinet::kAccessAll);
  auto q = pd->create_qp();
  pd.reset();
  EXPECT_TRUE(throws_error([&] { q->to_init(kinet::kAccessAll); }, ErrorCode::BadState,
                           {"its protection domain was destroyed"}));
  EXPECT_EQ(q->state(), QpState::Error) << "destroying a PD moves its QPs to ERROR";
  EXPECT_EQ(mr->length(), 64u);  // the object's own fields still answer
  d.reset();
  EXPECT_TRUE(throws_error([&] { q->handle(); }, ErrorCode::BadState, {"was closed"}));
  mr.reset();  // after the device: no crash
  q.reset();
}

TEST(EmuHostileVerbs, DeviceNamesAndOptions) {
  EXPECT_TRUE(throws_error([] { kinet::Device::open(""); }, ErrorCode::NotFound, {"no RDMA device named ''"}));
  EXPECT_TRUE(throws_error([] { kinet::Device::open("emu-1"); }, ErrorCode::NotFound, {"no RDMA device named"}));
  EXPECT_TRUE(throws_error([] { kinet::Device::open(std::string_view("emu\0" "1", 5)); }, ErrorCode::NotFound,
                           {"no RDMA device named"}));
  auto d = kinet::Device::open("emu");
  EXPECT_TRUE(throws_error([&] { kinet::Device::open(d->name()); }, ErrorCode::BadState, {"is already open"}));
  kinet::DeviceOptions o;
  o.emu_max_msg = 0;
  EXPECT_TRUE(throws_error([&] { kinet::Device::open("emu", o); }, ErrorCode::InvalidArgument, {"emu_max_msg 0"}));
  o = {};
  o.emu_max_msg = (1u << 30) + 1;
  EXPECT_TRUE(throws_error([&] { kinet::Device::open("emu", o); }, ErrorCode::InvalidArgument,
                           {"emu_max_msg 1073741825"}));
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  EXPECT_TRUE(throws_exactly([&] { q->to_init(0x10); }, ErrorCode::InvalidArgument,
                             d->name() + " QP " + hexs(q->qpn()) + ": to_init: unknown access bits 0x10"));
  EXPECT_EQ(q->state(), QpState::Reset);
  kinet::QpConfig c;
  c.rings = kinet::RingPlacement::Gpu;
  if (!d->attr().gpu_memory) {
    EXPECT_TRUE(throws_error([&] { pd->create_qp(c); }, ErrorCode::NotSupported, {"need a GPU"}));
  }
  c = {};
  c.posters = kinet::Posters::Gpu;
  if (!d->attr().gpu_memory) {
    EXPECT_TRUE(throws_error([&] { pd->create_qp(c); }, ErrorCode::NotSupported, {"needs a GPU"}));
  }
}

}  // namespace
