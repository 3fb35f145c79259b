// kinet — software NIC: mlx5 DevX mailbox decoder and reply writer.
//
// Every field below is {name, bit, width}: `bit` counts from the most
// significant bit of byte 0 of the whole mailbox (the PRM's own numbering,
// bit 0x20 is the top bit of byte 4), `width` in bits, values big-endian.
// Facts from the PRM as the kernel's mlx5_ifc.h lays it out; these numbers are
// written for this file and are not derived from the provider's builders.
#include "providers/emu/devx/devx_decode.hpp"

#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "core/text.hpp"
#include "kinet/kinet.hpp"

namespace kinet::emu::devx {
namespace {

struct Field {
  const char* name;
  uint32_t bit;
  uint32_t width;
};

// Context bases (bit offsets in their mailboxes).
constexpr uint32_t QPC = 0xc0;         // qpc: CREATE_QP, RST2INIT/INIT2RTR/RTR2RTS, QUERY_QP reply
constexpr uint32_t ADS = QPC + 0xc0;   // qpc.primary_address_path
constexpr uint32_t CQC = 0x80;         // cqc: CREATE_CQ
constexpr uint32_t CAP = 0x80;         // capability: QUERY_HCA_CAP reply

// Mailbox lengths in bits.
constexpr uint32_t kSmallBits = 0x80;               // every 16-byte mailbox
constexpr uint32_t kQpcMailboxBits = 0x880;         // CREATE_QP / modify in, QUERY_QP out
constexpr uint32_t kCreateCqInBits = 0x880;
constexpr uint32_t kHcaCapOutBits = 0x80 + 0x8000;
constexpr uint32_t kMaxInBits = 0x880;              // the largest request decoded here

namespace hdr {
constexpr Field opcode{"opcode", 0x00, 16};
constexpr Field uid{"uid", 0x10, 16};
constexpr Field op_mod{"op_mod", 0x30, 16};
constexpr Field obj{"object number", 0x48, 24};  // qpn / cqn of destroy, modify, query
constexpr Field opt_mask{"opt_param_mask", 0x80, 32};
}  // namespace hdr

namespace out {
constexpr Field status{"status", 0x00, 8};
constexpr Field syndrome{"syndrome", 0x20, 32};
constexpr Field id{"object number", 0x48, 24};
}  // namespace out

namespace qpc {
constexpr Field state{"state", QPC + 0x00, 4};
constexpr Field st{"st", QPC + 0x08, 8};
constexpr Field pm_state{"pm_state", QPC + 0x13, 2};
constexpr Field pd{"pd", QPC + 0x28, 24};
constexpr Field mtu{"mtu", QPC + 0x40, 3};
constexpr Field log_msg_max{"log_msg_max", QPC + 0x43, 5};
constexpr Field log_rq_size{"log_rq_size", QPC + 0x49, 4};
constexpr Field log_rq_stride{"log_rq_stride", QPC + 0x4d, 3};
constexpr Field no_sq{"no_sq", QPC + 0x50, 1};
constexpr Field log_sq_size{"log_sq_size", QPC + 0x51, 4};
constexpr Field ts_format{"ts_format", QPC + 0x58, 2};
constexpr Field uar_page{"uar_page", QPC + 0x68, 24};
constexpr Field user_index{"user_index", QPC + 0x88, 24};
constexpr Field log_page_size{"log_page_size", QPC + 0xa3, 5};
constexpr Field remote_qpn{"remote_qpn", QPC + 0xa8, 24};
constexpr Field log_sra_max{"log_sra_max", QPC + 0x388, 3};
constexpr Field retry_count{"retry_count", QPC + 0x38d, 3};
constexpr Field rnr_retry{"rnr_retry", QPC + 0x390, 3};
constexpr Field next_send_psn{"next_send_psn", QPC + 0x3c8, 24};
constexpr Field cqn_snd{"cqn_snd", QPC + 0x3e8, 24};
constexpr Field log_rra_max{"log_rra_max", QPC + 0x488, 3};
constexpr Field atomic_mode{"atomic_mode", QPC + 0x48c, 4};
constexpr Field rre{"rre", QPC + 0x490, 1};
constexpr Field rwe{"rwe", QPC + 0x491, 1};
constexpr Field rae{"rae", QPC + 0x492, 1};
constexpr Field min_rnr_nak{"min_rnr_nak", QPC + 0x4a3, 5};
constexpr Field next_rcv_psn{"next_rcv_psn", QPC + 0x4a8, 24};
constexpr Field cqn_rcv{"cqn_rcv", QPC + 0x4e8, 24};
constexpr Field dbr_addr{"dbr_addr", QPC + 0x500, 64};
constexpr Field rq_type{"rq_type", QPC + 0x565, 3};
constexpr Field cs_req{"cs_req", QPC + 0x630, 8};
constexpr Field cs_res{"cs_res", QPC + 0x638, 8};
constexpr Field dbr_umem_valid{"dbr_umem_valid", QPC + 0x683, 1};
constexpr Field dbr_umem_id{"dbr_umem_id", QPC + 0x720, 32};
// CREATE_QP after the qpc
constexpr Field wq_umem_offset{"wq_umem_offset", 0x800, 64};
constexpr Field wq_umem_id{"wq_umem_id", 0x840, 32};
constexpr Field wq_umem_valid{"wq_umem_valid", 0x860, 1};
}  // namespace qpc

namespace ads {
constexpr Field pkey_index{"pkey_index", ADS + 0x10, 16};
constexpr Field grh{"grh", ADS + 0x28, 1};
constexpr Field mlid{"mlid", ADS + 0x29, 7};
constexpr Field rlid{"rlid", ADS + 0x30, 16};
constexpr Field ack_timeout{"ack_timeout", ADS + 0x40, 5};
constexpr Field src_addr_index{"src_addr_index", ADS + 0x48, 8};
constexpr Field stat_rate{"stat_rate", ADS + 0x54, 4};
constexpr Field hop_limit{"hop_limit", ADS + 0x58, 8};
constexpr Field tclass{"tclass", ADS + 0x64, 8};
constexpr Field flow_label{"flow_label", ADS + 0x6c, 20};
constexpr Field rgid_hi{"rgid[0..7]", ADS + 0x80, 64};
constexpr Field rgid_lo{"rgid[8..15]", ADS + 0xc0, 64};
constexpr Field dscp{"dscp", ADS + 0x10a, 6};
constexpr Field udp_sport{"udp_sport", ADS + 0x110, 16};
constexpr Field sl{"sl", ADS + 0x124, 4};
constexpr Field vhca_port_num{"vhca_port_num", ADS + 0x128, 8};
constexpr Field rmac_hi{"rmac[47:32]", ADS + 0x130, 16};
constexpr Field rmac_lo{"rmac[31:0]", ADS + 0x140, 32};
}  // namespace ads

namespace cqc {
constexpr Field dbr_umem_valid{"dbr_umem_valid", CQC + 0x06, 1};
constexpr Field cqe_sz{"cqe_sz", CQC + 0x08, 3};
constexpr Field oi{"oi", CQC + 0x0e, 1};
constexpr Field dbr_umem_id{"dbr_umem_id", CQC + 0x20, 32};
constexpr Field page_offset{"page_offset", CQC + 0x54, 6};
constexpr Field log_cq_size{"log_cq_size", CQC + 0x63, 5};
constexpr Field uar_page{"uar_page", CQC + 0x68, 24};
constexpr Field c_eqn{"c_eqn", CQC + 0xb8, 8};
constexpr Field log_page_size{"log_page_size", CQC + 0xc3, 5};
constexpr Field dbr_addr{"dbr_addr", CQC + 0x1c0, 64};
// CREATE_CQ after the cqc
constexpr Field cq_umem_offset{"cq_umem_offset", 0x280, 64};
constexpr Field cq_umem_id{"cq_umem_id", 0x2c0, 32};
constexpr Field cq_umem_valid{"cq_umem_valid", 0x2e0, 1};
}  // namespace cqc

namespace cap {
constexpr Field vhca_id{"vhca_id", CAP + 0x30, 16};
constexpr Field log_max_qp_sz{"log_max_qp_sz", CAP + 0x88, 8};
constexpr Field log_max_qp{"log_max_qp", CAP + 0x9b, 5};
constexpr Field log_max_cq_sz{"log_max_cq_sz", CAP + 0xc8, 8};
constexpr Field log_max_cq{"log_max_cq", CAP + 0xdb, 5};
constexpr Field log_max_ra_req_qp{"log_max_ra_req_qp", CAP + 0x14a, 6};
constexpr Field log_max_ra_res_qp{"log_max_ra_res_qp", CAP + 0x15a, 6};
constexpr Field end_pad{"end_pad", CAP + 0x160, 1};
constexpr Field gid_table_size{"gid_table_size", CAP + 0x170, 16};
constexpr Field pkey_table_size{"pkey_table_size", CAP + 0x190, 16};
constexpr Field port_type{"port_type", CAP + 0x1b6, 2};
constexpr Field num_ports{"num_ports", CAP + 0x1b8, 8};
constexpr Field log_max_msg{"log_max_msg", CAP + 0x1c3, 5};
constexpr Field cqe_version{"cqe_version", CAP + 0x1fc, 4};
constexpr Field roce{"roce", CAP + 0x21d, 1};
constexpr Field atomic{"atomic", CAP + 0x21e, 1};
constexpr Field cq_oi{"cq_oi", CAP + 0x220, 1};
constexpr Field umem_uid_0{"umem_uid_0", CAP + 0x252, 1};
constexpr Field log_pg_sz{"log_pg_sz", CAP + 0x258, 8};
constexpr Field log_max_pd{"log_max_pd", CAP + 0x32b, 5};
// atomic_caps
constexpr Field endianness_mode{"atomic_req_8B_endianness_mode", CAP + 0x40, 2};
constexpr Field endianness_mode_1{"supported_atomic_req_8B_endianness_mode_1", CAP + 0x46, 1};
constexpr Field atomic_operations{"atomic_operations", CAP + 0x90, 16};
constexpr Field atomic_size_qp{"atomic_size_qp", CAP + 0xb0, 16};
}  // namespace cap

uint64_t get(std::span<const uint8_t> mb, const Field& f) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < f.width; ++i) {
    const uint32_t b = f.bit + i;
    v = v << 1 | ((mb[b / 8] >> (7 - b % 8)) & 1u);
  }
  return v;
}

void put(std::span<uint8_t> mb, const Field& f, uint64_t v) {
  if (f.width < 64 && (v >> f.width) != 0)
    throw Error(ErrorCode::InvalidArgument, std::string("devx reply: ") + f.name + " = " +
                                                std::to_string(v) + " does not fit its " +
                                                std::to_string(f.width) + "-bit field");
  for (uint32_t i = 0; i < f.width; ++i) {
    const uint32_t b = f.bit + f.width - 1 - i;  // least significant bit first
    const uint8_t m = static_cast<uint8_t>(0x80u >> (b % 8));
    if ((v >> i) & 1u) mb[b / 8] |= m; else mb[b / 8] &= static_cast<uint8_t>(~m);
  }
}

using text::hex;

Verdict reject(PrmStatus s, uint32_t syndrome, std::string why) { return Verdict{s, syndrome, std::move(why)}; }

// The checks every command shares: sizes, opcode, op_mod, and no set bit
// outside `known` (which lists every field the command may carry).
Verdict frame(const char* name, cmd::Op op, std::span<const uint8_t> in, uint32_t in_bits, size_t out_len,
              uint32_t out_bits, std::initializer_list<Field> known, bool op_mod_is_field = false) {
  static_assert(kQpcMailboxBits <= kMaxInBits && kCreateCqInBits <= kMaxInBits);
  if (in.size() * 8 != in_bits)
    return reject(PrmStatus::BadInputLen, 0, std::string(name) + ": input mailbox is " +
                                                 std::to_string(in.size()) + " bytes, the command's is " +
                                                 std::to_string(in_bits / 8));
  if (out_len * 8 < out_bits)
    return reject(PrmStatus::BadOutputLen, 0, std::string(name) + ": output mailbox is " +
                                                  std::to_string(out_len) + " bytes, the reply needs " +
                                                  std::to_string(out_bits / 8));
  if (get(in, hdr::opcode) != static_cast<uint16_t>(op))
    return reject(PrmStatus::BadOp, 0, std::string(name) + ": opcode is " + hex(get(in, hdr::opcode)) +
                                           ", expected " + hex(static_cast<uint16_t>(op)));
  if (!op_mod_is_field && get(in, hdr::op_mod) != 0)
    return reject(PrmStatus::BadParam, hdr::op_mod.bit,
                  std::string(name) + ": op_mod " + hex(get(in, hdr::op_mod)) + " is not defined (must be 0)");
  uint8_t covered[kMaxInBits / 8] = {};  // bit set: a known field holds this mailbox bit
  for (const Field& f : known)
    for (uint32_t b = f.bit; b < f.bit + f.width; ++b) covered[b / 8] |= static_cast<uint8_t>(0x80u >> (b % 8));
  for (uint32_t b = 0; b < in_bits; ++b)
    if ((in[b / 8] & ~covered[b / 8] & (0x80u >> (b % 8))) != 0)
      return reject(PrmStatus::BadParam, b, std::string(name) + ": bit " + hex(b) + " (dword " +
                                                std::to_string(b / 32) + ") is set, but it is reserved "
                                                "or a feature the software NIC does not implement");
  return {};
}

Verdict must_be(const char* name, std::span<const uint8_t> in, const Field& f, uint64_t want) {
  const uint64_t v = get(in, f);
  if (v == want) return {};
  return reject(PrmStatus::BadParam, f.bit, std::string(name) + ": " + f.name + " is " + hex(v) +
                                                ", the command requires " + hex(want));
}

template <class T> T as(uint64_t v) { return static_cast<T>(v); }

void read_path(std::span<const uint8_t> in, cmd::AddressPath* a) {
  a->pkey_index = as<uint16_t>(get(in, ads::pkey_index));
  a->grh = get(in, ads::grh) != 0;
  a->mlid = as<uint8_t>(get(in, ads::mlid));
  a->rlid = as<uint16_t>(get(in, ads::rlid));
  a->ack_timeout = as<uint8_t>(get(in, ads::ack_timeout));
  a->src_addr_index = as<uint8_t>(get(in, ads::src_addr_index));
  a->stat_rate = as<uint8_t>(get(in, ads::stat_rate));
  a->hop_limit = as<uint8_t>(get(in, ads::hop_limit));
  a->tclass = as<uint8_t>(get(in, ads::tclass));
  a->flow_label = as<uint32_t>(get(in, ads::flow_label));
  const uint64_t hi = get(in, ads::rgid_hi), lo = get(in, ads::rgid_lo);
  for (int i = 0; i < 8; ++i) {
    a->rgid[i] = as<uint8_t>(hi >> (56 - 8 * i));
    a->rgid[8 + i] = as<uint8_t>(lo >> (56 - 8 * i));
  }
  a->dscp = as<uint8_t>(get(in, ads::dscp));
  a->udp_sport = as<uint16_t>(get(in, ads::udp_sport));
  a->sl = as<uint8_t>(get(in, ads::sl));
  a->vhca_port_num = as<uint8_t>(get(in, ads::vhca_port_num));
  const uint64_t mac = get(in, ads::rmac_hi) << 32 | get(in, ads::rmac_lo);
  for (int i = 0; i < 6; ++i) a->rmac[i] = as<uint8_t>(mac >> (40 - 8 * i));
}

std::span<uint8_t> reply(std::span<uint8_t> out, uint32_t bits, const char* what) {
  if (out.size() * 8 < bits)
    throw Error(ErrorCode::InvalidArgument, std::string("devx reply: ") + what + " needs " +
                                                std::to_string(bits / 8) + " bytes, the output mailbox has " +
                                                std::to_string(out.size()));
  std::memset(out.data(), 0, out.size());
  return out;
}
}  // namespace

uint16_t opcode_of(std::span<const uint8_t> in) {
  return in.size() < 2 ? 0 : as<uint16_t>(get(in, hdr::opcode));
}

Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::QueryHcaCap* p) {
  const char* n = "QUERY_HCA_CAP";
  // other_function / function_id (querying another function) are left out: reserved here.
  Verdict v = frame(n, cmd::Op::QueryHcaCap, in, kSmallBits, out_len, kHcaCapOutBits,
                    {hdr::opcode, hdr::op_mod}, true);
  if (!v.ok()) return v;
  const uint64_t op_mod = get(in, hdr::op_mod), group = op_mod >> 1;
  if (group != 0 && group != 3 && group != 4)
    return reject(PrmStatus::BadParam, hdr::op_mod.bit,
                  std::string(n) + ": op_mod " + hex(op_mod) + " names capability group " + hex(group) +
                      ", not one of general (0), atomic (3), RoCE (4)");
  p->group = as<cmd::CapGroup>(group);
  p->current = (op_mod & 1u) != 0;
  return {};
}

Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::CreateCq* p) {
  using namespace cqc;
  Verdict v = frame("CREATE_CQ", cmd::Op::CreateCq, in, kCreateCqInBits, out_len, kSmallBits,
                    {hdr::opcode, hdr::uid, hdr::op_mod, dbr_umem_valid, cqe_sz, oi, dbr_umem_id, page_offset,
                     log_cq_size, uar_page, c_eqn, log_page_size, dbr_addr, cq_umem_offset, cq_umem_id,
                     cq_umem_valid});
  if (!v.ok()) return v;
  p->uid = as<uint16_t>(get(in, hdr::uid));
  p->log_cq_size = as<uint8_t>(get(in, log_cq_size));
  p->uar_page = as<uint32_t>(get(in, uar_page));
  p->c_eqn = as<uint8_t>(get(in, c_eqn));
  p->cqe_sz = as<uint8_t>(get(in, cqe_sz));
  p->oi = get(in, oi) != 0;
  p->log_page_size = as<uint8_t>(get(in, log_page_size));
  p->page_offset = as<uint8_t>(get(in, page_offset));
  p->dbr_umem_valid = get(in, dbr_umem_valid) != 0;
  p->dbr_umem_id = as<uint32_t>(get(in, dbr_umem_id));
  p->dbr_addr = get(in, dbr_addr);
  p->cq_umem_valid = get(in, cq_umem_valid) != 0;
  p->cq_umem_id = as<uint32_t>(get(in, cq_umem_id));
  p->cq_umem_offset = get(in, cq_umem_offset);
  return {};
}

Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::DestroyCq* p) {
  Verdict v = frame("DESTROY_CQ", cmd::Op::DestroyCq, in, kSmallBits, out_len, kSmallBits,
                    {hdr::opcode, hdr::uid, hdr::op_mod, hdr::obj});
  if (!v.ok()) return v;
  p->uid = as<uint16_t>(get(in, hdr::uid));
  p->cqn = as<uint32_t>(get(in, hdr::obj));
  return {};
}

Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::CreateQp* p) {
  using namespace qpc;
  const char* n = "CREATE_QP";
  Verdict v = frame(n, cmd::Op::CreateQp, in, kQpcMailboxBits, out_len, kSmallBits,
                    {hdr::opcode, hdr::uid, hdr::op_mod, st, pm_state, pd, log_msg_max, log_rq_size,
                     log_rq_stride, no_sq, log_sq_size, ts_format, uar_page, user_index, log_page_size,
                     cqn_snd, cqn_rcv, dbr_addr, rq_type, cs_req, cs_res, dbr_umem_valid, dbr_umem_id,
                     wq_umem_offset, wq_umem_id, wq_umem_valid});
  if (!v.ok()) return v;
  if (v = must_be(n, in, st, 0 /* RC */); !v.ok()) return v;
  p->uid = as<uint16_t>(get(in, hdr::uid));
  p->pm_state = as<uint8_t>(get(in, pm_state));
  p->pd = as<uint32_t>(get(in, pd));
  p->log_msg_max = as<uint8_t>(get(in, log_msg_max));
  p->log_rq_size = as<uint8_t>(get(in, log_rq_size));
  p->log_rq_stride = as<uint8_t>(get(in, log_rq_stride));
  p->no_sq = get(in, no_sq) != 0;
  p->log_sq_size = as<uint8_t>(get(in, log_sq_size));
  p->ts_format = as<uint8_t>(get(in, ts_format));
  p->uar_page = as<uint32_t>(get(in, uar_page));
  p->user_index = as<uint32_t>(get(in, user_index));
  p->log_page_size = as<uint8_t>(get(in, log_page_size));
  p->cqn_snd = as<uint32_t>(get(in, cqn_snd));
  p->cqn_rcv = as<uint32_t>(get(in, cqn_rcv));
  p->rq_type = as<uint8_t>(get(in, rq_type));
  p->cs_req = as<uint8_t>(get(in, cs_req));
  p->cs_res = as<uint8_t>(get(in, cs_res));
  p->dbr_umem_valid = get(in, dbr_umem_valid) != 0;
  p->dbr_umem_id = as<uint32_t>(get(in, dbr_umem_id));
  p->dbr_addr = get(in, dbr_addr);
  p->wq_umem_valid = get(in, wq_umem_valid) != 0;
  p->wq_umem_id = as<uint32_t>(get(in, wq_umem_id));
  p->wq_umem_offset = get(in, wq_umem_offset);
  return {};
}

Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::Rst2InitQp* p) {
  const char* n = "RST2INIT_QP";
  Verdict v = frame(n, cmd::Op::Rst2InitQp, in, kQpcMailboxBits, out_len, kSmallBits,
                    {hdr::opcode, hdr::uid, hdr::op_mod, hdr::obj, hdr::opt_mask, qpc::pm_state,
                     ads::pkey_index, ads::vhca_port_num, qpc::atomic_mode, qpc::rre, qpc::rwe, qpc::rae});
  if (!v.ok()) return v;
  if (v = must_be(n, in, qpc::pm_state, cmd::kPmStateMigrated); !v.ok()) return v;
  p->uid = as<uint16_t>(get(in, hdr::uid));
  p->qpn = as<uint32_t>(get(in, hdr::obj));
  p->opt_param_mask = as<uint32_t>(get(in, hdr::opt_mask));
  p->port = as<uint8_t>(get(in, ads::vhca_port_num));
  p->pkey_index = as<uint16_t>(get(in, ads::pkey_index));
  p->rre = get(in, qpc::rre) != 0;
  p->rwe = get(in, qpc::rwe) != 0;
  p->rae = get(in, qpc::rae) != 0;
  p->atomic_mode = as<uint8_t>(get(in, qpc::atomic_mode));
  return {};
}

Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::Init2RtrQp* p) {
  Verdict v = frame("INIT2RTR_QP", cmd::Op::Init2RtrQp, in, kQpcMailboxBits, out_len, kSmallBits,
                    {hdr::opcode, hdr::uid, hdr::op_mod, hdr::obj, hdr::opt_mask, qpc::mtu, qpc::log_msg_max,
                     qpc::remote_qpn, qpc::log_rra_max, qpc::min_rnr_nak, qpc::next_rcv_psn, ads::pkey_index,
                     ads::grh, ads::mlid, ads::rlid, ads::ack_timeout, ads::src_addr_index, ads::stat_rate,
                     ads::hop_limit, ads::tclass, ads::flow_label, ads::rgid_hi, ads::rgid_lo, ads::dscp,
                     ads::udp_sport, ads::sl, ads::vhca_port_num, ads::rmac_hi, ads::rmac_lo});
  if (!v.ok()) return v;
  p->uid = as<uint16_t>(get(in, hdr::uid));
  p->qpn = as<uint32_t>(get(in, hdr::obj));
  p->opt_param_mask = as<uint32_t>(get(in, hdr::opt_mask));
  p->mtu = as<uint8_t>(get(in, qpc::mtu));
  p->log_msg_max = as<uint8_t>(get(in, qpc::log_msg_max));
  p->remote_qpn = as<uint32_t>(get(in, qpc::remote_qpn));
  p->next_rcv_psn = as<uint32_t>(get(in, qpc::next_rcv_psn));
  p->min_rnr_nak = as<uint8_t>(get(in, qpc::min_rnr_nak));
  p->log_rra_max = as<uint8_t>(get(in, qpc::log_rra_max));
  read_path(in, &p->path);
  return {};
}

Verdict decode(std::span<const uint8_t> in, size_t out_len, cmd::Rtr2RtsQp* p) {
  Verdict v = frame("RTR2RTS_QP", cmd::Op::Rtr2RtsQp, in, kQpcMailboxBits, out_len, kSmallBits,
                    {hdr::opcode, hdr::uid, hdr::op_mod, hdr::obj, hdr::opt_mask, ads::ack_timeout,
                     qpc::log_sra_max, qpc::retry_count, qpc::rnr_retry, qpc::next_send_psn});
  if (!v.ok()) return v;
  p->uid = as<uint16_t>(get(in, hdr::uid));
  p->qpn = as<uint32_t>(get(in, hdr::obj));
  p->opt_param_mask = as<uint32_t>(get(in, hdr::opt_mask));
  p->next_send_psn = as<uint32_t>(get(in, qpc::next_send_psn));
  p->log_sra_max = as<uint8_t>(get(in, qpc::log_sra_max));
  p->retry_count = as<uint8_t>(get(in, qpc::retry_count));
  p->rnr_retry = as<uint8_t>(get(in, qpc::rnr_retry));
  p->ack_timeout = as<uint8_t>(get(in, ads::ack_timeout));
  return {};
}

Verdict decode_qp_ref(cmd::Op op, std::span<const uint8_t> in, size_t out_len, cmd::QpRef* p) {
  const char* n = op == cmd::Op::DestroyQp ? "DESTROY_QP"
                  : op == cmd::Op::ToErrQp ? "2ERR_QP"
                  : op == cmd::Op::ToRstQp ? "2RST_QP"
                  : op == cmd::Op::QueryQp ? "QUERY_QP"
                                           : nullptr;
  if (!n) throw Error(ErrorCode::InvalidArgument, "devx decode_qp_ref: opcode " +
                                                      hex(static_cast<uint16_t>(op)) + " does not name only a QP");
  const bool query = op == cmd::Op::QueryQp;
  Verdict v = query ? frame(n, op, in, kSmallBits, out_len, kQpcMailboxBits, {hdr::opcode, hdr::op_mod, hdr::obj})
                    : frame(n, op, in, kSmallBits, out_len, kSmallBits,
                            {hdr::opcode, hdr::uid, hdr::op_mod, hdr::obj});
  if (!v.ok()) return v;
  p->uid = query ? 0 : as<uint16_t>(get(in, hdr::uid));
  p->qpn = as<uint32_t>(get(in, hdr::obj));
  return {};
}

namespace {
Verdict unsupported(const char* name, const Field& f, uint64_t v, const char* why) {
  return reject(PrmStatus::BadParam, f.bit,
                std::string(name) + ": " + f.name + " = " + hex(v) + ": the software NIC " + why);
}
}  // namespace

Verdict check_supported(const cmd::QueryHcaCap& p) {
  if (p.group == cmd::CapGroup::Roce)
    return unsupported("QUERY_HCA_CAP", hdr::op_mod, static_cast<uint64_t>(p.group) << 1 | p.current,
                       "answers the general and atomic groups only");
  return {};
}

Verdict check_supported(const cmd::CreateCq& p) {
  const char* n = "CREATE_CQ";
  if (p.cqe_sz != cmd::kCqeSize64) return unsupported(n, cqc::cqe_sz, p.cqe_sz, "writes 64-byte CQEs only");
  if (!p.cq_umem_valid) return unsupported(n, cqc::cq_umem_valid, 0, "needs the ring in a UMEM (no page list)");
  if (!p.dbr_umem_valid)
    return unsupported(n, cqc::dbr_umem_valid, 0, "needs the doorbell record in a UMEM");
  if (p.page_offset != 0) return unsupported(n, cqc::page_offset, p.page_offset, "needs page_offset 0");
  return {};
}

Verdict check_supported(const cmd::CreateQp& p) {
  const char* n = "CREATE_QP";
  if (p.pm_state != cmd::kPmStateMigrated)
    return unsupported(n, qpc::pm_state, p.pm_state, "has no path migration (needs pm_state migrated, 3)");
  if (p.no_sq) return unsupported(n, qpc::no_sq, 1, "runs send queues only (no_sq must be 0)");
  if (p.rq_type != cmd::kRqTypeZeroSize)
    return unsupported(n, qpc::rq_type, p.rq_type, "has no receive queues (rq_type must be zero size, 3)");
  if (p.log_rq_size != 0) return unsupported(n, qpc::log_rq_size, p.log_rq_size, "has no receive queues");
  if (p.cs_req != 0) return unsupported(n, qpc::cs_req, p.cs_req, "does not scatter data into CQEs");
  if (p.cs_res != 0) return unsupported(n, qpc::cs_res, p.cs_res, "does not scatter data into CQEs");
  if (!p.wq_umem_valid) return unsupported(n, qpc::wq_umem_valid, 0, "needs the ring in a UMEM (no page list)");
  if (!p.dbr_umem_valid)
    return unsupported(n, qpc::dbr_umem_valid, 0, "needs the doorbell record in a UMEM");
  return {};
}

Verdict check_supported(const cmd::Rst2InitQp& p) {
  if (p.port == 0) return unsupported("RST2INIT_QP", ads::vhca_port_num, 0, "numbers ports from 1");
  if (p.atomic_mode > static_cast<uint8_t>(cmd::AtomicMode::Up8Bytes))
    return unsupported("RST2INIT_QP", qpc::atomic_mode, p.atomic_mode, "runs 8-byte atomics only");
  return {};
}

Verdict check_supported(const cmd::Init2RtrQp& p) {
  if (p.mtu < static_cast<uint8_t>(cmd::Mtu::B256) || p.mtu > static_cast<uint8_t>(cmd::Mtu::B4096))
    return unsupported("INIT2RTR_QP", qpc::mtu, p.mtu, "knows path MTUs 1 (256 B) to 5 (4096 B)");
  return {};
}

void encode_failure(std::span<uint8_t> o, const Verdict& v) {
  reply(o, kSmallBits, "a failure");
  put(o, out::status, static_cast<uint8_t>(v.status));
  put(o, out::syndrome, v.syndrome);
}

void encode_ok(std::span<uint8_t> o) { reply(o, kSmallBits, "a reply"); }

void encode_created(std::span<uint8_t> o, uint32_t id) {
  reply(o, kSmallBits, "CREATE reply");
  put(o, out::id, id);
}

void encode_hca_caps(std::span<uint8_t> o, const cmd::HcaCaps& c) {
  using namespace cap;
  reply(o, kHcaCapOutBits, "QUERY_HCA_CAP reply");
  put(o, vhca_id, c.vhca_id);
  put(o, log_max_qp_sz, c.log_max_qp_sz);
  put(o, log_max_qp, c.log_max_qp);
  put(o, log_max_cq_sz, c.log_max_cq_sz);
  put(o, log_max_cq, c.log_max_cq);
  put(o, log_max_ra_req_qp, c.log_max_ra_req_qp);
  put(o, log_max_ra_res_qp, c.log_max_ra_res_qp);
  put(o, end_pad, c.end_pad);
  put(o, gid_table_size, c.gid_table_size);
  put(o, pkey_table_size, c.pkey_table_size);
  put(o, port_type, c.port_type);
  put(o, num_ports, c.num_ports);
  put(o, log_max_msg, c.log_max_msg);
  put(o, cqe_version, c.cqe_version);
  put(o, roce, c.roce);
  put(o, atomic, c.atomic);
  put(o, cq_oi, c.cq_oi);
  put(o, umem_uid_0, c.umem_uid_0);
  put(o, log_pg_sz, c.log_pg_sz);
  put(o, log_max_pd, c.log_max_pd);
}

void encode_atomic_caps(std::span<uint8_t> o, const cmd::AtomicCaps& c) {
  reply(o, kHcaCapOutBits, "QUERY_HCA_CAP reply");
  put(o, cap::endianness_mode, c.req_8b_endianness_mode);
  put(o, cap::endianness_mode_1, c.supported_8b_endianness_mode_1);
  put(o, cap::atomic_operations, c.atomic_operations);
  put(o, cap::atomic_size_qp, c.atomic_size_qp);
}

void encode_query_qp(std::span<uint8_t> o, const cmd::QpQuery& q) {
  reply(o, kQpcMailboxBits, "QUERY_QP reply");
  put(o, qpc::state, q.state);
  put(o, qpc::pd, q.pd);
  put(o, qpc::mtu, q.mtu);
  put(o, qpc::log_sq_size, q.log_sq_size);
  put(o, qpc::remote_qpn, q.remote_qpn);
  put(o, qpc::next_send_psn, q.next_send_psn);
  put(o, qpc::next_rcv_psn, q.next_rcv_psn);
  put(o, qpc::cqn_snd, q.cqn_snd);
  put(o, qpc::retry_count, q.retry_count);
  put(o, qpc::rnr_retry, q.rnr_retry);
}
}  // namespace kinet::emu::devx
