#include "providers/emu/decode.hpp"

#include <cstdio>

namespace kinet::emu {
namespace {
// PRM byte offsets inside a send WQE basic block.
constexpr int kCtrlOpcode = 3, kCtrlIdx = 1, kCtrlOpmod = 0, kCtrlQpn = 4, kCtrlDs = 7, kCtrlFlags = 11;
constexpr int kRaddr = 16, kRkey = 24;
constexpr int kSeg2 = 32, kSeg3 = 48;
constexpr uint8_t kCqUpdateBits = 0x0c;  // fm_ce_se bits 3:2: "CQE on every WQE" when == 2
constexpr uint32_t kInlineBit = 0x80000000u;

void read_sge(const uint8_t* p, Sge* s) {
  s->len = rd_be32(p);
  s->lkey = rd_be32(p + 4);
  s->addr = rd_be64(p + 8);
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

const char* opcode_name(uint8_t op) {
  switch (op) {
    case 0x00: return "NOP";
    case 0x08: return "RDMA_WRITE";
    case 0x09: return "RDMA_WRITE_IMM";
    case 0x0a: return "SEND";
    case 0x10: return "RDMA_READ";
    case 0x11: return "ATOMIC_CS";
    case 0x12: return "ATOMIC_FA";
    default: return "UNKNOWN";
  }
}

bool decode_send_wqe(const uint8_t* bb, DecodedWqe* d, std::string* why) {
  *d = DecodedWqe{};
  d->opmod = bb[kCtrlOpmod];
  d->wqe_index = rd_be16(bb + kCtrlIdx);
  d->opcode = bb[kCtrlOpcode];
  d->qpn = rd_be32(bb + kCtrlQpn) >> 8;
  d->ds = bb[kCtrlDs];
  d->fm_ce_se = bb[kCtrlFlags];
  d->signaled = ((d->fm_ce_se & kCqUpdateBits) >> 2) == 2;
  if (d->ds == 0 || d->ds > 4) {
    *why = "DS count " + std::to_string(d->ds) + " does not fit one 64-byte basic block";
    return false;
  }
  switch (d->opcode) {
    case 0x00:  // NOP
      return true;
    case 0x08:    // RDMA_WRITE
    case 0x10: {  // RDMA_READ
      if (d->ds < 2) {
        *why = "RDMA WQE without a remote-address segment";
        return false;
      }
      d->raddr = rd_be64(bb + kRaddr);
      d->rkey = rd_be32(bb + kRkey);
      if (d->ds == 2) return true;  // zero-length
      const uint32_t bc = rd_be32(bb + kSeg2);
      if (bc & kInlineBit) {
        if (d->opcode != 0x08) {
          *why = "inline data on an RDMA_READ";
          return false;
        }
        d->is_inline = true;
        d->inline_len = bc & 0x3ffu;
        const uint32_t room = (d->ds - 2) * 16 - 4;
        if (d->inline_len > room) {
          *why = "inline length " + std::to_string(d->inline_len) + " overruns the WQE (" + std::to_string(room) + " bytes)";
          return false;
        }
        d->inline_data = bb + kSeg2 + 4;
        return true;
      }
      d->nsge = d->ds - 2;
      for (int i = 0; i < d->nsge; ++i) read_sge(bb + kSeg2 + 16 * i, &d->sge[i]);
      return true;
    }
    case 0x11:    // ATOMIC_CS
    case 0x12: {  // ATOMIC_FA
      if (d->ds != 4) {
        *why = "atomic WQE with DS " + std::to_string(d->ds) + " (expected 4: ctrl, raddr, atomic, data)";
        return false;
      }
      d->raddr = rd_be64(bb + kRaddr);
      d->rkey = rd_be32(bb + kRkey);
      d->swap_add = rd_be64(bb + kSeg2);
      d->compare = rd_be64(bb + kSeg2 + 8);
      d->nsge = 1;
      read_sge(bb + kSeg3, &d->sge[0]);
      return true;
    }
    default:
      char buf[64];
      std::snprintf(buf, sizeof buf, "opcode 0x%02x is not supported by emu", d->opcode);
      *why = buf;
      return false;
  }
}
}  // namespace kinet::emu
