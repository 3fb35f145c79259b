// kinet — SDK mode's devices over the DOCA SDK (see device.hpp).
#include "providers/doca/device.hpp"

#include <cerrno>
#include <limits>

#include "core/cuda_shim.hpp"
#include "providers/doca/objects.hpp"
#include "providers/emu/devx_nic.hpp"

namespace kinet::doca {
namespace {
using namespace detail;

constexpr uint32_t kMaxLogSq = 15;      // the device verbs' ring index arithmetic (as the mlx5 provider)
constexpr uint32_t kMaxMsg = 1u << 30;  // the device verbs carry at most 2^30 bytes per WQE

class Mr final : public MemoryRegion {
 public:
  Mr(std::shared_ptr<PdRes> pd, ibv_mr* mr, void* addr, size_t len, uint32_t access, MemoryKind kind, uint32_t lkey,
     uint32_t rkey)
      : pd_(std::move(pd)), mr_(mr), addr_(addr), len_(len), access_(access), kind_(kind), lkey_(lkey), rkey_(rkey) {}
  ~Mr() override {
    std::lock_guard<std::mutex> g(pd_->s->mu);
    if (const int rc = pd_->s->be.verbs->dereg_mr(mr_); rc != 0)
      KINET_LOG(Error, "%s: deregistering key %s failed (%s)", pd_->s->name().c_str(), hex(lkey_).c_str(),
                errno_text(rc).c_str());
  }
  void* addr() const override { return addr_; }
  size_t length() const override { return len_; }
  uint32_t access() const override { return access_; }
  MemoryKind kind() const override { return kind_; }
  uint32_t lkey_value() const override { return lkey_; }
  uint32_t rkey_value() const override { return rkey_; }

 private:
  std::shared_ptr<PdRes> pd_;
  ibv_mr* mr_;
  void* addr_;
  size_t len_;
  uint32_t access_;
  MemoryKind kind_;
  uint32_t lkey_, rkey_;
};

class Pd final : public ProtectionDomain {
 public:
  explicit Pd(std::shared_ptr<PdRes> pd) : pd_(std::move(pd)) {}
  std::unique_ptr<MemoryRegion> reg_mr(void* addr, size_t len, uint32_t access) override {
    Shared& s = *pd_->s;
    s.check_open(s.name(), "reg_mr");
    const uint64_t a = reinterpret_cast<uint64_t>(addr);
    const std::string range = "[" + hex(a) + ", +" + std::to_string(len) + ")";
    if (!addr || len == 0) throw Error(ErrorCode::InvalidArgument, s.name() + ": reg_mr: empty range " + range);
    if (access & ~uint32_t(kAccessAll))
      throw Error(ErrorCode::InvalidArgument, s.name() + ": reg_mr: unknown access bits " + hex(access));
    if ((access & (kRemoteWrite | kRemoteAtomic)) && !(access & kLocalWrite))
      throw Error(ErrorCode::InvalidArgument,
                  s.name() + ": reg_mr: remote write or atomic access requires local write (as in ibv_reg_mr)");
    if (len - 1 > std::numeric_limits<uint64_t>::max() - a)
      throw Error(ErrorCode::InvalidArgument, s.name() + ": reg_mr: " + range + " wraps the address space");
    const MemoryKind kind = cuda::pointer_kind(addr);
    uint32_t lkey = 0, rkey = 0;
    ibv_mr* mr = nullptr;
    {
      std::lock_guard<std::mutex> g(s.mu);
      mr = s.be.verbs->reg_mr(pd_->pd, addr, len, access, &lkey, &rkey);
    }
    if (!mr) {
      const int err = errno;
      const ErrorCode code = err == ENOMEM       ? ErrorCode::ResourceExhausted
                             : err == EOPNOTSUPP ? ErrorCode::NotSupported
                                                 : ErrorCode::InvalidArgument;
      throw Error(code, s.name() + ": reg_mr: " + range + " was refused (" + errno_text(err) + ")");
    }
    return std::make_unique<Mr>(pd_, mr, addr, len, access, kind, lkey, rkey);
  }
  std::unique_ptr<QueuePair> create_qp(const QpConfig& in) override {
    Shared& s = *pd_->s;
    s.check_open(s.name(), "create_qp");
    QpConfig cfg = in;
    const uint32_t max_wr = s.attr.max_qp_wr;
    if (!is_pow2(cfg.sq_depth) || cfg.sq_depth < 2 || cfg.sq_depth > max_wr)
      throw Error(ErrorCode::InvalidArgument, s.name() + ": create_qp: sq_depth " + std::to_string(cfg.sq_depth) +
                                                  " must be a power of two in [2, " + std::to_string(max_wr) + "]");
    if (cfg.signal_period == 0) cfg.signal_period = cfg.sq_depth >= 4 ? cfg.sq_depth / 4 : 1;
    if (!is_pow2(cfg.signal_period) || cfg.signal_period > cfg.sq_depth / 2)
      throw Error(ErrorCode::InvalidArgument, s.name() + ": create_qp: signal_period " +
                                                  std::to_string(cfg.signal_period) +
                                                  " must be a power of two <= sq_depth/2");
    if (cfg.max_msg > s.attr.max_msg)
      throw Error(ErrorCode::InvalidArgument, s.name() + ": create_qp: max_msg " + std::to_string(cfg.max_msg) +
                                                  " exceeds the device's max_msg " + std::to_string(s.attr.max_msg));
    if (cfg.max_msg == 0) cfg.max_msg = s.attr.max_msg;
    if (cfg.timeout_ms == 0) cfg.timeout_ms = default_timeout_ms();
    if (cfg.rings == RingPlacement::Gpu || cfg.posters == Posters::Gpu)
      throw Error(ErrorCode::NotSupported,
                  s.name() + ": create_qp: GPU rings and GPU posters are not wired in DOCA SDK mode yet "
                             "(doca_gpu_create and the GPU-side UAR export); unset DOCA_SDK_LIB_PATH to use kinet's "
                             "open control path");
    return make_qp(pd_, cfg);
  }

 private:
  std::shared_ptr<PdRes> pd_;
};

class DocaDevice final : public Device {
 public:
  explicit DocaDevice(std::shared_ptr<Shared> s) : s_(std::move(s)) {}
  ~DocaDevice() override { s_->closed.store(true, std::memory_order_release); }
  const DeviceAttr& attr() const override { return s_->attr; }
  std::unique_ptr<ProtectionDomain> alloc_pd() override {
    s_->check_open(s_->name(), "alloc_pd");
    auto res = std::make_shared<PdRes>();
    std::lock_guard<std::mutex> g(s_->mu);
    res->pd = s_->be.verbs->alloc_pd(s_->be.ctx, &res->pdn);
    if (!res->pd) {
      const int err = errno;
      throw Error(err == ENOMEM ? ErrorCode::ResourceExhausted : ErrorCode::System,
                  s_->name() + ": alloc_pd failed (" + errno_text(err) + ")");
    }
    res->s = s_;
    const api::Fns& f = s_->f();
    const std::string who = s_->name() + " PD " + std::to_string(res->pdn);
    // On a throw, g unlocks before res goes (declared after it), and ~PdRes releases what was made.
    s_->check(f.rdma_bridge_open_dev_from_pd(res->pd, &res->dev), "doca_rdma_bridge_open_dev_from_pd", who);
    s_->check(f.verbs_pd_import(res->pd, &res->vpd), "doca_verbs_bridge_verbs_pd_import", who);
    return std::make_unique<Pd>(std::move(res));
  }

 private:
  std::shared_ptr<Shared> s_;
};
}  // namespace

std::unique_ptr<Device> open_device(std::shared_ptr<const Sdk> sdk, const Backend& b) {
  if (!sdk || !b.ctx || !b.verbs)
    throw Error(ErrorCode::InvalidArgument, b.name + ": open in DOCA SDK mode: the SDK, the device context and the "
                                                     "verbs table are required");
  std::shared_ptr<Shared> s;
  try {
    s = std::make_shared<Shared>(std::move(sdk), b);
  } catch (...) {
    b.verbs->close(b.ctx);
    throw;
  }
  std::lock_guard<std::mutex> g(s->mu);
  const api::Fns& f = s->f();
  const std::string who = b.name + ": open in DOCA SDK mode";
  if (const int rc = b.verbs->query_port(b.ctx, 1, &s->port); rc != 0)
    throw Error(ErrorCode::System, who + ": querying port 1 failed (" + errno_text(rc) + ")");
  if (s->port.active_mtu < 1 || s->port.active_mtu > 5)
    throw Error(ErrorCode::System, who + ": port 1 reports MTU code " + std::to_string(s->port.active_mtu));
  s->check(f.verbs_context_import(b.ctx, 0, &s->vctx), "doca_verbs_bridge_verbs_context_import", b.name);
  {
    Attr a{*s, f.device_attr_free, "doca_verbs_device_attr_free"};
    s->check(f.verbs_query_device(b.ctx, &a.o), "doca_verbs_bridge_verbs_query_device", b.name);
    const uint32_t wr = f.device_attr_get_max_qp_wr(a.o);
    if (wr < 2)
      throw Error(ErrorCode::System, who + ": doca_verbs_device_attr_get_max_qp_wr reports " + std::to_string(wr));
    s->attr.max_qp_wr = 1u << std::min<uint32_t>(log2u(wr), kMaxLogSq);
    s->attr.max_qp = std::min<uint32_t>(f.device_attr_get_max_qp(a.o), 1u << 24);
    s->attr.max_mr = std::min<uint32_t>(f.device_attr_get_max_mr(a.o), (1u << 24) - 1);
  }
  s->attr.name = b.name;
  s->attr.provider = "doca";
  s->attr.max_msg = kMaxMsg;
  s->attr.gpu_memory = false;
  return std::make_unique<DocaDevice>(s);
}

std::unique_ptr<Device> open_emu_device(std::shared_ptr<const Sdk> sdk, std::string_view name,
                                        const DeviceOptions& opt) {
  constexpr std::string_view kPrefix = "mlx5_";
  if (name.substr(0, kPrefix.size()) != kPrefix)
    throw Error(ErrorCode::InvalidArgument, "open: '" + std::string(name) + "' is not an mlx5_emu device name");
  if (!sdk || !sdk->standin())
    throw Error(ErrorCode::NotSupported, "open " + std::string(name) +
                                             " in DOCA SDK mode: the DOCA SDK can't drive the software NIC (only "
                                             "kinet's stand-in SDK can)");
  const emu::DevxNicHandle h = emu::open_devx_nic(name.substr(kPrefix.size()), opt);
  return open_device(std::move(sdk), {h.ctx, std::string(kPrefix) + h.name, &emu::devx_nic_verbs()});
}
}  // namespace kinet::doca

