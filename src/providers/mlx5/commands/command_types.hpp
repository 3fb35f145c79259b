// kinet — parameters of the mlx5 DevX commands the ConnectX provider issues,
// as plain host-order values. No layout here: the builders (builders.hpp)
// place these values into PRM mailboxes, and the software NIC's decoder
// (src/providers/emu/devx) reads them back with its own description of the
// layout, so one offset mistake cannot hide on both sides.
//
// Objects that need no command of ours:
//   PD    ibv_alloc_pd + mlx5dv_init_obj(MLX5DV_OBJ_PD) give the pdn.
//   UMEM  mlx5dv_devx_umem_reg builds CREATE_UMEM in the kernel.
//   UAR   mlx5dv_devx_alloc_uar gives the page id and its mapping.
//
// Every value must fit its PRM field; a builder throws Error(InvalidArgument)
// naming the command and the field otherwise. Widths are noted per field.
#pragma once
#include <array>
#include <cstdint>

namespace kinet::mlx5::cmd {

// PRM command opcodes (the "opcode" field of every *_in mailbox).
enum class Op : uint16_t {
  QueryHcaCap = 0x100,
  CreateCq = 0x400,
  DestroyCq = 0x401,
  CreateQp = 0x500,
  DestroyQp = 0x501,
  Rst2InitQp = 0x502,
  Init2RtrQp = 0x503,
  Rtr2RtsQp = 0x504,
  ToErrQp = 0x507,
  ToRstQp = 0x50a,
  QueryQp = 0x50b,
};
const char* op_name(Op op);

// QP states as QUERY_QP reports them (qpc.state).
enum class QpState : uint8_t { Rst = 0, Init = 1, Rtr = 2, Rts = 3, Sqer = 4, Err = 6 };
// qpc.mtu: 1 = 256 B ... 5 = 4096 B.
enum class Mtu : uint8_t { B256 = 1, B512 = 2, B1024 = 3, B2048 = 4, B4096 = 5 };
// qpc.pm_state value of a QP without path migration.
inline constexpr uint8_t kPmStateMigrated = 3;
// qpc.rq_type of a QP without a receive queue (kinet QPs only send).
inline constexpr uint8_t kRqTypeZeroSize = 3;
// cqc.cqe_sz: 0 = 64-byte CQEs (the only size kinet uses), 1 = 128 bytes.
inline constexpr uint8_t kCqeSize64 = 0;
// qpc.atomic_mode values (4 bits); which ones a device allows is in AtomicCaps.
enum class AtomicMode : uint8_t { None = 0, IbCompatible = 1, Cx = 2, Up8Bytes = 3 };

// QUERY_HCA_CAP's capability groups (op_mod = group << 1 | current).
enum class CapGroup : uint8_t { General = 0, Atomic = 3, Roce = 4 };

struct QueryHcaCap {
  CapGroup group = CapGroup::General;
  bool current = true;  // false: the device's maximum, true: what is enabled now
  bool operator==(const QueryHcaCap&) const = default;
};

// The general device capabilities kinet reads (cmd_hca_cap).
struct HcaCaps {
  uint16_t vhca_id = 0;
  uint8_t log_max_qp_sz = 0;      // 8 bits: log2 of the largest WQE count of a QP
  uint8_t log_max_qp = 0;         // 5 bits
  uint8_t log_max_cq_sz = 0;      // 8 bits
  uint8_t log_max_cq = 0;         // 5 bits
  uint8_t log_max_ra_req_qp = 0;  // 6 bits: outstanding RDMA reads/atomics as requester
  uint8_t log_max_ra_res_qp = 0;  // 6 bits: ... as responder
  bool end_pad = false;
  uint16_t gid_table_size = 0;
  uint16_t pkey_table_size = 0;
  uint8_t port_type = 0;          // 2 bits: 0 = InfiniBand, 1 = Ethernet
  uint8_t num_ports = 0;
  uint8_t log_max_msg = 0;        // 5 bits
  uint8_t cqe_version = 0;        // 4 bits
  bool roce = false;
  bool atomic = false;
  bool cq_oi = false;
  bool umem_uid_0 = false;        // UMEMs may be registered with uid 0
  uint8_t log_pg_sz = 0;
  uint8_t log_max_pd = 0;         // 5 bits
  bool operator==(const HcaCaps&) const = default;
};

// The atomic capabilities (atomic_caps).
struct AtomicCaps {
  uint8_t req_8b_endianness_mode = 0;      // 2 bits: 0 = big endian, 1 = host endian
  bool supported_8b_endianness_mode_1 = false;
  uint16_t atomic_operations = 0;          // bit mask of supported operations
  uint16_t atomic_size_qp = 0;             // bit mask of supported sizes on RC QPs
  bool operator==(const AtomicCaps&) const = default;
};

struct CreateCq {
  uint16_t uid = 0;
  uint8_t log_cq_size = 0;      // 5 bits
  uint32_t uar_page = 0;        // 24 bits
  uint8_t c_eqn = 0;            // 8 bits
  uint8_t cqe_sz = kCqeSize64;  // 3 bits
  bool oi = false;              // overrun ignore
  uint8_t log_page_size = 0;    // 5 bits, in 4 KiB units above 4 KiB
  uint8_t page_offset = 0;      // 6 bits
  bool dbr_umem_valid = false;  // dbr_addr is an offset in UMEM dbr_umem_id
  uint32_t dbr_umem_id = 0;
  uint64_t dbr_addr = 0;
  bool cq_umem_valid = false;   // the ring is at cq_umem_offset in UMEM cq_umem_id
  uint32_t cq_umem_id = 0;
  uint64_t cq_umem_offset = 0;
  bool operator==(const CreateCq&) const = default;
};

struct DestroyCq {
  uint16_t uid = 0;
  uint32_t cqn = 0;  // 24 bits
  bool operator==(const DestroyCq&) const = default;
};

// An RC QP with a send queue and no receive queue (rq_type = zero size).
struct CreateQp {
  uint16_t uid = 0;
  uint8_t pm_state = kPmStateMigrated;  // 2 bits
  uint32_t pd = 0;                      // 24 bits
  uint8_t log_msg_max = 0;              // 5 bits
  uint8_t log_rq_size = 0;              // 4 bits
  uint8_t log_rq_stride = 0;            // 3 bits
  bool no_sq = false;
  uint8_t log_sq_size = 0;              // 4 bits
  uint8_t ts_format = 0;                // 2 bits
  uint32_t uar_page = 0;                // 24 bits
  uint32_t user_index = 0;              // 24 bits
  uint8_t log_page_size = 0;            // 5 bits
  uint32_t cqn_snd = 0;                 // 24 bits
  uint32_t cqn_rcv = 0;                 // 24 bits
  uint8_t rq_type = kRqTypeZeroSize;    // 3 bits
  uint8_t cs_req = 0;                   // CQE scatter of requester: 0 = off
  uint8_t cs_res = 0;                   // ... of responder
  bool dbr_umem_valid = false;
  uint32_t dbr_umem_id = 0;
  uint64_t dbr_addr = 0;
  bool wq_umem_valid = false;
  uint32_t wq_umem_id = 0;
  uint64_t wq_umem_offset = 0;
  bool operator==(const CreateQp&) const = default;
};

// The primary address path of a QP (qpc.primary_address_path).
// InfiniBand: rlid (+ sl). RoCE v2: grh = true, rgid, rmac, src_addr_index
// (the local GID index), hop_limit, udp_sport, tclass / dscp.
struct AddressPath {
  uint16_t pkey_index = 0;
  bool grh = false;
  uint8_t mlid = 0;            // 7 bits
  uint16_t rlid = 0;
  uint8_t ack_timeout = 0;     // 5 bits: 4.096 us * 2^ack_timeout
  uint8_t src_addr_index = 0;
  uint8_t stat_rate = 0;       // 4 bits
  uint8_t hop_limit = 0;
  uint8_t tclass = 0;
  uint32_t flow_label = 0;     // 20 bits
  std::array<uint8_t, 16> rgid{};
  uint8_t dscp = 0;            // 6 bits
  uint16_t udp_sport = 0;
  uint8_t sl = 0;              // 4 bits
  uint8_t vhca_port_num = 0;   // the port, 1-based
  std::array<uint8_t, 6> rmac{};
  bool operator==(const AddressPath&) const = default;
};

struct Rst2InitQp {
  uint16_t uid = 0;
  uint32_t qpn = 0;              // 24 bits
  uint32_t opt_param_mask = 0;
  uint8_t port = 1;              // -> primary_address_path.vhca_port_num
  uint16_t pkey_index = 0;       // -> primary_address_path.pkey_index
  bool rre = false;              // remote read enable
  bool rwe = false;              // remote write enable
  bool rae = false;              // remote atomic enable
  uint8_t atomic_mode = 0;       // 4 bits (AtomicMode)
  bool operator==(const Rst2InitQp&) const = default;
};

struct Init2RtrQp {
  uint16_t uid = 0;
  uint32_t qpn = 0;              // 24 bits
  uint32_t opt_param_mask = 0;
  uint8_t mtu = 0;               // 3 bits (Mtu)
  uint8_t log_msg_max = 0;       // 5 bits
  uint32_t remote_qpn = 0;       // 24 bits
  uint32_t next_rcv_psn = 0;     // 24 bits
  uint8_t min_rnr_nak = 0;       // 5 bits
  uint8_t log_rra_max = 0;       // 3 bits
  AddressPath path;
  bool operator==(const Init2RtrQp&) const = default;
};

struct Rtr2RtsQp {
  uint16_t uid = 0;
  uint32_t qpn = 0;              // 24 bits
  uint32_t opt_param_mask = 0;
  uint32_t next_send_psn = 0;    // 24 bits
  uint8_t log_sra_max = 0;       // 3 bits
  uint8_t retry_count = 0;       // 3 bits
  uint8_t rnr_retry = 0;         // 3 bits (7 = infinite)
  uint8_t ack_timeout = 0;       // 5 bits -> primary_address_path.ack_timeout
  bool operator==(const Rtr2RtsQp&) const = default;
};

// 2ERR_QP, 2RST_QP, DESTROY_QP and QUERY_QP name only the QP.
struct QpRef {
  uint16_t uid = 0;  // QUERY_QP has no uid field: must be 0 there
  uint32_t qpn = 0;  // 24 bits
  bool operator==(const QpRef&) const = default;
};

// What QUERY_QP returns that kinet checks (a subset of qpc).
struct QpQuery {
  uint8_t state = 0;             // 4 bits (QpState)
  uint32_t pd = 0;
  uint8_t mtu = 0;
  uint8_t log_sq_size = 0;
  uint32_t remote_qpn = 0;
  uint32_t next_send_psn = 0;
  uint32_t next_rcv_psn = 0;
  uint32_t cqn_snd = 0;
  uint8_t retry_count = 0;
  uint8_t rnr_retry = 0;
  bool operator==(const QpQuery&) const = default;
};

// Status and syndrome of every *_out mailbox (status 0 = success).
struct OutHeader {
  uint8_t status = 0;
  uint32_t syndrome = 0;
  bool operator==(const OutHeader&) const = default;
};
}  // namespace kinet::mlx5::cmd
