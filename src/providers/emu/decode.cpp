#include "providers/emu/decode.hpp"

#include <cstdio>

#include "providers/emu/prm.hpp"

namespace kinet::emu {
namespace {
using namespace prm;

std::string hex2(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%02x", v);
  return b;
}

// A pointer data segment: byte_count bit 31 would make it inline, so a
// length of 2^31 or more is malformed, not a big transfer.
bool read_sge(const uint8_t* p, Sge* s, const char* what, std::string* why) {
  const uint32_t bc = rd_be32(p + kDataByteCount);
  if (bc & kInlineFlag) {
    *why = std::string(what) + " data segment byte count " + std::to_string(bc) +
           " has bit 31 (the inline flag) set: lengths must be < 2^31";
    return false;
  }
  s->len = bc;
  s->lkey = rd_be32(p + kDataLkey);
  s->addr = rd_be64(p + kDataAddr);
  return true;
}

bool check_raddr_seg(const uint8_t* bb, DecodedWqe* d, std::string* why) {
  d->raddr = rd_be64(bb + kRaddr);
  d->rkey = rd_be32(bb + kRkey);
  const uint32_t r = rd_be32(bb + kRaddrReserved);
  if (r != 0) {
    *why = "remote-address segment reserved word is " + hex2(r) + ", must be 0";
    return false;
  }
  return true;
}
}  // namespace

uint16_t rd_be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
uint32_t rd_be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}
uint64_t rd_be64(const uint8_t* p) { return (uint64_t(rd_be32(p)) << 32) | rd_be32(p + 4); }

uint64_t DecodedWqe::total_len() const {
  if (is_inline) return inline_len;
  uint64_t t = 0;
  for (int i = 0; i < nsge; ++i) t += sge[i].len;
  return t;
}

bool DecodedWqe::is_atomic() const { return opcode == kAtomicCs || opcode == kAtomicFa; }

const char* opcode_name(uint8_t op) {
  switch (op) {
    case kNop: return "NOP";
    case kRdmaWrite: return "RDMA_WRITE";
    case kRdmaWriteImm: return "RDMA_WRITE_IMM";
    case kSend: return "SEND";
    case kRdmaRead: return "RDMA_READ";
    case kAtomicCs: return "ATOMIC_CS";
    case kAtomicFa: return "ATOMIC_FA";
    default: return "UNKNOWN";
  }
}

bool decode_send_wqe(const uint8_t* bb, DecodedWqe* d, std::string* why) {
  *d = DecodedWqe{};
  const uint8_t opmod = bb[kCtrlOpmod];
  d->wqe_index = rd_be16(bb + kCtrlWqeIndex);
  d->opcode = bb[kCtrlOpcode];
  d->qpn = rd_be32(bb + kCtrlQpn) >> 8;
  d->ds = bb[kCtrlDs];
  d->fm_ce_se = bb[kCtrlFmCeSe];
  d->signaled = (d->fm_ce_se & kCeMask) == kCeAlways;
  d->fence = (d->fm_ce_se & kFenceMask) != 0;

  if (opmod != 0) return *why = "opmod " + hex2(opmod) + " is not 0", false;
  if (bb[kCtrlSignature] != 0)
    return *why = "signature byte " + hex2(bb[kCtrlSignature]) + " is not 0 (WQE signatures are off)", false;
  if (bb[kCtrlDci] != 0 || bb[kCtrlDci + 1] != 0)
    return *why = "dci stream channel id " + hex2(rd_be16(bb + kCtrlDci)) + " is not 0 on an RC QP", false;
  if (rd_be32(bb + kCtrlImm) != 0)
    return *why = "immediate field " + hex2(rd_be32(bb + kCtrlImm)) + " is not 0 (no opcode with immediate)", false;
  if (d->fm_ce_se & ~kFmCeSeKnown)
    return *why = "fm_ce_se " + hex2(d->fm_ce_se) + " has unknown bits " + hex2(d->fm_ce_se & ~kFmCeSeKnown), false;
  if ((d->fm_ce_se & kFenceMask) != 0 && (d->fm_ce_se & kFenceMask) != kFenceStrong &&
      (d->fm_ce_se & kFenceMask) != kFenceSmallInit)
    return *why = "fm_ce_se " + hex2(d->fm_ce_se) + " has an unknown fence mode", false;
  if ((d->fm_ce_se & kCeMask) != 0 && (d->fm_ce_se & kCeMask) != kCeAlways)
    return *why = "fm_ce_se " + hex2(d->fm_ce_se) + " asks for an unsupported CQE mode", false;
  if (d->ds == 0 || d->ds > kMaxDsOneBB)
    return *why = "DS count " + std::to_string(d->ds) + " does not fit one 64-byte basic block", false;

  const std::string ds_s = std::to_string(d->ds);
  switch (d->opcode) {
    case kNop:
      if (d->ds != 1) return *why = "NOP with DS " + ds_s + " (expected 1)", false;
      return true;
    case kRdmaWrite:
    case kRdmaRead: {
      const bool read = d->opcode == kRdmaRead;
      if (d->ds < 2) return *why = std::string(opcode_name(d->opcode)) + " with DS 1 (no remote-address segment)", false;
      if (!check_raddr_seg(bb, d, why)) return false;
      if (d->ds == 2) return true;  // zero-length
      const uint32_t bc = rd_be32(bb + kSeg2);
      if (bc & kInlineFlag) {
        if (read) return *why = "RDMA_READ data segment byte count " + std::to_string(bc) +
                                " has bit 31 (the inline flag) set: lengths must be < 2^31", false;
        const uint32_t len = bc & ~kInlineFlag;
        const uint32_t room = (kMaxDsOneBB - 2) * kDsUnit - kInlineHeader;
        if (len > room)
          return *why = "inline length " + std::to_string(len) + " overruns the WQE (at most " + std::to_string(room) +
                        " bytes in one basic block)", false;
        const uint32_t want_ds = 2 + (kInlineHeader + len + kDsUnit - 1) / kDsUnit;
        if (d->ds != want_ds)
          return *why = "inline WQE of " + std::to_string(len) + " bytes with DS " + ds_s + " (expected " +
                        std::to_string(want_ds) + ")", false;
        for (uint32_t i = kSeg2 + kInlineHeader + len; i < d->ds * kDsUnit; ++i)
          if (bb[i] != 0)
            return *why = "inline padding byte " + std::to_string(i) + " is " + hex2(bb[i]) + ", must be 0", false;
        d->is_inline = true;
        d->inline_len = len;
        d->inline_data = bb + kSeg2 + kInlineHeader;
        return true;
      }
      d->nsge = d->ds - 2;
      for (int i = 0; i < d->nsge; ++i)
        if (!read_sge(bb + kSeg2 + kDsUnit * i, &d->sge[i], read ? "RDMA_READ" : "RDMA_WRITE", why)) return false;
      return true;
    }
    case kAtomicCs:
    case kAtomicFa: {
      if (d->ds != 4)
        return *why = "atomic WQE with DS " + ds_s + " (expected 4: ctrl, raddr, atomic, data)", false;
      if (!check_raddr_seg(bb, d, why)) return false;
      d->swap_add = rd_be64(bb + kSeg2 + kAtomicSwapAdd);
      d->compare = rd_be64(bb + kSeg2 + kAtomicCompare);
      if (d->opcode == kAtomicFa && d->compare != 0)
        return *why = "ATOMIC_FA compare field is not 0", false;
      d->nsge = 1;
      return read_sge(bb + kSeg3, &d->sge[0], "atomic", why);
    }
    default:
      return *why = "opcode " + hex2(d->opcode) + " (" + opcode_name(d->opcode) + ") is not supported by emu", false;
  }
}
}  // namespace kinet::emu
