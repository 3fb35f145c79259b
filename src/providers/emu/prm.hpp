// kinet emu — the software NIC's own copy of the mlx5 PRM numbers it needs:
// send WQE opcodes and byte offsets, fm_ce_se bits, CQE opcodes, error
// syndromes, doorbell layout. Written from the PRM ("Send WQE format",
// "Completion Queue Entry format", "CQE error syndrome"), deliberately NOT
// shared with include/kinet/mlx5/wire.hpp (the encoder's): an error in one
// of them makes the emulator disagree with the encoder, and a test fail,
// instead of hiding on both sides.
#pragma once
#include <cstdint>

namespace kinet::emu::prm {

// ---- send WQE -------------------------------------------------------------
inline constexpr uint32_t kWqeBB = 64;  // basic block
inline constexpr uint32_t kDsUnit = 16; // DS counts 16-byte units
inline constexpr uint32_t kMaxDsOneBB = kWqeBB / kDsUnit;

// Control segment (bytes 0..15).
inline constexpr int kCtrlOpmod = 0;      // u8
inline constexpr int kCtrlWqeIndex = 1;   // BE u16
inline constexpr int kCtrlOpcode = 3;     // u8
inline constexpr int kCtrlQpn = 4;        // BE u24 (bytes 4..6)
inline constexpr int kCtrlDs = 7;         // u8 (low 6 bits in the PRM; upper must be 0)
inline constexpr int kCtrlSignature = 8;  // u8
inline constexpr int kCtrlDci = 9;        // u16 dci stream channel id (RC: 0)
inline constexpr int kCtrlFmCeSe = 11;    // u8
inline constexpr int kCtrlImm = 12;       // BE u32 immediate / invalidate key

// fm_ce_se: fence mode bits 7:5, CQE request bits 3:2, solicited bit 1.
inline constexpr uint8_t kFenceMask = 0xe0;
inline constexpr uint8_t kFenceStrong = 0x80;      // fence mode 4: wait for earlier reads/atomics
inline constexpr uint8_t kFenceSmallInit = 0x20;   // fence mode 1: initiator small fence
inline constexpr uint8_t kCeMask = 0x0c;
inline constexpr uint8_t kCeAlways = 0x08;         // "CQE always" (CQ update)
inline constexpr uint8_t kSolicited = 0x02;
inline constexpr uint8_t kFmCeSeKnown = kFenceMask | kCeMask | kSolicited;  // bits 4 and 0 are reserved

// Remote address segment (bytes 16..31 of RDMA and atomic WQEs).
inline constexpr int kRaddr = 16;         // BE u64
inline constexpr int kRkey = 24;          // BE u32
inline constexpr int kRaddrReserved = 28; // u32, must be 0
// The segments after it.
inline constexpr int kSeg2 = 32;
inline constexpr int kSeg3 = 48;
// Data (pointer) segment: byte_count BE u32, lkey BE u32, addr BE u64.
inline constexpr int kDataByteCount = 0, kDataLkey = 4, kDataAddr = 8;
inline constexpr uint32_t kInlineFlag = 0x80000000u;  // byte_count bit 31: an inline segment
inline constexpr int kInlineHeader = 4;
// Atomic segment: swap/add BE u64, compare BE u64.
inline constexpr int kAtomicSwapAdd = 0, kAtomicCompare = 8;

enum Opcode : uint8_t {
  kNop = 0x00,
  kRdmaWrite = 0x08,
  kRdmaWriteImm = 0x09,
  kSend = 0x0a,
  kRdmaRead = 0x10,
  kAtomicCs = 0x11,
  kAtomicFa = 0x12,
};

// ---- CQE (64 bytes) -------------------------------------------------------
inline constexpr int kCqeByteCnt = 44;      // BE u32
inline constexpr int kCqeVendorSynd = 54;   // u8 (error CQE)
inline constexpr int kCqeSyndrome = 55;     // u8 (error CQE)
inline constexpr int kCqeSopQpn = 56;       // BE u32: WQE opcode << 24 | qpn
inline constexpr int kCqeWqeCounter = 60;   // BE u16
inline constexpr int kCqeSignature = 62;    // u8
inline constexpr int kCqeOpOwn = 63;        // u8: opcode << 4 | owner
enum CqeOpcode : uint8_t { kCqeReq = 0x0, kCqeReqErr = 0xd };

enum Syndrome : uint8_t {
  kSynLocalLength = 0x01,
  kSynLocalQpOp = 0x02,
  kSynLocalProt = 0x04,
  kSynWrFlush = 0x05,
  kSynLocalAccess = 0x11,
  kSynRemoteInvalReq = 0x12,
  kSynRemoteAccess = 0x13,
  kSynRemoteOp = 0x14,
  kSynTransportRetry = 0x15,
};

// ---- doorbells ------------------------------------------------------------
inline constexpr int kDbrecSend = 1;    // dbrec[1]: BE send producer index (low 16 bits)
inline constexpr int kCqDbrecCi = 0;    // CQ dbrec[0]: BE consumer index (low 24 bits)
// The doorbell word, as 8 bytes in memory: bytes 0..3 = BE(pi << 8) (the
// ctrl segment's opmod | index | opcode with opmod and opcode 0), bytes 4..7
// = BE(qpn << 8) (qpn | DS 0). Byte 0 of a doorbell is always 0, so the
// emulator marks "no new doorbell" with a word whose byte 0 is 0xff.
inline constexpr uint64_t kNoDoorbell = ~0ull;

}  // namespace kinet::emu::prm
