// kinet — SDK mode's devices over the DOCA SDK (see device.hpp).
#include "providers/doca/device.hpp"

#include <cerrno>
#include <limits>

#include "core/cuda_shim.hpp"
#include "core/qp_checks.hpp"
#include "providers/doca/objects.hpp"
#include "providers/emu/devx_nic.hpp"

namespace kinet::doca {
namespace {
using namespace detail;

constexpr uint32_t kMaxLogSq = 15;      // the device verbs' ring index arithmetic (as the mlx5 provider)
constexpr uint32_t kMaxMsg = 1u << 30;  // the device verbs carry at most 2^30 bytes per WQE

class Pd final : public ProtectionDomain {
 public:
  explicit Pd(std::shared_ptr<PdRes> pd) : pd_(std::move(pd)) {}
  std::unique_ptr<MemoryRegion> reg_mr(void* addr, size_t len, uint32_t access) override {
    return mlx5::host::register_mr(pd_, addr, len, access);
  }
  std::unique_ptr<QueuePair> create_qp(const QpConfig& in) override {
    Shared& s = *pd_->s;
    s.check_open(s.name(), "create_qp");
    const QpConfig cfg = kinet::detail::checked_qp_config(s.name(), in, s.attr.max_qp_wr, s.attr.max_msg);
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
    res->pd = mlx5::host::alloc_pd(*s_->be.verbs, s_->be.ctx, &res->pdn, s_->name());
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
  mlx5::host::query_port1(*b.verbs, b.ctx, &s->port, who);
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

