// kinet — pure builders of mlx5 PRM command mailboxes and parsers of their
// replies. No rdma-core call and no state: bytes in, bytes out, so CI checks
// every field against the software NIC's independent decoder
// (src/providers/emu/devx/devx_decode.hpp). The issuing layer passes the
// filled `in` and an `out` of the returned size to mlx5dv_devx_obj_*().
//
// Mailbox sizes are the PRM's *_in / *_out sizes without pas[] entries: kinet
// puts every ring in a UMEM, so no command carries a page list.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "providers/mlx5/commands/command_types.hpp"

namespace kinet::mlx5::cmd {

inline constexpr size_t kQueryHcaCapInBytes = 16;
inline constexpr size_t kQueryHcaCapOutBytes = 16 + 4096;  // header + capability union
inline constexpr size_t kCreateCqInBytes = 272;
inline constexpr size_t kCreateCqOutBytes = 16;
inline constexpr size_t kCreateQpInBytes = 272;
inline constexpr size_t kCreateQpOutBytes = 16;
inline constexpr size_t kModifyQpInBytes = 272;   // RST2INIT, INIT2RTR, RTR2RTS
inline constexpr size_t kModifyQpOutBytes = 16;
inline constexpr size_t kQpRefInBytes = 16;       // 2ERR, 2RST, DESTROY_QP, QUERY_QP
inline constexpr size_t kQpRefOutBytes = 16;      // 2ERR, 2RST, DESTROY_QP
inline constexpr size_t kQueryQpOutBytes = 272;
inline constexpr size_t kDestroyCqInBytes = 16;
inline constexpr size_t kDestroyCqOutBytes = 16;

// Every build_* requires in.size() to be exactly the command's *_in size,
// zero-fills `in`, writes opcode, op_mod and the parameters, and returns the
// size of the *_out mailbox to issue it with. A value wider than its field, or
// a wrong buffer size, throws Error(InvalidArgument) naming the command and
// the field; `in` is then unspecified.
size_t build_query_hca_cap(const QueryHcaCap& p, std::span<uint8_t> in);
size_t build_create_cq(const CreateCq& p, std::span<uint8_t> in);
size_t build_destroy_cq(const DestroyCq& p, std::span<uint8_t> in);
size_t build_create_qp(const CreateQp& p, std::span<uint8_t> in);
size_t build_rst2init_qp(const Rst2InitQp& p, std::span<uint8_t> in);
size_t build_init2rtr_qp(const Init2RtrQp& p, std::span<uint8_t> in);
size_t build_rtr2rts_qp(const Rtr2RtsQp& p, std::span<uint8_t> in);
size_t build_2err_qp(const QpRef& p, std::span<uint8_t> in);
size_t build_2rst_qp(const QpRef& p, std::span<uint8_t> in);
size_t build_destroy_qp(const QpRef& p, std::span<uint8_t> in);
// QUERY_QP has no uid: p.uid must be 0.
size_t build_query_qp(const QpRef& p, std::span<uint8_t> in);

// Reply parsers. `out` must hold at least the command's *_out size (else
// Error(InvalidArgument)). They read fields only: the caller checks
// parse_out_header(out).status == 0 first.
OutHeader parse_out_header(std::span<const uint8_t> out);
uint32_t parse_create_cq_out(std::span<const uint8_t> out);  // the cqn
uint32_t parse_create_qp_out(std::span<const uint8_t> out);  // the qpn
HcaCaps parse_query_hca_cap_general(std::span<const uint8_t> out);
AtomicCaps parse_query_hca_cap_atomic(std::span<const uint8_t> out);
QpQuery parse_query_qp_out(std::span<const uint8_t> out);
}  // namespace kinet::mlx5::cmd
