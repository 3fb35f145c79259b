// The strict software NIC: it runs only what a doorbell announced, reports a
// doorbell that runs ahead of its record, honours (and punishes the lack of)
// fences in relaxed mode, rejects every malformed WQE field with its own
// reason, and writes every CQE field as the PRM says. WQEs are built with the
// device verbs, then single fields are patched in the ring and the doorbell
// record and word are stored by hand.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>

#include "emu_preamble.hpp"
#include "kinet/mlx5/wire.hpp"

namespace {

constexpr uint64_t kTimeoutMs = 1000;

PairOptions opts(uint32_t depth = 64) {
  PairOptions o;
  o.cfg_a = test_qp_config(depth, kTimeoutMs);
  o.cfg_b = test_qp_config(depth, kTimeoutMs);
  return o;
}

// Relaxed or in-order NICs for the pairs a test opens (the engine reads the
// variable when a device opens).
struct Mode {
  explicit Mode(bool relaxed) {
    const char* v = std::getenv("KINET_EMU_RELAXED");
    had_ = v != nullptr;
    if (had_) old_ = v;
    setenv("KINET_EMU_RELAXED", relaxed ? "1" : "0", 1);
  }
  ~Mode() {
    if (had_) setenv("KINET_EMU_RELAXED", old_.c_str(), 1);
    else unsetenv("KINET_EMU_RELAXED");
  }
  bool had_;
  std::string old_;
};

// last_error() holds the exact reason (a substring: it starts with the WQE).
::testing::AssertionResult has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

uint8_t* slot(const QpHandle& h, uint64_t idx) { return h.sq + (idx & (h.size() - 1)) * 64; }
void store_dbrec(const QpHandle& h, uint32_t pi) {
  __atomic_store_n(&h.dbrec[1], kinet::detail::bswap32(pi & 0xffffu), __ATOMIC_RELEASE);
}
void store_db(const QpHandle& h, uint32_t pi, uint32_t qpn) {
  __atomic_store_n(h.db, kinet::mlx5::doorbell_word(pi, kinet::detail::bswap32(qpn << 8)), __ATOMIC_RELEASE);
}
// What ring_doorbell does, by hand: record, then doorbell word.
void ring_by_hand(const QpHandle& h, uint32_t pi) {
  store_dbrec(h, pi);
  store_db(h, pi, h.qpn);
}

// The 64-byte CQE at CQ index i, field by field.
struct CqeView {
  uint8_t opcode, owner, syndrome, wqe_opcode;
  uint16_t wqe_counter;
  uint32_t byte_cnt, qpn;
};
uint32_t be32(const uint8_t* p) { return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3]; }
CqeView cqe_at(const QpHandle& h, uint32_t i) {
  const uint8_t* c = reinterpret_cast<const uint8_t*>(h.cq.cqes + (i & ((1u << h.cq.log_n) - 1)));
  CqeView v;
  v.opcode = c[63] >> 4;
  v.owner = c[63] & 1;
  v.syndrome = c[55];
  v.wqe_opcode = c[56];
  v.qpn = be32(c + 56) & 0xffffff;
  v.wqe_counter = static_cast<uint16_t>((c[60] << 8) | c[61]);
  v.byte_cnt = be32(c + 44);
  return v;
}

// ---- doorbells ----------------------------------------------------------------

// Host posters run the NIC themselves (QpHandle::host_kick): with the engine
// thread looking only once a second, 200 puts each waited for take far less,
// and the device still closes at once.
TEST(StrictNic, HostPostersRunTheNicThemselves) {
  ScopedEnv idle("KINET_EMU_KICKED_IDLE_US", "1000000");
  auto p = std::make_unique<EmuPair>(opts());
  Region& la = p->reg_a(4096);
  Region& rb = p->reg_b(4096);
  const QpHandle h = p->h();
  ASSERT_EQ(h.host_kick, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the engine thread is asleep by now
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < 200; ++i) {
    std::memset(la.p(), static_cast<int>(i + 1), 64);
    Ticket t;
    ASSERT_EQ(dev::put<X>(h, la.p(), la.lkey(), rb.addr() + (i % 64) * 64, rb.rkey(), 64, 0, &t), Status::Ok);
    ASSERT_EQ(dev::wait<X>(h, t), Status::Ok) << "put " << i;
    ASSERT_EQ(rb.p()[(i % 64) * 64 + 63], static_cast<uint8_t>(i + 1)) << "put " << i;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(900));
  const auto t1 = std::chrono::steady_clock::now();
  p.reset();  // stops the sleeping engine thread
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::milliseconds(500));
}

TEST(StrictNic, HostKickCanBeTurnedOff) {
  ScopedEnv off("KINET_EMU_HOST_KICK", "0");
  EmuPair p(opts());
  EXPECT_EQ(p.h().host_kick, 0);
}


TEST(StrictNic, RecordWithoutDoorbellExecutesNothing) {
  EmuPair p(opts());
  Region& la = p.reg_a(4096);
  Region& rb = p.reg_b(4096);
  std::memset(la.p(), 0x5a, 4096);
  const QpHandle h = p.h();
  uint64_t idx = 0;
  ASSERT_EQ(dev::reserve<X>(h, 1, &idx), Status::Ok);
  dev::prepare_write<X>(h, idx, la.p(), la.lkey(), rb.addr(), rb.rkey(), 4096, dev::kSignal);
  store_dbrec(h, 1);  // published in the record, never announced
  EXPECT_EQ(dev::wait<X>(h, Ticket{idx + 1}), Status::TimeoutCompletion);
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(rb.p()[i], 0) << "byte " << i << " moved without a doorbell";
  // The doorbell then runs exactly what the record holds.
  store_db(h, 1, h.qpn);
  EXPECT_EQ(dev::wait<X>(h, Ticket{idx + 1}), Status::Ok);
  EXPECT_EQ(rb.p()[4095], 0x5a);
}

TEST(StrictNic, DoorbellRunsOnlyUpToItsIndex) {
  EmuPair p(opts());
  Region& la = p.reg_a(64);
  Region& rb = p.reg_b(64);
  const QpHandle h = p.h();
  uint64_t idx = 0;
  ASSERT_EQ(dev::reserve<X>(h, 2, &idx), Status::Ok);
  const uint8_t one = 1, two = 2;
  dev::prepare_write_inline<X>(h, idx, &one, 1, rb.addr(), rb.rkey(), dev::kSignal);
  dev::prepare_write_inline<X>(h, idx + 1, &two, 1, rb.addr() + 1, rb.rkey(), dev::kSignal);
  store_dbrec(h, 2);
  store_db(h, 1, h.qpn);  // announces WQE 0 only
  ASSERT_EQ(dev::wait<X>(h, Ticket{idx + 1}), Status::Ok);
  EXPECT_EQ(rb.p()[0], 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(dev::test<X>(h, Ticket{idx + 2}), Status::Pending) << "WQE 1 ran without a doorbell announcing it";
  EXPECT_EQ(rb.p()[1], 0);
  store_db(h, 2, h.qpn);
  ASSERT_EQ(dev::wait<X>(h, Ticket{idx + 2}), Status::Ok);
  EXPECT_EQ(rb.p()[1], 2);
  (void)la;
}

// The error CQE of a bad doorbell, on the first WQE it announced.
// Every field of the error CQE of WQE i, at CQ index i (an error CQE's byte count is 0).
void expect_error_cqe(const QpHandle& h, uint32_t i, uint8_t syndrome, uint8_t wqe_opcode, uint8_t owner) {
  SCOPED_TRACE("error CQE " + std::to_string(i));
  const CqeView c = cqe_at(h, i);
  EXPECT_EQ(c.opcode, 0xd);
  EXPECT_EQ(c.syndrome, syndrome);
  EXPECT_EQ(c.wqe_counter, i);
  EXPECT_EQ(c.wqe_opcode, wqe_opcode);
  EXPECT_EQ(c.qpn, h.qpn);
  EXPECT_EQ(c.byte_cnt, 0u);
  EXPECT_EQ(c.owner, owner);
}

void expect_doorbell_error(EmuPair& p, const std::string& reason) {
  const QpHandle h = p.h();
  EXPECT_EQ(dev::wait<X>(h, Ticket{1}), Status::LocalQpOp);
  EXPECT_EQ(p.qa->state(), kinet::QpState::Error);
  EXPECT_TRUE(has(p.qa->last_error(), reason));
  const CqeView c = cqe_at(h, 0);
  EXPECT_EQ(c.opcode, 0xd);
  EXPECT_EQ(c.syndrome, 0x02);
  EXPECT_EQ(c.wqe_counter, 0);
}

TEST(StrictNic, DoorbellAheadOfRecordIsReported) {
  EmuPair p(opts());
  Region& rb = p.reg_b(64);
  const QpHandle h = p.h();
  uint64_t idx = 0;
  ASSERT_EQ(dev::reserve<X>(h, 1, &idx), Status::Ok);
  const uint8_t v = 7;
  dev::prepare_write_inline<X>(h, idx, &v, 1, rb.addr(), rb.rkey(), dev::kSignal);
  store_db(h, 1, h.qpn);  // doorbell first: the record still says 0
  expect_doorbell_error(p, "doorbell announced WQE index 1 but the doorbell record says 0");
  EXPECT_EQ(rb.p()[0], 0);
}

TEST(StrictNic, DoorbellOneAheadOfRecordIsReported) {  // the exact edge: record 16, doorbell 17
  EmuPair p(opts());
  const QpHandle h = p.h();
  for (int i = 0; i < 16; ++i) ASSERT_EQ(dev::nop<X>(h, 0, nullptr), Status::Ok);
  ASSERT_EQ(dev::quiet<X>(h), Status::Ok);
  uint64_t idx = 0;
  ASSERT_EQ(dev::reserve<X>(h, 1, &idx), Status::Ok);
  ASSERT_EQ(idx, 16u);
  dev::prepare_nop<X>(h, idx, dev::kSignal);
  store_db(h, 17, h.qpn);  // the record still says 16
  EXPECT_EQ(dev::wait<X>(h, Ticket{17}), Status::LocalQpOp);
  EXPECT_TRUE(has(p.qa->last_error(), "doorbell announced WQE index 17 but the doorbell record says 16"));
}

TEST(StrictNic, DoorbellNamingAnotherQpIsReported) {
  EmuPair p(opts());
  const QpHandle h = p.h();
  uint64_t idx = 0;
  ASSERT_EQ(dev::reserve<X>(h, 1, &idx), Status::Ok);
  dev::prepare_nop<X>(h, idx, dev::kSignal);
  store_dbrec(h, 1);
  store_db(h, 1, h.qpn + 1);
  char want[128];
  std::snprintf(want, sizeof want, "doorbell names QP 0x%x but was written to the doorbell of QP 0x%x", h.qpn + 1,
                h.qpn);
  expect_doorbell_error(p, want);
}

TEST(StrictNic, DoorbellBeyondTheRingIsReported) {
  {  // exactly a ring's worth: fine
    EmuPair p(opts(4));
    const QpHandle h = p.h();
    for (uint64_t i = 0; i < 4; ++i) dev::prepare_nop<X>(h, i, dev::kSignal);
    ring_by_hand(h, 4);
    EXPECT_EQ(dev::wait<X>(h, Ticket{4}), Status::Ok);
  }
  EmuPair p(opts(4));
  const QpHandle h = p.h();
  for (uint64_t i = 0; i < 4; ++i) dev::prepare_nop<X>(h, i, dev::kSignal);
  ring_by_hand(h, 5);  // one more than the ring holds
  EXPECT_EQ(dev::wait<X>(h, Ticket{1}), Status::LocalQpOp);
  EXPECT_TRUE(has(p.qa->last_error(),
                  "doorbell announced WQE index 5, 5 WQEs past the last announced one (0): more than the ring holds (4)"));
}

// ---- relaxed execution ------------------------------------------------------------

// get(remote src -> buf) then put(buf -> remote dst), one doorbell for both.
// Returns the first byte that reached dst.
uint8_t get_then_put(bool relaxed, uint32_t put_flags, uint32_t n = 4096) {
  Mode m(relaxed);
  EmuPair p(opts());
  Region& buf = p.reg_a(n);
  Region& src = p.reg_b(n);
  Region& dst = p.reg_b(n);
  std::memset(buf.p(), 0x11, n);  // stale
  std::memset(src.p(), 0x22, n);  // fresh
  const QpHandle h = p.h();
  uint64_t idx = 0;
  EXPECT_EQ(dev::reserve<X>(h, 2, &idx), Status::Ok);
  dev::prepare_read<X>(h, idx, buf.p(), buf.lkey(), src.addr(), src.rkey(), n, 0);
  dev::prepare_write<X>(h, idx + 1, buf.p(), buf.lkey(), dst.addr(), dst.rkey(), n, dev::kSignal | put_flags);
  EXPECT_EQ(dev::publish<X>(h, idx, 2), Status::Ok);
  EXPECT_EQ(dev::ring_doorbell<X>(h, idx + 2), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, Ticket{idx + 2}), Status::Ok);
  EXPECT_EQ(buf.p()[n - 1], 0x22) << "the read itself delivered";
  for (size_t i = 1; i < n; ++i)
    if (dst.p()[i] != dst.p()[0]) ADD_FAILURE() << "dst mixes old and new bytes at " << i;
  return dst.p()[0];
}

TEST(StrictNicRelaxed, MissingFenceSendsStaleData) { EXPECT_EQ(get_then_put(true, 0), 0x11); }
TEST(StrictNicRelaxed, FenceWaitsForTheRead) { EXPECT_EQ(get_then_put(true, dev::kFence), 0x22); }
TEST(StrictNicRelaxed, InOrderModeNeedsNoFence) { EXPECT_EQ(get_then_put(false, 0), 0x22); }
// Sources above 1 MiB are not copied aside: such a WRITE waits for the read.
TEST(StrictNicRelaxed, SnapshotLimitEdge) {
  EXPECT_EQ(get_then_put(true, 0, 1u << 20), 0x11);
  EXPECT_EQ(get_then_put(true, 0, (1u << 20) + 1), 0x22);
}

TEST(StrictNicRelaxed, LaterReadSeesEarlierWrite) {
  Mode m(true);
  EmuPair p(opts());
  Region& a = p.reg_a(8192);
  Region& rb = p.reg_b(4096);
  std::memset(a.p(), 0x33, 4096);
  const QpHandle h = p.h();
  Ticket t;
  ASSERT_EQ(dev::put<X>(h, a.p(), a.lkey(), rb.addr(), rb.rkey(), 4096, 0, nullptr), Status::Ok);
  ASSERT_EQ(dev::get<X>(h, a.p() + 4096, a.lkey(), rb.addr(), rb.rkey(), 4096, dev::kSignal, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  EXPECT_TRUE(bytes_equal(a.p() + 4096, a.p(), 4096, "read after write on one QP"));
}

TEST(StrictNicRelaxed, SeveralReadsOutstandingThenFencedAtomic) {
  Mode m(true);
  EmuPair p(opts());
  Region& a = p.reg_a(4096);
  Region& rb = p.reg_b(4096);
  for (int i = 0; i < 4; ++i) std::memset(rb.p() + i * 1024, 0x40 + i, 1024);
  const QpHandle h = p.h();
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(dev::get<X>(h, a.p() + i * 1024, a.lkey(), rb.addr() + i * 1024, rb.rkey(), 1024, dev::kNoDoorbell,
                          nullptr),
              Status::Ok);
  Ticket t;
  ASSERT_EQ(dev::fetch_add<X>(h, a.u64(0), a.lkey(), rb.addr(), rb.rkey(), 1, dev::kFence | dev::kSignal, &t),
            Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  EXPECT_EQ(*a.u64(0), 0x4040404040404040ull) << "atomic result after the reads (fenced)";
  for (int i = 1; i < 4; ++i) EXPECT_EQ(a.p()[i * 1024 + 7], 0x40 + i);
}

// ---- malformed WQEs: one field at a time ---------------------------------------

// Posts one signalled 16-byte WRITE (or what `make` builds) at index 0, lets
// `patch` change the WQE bytes, rings, and checks the error CQE.
struct Patched {
  Status st;
  std::string why;
  CqeView cqe;
  uint32_t qpn;
};
Patched post_patched(const std::function<void(uint8_t*)>& patch,
                     const std::function<void(const QpHandle&, Region&, Region&, Region&)>& make = nullptr) {
  EmuPair p(opts());
  Region& la = p.reg_a(4096);
  Region& res = p.reg_a(64);
  Region& rb = p.reg_b(4096);
  std::memset(la.p(), 0x77, 4096);
  const QpHandle h = p.h();
  uint64_t idx = 0;
  EXPECT_EQ(dev::reserve<X>(h, 1, &idx), Status::Ok);
  if (make) make(h, la, res, rb);
  else dev::prepare_write<X>(h, idx, la.p(), la.lkey(), rb.addr(), rb.rkey(), 16, dev::kSignal);
  patch(slot(h, idx));
  EXPECT_EQ(dev::publish<X>(h, idx, 1), Status::Ok);
  EXPECT_EQ(dev::ring_doorbell<X>(h, idx + 1), Status::Ok);
  Patched r;
  r.st = dev::wait<X>(h, Ticket{idx + 1});
  r.why = p.qa->last_error();
  r.cqe = cqe_at(h, 0);
  r.qpn = h.qpn;
  for (size_t i = 0; i < 4096; ++i)
    if (rb.p()[i] != 0) {
      ADD_FAILURE() << "a malformed WQE moved byte " << i;
      break;
    }
  return r;
}

void expect_malformed(const Patched& r, const std::string& reason, Status want = Status::LocalQpOp,
                      uint8_t wqe_opcode = 0x08) {
  EXPECT_EQ(r.st, want);
  EXPECT_TRUE(has(r.why, reason));
  EXPECT_EQ(r.cqe.opcode, 0xd);
  EXPECT_EQ(r.cqe.syndrome, want == Status::LocalQpOp ? 0x02 : 0x01);
  EXPECT_EQ(r.cqe.wqe_counter, 0);
  EXPECT_EQ(r.cqe.wqe_opcode, wqe_opcode);
  EXPECT_EQ(r.cqe.qpn, r.qpn);
  EXPECT_EQ(r.cqe.byte_cnt, 0u);
  EXPECT_EQ(r.cqe.owner, 0);
}

TEST(StrictNicMalformed, UnpatchedWqeIsFine) {
  EmuPair p(opts());
  Region& la = p.reg_a(64);
  Region& rb = p.reg_b(64);
  Ticket t;
  ASSERT_EQ(dev::put<X>(p.h(), la.p(), la.lkey(), rb.addr(), rb.rkey(), 16, dev::kSignal, &t), Status::Ok);
  EXPECT_EQ(dev::wait<X>(p.h(), t), Status::Ok);
}
TEST(StrictNicMalformed, WqeIndex) {
  expect_malformed(post_patched([](uint8_t* b) { b[2] = 1; }), "WQE index field 1 does not match its slot (0)");
}
TEST(StrictNicMalformed, Opcode) {
  expect_malformed(post_patched([](uint8_t* b) { b[3] = 0x0a; }), "opcode 0x0a (SEND) is not supported by emu",
                   Status::LocalQpOp, 0x0a);
  expect_malformed(post_patched([](uint8_t* b) { b[3] = 0x13; }), "opcode 0x13 (UNKNOWN) is not supported by emu",
                   Status::LocalQpOp, 0x13);
}
TEST(StrictNicMalformed, DsBeyondOneBasicBlock) {
  expect_malformed(post_patched([](uint8_t* b) { b[7] = 5; }), "DS count 5 does not fit one 64-byte basic block");
  expect_malformed(post_patched([](uint8_t* b) { b[7] = 0; }), "DS count 0 does not fit one 64-byte basic block");
}
TEST(StrictNicMalformed, DsAgainstOpcode) {
  expect_malformed(post_patched([](uint8_t* b) { b[7] = 1; }), "RDMA_WRITE with DS 1 (no remote-address segment)");
  auto atomic = [](const QpHandle& h, Region& la, Region& res, Region& rb) {
    dev::prepare_fetch_add<X>(h, 0, res.u64(), res.lkey(), rb.addr(), rb.rkey(), 1, dev::kSignal);
    (void)la;
  };
  expect_malformed(post_patched([](uint8_t* b) { b[7] = 3; }, atomic),
                   "atomic WQE with DS 3 (expected 4: ctrl, raddr, atomic, data)", Status::LocalQpOp, 0x12);
  auto nop = [](const QpHandle& h, Region&, Region&, Region&) { dev::prepare_nop<X>(h, 0, dev::kSignal); };
  expect_malformed(post_patched([](uint8_t* b) { b[7] = 2; }, nop), "NOP with DS 2 (expected 1)", Status::LocalQpOp,
                   0x00);
}
TEST(StrictNicMalformed, Opmod) {
  expect_malformed(post_patched([](uint8_t* b) { b[0] = 1; }), "opmod 0x01 is not 0");
}
TEST(StrictNicMalformed, Qpn) {
  Patched r = post_patched([](uint8_t* b) { b[6] ^= 1; });
  char want[96];
  std::snprintf(want, sizeof want, "WQE names QP 0x%x but was posted on QP 0x%x", r.qpn ^ 1, r.qpn);
  expect_malformed(r, want);
}
TEST(StrictNicMalformed, SignatureDciImm) {
  expect_malformed(post_patched([](uint8_t* b) { b[8] = 0x80; }),
                   "signature byte 0x80 is not 0 (WQE signatures are off)");
  expect_malformed(post_patched([](uint8_t* b) { b[10] = 1; }), "dci stream channel id 0x01 is not 0 on an RC QP");
  expect_malformed(post_patched([](uint8_t* b) { b[15] = 1; }),
                   "immediate field 0x01 is not 0 (no opcode with immediate)");
}
TEST(StrictNicMalformed, FmCeSe) {
  expect_malformed(post_patched([](uint8_t* b) { b[11] |= 0x01; }), "fm_ce_se 0x09 has unknown bits 0x01");
  expect_malformed(post_patched([](uint8_t* b) { b[11] |= 0x10; }), "fm_ce_se 0x18 has unknown bits 0x10");
  expect_malformed(post_patched([](uint8_t* b) { b[11] |= 0x40; }), "fm_ce_se 0x48 has an unknown fence mode");
  expect_malformed(post_patched([](uint8_t* b) { b[11] = 0x04; }), "fm_ce_se 0x04 asks for an unsupported CQE mode");
}
TEST(StrictNicMalformed, RaddrReserved) {
  expect_malformed(post_patched([](uint8_t* b) { b[31] = 1; }),
                   "remote-address segment reserved word is 0x01, must be 0");
}
auto inline8 = [](const QpHandle& h, Region& la, Region&, Region& rb) {
  dev::prepare_write_inline<X>(h, 0, la.p(), 8, rb.addr(), rb.rkey(), dev::kSignal);
};
void set_bc(uint8_t* b, uint32_t v) {
  b[32] = uint8_t(v >> 24), b[33] = uint8_t(v >> 16), b[34] = uint8_t(v >> 8), b[35] = uint8_t(v);
}
TEST(StrictNicMalformed, InlineLength) {
  // DS 4 holds 28 inline bytes: 28 is fine (below), 29 overruns.
  expect_malformed(post_patched([](uint8_t* b) { b[7] = 4, set_bc(b, 0x80000000u | 29); }, inline8),
                   "inline length 29 overruns the WQE (at most 28 bytes in one basic block)");
  // Length bits above 0x3ff are not masked away.
  expect_malformed(post_patched([](uint8_t* b) { set_bc(b, 0x80000000u | 0x400u | 8); }, inline8),
                   "inline length 1032 overruns the WQE");
  expect_malformed(post_patched([](uint8_t* b) { set_bc(b, 0x80000000u | 13); }, inline8),
                   "inline WQE of 13 bytes with DS 3 (expected 4)");
  expect_malformed(post_patched([](uint8_t* b) { b[44] = 1; }, inline8), "inline padding byte 44 is 0x01, must be 0");
}
TEST(StrictNicMalformed, InlineOf28BytesIsFine) {
  EmuPair p(opts());
  Region& la = p.reg_a(64);
  Region& rb = p.reg_b(64);
  std::memset(la.p(), 0x9c, 28);
  Ticket t;
  ASSERT_EQ(dev::put_inline<X>(p.h(), la.p(), 28, rb.addr(), rb.rkey(), dev::kSignal, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(p.h(), t), Status::Ok);
  EXPECT_TRUE(bytes_equal(rb.p(), la.p(), 28, "28 inline bytes"));
  EXPECT_EQ(rb.p()[28], 0);
}
TEST(StrictNicMalformed, PointerByteCountWithBit31) {
  auto read = [](const QpHandle& h, Region& la, Region&, Region& rb) {
    dev::prepare_read<X>(h, 0, la.p(), la.lkey(), rb.addr(), rb.rkey(), 16, dev::kSignal);
  };
  expect_malformed(post_patched([](uint8_t* b) { set_bc(b, 0x80000000u); }, read),
                   "RDMA_READ data segment byte count 2147483648 has bit 31 (the inline flag) set", Status::LocalQpOp,
                   0x10);
}
TEST(StrictNicMalformed, ByteCountAboveMaxMsg) {
  PairOptions o = opts();
  o.dev_a.emu_max_msg = 4096;
  EmuPair p(o);
  Region& la = p.reg_a(8192);
  Region& rb = p.reg_b(8192);
  // The poster's copy of max_msg is raised past the device's, so prepare_*'s
  // contract (bytes <= q.max_msg, asserted in debug builds) holds and the NIC's
  // own check is what refuses 4097 bytes.
  QpHandle h = p.h();
  h.max_msg = 8192;
  for (uint32_t len : {4096u, 4097u}) {
    uint64_t idx = 0;
    ASSERT_EQ(dev::reserve<X>(h, 1, &idx), Status::Ok);
    dev::prepare_write<X>(h, idx, la.p(), la.lkey(), rb.addr(), rb.rkey(), len, dev::kSignal);
    ASSERT_EQ(dev::publish<X>(h, idx, 1), Status::Ok);
    ASSERT_EQ(dev::ring_doorbell<X>(h, idx + 1), Status::Ok);
    EXPECT_EQ(dev::wait<X>(h, Ticket{idx + 1}), len == 4096 ? Status::Ok : Status::LocalLength) << len;
  }
  EXPECT_TRUE(has(p.qa->last_error(), "message of 4097 bytes exceeds the device's max_msg 4096"));
  const CqeView c = cqe_at(h, 1);
  EXPECT_EQ(c.syndrome, 0x01);
  EXPECT_EQ(c.wqe_counter, 1);
}

// ---- CQE fields ---------------------------------------------------------------------

TEST(StrictNicCqe, SuccessErrorAndFlushCqes) {
  EmuPair p(opts(4));
  Region& la = p.reg_a(4096);
  Region& rb = p.reg_b(4096);
  const QpHandle h = p.h();
  Ticket t;
  ASSERT_EQ(dev::put<X>(h, la.p(), la.lkey(), rb.addr(), rb.rkey(), 100, dev::kSignal, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  CqeView c = cqe_at(h, 0);
  EXPECT_EQ(c.opcode, 0x0);
  EXPECT_EQ(c.byte_cnt, 100u);
  EXPECT_EQ(c.wqe_counter, 0);
  EXPECT_EQ(c.wqe_opcode, 0x08);
  EXPECT_EQ(c.qpn, h.qpn);
  EXPECT_EQ(c.owner, 0);
  ASSERT_EQ(dev::get<X>(h, la.p(), la.lkey(), rb.addr(), rb.rkey(), 33, dev::kSignal, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  c = cqe_at(h, 1);
  EXPECT_EQ(c.opcode, 0x0);
  EXPECT_EQ(c.byte_cnt, 33u);
  EXPECT_EQ(c.wqe_counter, 1);
  EXPECT_EQ(c.wqe_opcode, 0x10);
  ASSERT_EQ(dev::nop<X>(h, dev::kSignal, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  ASSERT_EQ(dev::nop<X>(h, dev::kSignal, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
  // Second lap of a 4-entry CQ: owner bit 1. A bad rkey: error CQE.
  const kinet::Rkey bad{rb.rkey().be ^ 0x01000000u};  // another key tag
  ASSERT_EQ(dev::put<X>(h, la.p(), la.lkey(), rb.addr(), bad, 8, dev::kSignal, &t), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, t), Status::RemoteAccess);
  expect_error_cqe(h, 4, /*syndrome=*/0x13, /*wqe_opcode=*/0x08, /*owner=*/1);
  ASSERT_EQ(dev::nop<X>(h, 0, &t), Status::Ok);  // unsignalled, flushed: a CQE all the same
  EXPECT_EQ(dev::wait<X>(h, t), Status::WrFlushed);
  expect_error_cqe(h, 5, /*syndrome=*/0x05, /*wqe_opcode=*/0x00, /*owner=*/1);
}

// ---- repeated errors ------------------------------------------------------------------

size_t count(const std::string& text, const std::string& word) {
  size_t n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

TEST(StrictNicLog, CqOverrunIsLoggedOnceWithACount) {
  ::testing::internal::CaptureStderr();
  {
    EmuPair p(opts(4));
    const QpHandle h = p.h();
    // 4 signalled NOPs fill the 4-entry CQ; nobody polls it.
    for (uint64_t i = 0; i < 4; ++i) dev::prepare_nop<X>(h, i, dev::kSignal);
    ring_by_hand(h, 4);
    // The NIC writes the CQE's last 4 bytes with release; op_own is the top byte (little-endian).
    auto op_own = [&](uint32_t i) {
      return __atomic_load_n(reinterpret_cast<const uint32_t*>(reinterpret_cast<const uint8_t*>(h.cq.cqes + i) + 60),
                             __ATOMIC_ACQUIRE) >> 24;
    };
    ASSERT_TRUE(wait_until([&] { return (op_own(3) >> 4) == 0; }, std::chrono::milliseconds(kTimeoutMs)));
    for (uint64_t i = 4; i < 8; ++i) dev::prepare_nop<X>(h, i, dev::kSignal);
    ring_by_hand(h, 8);  // the 5th CQE has no room
    ASSERT_TRUE(wait_until([&] { return p.qa->state() == kinet::QpState::Error; }, std::chrono::milliseconds(kTimeoutMs)));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the engine retries many times meanwhile
    EXPECT_TRUE(has(p.qa->last_error(), "CQ overrun: 4 CQEs outstanding and none consumed"));
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(log, "CQ overrun"), 1u) << log;
  EXPECT_EQ(count(log, "the previous message repeated"), 1u) << log;
}

}  // namespace
