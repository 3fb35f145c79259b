// Host control path of the emu provider: devices, PDs, MRs, QPs, the QP state
// machine and the QP info blob. Every misuse throws kinet::Error with the
// right code and a message that names the object and the problem.
#if KINET_TEST_HAVE_IBVERBS
#include <infiniband/verbs.h>
#endif

#include <cstring>
#include <functional>

#include "ctl_test_util.hpp"
#include "emu_preamble.hpp"
#include "kinet/version.hpp"

namespace {

#if KINET_TEST_HAVE_IBVERBS
// kinet::Access promises ibv_access_flags values.
static_assert(static_cast<int>(kinet::kLocalWrite) == static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
static_assert(static_cast<int>(kinet::kRemoteWrite) == static_cast<int>(IBV_ACCESS_REMOTE_WRITE));
static_assert(static_cast<int>(kinet::kRemoteRead) == static_cast<int>(IBV_ACCESS_REMOTE_READ));
static_assert(static_cast<int>(kinet::kRemoteAtomic) == static_cast<int>(IBV_ACCESS_REMOTE_ATOMIC));
#endif
static_assert(kinet::QpInfo::kHeaderBytes == 64);

TEST(EmuControl, OpenDevicesAndAttributes) {
  auto a = kinet::Device::open("emu");
  auto b = kinet::Device::open("emu");
  EXPECT_EQ(a->attr().provider, "emu");
  EXPECT_EQ(a->name().rfind("emu", 0), 0u) << a->name();
  EXPECT_NE(a->name(), b->name()) << "two emu devices get distinct names";
  EXPECT_EQ(a->attr().max_msg, 1u << 30) << "emu default max_msg is 1 GiB";
  EXPECT_GE(a->attr().max_qp_wr, 256u);
  kinet::DeviceOptions o;
  o.emu_max_msg = 4096;
  auto c = kinet::Device::open("emu", o);
  EXPECT_EQ(c->attr().max_msg, 4096u);
}

TEST(EmuControl, OpenByExplicitName) {
  auto d = kinet::Device::open("emu57");
  EXPECT_EQ(d->name(), "emu57");
  // The name is taken while the device is open.
  try {
    auto again = kinet::Device::open("emu57");
    ADD_FAILURE() << "a second emu57 opened as " << again->name();
  } catch (const Error& e) {
    EXPECT_TRUE(mentions_any(e.what(), {"emu57"})) << e.what();
  }
  d.reset();
  EXPECT_NO_THROW(kinet::Device::open("emu57")) << "the name is free again once closed";
}

TEST(EmuControl, VersionMatchesHeader) {
  ASSERT_NE(kinet::version(), nullptr);
  EXPECT_STREQ(kinet::version(), KINET_VERSION_STRING);
}

TEST(EmuControl, OpenUnknownDeviceIsNotFound) {
  EXPECT_TRUE(throws_error([] { kinet::Device::open("nosuchdev"); }, ErrorCode::NotFound, {"nosuchdev"}));
}

TEST(EmuControl, QpDefaultsAndHandle) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  EXPECT_EQ(q->state(), QpState::Reset);
  const dev::QpHandle h = q->handle();
  EXPECT_EQ(h.size(), 256u) << "default sq_depth";
  EXPECT_EQ(h.signal_period, 64u) << "default signal_period = sq_depth/4";
  EXPECT_EQ(h.max_msg, d->attr().max_msg) << "max_msg 0 = the device's";
  EXPECT_EQ(h.timeout_ns, kinet::default_timeout_ms() * 1000000ull);
  EXPECT_EQ(h.qpn, q->qpn());
  EXPECT_EQ(h.qpn_be8, htobe32(q->qpn() << 8));
  EXPECT_NE(h.sq, nullptr);
  EXPECT_NE(h.dbrec, nullptr);
  EXPECT_NE(h.db, nullptr);
  EXPECT_NE(h.cq.cqes, nullptr);
  ASSERT_NE(h.state, nullptr);
  // The posting state starts zeroed, and every CQE starts invalid.
  const dev::SqState zero{};
  EXPECT_EQ(std::memcmp(h.state, &zero, sizeof zero), 0);
  for (uint32_t i = 0; i < (1u << h.cq.log_n); ++i)
    ASSERT_EQ(kinet::mlx5::cqe_opcode(h.cq.cqes[i].op_own), kinet::mlx5::kCqeInvalid) << "CQE " << i;
  // Handles are stable.
  const dev::QpHandle h2 = q->handle();
  EXPECT_EQ(std::memcmp(&h, &h2, sizeof h), 0);

  kinet::QpConfig c;
  c.sq_depth = 64;
  c.signal_period = 8;
  c.max_msg = 12345;
  c.timeout_ms = 777;
  auto q2 = pd->create_qp(c);
  const dev::QpHandle h3 = q2->handle();
  EXPECT_EQ(h3.size(), 64u);
  EXPECT_EQ(h3.signal_period, 8u);
  EXPECT_EQ(h3.max_msg, 12345u);
  EXPECT_EQ(h3.timeout_ns, 777000000ull);
  EXPECT_NE(q2->qpn(), q->qpn());
}

TEST(EmuControl, StateMachine) {
  auto a = kinet::Device::open("emu");
  auto b = kinet::Device::open("emu");
  auto pa = a->alloc_pd();
  auto pb = b->alloc_pd();
  auto qa = pa->create_qp();
  auto qb = pb->create_qp();
  const kinet::QpInfo ib = qb->info();
  // Out of order: the message names the states.
  EXPECT_TRUE(throws_error([&] { qa->to_rtr(ib); }, ErrorCode::BadState, {"RESET", "INIT"}));
  EXPECT_TRUE(throws_error([&] { qa->to_rts(); }, ErrorCode::BadState, {"RESET", "RTR"}));
  EXPECT_EQ(qa->state(), QpState::Reset);
  qa->to_init(kinet::kAccessAll);
  EXPECT_EQ(qa->state(), QpState::Init);
  EXPECT_TRUE(throws_error([&] { qa->to_init(kinet::kAccessAll); }, ErrorCode::BadState, {"INIT", "RESET"}));
  EXPECT_TRUE(throws_error([&] { qa->to_rts(); }, ErrorCode::BadState, {"INIT", "RTR"}));
  qa->to_rtr(ib);
  EXPECT_EQ(qa->state(), QpState::Rtr);
  EXPECT_TRUE(throws_error([&] { qa->to_rtr(ib); }, ErrorCode::BadState, {"RTR", "INIT"}));
  qa->to_rts();
  EXPECT_EQ(qa->state(), QpState::Rts);
  EXPECT_TRUE(throws_error([&] { qa->connect(ib); }, ErrorCode::BadState, {"RTS", "RESET"}));
  qa->to_error();
  EXPECT_EQ(qa->state(), QpState::Error);
  // Names of states and codes.
  EXPECT_STREQ(kinet::qp_state_name(QpState::Reset), "RESET");
  EXPECT_STREQ(kinet::qp_state_name(QpState::Rts), "RTS");
  EXPECT_STREQ(kinet::qp_state_name(QpState::Error), "ERROR");
  EXPECT_STRNE(kinet::error_code_name(ErrorCode::BadState), kinet::error_code_name(ErrorCode::NotFound));
}

TEST(EmuControl, RegMrArguments) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  Buffer buf = alloc_buffer(4096);
  EXPECT_TRUE(throws_error([&] { pd->reg_mr(nullptr, 4096, kinet::kAccessAll); }, ErrorCode::InvalidArgument,
                           {"reg_mr", "null", "empty", "range", "length"}));
  EXPECT_TRUE(throws_error([&] { pd->reg_mr(buf.get(), 0, kinet::kAccessAll); }, ErrorCode::InvalidArgument,
                           {"reg_mr", "empty", "length", "0"}));
  auto mr = pd->reg_mr(buf.get(), 4096, kinet::kAccessAll);
  EXPECT_EQ(mr->addr(), buf.get());
  EXPECT_EQ(mr->length(), 4096u);
  EXPECT_EQ(mr->access(), uint32_t(kinet::kAccessAll));
  EXPECT_EQ(mr->kind(), kinet::MemoryKind::Host);
  EXPECT_EQ(mr->addr_u64(), reinterpret_cast<uint64_t>(buf.get()));
  // Keys: big-endian forms of the host-order values.
  EXPECT_EQ(mr->lkey().be, htobe32(mr->lkey_value()));
  EXPECT_EQ(mr->rkey().be, htobe32(mr->rkey_value()));
  // Two registrations of one buffer get different keys.
  auto mr2 = pd->reg_mr(buf.get(), 4096, kinet::kLocalWrite);
  EXPECT_NE(mr2->lkey_value(), mr->lkey_value());
  EXPECT_NE(mr2->rkey_value(), mr->rkey_value());
}

TEST(EmuControl, CreateQpArguments) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto bad = [&](uint32_t depth, uint32_t period) {
    kinet::QpConfig c;
    c.sq_depth = depth;
    c.signal_period = period;
    return [&pd, c] { pd->create_qp(c); };
  };
  EXPECT_TRUE(throws_error(bad(100, 0), ErrorCode::InvalidArgument, {"sq_depth", "power of two"}));
  EXPECT_TRUE(throws_error(bad(0, 0), ErrorCode::InvalidArgument, {"sq_depth"}));
  EXPECT_TRUE(throws_error(bad(1, 0), ErrorCode::InvalidArgument, {"sq_depth"}));
  EXPECT_TRUE(throws_error(bad(d->attr().max_qp_wr * 2, 0), ErrorCode::InvalidArgument, {"sq_depth"}));
  EXPECT_TRUE(throws_error(bad(64, 3), ErrorCode::InvalidArgument, {"signal_period"}));
  EXPECT_TRUE(throws_error(bad(64, 64), ErrorCode::InvalidArgument, {"signal_period"}));
  EXPECT_NO_THROW(pd->create_qp([] {
    kinet::QpConfig c;
    c.sq_depth = 2;
    return c;
  }()));
}

TEST(EmuControl, QpInfoBlob) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  const kinet::QpInfo i = q->info();
  EXPECT_EQ(i.magic, kinet::QpInfo::kMagic);
  EXPECT_EQ(i.qpn, q->qpn());
  EXPECT_EQ(i.provider, 1);
  const std::vector<uint8_t> blob = i.serialize();
  ASSERT_EQ(blob.size(), 64u) << "a device on the in-process fabric only: no endpoint";
  EXPECT_TRUE(i.endpoint.empty());
  const kinet::QpInfo j = kinet::QpInfo::deserialize(blob.data(), blob.size());
  EXPECT_EQ(j.serialize(), blob) << "round trip";
  EXPECT_EQ(j.node, i.node);
  EXPECT_EQ(j.qpn, i.qpn);

  EXPECT_TRUE(throws_exactly([&] { kinet::QpInfo::deserialize(blob.data(), 63); }, ErrorCode::InvalidArgument,
                             "QP info blob has 63 bytes, shorter than its 64-byte header"));
  EXPECT_TRUE(throws_exactly([&] { kinet::QpInfo::deserialize(blob.data(), 65); }, ErrorCode::InvalidArgument,
                             "QP info blob has 65 bytes, expected 64 (64-byte header + a 0-byte endpoint)"));
  EXPECT_TRUE(throws_exactly([&] { kinet::QpInfo::deserialize(nullptr, 64); }, ErrorCode::InvalidArgument,
                             "QP info blob is a null pointer"));
  std::vector<uint8_t> junk(64, 0xa5);
  EXPECT_TRUE(throws_error([&] { kinet::QpInfo::deserialize(junk.data(), junk.size()); }, ErrorCode::InvalidArgument,
                           {"magic", "blob", "info"}));
  std::vector<uint8_t> zeros(64, 0);
  EXPECT_TRUE(throws_error([&] { kinet::QpInfo::deserialize(zeros.data(), zeros.size()); },
                           ErrorCode::InvalidArgument, {"magic", "blob", "info"}));
  std::vector<uint8_t> ver = blob;
  ver[4] ^= 0x7f;  // version field
  EXPECT_TRUE(throws_error([&] { kinet::QpInfo::deserialize(ver.data(), ver.size()); }, ErrorCode::InvalidArgument,
                           {"version"}));
}

TEST(EmuControl, ConnectToPeerOfUnknownFabricAddress) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  kinet::QpInfo peer = q->info();
  peer.node ^= 0xdeadbeef00ull;  // no device there
  q->to_init(kinet::kAccessAll);
  try {
    q->to_rtr(peer);
    // Hardware would accept any address here and fail on the first operation;
    // if emu accepts it too, the QP must at least be in RTR.
    EXPECT_EQ(q->state(), QpState::Rtr);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound) << e.what();
    EXPECT_EQ(q->state(), QpState::Init) << "a failed transition leaves the state unchanged";
  }
}

// Each field of the blob at its edges: the last good value passes, the first
// bad one fails with a message naming the field and the value.
TEST(EmuControl, QpInfoFieldEdges) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  const kinet::QpInfo good = q->info();
  auto check = [](const kinet::QpInfo& i) {
    const std::vector<uint8_t> b = i.serialize();
    return kinet::QpInfo::deserialize(b.data(), b.size());
  };
  auto with = [&](auto set) {
    kinet::QpInfo i = good;
    set(i);
    return i;
  };
  EXPECT_NO_THROW(check(with([](auto& i) { i.qpn = 1; })));
  EXPECT_NO_THROW(check(with([](auto& i) { i.qpn = 0xffffff; })));
  EXPECT_TRUE(throws_exactly([&] { check(with([](auto& i) { i.qpn = 0; })); }, ErrorCode::InvalidArgument,
                             "QP info: QP number 0x0 is out of range [1, 2^24)"));
  EXPECT_TRUE(throws_exactly([&] { check(with([](auto& i) { i.qpn = 0x1000000; })); }, ErrorCode::InvalidArgument,
                             "QP info: QP number 0x1000000 is out of range [1, 2^24)"));
  EXPECT_NO_THROW(check(with([](auto& i) { i.mtu = 1; })));
  EXPECT_NO_THROW(check(with([](auto& i) { i.mtu = 5; })));
  EXPECT_TRUE(throws_exactly([&] { check(with([](auto& i) { i.mtu = 0; })); }, ErrorCode::InvalidArgument,
                             "QP info: MTU code 0 is not an IB MTU (1..5 = 256..4096 bytes)"));
  EXPECT_TRUE(throws_exactly([&] { check(with([](auto& i) { i.mtu = 6; })); }, ErrorCode::InvalidArgument,
                             "QP info: MTU code 6 is not an IB MTU (1..5 = 256..4096 bytes)"));
  EXPECT_TRUE(throws_exactly([&] { check(with([](auto& i) { i.port = 0; })); }, ErrorCode::InvalidArgument,
                             "QP info: port 0 is not a port number (ports count from 1)"));
  EXPECT_NO_THROW(check(with([](auto& i) { i.provider = 2; })));
  EXPECT_TRUE(throws_exactly([&] { check(with([](auto& i) { i.provider = 0; })); }, ErrorCode::InvalidArgument,
                             "QP info: unknown provider 0 (1 = emu, 2 = mlx5)"));
  EXPECT_TRUE(throws_exactly([&] { check(with([](auto& i) { i.provider = 3; })); }, ErrorCode::InvalidArgument,
                             "QP info: unknown provider 3 (1 = emu, 2 = mlx5)"));
  EXPECT_TRUE(throws_exactly([&] { check(with([](auto& i) { i.version = 2; })); }, ErrorCode::InvalidArgument,
                             "QP info: version 2 is not supported (expected 1)"));
  EXPECT_TRUE(throws_exactly([&] { check(with([](auto& i) { i.magic ^= 1; })); }, ErrorCode::InvalidArgument,
                             "QP info: bad magic 0x504e4b30, expected 0x504e4b31 (not a kinet QP info blob)"));
}

// The endpoint travels after the header, its length in header bytes 44..45;
// every byte of it and of the reserved words is checked.
TEST(EmuControl, QpInfoEndpoint) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  kinet::QpInfo i = q->info();
  i.endpoint = "tcp 192.0.2.2:41234";
  const std::vector<uint8_t> blob = i.serialize();
  ASSERT_EQ(blob.size(), 64u + 19);
  EXPECT_EQ(blob[44], 19);
  EXPECT_EQ(blob[45], 0);
  const kinet::QpInfo j = kinet::QpInfo::deserialize(blob.data(), blob.size());
  EXPECT_EQ(j.endpoint, i.endpoint);
  EXPECT_EQ(j.serialize(), blob);
  // Length: one byte short, one trailing byte.
  EXPECT_TRUE(throws_exactly([&] { kinet::QpInfo::deserialize(blob.data(), blob.size() - 1); },
                             ErrorCode::InvalidArgument,
                             "QP info blob has 82 bytes, expected 83 (64-byte header + a 19-byte endpoint)"));
  std::vector<uint8_t> longer = blob;
  longer.push_back('x');
  EXPECT_TRUE(throws_exactly([&] { kinet::QpInfo::deserialize(longer.data(), longer.size()); },
                             ErrorCode::InvalidArgument,
                             "QP info blob has 84 bytes, expected 83 (64-byte header + a 19-byte endpoint)"));
  // A byte of the endpoint that is not printable; the upper half of the length word; each reserved word.
  std::vector<uint8_t> ctl = blob;
  ctl[64 + 3] = '\n';
  EXPECT_TRUE(throws_exactly([&] { kinet::QpInfo::deserialize(ctl.data(), ctl.size()); }, ErrorCode::InvalidArgument,
                             "QP info: endpoint byte 3 is 0xa, not printable ASCII"));
  ctl[64 + 3] = 0x7f;
  EXPECT_TRUE(throws_exactly([&] { kinet::QpInfo::deserialize(ctl.data(), ctl.size()); }, ErrorCode::InvalidArgument,
                             "QP info: endpoint byte 3 is 0x7f, not printable ASCII"));
  ctl[64 + 3] = 0x7e;
  EXPECT_NO_THROW(kinet::QpInfo::deserialize(ctl.data(), ctl.size()));
  std::vector<uint8_t> hi = blob;
  hi[46] = 1;
  EXPECT_TRUE(throws_exactly([&] { kinet::QpInfo::deserialize(hi.data(), hi.size()); }, ErrorCode::InvalidArgument,
                             "QP info: reserved word 0 is 0x1, must be 0"));
  for (int w = 1; w < 5; ++w) {
    std::vector<uint8_t> r = blob;
    r[44 + 4 * w + 3] = 0x80;
    EXPECT_TRUE(throws_exactly([&] { kinet::QpInfo::deserialize(r.data(), r.size()); }, ErrorCode::InvalidArgument,
                               "QP info: reserved word " + std::to_string(w) + " is 0x80000000, must be 0"));
  }
  // The longest endpoint passes, one more byte fails (validate, as to_rtr runs it).
  kinet::QpInfo big = i;
  big.endpoint.assign(kinet::QpInfo::kMaxEndpoint, 'a');
  const std::vector<uint8_t> bb = big.serialize();
  EXPECT_EQ(kinet::QpInfo::deserialize(bb.data(), bb.size()).endpoint, big.endpoint);
  big.endpoint.push_back('a');
  EXPECT_TRUE(throws_exactly([&] { big.validate(); }, ErrorCode::InvalidArgument,
                             "QP info: endpoint of 257 bytes is longer than 256"));
  const std::vector<uint8_t> bb2 = big.serialize();
  EXPECT_TRUE(throws_exactly([&] { kinet::QpInfo::deserialize(bb2.data(), bb2.size()); },
                             ErrorCode::InvalidArgument, "QP info: endpoint of 257 bytes is longer than 256"));
  // A device not on the cross-process fabric can't connect to a QP of another process.
  kinet::QpInfo far = i;
  far.node ^= 0x5a5a5a5a00000000ull;
  q->to_init(kinet::kAccessAll);
  EXPECT_TRUE(throws_error_if([&] { q->to_rtr(far); }, ErrorCode::NotFound, [&](const std::string& w) -> std::string {
    const std::string want = d->name() + " QP " + hexs(q->qpn()) + ": to_rtr: no emu device at fabric address " +
                             hexs(far.node) + " in this process, and " + d->name() +
                             " is not on the cross-process fabric to reach it at tcp 192.0.2.2:41234 "
                             "(DeviceOptions::emu_fabric, KINET_EMU_FABRIC=tcp)";
    return w == want ? "" : "got \"" + w + "\", expected \"" + want + "\"";
  }));
  kinet::QpInfo no_ep = far;
  no_ep.endpoint.clear();
  EXPECT_TRUE(throws_exactly([&] { q->to_rtr(no_ep); }, ErrorCode::NotFound,
                             d->name() + " QP " + hexs(q->qpn()) + ": to_rtr: no emu device at fabric address " +
                                 hexs(far.node) +
                                 " in this process (its QP info names no endpoint: that device is not on the "
                                 "cross-process fabric)"));
  EXPECT_EQ(q->state(), QpState::Init);
}

// to_rtr checks what deserialize checks (a QpInfo built by hand skips it),
// and what emu adds: one port; leaves INIT on failure.
TEST(EmuControl, ToRtrRejectsBadAttributes) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  auto peer_q = pd->create_qp();
  const kinet::QpInfo peer = peer_q->info();
  const std::string who = d->name() + " QP " + hexs(q->qpn()) + ": to_rtr: ";
  q->to_init(kinet::kAccessAll);
  auto rtr_with = [&](auto set) {
    return [&, set] {
      kinet::QpInfo i = peer;
      set(i);
      q->to_rtr(i);
    };
  };
  EXPECT_TRUE(throws_exactly(rtr_with([](auto& i) { i.port = 2; }), ErrorCode::InvalidArgument,
                             who + "remote port 2 does not exist (emu devices have one port, 1)"));
  EXPECT_TRUE(throws_exactly(rtr_with([](auto& i) { i.port = 99; }), ErrorCode::InvalidArgument,
                             who + "remote port 99 does not exist (emu devices have one port, 1)"));
  EXPECT_TRUE(throws_exactly(rtr_with([](auto& i) { i.port = 0; }), ErrorCode::InvalidArgument,
                             who + "remote QP info: port 0 is not a port number (ports count from 1)"));
  EXPECT_TRUE(throws_exactly(rtr_with([](auto& i) { i.mtu = 0; }), ErrorCode::InvalidArgument,
                             who + "remote QP info: MTU code 0 is not an IB MTU (1..5 = 256..4096 bytes)"));
  EXPECT_TRUE(throws_exactly(rtr_with([](auto& i) { i.qpn = 0; }), ErrorCode::InvalidArgument,
                             who + "remote QP info: QP number 0x0 is out of range [1, 2^24)"));
  EXPECT_TRUE(throws_exactly(rtr_with([](auto& i) { i.provider = 2; }), ErrorCode::NotSupported,
                             who + "remote QP belongs to provider 2, emu connects only to emu"));
  EXPECT_EQ(q->state(), QpState::Init) << "a failed to_rtr leaves the QP in INIT";
  EXPECT_NO_THROW(q->to_rtr(peer));
  EXPECT_EQ(q->state(), QpState::Rtr);
}

// emu_max_msg: [1, 2^30], as ConnectX's log_max_msg = 30.
TEST(EmuControl, MaxMsgLimits) {
  kinet::DeviceOptions o;
  o.emu_max_msg = 1u << 30;
  EXPECT_EQ(kinet::Device::open("emu", o)->attr().max_msg, 1u << 30);
  o.emu_max_msg = 1;
  EXPECT_EQ(kinet::Device::open("emu", o)->attr().max_msg, 1u);
  o.emu_max_msg = (1u << 30) + 1;
  EXPECT_TRUE(throws_exactly([&] { kinet::Device::open("emu", o); }, ErrorCode::InvalidArgument,
                             "emu: open: emu_max_msg 1073741825 is outside [1, 2^30] (a NIC's largest message)"));
  o.emu_max_msg = 1u << 31;
  EXPECT_TRUE(throws_error([&] { kinet::Device::open("emu", o); }, ErrorCode::InvalidArgument, {"emu_max_msg"}));
  o.emu_max_msg = 0;
  EXPECT_TRUE(throws_error([&] { kinet::Device::open("emu", o); }, ErrorCode::InvalidArgument, {"emu_max_msg 0"}));

  // QpConfig::max_msg: up to the device's, never clamped silently.
  o.emu_max_msg = 4096;
  auto d = kinet::Device::open("emu", o);
  auto pd = d->alloc_pd();
  kinet::QpConfig c;
  c.max_msg = 4096;
  EXPECT_EQ(pd->create_qp(c)->handle().max_msg, 4096u);
  c.max_msg = 4097;
  EXPECT_TRUE(throws_exactly([&] { pd->create_qp(c); }, ErrorCode::InvalidArgument,
                             d->name() + ": create_qp: max_msg 4097 exceeds the device's max_msg 4096"));
  c.max_msg = 0;
  EXPECT_EQ(pd->create_qp(c)->handle().max_msg, 4096u) << "0 = the device's";
}

TEST(EmuControl, DeviceCountLimitsValidated) {
  kinet::DeviceOptions o;
  EXPECT_EQ(kinet::Device::open("emu", o)->attr().max_mr, (1u << 24) - 1);
  EXPECT_EQ(kinet::Device::open("emu", o)->attr().max_qp, (1u << 16) - 1);
  o.emu_max_mr = 1u << 24;
  EXPECT_TRUE(throws_error([&] { kinet::Device::open("emu", o); }, ErrorCode::InvalidArgument, {"emu_max_mr"}));
  o.emu_max_mr = 0;
  EXPECT_TRUE(throws_error([&] { kinet::Device::open("emu", o); }, ErrorCode::InvalidArgument, {"emu_max_mr"}));
  o.emu_max_mr = 1;
  o.emu_max_qp = 1u << 16;
  EXPECT_TRUE(throws_error([&] { kinet::Device::open("emu", o); }, ErrorCode::InvalidArgument, {"emu_max_qp"}));
  o.emu_max_qp = 0;
  EXPECT_TRUE(throws_error([&] { kinet::Device::open("emu", o); }, ErrorCode::InvalidArgument, {"emu_max_qp"}));
}

// timeout_ms * 10^6 saturates instead of wrapping to a bound that expires at once.
TEST(EmuControl, TimeoutSaturates) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  constexpr uint64_t kMax = ~0ull;
  kinet::QpConfig c;
  c.timeout_ms = kMax / 1000000ull;  // the largest that fits exactly
  EXPECT_EQ(pd->create_qp(c)->handle().timeout_ns, (kMax / 1000000ull) * 1000000ull);
  c.timeout_ms = kMax / 1000000ull + 1;
  EXPECT_EQ(pd->create_qp(c)->handle().timeout_ns, kMax);
  c.timeout_ms = kMax;
  EXPECT_EQ(pd->create_qp(c)->handle().timeout_ns, kMax);
}

}  // namespace
