// kinet emu — the software NIC's verbs for the mlx5 provider (VerbsOps: PD,
// MR, port, close) and its opening; its DevX commands are in devx_nic.cpp.
#include <cerrno>
#include <cstring>
#include <limits>
#include <random>
#include <system_error>

#include "core/log.hpp"
#include "providers/emu/devx_nic_state.hpp"

namespace kinet::emu {
namespace {
using namespace devx_nic;


void close_nic(ibv_context* ctx) {
  DevxNic* dn = &dn_of(ctx);
  Nic& nic = *dn->nic;
  nic.closed.store(true, std::memory_order_release);
  fabric().detach(nic.node);
  {
    std::lock_guard<std::mutex> g(dn->mu);
    if (!dn->qps.empty() || !dn->cqs.empty() || !dn->umems.empty())
      KINET_LOG(Warn, "%s: closed with %zu QPs, %zu CQs and %zu UMEMs still registered", nic.name.c_str(),
                dn->qps.size(), dn->cqs.size(), dn->umems.size());
    for (auto& [n, qp] : dn->qps) nic.quiesce_qp(*qp.q);
  }
  nic.stop_engine();
  delete dn;
}

ibv_pd* alloc_pd(ibv_context* ctx, uint32_t* pdn) {
  DevxNic& dn = dn_of(ctx);
  try {
    std::lock_guard<std::mutex> g(dn.mu);
    *pdn = dn.nic->next_pd.fetch_add(1) & 0xffffffu;
    dn.pds.insert(*pdn);
    return reinterpret_cast<ibv_pd*>(new PdRef{&dn, *pdn});
  } catch (const std::bad_alloc&) {
    return errno = ENOMEM, nullptr;
  }
}

int dealloc_pd(ibv_pd* pd) {
  PdRef* r = ref<PdRef>(pd);
  DevxNic& dn = *r->dn;
  std::lock_guard<std::mutex> g(dn.mu);
  for (auto& [n, qp] : dn.qps)
    if (qp.p.pd == r->pdn) return EBUSY;
  {
    std::shared_lock<std::shared_mutex> m(dn.nic->mr_mu);
    for (auto& [k, mr] : dn.nic->mrs)
      if (mr.pd == r->pdn) return EBUSY;
  }
  dn.pds.erase(r->pdn);
  delete r;
  return 0;
}

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t len, uint32_t access, uint32_t* lkey, uint32_t* rkey) {
  PdRef* r = ref<PdRef>(pd);
  Nic& nic = *r->dn->nic;
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  if (!addr || len == 0 || len - 1 > std::numeric_limits<uint64_t>::max() - a) return errno = EINVAL, nullptr;
  if (access & ~uint32_t(kAccessAll)) return errno = EINVAL, nullptr;
  if ((access & (kRemoteWrite | kRemoteAtomic)) && !(access & kLocalWrite)) return errno = EINVAL, nullptr;
  try {
    MrEntry e;
    e.addr = a, e.len = len, e.access = access, e.pd = r->pdn, e.kind = cuda::pointer_kind(addr);
    if (e.kind == MemoryKind::Gpu && !nic.attr.gpu_memory) return errno = EOPNOTSUPP, nullptr;
    if (e.kind == MemoryKind::Host) check_mapping(nic.name, a, len, access & kLocalWrite);
    std::unique_lock<std::shared_mutex> g(nic.mr_mu);
    uint32_t key = 0;
    if (!nic.mr_ids.take(&key)) return errno = ENOMEM, nullptr;
    try {
      nic.mrs[key] = e;
    } catch (...) {
      nic.mr_ids.release(key >> 8);
      throw;
    }
    *lkey = *rkey = key;
    return reinterpret_cast<ibv_mr*>(new MrRef{r->dn, key});  // leaks the key on bad_alloc: not worth a path
  } catch (const std::bad_alloc&) {
    return errno = ENOMEM, nullptr;
  } catch (const Error& e) {
    KINET_LOG(Info, "%s: reg_mr refused: %s", nic.name.c_str(), e.what());
    return errno = e.code() == ErrorCode::ResourceExhausted ? ENOMEM : EFAULT, nullptr;
  }
}

int dereg_mr(ibv_mr* mr) {
  MrRef* r = ref<MrRef>(mr);
  Nic& nic = *r->dn->nic;
  {
    std::unique_lock<std::shared_mutex> g(nic.mr_mu);
    nic.mrs.erase(r->key);
  }
  // WQEs in flight that looked the key up before it went finish first.
  drain_memory();
  {
    std::unique_lock<std::shared_mutex> g(nic.mr_mu);
    nic.mr_ids.release(r->key >> 8);
  }
  delete r;
  return 0;
}

int query_port(ibv_context* ctx, uint8_t port, mlx5::PortInfo* out) {
  const DevxNic& dn = dn_of(ctx);
  if (port != 1) return EINVAL;
  *out = {};
  out->ethernet = true;
  out->gid_index = 0;
  std::memcpy(out->gid, kGidPrefix, 8);
  for (int i = 0; i < 8; ++i) out->gid[8 + i] = static_cast<uint8_t>(dn.nic->node >> (56 - 8 * i));
  out->active_mtu = 5;  // 4096 B
  return 0;
}

const mlx5::VerbsOps kVerbsOps = {close_nic, alloc_pd, dealloc_pd, reg_mr, dereg_mr, query_port};
}  // namespace

const mlx5::VerbsOps& devx_nic_verbs() { return kVerbsOps; }

DevxNicHandle open_devx_nic(std::string_view want, const DeviceOptions& opt) {
  const std::string who = "mlx5_" + std::string(want);
  const uint32_t m = opt.emu_max_msg;
  if (m == 0 || (m & (m - 1)) || m > (1u << kDevxLogMaxMsg))
    throw Error(ErrorCode::InvalidArgument, who + ": open: emu_max_msg " + std::to_string(m) +
                                                " must be a power of two in [1, 2^30] (the NIC reports log_max_msg)");
  check_id_limits(who, opt);
  auto dn = std::make_unique<DevxNic>();
  auto nic = std::make_shared<Nic>();
  nic->attr.provider = "mlx5";
  nic->attr.max_qp_wr = 1u << kDevxLogMaxQpSz;
  nic->attr.max_msg = m;
  nic->attr.max_mr = opt.emu_max_mr;
  nic->attr.max_qp = opt.emu_max_qp;
  nic->attr.gpu_memory = cuda::available();
  nic->key_tag = static_cast<uint8_t>(std::random_device{}() | 1);
  nic->mr_ids.limit = opt.emu_max_mr;
  nic->mr_ids.first_gen = nic->key_tag;
  nic->qp_ids.limit = opt.emu_max_qp;
  fabric().attach(nic, want);
  nic->attr.name = nic->name;
  try {
    nic->start_engine();
  } catch (const std::system_error& e) {
    fabric().detach(nic->node);
    throw Error(ErrorCode::ResourceExhausted, nic->name + ": open: can't start the NIC engine thread: " + e.what());
  }
  dn->nic = nic;
  DevxNicHandle h{reinterpret_cast<ibv_context*>(dn.release()), nic->name};
  return h;
}
}  // namespace kinet::emu
