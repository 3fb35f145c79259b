// kinet emu — decoder of mlx5 send WQEs. Written from the PRM's byte layout
// (providers/emu/prm.hpp) independently of the encoder: it reads bytes at
// offsets and shares no struct or constant with include/kinet/mlx5, so a
// layout error cannot hide on both sides.
#pragma once
#include <cstdint>
#include <string>

namespace kinet::emu {

struct Sge {
  uint64_t addr;
  uint32_t lkey;
  uint32_t len;
};

struct DecodedWqe {
  uint8_t opcode = 0;
  uint16_t wqe_index = 0;
  uint32_t qpn = 0;
  uint8_t ds = 0;          // WQE size in 16-byte units
  uint8_t fm_ce_se = 0;
  bool signaled = false;   // CQE requested ("CQE always")
  bool fence = false;      // fence mode set: wait for earlier reads/atomics
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;   // atomics
  uint64_t compare = 0;
  bool is_inline = false;
  uint32_t inline_len = 0;
  const uint8_t* inline_data = nullptr;  // points into the decoded buffer
  int nsge = 0;
  Sge sge[2];
  uint64_t total_len() const;
  bool is_atomic() const;
};

// Byte readers of big-endian fields.
uint16_t rd_be16(const uint8_t* p);
uint32_t rd_be32(const uint8_t* p);
uint64_t rd_be64(const uint8_t* p);

// Decodes and validates the 64-byte basic block `bb`. The opcode, index, QPN,
// DS and fm_ce_se are filled in even when the WQE is malformed (for the error
// CQE). Returns false with one exact reason for the first malformed field:
// opmod, signature, dci, immediate or raddr-reserved bytes not zero; unknown
// fm_ce_se bits; unknown opcode; DS inconsistent with the opcode; an inline
// length beyond the WQE or padding not zero; a pointer byte count with bit 31
// set. Checks that need the QP (index vs slot, QPN, max_msg) are the caller's.
bool decode_send_wqe(const uint8_t* bb, DecodedWqe* out, std::string* why);

const char* opcode_name(uint8_t opcode);

}  // namespace kinet::emu
