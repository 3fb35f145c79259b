// The responder's checks at their exact edges, for every operation: the
// remote range (last byte in vs one past, first byte in vs one before, zero
// length at the end), atomics (the last 8 bytes vs 1..7 over, misaligned by
// 1..7), the rkey's tag, the target MR's rights and PD, the target QP's
// remote_access. Each case: exact status, CQEs, QP state, flush, last_error()
// and every byte around (edge_rig.hpp).
#include "edge_rig.hpp"

namespace kinet::test::edge {
namespace {

// Operations whose remote side is a byte range, and the length they move at an edge.
const Op kDataOps[] = {Op::Write, Op::Inline, Op::Read, Op::PutSignal};
uint32_t edge_len(Op op) { return op == Op::Inline ? 28 : kN; }

// put_signal's data WQE is its first; when it faults, the signal's atomic is
// flushed and the ticket (which ends at the atomic) reports the data WQE's
// status. Expected to pass after test()/wait() report the failing chunk's
// own status (verbs); today they report WrFlushed for the atomic.

// One data operation against R + roff. The signal of put_signal goes to a
// good word in its own region.
OpCase data_case(Rig& r, Op op, const Guarded& R, int64_t roff, uint32_t n, uint32_t rflip = 0) {
  return data_op(r, op, std::nullopt, At{&R, roff, rflip}, n);
}
class RemoteRange : public ::testing::TestWithParam<std::tuple<Op, Edge>> {};

TEST_P(RemoteRange, ExactEdge) {
  const auto [op, edge] = GetParam();
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& R = r.b(kLen);
  const EdgeRange e = edge_range(edge, kLen, edge_len(op));
  OpCase c = data_case(r, op, R, e.off, e.n);
  if (op == Op::PutSignal && e.n == 0) c.want.byte_count = 8;  // the CQE is the atomic's
  if (!e.inside) c.fail(Status::RemoteAccess, 0, {R.addr() + e.off, R.key()});
  r.run(rng, c.post, c.effect, c.want);
}

// PutSignal_OnePastEnd / _OneBeforeStart: expected to pass after test()/wait() report the failing chunk's own status
// (verbs).
INSTANTIATE_TEST_SUITE_P(Edge, RemoteRange,
                         ::testing::Combine(::testing::ValuesIn(kDataOps), ::testing::ValuesIn(kEdges)), op_edge_name);

// ---- atomics: fetch-add, compare-swap and put_signal's signal word


// An atomic on T + toff (put_signal: its signal word; its payload goes to a good place).
OpCase atomic_case(Rig& r, Op op, const Guarded& T, int64_t toff, uint32_t tflip = 0) {
  return atomic_op(r, op, std::nullopt, At{&T, toff, tflip});
}
class RemoteAtomic : public ::testing::TestWithParam<Op> {};

TEST_P(RemoteAtomic, OnTheLastEightBytes) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& T = r.b(4096);
  OpCase c = atomic_case(r, GetParam(), T, 4088);
  r.run(rng, c.post, c.effect, c.want);
}

TEST_P(RemoteAtomic, OnTheFirstEightBytes) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& T = r.b(4096);
  OpCase c = atomic_case(r, GetParam(), T, 0);
  r.run(rng, c.post, c.effect, c.want);
}

TEST_P(RemoteAtomic, OneToSevenBytesPastTheEnd) {
  for (int k = 1; k <= 7; ++k) {
    SCOPED_TRACE(std::to_string(k) + " bytes past the end");
    KINET_TEST_RNG(rng);
    Rig r;
    const Guarded& T = r.b(4096 - k);  // the aligned word at 4088 sticks out by k
    OpCase c = atomic_case(r, GetParam(), T, 4088);
    c.fail(Status::RemoteAccess, atomic_wqe(GetParam()), {T.addr() + 4088, T.key()});
    r.run(rng, c.post, c.effect, c.want);
  }
}

TEST_P(RemoteAtomic, OneByteBeforeTheStart) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& T = r.b(4096, kAccessAll, kGuard + 1);  // odd start: the aligned word at -1 starts one byte before
  OpCase c = atomic_case(r, GetParam(), T, -1);
  c.fail(Status::RemoteAccess, atomic_wqe(GetParam()), {T.addr() - 1, T.key()});
  r.run(rng, c.post, c.effect, c.want);
}

TEST_P(RemoteAtomic, MisalignedByOneToSeven) {
  for (int k = 1; k <= 7; ++k) {
    SCOPED_TRACE("misaligned by " + std::to_string(k));
    KINET_TEST_RNG(rng);
    Rig r;
    const Guarded& T = r.b(4096);
    OpCase c = atomic_case(r, GetParam(), T, 64 + k);
    c.fail(Status::RemoteInvalidRequest, atomic_wqe(GetParam()), {T.addr() + 64 + k});
    r.run(rng, c.post, c.effect, c.want);
  }
}

INSTANTIATE_TEST_SUITE_P(Edge, RemoteAtomic, ::testing::ValuesIn(kAtomicOps),
                         [](const auto& i) { return std::string(op_name(i.param)); });

// ---- keys, rights, protection domains: every operation, on its remote key

const Op kAllOps[] = {Op::Write, Op::Inline, Op::Read, Op::FetchAdd, Op::CompareSwap, Op::PutSignal};

// The operation with its (first) remote access on T; put_signal's payload.
OpCase remote_case(Rig& r, Op op, const Guarded& T, uint32_t rflip = 0) {
  if (op == Op::FetchAdd || op == Op::CompareSwap) return atomic_case(r, op, T, 64, rflip);
  return data_case(r, op, T, 64, edge_len(op), rflip);
}
uint32_t needed_right(Op op) {
  switch (op) {
    case Op::Write:
    case Op::Inline:
    case Op::PutSignal:
      return kRemoteWrite;
    case Op::Read:
      return kRemoteRead;
    default:
      return kRemoteAtomic;
  }
}

class RemoteKey : public ::testing::TestWithParam<Op> {};

// A live key index with a wrong tag: only the low 8 bits differ.
TEST_P(RemoteKey, WrongTagOnAValidIndex) {
  for (uint32_t flip : {0x01u, 0x80u, 0xffu}) {
    SCOPED_TRACE("rkey ^ " + std::to_string(flip));
    KINET_TEST_RNG(rng);
    Rig r;
    const Guarded& T = r.b(4096);
    OpCase c = remote_case(r, GetParam(), T, flip);
    c.fail(Status::RemoteAccess, 0, {T.key() ^ flip});
    r.run(rng, c.post, c.effect, c.want);
  }
}

// The signal word's rkey of put_signal with a wrong tag: the payload lands, the atomic faults.
TEST(RemoteKey, PutSignalSignalWordWrongTag) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& T = r.b(64);
  OpCase c = atomic_case(r, Op::PutSignal, T, 8, 0xff);
  c.fail(Status::RemoteAccess, 1, {T.key() ^ 0xff});
  r.run(rng, c.post, c.effect, c.want);
}

// The target MR has every right but the one the operation needs.
TEST_P(RemoteKey, TargetRegionLacksTheRight) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& T = r.b(4096, kAccessAll & ~needed_right(GetParam()));
  OpCase c = remote_case(r, GetParam(), T);
  c.fail(Status::RemoteAccess, 0, {T.key()});
  r.run(rng, c.post, c.effect, c.want);
}

// The target MR has the one right the operation needs (plus local write,
// which ibv_reg_mr requires with remote write and atomic): enough.
TEST_P(RemoteKey, TargetRegionWithOnlyTheRight) {
  KINET_TEST_RNG(rng);
  Rig r;
  const uint32_t need = needed_right(GetParam());
  const Guarded& T = r.b(4096, need == kRemoteRead ? need : need | kLocalWrite);
  OpCase c = remote_case(r, GetParam(), T);
  r.run(rng, c.post, c.effect, c.want);
}

// The target QP accepts every remote operation but this one.
TEST_P(RemoteKey, TargetQpDoesNotAcceptIt) {
  KINET_TEST_RNG(rng);
  Rig r(RigOptions{kAccessAll & ~needed_right(GetParam() == Op::PutSignal ? Op::Write : GetParam())});
  const Guarded& T = r.b(4096);
  OpCase c = remote_case(r, GetParam(), T);
  c.fail(Status::RemoteAccess, 0, {r.p.qb->qpn()});
  r.run(rng, c.post, c.effect, c.want);
}

// The target QP accepts this operation alone: enough.
TEST_P(RemoteKey, TargetQpAcceptsOnlyIt) {
  KINET_TEST_RNG(rng);
  // put_signal needs remote write and remote atomic.
  const uint32_t need = GetParam() == Op::PutSignal ? kRemoteWrite | kRemoteAtomic : needed_right(GetParam());
  Rig r(RigOptions{need});
  const Guarded& T = r.b(4096);
  OpCase c = remote_case(r, GetParam(), T);
  r.run(rng, c.post, c.effect, c.want);
}

// The rkey of a region of another PD of the target device.
TEST_P(RemoteKey, RegionOfAnotherProtectionDomain) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& T = r.b(4096, kAccessAll, kGuard, &r.new_pd_b());
  OpCase c = remote_case(r, GetParam(), T);
  c.fail(Status::RemoteAccess, 0, {T.key()});
  r.run(rng, c.post, c.effect, c.want);
}

// PutSignal's failing cases (its data WQE faults): expected to pass after test()/wait() report the failing
// chunk's own status (verbs).
INSTANTIATE_TEST_SUITE_P(Edge, RemoteKey, ::testing::ValuesIn(kAllOps),
                         [](const auto& i) { return std::string(op_name(i.param)); });

// Deregistered between publishing and the doorbell: once ~MemoryRegion
// returned, the NIC must refuse the key (a deterministic twin of
// EmuFault.DeregisterTargetWhileWritesInFlight).
TEST(RemoteKey, DeregisteredAfterPublishBeforeTheDoorbell) {
  KINET_TEST_RNG(rng);
  Rig r;
  const Guarded& L = r.a(4096);
  Guarded& T = r.b(4096);
  const uint32_t key = T.key();
  OpSpec s;
  s.op = Op::Write, s.local = {&L, 0}, s.remote = {&T, 64}, s.n = kN;
  OpCase c = make_case(r, s);
  c.post = [&](const QpHandle& h, Ticket* t) {
    const Status st = dev::put<dev::Sharing::Exclusive>(h, L.p(), L.lkey(), T.addr() + 64, T.rkey(), kN,
                                                        dev::kSignal | dev::kNoDoorbell, t);
    T.mr.reset();  // the NIC has not seen the WQE yet; the next doorbell announces it
    return st;
  };
  c.fail(Status::RemoteAccess, 0, {key});
  r.run(rng, c.post, c.effect, c.want);
}

// A remote range whose end wraps past 2^64 to inside the region: the end is
// below the region's end only by wrapping.
TEST(RemoteRangeWraps, TheAddressSpace) {
  for (Op op : {Op::Write, Op::Read}) {
    SCOPED_TRACE(op_name(op));
    KINET_TEST_RNG(rng);
    Rig r;
    const Guarded& L = r.a(4096);
    const Guarded& T = r.b(4096);
    const uint64_t raddr = ~uint64_t{0} - 15;  // + 32 wraps to 16
    OpSpec s;
    s.op = op, s.local = {&L, 0}, s.remote = {&T, 0}, s.n = 32;
    OpCase c = make_case(r, s);
    c.post = [&, op, raddr](const QpHandle& h, Ticket* t) {
      constexpr auto X = dev::Sharing::Exclusive;
      return op == Op::Write ? dev::put<X>(h, L.p(), L.lkey(), raddr, T.rkey(), 32, dev::kSignal, t)
                             : dev::get<X>(h, L.p(), L.lkey(), raddr, T.rkey(), 32, dev::kSignal, t);
    };
    c.fail(Status::RemoteAccess, 0, {raddr, T.key()});
    r.run(rng, c.post, c.effect, c.want);
  }
}

// A QP that the responder is not connected to: the responder drops its
// requests (they come from a QP it does not know), the requester's retries
// run out, and nothing is written.
TEST(RemoteConnection, RequestsFromAnotherQpAreNotAnswered) {
  KINET_TEST_RNG(rng);
  Rig r;
  auto stranger = r.p.pa->create_qp(test_qp_config(64, kTimeoutMs));
  stranger->connect(r.p.qb->info());  // to qb, which is connected to qa
  const Guarded& L = r.a(4096);
  const Guarded& T = r.b(4096);
  fill_random(rng, T.buf.get(), T.total());
  fill_distinct(rng, L.p(), T.p(), 4096);
  const std::vector<uint8_t> before(T.buf.get(), T.buf.get() + T.total());
  const auto h = stranger->handle();
  Ticket t, t2;
  ASSERT_EQ(dev::put<dev::Sharing::Exclusive>(h, L.p(), L.lkey(), T.addr(), T.rkey(), 4096, dev::kSignal, &t),
            Status::Ok);
  ASSERT_EQ(dev::nop<dev::Sharing::Exclusive>(h, dev::kSignal, &t2), Status::Ok);
  EXPECT_EQ(dev::wait<dev::Sharing::Exclusive>(h, t), Status::TransportRetryExceeded) << stranger->last_error();
  EXPECT_EQ(dev::wait<dev::Sharing::Exclusive>(h, t2), Status::WrFlushed);
  EXPECT_EQ(stranger->state(), QpState::Error);
  EXPECT_EQ(r.p.qb->state(), QpState::Rts);
  EXPECT_TRUE(names_hex(stranger->last_error(), r.p.qb->qpn())) << stranger->last_error();
  EXPECT_TRUE(bytes_equal(T.buf.get(), before.data(), T.total(), "target of the stranger's put"));
}

}  // namespace
}  // namespace kinet::test::edge
