// kinet — the mlx5 provider over DevxOps + VerbsOps (see provider.hpp).
#include "providers/mlx5/provider.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "core/cuda_shim.hpp"
#include "core/doorbell.hpp"
#include "core/log.hpp"
#include "core/qp_checks.hpp"
#include "kinet/mlx5/wire.hpp"
#include "providers/mlx5/host_objects.hpp"

namespace kinet::mlx5 {
namespace {
namespace c = cmd;

using host::errno_text;
using host::hex;
using host::log2u;

constexpr uint32_t kMaxLogSq = 15;   // qpc.log_sq_size is 4 bits
constexpr uint32_t kMaxLogMsg = 30;  // the device verbs carry at most 2^30 bytes per WQE
constexpr uint8_t kRetry = 7, kRnrRetry = 7, kAckTimeout = 14, kMinRnrNak = 12;

// Everything the device's objects share. ctx is closed when the last of them goes.
struct Shared {
  explicit Shared(const Backend& b) : be(b), devx(b.ctx, b.name, *b.devx), cpu_db(b.name) {}
  ~Shared() { be.verbs->close(be.ctx); }
  Shared(const Shared&) = delete;
  Backend be;
  std::mutex mu;  // serialises every call into the tables (Devx is not thread-safe)
  Devx devx;
  std::atomic<bool> closed{false};  // the Device object is gone
  doorbell::CpuDoorbell cpu_db;     // rings for CpuAssisted QPs
  std::atomic<bool> noted_cpu_fallback{false};  // Auto's fallback is logged once per device at Warn
  DeviceAttr attr;
  c::HcaCaps caps;
  c::AtomicCaps atomic;
  PortInfo port;
  uint8_t log_max_msg = 0;

  const std::string& name() const { return be.name; }
  void check_open(const std::string& who, const char* op) const {
    if (closed.load(std::memory_order_acquire))
      throw Error(ErrorCode::BadState, who + ": " + op + ": " + be.name + " was closed");
  }
};

// A PD, freed when its last user (the PD object, an MR, a QP) goes.
struct PdRes {
  std::shared_ptr<Shared> s;
  ibv_pd* pd = nullptr;
  uint32_t pdn = 0;
  ~PdRes() {
    if (!s || !pd) return;  // alloc_pd failed: nothing to free
    std::lock_guard<std::mutex> g(s->mu);
    if (const int rc = s->be.verbs->dealloc_pd(pd); rc != 0)
      KINET_LOG(Error, "%s: freeing PD %u failed (%s)", s->name().c_str(), pdn, errno_text(rc).c_str());
  }
};

class Qp final : public QueuePair {
 public:
  Qp(std::shared_ptr<PdRes> pd, const QpConfig& cfg) : pd_(std::move(pd)), s_(pd_->s), cfg_(cfg) {
    log_n_ = log2u(cfg.sq_depth);
    lay_ = host::RingLayout(cfg.sq_depth, false);
    rings_gpu_ = cfg.rings == RingPlacement::Gpu;
    if (rings_gpu_) cfg_.posters = Posters::Gpu;  // only kernels reach rings in GPU memory
    if (cfg_.posters == Posters::Gpu) {
      if (!cuda::available())
        throw Error(ErrorCode::NotSupported, s_->name() + ": create_qp: posters == Gpu needs a GPU");
      state_ = static_cast<dev::SqState*>(cuda::alloc_device(sizeof(dev::SqState)));
      state_on_gpu_ = true;
    } else {
      state_ = static_cast<dev::SqState*>(cuda::alloc_pinned(sizeof(dev::SqState)));
    }
    try {
      decide_doorbell();
      refuse_cpu_doorbell_on_gpu_rings();
      block_ = static_cast<uint8_t*>(rings_gpu_ ? cuda::alloc_device(lay_.bytes) : cuda::alloc_pinned(lay_.bytes));
      init_rings();
      std::lock_guard<std::mutex> g(s_->mu);
      Devx& dx = s_->devx;
      umem_ = rings_gpu_ ? register_gpu_umem(dx) : dx.register_umem(block_, lay_.bytes, kLocalWrite);
      // BlueFlame: a BF-type page, whose register is the write-combining window; else non-cached.
      uar_ = dx.alloc_uar(db_mode_ == dev::DoorbellMode::BlueFlame ? kUarAllocBf : kUarAllocNc);
      map_uar_for_gpu();
      refuse_cpu_doorbell_on_gpu_rings();  // a failed UAR mapping may have chosen it
      c::CreateCq cq;
      cq.log_cq_size = static_cast<uint8_t>(log_n_);
      cq.uar_page = uar_.page_id;
      cq.cq_umem_valid = cq.dbr_umem_valid = true;
      cq.cq_umem_id = cq.dbr_umem_id = umem_.id;
      cq.cq_umem_offset = lay_.cq;
      cq.dbr_addr = lay_.cq_dbr;
      cq_ = dx.create_cq(cq);
      c::CreateQp qp;
      qp.pd = pd_->pdn;
      qp.log_msg_max = s_->log_max_msg;
      qp.log_sq_size = static_cast<uint8_t>(log_n_);
      qp.uar_page = uar_.page_id;
      qp.cqn_snd = qp.cqn_rcv = cq_.id();
      qp.dbr_umem_valid = qp.wq_umem_valid = true;
      qp.dbr_umem_id = qp.wq_umem_id = umem_.id;
      qp.dbr_addr = lay_.qp_dbr;
      qp.wq_umem_offset = lay_.sq;
      qp_ = dx.create_qp(qp);
      watch();
    } catch (...) {
      release();
      throw;
    }
    KINET_LOG(Debug, "%s: created QP %s (CQ %s) depth %u", s_->name().c_str(), hex(qp_.id()).c_str(),
              hex(cq_.id()).c_str(), cfg.sq_depth);
  }
  // DESTROY_QP first (the NIC flushes what was announced and lets go of the
  // rings), then the CQ, the UAR and the UMEM, then the memory.
  ~Qp() override { release(); }

  uint32_t qpn() const override { return qp_.id(); }
  QpState state() const override {
    std::lock_guard<std::mutex> g(s_->mu);
    try {
      switch (static_cast<c::QpState>(s_->devx.query_qp(const_cast<Devx::Object&>(qp_)).state)) {
        case c::QpState::Rst: return QpState::Reset;
        case c::QpState::Init: return QpState::Init;
        case c::QpState::Rtr: return QpState::Rtr;
        case c::QpState::Rts: return QpState::Rts;
        default: return QpState::Error;
      }
    } catch (const Error& e) {
      KINET_LOG(Error, "%s", e.what());
      return QpState::Error;
    }
  }
  QpInfo info() const override {
    s_->check_open(who(), "info");
    return host::qp_info(s_->port, qp_.id());
  }
  void to_init(uint32_t remote_access) override {
    s_->check_open(who(), "to_init");
    if (remote_access & ~uint32_t(kAccessAll))
      throw Error(ErrorCode::InvalidArgument, who() + ": to_init: unknown access bits " + hex(remote_access));
    c::Rst2InitQp p;
    p.port = 1;
    p.rre = remote_access & kRemoteRead;
    p.rwe = remote_access & kRemoteWrite;
    p.rae = remote_access & kRemoteAtomic;
    if (p.rae) p.atomic_mode = static_cast<uint8_t>(c::AtomicMode::Up8Bytes);
    std::lock_guard<std::mutex> g(s_->mu);
    s_->devx.rst2init(qp_, p);
  }
  void to_rtr(const QpInfo& r) override {
    s_->check_open(who(), "to_rtr");
    kinet::detail::check_remote_qp(who(), r, 2, "mlx5 connects only to mlx5");
    c::Init2RtrQp p;
    p.mtu = std::min(r.mtu, s_->port.active_mtu);
    p.log_msg_max = s_->log_max_msg;
    p.remote_qpn = r.qpn;
    p.next_rcv_psn = r.psn;
    p.min_rnr_nak = kMinRnrNak;
    p.log_rra_max = static_cast<uint8_t>(std::min<uint32_t>(s_->caps.log_max_ra_res_qp, 7));
    p.path.vhca_port_num = 1;
    if (s_->port.ethernet) {  // RoCE v2: routed by GID
      p.path.grh = true;
      std::memcpy(p.path.rgid.data(), r.gid, 16);
      p.path.src_addr_index = s_->port.gid_index;
      p.path.hop_limit = 64;
      p.path.udp_sport = static_cast<uint16_t>(0xc000 | (qp_.id() & 0x3fff));  // spread flows over ECMP paths
    } else {
      p.path.rlid = r.lid;
    }
    std::lock_guard<std::mutex> g(s_->mu);
    s_->devx.init2rtr(qp_, p);
  }
  void to_rts() override {
    s_->check_open(who(), "to_rts");
    c::Rtr2RtsQp p;
    p.next_send_psn = 0;
    p.log_sra_max = static_cast<uint8_t>(std::min<uint32_t>(s_->caps.log_max_ra_req_qp, 7));
    p.retry_count = kRetry;
    p.rnr_retry = kRnrRetry;
    p.ack_timeout = kAckTimeout;
    std::lock_guard<std::mutex> g(s_->mu);
    s_->devx.rtr2rts(qp_, p);
  }
  void to_error() override {
    s_->check_open(who(), "to_error");
    std::lock_guard<std::mutex> g(s_->mu);
    s_->devx.to_err(qp_);
  }
  void reset() override {
    s_->check_open(who(), "reset");
    std::lock_guard<std::mutex> g(s_->mu);
    unwatch();  // the CPU doorbell thread must not ring the old counter into the new rings
    s_->devx.to_rst(qp_);
    init_rings();  // the NIC forgot its progress: the rings start over, empty
    watch();
  }
  dev::QpHandle handle() const override {
    s_->check_open(who(), "handle");
    dev::QpHandle h{};
    h.sq = block_ + lay_.sq;
    h.dbrec = reinterpret_cast<uint32_t*>(block_ + lay_.qp_dbr);
    h.db = static_cast<uint64_t*>(uar_gpu_ ? uar_gpu_ : uar_.reg_addr);
    h.state = state_;
    h.cq.cqes = reinterpret_cast<Cqe64*>(block_ + lay_.cq);
    h.cq.dbrec = reinterpret_cast<uint32_t*>(block_ + lay_.cq_dbr);
    h.cq.log_n = log_n_;
    h.cq.cqn = cq_.id();
    h.timeout_ns = host::timeout_ns(cfg_.timeout_ms);
    h.log_n = log_n_;
    h.qpn = qp_.id();
    h.qpn_be8 = kinet::detail::bswap32_constexpr(qp_.id() << 8);
    h.max_msg = cfg_.max_msg;
    h.signal_period = cfg_.signal_period;
    h.rings_in_gpu_memory = rings_gpu_ ? 1 : 0;
    h.db_mode = db_mode_;
    return h;
  }
  std::string last_error() const override {
    return host::last_error_text(state_, state_on_gpu_, s_->name(), qp_.id());
  }

 private:
  std::shared_ptr<PdRes> pd_;
  std::shared_ptr<Shared> s_;
  QpConfig cfg_;
  uint32_t log_n_ = 0;
  host::RingLayout lay_{2, false};
  uint8_t* block_ = nullptr;
  dev::SqState* state_ = nullptr;
  bool state_on_gpu_ = false;
  bool rings_gpu_ = false;  // block_ is GPU memory (RingPlacement::Gpu)
  Devx::Umem umem_;
  Devx::Uar uar_;
  void* uar_gpu_ = nullptr;  // the UAR register as kernels address it (map_uar_for_gpu), or null
  Devx::Object cq_, qp_;
  dev::DoorbellMode db_mode_ = dev::DoorbellMode::Uar;
  uint64_t watch_id_ = 0;  // CpuAssisted: this QP's entry in the device's CPU doorbell thread
  static constexpr uint32_t kUarAllocBf = 0, kUarAllocNc = 1;  // MLX5DV_UAR_ALLOC_TYPE_BF / _NC

  std::string who() const { return s_->name() + " QP " + hex(qp_.id()); }
  // map_failure: why mapping this QP's UAR into the GPU failed (empty: not tried yet).
  void decide_doorbell(const std::string& map_failure = {}) {
    doorbell::UarReach reach;
    reach.gpu_posters = cfg_.posters == Posters::Gpu;
    reach.gpu_mappable = s_->be.uar_gpu_mappable && map_failure.empty();
    reach.why_not = map_failure.empty() ? s_->be.uar_gpu_why : "mapping the UAR into the GPU failed: " + map_failure;
    const doorbell::Decision d = doorbell::decide(s_->name() + ": create_qp", cfg_.doorbell,
                                                  std::getenv("KINET_DOORBELL_MODE"),
                                                  doorbell::Caps{true, true, true}, reach);
    db_mode_ = d.mode;
    if (d.note.empty()) return;
    if (!s_->noted_cpu_fallback.exchange(true)) KINET_LOG(Warn, "%s", d.note.c_str());
    else KINET_LOG(Debug, "%s", d.note.c_str());
  }
  // GPU posters on a ConnectX: its UAR page is I/O memory the GPU must map.
  // A failure decides again: Auto becomes CpuAssisted (the CPU thread rings
  // from the host mapping), an explicit Uar/BlueFlame throws NotSupported.
  void map_uar_for_gpu() {
    if (cfg_.posters != Posters::Gpu || !s_->be.uar_is_io_memory || db_mode_ == dev::DoorbellMode::CpuAssisted)
      return;
    std::string why;
    uar_gpu_ = cuda::map_io_memory(uar_.reg_addr, 64, &why);
    if (!uar_gpu_) decide_doorbell(why);
  }
  // The CPU doorbell thread reads the doorbell record with plain loads: not
  // one in GPU memory.
  void refuse_cpu_doorbell_on_gpu_rings() const {
    if (rings_gpu_ && db_mode_ == dev::DoorbellMode::CpuAssisted)
      throw Error(ErrorCode::NotSupported,
                  s_->name() + ": create_qp: rings in GPU memory need a doorbell the GPU rings itself (uar or bf): "
                               "the CPU-assisted doorbell's thread can't watch a doorbell record in GPU memory (" +
                      (s_->be.uar_gpu_mappable ? std::string("CPU-assisted was asked for")
                                               : "the UAR can't be mapped into the GPU: " + s_->be.uar_gpu_why) +
                      "); use RingPlacement::Host");
  }
  // The rings' UMEM over GPU memory: its dma-buf when the CUDA driver exports
  // one and rdma-core takes it, else the plain registration, which reaches
  // GPU memory through nvidia-peermem. A failure names both attempts.
  Devx::Umem register_gpu_umem(Devx& dx) {
    std::string why;
    if (dx.has_umem_dmabuf()) {
      uint64_t offset = 0;
      const int fd = cuda::dmabuf_fd(block_, lay_.bytes, &offset, &why);
      if (fd >= 0) {
        try {
          Devx::Umem u = dx.register_umem_dmabuf(fd, offset, lay_.bytes, kLocalWrite);
          ::close(fd);
          return u;
        } catch (const Error& e) {
          ::close(fd);
          why = e.what();
        }
      }
    } else {
      why = "rdma-core has no mlx5dv_devx_umem_reg_ex";
    }
    KINET_LOG(Debug, "%s: rings in GPU memory: no dma-buf UMEM (%s); registering through nvidia-peermem",
              s_->name().c_str(), why.c_str());
    try {
      return dx.register_umem(block_, lay_.bytes, kLocalWrite);
    } catch (const Error& e) {
      throw Error(e.code(), std::string(e.what()) + "; rings in GPU memory need a dma-buf UMEM (" + why +
                                ") or nvidia-peermem (modprobe nvidia_peermem)");
    }
  }
  void watch() {
    if (db_mode_ == dev::DoorbellMode::CpuAssisted)
      watch_id_ = s_->cpu_db.add(reinterpret_cast<uint32_t*>(block_ + lay_.qp_dbr), static_cast<uint64_t*>(uar_.reg_addr),
                                 kinet::detail::bswap32_constexpr(qp_.id() << 8));
  }
  void unwatch() {
    if (watch_id_) s_->cpu_db.remove(watch_id_);
    watch_id_ = 0;
  }
  // RESET contents: records and posting state zero, every CQE invalid with
  // owner 1 so the first lap (owner 0) is recognised.
  void init_rings() {
    if (rings_gpu_) {  // written as one image: the CPU can't store into GPU memory
      std::vector<uint8_t> img(lay_.bytes);
      host::clear_rings(img.data(), lay_, cfg_.sq_depth);
      cuda::copy(block_, img.data(), img.size());
    } else {
      host::clear_rings(block_, lay_, cfg_.sq_depth);
    }
    const dev::SqState zero{};
    if (state_on_gpu_) cuda::copy(state_, &zero, sizeof zero);
    else std::memcpy(state_, &zero, sizeof zero);
  }
  void release() {
    unwatch();
    {
      std::lock_guard<std::mutex> g(s_->mu);
      qp_.reset();
      cq_.reset();
      cuda::unmap_io_memory(uar_gpu_ ? uar_.reg_addr : nullptr);
      uar_gpu_ = nullptr;
      uar_.reset();
      umem_.reset();
    }
    if (rings_gpu_) cuda::free_device(block_);
    else cuda::free_pinned(block_);
    block_ = nullptr;
    if (state_on_gpu_) cuda::free_device(state_);
    else cuda::free_pinned(state_);
    state_ = nullptr;
  }
};

class Pd final : public ProtectionDomain {
 public:
  explicit Pd(std::shared_ptr<PdRes> pd) : pd_(std::move(pd)) {}
  std::unique_ptr<MemoryRegion> reg_mr(void* addr, size_t len, uint32_t access) override {
    return host::register_mr(pd_, addr, len, access);
  }
  std::unique_ptr<QueuePair> create_qp(const QpConfig& in) override {
    Shared& s = *pd_->s;
    s.check_open(s.name(), "create_qp");
    const QpConfig cfg = kinet::detail::checked_qp_config(s.name(), in, s.attr.max_qp_wr, s.attr.max_msg);
    if (cfg.rings == RingPlacement::Gpu && !s.be.gpu_rings)
      throw Error(ErrorCode::NotSupported,
                  s.name() + ": create_qp: rings in GPU memory: " + s.be.gpu_rings_why + "; use RingPlacement::Host");
    return std::make_unique<Qp>(pd_, cfg);
  }

 private:
  std::shared_ptr<PdRes> pd_;
};

class Mlx5Device final : public Device {
 public:
  explicit Mlx5Device(std::shared_ptr<Shared> s) : s_(std::move(s)) {}
  ~Mlx5Device() override { s_->closed.store(true, std::memory_order_release); }
  const DeviceAttr& attr() const override { return s_->attr; }
  std::unique_ptr<ProtectionDomain> alloc_pd() override {
    s_->check_open(s_->name(), "alloc_pd");
    auto res = std::make_shared<PdRes>();
    {
      std::lock_guard<std::mutex> g(s_->mu);
      res->pd = host::alloc_pd(*s_->be.verbs, s_->be.ctx, &res->pdn, s_->name());
    }
    res->s = s_;
    return std::make_unique<Pd>(std::move(res));
  }

 private:
  std::shared_ptr<Shared> s_;
};
}  // namespace

std::unique_ptr<Device> open_device(const Backend& b) {
  if (!b.ctx || !b.devx || !b.verbs)
    throw Error(ErrorCode::InvalidArgument, b.name + ": open: the device context and both entry-point tables are "
                                                     "required");
  std::shared_ptr<Shared> s;
  try {
    s = std::make_shared<Shared>(b);
  } catch (...) {
    b.verbs->close(b.ctx);
    throw;
  }
  std::lock_guard<std::mutex> g(s->mu);
  s->caps = s->devx.query_general_caps();
  s->atomic = s->devx.query_atomic_caps();
  host::query_port1(*b.verbs, b.ctx, &s->port, b.name + ": open");
  if (!s->caps.atomic || !(s->atomic.atomic_size_qp & (1u << 3)) || (s->atomic.atomic_operations & 3) != 3)
    throw Error(ErrorCode::NotSupported, b.name + ": open: the device has no 8-byte compare-swap and fetch-add on RC "
                                                  "QPs (atomic caps: operations " +
                                             hex(s->atomic.atomic_operations) + ", sizes " +
                                             hex(s->atomic.atomic_size_qp) + ")");
  s->log_max_msg = static_cast<uint8_t>(std::min<uint32_t>(s->caps.log_max_msg, kMaxLogMsg));
  s->attr.name = b.name;
  s->attr.provider = "mlx5";
  s->attr.max_qp_wr = 1u << std::min<uint32_t>(s->caps.log_max_qp_sz, kMaxLogSq);
  s->attr.max_msg = 1u << s->log_max_msg;
  s->attr.gpu_memory = false;  // GPU memory registration (dma-buf / peermem) is not wired yet
  s->attr.max_mr = (1u << 24) - 1;
  s->attr.max_qp = 1u << std::min<uint32_t>(s->caps.log_max_qp, 24);
  return std::make_unique<Mlx5Device>(s);
}
}  // namespace kinet::mlx5
