// kinet emu — decoder of mlx5 send WQEs. Written from the PRM's byte layout
// independently of the encoder (it reads bytes at offsets, and does not use
// include/kinet/mlx5's structs), so a layout error cannot hide on both sides.
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
  uint8_t opmod = 0;
  uint16_t wqe_index = 0;
  uint32_t qpn = 0;
  uint8_t ds = 0;          // WQE size in 16-byte units
  uint8_t fm_ce_se = 0;
  bool signaled = false;   // CQ_UPDATE requested
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;   // atomics
  uint64_t compare = 0;
  bool is_inline = false;
  uint32_t inline_len = 0;
  const uint8_t* inline_data = nullptr;  // points into the decoded buffer
  int nsge = 0;
  Sge sge[3];
  uint64_t total_len() const;
};

// Byte readers of big-endian fields.
uint16_t rd_be16(const uint8_t* p);
uint32_t rd_be32(const uint8_t* p);
uint64_t rd_be64(const uint8_t* p);

// Decodes the 64-byte basic block `bb`. Returns false with a reason when the
// WQE is malformed (unknown opcode, DS count inconsistent with the opcode, an
// inline length that overruns the WQE).
bool decode_send_wqe(const uint8_t* bb, DecodedWqe* out, std::string* why);

const char* opcode_name(uint8_t opcode);

}  // namespace kinet::emu
