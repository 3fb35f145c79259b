// kinet/mlx5/wire.hpp against rdma-core's <infiniband/mlx5dv.h>: every struct's
// size, alignment and field offsets and every constant (at compile time: a
// mismatch fails the build, so none of it is repeated at run time), the
// accessors and the bytes of the WQEs the device verbs build
// (kinet::dev::prepare_*) against the bytes rdma-core's own setters produce.
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <array>
#include <cstring>
#include <vector>

#include "kinet/device/qp.cuh"
#include "kinet/kinet.hpp"
#include "kinet/mlx5/syndrome.hpp"
#include "kinet/mlx5/wire.hpp"
#include "test_util.hpp"

namespace m = kinet::mlx5;

// ---------------------------------------------------------------------------
// Compile-time checks: a layout error fails the build.
#define KINET_SAME_FIELD(Ours, of, Theirs, tf)                                                      \
  static_assert(offsetof(Ours, of) == offsetof(Theirs, tf), #Ours "::" #of " offset differs"); \
  static_assert(sizeof(Ours::of) == sizeof(Theirs::tf), #Ours "::" #of " size differs")

static_assert(sizeof(m::CtrlSeg) == sizeof(mlx5_wqe_ctrl_seg));
static_assert(alignof(m::CtrlSeg) == alignof(mlx5_wqe_ctrl_seg));
KINET_SAME_FIELD(m::CtrlSeg, opmod_idx_opcode, mlx5_wqe_ctrl_seg, opmod_idx_opcode);
KINET_SAME_FIELD(m::CtrlSeg, qpn_ds, mlx5_wqe_ctrl_seg, qpn_ds);
KINET_SAME_FIELD(m::CtrlSeg, signature, mlx5_wqe_ctrl_seg, signature);
KINET_SAME_FIELD(m::CtrlSeg, dci_stream_channel_id, mlx5_wqe_ctrl_seg, dci_stream_channel_id);
KINET_SAME_FIELD(m::CtrlSeg, fm_ce_se, mlx5_wqe_ctrl_seg, fm_ce_se);
KINET_SAME_FIELD(m::CtrlSeg, imm, mlx5_wqe_ctrl_seg, imm);

static_assert(sizeof(m::RaddrSeg) == sizeof(mlx5_wqe_raddr_seg));
static_assert(alignof(m::RaddrSeg) == alignof(mlx5_wqe_raddr_seg));
KINET_SAME_FIELD(m::RaddrSeg, raddr, mlx5_wqe_raddr_seg, raddr);
KINET_SAME_FIELD(m::RaddrSeg, rkey, mlx5_wqe_raddr_seg, rkey);
KINET_SAME_FIELD(m::RaddrSeg, reserved, mlx5_wqe_raddr_seg, reserved);

static_assert(sizeof(m::DataSeg) == sizeof(mlx5_wqe_data_seg));
static_assert(alignof(m::DataSeg) == alignof(mlx5_wqe_data_seg));
KINET_SAME_FIELD(m::DataSeg, byte_count, mlx5_wqe_data_seg, byte_count);
KINET_SAME_FIELD(m::DataSeg, lkey, mlx5_wqe_data_seg, lkey);
KINET_SAME_FIELD(m::DataSeg, addr, mlx5_wqe_data_seg, addr);

static_assert(sizeof(m::InlineSeg) == sizeof(mlx5_wqe_inl_data_seg));
KINET_SAME_FIELD(m::InlineSeg, byte_count, mlx5_wqe_inl_data_seg, byte_count);

static_assert(sizeof(m::AtomicSeg) == sizeof(mlx5_wqe_atomic_seg));
static_assert(alignof(m::AtomicSeg) == alignof(mlx5_wqe_atomic_seg));
KINET_SAME_FIELD(m::AtomicSeg, swap_add, mlx5_wqe_atomic_seg, swap_add);
KINET_SAME_FIELD(m::AtomicSeg, compare, mlx5_wqe_atomic_seg, compare);

static_assert(sizeof(m::Cqe64) == sizeof(mlx5_cqe64));
KINET_SAME_FIELD(m::Cqe64, srqn_uidx, mlx5_cqe64, srqn_uidx);
KINET_SAME_FIELD(m::Cqe64, imm_inval_pkey, mlx5_cqe64, imm_inval_pkey);
KINET_SAME_FIELD(m::Cqe64, app, mlx5_cqe64, app);
KINET_SAME_FIELD(m::Cqe64, app_op, mlx5_cqe64, app_op);
KINET_SAME_FIELD(m::Cqe64, app_info, mlx5_cqe64, app_info);
KINET_SAME_FIELD(m::Cqe64, byte_cnt, mlx5_cqe64, byte_cnt);
KINET_SAME_FIELD(m::Cqe64, timestamp, mlx5_cqe64, timestamp);
KINET_SAME_FIELD(m::Cqe64, sop_drop_qpn, mlx5_cqe64, sop_drop_qpn);
KINET_SAME_FIELD(m::Cqe64, wqe_counter, mlx5_cqe64, wqe_counter);
KINET_SAME_FIELD(m::Cqe64, signature, mlx5_cqe64, signature);
KINET_SAME_FIELD(m::Cqe64, op_own, mlx5_cqe64, op_own);

static_assert(sizeof(m::ErrCqe) == sizeof(mlx5_err_cqe));
KINET_SAME_FIELD(m::ErrCqe, rsvd0, mlx5_err_cqe, rsvd0);
KINET_SAME_FIELD(m::ErrCqe, srqn, mlx5_err_cqe, srqn);
KINET_SAME_FIELD(m::ErrCqe, rsvd1, mlx5_err_cqe, rsvd1);
KINET_SAME_FIELD(m::ErrCqe, vendor_err_synd, mlx5_err_cqe, vendor_err_synd);
KINET_SAME_FIELD(m::ErrCqe, syndrome, mlx5_err_cqe, syndrome);
KINET_SAME_FIELD(m::ErrCqe, s_wqe_opcode_qpn, mlx5_err_cqe, s_wqe_opcode_qpn);
KINET_SAME_FIELD(m::ErrCqe, wqe_counter, mlx5_err_cqe, wqe_counter);
KINET_SAME_FIELD(m::ErrCqe, signature, mlx5_err_cqe, signature);
KINET_SAME_FIELD(m::ErrCqe, op_own, mlx5_err_cqe, op_own);

// The error view and the normal view of a CQE agree on the tail.
static_assert(offsetof(m::ErrCqe, wqe_counter) == offsetof(m::Cqe64, wqe_counter));
static_assert(offsetof(m::ErrCqe, op_own) == offsetof(m::Cqe64, op_own));

// Constants: every pair (ours, rdma-core's).
#define KINET_WIRE_CONSTANTS(X) \
  X(m::kSendWqeBB, MLX5_SEND_WQE_BB) \
  X(m::kInlineSegFlag, MLX5_INLINE_SEG) \
  X(m::kSendDbrIndex, MLX5_SND_DBR) \
  X(m::kOpNop, MLX5_OPCODE_NOP) \
  X(m::kOpRdmaWrite, MLX5_OPCODE_RDMA_WRITE) \
  X(m::kOpRdmaWriteImm, MLX5_OPCODE_RDMA_WRITE_IMM) \
  X(m::kOpSend, MLX5_OPCODE_SEND) \
  X(m::kOpRdmaRead, MLX5_OPCODE_RDMA_READ) \
  X(m::kOpAtomicCS, MLX5_OPCODE_ATOMIC_CS) \
  X(m::kOpAtomicFA, MLX5_OPCODE_ATOMIC_FA) \
  X(m::kCtrlSolicited, MLX5_WQE_CTRL_SOLICITED) \
  X(m::kCtrlCqUpdate, MLX5_WQE_CTRL_CQ_UPDATE) \
  X(m::kCtrlFence, MLX5_WQE_CTRL_FENCE) \
  X(m::kCtrlSmallFence, MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE) \
  X(m::kCqeReq, MLX5_CQE_REQ) \
  X(m::kCqeRespWrImm, MLX5_CQE_RESP_WR_IMM) \
  X(m::kCqeRespSend, MLX5_CQE_RESP_SEND) \
  X(m::kCqeReqErr, MLX5_CQE_REQ_ERR) \
  X(m::kCqeRespErr, MLX5_CQE_RESP_ERR) \
  X(m::kCqeInvalid, MLX5_CQE_INVALID) \
  X(m::kSynLocalLength, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR) \
  X(m::kSynLocalQpOp, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR) \
  X(m::kSynLocalProt, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR) \
  X(m::kSynWrFlush, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) \
  X(m::kSynMwBind, MLX5_CQE_SYNDROME_MW_BIND_ERR) \
  X(m::kSynBadResp, MLX5_CQE_SYNDROME_BAD_RESP_ERR) \
  X(m::kSynLocalAccess, MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR) \
  X(m::kSynRemoteInvalReq, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR) \
  X(m::kSynRemoteAccess, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR) \
  X(m::kSynRemoteOp, MLX5_CQE_SYNDROME_REMOTE_OP_ERR) \
  X(m::kSynTransportRetryExc, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR) \
  X(m::kSynRnrRetryExc, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR) \
  X(m::kSynRemoteAborted, MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR)

#define KINET_STATIC_SAME(a, b) static_assert(static_cast<int64_t>(a) == static_cast<int64_t>(b), #a " != " #b);
KINET_WIRE_CONSTANTS(KINET_STATIC_SAME)
static_assert(m::kSendWqeBB == 1u << MLX5_SEND_WQE_SHIFT);
static_assert(m::kSendWqeDS == sizeof(mlx5_wqe_data_seg));
static_assert(m::kCqeSize == sizeof(mlx5_cqe64));
static_assert(m::kCqDbrConsumerIndex == 0);  // PRM: CQ doorbell record word 0 = consumer index (MLX5_CQ_SET_CI)

static_assert(m::kMaxInlineOneBB ==
              MLX5_SEND_WQE_BB - sizeof(mlx5_wqe_ctrl_seg) - sizeof(mlx5_wqe_raddr_seg) - sizeof(mlx5_wqe_inl_data_seg));

// kinet::Access promises ibv_access_flags values (kinet.hpp).
static_assert(uint32_t{kinet::kLocalWrite} == uint32_t{IBV_ACCESS_LOCAL_WRITE});
static_assert(uint32_t{kinet::kRemoteWrite} == uint32_t{IBV_ACCESS_REMOTE_WRITE});
static_assert(uint32_t{kinet::kRemoteRead} == uint32_t{IBV_ACCESS_REMOTE_READ});
static_assert(uint32_t{kinet::kRemoteAtomic} == uint32_t{IBV_ACCESS_REMOTE_ATOMIC});
static_assert(kinet::kAccessAll ==
              (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
// The largest data-segment byte count kinet writes stays clear of the inline flag.
static_assert(m::kMaxMsgBytes < MLX5_INLINE_SEG);

// ---------------------------------------------------------------------------
namespace {

TEST(WireLayout, CqeAccessorsMatchRdmaCore) {
  for (int v = 0; v < 256; ++v) {
    mlx5_cqe64 c{};
    c.op_own = static_cast<uint8_t>(v);
    EXPECT_EQ(m::cqe_opcode(c.op_own), mlx5dv_get_cqe_opcode(&c)) << v;
    EXPECT_EQ(m::cqe_owner(c.op_own), mlx5dv_get_cqe_owner(&c)) << v;
  }
  EXPECT_EQ(m::cqe_opcode(m::kCqeInitOpOwn), MLX5_CQE_INVALID);
  // Owner parity flips once per lap of the CQ.
  EXPECT_EQ(m::cqe_sw_owner(0, 4), 0);
  EXPECT_EQ(m::cqe_sw_owner(15, 4), 0);
  EXPECT_EQ(m::cqe_sw_owner(16, 4), 1);
  EXPECT_EQ(m::cqe_sw_owner(31, 4), 1);
  EXPECT_EQ(m::cqe_sw_owner(32, 4), 0);
}

TEST(WireLayout, StatusFromEverySyndrome) {
  using kinet::Status;
  EXPECT_EQ(m::status_from_syndrome(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR), Status::LocalLength);
  EXPECT_EQ(m::status_from_syndrome(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR), Status::LocalQpOp);
  EXPECT_EQ(m::status_from_syndrome(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR), Status::LocalProtection);
  EXPECT_EQ(m::status_from_syndrome(MLX5_CQE_SYNDROME_WR_FLUSH_ERR), Status::WrFlushed);
  EXPECT_EQ(m::status_from_syndrome(MLX5_CQE_SYNDROME_MW_BIND_ERR), Status::MwBind);
  EXPECT_EQ(m::status_from_syndrome(MLX5_CQE_SYNDROME_BAD_RESP_ERR), Status::BadResponse);
  EXPECT_EQ(m::status_from_syndrome(MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR), Status::LocalAccess);
  EXPECT_EQ(m::status_from_syndrome(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR), Status::RemoteInvalidRequest);
  EXPECT_EQ(m::status_from_syndrome(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR), Status::RemoteAccess);
  EXPECT_EQ(m::status_from_syndrome(MLX5_CQE_SYNDROME_REMOTE_OP_ERR), Status::RemoteOperation);
  EXPECT_EQ(m::status_from_syndrome(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR), Status::TransportRetryExceeded);
  EXPECT_EQ(m::status_from_syndrome(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR), Status::RnrRetryExceeded);
  EXPECT_EQ(m::status_from_syndrome(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR), Status::RemoteAborted);
  EXPECT_EQ(m::status_from_syndrome(0x00), Status::UnknownCqeError);
  EXPECT_EQ(m::status_from_syndrome(0xff), Status::UnknownCqeError);
  // Every syndrome, known or not, is an error with a description of its own.
  for (int s = 0; s < 256; ++s) {
    const Status st = m::status_from_syndrome(static_cast<uint8_t>(s));
    EXPECT_TRUE(kinet::is_error(st)) << s;
    EXPECT_STRNE(kinet::status_string(st), "unknown status") << s;
  }
  EXPECT_FALSE(kinet::is_error(Status::Ok));
  EXPECT_FALSE(kinet::is_error(Status::Pending));
  EXPECT_FALSE(kinet::is_error(Status::NoSpace));
  EXPECT_TRUE(kinet::is_error(Status::TimeoutCompletion));
}

TEST(WireLayout, DoorbellWordIsAControlSegmentHead) {
  // In memory: opmod_idx_opcode = BE(pi << 8), qpn_ds = BE(qpn << 8), as a
  // control segment built by rdma-core's setter with opcode 0 and DS 0.
  const uint32_t qpn = 0xabcdef;
  const uint64_t word = m::doorbell_word(0x51234, kinet::detail::bswap32_constexpr(qpn << 8));
  mlx5_wqe_ctrl_seg ctrl{};
  mlx5dv_set_ctrl_seg(&ctrl, 0x1234, 0, 0, qpn, 0, 0, 0, 0);
  uint64_t want;
  std::memcpy(&want, &ctrl, 8);
  EXPECT_EQ(word, want);
}

// ---------------------------------------------------------------------------
// Encoding: prepare_* into a local ring vs rdma-core's setters.

struct LocalRing {
  alignas(64) uint8_t sq[16 * 64];
  uint32_t dbrec[2]{};
  uint64_t db = 0;
  kinet::dev::SqState state{};
  alignas(64) m::Cqe64 cqes[16];
  uint32_t cq_dbrec[2]{};
  kinet::dev::QpHandle h{};

  explicit LocalRing(uint32_t qpn) {
    std::memset(sq, 0xee, sizeof sq);  // so stale bytes would show
    std::memset(cqes, 0, sizeof cqes);
    h.sq = sq;
    h.dbrec = dbrec;
    h.db = &db;
    h.state = &state;
    h.cq = kinet::dev::CqHandle{cqes, cq_dbrec, 4, 7};
    h.timeout_ns = 1000000;
    h.log_n = 4;
    h.qpn = qpn;
    h.qpn_be8 = htobe32(qpn << 8);
    h.max_msg = 1u << 30;
    h.signal_period = 8;
  }
  const uint8_t* slot(uint64_t idx) const { return sq + (idx & 15) * 64; }
};

struct Expected {
  alignas(64) uint8_t b[64]{};
  mlx5_wqe_ctrl_seg* ctrl() { return reinterpret_cast<mlx5_wqe_ctrl_seg*>(b); }
  mlx5_wqe_raddr_seg* raddr() { return reinterpret_cast<mlx5_wqe_raddr_seg*>(b + 16); }
  void set_raddr(uint64_t addr, uint32_t rkey) {
    raddr()->raddr = htobe64(addr);
    raddr()->rkey = htobe32(rkey);
    raddr()->reserved = 0;
  }
};

::testing::AssertionResult same_wqe(const uint8_t* got, const Expected& want) {
  return kinet::test::bytes_equal(got, want.b, 64, "WQE bytes vs rdma-core");
}

constexpr uint32_t kQpn = 0x00abcdef & 0xffffff;
// Index far from 0 so the 16-bit WQE counter in the control segment is checked
// (0x12345 -> 0x2345), and one that closes a signal period (8).
constexpr uint64_t kIdx = 0x12345;         // (kIdx + 1) % 8 != 0: not periodic
constexpr uint64_t kPeriodicIdx = 0x1234f;  // (idx + 1) % 8 == 0

uint8_t expected_fm_ce_se(uint64_t idx, uint32_t flags, uint32_t period = 8) {
  uint8_t f = 0;
  if ((flags & kinet::dev::kSignal) || ((idx + 1) % period) == 0) f |= MLX5_WQE_CTRL_CQ_UPDATE;
  if (flags & kinet::dev::kFence) f |= MLX5_WQE_CTRL_FENCE;
  return f;
}

const uint32_t kFlagSets[] = {0, kinet::dev::kSignal, kinet::dev::kFence, kinet::dev::kSignal | kinet::dev::kFence};

TEST(WqeEncoding, Nop) {
  for (uint64_t idx : {kIdx, kPeriodicIdx, uint64_t{0}, uint64_t{0xffff}})
    for (uint32_t flags : kFlagSets) {
      LocalRing r(kQpn);
      kinet::dev::prepare_nop<kinet::dev::Sharing::Exclusive>(r.h, idx, flags);
      Expected e;
      mlx5dv_set_ctrl_seg(e.ctrl(), static_cast<uint16_t>(idx), MLX5_OPCODE_NOP, 0, kQpn,
                          expected_fm_ce_se(idx, flags), 1, 0, 0);
      EXPECT_TRUE(same_wqe(r.slot(idx), e)) << "idx " << idx << " flags " << flags;
    }
}

TEST(WqeEncoding, RdmaWrite) {
  KINET_TEST_RNG(rng);
  for (uint64_t idx : {kIdx, kPeriodicIdx})
    for (uint32_t flags : kFlagSets) {
      LocalRing r(kQpn);
      const uint64_t laddr = rng(), raddr = rng();
      const uint32_t lkey = static_cast<uint32_t>(rng()), rkey = static_cast<uint32_t>(rng());
      const uint32_t bytes = static_cast<uint32_t>(rng() % (1u << 30)) + 1;
      kinet::dev::prepare_write<kinet::dev::Sharing::Exclusive>(r.h, idx, reinterpret_cast<const void*>(laddr),
                                                                kinet::Lkey{htobe32(lkey)}, raddr,
                                                                kinet::Rkey{htobe32(rkey)}, bytes, flags);
      Expected e;
      mlx5dv_set_ctrl_seg(e.ctrl(), static_cast<uint16_t>(idx), MLX5_OPCODE_RDMA_WRITE, 0, kQpn,
                          expected_fm_ce_se(idx, flags), 3, 0, 0);
      e.set_raddr(raddr, rkey);
      mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(e.b + 32), bytes, lkey, laddr);
      EXPECT_TRUE(same_wqe(r.slot(idx), e)) << "idx " << idx << " flags " << flags;
    }
}

TEST(WqeEncoding, RdmaRead) {
  KINET_TEST_RNG(rng);
  for (uint64_t idx : {kIdx, kPeriodicIdx})
    for (uint32_t flags : kFlagSets) {
      LocalRing r(kQpn);
      const uint64_t laddr = rng(), raddr = rng();
      const uint32_t lkey = static_cast<uint32_t>(rng()), rkey = static_cast<uint32_t>(rng());
      const uint32_t bytes = static_cast<uint32_t>(rng() % (1u << 30)) + 1;
      kinet::dev::prepare_read<kinet::dev::Sharing::Exclusive>(r.h, idx, reinterpret_cast<void*>(laddr),
                                                               kinet::Lkey{htobe32(lkey)}, raddr,
                                                               kinet::Rkey{htobe32(rkey)}, bytes, flags);
      Expected e;
      mlx5dv_set_ctrl_seg(e.ctrl(), static_cast<uint16_t>(idx), MLX5_OPCODE_RDMA_READ, 0, kQpn,
                          expected_fm_ce_se(idx, flags), 3, 0, 0);
      e.set_raddr(raddr, rkey);
      mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(e.b + 32), bytes, lkey, laddr);
      EXPECT_TRUE(same_wqe(r.slot(idx), e)) << "idx " << idx << " flags " << flags;
    }
}

TEST(WqeEncoding, RdmaWriteInlineEverySize) {
  KINET_TEST_RNG(rng);
  for (uint32_t bytes = 0; bytes <= m::kMaxInlineOneBB; ++bytes)
    for (uint32_t flags : kFlagSets) {
      LocalRing r(kQpn);
      uint8_t payload[32];
      kinet::test::fill_random(rng, payload, sizeof payload);
      const uint64_t raddr = rng();
      const uint32_t rkey = static_cast<uint32_t>(rng());
      kinet::dev::prepare_write_inline<kinet::dev::Sharing::Exclusive>(r.h, kIdx, payload, bytes, raddr,
                                                                       kinet::Rkey{htobe32(rkey)}, flags);
      Expected e;
      const uint8_t ds = static_cast<uint8_t>(
          (sizeof(mlx5_wqe_ctrl_seg) + sizeof(mlx5_wqe_raddr_seg) + sizeof(mlx5_wqe_inl_data_seg) + bytes + 15) / 16);
      mlx5dv_set_ctrl_seg(e.ctrl(), static_cast<uint16_t>(kIdx), MLX5_OPCODE_RDMA_WRITE, 0, kQpn,
                          expected_fm_ce_se(kIdx, flags), ds, 0, 0);
      e.set_raddr(raddr, rkey);
      auto* inl = reinterpret_cast<mlx5_wqe_inl_data_seg*>(e.b + 32);
      inl->byte_count = htobe32(bytes | MLX5_INLINE_SEG);
      std::memcpy(e.b + 36, payload, bytes);
      EXPECT_TRUE(same_wqe(r.slot(kIdx), e)) << "inline bytes " << bytes << " flags " << flags;
    }
}

TEST(WqeEncoding, AtomicFetchAdd) {
  KINET_TEST_RNG(rng);
  for (uint64_t idx : {kIdx, kPeriodicIdx})
    for (uint32_t flags : kFlagSets) {
      LocalRing r(kQpn);
      const uint64_t result = rng() & ~uint64_t{7}, raddr = rng() & ~uint64_t{7}, add = rng();
      const uint32_t lkey = static_cast<uint32_t>(rng()), rkey = static_cast<uint32_t>(rng());
      kinet::dev::prepare_fetch_add<kinet::dev::Sharing::Exclusive>(
          r.h, idx, reinterpret_cast<uint64_t*>(result), kinet::Lkey{htobe32(lkey)}, raddr,
          kinet::Rkey{htobe32(rkey)}, add, flags);
      Expected e;
      mlx5dv_set_ctrl_seg(e.ctrl(), static_cast<uint16_t>(idx), MLX5_OPCODE_ATOMIC_FA, 0, kQpn,
                          expected_fm_ce_se(idx, flags), 4, 0, 0);
      e.set_raddr(raddr, rkey);
      auto* a = reinterpret_cast<mlx5_wqe_atomic_seg*>(e.b + 32);
      a->swap_add = htobe64(add);
      a->compare = 0;
      mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(e.b + 48), 8, lkey, result);
      EXPECT_TRUE(same_wqe(r.slot(idx), e)) << "idx " << idx << " flags " << flags;
    }
}

TEST(WqeEncoding, AtomicCompareSwap) {
  KINET_TEST_RNG(rng);
  for (uint64_t idx : {kIdx, kPeriodicIdx})
    for (uint32_t flags : kFlagSets) {
      LocalRing r(kQpn);
      const uint64_t result = rng() & ~uint64_t{7}, raddr = rng() & ~uint64_t{7};
      const uint64_t cmp = rng(), swp = rng();
      const uint32_t lkey = static_cast<uint32_t>(rng()), rkey = static_cast<uint32_t>(rng());
      kinet::dev::prepare_compare_swap<kinet::dev::Sharing::Exclusive>(
          r.h, idx, reinterpret_cast<uint64_t*>(result), kinet::Lkey{htobe32(lkey)}, raddr,
          kinet::Rkey{htobe32(rkey)}, cmp, swp, flags);
      Expected e;
      mlx5dv_set_ctrl_seg(e.ctrl(), static_cast<uint16_t>(idx), MLX5_OPCODE_ATOMIC_CS, 0, kQpn,
                          expected_fm_ce_se(idx, flags), 4, 0, 0);
      e.set_raddr(raddr, rkey);
      auto* a = reinterpret_cast<mlx5_wqe_atomic_seg*>(e.b + 32);
      a->swap_add = htobe64(swp);
      a->compare = htobe64(cmp);
      mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(e.b + 48), 8, lkey, result);
      EXPECT_TRUE(same_wqe(r.slot(idx), e)) << "idx " << idx << " flags " << flags;
    }
}

// The same WQE bytes whichever sharing mode built them.
TEST(WqeEncoding, SharingModesEncodeIdentically) {
  KINET_TEST_RNG(rng);
  const uint64_t laddr = rng(), raddr = rng();
  const uint32_t lkey = static_cast<uint32_t>(rng()), rkey = static_cast<uint32_t>(rng());
  LocalRing a(kQpn), b(kQpn), c(kQpn);
  using kinet::dev::Sharing;
  kinet::dev::prepare_write<Sharing::Exclusive>(a.h, kIdx, reinterpret_cast<const void*>(laddr), kinet::Lkey{lkey},
                                                raddr, kinet::Rkey{rkey}, 4096, kinet::dev::kSignal);
  kinet::dev::prepare_write<Sharing::Cta>(b.h, kIdx, reinterpret_cast<const void*>(laddr), kinet::Lkey{lkey}, raddr,
                                          kinet::Rkey{rkey}, 4096, kinet::dev::kSignal);
  kinet::dev::prepare_write<Sharing::Gpu>(c.h, kIdx, reinterpret_cast<const void*>(laddr), kinet::Lkey{lkey}, raddr,
                                          kinet::Rkey{rkey}, 4096, kinet::dev::kSignal);
  EXPECT_EQ(std::memcmp(a.slot(kIdx), b.slot(kIdx), 64), 0);
  EXPECT_EQ(std::memcmp(a.slot(kIdx), c.slot(kIdx), 64), 0);
  // A signalled WQE raises `signaled` to idx + 1.
  EXPECT_EQ(a.state.signaled, kIdx + 1);
  EXPECT_EQ(b.state.signaled, kIdx + 1);
  EXPECT_EQ(c.state.signaled, kIdx + 1);
}

// Only the slot of idx is written; neighbours keep their bytes.
TEST(WqeEncoding, WritesOnlyItsSlot) {
  LocalRing r(kQpn);
  kinet::dev::prepare_nop<kinet::dev::Sharing::Exclusive>(r.h, 5, 0);
  for (uint64_t i = 0; i < 16; ++i) {
    if (i == 5) continue;
    for (int k = 0; k < 64; ++k) ASSERT_EQ(r.slot(i)[k], 0xee) << "slot " << i << " byte " << k;
  }
}

}  // namespace
