// Doorbell modes end to end on the software NIC, for both providers that run
// on it ("emu" and the mlx5 provider over the NIC's DevX entry point,
// "mlx5_emu"): Uar (the poster stores the doorbell word), BlueFlame (the poster
// copies the WQE into the 64-byte window, which the NIC checks against the
// ring) and CpuAssisted (the poster writes the doorbell record only; the
// device's CPU thread rings). Every mode runs the same operations with data
// checked byte for byte, and a doorbell that is missing still runs nothing.
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>

#include "emu_preamble.hpp"
#include "kinet/mlx5/wire.hpp"

namespace {
using kinet::Doorbell;
using kinet::QpConfig;
using kinet::dev::DoorbellMode;

constexpr uint64_t kTimeoutMs = 5000;

// Sets (or unsets, with nullptr) KINET_DOORBELL_MODE for one scope.
struct EnvMode {
  explicit EnvMode(const char* v) {
    if (const char* o = std::getenv("KINET_DOORBELL_MODE")) had_ = true, old_ = o;
    if (v) setenv("KINET_DOORBELL_MODE", v, 1);
    else unsetenv("KINET_DOORBELL_MODE");
  }
  ~EnvMode() {
    if (had_) setenv("KINET_DOORBELL_MODE", old_.c_str(), 1);
    else unsetenv("KINET_DOORBELL_MODE");
  }
  bool had_ = false;
  std::string old_;
};

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Two devices of one provider, QP a (in `mode`) connected to QP b.
struct Pair {
  Pair(const std::string& provider, Doorbell mode, uint32_t depth = 16) {
    EnvMode env(nullptr);  // the mode comes from the config alone
    da = kinet::Device::open(provider);
    db = kinet::Device::open(provider);
    pa = da->alloc_pd();
    pb = db->alloc_pd();
    QpConfig c = test_qp_config(depth, kTimeoutMs);
    c.doorbell = mode;
    qa = pa->create_qp(c);
    c.doorbell = Doorbell::Auto;
    qb = pb->create_qp(c);
    qa->connect(qb->info());
    qb->connect(qa->info());
  }
  ~Pair() {
    ra.clear();
    rb.clear();
    qa.reset();
    qb.reset();
  }
  Region& reg_a(size_t n) { return *ra.emplace_back(std::make_unique<Region>(make_region(*pa, n))); }
  Region& reg_b(size_t n) { return *rb.emplace_back(std::make_unique<Region>(make_region(*pb, n))); }
  std::unique_ptr<kinet::Device> da, db;
  std::unique_ptr<kinet::ProtectionDomain> pa, pb;
  std::unique_ptr<kinet::QueuePair> qa, qb;
  std::vector<std::unique_ptr<Region>> ra, rb;
};

DoorbellMode expected(Doorbell d) {
  switch (d) {
    case Doorbell::BlueFlame: return DoorbellMode::BlueFlame;
    case Doorbell::CpuAssisted: return DoorbellMode::CpuAssisted;
    default: return DoorbellMode::Uar;
  }
}
const char* mode_tag(Doorbell d) {
  return d == Doorbell::Uar ? "Uar" : d == Doorbell::BlueFlame ? "BlueFlame" : "CpuAssisted";
}

// The handle posters use. CpuAssisted posters never touch the doorbell
// register: give them none, so a store to it would crash the test.
QpHandle poster_handle(const kinet::QueuePair& q) {
  QpHandle h = q.handle();
  if (h.db_mode == DoorbellMode::CpuAssisted) h.db = nullptr;
  return h;
}

class DoorbellModes : public ::testing::TestWithParam<std::tuple<std::string, Doorbell>> {
 protected:
  std::string provider() const { return std::get<0>(GetParam()); }
  Doorbell mode() const { return std::get<1>(GetParam()); }
};

TEST_P(DoorbellModes, HandleNamesTheMode) {
  Pair p(provider(), mode());
  EXPECT_EQ(p.qa->handle().db_mode, expected(mode()));
  EXPECT_EQ(p.qb->handle().db_mode, DoorbellMode::Uar) << "Auto with host posters is Uar";
  EXPECT_EQ(p.qa->handle().abi, kinet::dev::kQpHandleAbi);
}

// Writes of every size class, reads and both atomics, 4x more operations than
// ring slots (ring laps, CQ laps, doorbells after wrap-around).
TEST_P(DoorbellModes, WritesReadsAtomicsAcrossRingLaps) {
  Pair p(provider(), mode(), 16);
  const QpHandle h = poster_handle(*p.qa);
  constexpr size_t kBytes = 8192;
  Region& la = p.reg_a(2 * kBytes);
  Region& rb = p.reg_b(2 * kBytes);
  for (size_t i = 0; i < kBytes; ++i) la.p()[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t i = 0; i < kBytes; ++i) rb.p()[kBytes + i] = static_cast<uint8_t>(i * 13 + 1);
  std::memset(rb.p(), 0, kBytes);
  int ops = 0;
  for (size_t n : {size_t(1), size_t(8), size_t(63), size_t(64), size_t(4096), kBytes}) {
    for (int rep = 0; rep < 6; ++rep, ++ops) {
      Ticket t;
      ASSERT_EQ(dev::put<X>(h, la.p(), la.lkey(), rb.addr(), rb.rkey(), n, dev::kSignal, &t), Status::Ok);
      ASSERT_EQ(dev::wait<X>(h, t), Status::Ok) << p.qa->last_error();
    }
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(rb.p()[i], la.p()[i]) << "write of " << n << " B, byte " << i;
  }
  const char msg[] = "inline";
  ASSERT_EQ(dev::put_inline<X>(h, msg, sizeof msg, rb.addr() + 100, rb.rkey(), dev::kSignal), Status::Ok);
  ASSERT_EQ(dev::quiet<X>(h), Status::Ok) << p.qa->last_error();
  EXPECT_EQ(std::memcmp(rb.p() + 100, msg, sizeof msg), 0);
  for (int rep = 0; rep < 10; ++rep, ++ops) {
    std::memset(la.p() + kBytes, 0, kBytes);
    Ticket t;
    ASSERT_EQ(dev::get<X>(h, la.p() + kBytes, la.lkey(), rb.addr() + kBytes, rb.rkey(), kBytes, dev::kSignal, &t),
              Status::Ok);
    ASSERT_EQ(dev::wait<X>(h, t), Status::Ok) << p.qa->last_error();
    ASSERT_EQ(std::memcmp(la.p() + kBytes, rb.p() + kBytes, kBytes), 0) << "read " << rep;
  }
  uint64_t* counter = rb.u64(2 * kBytes - 16);
  *counter = 5;
  uint64_t* old = la.u64(2 * kBytes - 16);
  for (uint64_t k = 0; k < 20; ++k, ++ops) {
    Ticket t;
    ASSERT_EQ(dev::fetch_add<X>(h, old, la.lkey(), rb.addr() + 2 * kBytes - 16, rb.rkey(), 3, dev::kSignal, &t),
              Status::Ok);
    ASSERT_EQ(dev::wait<X>(h, t), Status::Ok) << p.qa->last_error();
    ASSERT_EQ(*old, 5 + 3 * k);
  }
  EXPECT_EQ(*counter, 65u);
  Ticket t;
  ASSERT_EQ(dev::compare_swap<X>(h, old, la.lkey(), rb.addr() + 2 * kBytes - 16, rb.rkey(), 65, 1000, dev::kSignal,
                                 &t),
            Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  EXPECT_EQ(*old, 65u);
  EXPECT_EQ(*counter, 1000u);
  EXPECT_GT(ops, 4 * 16);
  EXPECT_EQ(p.qa->last_error(), "");
}

// Many WQEs per doorbell and many doorbells: batches published without a
// doorbell, then one ring for all (the BlueFlame copy is the batch's last WQE).
TEST_P(DoorbellModes, BatchesUnderOneDoorbell) {
  Pair p(provider(), mode(), 64);
  const QpHandle h = poster_handle(*p.qa);
  Region& la = p.reg_a(64 * 64);
  Region& rb = p.reg_b(64 * 64);
  for (size_t i = 0; i < 64 * 64; ++i) la.p()[i] = static_cast<uint8_t>(i ^ 0x5a);
  for (int round = 0; round < 20; ++round) {
    std::memset(rb.p(), 0, 64 * 64);
    Ticket first{}, last{};
    for (int k = 0; k < 24; ++k) {
      const uint32_t f = k == 23 ? uint32_t(dev::kSignal) : uint32_t(dev::kNoDoorbell);
      ASSERT_EQ(dev::put<X>(h, la.p() + k * 64, la.lkey(), rb.addr() + k * 64, rb.rkey(), 64, f | dev::kNoDoorbell,
                            k == 0 ? &first : &last),
                Status::Ok);
    }
    ASSERT_EQ(dev::ring_doorbell<X>(h, last.idx), Status::Ok);
    ASSERT_EQ(dev::wait<X>(h, Ticket{last.idx, first.first}), Status::Ok) << p.qa->last_error();
    ASSERT_EQ(std::memcmp(la.p(), rb.p(), 24 * 64), 0) << "round " << round;
  }
}

// A WQE the poster did not announce never runs: Uar/BlueFlame: the record
// written, no doorbell store; CpuAssisted: no record (the CPU thread rings
// only what a record says).
TEST_P(DoorbellModes, MissingDoorbellRunsNothing) {
  Pair p(provider(), mode());
  const QpHandle h = poster_handle(*p.qa);
  Region& la = p.reg_a(4096);
  Region& rb = p.reg_b(4096);
  std::memset(la.p(), 0x6b, 4096);
  uint64_t idx = 0;
  ASSERT_EQ(dev::reserve<X>(h, 1, &idx), Status::Ok);
  dev::prepare_write<X>(h, idx, la.p(), la.lkey(), rb.addr(), rb.rkey(), 4096, dev::kSignal);
  if (h.db_mode != DoorbellMode::CpuAssisted)
    __atomic_store_n(&h.dbrec[kinet::mlx5::kSendDbrIndex], kinet::detail::bswap32(1), __ATOMIC_RELEASE);
  // test() polls and never rings: 300 ms of nothing happening.
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(300)) {
    ASSERT_EQ(dev::test<X>(h, Ticket{idx + 1, idx}), Status::Pending) << "ran without a doorbell";
    std::this_thread::yield();
  }
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(rb.p()[i], 0) << "byte " << i << " moved without a doorbell";
  // Announced the mode's way, it runs.
  ASSERT_EQ(dev::publish<X>(h, idx, 1), Status::Ok);
  ASSERT_EQ(dev::ring_doorbell<X>(h, idx + 1), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, Ticket{idx + 1, idx}), Status::Ok) << p.qa->last_error();
  EXPECT_EQ(rb.p()[4095], 0x6b);
}

INSTANTIATE_TEST_SUITE_P(Modes, DoorbellModes,
                         ::testing::Combine(::testing::Values(std::string("emu"), std::string("mlx5_emu")),
                                            ::testing::Values(Doorbell::Uar, Doorbell::BlueFlame,
                                                              Doorbell::CpuAssisted)),
                         [](const auto& info) {
                           std::string p = std::get<0>(info.param) == "emu" ? "Emu" : "Mlx5Emu";
                           return p + "_" + mode_tag(std::get<1>(info.param));
                         });

// ---- BlueFlame: the copy must be the ring's WQE -------------------------------------

class BlueFlame : public ::testing::TestWithParam<std::string> {};

// Publishes one write WQE, then writes the record and hands `bf` (a copy of
// the slot, possibly altered by the caller) to the window, as a poster would.
struct BfPost {
  Pair p;
  QpHandle h;
  Region& la;
  Region& rb;
  uint64_t idx = 0;
  alignas(64) uint8_t copy[64];
  explicit BfPost(const std::string& provider)
      : p(provider, Doorbell::BlueFlame), h(p.qa->handle()), la(p.reg_a(256)), rb(p.reg_b(256)) {
    std::memset(la.p(), 0x3c, 256);
    EXPECT_EQ(dev::reserve<X>(h, 1, &idx), Status::Ok);
    dev::prepare_write<X>(h, idx, la.p(), la.lkey(), rb.addr(), rb.rkey(), 256, dev::kSignal);
    EXPECT_EQ(dev::publish<X>(h, idx, 1), Status::Ok);
    std::memcpy(copy, h.sq, 64);
  }
  // Rings by hand (recorded as rung, so wait() does not ring the true copy again).
  Status ring() {
    kinet::dev::detail::store_dbrec_after_wqes(h, kinet::detail::bswap32(uint32_t(idx + 1)));
    kinet::dev::detail::store_blueflame(h.db, copy);
    h.state->rung = idx + 1;
    return dev::wait<X>(h, Ticket{idx + 1, idx});
  }
};

// "emu" names the NIC's reason in last_error(); the mlx5 provider reports
// what its CQE says (the reason is in the NIC's log).
::testing::AssertionResult reason(const std::string& provider, const std::string& last, const std::string& why) {
  const std::string want = provider == "emu" ? why : "local QP operation error (CQE syndrome 0x02), CQE syndrome 0x2";
  if (has(last, want)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << last << "\" lacks \"" << want << "\"";
}

TEST_P(BlueFlame, ExactCopyRuns) {
  BfPost b(GetParam());
  ASSERT_EQ(b.ring(), Status::Ok) << b.p.qa->last_error();
  EXPECT_EQ(b.rb.p()[255], 0x3c);
}

// Hardware would execute the copy (here: 16 bytes to another address); the
// software NIC reports it on that WQE and moves nothing.
TEST_P(BlueFlame, CopyThatDiffersFromTheRingIsALocalQpOpError) {
  BfPost b(GetParam());
  b.copy[16 + 7] ^= 0x40;  // the remote address's low byte
  EXPECT_EQ(b.ring(), Status::LocalQpOp);
  EXPECT_TRUE(reason(GetParam(), b.p.qa->last_error(),
                     "BlueFlame copy of WQE 0 differs from its ring slot (first at byte 23: copy 0x"));
  for (int i = 0; i < 256; ++i) ASSERT_EQ(b.rb.p()[i], 0) << "byte " << i;
  EXPECT_EQ(b.p.qa->state(), QpState::Error);
}

// The last byte is the edge of the compared range.
TEST_P(BlueFlame, LastByteDiffers) {
  BfPost b(GetParam());
  b.copy[63] ^= 1;
  EXPECT_EQ(b.ring(), Status::LocalQpOp);
  EXPECT_TRUE(reason(GetParam(), b.p.qa->last_error(), "(first at byte 63:"));
}

// The head is the doorbell: a DS that is not one basic block is a bad doorbell.
TEST_P(BlueFlame, HeadWithDsBeyondOneBlockIsReported) {
  BfPost b(GetParam());
  b.copy[7] = 5;  // qpn_ds's DS byte
  EXPECT_EQ(b.ring(), Status::LocalQpOp);
  EXPECT_TRUE(reason(GetParam(), b.p.qa->last_error(), "with DS 5: a BlueFlame copy is one 64-byte WQE (DS 1..4)"));
}

INSTANTIATE_TEST_SUITE_P(Providers, BlueFlame, ::testing::Values(std::string("emu"), std::string("mlx5_emu")),
                         [](const auto& info) { return info.param == "emu" ? "Emu" : "Mlx5Emu"; });

// ---- choosing the mode: config, environment ----------------------------------------

class Choice : public ::testing::TestWithParam<std::string> {};

TEST_P(Choice, EnvironmentPicksTheModeOfAutoQps) {
  auto d = kinet::Device::open(GetParam());
  auto pd = d->alloc_pd();
  for (auto [v, want] : {std::pair{"cpu", DoorbellMode::CpuAssisted}, std::pair{"bf", DoorbellMode::BlueFlame},
                         std::pair{"uar", DoorbellMode::Uar}, std::pair{"auto", DoorbellMode::Uar}}) {
    EnvMode env(v);
    EXPECT_EQ(pd->create_qp(test_qp_config(16, kTimeoutMs))->handle().db_mode, want) << v;
  }
}

TEST_P(Choice, ConfigWinsOverTheEnvironment) {
  auto d = kinet::Device::open(GetParam());
  auto pd = d->alloc_pd();
  EnvMode env("cpu");
  QpConfig c = test_qp_config(16, kTimeoutMs);
  c.doorbell = Doorbell::BlueFlame;
  EXPECT_EQ(pd->create_qp(c)->handle().db_mode, DoorbellMode::BlueFlame);
}

TEST_P(Choice, UnknownEnvironmentValueIsRefused) {
  auto d = kinet::Device::open(GetParam());
  auto pd = d->alloc_pd();
  EnvMode env("gpu");
  try {
    pd->create_qp(test_qp_config(16, kTimeoutMs));
    ADD_FAILURE() << "created a QP with KINET_DOORBELL_MODE=gpu";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(has(e.what(), "KINET_DOORBELL_MODE=gpu is not one of auto, uar, bf, cpu")) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, Choice, ::testing::Values(std::string("emu"), std::string("mlx5_emu")),
                         [](const auto& info) { return info.param == "emu" ? "Emu" : "Mlx5Emu"; });

// A CpuAssisted QP reset and reconnected rings again from its new record.
TEST(CpuAssisted, RingsAgainAfterReset) {
  for (const char* prov : {"emu", "mlx5_emu"}) {
    Pair p(prov, Doorbell::CpuAssisted);
    Region& la = p.reg_a(64);
    Region& rb = p.reg_b(64);
    std::memset(la.p(), 0x11, 64);
    QpHandle h = poster_handle(*p.qa);
    ASSERT_EQ(dev::put<X>(h, la.p(), la.lkey(), rb.addr(), rb.rkey(), 64, dev::kSignal), Status::Ok);
    ASSERT_EQ(dev::quiet<X>(h), Status::Ok) << prov;
    p.qa->reset();
    p.qb->reset();
    p.qa->connect(p.qb->info());
    p.qb->connect(p.qa->info());
    std::memset(la.p(), 0x22, 64);
    h = poster_handle(*p.qa);
    ASSERT_EQ(dev::put<X>(h, la.p(), la.lkey(), rb.addr(), rb.rkey(), 64, dev::kSignal), Status::Ok);
    ASSERT_EQ(dev::quiet<X>(h), Status::Ok) << prov << ": " << p.qa->last_error();
    EXPECT_EQ(rb.p()[63], 0x22) << prov;
  }
}

}  // namespace
