// The emulator's WQE decoder alone, fed 64-byte arrays built here byte by
// byte from the PRM's offsets (not with the encoder): every field read, every
// malformed field rejected with its own reason, each check at its edge.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "providers/emu/decode.hpp"

namespace {
using kinet::emu::decode_send_wqe;
using kinet::emu::DecodedWqe;

struct Bb {
  uint8_t b[64] = {};
  void be16(int off, uint16_t v) { b[off] = uint8_t(v >> 8), b[off + 1] = uint8_t(v); }
  void be32(int off, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[off + i] = uint8_t(v >> (24 - 8 * i));
  }
  void be64(int off, uint64_t v) { be32(off, uint32_t(v >> 32)), be32(off + 4, uint32_t(v)); }
  // ctrl: [0] opmod [1..2] wqe index [3] opcode [4..6] qpn [7] ds [8] signature [9..10] dci [11] fm_ce_se [12..15] imm
  void ctrl(uint8_t opcode, uint16_t idx, uint32_t qpn, uint8_t ds, uint8_t fm_ce_se) {
    b[3] = opcode;
    be16(1, idx);
    be32(4, (qpn << 8) | ds);
    b[11] = fm_ce_se;
  }
  void raddr(uint64_t a, uint32_t rkey) { be64(16, a), be32(24, rkey); }
  void data(int off, uint32_t bytes, uint32_t lkey, uint64_t addr) { be32(off, bytes), be32(off + 4, lkey), be64(off + 8, addr); }
};

std::string fail(const Bb& w) {
  DecodedWqe d;
  std::string why;
  EXPECT_FALSE(decode_send_wqe(w.b, &d, &why));
  return why;
}

Bb write_wqe() {
  Bb w;
  w.ctrl(0x08, 0x1234, 0xabcde, 3, 0x08);
  w.raddr(0x1122334455667788ull, 0xcafe01);
  w.data(32, 4096, 0x123401, 0x7f0011223344ull);
  return w;
}

TEST(Decode, WriteEveryField) {
  Bb w = write_wqe();
  w.b[11] = 0x88;  // fence + CQE
  DecodedWqe d;
  std::string why;
  ASSERT_TRUE(decode_send_wqe(w.b, &d, &why)) << why;
  EXPECT_EQ(d.opcode, 0x08);
  EXPECT_EQ(d.wqe_index, 0x1234);
  EXPECT_EQ(d.qpn, 0xabcdeu);
  EXPECT_EQ(d.ds, 3);
  EXPECT_TRUE(d.signaled);
  EXPECT_TRUE(d.fence);
  EXPECT_EQ(d.raddr, 0x1122334455667788ull);
  EXPECT_EQ(d.rkey, 0xcafe01u);
  ASSERT_EQ(d.nsge, 1);
  EXPECT_EQ(d.sge[0].len, 4096u);
  EXPECT_EQ(d.sge[0].lkey, 0x123401u);
  EXPECT_EQ(d.sge[0].addr, 0x7f0011223344ull);
  EXPECT_FALSE(d.is_inline);
  EXPECT_EQ(d.total_len(), 4096u);
}

TEST(Decode, UnsignaledUnfenced) {
  Bb w = write_wqe();
  w.b[11] = 0;
  DecodedWqe d;
  std::string why;
  ASSERT_TRUE(decode_send_wqe(w.b, &d, &why)) << why;
  EXPECT_FALSE(d.signaled);
  EXPECT_FALSE(d.fence);
}

TEST(Decode, AtomicFields) {
  Bb w;
  w.ctrl(0x11, 7, 0x48, 4, 0x08);
  w.raddr(0x1000, 0x55);
  w.be64(32, 0xdeadbeef00000001ull);  // swap
  w.be64(40, 0x0123456789abcdefull);  // compare
  w.data(48, 8, 0x66, 0x2000);
  DecodedWqe d;
  std::string why;
  ASSERT_TRUE(decode_send_wqe(w.b, &d, &why)) << why;
  EXPECT_EQ(d.swap_add, 0xdeadbeef00000001ull);
  EXPECT_EQ(d.compare, 0x0123456789abcdefull);
  EXPECT_EQ(d.sge[0].len, 8u);
  EXPECT_EQ(d.sge[0].addr, 0x2000u);
  EXPECT_TRUE(d.is_atomic());
  w.b[3] = 0x12;  // fetch-add must leave compare 0
  EXPECT_EQ(fail(w), "ATOMIC_FA compare field is not 0");
}

TEST(Decode, InlineEdges) {
  for (uint32_t len : {0u, 12u, 13u, 28u}) {
    Bb w;
    const uint8_t ds = uint8_t(2 + (4 + len + 15) / 16);
    w.ctrl(0x08, 0, 1, ds, 0);
    w.be32(32, 0x80000000u | len);
    for (uint32_t i = 0; i < len; ++i) w.b[36 + i] = uint8_t(i + 1);
    DecodedWqe d;
    std::string why;
    ASSERT_TRUE(decode_send_wqe(w.b, &d, &why)) << len << ": " << why;
    EXPECT_TRUE(d.is_inline);
    EXPECT_EQ(d.inline_len, len);
    EXPECT_EQ(d.inline_data, w.b + 36);
  }
  Bb w;
  w.ctrl(0x08, 0, 1, 4, 0);
  w.be32(32, 0x80000000u | 29);
  EXPECT_EQ(fail(w), "inline length 29 overruns the WQE (at most 28 bytes in one basic block)");
  w.be32(32, 0x80000000u | 0x400u);  // bits above 0x3ff are a length, not masked
  EXPECT_EQ(fail(w), "inline length 1024 overruns the WQE (at most 28 bytes in one basic block)");
  w.be32(32, 0x80000000u | 12);  // 12 bytes need DS 3
  EXPECT_EQ(fail(w), "inline WQE of 12 bytes with DS 4 (expected 3)");
  w.b[7] = 3;
  w.be32(32, 0x80000000u | 8);
  w.b[47] = 0xee;  // padding after 8 bytes
  EXPECT_EQ(fail(w), "inline padding byte 47 is 0xee, must be 0");
}

TEST(Decode, EachMalformedField) {
  Bb w = write_wqe();
  w.b[0] = 1;
  EXPECT_EQ(fail(w), "opmod 0x01 is not 0");
  w = write_wqe(), w.b[8] = 2;
  EXPECT_EQ(fail(w), "signature byte 0x02 is not 0 (WQE signatures are off)");
  w = write_wqe(), w.b[9] = 1;
  EXPECT_EQ(fail(w), "dci stream channel id 0x100 is not 0 on an RC QP");
  w = write_wqe(), w.b[12] = 0x80;
  EXPECT_EQ(fail(w), "immediate field 0x80000000 is not 0 (no opcode with immediate)");
  w = write_wqe(), w.b[11] = 0x01;
  EXPECT_EQ(fail(w), "fm_ce_se 0x01 has unknown bits 0x01");
  w = write_wqe(), w.b[11] = 0x60;
  EXPECT_EQ(fail(w), "fm_ce_se 0x60 has an unknown fence mode");
  w = write_wqe(), w.b[11] = 0x0c;
  EXPECT_EQ(fail(w), "fm_ce_se 0x0c asks for an unsupported CQE mode");
  w = write_wqe(), w.b[28] = 0x80;
  EXPECT_EQ(fail(w), "remote-address segment reserved word is 0x80000000, must be 0");
  w = write_wqe(), w.b[7] = 0;
  EXPECT_EQ(fail(w), "DS count 0 does not fit one 64-byte basic block");
  w = write_wqe(), w.b[7] = 5;
  EXPECT_EQ(fail(w), "DS count 5 does not fit one 64-byte basic block");
  w = write_wqe(), w.b[7] = 1;
  EXPECT_EQ(fail(w), "RDMA_WRITE with DS 1 (no remote-address segment)");
  w = write_wqe(), w.b[3] = 0x09;
  EXPECT_EQ(fail(w), "opcode 0x09 (RDMA_WRITE_IMM) is not supported by emu");
  w = write_wqe(), w.b[3] = 0x10, w.be32(32, 0x80000000u);
  EXPECT_EQ(fail(w), "RDMA_READ data segment byte count 2147483648 has bit 31 (the inline flag) set: lengths must be < 2^31");
  w = write_wqe(), w.b[7] = 4, w.data(48, 0x80000001u, 1, 2);
  EXPECT_EQ(fail(w), "RDMA_WRITE data segment byte count 2147483649 has bit 31 (the inline flag) set: lengths must be < 2^31");
  Bb nop;
  nop.ctrl(0x00, 0, 1, 2, 0);
  EXPECT_EQ(fail(nop), "NOP with DS 2 (expected 1)");
}

TEST(Decode, LargestPointerLengthIsAccepted) {  // 2^31 - 1: the edge below the inline flag
  Bb w = write_wqe();
  w.be32(32, 0x7fffffffu);
  DecodedWqe d;
  std::string why;
  ASSERT_TRUE(decode_send_wqe(w.b, &d, &why)) << why;
  EXPECT_EQ(d.sge[0].len, 0x7fffffffu);
}
}  // namespace
