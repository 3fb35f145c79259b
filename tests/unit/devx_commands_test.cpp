// The mlx5 provider's DevX mailbox builders against the software NIC's
// decoder, written apart (src/providers/mlx5/commands vs src/providers/emu/devx):
//  - round trips of every command over parameters at 0, at their field's
//    maximum and random, in both directions (requests and replies);
//  - every single-bit change of a built request is either rejected or decodes
//    to other parameters (no bit is ignored, so a field written one bit off is
//    seen);
//  - golden byte vectors for CREATE_QP and INIT2RTR_QP written by hand in this
//    file from the PRM's bit offsets, so builder and decoder can't share a
//    mistake.
// tests/CMakeLists.txt also builds this file against builders with one field
// moved on purpose (mutants) and requires the matching test to fail.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "providers/emu/devx/devx_decode.hpp"
#include "providers/mlx5/commands/builders.hpp"
#include "test_util.hpp"

namespace {
namespace cmd = kinet::mlx5::cmd;
namespace devx = kinet::emu::devx;
using Bytes = std::vector<uint8_t>;

// Random parameter sets per command ($KINET_TEST_SCALE applies; sanitizer builds run fewer).
const int kIterations = static_cast<int>(kinet::test::scaled(200, 20));
// The single-bit flip check (2176 decodes of a 272-byte mailbox) runs on the
// all-zero and all-maximum parameters and on every 10th random set.
bool flip_check(int iteration) { return iteration < 2 || iteration % 10 == 2; }

// Values of a `width`-bit field: iteration 0 all zero, 1 all maximum, later
// ones each field at zero, maximum or random.
class Gen {
 public:
  Gen(std::mt19937_64& rng, int iteration) : rng_(rng), it_(iteration) {}
  uint64_t v(unsigned width) {
    const uint64_t max = width >= 64 ? ~0ull : (1ull << width) - 1;
    if (it_ == 0) return 0;
    if (it_ == 1) return max;
    switch (rng_() % 4) {
      case 0: return 0;
      case 1: return max;
      default: return rng_() & max;
    }
  }
  bool b() { return v(1) != 0; }
  template <size_t N> std::array<uint8_t, N> arr() {
    std::array<uint8_t, N> a{};
    for (auto& x : a) x = static_cast<uint8_t>(v(8));
    return a;
  }

 private:
  std::mt19937_64& rng_;
  int it_;
};

cmd::CreateCq gen_create_cq(Gen& g) {
  cmd::CreateCq p;
  p.uid = g.v(16), p.log_cq_size = g.v(5), p.uar_page = g.v(24), p.c_eqn = g.v(8), p.cqe_sz = g.v(3);
  p.oi = g.b(), p.log_page_size = g.v(5), p.page_offset = g.v(6), p.dbr_umem_valid = g.b();
  p.dbr_umem_id = g.v(32), p.dbr_addr = g.v(64), p.cq_umem_valid = g.b(), p.cq_umem_id = g.v(32);
  p.cq_umem_offset = g.v(64);
  return p;
}

cmd::CreateQp gen_create_qp(Gen& g) {
  cmd::CreateQp p;
  p.uid = g.v(16), p.pm_state = g.v(2), p.pd = g.v(24), p.log_msg_max = g.v(5), p.log_rq_size = g.v(4);
  p.log_rq_stride = g.v(3), p.no_sq = g.b(), p.log_sq_size = g.v(4), p.ts_format = g.v(2);
  p.uar_page = g.v(24), p.user_index = g.v(24), p.log_page_size = g.v(5), p.cqn_snd = g.v(24);
  p.cqn_rcv = g.v(24), p.rq_type = g.v(3), p.cs_req = g.v(8), p.cs_res = g.v(8);
  p.dbr_umem_valid = g.b(), p.dbr_umem_id = g.v(32), p.dbr_addr = g.v(64), p.wq_umem_valid = g.b();
  p.wq_umem_id = g.v(32), p.wq_umem_offset = g.v(64);
  return p;
}

cmd::AddressPath gen_path(Gen& g) {
  cmd::AddressPath a;
  a.pkey_index = g.v(16), a.grh = g.b(), a.mlid = g.v(7), a.rlid = g.v(16), a.ack_timeout = g.v(5);
  a.src_addr_index = g.v(8), a.stat_rate = g.v(4), a.hop_limit = g.v(8), a.tclass = g.v(8);
  a.flow_label = g.v(20), a.rgid = g.arr<16>(), a.dscp = g.v(6), a.udp_sport = g.v(16), a.sl = g.v(4);
  a.vhca_port_num = g.v(8), a.rmac = g.arr<6>();
  return a;
}

cmd::Rst2InitQp gen_rst2init(Gen& g) {
  cmd::Rst2InitQp p;
  p.uid = g.v(16), p.qpn = g.v(24), p.opt_param_mask = g.v(32), p.port = g.v(8), p.pkey_index = g.v(16);
  p.rre = g.b(), p.rwe = g.b(), p.rae = g.b(), p.atomic_mode = g.v(4);
  return p;
}

cmd::Init2RtrQp gen_init2rtr(Gen& g) {
  cmd::Init2RtrQp p;
  p.uid = g.v(16), p.qpn = g.v(24), p.opt_param_mask = g.v(32), p.mtu = g.v(3), p.log_msg_max = g.v(5);
  p.remote_qpn = g.v(24), p.next_rcv_psn = g.v(24), p.min_rnr_nak = g.v(5), p.log_rra_max = g.v(3);
  p.path = gen_path(g);
  return p;
}

cmd::Rtr2RtsQp gen_rtr2rts(Gen& g) {
  cmd::Rtr2RtsQp p;
  p.uid = g.v(16), p.qpn = g.v(24), p.opt_param_mask = g.v(32), p.next_send_psn = g.v(24);
  p.log_sra_max = g.v(3), p.retry_count = g.v(3), p.rnr_retry = g.v(3), p.ack_timeout = g.v(5);
  return p;
}

// Builds p, checks the sizes, decodes it back to equal parameters, then (when
// `flips`) checks that flipping any one bit of the request is rejected or
// changes the result.
template <class P, class Build, class Decode>
void round_trip(const P& p, size_t in_bytes, size_t out_bytes, Build build, Decode decode, bool flips = true) {
  Bytes in(in_bytes);
  ASSERT_EQ(build(p, std::span<uint8_t>(in)), out_bytes);
  P got{};
  devx::Verdict v = decode(std::span<const uint8_t>(in), out_bytes, &got);
  ASSERT_TRUE(v.ok()) << v.why;
  if (!(got == p)) {
    // Name where: rebuild from what was decoded and find the first bit that moved.
    Bytes again(in_bytes);
    build(got, std::span<uint8_t>(again));
    size_t bit = 0;
    while (bit < in.size() * 8 && ((in[bit / 8] ^ again[bit / 8]) & (0x80u >> (bit % 8))) == 0) ++bit;
    if (bit == in.size() * 8)
      FAIL() << "decoded parameters differ from the built ones, and both build the same mailbox: the builder "
                "drops or overwrites a field";
    FAIL() << "decoded parameters differ from the built ones; rebuilt from the decoded ones, the mailbox "
              "first differs at bit 0x" << std::hex << bit << " (dword " << std::dec << bit / 32 << ")";
  }
  if (!flips) return;
  for (size_t bit = 0; bit < in.size() * 8; ++bit) {
    Bytes m = in;
    m[bit / 8] ^= static_cast<uint8_t>(0x80u >> (bit % 8));
    P mut{};
    v = decode(std::span<const uint8_t>(m), out_bytes, &mut);
    if (v.ok()) {
      ASSERT_NE(mut, p) << "bit 0x" << std::hex << bit << " of the mailbox is ignored by the decoder";
    }
  }
}

template <class P> auto decoder() {
  return [](std::span<const uint8_t> in, size_t out, P* p) { return devx::decode(in, out, p); };
}
auto qp_ref_decoder(cmd::Op op) {
  return [op](std::span<const uint8_t> in, size_t out, cmd::QpRef* p) { return devx::decode_qp_ref(op, in, out, p); };
}

TEST(DevxRoundTrip, QueryHcaCap) {
  for (auto group : {cmd::CapGroup::General, cmd::CapGroup::Atomic, cmd::CapGroup::Roce})
    for (bool current : {false, true})
      round_trip(cmd::QueryHcaCap{group, current}, cmd::kQueryHcaCapInBytes, cmd::kQueryHcaCapOutBytes,
                 cmd::build_query_hca_cap, decoder<cmd::QueryHcaCap>());
}

TEST(DevxRoundTrip, CreateCq) {
  KINET_TEST_RNG(rng);
  for (int i = 0; i < kIterations; ++i) {
    Gen g(rng, i);
    SCOPED_TRACE(i);
    round_trip(gen_create_cq(g), cmd::kCreateCqInBytes, cmd::kCreateCqOutBytes, cmd::build_create_cq,
               decoder<cmd::CreateCq>(), flip_check(i));
    if (HasFatalFailure()) return;
  }
}

TEST(DevxRoundTrip, DestroyCq) {
  KINET_TEST_RNG(rng);
  for (int i = 0; i < kIterations; ++i) {
    Gen g(rng, i);
    cmd::DestroyCq p;
    p.uid = g.v(16), p.cqn = g.v(24);
    round_trip(p, cmd::kDestroyCqInBytes, cmd::kDestroyCqOutBytes, cmd::build_destroy_cq,
               decoder<cmd::DestroyCq>(), flip_check(i));
    if (HasFatalFailure()) return;
  }
}

TEST(DevxRoundTrip, CreateQp) {
  KINET_TEST_RNG(rng);
  for (int i = 0; i < kIterations; ++i) {
    Gen g(rng, i);
    SCOPED_TRACE(i);
    round_trip(gen_create_qp(g), cmd::kCreateQpInBytes, cmd::kCreateQpOutBytes, cmd::build_create_qp,
               decoder<cmd::CreateQp>(), flip_check(i));
    if (HasFatalFailure()) return;
  }
}

TEST(DevxRoundTrip, Rst2InitQp) {
  KINET_TEST_RNG(rng);
  for (int i = 0; i < kIterations; ++i) {
    Gen g(rng, i);
    SCOPED_TRACE(i);
    round_trip(gen_rst2init(g), cmd::kModifyQpInBytes, cmd::kModifyQpOutBytes, cmd::build_rst2init_qp,
               decoder<cmd::Rst2InitQp>(), flip_check(i));
    if (HasFatalFailure()) return;
  }
}

TEST(DevxRoundTrip, Init2RtrQp) {
  KINET_TEST_RNG(rng);
  for (int i = 0; i < kIterations; ++i) {
    Gen g(rng, i);
    SCOPED_TRACE(i);
    round_trip(gen_init2rtr(g), cmd::kModifyQpInBytes, cmd::kModifyQpOutBytes, cmd::build_init2rtr_qp,
               decoder<cmd::Init2RtrQp>(), flip_check(i));
    if (HasFatalFailure()) return;
  }
}

TEST(DevxRoundTrip, Rtr2RtsQp) {
  KINET_TEST_RNG(rng);
  for (int i = 0; i < kIterations; ++i) {
    Gen g(rng, i);
    SCOPED_TRACE(i);
    round_trip(gen_rtr2rts(g), cmd::kModifyQpInBytes, cmd::kModifyQpOutBytes, cmd::build_rtr2rts_qp,
               decoder<cmd::Rtr2RtsQp>(), flip_check(i));
    if (HasFatalFailure()) return;
  }
}

TEST(DevxRoundTrip, QpRefCommands) {
  KINET_TEST_RNG(rng);
  struct Case {
    cmd::Op op;
    size_t (*build)(const cmd::QpRef&, std::span<uint8_t>);
    size_t out;
  };
  const Case cases[] = {{cmd::Op::ToErrQp, cmd::build_2err_qp, cmd::kQpRefOutBytes},
                        {cmd::Op::ToRstQp, cmd::build_2rst_qp, cmd::kQpRefOutBytes},
                        {cmd::Op::DestroyQp, cmd::build_destroy_qp, cmd::kQpRefOutBytes},
                        {cmd::Op::QueryQp, cmd::build_query_qp, cmd::kQueryQpOutBytes}};
  for (const Case& c : cases) {
    SCOPED_TRACE(cmd::op_name(c.op));
    for (int i = 0; i < kIterations; ++i) {
      Gen g(rng, i);
      cmd::QpRef p;
      p.uid = c.op == cmd::Op::QueryQp ? 0 : g.v(16);
      p.qpn = g.v(24);
      round_trip(p, cmd::kQpRefInBytes, c.out, c.build, qp_ref_decoder(c.op), flip_check(i));
      if (HasFatalFailure()) return;
    }
  }
}

// A mailbox of one command never decodes as another.
TEST(DevxRoundTrip, OpcodesAreDistinct) {
  Bytes in(cmd::kQpRefInBytes);
  cmd::build_2err_qp({0, 7}, in);
  cmd::QpRef p;
  EXPECT_EQ(devx::decode_qp_ref(cmd::Op::ToRstQp, in, 16, &p).status, devx::PrmStatus::BadOp);
  EXPECT_EQ(devx::decode_qp_ref(cmd::Op::DestroyQp, in, 16, &p).status, devx::PrmStatus::BadOp);
  EXPECT_EQ(devx::opcode_of(in), 0x507);
  Bytes m(cmd::kModifyQpInBytes);
  cmd::build_rtr2rts_qp({}, m);
  cmd::Init2RtrQp q;
  EXPECT_EQ(devx::decode(m, 16, &q).status, devx::PrmStatus::BadOp);
}

// ---- replies: the software NIC writes, the provider parses ----------------------

TEST(DevxReplyRoundTrip, HcaCaps) {
  KINET_TEST_RNG(rng);
  for (int i = 0; i < kIterations; ++i) {
    Gen g(rng, i);
    cmd::HcaCaps c;
    c.vhca_id = g.v(16), c.log_max_qp_sz = g.v(8), c.log_max_qp = g.v(5), c.log_max_cq_sz = g.v(8);
    c.log_max_cq = g.v(5), c.log_max_ra_req_qp = g.v(6), c.log_max_ra_res_qp = g.v(6), c.end_pad = g.b();
    c.gid_table_size = g.v(16), c.pkey_table_size = g.v(16), c.port_type = g.v(2), c.num_ports = g.v(8);
    c.log_max_msg = g.v(5), c.cqe_version = g.v(4), c.roce = g.b(), c.atomic = g.b(), c.cq_oi = g.b();
    c.umem_uid_0 = g.b(), c.log_pg_sz = g.v(8), c.log_max_pd = g.v(5);
    Bytes out(cmd::kQueryHcaCapOutBytes, 0xa5);
    devx::encode_hca_caps(out, c);
    EXPECT_EQ(cmd::parse_out_header(out), cmd::OutHeader{});
    ASSERT_EQ(cmd::parse_query_hca_cap_general(out), c) << "iteration " << i;
  }
}

TEST(DevxReplyRoundTrip, AtomicCaps) {
  KINET_TEST_RNG(rng);
  for (int i = 0; i < kIterations; ++i) {
    Gen g(rng, i);
    cmd::AtomicCaps c;
    c.req_8b_endianness_mode = g.v(2), c.supported_8b_endianness_mode_1 = g.b();
    c.atomic_operations = g.v(16), c.atomic_size_qp = g.v(16);
    Bytes out(cmd::kQueryHcaCapOutBytes);
    devx::encode_atomic_caps(out, c);
    ASSERT_EQ(cmd::parse_query_hca_cap_atomic(out), c) << "iteration " << i;
  }
}

TEST(DevxReplyRoundTrip, QueryQpCreatedAndFailure) {
  KINET_TEST_RNG(rng);
  for (int i = 0; i < kIterations; ++i) {
    Gen g(rng, i);
    cmd::QpQuery q;
    q.state = g.v(4), q.pd = g.v(24), q.mtu = g.v(3), q.log_sq_size = g.v(4), q.remote_qpn = g.v(24);
    q.next_send_psn = g.v(24), q.next_rcv_psn = g.v(24), q.cqn_snd = g.v(24), q.retry_count = g.v(3);
    q.rnr_retry = g.v(3);
    Bytes out(cmd::kQueryQpOutBytes);
    devx::encode_query_qp(out, q);
    ASSERT_EQ(cmd::parse_query_qp_out(out), q) << "iteration " << i;

    const uint32_t id = static_cast<uint32_t>(g.v(24));
    Bytes small(16);
    devx::encode_created(small, id);
    ASSERT_EQ(cmd::parse_create_qp_out(small), id);
    ASSERT_EQ(cmd::parse_create_cq_out(small), id);

    const devx::Verdict v{devx::PrmStatus::BadParam, static_cast<uint32_t>(g.v(32)), "x"};
    devx::encode_failure(small, v);
    ASSERT_EQ(cmd::parse_out_header(small), (cmd::OutHeader{0x03, v.syndrome}));
  }
}

// ---- golden vectors: bytes written by hand from the PRM's bit offsets ------------

// A 272-byte mailbox, zero except at the listed bytes.
Bytes golden(const std::map<size_t, uint8_t>& set) {
  Bytes b(272, 0);
  for (auto [i, v] : set) b.at(i) = v;
  return b;
}

void expect_bytes(const Bytes& got, const Bytes& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i], want[i]) << "byte " << i << " (dword " << i / 4 << ")";
}

TEST(DevxGolden, CreateQp) {
  cmd::CreateQp p;
  p.uid = 0x1234, p.pd = 0xabcd, p.log_msg_max = 30, p.log_sq_size = 10, p.uar_page = 0x123;
  p.cqn_snd = 0x456, p.cqn_rcv = 0x457, p.rq_type = 3, p.pm_state = 3;
  p.dbr_umem_valid = true, p.dbr_umem_id = 0x11223344, p.dbr_addr = 0x100000040ull;
  p.wq_umem_valid = true, p.wq_umem_id = 0x55667788, p.wq_umem_offset = 0x1000;
  // qpc starts at byte 24 (bit 0xc0); qpc-relative bit offsets in comments.
  const Bytes want = golden({
      {0, 0x05}, {1, 0x00},              // opcode 0x500
      {2, 0x12}, {3, 0x34},              // uid
      {26, 0x18},                        // pm_state = 3 at qpc bits 0x13-0x14
      {29, 0x00}, {30, 0xab}, {31, 0xcd},  // pd at qpc 0x28
      {32, 0x1e},                        // log_msg_max = 30 at qpc 0x43 (mtu 0 at 0x40)
      {34, 0x50},                        // log_sq_size = 0b1010 at qpc 0x51-0x54
      {37, 0x00}, {38, 0x01}, {39, 0x23},  // uar_page at qpc 0x68
      {149, 0x00}, {150, 0x04}, {151, 0x56},  // cqn_snd at qpc 0x3e8
      {181, 0x00}, {182, 0x04}, {183, 0x57},  // cqn_rcv at qpc 0x4e8
      {187, 0x01}, {191, 0x40},          // dbr_addr at qpc 0x500
      {196, 0x03},                       // rq_type = 3 at qpc 0x565-0x567
      {232, 0x10},                       // dbr_umem_valid at qpc 0x683
      {252, 0x11}, {253, 0x22}, {254, 0x33}, {255, 0x44},  // dbr_umem_id at qpc 0x720
      {262, 0x10}, {263, 0x00},          // wq_umem_offset at 0x800
      {264, 0x55}, {265, 0x66}, {266, 0x77}, {267, 0x88},  // wq_umem_id at 0x840
      {268, 0x80},                       // wq_umem_valid at 0x860
  });
  Bytes in(cmd::kCreateQpInBytes);
  EXPECT_EQ(cmd::build_create_qp(p, in), 16u);
  expect_bytes(in, want);
  cmd::CreateQp got;
  const devx::Verdict v = devx::decode(want, 16, &got);
  ASSERT_TRUE(v.ok()) << v.why;
  EXPECT_EQ(got, p);
  EXPECT_TRUE(devx::check_supported(got).ok()) << devx::check_supported(got).why;
}

TEST(DevxGolden, Init2RtrQpRoce) {
  cmd::Init2RtrQp p;
  p.qpn = 0xabc, p.mtu = 5, p.log_msg_max = 30, p.remote_qpn = 0x123456, p.next_rcv_psn = 0x654321;
  p.min_rnr_nak = 12, p.log_rra_max = 4;
  p.path.grh = true, p.path.ack_timeout = 14, p.path.src_addr_index = 3, p.path.hop_limit = 64;
  p.path.udp_sport = 0xc000, p.path.vhca_port_num = 1, p.path.rmac = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  for (int i = 0; i < 16; ++i) p.path.rgid[i] = static_cast<uint8_t>(0x10 + i);
  // qpc at byte 24, its primary address path at byte 48 (qpc bit 0xc0).
  std::map<size_t, uint8_t> set = {
      {0, 0x05}, {1, 0x03},              // opcode 0x503
      {9, 0x00}, {10, 0x0a}, {11, 0xbc},   // qpn at bit 0x48
      {32, 0xbe},                        // mtu 5 (0b101) at qpc 0x40, log_msg_max 30 at 0x43
      {45, 0x12}, {46, 0x34}, {47, 0x56},  // remote_qpn at qpc 0xa8
      {53, 0x80},                        // path.grh at path bit 0x28
      {56, 0x70},                        // path.ack_timeout = 14 at path 0x40-0x44
      {57, 0x03},                        // path.src_addr_index at path 0x48
      {59, 0x40},                        // path.hop_limit at path 0x58
      {82, 0xc0}, {83, 0x00},            // path.udp_sport at path 0x110
      {85, 0x01},                        // path.vhca_port_num at path 0x128
      {86, 0x02}, {87, 0x11},            // path.rmac[47:32] at path 0x130
      {88, 0x22}, {89, 0x33}, {90, 0x44}, {91, 0x55},  // path.rmac[31:0] at path 0x140
      {169, 0x80},                       // log_rra_max = 4 at qpc 0x488-0x48a
      {172, 0x0c},                       // min_rnr_nak = 12 at qpc 0x4a3-0x4a7
      {173, 0x65}, {174, 0x43}, {175, 0x21},  // next_rcv_psn at qpc 0x4a8
  };
  for (int i = 0; i < 16; ++i) set[64 + i] = static_cast<uint8_t>(0x10 + i);  // path.rgid at path 0x80
  const Bytes want = golden(set);
  Bytes in(cmd::kModifyQpInBytes);
  EXPECT_EQ(cmd::build_init2rtr_qp(p, in), 16u);
  expect_bytes(in, want);
  cmd::Init2RtrQp got;
  const devx::Verdict v = devx::decode(want, 16, &got);
  ASSERT_TRUE(v.ok()) << v.why;
  EXPECT_EQ(got, p);
}

TEST(DevxGolden, Init2RtrQpInfiniBand) {
  cmd::Init2RtrQp p;
  p.qpn = 1, p.mtu = 4, p.path.rlid = 0xbeef, p.path.sl = 9, p.path.pkey_index = 0x8001;
  p.path.vhca_port_num = 2;
  const Bytes want = golden({
      {0, 0x05}, {1, 0x03}, {11, 0x01},
      {32, 0x80},                        // mtu 4 (0b100) at qpc 0x40
      {50, 0x80}, {51, 0x01},            // path.pkey_index at path 0x10
      {54, 0xbe}, {55, 0xef},            // path.rlid at path 0x30
      {84, 0x09},                        // path.sl = 9 at path 0x124-0x127
      {85, 0x02},                        // path.vhca_port_num at path 0x128
  });
  Bytes in(cmd::kModifyQpInBytes);
  cmd::build_init2rtr_qp(p, in);
  expect_bytes(in, want);
  cmd::Init2RtrQp got;
  ASSERT_TRUE(devx::decode(want, 16, &got).ok());
  EXPECT_EQ(got, p);
}
}  // namespace
