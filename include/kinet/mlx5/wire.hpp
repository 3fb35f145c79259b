// kinet — mlx5 PRM wire formats of a send queue: the segments of a send WQE,
// the 64-byte CQE, the doorbell record and the doorbell word.
//
// Every multi-byte field is big-endian in memory, as the NIC reads it. Fields
// are kept as raw 32/64-bit words holding big-endian bytes; the setters below
// take host-order values and swap once. Constants that never change for a QP
// (QP number, memory keys) are swapped once by the host and handed to the
// device path already big-endian (see kinet::Lkey / kinet::Rkey).
//
// Layouts are checked against rdma-core's <infiniband/mlx5dv.h> in
// tests/unit/wire_layout_test.cpp; the emulator decodes WQEs with its own
// byte-level reader (src/providers/emu/decode.cpp), not with these structs, so
// one layout error cannot hide on both sides.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kinet/device/platform.cuh"

namespace kinet::mlx5 {

inline constexpr uint32_t kSendWqeBB = 64;       // one send WQE basic block
inline constexpr uint32_t kSendWqeDS = 16;       // one data segment unit ("DS")
inline constexpr uint32_t kCqeSize = 64;
inline constexpr uint32_t kInlineSegFlag = 0x80000000u;
// Largest message a ConnectX NIC accepts (HCA capability log_max_msg = 30);
// also the largest byte count of one data segment that kinet writes, which
// keeps every pointer segment's byte count clear of kInlineSegFlag (bit 31).
inline constexpr uint32_t kMaxMsgBytes = 1u << 30;
inline constexpr uint32_t kSendDbrIndex = 1;     // dbrec[1] is the send counter
inline constexpr uint32_t kCqDbrConsumerIndex = 0;  // cq dbrec[0] is the consumer index

// Send WQE opcodes (PRM "Send WQE opcodes").
enum Opcode : uint8_t {
  kOpNop = 0x00,
  kOpRdmaWrite = 0x08,
  kOpRdmaWriteImm = 0x09,
  kOpSend = 0x0a,
  kOpRdmaRead = 0x10,
  kOpAtomicCS = 0x11,
  kOpAtomicFA = 0x12,
};

// ctrl.fm_ce_se bits.
enum CtrlFlags : uint8_t {
  kCtrlSolicited = 1u << 1,
  kCtrlCqUpdate = 2u << 2,  // request a CQE for this WQE
  kCtrlFence = 4u << 5,
  kCtrlSmallFence = 1u << 5,
};

// CQE opcodes (op_own >> 4).
enum CqeOpcode : uint8_t {
  kCqeReq = 0,
  kCqeRespWrImm = 1,
  kCqeRespSend = 2,
  kCqeReqErr = 13,
  kCqeRespErr = 14,
  kCqeInvalid = 15,
};

// Error CQE syndromes (PRM "CQE error syndrome").
enum CqeSyndrome : uint8_t {
  kSynLocalLength = 0x01,
  kSynLocalQpOp = 0x02,
  kSynLocalProt = 0x04,
  kSynWrFlush = 0x05,
  kSynMwBind = 0x06,
  kSynBadResp = 0x10,
  kSynLocalAccess = 0x11,
  kSynRemoteInvalReq = 0x12,
  kSynRemoteAccess = 0x13,
  kSynRemoteOp = 0x14,
  kSynTransportRetryExc = 0x15,
  kSynRnrRetryExc = 0x16,
  kSynRemoteAborted = 0x22,
};

// ---- send WQE segments ----

struct CtrlSeg {  // 16 B, first segment of every send WQE
  uint32_t opmod_idx_opcode;  // BE: opmod<<24 | wqe_index<<8 | opcode
  uint32_t qpn_ds;            // BE: qpn<<8 | ds (WQE size in 16-byte units)
  uint8_t signature;
  uint8_t dci_stream_channel_id[2];
  uint8_t fm_ce_se;           // fence mode, completion event, solicited event
  uint32_t imm;               // BE immediate / invalidation key
};
static_assert(sizeof(CtrlSeg) == 16);
static_assert(offsetof(CtrlSeg, qpn_ds) == 4);
static_assert(offsetof(CtrlSeg, fm_ce_se) == 11);
static_assert(offsetof(CtrlSeg, imm) == 12);

struct RaddrSeg {  // 16 B, remote address of RDMA and atomic operations
  uint64_t raddr;  // BE
  uint32_t rkey;   // BE
  uint32_t reserved;
};
static_assert(sizeof(RaddrSeg) == 16);

struct DataSeg {  // 16 B, one scatter/gather entry (pointer)
  uint32_t byte_count;  // BE
  uint32_t lkey;        // BE
  uint64_t addr;        // BE
};
static_assert(sizeof(DataSeg) == 16);
static_assert(offsetof(DataSeg, lkey) == 4);
static_assert(offsetof(DataSeg, addr) == 8);

struct InlineSeg {      // 4 B header followed by the bytes themselves
  uint32_t byte_count;  // BE: kInlineSegFlag | length
};
static_assert(sizeof(InlineSeg) == 4);

struct AtomicSeg {   // 16 B, operands of compare-and-swap / fetch-add
  uint64_t swap_add; // BE: swap value (CS) or addend (FA)
  uint64_t compare;  // BE: compare value (CS)
};
static_assert(sizeof(AtomicSeg) == 16);

// Inline payload that fits one 64-byte basic block: ctrl + raddr + 4-byte header.
inline constexpr uint32_t kMaxInlineOneBB = kSendWqeBB - sizeof(CtrlSeg) - sizeof(RaddrSeg) - sizeof(InlineSeg);
static_assert(kMaxInlineOneBB == 28);

// ---- completion queue entry (64 B) ----
struct Cqe64 {
  uint8_t rsvd0[32];
  uint32_t srqn_uidx;       // BE
  uint32_t imm_inval_pkey;  // BE
  uint8_t app;
  uint8_t app_op;
  uint16_t app_info;        // BE
  uint32_t byte_cnt;        // BE: bytes transferred (reads/atomics: bytes scattered locally)
  uint64_t timestamp;       // BE
  uint32_t sop_drop_qpn;    // BE: opcode of the send WQE << 24 | qpn
  uint16_t wqe_counter;     // BE: index (mod 2^16) of the WQE this CQE completes
  uint8_t signature;
  uint8_t op_own;           // opcode << 4 | ... | owner bit (bit 0)
};
static_assert(sizeof(Cqe64) == 64);
static_assert(offsetof(Cqe64, byte_cnt) == 44);
static_assert(offsetof(Cqe64, sop_drop_qpn) == 56);
static_assert(offsetof(Cqe64, wqe_counter) == 60);
static_assert(offsetof(Cqe64, op_own) == 63);

// Error CQE view of the same 64 bytes.
struct ErrCqe {
  uint8_t rsvd0[32];
  uint32_t srqn;
  uint8_t rsvd1[18];
  uint8_t vendor_err_synd;
  uint8_t syndrome;
  uint32_t s_wqe_opcode_qpn;  // BE
  uint16_t wqe_counter;       // BE
  uint8_t signature;
  uint8_t op_own;
};
static_assert(sizeof(ErrCqe) == 64);
static_assert(offsetof(ErrCqe, vendor_err_synd) == 54);
static_assert(offsetof(ErrCqe, syndrome) == 55);

KINET_HD constexpr uint8_t cqe_opcode(uint8_t op_own) { return op_own >> 4; }
KINET_HD constexpr uint8_t cqe_owner(uint8_t op_own) { return op_own & 1u; }
// Value of op_own written into every CQE before the NIC owns the ring:
// invalid opcode, owner 1, so the first lap (owner 0) is recognised.
inline constexpr uint8_t kCqeInitOpOwn = (kCqeInvalid << 4) | 1u;

// Software owner parity expected for the CQE at consumer index ci in a ring of
// 2^log_n entries: the NIC flips the owner bit on every lap.
KINET_HD constexpr uint8_t cqe_sw_owner(uint32_t ci, uint32_t log_n) { return (ci >> log_n) & 1u; }

// ---- doorbells ----
// Doorbell record: two BE 32-bit counters; dbrec[kSendDbrIndex] holds the send
// producer index (low 16 bits). The CQ's record holds the consumer index
// (low 24 bits) at [0] and the arm word at [1].
// Doorbell word: 8 bytes laid out as the first 8 bytes of a control segment,
// with the new producer index (low 16 bits) in the WQE-index field and the QP
// number, opcode and DS zero: BE(pi << 8) then BE(qpn << 8). The word names
// the QP and the index up to which WQEs are announced; that index must not run
// ahead of the doorbell record, which the NIC reads to resume after a missed
// doorbell (the software NIC executes only what a doorbell announced and
// reports a word ahead of its record). NVSHMEM's IBGDA path rings with the
// same layout. Built from
// values in registers: the ringer never reads a WQE back from the ring.
KINET_HD uint64_t doorbell_word(uint32_t producer_index, uint32_t qpn_be8) {
  const uint32_t idx_be = kinet::detail::bswap32((producer_index & 0xffffu) << 8);
  return static_cast<uint64_t>(idx_be) | (static_cast<uint64_t>(qpn_be8) << 32);  // little-endian memory order
}

}  // namespace kinet::mlx5
