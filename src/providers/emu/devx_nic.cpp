// kinet emu — the software NIC's DevX entry point (see devx_nic.hpp).
#include "providers/emu/devx_nic.hpp"
#include "providers/emu/devx_nic_state.hpp"

#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>

#include "core/cuda_shim.hpp"
#include "core/log.hpp"
#include "providers/emu/devx/devx_decode.hpp"
#include "providers/emu/emu.hpp"
#include "providers/emu/prm.hpp"

namespace kinet::emu {
namespace {
namespace cmd = mlx5::cmd;
using devx::PrmStatus;
using devx::Verdict;
using Span = std::span<const uint8_t>;

using namespace devx_nic;

Verdict bad(PrmStatus s, uint32_t syndrome, std::string why) { return {s, syndrome, std::move(why)}; }

// Writes the failure into out (when it can hold one), logs why, and returns
// the errno rdma-core reports for a command the device rejected.
int reject(const DevxNic& dn, std::span<uint8_t> out, const Verdict& v) {
  KINET_LOG(Warn, "%s: DevX command rejected (status %#x, syndrome %#x): %s", dn.nic->name.c_str(),
            static_cast<unsigned>(v.status), v.syndrome, v.why.c_str());
  if (out.size() >= 16) devx::encode_failure(out, v);
  return EREMOTEIO;
}

template <class P> Verdict decode_checked(Span in, size_t out_len, P* p) {
  Verdict v = devx::decode(in, out_len, p);
  if (v.ok()) v = devx::check_supported(*p);
  return v;
}

// [off, off+len) inside UMEM `id`, `align`-aligned: its address in *at.
Verdict in_umem(DevxNic& dn, const char* n, const char* what, uint32_t id, uint64_t off, uint64_t len,
                uint64_t align, uint8_t** at) {
  auto it = dn.umems.find(id);
  if (it == dn.umems.end())
    return bad(PrmStatus::BadResource, id, std::string(n) + ": " + what + " names UMEM " + std::to_string(id) +
                                               ", which is not registered");
  const Umem& u = it->second;
  if (off > u.size || len > u.size - off)
    return bad(PrmStatus::BadParam, 0, std::string(n) + ": " + what + " [" + hex(off) + ", +" + std::to_string(len) +
                                           ") is outside UMEM " + std::to_string(id) + " (" +
                                           std::to_string(u.size) + " bytes)");
  if ((reinterpret_cast<uintptr_t>(u.addr) + off) % align)
    return bad(PrmStatus::BadParam, 0, std::string(n) + ": " + what + " at UMEM offset " + hex(off) + " is not " +
                                           std::to_string(align) + "-byte aligned");
  *at = u.addr + off;
  return {};
}

Verdict create_cq(DevxNic& dn, const cmd::CreateCq& p, uint32_t* cqn) {
  const char* n = "CREATE_CQ";
  if (p.log_cq_size < 1 || p.log_cq_size > kDevxLogMaxQpSz)
    return bad(PrmStatus::BadParam, p.log_cq_size, std::string(n) + ": log_cq_size " + std::to_string(p.log_cq_size) +
                                                       " is outside [1, " + std::to_string(kDevxLogMaxQpSz) + "]");
  if (!dn.uars.count(p.uar_page))
    return bad(PrmStatus::BadResource, p.uar_page, std::string(n) + ": UAR page " + std::to_string(p.uar_page) +
                                                       " is not allocated");
  Cq cq;
  cq.p = p;
  uint8_t *ring = nullptr, *rec = nullptr;
  if (Verdict v = in_umem(dn, n, "the CQE ring", p.cq_umem_id, p.cq_umem_offset,
                          uint64_t(mlx5::kCqeSize) << p.log_cq_size, mlx5::kCqeSize, &ring);
      !v.ok())
    return v;
  if (Verdict v = in_umem(dn, n, "the doorbell record", p.dbr_umem_id, p.dbr_addr, 8, 8, &rec); !v.ok()) return v;
  cq.cqes = reinterpret_cast<mlx5::Cqe64*>(ring);
  cq.dbrec = reinterpret_cast<uint32_t*>(rec);
  *cqn = dn.next_cqn++ & 0xffffffu;
  dn.cqs[*cqn] = cq;
  ++dn.umems[p.cq_umem_id].users;
  ++dn.umems[p.dbr_umem_id].users;
  return {};
}

Verdict create_qp(DevxNic& dn, const cmd::CreateQp& p, uint32_t* qpn) {
  const char* n = "CREATE_QP";
  Nic& nic = *dn.nic;
  if (!dn.pds.count(p.pd))
    return bad(PrmStatus::BadResource, p.pd, std::string(n) + ": PD " + std::to_string(p.pd) + " is not allocated");
  if (p.log_sq_size < 1 || p.log_sq_size > kDevxLogMaxQpSz)
    return bad(PrmStatus::BadParam, p.log_sq_size, std::string(n) + ": log_sq_size " + std::to_string(p.log_sq_size) +
                                                       " is outside [1, " + std::to_string(kDevxLogMaxQpSz) + "]");
  auto cq = dn.cqs.find(p.cqn_snd);
  if (cq == dn.cqs.end())
    return bad(PrmStatus::BadResource, p.cqn_snd, std::string(n) + ": send CQ " + hex(p.cqn_snd) + " does not exist");
  if (cq->second.qpn)
    return bad(PrmStatus::ResourceBusy, p.cqn_snd, std::string(n) + ": CQ " + hex(p.cqn_snd) +
                                                       " already serves QP " + hex(cq->second.qpn) +
                                                       " (the software NIC runs one QP per CQ)");
  if (cq->second.p.log_cq_size != p.log_sq_size)
    return bad(PrmStatus::BadParam, p.log_sq_size, std::string(n) + ": CQ " + hex(p.cqn_snd) + " has 2^" +
                                                       std::to_string(cq->second.p.log_cq_size) +
                                                       " entries, the software NIC needs one per send slot (2^" +
                                                       std::to_string(p.log_sq_size) + ")");
  if (p.cqn_rcv && !dn.cqs.count(p.cqn_rcv))
    return bad(PrmStatus::BadResource, p.cqn_rcv, std::string(n) + ": receive CQ " + hex(p.cqn_rcv) +
                                                      " does not exist");
  auto uar = dn.uars.find(p.uar_page);
  if (uar == dn.uars.end() || uar->second->freed)
    return bad(PrmStatus::BadResource, p.uar_page, std::string(n) + ": UAR page " + std::to_string(p.uar_page) +
                                                       " is not allocated");
  if (uar->second->qpn)
    return bad(PrmStatus::ResourceBusy, p.uar_page, std::string(n) + ": UAR page " + std::to_string(p.uar_page) +
                                                        " already rings QP " + hex(uar->second->qpn) +
                                                        " (the software NIC runs one QP per UAR)");
  uint8_t *ring = nullptr, *rec = nullptr;
  if (Verdict v = in_umem(dn, n, "the send ring", p.wq_umem_id, p.wq_umem_offset,
                          uint64_t(mlx5::kSendWqeBB) << p.log_sq_size, mlx5::kSendWqeBB, &ring);
      !v.ok())
    return v;
  if (Verdict v = in_umem(dn, n, "the doorbell record", p.dbr_umem_id, p.dbr_addr, 8, 8, &rec); !v.ok()) return v;

  auto q = std::make_shared<EmuQp>();
  q->nic = dn.nic;
  q->pd = p.pd;
  q->cfg.sq_depth = 1u << p.log_sq_size;
  q->log_n = p.log_sq_size;
  q->max_msg = p.log_msg_max ? std::min<uint32_t>(1u << p.log_msg_max, nic.attr.max_msg) : nic.attr.max_msg;
  q->external_rings = true;
  q->sq = ring;
  q->dbrec = reinterpret_cast<uint32_t*>(rec);
  q->db = uar->second->word;
  q->db_mode = uar->second->blueflame ? dev::DoorbellMode::BlueFlame : dev::DoorbellMode::Uar;
  q->cqes = cq->second.cqes;
  q->cq_dbrec = cq->second.dbrec;
  std::atomic_ref<uint64_t>(*q->db).store(prm::kNoDoorbell, std::memory_order_release);
  {
    std::lock_guard<std::mutex> g(nic.qp_mu);
    if (!nic.qp_ids.take(&q->qpn))
      return bad(PrmStatus::NoResources, 0, std::string(n) + ": " + std::to_string(nic.qp_ids.limit) +
                                                " QPs are alive");
    nic.qps[q->qpn] = q;
    nic.qp_generation.fetch_add(1, std::memory_order_acq_rel);
  }
  *qpn = q->qpn;
  cq->second.qpn = q->qpn;
  uar->second->qpn = q->qpn;
  ++dn.umems[p.wq_umem_id].users;
  ++dn.umems[p.dbr_umem_id].users;
  dn.qps[q->qpn] = Qp{q, p, {}, {}};
  return {};
}

QpState state_of(const EmuQp& q) { return q.state.load(std::memory_order_acquire); }
uint8_t prm_state(QpState s) {
  switch (s) {
    case QpState::Reset: return static_cast<uint8_t>(cmd::QpState::Rst);
    case QpState::Init: return static_cast<uint8_t>(cmd::QpState::Init);
    case QpState::Rtr: return static_cast<uint8_t>(cmd::QpState::Rtr);
    case QpState::Rts: return static_cast<uint8_t>(cmd::QpState::Rts);
    case QpState::Error: break;
  }
  return static_cast<uint8_t>(cmd::QpState::Err);
}

// from -> to, atomically against the engine moving the QP to ERROR; BadQpState
// (syndrome: the PRM state the QP is in) otherwise. `before` runs first, only
// when the QP is in `from`.
template <class F> Verdict move(EmuQp& q, const char* n, QpState from, QpState to, F&& before) {
  std::lock_guard<std::mutex> g(q.ctl_mu);
  QpState s = state_of(q);
  if (s == from) {
    before();
    if (q.state.compare_exchange_strong(s, to, std::memory_order_acq_rel, std::memory_order_acquire)) return {};
  }
  return bad(PrmStatus::BadQpState, prm_state(s), std::string(n) + ": QP " + hex(q.qpn) + " is in state " +
                                                      qp_state_name(s) + ", the command needs " + qp_state_name(from));
}

Verdict modify(DevxNic& dn, Qp& qp, Span s, size_t out_len) {
  EmuQp& q = *qp.q;
  const auto op = static_cast<cmd::Op>(devx::opcode_of(s));
  auto same_qp = [&](const char* n, uint32_t qpn) -> Verdict {
    if (qpn == q.qpn) return {};
    return bad(PrmStatus::BadResource, qpn, std::string(n) + ": the mailbox names QP " + hex(qpn) +
                                                " but was issued on QP " + hex(q.qpn));
  };
  switch (op) {
    case cmd::Op::Rst2InitQp: {
      cmd::Rst2InitQp p;
      Verdict v = decode_checked(s, out_len, &p);
      if (v.ok()) v = same_qp("RST2INIT_QP", p.qpn);
      if (v.ok() && p.port != 1)
        v = bad(PrmStatus::BadParam, p.port, "RST2INIT_QP: port " + std::to_string(p.port) +
                                                 " does not exist (the software NIC has one port, 1)");
      if (!v.ok()) return v;
      return move(q, "RST2INIT_QP", QpState::Reset, QpState::Init, [&] {
        q.remote_access = (p.rre ? kRemoteRead : 0u) | (p.rwe ? kRemoteWrite : 0u) | (p.rae ? kRemoteAtomic : 0u);
      });
    }
    case cmd::Op::Init2RtrQp: {
      cmd::Init2RtrQp p;
      Verdict v = decode_checked(s, out_len, &p);
      if (v.ok()) v = same_qp("INIT2RTR_QP", p.qpn);
      if (v.ok() && !p.path.grh)
        v = bad(PrmStatus::BadParam, 0, "INIT2RTR_QP: the port is RoCE: the address path needs grh and a remote GID");
      if (v.ok() && p.path.vhca_port_num != 1)
        v = bad(PrmStatus::BadParam, p.path.vhca_port_num,
                "INIT2RTR_QP: port " + std::to_string(p.path.vhca_port_num) + " does not exist (one port, 1)");
      if (!v.ok()) return v;
      // The fabric address is the low half of a link-local GID; any other GID
      // names no NIC here (~0: unreachable, as an unrouted GID on a network).
      uint64_t node = ~0ull;
      if (std::memcmp(p.path.rgid.data(), kGidPrefix, 8) == 0) {
        node = 0;
        for (int i = 8; i < 16; ++i) node = node << 8 | p.path.rgid[i];
      }
      v = move(q, "INIT2RTR_QP", QpState::Init, QpState::Rtr, [&] {
        q.remote_node = node;
        q.remote_qpn = p.remote_qpn;
      });
      if (v.ok()) qp.rtr = p;
      return v;
    }
    case cmd::Op::Rtr2RtsQp: {
      cmd::Rtr2RtsQp p;
      Verdict v = devx::decode(s, out_len, &p);
      if (v.ok()) v = same_qp("RTR2RTS_QP", p.qpn);
      if (v.ok()) v = move(q, "RTR2RTS_QP", QpState::Rtr, QpState::Rts, [] {});
      if (v.ok()) qp.rts = p;
      return v;
    }
    case cmd::Op::ToErrQp:
    case cmd::Op::ToRstQp: {
      cmd::QpRef r;
      Verdict v = devx::decode_qp_ref(op, s, out_len, &r);
      if (v.ok()) v = same_qp(op == cmd::Op::ToErrQp ? "2ERR_QP" : "2RST_QP", r.qpn);
      if (!v.ok()) return v;
      std::lock_guard<std::mutex> g(q.ctl_mu);
      q.state.store(QpState::Error, std::memory_order_release);
      if (op == cmd::Op::ToErrQp) return {};
      // RESET: the engine forgets the QP's progress; the provider starts its
      // rings over (they are its memory).
      // The connection is forgotten while neither the engine nor a peer's
      // responder is inside the QP.
      dn.nic->reset_qp(q, [&] {
        std::atomic_ref<uint64_t>(*q.db).store(prm::kNoDoorbell, std::memory_order_release);
        q.remote_node = 0, q.remote_qpn = 0, q.remote_access = 0;
      });
      {
        std::lock_guard<std::mutex> e(q.err_mu);
        q.last_error.clear();
      }
      qp.rtr = {}, qp.rts = {};
      q.state.store(QpState::Reset, std::memory_order_release);
      return {};
    }
    default:
      return bad(PrmStatus::BadOp, devx::opcode_of(s),
                 "MODIFY: opcode " + hex(devx::opcode_of(s)) + " is not a QP transition the software NIC runs");
  }
}

// ---- DevxOps ----------------------------------------------------------------------

mlx5dv_devx_obj* obj_create(ibv_context* ctx, const void* in, size_t inlen, void* out, size_t outlen) {
  DevxNic& dn = dn_of(ctx);
  const Span s(static_cast<const uint8_t*>(in), inlen);
  const std::span<uint8_t> o(static_cast<uint8_t*>(out), outlen);
  try {
    std::lock_guard<std::mutex> g(dn.mu);
    Verdict v;
    uint32_t id = 0;
    const uint16_t opc = devx::opcode_of(s);
    const bool is_qp = opc == static_cast<uint16_t>(cmd::Op::CreateQp);
    if (opc == static_cast<uint16_t>(cmd::Op::CreateCq)) {
      cmd::CreateCq p;
      v = decode_checked(s, outlen, &p);
      if (v.ok()) v = create_cq(dn, p, &id);
    } else if (is_qp) {
      cmd::CreateQp p;
      v = decode_checked(s, outlen, &p);
      if (v.ok()) v = create_qp(dn, p, &id);
    } else {
      v = bad(PrmStatus::BadOp, opc, "CREATE: opcode " + hex(opc) + " is not CREATE_CQ or CREATE_QP");
    }
    if (!v.ok()) return errno = reject(dn, o, v), nullptr;
    devx::encode_created(o, id);
    return reinterpret_cast<mlx5dv_devx_obj*>(new Obj{&dn, is_qp, id});
  } catch (const std::bad_alloc&) {
    return errno = ENOMEM, nullptr;
  } catch (const std::exception& e) {  // a reply that does not fit `out` (checked by the decoder first)
    KINET_LOG(Warn, "%s: DevX create failed: %s", dn.nic->name.c_str(), e.what());
    return errno = EINVAL, nullptr;
  }
}

int obj_modify(mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out, size_t outlen) {
  Obj& ob = *ref<Obj>(obj);
  DevxNic& dn = *ob.dn;
  const std::span<uint8_t> o(static_cast<uint8_t*>(out), outlen);
  try {
    std::lock_guard<std::mutex> g(dn.mu);
    Verdict v = ob.is_qp ? modify(dn, dn.qps.at(ob.id), Span(static_cast<const uint8_t*>(in), inlen), outlen)
                         : bad(PrmStatus::BadOp, 0, "MODIFY: CQ " + hex(ob.id) + " has no modify the NIC runs");
    if (!v.ok()) return reject(dn, o, v);
    devx::encode_ok(o);
    return 0;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  } catch (const std::exception& e) {
    KINET_LOG(Warn, "%s: DevX modify failed: %s", dn.nic->name.c_str(), e.what());
    return EINVAL;
  }
}

int obj_query(mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out, size_t outlen) {
  Obj& ob = *ref<Obj>(obj);
  DevxNic& dn = *ob.dn;
  const std::span<uint8_t> o(static_cast<uint8_t*>(out), outlen);
  try {
    std::lock_guard<std::mutex> g(dn.mu);
    cmd::QpRef r;
    Verdict v = devx::decode_qp_ref(cmd::Op::QueryQp, Span(static_cast<const uint8_t*>(in), inlen), outlen, &r);
    if (v.ok() && (!ob.is_qp || r.qpn != ob.id))
      v = bad(PrmStatus::BadResource, r.qpn, "QUERY_QP: the mailbox names QP " + hex(r.qpn) +
                                                 " but was issued on object " + hex(ob.id));
    if (!v.ok()) return reject(dn, o, v);
    const Qp& qp = dn.qps.at(ob.id);
    cmd::QpQuery q;
    q.state = prm_state(state_of(*qp.q));
    q.pd = qp.p.pd, q.log_sq_size = qp.p.log_sq_size, q.cqn_snd = qp.p.cqn_snd;
    q.mtu = qp.rtr.mtu, q.remote_qpn = qp.rtr.remote_qpn, q.next_rcv_psn = qp.rtr.next_rcv_psn;
    q.next_send_psn = qp.rts.next_send_psn, q.retry_count = qp.rts.retry_count, q.rnr_retry = qp.rts.rnr_retry;
    devx::encode_query_qp(o, q);
    return 0;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  } catch (const std::exception& e) {
    KINET_LOG(Warn, "%s: DevX query failed: %s", dn.nic->name.c_str(), e.what());
    return EINVAL;
  }
}

// A QP leaves the engine first: flushed, the engine and peers out of it.
void destroy_qp(DevxNic& dn, uint32_t qpn) {
  Nic& nic = *dn.nic;
  Qp qp = dn.qps.at(qpn);
  {
    std::lock_guard<std::mutex> g(nic.qp_mu);
    nic.qps.erase(qpn);
    nic.qp_generation.fetch_add(1, std::memory_order_acq_rel);
  }
  nic.quiesce_qp(*qp.q);
  {
    std::lock_guard<std::mutex> g(nic.qp_mu);
    nic.qp_ids.release(qpn >> 8);
  }
  if (auto cq = dn.cqs.find(qp.p.cqn_snd); cq != dn.cqs.end()) cq->second.qpn = 0;
  if (auto u = dn.uars.find(qp.p.uar_page); u != dn.uars.end()) {
    u->second->qpn = 0;
    if (u->second->freed) dn.uars.erase(u);
  }
  --dn.umems[qp.p.wq_umem_id].users;
  --dn.umems[qp.p.dbr_umem_id].users;
  dn.qps.erase(qpn);
}

int obj_destroy(mlx5dv_devx_obj* obj) {
  Obj* ob = ref<Obj>(obj);
  DevxNic& dn = *ob->dn;
  std::lock_guard<std::mutex> g(dn.mu);
  if (ob->is_qp) {
    destroy_qp(dn, ob->id);
  } else {
    auto cq = dn.cqs.find(ob->id);
    if (cq->second.qpn) {
      KINET_LOG(Warn, "%s: DESTROY_CQ %s: QP %s still uses it", dn.nic->name.c_str(), hex(ob->id).c_str(),
                hex(cq->second.qpn).c_str());
      return EBUSY;
    }
    --dn.umems[cq->second.p.cq_umem_id].users;
    --dn.umems[cq->second.p.dbr_umem_id].users;
    dn.cqs.erase(cq);
  }
  delete ob;
  return 0;
}

int general_cmd(ibv_context* ctx, const void* in, size_t inlen, void* out, size_t outlen) {
  DevxNic& dn = dn_of(ctx);
  const std::span<uint8_t> o(static_cast<uint8_t*>(out), outlen);
  try {
    cmd::QueryHcaCap q;
    Verdict v = decode_checked(Span(static_cast<const uint8_t*>(in), inlen), outlen, &q);
    if (!v.ok()) return reject(dn, o, v);
    if (q.group == cmd::CapGroup::General) {
      cmd::HcaCaps c;
      c.log_max_qp_sz = kDevxLogMaxQpSz;
      c.log_max_qp = 16;
      c.log_max_cq_sz = kDevxLogMaxQpSz;
      c.log_max_cq = 16;
      c.log_max_ra_req_qp = 4;
      c.log_max_ra_res_qp = 4;
      c.gid_table_size = 1;
      c.pkey_table_size = 1;
      c.port_type = 1;  // Ethernet
      c.num_ports = 1;
      // The largest message: the NIC's attribute (a power of two by construction of the NIC).
      c.log_max_msg = static_cast<uint8_t>(31 - __builtin_clz(dn.nic->attr.max_msg));
      c.cqe_version = 1;
      c.roce = true;
      c.atomic = true;
      c.umem_uid_0 = true;
      c.log_pg_sz = 12;
      c.log_max_pd = 24;
      devx::encode_hca_caps(o, c);
    } else {
      // 8-byte compare-swap and fetch-add on RC QPs, in host byte order at the
      // target (the engine's atomics: fabric.cpp).
      cmd::AtomicCaps a;
      a.req_8b_endianness_mode = 1;
      a.supported_8b_endianness_mode_1 = true;
      a.atomic_operations = 0x3;
      a.atomic_size_qp = 1u << 3;
      devx::encode_atomic_caps(o, a);
    }
    return 0;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  } catch (const std::exception& e) {
    KINET_LOG(Warn, "%s: DevX general command failed: %s", dn.nic->name.c_str(), e.what());
    return EINVAL;
  }
}

mlx5dv_devx_umem* umem_reg(ibv_context* ctx, void* addr, size_t size, uint32_t access, uint32_t* id) {
  DevxNic& dn = dn_of(ctx);
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  if (!addr || size == 0 || size - 1 > std::numeric_limits<uint64_t>::max() - a) return errno = EINVAL, nullptr;
  if (access & ~uint32_t(kAccessAll)) return errno = EINVAL, nullptr;
  try {
    if (cuda::pointer_kind(addr) != MemoryKind::Host) return errno = EOPNOTSUPP, nullptr;
    check_mapping(dn.nic->name, a, size, true);
    std::lock_guard<std::mutex> g(dn.mu);
    *id = dn.next_umem++;
    dn.umems[*id] = Umem{static_cast<uint8_t*>(addr), size, 0};
    return reinterpret_cast<mlx5dv_devx_umem*>(new UmemRef{&dn, *id});
  } catch (const std::bad_alloc&) {
    return errno = ENOMEM, nullptr;
  } catch (const Error& e) {
    KINET_LOG(Warn, "%s: UMEM registration refused: %s", dn.nic->name.c_str(), e.what());
    return errno = e.code() == ErrorCode::ResourceExhausted ? ENOMEM : EFAULT, nullptr;
  }
}

int umem_dereg(mlx5dv_devx_umem* umem) {
  UmemRef* r = ref<UmemRef>(umem);
  DevxNic& dn = *r->dn;
  std::lock_guard<std::mutex> g(dn.mu);
  auto it = dn.umems.find(r->id);
  if (it->second.users) {
    KINET_LOG(Warn, "%s: UMEM %u still holds %u rings", dn.nic->name.c_str(), r->id, it->second.users);
    return EBUSY;
  }
  dn.umems.erase(it);
  delete r;
  return 0;
}

mlx5dv_devx_uar* alloc_uar(ibv_context* ctx, uint32_t flags, uint32_t* page_id, void** reg_addr) {
  DevxNic& dn = dn_of(ctx);
  if (flags > 1) return errno = EINVAL, nullptr;  // BF (0): a BlueFlame window; NC (1): the doorbell word
  try {
    std::lock_guard<std::mutex> g(dn.mu);
    const uint32_t page = dn.next_uar++ & 0xffffffu;
    auto& u = dn.uars[page] = std::make_unique<Uar>(flags == 0);
    *page_id = page;
    *reg_addr = u->word;
    return reinterpret_cast<mlx5dv_devx_uar*>(new UarRef{&dn, page});
  } catch (const std::exception&) {  // bad_alloc, or no pinned memory for the doorbell word
    return errno = ENOMEM, nullptr;
  }
}

void free_uar(mlx5dv_devx_uar* uar) {
  UarRef* r = ref<UarRef>(uar);
  DevxNic& dn = *r->dn;
  std::lock_guard<std::mutex> g(dn.mu);
  if (auto it = dn.uars.find(r->page); it != dn.uars.end()) {
    if (it->second->qpn) it->second->freed = true;  // its QP still rings it: the word lives until the QP goes
    else dn.uars.erase(it);
  }
  delete r;
}

const mlx5::DevxOps kDevxOps = {obj_create, obj_modify, obj_query, obj_destroy, general_cmd,
                                umem_reg,   umem_dereg, alloc_uar, free_uar};
}  // namespace

const mlx5::DevxOps& devx_nic_ops() { return kDevxOps; }
}  // namespace kinet::emu
