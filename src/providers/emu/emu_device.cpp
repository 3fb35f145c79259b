// kinet emu — host control path objects of the software NIC.
#include <cstring>
#include <random>

#include "core/cuda_shim.hpp"
#include "core/log.hpp"
#include "providers/emu/emu.hpp"

namespace kinet::emu {
namespace {

bool is_pow2(uint64_t v) { return v && !(v & (v - 1)); }
uint32_t log2u(uint64_t v) { return static_cast<uint32_t>(63 - __builtin_clzll(v)); }

constexpr uint32_t kMaxQpWr = 1u << 15;  // 16-bit WQE counters in CQEs need < 2^16 outstanding

class EmuMr final : public MemoryRegion {
 public:
  EmuMr(std::shared_ptr<Nic> nic, uint32_t key, const MrEntry& e) : nic_(std::move(nic)), key_(key), e_(e) {}
  ~EmuMr() override {
    {
      std::unique_lock<std::shared_mutex> g(nic_->mr_mu);
      nic_->mrs.erase(key_);
    }
    // Wait out WQEs in flight that looked the key up before it was erased.
    std::unique_lock<std::shared_mutex> drain(memory_guard());
  }
  void* addr() const override { return reinterpret_cast<void*>(e_.addr); }
  size_t length() const override { return e_.len; }
  uint32_t access() const override { return e_.access; }
  MemoryKind kind() const override { return e_.kind; }
  uint32_t lkey_value() const override { return key_; }
  uint32_t rkey_value() const override { return key_; }

 private:
  std::shared_ptr<Nic> nic_;
  uint32_t key_;
  MrEntry e_;
};

class EmuQueuePair final : public QueuePair {
 public:
  explicit EmuQueuePair(std::shared_ptr<EmuQp> qp) : qp_(std::move(qp)) {}
  ~EmuQueuePair() override {
    Nic& nic = *qp_->nic;
    {
      std::lock_guard<std::mutex> g(nic.qp_mu);
      nic.qps.erase(qp_->qpn);
      nic.qp_generation.fetch_add(1, std::memory_order_acq_rel);
    }
    // Flush what was announced, wait out the engine and peers: after this no
    // byte moves on the QP's behalf.
    nic.quiesce_qp(*qp_);
  }
  uint32_t qpn() const override { return qp_->qpn; }
  QpState state() const override { return qp_->state.load(std::memory_order_acquire); }
  QpInfo info() const override {
    QpInfo i{};
    i.magic = QpInfo::kMagic;
    i.version = 1;
    i.provider = 1;
    i.node = qp_->nic->node;
    i.qpn = qp_->qpn;
    i.psn = 0;
    i.mtu = 5;  // 4096
    i.port = 1;
    return i;
  }
  void to_init(uint32_t remote_access) override {
    expect(QpState::Reset, "to_init");
    if (remote_access & ~uint32_t(kAccessAll))
      throw Error(ErrorCode::InvalidArgument, name() + ": to_init: unknown access bits " + hex(remote_access));
    qp_->remote_access = remote_access;
    qp_->state.store(QpState::Init, std::memory_order_release);
  }
  void to_rtr(const QpInfo& r) override {
    expect(QpState::Init, "to_rtr");
    if (r.magic != QpInfo::kMagic || r.version != 1)
      throw Error(ErrorCode::InvalidArgument, name() + ": to_rtr: remote QP info is not a kinet v1 blob");
    if (r.provider != 1)
      throw Error(ErrorCode::NotSupported, name() + ": to_rtr: remote QP belongs to provider " +
                                               std::to_string(r.provider) + ", emu connects only to emu");
    if (!fabric().reachable(r.node))
      throw Error(ErrorCode::NotFound, name() + ": to_rtr: no emu device at fabric address " + std::to_string(r.node) +
                                           " in this process");
    qp_->remote_node = r.node;
    qp_->remote_qpn = r.qpn;
    qp_->state.store(QpState::Rtr, std::memory_order_release);
  }
  void to_rts() override {
    expect(QpState::Rtr, "to_rts");
    qp_->state.store(QpState::Rts, std::memory_order_release);
  }
  void to_error() override { qp_->state.store(QpState::Error, std::memory_order_release); }
  dev::QpHandle handle() const override {
    dev::QpHandle h{};
    h.sq = qp_->sq;
    h.dbrec = qp_->dbrec;
    h.db = qp_->db;
    h.state = qp_->qstate;
    h.cq.cqes = qp_->cqes;
    h.cq.dbrec = qp_->cq_dbrec;
    h.cq.log_n = qp_->log_n;
    h.cq.cqn = qp_->qpn;
    h.timeout_ns = qp_->cfg.timeout_ms * 1000000ull;
    h.log_n = qp_->log_n;
    h.qpn = qp_->qpn;
    h.qpn_be8 = kinet::detail::bswap32_constexpr(qp_->qpn << 8);
    h.max_msg = qp_->max_msg;
    h.signal_period = qp_->cfg.signal_period;
    // The emulator reads the doorbell record from host memory: the fence
    // before it must be system-scope wherever the rings are.
    h.rings_in_gpu_memory = 0;
    return h;
  }
  std::string last_error() const override {
    std::lock_guard<std::mutex> g(qp_->err_mu);
    return qp_->last_error;
  }

 private:
  std::shared_ptr<EmuQp> qp_;
  std::string name() const { return qp_->nic->name + " QP " + hex(qp_->qpn); }
  void expect(QpState want, const char* op) const {
    const QpState s = state();
    if (s != want)
      throw Error(ErrorCode::BadState, name() + ": " + op + " needs state " + qp_state_name(want) + ", QP is in " +
                                           qp_state_name(s));
  }
};

class EmuPd final : public ProtectionDomain {
 public:
  EmuPd(std::shared_ptr<Nic> nic, uint32_t id) : nic_(std::move(nic)), id_(id) {}

  std::unique_ptr<MemoryRegion> reg_mr(void* addr, size_t len, uint32_t access) override {
    if (!addr || len == 0)
      throw Error(ErrorCode::InvalidArgument, nic_->name + ": reg_mr: empty range (addr " +
                                                  hex(reinterpret_cast<uint64_t>(addr)) + ", length " +
                                                  std::to_string(len) + ")");
    if (access & ~uint32_t(kAccessAll))
      throw Error(ErrorCode::InvalidArgument, nic_->name + ": reg_mr: unknown access bits " + hex(access));
    if ((access & (kRemoteWrite | kRemoteAtomic)) && !(access & kLocalWrite))
      throw Error(ErrorCode::InvalidArgument,
                  nic_->name + ": reg_mr: remote write or atomic access requires local write (as in ibv_reg_mr)");
    MrEntry e;
    e.addr = reinterpret_cast<uint64_t>(addr);
    e.len = len;
    e.access = access;
    e.pd = id_;
    e.kind = cuda::pointer_kind(addr);
    if (e.kind == MemoryKind::Gpu && !nic_->attr.gpu_memory)
      throw Error(ErrorCode::NotSupported, nic_->name + ": reg_mr: GPU memory but no CUDA runtime to reach it");
    uint32_t key;
    {
      std::unique_lock<std::shared_mutex> g(nic_->mr_mu);
      if (nic_->next_mr_index >= 0xffffff)
        throw Error(ErrorCode::ResourceExhausted, nic_->name + ": reg_mr: memory keys exhausted");
      key = (nic_->next_mr_index++ << 8) | nic_->key_tag;
      nic_->mrs[key] = e;
    }
    KINET_LOG(Debug, "%s: registered [%s, +%zu) access %#x key %s", nic_->name.c_str(), hex(e.addr).c_str(), len,
              access, hex(key).c_str());
    return std::make_unique<EmuMr>(nic_, key, e);
  }

  std::unique_ptr<QueuePair> create_qp(const QpConfig& cfg_in) override {
    QpConfig cfg = cfg_in;
    if (!is_pow2(cfg.sq_depth) || cfg.sq_depth < 2 || cfg.sq_depth > kMaxQpWr)
      throw Error(ErrorCode::InvalidArgument, nic_->name + ": create_qp: sq_depth " + std::to_string(cfg.sq_depth) +
                                                  " must be a power of two in [2, " + std::to_string(kMaxQpWr) + "]");
    if (cfg.signal_period == 0) cfg.signal_period = cfg.sq_depth >= 4 ? cfg.sq_depth / 4 : 1;
    if (!is_pow2(cfg.signal_period) || cfg.signal_period > cfg.sq_depth / 2)
      throw Error(ErrorCode::InvalidArgument, nic_->name + ": create_qp: signal_period " +
                                                  std::to_string(cfg.signal_period) +
                                                  " must be a power of two <= sq_depth/2");
    if (cfg.max_msg == 0 || cfg.max_msg > nic_->attr.max_msg) cfg.max_msg = nic_->attr.max_msg;
    if (cfg.timeout_ms == 0) cfg.timeout_ms = default_timeout_ms();
    const bool gpu = cfg.rings == RingPlacement::Gpu;
    if (gpu && !cuda::available())
      throw Error(ErrorCode::NotSupported, nic_->name + ": create_qp: rings in GPU memory need a GPU");

    auto qp = std::make_shared<EmuQp>();
    qp->nic = nic_;
    qp->pd = id_;
    qp->cfg = cfg;
    qp->log_n = log2u(cfg.sq_depth);
    qp->max_msg = cfg.max_msg;
    // Ring block (GPU memory when asked): send ring, CQ, poster state.
    const size_t n = cfg.sq_depth;
    const size_t sq_bytes = n * mlx5::kSendWqeBB, cq_bytes = n * mlx5::kCqeSize;
    const size_t ring_bytes = sq_bytes + cq_bytes + sizeof(dev::SqState);
    qp->block_on_gpu = gpu;
    qp->block = static_cast<uint8_t*>(gpu ? cuda::alloc_device(ring_bytes) : cuda::alloc_pinned(ring_bytes));
    qp->sq = qp->block;
    qp->cqes = reinterpret_cast<mlx5::Cqe64*>(qp->block + sq_bytes);
    qp->qstate = reinterpret_cast<dev::SqState*>(qp->block + sq_bytes + cq_bytes);
    if (!gpu && cfg.posters == Posters::Gpu) {
      if (!cuda::available())
        throw Error(ErrorCode::NotSupported, nic_->name + ": create_qp: posters == Gpu needs a GPU");
      qp->gpu_state = static_cast<dev::SqState*>(cuda::alloc_device(sizeof(dev::SqState)));
      qp->qstate = qp->gpu_state;
    }
    // Doorbell block, always in pinned host memory: the engine polls it.
    uint8_t* dbb = static_cast<uint8_t*>(cuda::alloc_pinned(64));
    qp->dbrec = reinterpret_cast<uint32_t*>(dbb);
    qp->cq_dbrec = reinterpret_cast<uint32_t*>(dbb + 8);
    qp->db = reinterpret_cast<uint64_t*>(dbb + 16);
    *qp->db = prm::kNoDoorbell;  // the engine swaps this back in after each doorbell it takes
    // CQEs start invalid with owner 1, so the first lap (owner 0) is recognised.
    std::vector<uint8_t> init(cq_bytes, 0);
    for (size_t i = 0; i < n; ++i) init[i * mlx5::kCqeSize + 63] = mlx5::kCqeInitOpOwn;
    if (gpu) cuda::copy(qp->cqes, init.data(), cq_bytes);
    else std::memcpy(qp->cqes, init.data(), cq_bytes);
    {
      std::lock_guard<std::mutex> g(nic_->qp_mu);
      qp->qpn = nic_->next_qpn++;
      nic_->qps[qp->qpn] = qp;
      nic_->qp_generation.fetch_add(1, std::memory_order_acq_rel);
    }
    KINET_LOG(Debug, "%s: created QP %s depth %u rings in %s memory", nic_->name.c_str(), hex(qp->qpn).c_str(),
              cfg.sq_depth, gpu ? "GPU" : "host");
    return std::make_unique<EmuQueuePair>(std::move(qp));
  }

 private:
  std::shared_ptr<Nic> nic_;
  uint32_t id_;
};

class EmuDevice final : public Device {
 public:
  explicit EmuDevice(std::shared_ptr<Nic> nic) : nic_(std::move(nic)) {
    nic_->engine = std::thread([n = nic_.get()] { n->run_engine(); });
  }
  ~EmuDevice() override {
    fabric().detach(nic_->node);  // peers now see this NIC as gone
    std::vector<std::shared_ptr<EmuQp>> qps;
    {
      std::lock_guard<std::mutex> g(nic_->qp_mu);
      for (auto& [n, qp] : nic_->qps) qps.push_back(qp);
    }
    for (auto& qp : qps) nic_->quiesce_qp(*qp);  // QPs still alive: flushed, nothing moves after this
    nic_->stop.store(true, std::memory_order_release);
    if (nic_->engine.joinable()) nic_->engine.join();
  }
  const DeviceAttr& attr() const override { return nic_->attr; }
  std::unique_ptr<ProtectionDomain> alloc_pd() override {
    return std::make_unique<EmuPd>(nic_, nic_->next_pd.fetch_add(1));
  }

 private:
  std::shared_ptr<Nic> nic_;
};
}  // namespace

EmuQp::~EmuQp() {
  if (block_on_gpu) cuda::free_device(block);
  else cuda::free_pinned(block);
  cuda::free_pinned(dbrec);
  cuda::free_device(gpu_state);
}

std::unique_ptr<Device> open_device(std::string_view name, const DeviceOptions& opt) {
  auto nic = std::make_shared<Nic>();
  if (opt.emu_max_msg == 0 || opt.emu_max_msg > (1u << 31))
    throw Error(ErrorCode::InvalidArgument, "emu: emu_max_msg must be in [1, 2^31]");
  nic->attr.provider = "emu";
  nic->attr.max_qp_wr = kMaxQpWr;
  nic->attr.max_msg = opt.emu_max_msg;
  nic->attr.gpu_memory = cuda::available();
  nic->key_tag = static_cast<uint8_t>(std::random_device{}() | 1);
  fabric().attach(nic, name);
  nic->attr.name = nic->name;
  return std::make_unique<EmuDevice>(std::move(nic));
}
}  // namespace kinet::emu
