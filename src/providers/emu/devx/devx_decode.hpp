// kinet — the software NIC's reader of mlx5 DevX command mailboxes and writer
// of their replies.
//
// Written apart from the provider's builders (src/providers/mlx5/commands):
// here every field is a (bit offset from the most significant bit of byte 0 of
// the mailbox, width) pair in one table per command, read and written bit by
// bit; the builders use dword indices and shifts from the least significant
// bit. They share only the plain parameter structs (command_types.hpp), so a
// wrong offset on either side shows up as a mismatch or a rejected mailbox in
// tests/unit/devx_commands_test.cpp.
//
// A decode rejects a mailbox the way the device does, with a PRM status and a
// syndrome, never by throwing: wrong input size (BadInputLen), too small an
// output (BadOutputLen), another opcode (BadOp), op_mod not defined for the
// command, a set bit outside every field the software NIC knows (reserved, or
// a feature it does not implement), or a constant the command must carry
// (st = RC, pm_state = migrated) (BadParam). For BadParam the syndrome is the
// bit offset of the offending field or bit (MSB-first from byte 0), so the
// failure names where the mailbox went wrong.
//
// check_supported() then says whether the software NIC can run a well-formed
// command (UMEM-backed rings, 64-byte CQEs, no receive queue, ...).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "providers/mlx5/commands/command_types.hpp"

namespace kinet::emu::devx {
namespace cmd = ::kinet::mlx5::cmd;

// Command status values of the PRM (the *_out mailbox's status byte).
enum class PrmStatus : uint8_t {
  Ok = 0x00,
  BadOp = 0x02,
  BadParam = 0x03,
  BadResource = 0x05,   // an object the command names does not exist (devx_nic.cpp)
  ResourceBusy = 0x06,  // ... or is bound to another object
  NoResources = 0x0f,   // every QP / CQ number is in use
  BadQpState = 0x10,    // a transition from a state it does not start from
  BadInputLen = 0x50,
  BadOutputLen = 0x51,
};

struct Verdict {
  PrmStatus status = PrmStatus::Ok;
  uint32_t syndrome = 0;
  std::string why;  // e.g. "CREATE_QP: bit 0x3a5 (dword 29) is reserved or unsupported"
  bool ok() const { return status == PrmStatus::Ok; }
};

// The opcode of a mailbox (its first 16 bits); 0 when in holds under 2 bytes.
uint16_t opcode_of(std::span<const uint8_t> in);

// Decoders: validate `in` (and that an output of out_len bytes can hold the
// reply) and fill *p. On a rejected mailbox *p is unspecified.
Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::QueryHcaCap* p);
Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::CreateCq* p);
Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::DestroyCq* p);
Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::CreateQp* p);
Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::Rst2InitQp* p);
Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::Init2RtrQp* p);
Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::Rtr2RtsQp* p);
// op is one of DestroyQp, ToErrQp, ToRstQp, QueryQp (QUERY_QP has no uid).
Verdict decode_qp_ref(cmd::Op op, std::span<const uint8_t> in, size_t out_len, cmd::QpRef* p);

// What the software NIC can execute among well-formed commands (BadParam with
// the field's offset as syndrome otherwise).
Verdict check_supported(const cmd::QueryHcaCap& p);
Verdict check_supported(const cmd::CreateCq& p);
Verdict check_supported(const cmd::CreateQp& p);
Verdict check_supported(const cmd::Rst2InitQp& p);
Verdict check_supported(const cmd::Init2RtrQp& p);

// Reply writers. Each zero-fills `out` (which must hold the command's *_out
// size, else Error(InvalidArgument)) and writes status 0 and the payload; a
// value wider than its field throws Error(InvalidArgument).
void encode_failure(std::span<uint8_t> out, const Verdict& v);  // status + syndrome only
void encode_ok(std::span<uint8_t> out);                         // status 0, no payload
void encode_created(std::span<uint8_t> out, uint32_t id);       // CREATE_CQ / CREATE_QP: cqn / qpn
void encode_hca_caps(std::span<uint8_t> out, const cmd::HcaCaps& c);
void encode_atomic_caps(std::span<uint8_t> out, const cmd::AtomicCaps& c);
void encode_query_qp(std::span<uint8_t> out, const cmd::QpQuery& q);
}  // namespace kinet::emu::devx
