// The requester's checks at their exact edges, for every operation with a
// local buffer: the local range (last byte in vs one past, first byte in vs
// one before, zero length at the end), an atomic's 8-byte result buffer, the
// lkey's tag, local-write rights (needed by a read's destination and an
// atomic's result, not by a write's source), the MR's PD, and max_msg.
// Each case: exact status, CQEs, QP state, flush, last_error() and every
// byte around (edge_rig.hpp).
#include "edge_rig.hpp"

namespace kinet::test::edge {
namespace {

// put_signal's data WQE is its first; when it faults, the signal's atomic is
// flushed and the ticket (which ends at the atomic) must report the data
// WQE's status. Those cases are expected to pass after test()/wait() report
// the failing chunk's own status (verbs); today they report WrFlushed.

// A data operation (write, read, put_signal) with its local buffer at L + loff.
OpCase local_case(Rig& r, Op op, const Guarded& L, int64_t loff, uint32_t n, uint32_t lflip = 0) {
  return data_op(r, op, At{&L, loff, lflip}, std::nullopt, n);
}

// An atomic (fetch-add, compare-swap, put_signal's signal) with its 8-byte
// result at Res + off.
OpCase result_case(Rig& r, Op op, const Guarded& Res, int64_t off, uint32_t lflip = 0) {
  return atomic_op(r, op, At{&Res, off, lflip}, std::nullopt);
}

const Op kLocalDataOps[] = {Op::Write, Op::Read, Op::PutSignal};

class LocalRange : public ::testing::TestWithParam<std::tuple<Op, Edge>> {};

TEST_P(LocalRange, ExactEdge) {
  const auto [op, edge] = GetParam();
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& L = r.a(kLen);
  const EdgeRange e = edge_range(edge, kLen, kN);
  OpCase c = local_case(r, op, L, e.off, e.n);
  if (op == Op::PutSignal && e.n == 0) c.want.byte_count = 8;  // the CQE is the atomic's
  if (!e.inside) c.fail(Status::LocalProtection, 0, {L.addr() + e.off, L.key()});
  r.run(rng, c.post, c.effect, c.want);
}

// PutSignal_OnePastEnd / _OneBeforeStart: expected to pass after test()/wait() report the failing chunk's own status
// (verbs).
INSTANTIATE_TEST_SUITE_P(Edge, LocalRange,
                         ::testing::Combine(::testing::ValuesIn(kLocalDataOps), ::testing::ValuesIn(kEdges)),
                         op_edge_name);

// ---- an atomic's result buffer: fetch-add, compare-swap, put_signal's scratch

class LocalResult : public ::testing::TestWithParam<Op> {};

TEST_P(LocalResult, InTheLastEightBytes) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& Res = r.a(4096);
  OpCase c = result_case(r, GetParam(), Res, 4088);
  r.run(rng, c.post, c.effect, c.want);
}

TEST_P(LocalResult, InTheFirstEightBytes) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& Res = r.a(4096);
  OpCase c = result_case(r, GetParam(), Res, 0);
  r.run(rng, c.post, c.effect, c.want);
}

TEST_P(LocalResult, OneToSevenBytesPastTheEnd) {
  for (int k = 1; k <= 7; ++k) {
    SCOPED_TRACE(std::to_string(k) + " bytes past the end");
    KINET_TEST_RNG(rng);
    Rig r;
    const Guarded& Res = r.a(4096 - k);
    OpCase c = result_case(r, GetParam(), Res, 4088);
    c.fail(Status::LocalProtection, atomic_wqe(GetParam()), {Res.addr() + 4088, Res.key()});
    r.run(rng, c.post, c.effect, c.want);
  }
}

TEST_P(LocalResult, OneByteBeforeTheStart) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& Res = r.a(4096, kAccessAll, kGuard + 1);  // odd start: the aligned word at -1
  OpCase c = result_case(r, GetParam(), Res, -1);
  c.fail(Status::LocalProtection, atomic_wqe(GetParam()), {Res.addr() - 1, Res.key()});
  r.run(rng, c.post, c.effect, c.want);
}

// The result buffer's MR grants everything but local write: the NIC can't put the old value there.
TEST_P(LocalResult, WithoutLocalWrite) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& Res = r.a(64, kRemoteRead);
  OpCase c = result_case(r, GetParam(), Res, 8);
  c.fail(Status::LocalProtection, atomic_wqe(GetParam()), {Res.key()});
  r.run(rng, c.post, c.effect, c.want);
}

TEST_P(LocalResult, WithOnlyLocalWrite) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& Res = r.a(64, kLocalWrite);
  OpCase c = result_case(r, GetParam(), Res, 8);
  r.run(rng, c.post, c.effect, c.want);
}

TEST_P(LocalResult, WrongTagOnAValidIndex) {
  for (uint32_t flip : {0x01u, 0x80u, 0xffu}) {
    SCOPED_TRACE("lkey ^ " + std::to_string(flip));
    KINET_TEST_RNG(rng);
    Rig r;
    const Guarded& Res = r.a(64);
    OpCase c = result_case(r, GetParam(), Res, 8, flip);
    c.fail(Status::LocalProtection, atomic_wqe(GetParam()), {Res.key() ^ flip});
    r.run(rng, c.post, c.effect, c.want);
  }
}

TEST_P(LocalResult, RegionOfAnotherProtectionDomain) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& Res = r.a(64, kAccessAll, kGuard, &r.new_pd_a());
  OpCase c = result_case(r, GetParam(), Res, 8);
  c.fail(Status::LocalProtection, atomic_wqe(GetParam()), {Res.key()});
  r.run(rng, c.post, c.effect, c.want);
}

INSTANTIATE_TEST_SUITE_P(Edge, LocalResult, ::testing::ValuesIn(kAtomicOps),
                         [](const auto& i) { return std::string(op_name(i.param)); });

// ---- the data buffer's key: write's source, read's destination, put_signal's payload

class LocalKey : public ::testing::TestWithParam<Op> {};

TEST_P(LocalKey, WrongTagOnAValidIndex) {
  for (uint32_t flip : {0x01u, 0x80u, 0xffu}) {
    SCOPED_TRACE("lkey ^ " + std::to_string(flip));
    KINET_TEST_RNG(rng);
    Rig r;
    const Guarded& L = r.a(4096);
    OpCase c = local_case(r, GetParam(), L, 64, kN, flip);
    c.fail(Status::LocalProtection, 0, {L.key() ^ flip});
    r.run(rng, c.post, c.effect, c.want);
  }
}

TEST_P(LocalKey, RegionOfAnotherProtectionDomain) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& L = r.a(4096, kAccessAll, kGuard, &r.new_pd_a());
  OpCase c = local_case(r, GetParam(), L, 64, kN);
  c.fail(Status::LocalProtection, 0, {L.key()});
  r.run(rng, c.post, c.effect, c.want);
}

// A write's source needs no right at all; a read's destination needs local write.
TEST_P(LocalKey, RegionWithNoRights) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& L = r.a(4096, 0);
  OpCase c = local_case(r, GetParam(), L, 64, kN);
  if (GetParam() == Op::Read) c.fail(Status::LocalProtection, 0, {L.key()});
  r.run(rng, c.post, c.effect, c.want);
}

// Every right but local write: a read may not land there.
TEST_P(LocalKey, RegionWithoutLocalWrite) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& L = r.a(4096, kRemoteRead);
  OpCase c = local_case(r, GetParam(), L, 64, kN);
  if (GetParam() == Op::Read) c.fail(Status::LocalProtection, 0, {L.key()});
  r.run(rng, c.post, c.effect, c.want);
}

TEST_P(LocalKey, RegionWithOnlyLocalWrite) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& L = r.a(4096, kLocalWrite);
  OpCase c = local_case(r, GetParam(), L, 64, kN);
  r.run(rng, c.post, c.effect, c.want);
}

// PutSignal with a bad payload key: expected to pass after test()/wait() report the failing chunk's own status (verbs).
INSTANTIATE_TEST_SUITE_P(Edge, LocalKey, ::testing::ValuesIn(kLocalDataOps),
                         [](const auto& i) { return std::string(op_name(i.param)); });

// ---- max_msg: one WQE of exactly the device's largest message, and one byte more.
// The one-call verbs split; the low-level writers don't, so a WQE can carry more.

constexpr uint32_t kMaxMsg = 4096;

// The poster's copy of max_msg is raised to n when n is larger, so prepare_*'s
// contract (bytes <= q.max_msg, asserted in debug builds) holds and the NIC's
// own limit is what refuses the WQE.
Status post_raw(QpHandle h, Op op, const Guarded& L, const Guarded& R, uint32_t n, Ticket* t) {
  constexpr auto X = dev::Sharing::Exclusive;
  if (n > h.max_msg) h.max_msg = n;
  uint64_t idx = 0;
  if (Status st = dev::reserve<X>(h, 1, &idx); st != Status::Ok) return st;
  if (op == Op::Write)
    dev::prepare_write<X>(h, idx, L.p(), L.lkey(), R.addr(), R.rkey(), n, dev::kSignal);
  else
    dev::prepare_read<X>(h, idx, L.p(), L.lkey(), R.addr(), R.rkey(), n, dev::kSignal);
  if (Status st = dev::publish<X>(h, idx, 1); st != Status::Ok) return st;
  t->idx = idx + 1;
  return dev::ring_doorbell<X>(h, idx + 1);
}

class MaxMsg : public ::testing::TestWithParam<Op> {};

TEST_P(MaxMsg, ExactlyMaxMsgInOneWqe) {
  KINET_TEST_RNG(rng);
  Rig r(RigOptions{kAccessAll, kMaxMsg});
  ASSERT_EQ(r.p.h().max_msg, kMaxMsg);
  const Guarded& L = r.a(kMaxMsg + 1);
  const Guarded& R = r.b(kMaxMsg + 1);
  OpSpec s;
  s.op = GetParam(), s.local = {&L, 0}, s.remote = {&R, 0}, s.n = kMaxMsg;
  OpCase c = make_case(r, s);
  c.post = [&](const QpHandle& h, Ticket* t) { return post_raw(h, GetParam(), L, R, kMaxMsg, t); };
  r.run(rng, c.post, c.effect, c.want);
}

TEST_P(MaxMsg, OneByteMoreInOneWqe) {
  KINET_TEST_RNG(rng);
  Rig r(RigOptions{kAccessAll, kMaxMsg});
  const Guarded& L = r.a(kMaxMsg + 1);
  const Guarded& R = r.b(kMaxMsg + 1);
  OpSpec s;
  s.op = GetParam(), s.local = {&L, 0}, s.remote = {&R, 0}, s.n = kMaxMsg + 1;
  OpCase c = make_case(r, s);
  c.post = [&](const QpHandle& h, Ticket* t) { return post_raw(h, GetParam(), L, R, kMaxMsg + 1, t); };
  c.fail(Status::LocalLength, 0, {});
  r.run(rng, c.post, c.effect, c.want);
}

INSTANTIATE_TEST_SUITE_P(Edge, MaxMsg, ::testing::Values(Op::Write, Op::Read),
                         [](const auto& i) { return std::string(op_name(i.param)); });

// A local range whose end wraps past 2^64 to inside the region.
TEST(LocalRangeWraps, TheAddressSpace) {
  for (Op op : {Op::Write, Op::Read}) {
    SCOPED_TRACE(op_name(op));
    KINET_TEST_RNG(rng);
    Rig r;
    const Guarded& L = r.a(4096);
    const Guarded& T = r.b(4096);
    const uint64_t laddr = ~uint64_t{0} - 15;  // + 32 wraps to 16
    OpSpec s;
    s.op = op, s.local = {&L, 0}, s.remote = {&T, 0}, s.n = 32;
    OpCase c = make_case(r, s);
    c.post = [&, op, laddr](const QpHandle& h, Ticket* t) {
      constexpr auto X = dev::Sharing::Exclusive;
      void* p = reinterpret_cast<void*>(laddr);  // never dereferenced here: the NIC must refuse it
      return op == Op::Write ? dev::put<X>(h, p, L.lkey(), T.addr(), T.rkey(), 32, dev::kSignal, t)
                             : dev::get<X>(h, p, L.lkey(), T.addr(), T.rkey(), 32, dev::kSignal, t);
    };
    c.fail(Status::LocalProtection, 0, {laddr, L.key()});
    r.run(rng, c.post, c.effect, c.want);
  }
}

// ---- reg_mr's access check at its edge: remote write and remote atomic each
// need local write (as ibv_reg_mr), remote read alone does not.
TEST(RegMrAccess, RemoteWriteOrAtomicNeedsLocalWrite) {
  auto d = Device::open("emu");
  auto pd = d->alloc_pd();
  Buffer buf = alloc_buffer(4096);
  for (uint32_t right : {uint32_t(kRemoteWrite), uint32_t(kRemoteAtomic), uint32_t(kRemoteWrite | kRemoteAtomic)}) {
    SCOPED_TRACE("access " + std::to_string(right));
    try {
      pd->reg_mr(buf.get(), 4096, right | kRemoteRead);
      ADD_FAILURE() << "registered without local write";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("local write"), std::string::npos) << e.what();
    }
    EXPECT_EQ(pd->reg_mr(buf.get(), 4096, right | kLocalWrite)->access(), right | kLocalWrite);
  }
  EXPECT_EQ(pd->reg_mr(buf.get(), 4096, kRemoteRead)->access(), uint32_t(kRemoteRead));
  EXPECT_EQ(pd->reg_mr(buf.get(), 4096, 0)->access(), 0u);
}

}  // namespace
}  // namespace kinet::test::edge
