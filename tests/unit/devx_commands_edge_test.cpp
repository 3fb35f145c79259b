// Edges of the DevX mailbox builders and of the software NIC's decoder: each
// field's width limit, buffer sizes, opcodes, op_mod, reserved bits, and what
// the software NIC refuses to run (check_supported), each at its exact edge.
#include <gtest/gtest.h>

#include <vector>

#include "kinet/kinet.hpp"
#include "providers/emu/devx/devx_decode.hpp"
#include "providers/mlx5/commands/builders.hpp"
#include "test_util.hpp"

namespace {
namespace cmd = kinet::mlx5::cmd;
namespace devx = kinet::emu::devx;
using Bytes = std::vector<uint8_t>;
using kinet::ErrorCode;

using kinet::test::expect_error;

TEST(DevxBuilderEdges, FieldWidthLimits) {
  Bytes in(cmd::kCreateQpInBytes);
  cmd::CreateQp q;
  q.log_sq_size = 15;
  EXPECT_NO_THROW(cmd::build_create_qp(q, in));
  q.log_sq_size = 16;
  expect_error([&] { cmd::build_create_qp(q, in); }, ErrorCode::InvalidArgument,
               "CREATE_QP: log_sq_size = 16 does not fit its 4-bit field");
  q = {};
  q.pd = 0xffffff;
  EXPECT_NO_THROW(cmd::build_create_qp(q, in));
  q.pd = 0x1000000;
  expect_error([&] { cmd::build_create_qp(q, in); }, ErrorCode::InvalidArgument, "pd = 16777216");

  Bytes m(cmd::kModifyQpInBytes);
  cmd::Init2RtrQp r;
  r.path.flow_label = 0xfffff;
  EXPECT_NO_THROW(cmd::build_init2rtr_qp(r, m));
  r.path.flow_label = 0x100000;
  expect_error([&] { cmd::build_init2rtr_qp(r, m); }, ErrorCode::InvalidArgument, "INIT2RTR_QP: flow_label");
  r = {};
  r.path.mlid = 0x80;
  expect_error([&] { cmd::build_init2rtr_qp(r, m); }, ErrorCode::InvalidArgument, "mlid");
  r = {};
  r.qpn = 0x1000000;
  expect_error([&] { cmd::build_init2rtr_qp(r, m); }, ErrorCode::InvalidArgument, "INIT2RTR_QP: qpn");

  cmd::Rtr2RtsQp s;
  s.rnr_retry = 7;
  EXPECT_NO_THROW(cmd::build_rtr2rts_qp(s, m));
  s.rnr_retry = 8;
  expect_error([&] { cmd::build_rtr2rts_qp(s, m); }, ErrorCode::InvalidArgument, "rnr_retry = 8");

  Bytes c(cmd::kCreateCqInBytes);
  cmd::CreateCq cq;
  cq.log_cq_size = 31;
  EXPECT_NO_THROW(cmd::build_create_cq(cq, c));
  cq.log_cq_size = 32;
  expect_error([&] { cmd::build_create_cq(cq, c); }, ErrorCode::InvalidArgument, "CREATE_CQ: log_cq_size");
}

TEST(DevxBuilderEdges, BufferSizeMustBeExact) {
  for (size_t n : {cmd::kCreateQpInBytes - 1, cmd::kCreateQpInBytes + 1, size_t{0}}) {
    Bytes in(n);
    expect_error([&] { cmd::build_create_qp({}, in); }, ErrorCode::InvalidArgument,
                 "CREATE_QP: input mailbox is " + std::to_string(n) + " bytes, the command's is 272");
  }
  Bytes small(15);
  expect_error([&] { cmd::build_2err_qp({}, small); }, ErrorCode::InvalidArgument, "2ERR_QP: input mailbox");
  expect_error([&] { cmd::parse_create_qp_out(small); }, ErrorCode::InvalidArgument,
               "CREATE_QP reply: output mailbox is 15 bytes, needs 16");
  Bytes caps(cmd::kQueryHcaCapOutBytes - 1);
  expect_error([&] { cmd::parse_query_hca_cap_general(caps); }, ErrorCode::InvalidArgument, "needs 4112");
  Bytes header(7);
  expect_error([&] { cmd::parse_out_header(header); }, ErrorCode::InvalidArgument, "needs 8");
}

TEST(DevxBuilderEdges, QueryQpHasNoUid) {
  Bytes in(cmd::kQpRefInBytes);
  EXPECT_EQ(cmd::build_query_qp({0, 5}, in), cmd::kQueryQpOutBytes);
  expect_error([&] { cmd::build_query_qp({1, 5}, in); }, ErrorCode::InvalidArgument, "QUERY_QP");
}

TEST(DevxBuilderEdges, BuilderZeroFillsStaleBytes) {
  Bytes in(cmd::kCreateQpInBytes, 0xff);
  cmd::CreateQp q;
  q.wq_umem_valid = q.dbr_umem_valid = true;
  cmd::build_create_qp(q, in);
  cmd::CreateQp got;
  const devx::Verdict v = devx::decode(in, 16, &got);
  ASSERT_TRUE(v.ok()) << v.why;
  EXPECT_EQ(got, q);
}

// ---- decoder ------------------------------------------------------------------

Bytes create_qp_mailbox() {
  Bytes in(cmd::kCreateQpInBytes);
  cmd::CreateQp q;
  q.wq_umem_valid = q.dbr_umem_valid = true;
  cmd::build_create_qp(q, in);
  return in;
}

void set_bit(Bytes& b, uint32_t bit) { b.at(bit / 8) |= static_cast<uint8_t>(0x80u >> (bit % 8)); }

TEST(DevxDecoderEdges, Sizes) {
  Bytes in = create_qp_mailbox();
  cmd::CreateQp q;
  EXPECT_TRUE(devx::decode(in, 16, &q).ok());
  EXPECT_TRUE(devx::decode(in, 4096, &q).ok());
  devx::Verdict v = devx::decode(in, 15, &q);
  EXPECT_EQ(v.status, devx::PrmStatus::BadOutputLen) << v.why;
  EXPECT_NE(v.why.find("output mailbox is 15 bytes, the reply needs 16"), std::string::npos) << v.why;
  Bytes longer = in;
  longer.push_back(0);
  EXPECT_EQ(devx::decode(longer, 16, &q).status, devx::PrmStatus::BadInputLen);
  Bytes shorter(in.begin(), in.end() - 1);
  v = devx::decode(shorter, 16, &q);
  EXPECT_EQ(v.status, devx::PrmStatus::BadInputLen);
  EXPECT_NE(v.why.find("input mailbox is 271 bytes, the command's is 272"), std::string::npos) << v.why;

  Bytes hca(cmd::kQueryHcaCapInBytes);
  cmd::build_query_hca_cap({}, hca);
  cmd::QueryHcaCap h;
  EXPECT_TRUE(devx::decode(hca, 4112, &h).ok());
  EXPECT_EQ(devx::decode(hca, 4111, &h).status, devx::PrmStatus::BadOutputLen);
  Bytes qq(cmd::kQpRefInBytes);
  cmd::build_query_qp({0, 1}, qq);
  cmd::QpRef r;
  EXPECT_TRUE(devx::decode_qp_ref(cmd::Op::QueryQp, qq, 272, &r).ok());
  EXPECT_EQ(devx::decode_qp_ref(cmd::Op::QueryQp, qq, 271, &r).status, devx::PrmStatus::BadOutputLen);
  EXPECT_EQ(devx::opcode_of(Bytes(1, 0x05)), 0);
}

TEST(DevxDecoderEdges, OpcodeAndOpMod) {
  Bytes in = create_qp_mailbox();
  cmd::CreateQp q;
  in[1] = 0x01;  // DESTROY_QP's opcode
  devx::Verdict v = devx::decode(in, 16, &q);
  EXPECT_EQ(v.status, devx::PrmStatus::BadOp);
  EXPECT_NE(v.why.find("opcode is 0x501, expected 0x500"), std::string::npos) << v.why;
  in = create_qp_mailbox();
  in[7] = 0x01;  // op_mod = 1 (bit 0x3f)
  v = devx::decode(in, 16, &q);
  EXPECT_EQ(v.status, devx::PrmStatus::BadParam);
  EXPECT_EQ(v.syndrome, 0x30u);

  // QUERY_HCA_CAP: op_mod carries the group; groups 1, 2 and 5 are not known.
  Bytes hca(cmd::kQueryHcaCapInBytes);
  cmd::QueryHcaCap h;
  for (uint8_t op_mod : {0x02, 0x05, 0x0a}) {
    cmd::build_query_hca_cap({}, hca);
    hca[7] = op_mod;
    v = devx::decode(hca, 4112, &h);
    EXPECT_EQ(v.status, devx::PrmStatus::BadParam) << int(op_mod);
  }
  hca[7] = 0x07;  // atomic, current
  ASSERT_TRUE(devx::decode(hca, 4112, &h).ok());
  EXPECT_EQ(h, (cmd::QueryHcaCap{cmd::CapGroup::Atomic, true}));
  hca[7] = 0x09;  // RoCE, current: well formed, but not answered
  ASSERT_TRUE(devx::decode(hca, 4112, &h).ok());
  EXPECT_EQ(devx::check_supported(h).status, devx::PrmStatus::BadParam);
  EXPECT_TRUE(devx::check_supported(cmd::QueryHcaCap{cmd::CapGroup::General, false}).ok());
}

TEST(DevxDecoderEdges, ReservedBitsAreRejectedWithTheirOffset) {
  cmd::CreateQp q;
  // Around pd (qpc bits 0x28-0x3f, mailbox 0xe8-0xff): bit 0xe7 is reserved, 0xe8 is pd.
  Bytes in = create_qp_mailbox();
  set_bit(in, 0xe8);
  ASSERT_TRUE(devx::decode(in, 16, &q).ok());
  EXPECT_EQ(q.pd, 0x800000u);
  in = create_qp_mailbox();
  set_bit(in, 0xe7);
  devx::Verdict v = devx::decode(in, 16, &q);
  EXPECT_EQ(v.status, devx::PrmStatus::BadParam);
  EXPECT_EQ(v.syndrome, 0xe7u);
  EXPECT_NE(v.why.find("bit 0xe7 (dword 7)"), std::string::npos) << v.why;
  // input_qpn (bit 0x48) and the qpc's secondary address path are not implemented.
  for (uint32_t bit : {0x48u, 0xc0u + 0x220u, 0x861u, 0x87fu}) {
    in = create_qp_mailbox();
    set_bit(in, bit);
    v = devx::decode(in, 16, &q);
    EXPECT_EQ(v.status, devx::PrmStatus::BadParam) << std::hex << bit;
    EXPECT_EQ(v.syndrome, bit);
  }
  // st must be RC (0).
  in = create_qp_mailbox();
  set_bit(in, 0xc0 + 0x0f);
  v = devx::decode(in, 16, &q);
  EXPECT_EQ(v.status, devx::PrmStatus::BadParam);
  EXPECT_EQ(v.syndrome, 0xc8u);
  // QUERY_QP has no uid: bits 0x10-0x1f are reserved there.
  Bytes qq(cmd::kQpRefInBytes);
  cmd::build_query_qp({0, 1}, qq);
  qq[3] = 1;
  cmd::QpRef r;
  v = devx::decode_qp_ref(cmd::Op::QueryQp, qq, 272, &r);
  EXPECT_EQ(v.status, devx::PrmStatus::BadParam);
  EXPECT_EQ(v.syndrome, 0x1fu);
  EXPECT_TRUE(devx::decode_qp_ref(cmd::Op::DestroyQp, (qq[1] = 0x01, qq), 16, &r).ok());
  EXPECT_EQ(r.uid, 1);
  // RST2INIT carries pm_state = migrated.
  Bytes m(cmd::kModifyQpInBytes);
  cmd::build_rst2init_qp({}, m);
  m[26] &= 0xef;  // pm_state 3 -> 1
  cmd::Rst2InitQp ri;
  v = devx::decode(m, 16, &ri);
  EXPECT_EQ(v.status, devx::PrmStatus::BadParam);
  EXPECT_EQ(v.syndrome, 0xc0u + 0x13u);
  expect_error([&] { devx::decode_qp_ref(cmd::Op::CreateQp, qq, 16, &r); }, ErrorCode::InvalidArgument,
               "does not name only a QP");
}

TEST(DevxDecoderEdges, WhatTheSoftwareNicRuns) {
  cmd::CreateQp q;
  q.wq_umem_valid = q.dbr_umem_valid = true;
  EXPECT_TRUE(devx::check_supported(q).ok());
  auto rejects = [](const auto& p, uint32_t syndrome) {
    const devx::Verdict v = devx::check_supported(p);
    EXPECT_EQ(v.status, devx::PrmStatus::BadParam) << v.why;
    EXPECT_EQ(v.syndrome, syndrome) << v.why;
  };
  { auto p = q; p.pm_state = 2; rejects(p, 0xc0 + 0x13); }
  { auto p = q; p.no_sq = true; rejects(p, 0xc0 + 0x50); }
  { auto p = q; p.rq_type = 0; rejects(p, 0xc0 + 0x565); }
  { auto p = q; p.log_rq_size = 1; rejects(p, 0xc0 + 0x49); }
  { auto p = q; p.cs_req = 1; rejects(p, 0xc0 + 0x630); }
  { auto p = q; p.cs_res = 1; rejects(p, 0xc0 + 0x638); }
  { auto p = q; p.wq_umem_valid = false; rejects(p, 0x860); }
  { auto p = q; p.dbr_umem_valid = false; rejects(p, 0xc0 + 0x683); }

  cmd::CreateCq c;
  c.cq_umem_valid = c.dbr_umem_valid = true;
  EXPECT_TRUE(devx::check_supported(c).ok());
  { auto p = c; p.cqe_sz = 1; rejects(p, 0x88); }
  { auto p = c; p.cq_umem_valid = false; rejects(p, 0x2e0); }
  { auto p = c; p.dbr_umem_valid = false; rejects(p, 0x86); }
  { auto p = c; p.page_offset = 1; rejects(p, 0x80 + 0x54); }

  cmd::Rst2InitQp r;
  r.port = 1, r.atomic_mode = 3;
  EXPECT_TRUE(devx::check_supported(r).ok());
  { auto p = r; p.port = 0; rejects(p, 0x180 + 0x128); }
  { auto p = r; p.atomic_mode = 4; rejects(p, 0xc0 + 0x48c); }

  cmd::Init2RtrQp t;
  for (uint8_t mtu = 0; mtu < 8; ++mtu) {
    t.mtu = mtu;
    if (mtu >= 1 && mtu <= 5) EXPECT_TRUE(devx::check_supported(t).ok()) << int(mtu);
    else rejects(t, 0xc0 + 0x40);
  }
}

TEST(DevxReplyEdges, WidthAndSize) {
  Bytes out(cmd::kQueryQpOutBytes);
  cmd::QpQuery q;
  q.state = 16;
  expect_error([&] { devx::encode_query_qp(out, q); }, ErrorCode::InvalidArgument, "state = 16");
  Bytes small(15);
  expect_error([&] { devx::encode_created(small, 1); }, ErrorCode::InvalidArgument, "needs 16 bytes");
  Bytes ok(16);
  expect_error([&] { devx::encode_created(ok, 0x1000000); }, ErrorCode::InvalidArgument, "object number");
  Bytes caps(cmd::kQueryHcaCapOutBytes - 1);
  expect_error([&] { devx::encode_hca_caps(caps, {}); }, ErrorCode::InvalidArgument, "needs 4112 bytes");
  Bytes stale(16, 0xff);
  devx::encode_ok(stale);
  EXPECT_EQ(cmd::parse_out_header(stale), cmd::OutHeader{});
}
}  // namespace
