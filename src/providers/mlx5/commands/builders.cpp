// kinet — mlx5 PRM mailbox builders. Layout facts come from the PRM as the
// kernel's mlx5_ifc.h describes it. This file names a field by its big-endian
// dword index in the mailbox and its shift from that dword's least significant
// bit; the software NIC's decoder counts bits from the most significant end of
// the whole mailbox instead, so the two descriptions are written apart.
#include "providers/mlx5/commands/builders.hpp"

#include <cstring>
#include <string>

#include "kinet/kinet.hpp"

namespace kinet::mlx5::cmd {

const char* op_name(Op op) {
  switch (op) {
    case Op::QueryHcaCap: return "QUERY_HCA_CAP";
    case Op::CreateCq: return "CREATE_CQ";
    case Op::DestroyCq: return "DESTROY_CQ";
    case Op::CreateQp: return "CREATE_QP";
    case Op::DestroyQp: return "DESTROY_QP";
    case Op::Rst2InitQp: return "RST2INIT_QP";
    case Op::Init2RtrQp: return "INIT2RTR_QP";
    case Op::Rtr2RtsQp: return "RTR2RTS_QP";
    case Op::ToErrQp: return "2ERR_QP";
    case Op::ToRstQp: return "2RST_QP";
    case Op::QueryQp: return "QUERY_QP";
  }
  return "unknown command";
}

namespace {

// Dword indices of the contexts inside their mailboxes.
constexpr size_t kQpcDw = 6;           // qpc in CREATE_QP, the modify commands and QUERY_QP's reply
constexpr size_t kPathDw = kQpcDw + 6; // qpc.primary_address_path
constexpr size_t kCqcDw = 4;           // cqc in CREATE_CQ
constexpr size_t kCapDw = 4;           // the capability in QUERY_HCA_CAP's reply

class Writer {
 public:
  Writer(Op op, std::span<uint8_t> in, size_t want) : op_(op), in_(in) {
    if (in.size() != want)
      throw Error(ErrorCode::InvalidArgument, std::string(op_name(op)) + ": input mailbox is " +
                                                  std::to_string(in.size()) + " bytes, the command's is " +
                                                  std::to_string(want));
    std::memset(in.data(), 0, in.size());
    bits(0, 16, 16, static_cast<uint16_t>(op), "opcode");
  }
  // Sets bits [lsb, lsb + width) of big-endian dword `dw` to `v`.
  void bits(size_t dw, unsigned lsb, unsigned width, uint64_t v, const char* field) {
    if (width < 64 && (v >> width) != 0)
      throw Error(ErrorCode::InvalidArgument, std::string(op_name(op_)) + ": " + field + " = " +
                                                  std::to_string(v) + " does not fit its " +
                                                  std::to_string(width) + "-bit field");
    uint32_t word = load(dw);
    const uint32_t mask = (width == 32 ? 0xffffffffu : ((1u << width) - 1u)) << lsb;
    word = (word & ~mask) | ((static_cast<uint32_t>(v) << lsb) & mask);
    store(dw, word);
  }
  void flag(size_t dw, unsigned lsb, bool v) { bits(dw, lsb, 1, v ? 1 : 0, "flag"); }
  void u32(size_t dw, uint32_t v) { store(dw, v); }
  void u64(size_t dw, uint64_t v) {
    store(dw, static_cast<uint32_t>(v >> 32));
    store(dw + 1, static_cast<uint32_t>(v));
  }
  void raw(size_t dw, const uint8_t* p, size_t n) { std::memcpy(in_.data() + dw * 4, p, n); }

 private:
  uint32_t load(size_t dw) const {
    const uint8_t* b = in_.data() + dw * 4;
    return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3];
  }
  void store(size_t dw, uint32_t w) {
    uint8_t* b = in_.data() + dw * 4;
    b[0] = uint8_t(w >> 24), b[1] = uint8_t(w >> 16), b[2] = uint8_t(w >> 8), b[3] = uint8_t(w);
  }
  Op op_;
  std::span<uint8_t> in_;
};

class Reader {
 public:
  Reader(const char* what, std::span<const uint8_t> out, size_t want) : out_(out) {
    if (out.size() < want)
      throw Error(ErrorCode::InvalidArgument, std::string(what) + ": output mailbox is " +
                                                  std::to_string(out.size()) + " bytes, needs " +
                                                  std::to_string(want));
  }
  uint32_t u32(size_t dw) const {
    const uint8_t* b = out_.data() + dw * 4;
    return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3];
  }
  uint32_t bits(size_t dw, unsigned lsb, unsigned width) const {
    const uint32_t w = u32(dw) >> lsb;
    return width == 32 ? w : w & ((1u << width) - 1u);
  }

 private:
  std::span<const uint8_t> out_;
};

void header(Writer& w, uint16_t uid, uint16_t op_mod) {
  w.bits(0, 0, 16, uid, "uid");
  w.bits(1, 0, 16, op_mod, "op_mod");
}

// The fields of qpc.primary_address_path.
void put_path(Writer& w, const AddressPath& a) {
  const size_t d = kPathDw;
  w.bits(d + 0, 0, 16, a.pkey_index, "pkey_index");
  w.flag(d + 1, 23, a.grh);
  w.bits(d + 1, 16, 7, a.mlid, "mlid");
  w.bits(d + 1, 0, 16, a.rlid, "rlid");
  w.bits(d + 2, 27, 5, a.ack_timeout, "ack_timeout");
  w.bits(d + 2, 16, 8, a.src_addr_index, "src_addr_index");
  w.bits(d + 2, 8, 4, a.stat_rate, "stat_rate");
  w.bits(d + 2, 0, 8, a.hop_limit, "hop_limit");
  w.bits(d + 3, 20, 8, a.tclass, "tclass");
  w.bits(d + 3, 0, 20, a.flow_label, "flow_label");
  w.raw(d + 4, a.rgid.data(), 16);
  w.bits(d + 8, 16, 6, a.dscp, "dscp");
  w.bits(d + 8, 0, 16, a.udp_sport, "udp_sport");
  w.bits(d + 9, 24, 4, a.sl, "sl");
  w.bits(d + 9, 16, 8, a.vhca_port_num, "vhca_port_num");
  w.bits(d + 9, 0, 16, uint32_t(a.rmac[0]) << 8 | a.rmac[1], "rmac[47:32]");
  w.raw(d + 10, a.rmac.data() + 2, 4);
}

size_t qp_ref(Op op, const QpRef& p, std::span<uint8_t> in, size_t out_bytes) {
  Writer w(op, in, kQpRefInBytes);
  header(w, p.uid, 0);
  w.bits(2, 0, 24, p.qpn, "qpn");
  return out_bytes;
}

// Opens a modify command: header, qpn and opt_param_mask before the qpc.
Writer modify(Op op, uint16_t uid, uint32_t qpn, uint32_t opt_mask, std::span<uint8_t> in) {
  Writer w(op, in, kModifyQpInBytes);
  header(w, uid, 0);
  w.bits(2, 0, 24, qpn, "qpn");
  w.u32(4, opt_mask);
  return w;
}
}  // namespace

size_t build_query_hca_cap(const QueryHcaCap& p, std::span<uint8_t> in) {
  Writer w(Op::QueryHcaCap, in, kQueryHcaCapInBytes);
  header(w, 0, static_cast<uint16_t>(static_cast<unsigned>(p.group) << 1 | (p.current ? 1u : 0u)));
  return kQueryHcaCapOutBytes;
}

size_t build_create_cq(const CreateCq& p, std::span<uint8_t> in) {
  Writer w(Op::CreateCq, in, kCreateCqInBytes);
  header(w, p.uid, 0);
  const size_t c = kCqcDw;
  w.flag(c + 0, 25, p.dbr_umem_valid);
  w.bits(c + 0, 21, 3, p.cqe_sz, "cqe_sz");
  w.flag(c + 0, 17, p.oi);
  w.u32(c + 1, p.dbr_umem_id);
  w.bits(c + 2, 6, 6, p.page_offset, "page_offset");
  w.bits(c + 3, 24, 5, p.log_cq_size, "log_cq_size");
  w.bits(c + 3, 0, 24, p.uar_page, "uar_page");
  w.bits(c + 5, 0, 8, p.c_eqn, "c_eqn");
  w.bits(c + 6, 24, 5, p.log_page_size, "log_page_size");
  w.u64(c + 14, p.dbr_addr);
  w.u64(20, p.cq_umem_offset);
  w.u32(22, p.cq_umem_id);
  w.flag(23, 31, p.cq_umem_valid);
  return kCreateCqOutBytes;
}

size_t build_destroy_cq(const DestroyCq& p, std::span<uint8_t> in) {
  Writer w(Op::DestroyCq, in, kDestroyCqInBytes);
  header(w, p.uid, 0);
  w.bits(2, 0, 24, p.cqn, "cqn");
  return kDestroyCqOutBytes;
}

size_t build_create_qp(const CreateQp& p, std::span<uint8_t> in) {
  Writer w(Op::CreateQp, in, kCreateQpInBytes);
  header(w, p.uid, 0);
  const size_t q = kQpcDw;
  w.bits(q + 0, 16, 8, 0, "st");  // RC
  w.bits(q + 0, 11, 2, p.pm_state, "pm_state");
  w.bits(q + 1, 0, 24, p.pd, "pd");
  w.bits(q + 2, 24, 5, p.log_msg_max, "log_msg_max");
  w.bits(q + 2, 19, 4, p.log_rq_size, "log_rq_size");
  w.bits(q + 2, 16, 3, p.log_rq_stride, "log_rq_stride");
  w.flag(q + 2, 15, p.no_sq);
  w.bits(q + 2, 11, 4, p.log_sq_size, "log_sq_size");
  w.bits(q + 2, 6, 2, p.ts_format, "ts_format");
  w.bits(q + 3, 0, 24, p.uar_page, "uar_page");
  w.bits(q + 4, 0, 24, p.user_index, "user_index");
  w.bits(q + 5, 24, 5, p.log_page_size, "log_page_size");
  w.bits(q + 31, 0, 24, p.cqn_snd, "cqn_snd");
  w.bits(q + 39, 0, 24, p.cqn_rcv, "cqn_rcv");
  w.u64(q + 40, p.dbr_addr);
  w.bits(q + 43, 24, 3, p.rq_type, "rq_type");
  w.bits(q + 49, 8, 8, p.cs_req, "cs_req");
  w.bits(q + 49, 0, 8, p.cs_res, "cs_res");
  w.flag(q + 52, 28, p.dbr_umem_valid);
  w.u32(q + 57, p.dbr_umem_id);
  w.u64(64, p.wq_umem_offset);
  w.u32(66, p.wq_umem_id);
  w.flag(67, 31, p.wq_umem_valid);
  return kCreateQpOutBytes;
}

size_t build_rst2init_qp(const Rst2InitQp& p, std::span<uint8_t> in) {
  Writer w = modify(Op::Rst2InitQp, p.uid, p.qpn, p.opt_param_mask, in);
  const size_t q = kQpcDw;
  w.bits(q + 0, 11, 2, kPmStateMigrated, "pm_state");
  w.bits(kPathDw + 0, 0, 16, p.pkey_index, "pkey_index");
  w.bits(kPathDw + 9, 16, 8, p.port, "port");
  w.bits(q + 36, 16, 4, p.atomic_mode, "atomic_mode");
  w.flag(q + 36, 15, p.rre);
  w.flag(q + 36, 14, p.rwe);
  w.flag(q + 36, 13, p.rae);
  return kModifyQpOutBytes;
}

size_t build_init2rtr_qp(const Init2RtrQp& p, std::span<uint8_t> in) {
  Writer w = modify(Op::Init2RtrQp, p.uid, p.qpn, p.opt_param_mask, in);
  const size_t q = kQpcDw;
  w.bits(q + 2, 29, 3, p.mtu, "mtu");
  w.bits(q + 2, 24, 5, p.log_msg_max, "log_msg_max");
  w.bits(q + 5, 0, 24, p.remote_qpn, "remote_qpn");
  put_path(w, p.path);
  w.bits(q + 36, 21, 3, p.log_rra_max, "log_rra_max");
  w.bits(q + 37, 24, 5, p.min_rnr_nak, "min_rnr_nak");
  w.bits(q + 37, 0, 24, p.next_rcv_psn, "next_rcv_psn");
  return kModifyQpOutBytes;
}

size_t build_rtr2rts_qp(const Rtr2RtsQp& p, std::span<uint8_t> in) {
  Writer w = modify(Op::Rtr2RtsQp, p.uid, p.qpn, p.opt_param_mask, in);
  const size_t q = kQpcDw;
  w.bits(kPathDw + 2, 27, 5, p.ack_timeout, "ack_timeout");
  w.bits(q + 28, 21, 3, p.log_sra_max, "log_sra_max");
  w.bits(q + 28, 16, 3, p.retry_count, "retry_count");
  w.bits(q + 28, 13, 3, p.rnr_retry, "rnr_retry");
  w.bits(q + 30, 0, 24, p.next_send_psn, "next_send_psn");
  return kModifyQpOutBytes;
}

size_t build_2err_qp(const QpRef& p, std::span<uint8_t> in) { return qp_ref(Op::ToErrQp, p, in, kQpRefOutBytes); }
size_t build_2rst_qp(const QpRef& p, std::span<uint8_t> in) { return qp_ref(Op::ToRstQp, p, in, kQpRefOutBytes); }
size_t build_destroy_qp(const QpRef& p, std::span<uint8_t> in) {
  return qp_ref(Op::DestroyQp, p, in, kQpRefOutBytes);
}
size_t build_query_qp(const QpRef& p, std::span<uint8_t> in) {
  if (p.uid != 0)
    throw Error(ErrorCode::InvalidArgument, "QUERY_QP: the command has no uid field (uid = " +
                                                std::to_string(p.uid) + ")");
  return qp_ref(Op::QueryQp, p, in, kQueryQpOutBytes);
}

OutHeader parse_out_header(std::span<const uint8_t> out) {
  Reader r("command reply", out, 8);
  return OutHeader{static_cast<uint8_t>(r.bits(0, 24, 8)), r.u32(1)};
}

uint32_t parse_create_cq_out(std::span<const uint8_t> out) {
  return Reader("CREATE_CQ reply", out, kCreateCqOutBytes).bits(2, 0, 24);
}
uint32_t parse_create_qp_out(std::span<const uint8_t> out) {
  return Reader("CREATE_QP reply", out, kCreateQpOutBytes).bits(2, 0, 24);
}

HcaCaps parse_query_hca_cap_general(std::span<const uint8_t> out) {
  Reader r("QUERY_HCA_CAP reply", out, kQueryHcaCapOutBytes);
  const size_t c = kCapDw;
  HcaCaps h;
  h.vhca_id = static_cast<uint16_t>(r.bits(c + 1, 0, 16));
  h.log_max_qp_sz = static_cast<uint8_t>(r.bits(c + 4, 16, 8));
  h.log_max_qp = static_cast<uint8_t>(r.bits(c + 4, 0, 5));
  h.log_max_cq_sz = static_cast<uint8_t>(r.bits(c + 6, 16, 8));
  h.log_max_cq = static_cast<uint8_t>(r.bits(c + 6, 0, 5));
  h.log_max_ra_req_qp = static_cast<uint8_t>(r.bits(c + 10, 16, 6));
  h.log_max_ra_res_qp = static_cast<uint8_t>(r.bits(c + 10, 0, 6));
  h.end_pad = r.bits(c + 11, 31, 1) != 0;
  h.gid_table_size = static_cast<uint16_t>(r.bits(c + 11, 0, 16));
  h.pkey_table_size = static_cast<uint16_t>(r.bits(c + 12, 0, 16));
  h.port_type = static_cast<uint8_t>(r.bits(c + 13, 8, 2));
  h.num_ports = static_cast<uint8_t>(r.bits(c + 13, 0, 8));
  h.log_max_msg = static_cast<uint8_t>(r.bits(c + 14, 24, 5));
  h.cqe_version = static_cast<uint8_t>(r.bits(c + 15, 0, 4));
  h.roce = r.bits(c + 16, 2, 1) != 0;
  h.atomic = r.bits(c + 16, 1, 1) != 0;
  h.cq_oi = r.bits(c + 17, 31, 1) != 0;
  h.umem_uid_0 = r.bits(c + 18, 13, 1) != 0;
  h.log_pg_sz = static_cast<uint8_t>(r.bits(c + 18, 0, 8));
  h.log_max_pd = static_cast<uint8_t>(r.bits(c + 25, 16, 5));
  return h;
}

AtomicCaps parse_query_hca_cap_atomic(std::span<const uint8_t> out) {
  Reader r("QUERY_HCA_CAP reply", out, kQueryHcaCapOutBytes);
  const size_t c = kCapDw;
  AtomicCaps a;
  a.req_8b_endianness_mode = static_cast<uint8_t>(r.bits(c + 2, 30, 2));
  a.supported_8b_endianness_mode_1 = r.bits(c + 2, 25, 1) != 0;
  a.atomic_operations = static_cast<uint16_t>(r.bits(c + 4, 0, 16));
  a.atomic_size_qp = static_cast<uint16_t>(r.bits(c + 5, 0, 16));
  return a;
}

QpQuery parse_query_qp_out(std::span<const uint8_t> out) {
  Reader r("QUERY_QP reply", out, kQueryQpOutBytes);
  const size_t q = kQpcDw;
  QpQuery s;
  s.state = static_cast<uint8_t>(r.bits(q + 0, 28, 4));
  s.pd = r.bits(q + 1, 0, 24);
  s.mtu = static_cast<uint8_t>(r.bits(q + 2, 29, 3));
  s.log_sq_size = static_cast<uint8_t>(r.bits(q + 2, 11, 4));
  s.remote_qpn = r.bits(q + 5, 0, 24);
  s.retry_count = static_cast<uint8_t>(r.bits(q + 28, 16, 3));
  s.rnr_retry = static_cast<uint8_t>(r.bits(q + 28, 13, 3));
  s.next_send_psn = r.bits(q + 30, 0, 24);
  s.cqn_snd = r.bits(q + 31, 0, 24);
  s.next_rcv_psn = r.bits(q + 37, 0, 24);
  return s;
}
}  // namespace kinet::mlx5::cmd
