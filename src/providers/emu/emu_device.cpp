// kinet emu — host control path objects of the software NIC.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <random>
#include <system_error>

#include "core/cuda_shim.hpp"
#include "core/doorbell.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/qp_checks.hpp"
#include "fabric/remote_fabric.hpp"
#include "providers/emu/emu.hpp"

namespace kinet::emu {
namespace {

uint32_t log2u(uint64_t v) { return static_cast<uint32_t>(63 - __builtin_clzll(v)); }

constexpr uint32_t kMaxQpWr = 1u << 15;  // 16-bit WQE counters in CQEs need < 2^16 outstanding
constexpr uint32_t kMaxMsg = 1u << 30;   // ConnectX log_max_msg = 30

[[noreturn]] void closed_error(const Nic& nic, const std::string& who, const char* op) {
  throw Error(ErrorCode::BadState, who + ": " + op + ": " + nic.name + " was closed");
}

// Runs f; std::bad_alloc and std::system_error become kinet::Error saying
// which call failed and why (every failure of the API is a kinet::Error).
template <class F>
auto guarded(const std::string& who, const char* op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::ResourceExhausted, who + ": " + op + ": out of host memory");
  } catch (const std::system_error& e) {
    const bool exhausted = e.code() == std::errc::resource_unavailable_try_again ||
                           e.code() == std::errc::not_enough_memory;
    throw Error(exhausted ? ErrorCode::ResourceExhausted : ErrorCode::System,
                who + ": " + op + ": " + e.what());
  }
}

// Returns an id (MR key index or QPN index) to its space once the object
// that held it is gone: a member, so it runs after the destructor's body
// has removed the id from the NIC's tables.
struct IdLease {
  std::shared_ptr<Nic> nic;
  bool mr = true;
  uint32_t id = 0;
  IdLease(std::shared_ptr<Nic> n, bool is_mr, uint32_t i) : nic(std::move(n)), mr(is_mr), id(i) {}
  IdLease(const IdLease&) = delete;
  ~IdLease() {
    if (mr) {
      std::unique_lock<std::shared_mutex> g(nic->mr_mu);
      nic->mr_ids.release(id);
    } else {
      std::lock_guard<std::mutex> g(nic->qp_mu);
      nic->qp_ids.release(id);
    }
  }
};

// Puts a QP's rings in their RESET-state contents: the doorbell word holds
// "no doorbell" (the engine swaps it back in after each doorbell it takes),
// records and posting state zero, every CQE invalid with owner 1 so the first
// lap (owner 0) is recognised. Used by create_qp and by reset().
void init_rings(EmuQp& qp) {
  const size_t n = size_t(1) << qp.log_n;
  std::memset(qp.dbrec, 0, 8);
  std::memset(qp.cq_dbrec, 0, 8);
  *qp.db = prm::kNoDoorbell;
  std::memset(qp.db + 1, 0, 56);  // the rest of the BlueFlame window
  std::vector<uint8_t> cq(n * mlx5::kCqeSize, 0);
  for (size_t i = 0; i < n; ++i) cq[i * mlx5::kCqeSize + 63] = mlx5::kCqeInitOpOwn;
  const dev::SqState zero{};
  if (qp.block_on_gpu) cuda::copy(qp.cqes, cq.data(), cq.size());
  else std::memcpy(qp.cqes, cq.data(), cq.size());
  if (qp.block_on_gpu || qp.gpu_state) cuda::copy(qp.qstate, &zero, sizeof zero);
  else std::memcpy(qp.qstate, &zero, sizeof zero);
}

class EmuMr final : public MemoryRegion {
 public:
  EmuMr(std::shared_ptr<Nic> nic, uint32_t key, const MrEntry& e)
      : lease_(nic, true, key >> 8), nic_(std::move(nic)), key_(key), e_(e) {}
  ~EmuMr() override {
    {
      std::unique_lock<std::shared_mutex> g(nic_->mr_mu);
      nic_->mrs.erase(key_);
    }
    // Wait out WQEs in flight that looked the key up before it was erased.
    drain_memory();
  }
  void* addr() const override { return reinterpret_cast<void*>(e_.addr); }
  size_t length() const override { return e_.len; }
  uint32_t access() const override { return e_.access; }
  MemoryKind kind() const override { return e_.kind; }
  uint32_t lkey_value() const override { return key_; }
  uint32_t rkey_value() const override { return key_; }
  RemoteKey remote_key() const override {
    RemoteKey k = MemoryRegion::remote_key();
    k.provider = 1;
    k.node = nic_->node;
    return k;
  }

 private:
  IdLease lease_;  // destroyed last: the key index is free only once the key is gone
  std::shared_ptr<Nic> nic_;
  uint32_t key_;
  MrEntry e_;
};

class EmuQueuePair final : public QueuePair {
 public:
  EmuQueuePair(std::shared_ptr<EmuQp> qp, std::shared_ptr<doorbell::CpuDoorbell> cpu_db)
      : lease_(qp->nic, false, qp->qpn >> 8), qp_(std::move(qp)), cpu_db_(std::move(cpu_db)) {
    watch();
  }
  ~EmuQueuePair() override {
    unwatch();  // the CPU doorbell thread stops ringing before the QP goes
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
    check_alive("info");
    QpInfo i{};
    i.magic = QpInfo::kMagic;
    i.version = 1;
    i.provider = 1;
    i.node = qp_->nic->node;
    i.qpn = qp_->qpn;
    i.psn = 0;
    i.mtu = 5;  // 4096
    i.port = 1;
    if (qp_->nic->cross_process) i.endpoint = remote().endpoint(qp_->nic->via);
    return i;
  }
  void to_init(uint32_t remote_access) override {
    std::lock_guard<std::mutex> g(qp_->ctl_mu);
    check_alive("to_init");
    expect(QpState::Reset, "to_init");
    if (remote_access & ~uint32_t(kAccessAll))
      throw Error(ErrorCode::InvalidArgument, name() + ": to_init: unknown access bits " + hex(remote_access));
    qp_->remote_access = remote_access;
    move(QpState::Reset, QpState::Init, "to_init");
  }
  void to_rtr(const QpInfo& r) override {
    std::lock_guard<std::mutex> g(qp_->ctl_mu);
    check_alive("to_rtr");
    expect(QpState::Init, "to_rtr");
    kinet::detail::check_remote_qp(name(), r, 1, "emu connects only to emu");
    if (r.port != 1)
      throw Error(ErrorCode::InvalidArgument, name() + ": to_rtr: remote port " + std::to_string(r.port) +
                                                  " does not exist (emu devices have one port, 1)");
    std::shared_ptr<RemotePeer> peer;
    if (!fabric().reachable(r.node)) {
      const std::string none = name() + ": to_rtr: no emu device at fabric address " + hex(r.node) + " in this process";
      if (r.endpoint.empty())
        throw Error(ErrorCode::NotFound, none + " (its QP info names no endpoint: that device is not on the "
                                                "cross-process fabric)");
      if (!qp_->nic->cross_process)
        throw Error(ErrorCode::NotFound, none + ", and " + qp_->nic->name +
                                             " is not on the cross-process fabric to reach it at " + r.endpoint +
                                             " (DeviceOptions::emu_fabric, KINET_EMU_FABRIC=tcp)");
      try {
        peer = remote().peer(r.endpoint, qp_->nic->via);
      } catch (const Error& e) {
        throw Error(e.code(), name() + ": to_rtr: can't reach peer emu node " + hex(r.node) + ": " + e.what());
      }
    }
    {
      std::lock_guard<std::mutex> g(qp_->exec_mu);  // the engine reads `peer` under it
      qp_->peer = std::move(peer);
      qp_->remote_node = r.node;
      qp_->remote_qpn = r.qpn;
    }
    move(QpState::Init, QpState::Rtr, "to_rtr");
  }
  void to_rts() override {
    std::lock_guard<std::mutex> g(qp_->ctl_mu);
    check_alive("to_rts");
    move(QpState::Rtr, QpState::Rts, "to_rts");
  }
  void to_error() override {
    check_alive("to_error");
    {
      // The reason the flushes that follow have (an earlier error's stays).
      std::lock_guard<std::mutex> e(qp_->err_mu);
      if (qp_->last_error.empty() && qp_->state.load(std::memory_order_acquire) != QpState::Error)
        qp_->last_error = name() + ": moved to ERROR by QueuePair::to_error(); WQEs not yet executed complete "
                                   "flushed (CQE syndrome 0x5, WR_FLUSH_ERR)";
    }
    qp_->state.store(QpState::Error, std::memory_order_release);
  }
  void reset() override {
    std::lock_guard<std::mutex> g(qp_->ctl_mu);
    check_alive("reset");
    // Through ERROR, so nothing announced is executed any more; then the
    // engine forgets the QP's progress (outstanding WQEs are discarded, as a
    // modify to RESET does) and the rings start over, empty.
    qp_->state.store(QpState::Error, std::memory_order_release);
    unwatch();  // the CPU doorbell thread must not ring the old counter into the new rings
    qp_->nic->reset_qp(*qp_, [this] { init_rings(*qp_); });
    watch();
    {
      std::lock_guard<std::mutex> e(qp_->err_mu);
      qp_->last_error.clear();
    }
    qp_->remote_node = 0;
    qp_->remote_qpn = 0;
    qp_->state.store(QpState::Reset, std::memory_order_release);
  }
  dev::QpHandle handle() const override {
    check_alive("handle");
    dev::QpHandle h{};
    h.sq = qp_->sq;
    h.dbrec = qp_->dbrec;
    h.db = qp_->db;
    h.state = qp_->qstate;
    h.cq.cqes = qp_->cqes;
    h.cq.dbrec = qp_->cq_dbrec;
    h.cq.log_n = qp_->log_n;
    h.cq.cqn = qp_->qpn;
    // Saturates: UINT64_MAX ms must not wrap to a bound that expires at once.
    constexpr uint64_t kMaxMs = std::numeric_limits<uint64_t>::max() / 1000000ull;
    h.timeout_ns = qp_->cfg.timeout_ms > kMaxMs ? std::numeric_limits<uint64_t>::max()
                                                : qp_->cfg.timeout_ms * 1000000ull;
    h.log_n = qp_->log_n;
    h.qpn = qp_->qpn;
    h.qpn_be8 = kinet::detail::bswap32_constexpr(qp_->qpn << 8);
    h.max_msg = qp_->max_msg;
    h.signal_period = qp_->cfg.signal_period;
    // The emulator reads the doorbell record from host memory: the fence
    // before it must be system-scope wherever the rings are.
    h.rings_in_gpu_memory = 0;
    h.db_mode = qp_->db_mode;
    h.host_kick = qp_->host_kick ? 1 : 0;
    return h;
  }
  std::string last_error() const override {
    {
      std::lock_guard<std::mutex> g(qp_->err_mu);
      if (!qp_->last_error.empty()) return qp_->last_error;
    }
    // No error CQE: a failure the device verbs recorded (e.g. a timeout).
    uint8_t local = 0;
    uint32_t bad_abi = 0;
    const bool on_gpu = qp_->block_on_gpu || qp_->gpu_state;
    if (on_gpu) {
      try {
        dev::SqState st;
        cuda::copy(&st, qp_->qstate, sizeof st);
        local = st.local_error;
        bad_abi = st.bad_abi;
      } catch (const Error& e) {
        return std::string("device verbs: can't read the posting state: ") + e.what();
      }
    } else {
      local = std::atomic_ref<uint8_t>(qp_->qstate->local_error).load(std::memory_order_acquire);
      bad_abi = std::atomic_ref<uint32_t>(qp_->qstate->bad_abi).load(std::memory_order_relaxed);
    }
    return doorbell::local_error_text(local, bad_abi);
  }

 private:
  IdLease lease_;  // destroyed last: the QPN index is free only once the QP left the NIC's table
  std::shared_ptr<EmuQp> qp_;
  std::shared_ptr<doorbell::CpuDoorbell> cpu_db_;
  uint64_t watch_id_ = 0;  // CpuAssisted: this QP's entry in the device's CPU doorbell thread
  void watch() {
    if (qp_->db_mode == dev::DoorbellMode::CpuAssisted)
      watch_id_ = cpu_db_->add(qp_->dbrec, qp_->db, kinet::detail::bswap32_constexpr(qp_->qpn << 8));
  }
  void unwatch() {
    if (watch_id_) cpu_db_->remove(watch_id_);
    watch_id_ = 0;
  }
  std::string name() const { return qp_->nic->name + " QP " + hex(qp_->qpn); }
  // BadState once the device or the PD is gone.
  void check_alive(const char* op) const {
    if (qp_->nic->closed.load(std::memory_order_acquire)) closed_error(*qp_->nic, name(), op);
    if (qp_->pd_destroyed && qp_->pd_destroyed->load(std::memory_order_acquire))
      throw Error(ErrorCode::BadState, name() + ": " + op + ": its protection domain was destroyed");
  }
  void expect(QpState want, const char* op) const {
    const QpState s = state();
    if (s != want)
      throw Error(ErrorCode::BadState, name() + ": " + op + " needs state " + qp_state_name(want) + ", QP is in " +
                                           qp_state_name(s));
  }
  // from -> to only if the state is still `from` (the NIC may have moved it to ERROR).
  void move(QpState from, QpState to, const char* op) {
    QpState s = from;
    if (!qp_->state.compare_exchange_strong(s, to, std::memory_order_acq_rel, std::memory_order_acquire))
      throw Error(ErrorCode::BadState, name() + ": " + op + " needs state " + qp_state_name(from) + ", QP is in " +
                                           qp_state_name(s));
  }
};

class EmuPd final : public ProtectionDomain {
 public:
  EmuPd(std::shared_ptr<Nic> nic, uint32_t id, std::shared_ptr<doorbell::CpuDoorbell> cpu_db)
      : nic_(std::move(nic)), id_(id), destroyed_(std::make_shared<std::atomic<bool>>(false)),
        cpu_db_(std::move(cpu_db)) {}
  // What outlives the PD can't reach memory through it: its MRs' keys stop
  // matching (after WQEs already using them finish) and its QPs go to ERROR.
  ~EmuPd() override {
    destroyed_->store(true, std::memory_order_release);
    bool any = false;
    {
      std::unique_lock<std::shared_mutex> g(nic_->mr_mu);
      for (auto it = nic_->mrs.begin(); it != nic_->mrs.end();) {
        if (it->second.pd == id_) {
          it = nic_->mrs.erase(it);
          any = true;
        } else {
          ++it;
        }
      }
    }
    if (any) drain_memory();
    std::lock_guard<std::mutex> g(nic_->qp_mu);
    for (auto& [n, qp] : nic_->qps)
      if (qp->pd == id_) qp->state.store(QpState::Error, std::memory_order_release);
  }

  std::unique_ptr<MemoryRegion> reg_mr(void* addr, size_t len, uint32_t access) override {
    return guarded(nic_->name, "reg_mr", [&] { return register_range(addr, len, access); });
  }
  std::unique_ptr<QueuePair> create_qp(const QpConfig& cfg) override {
    return guarded(nic_->name, "create_qp", [&] { return make_qp(cfg); });
  }

 private:
  std::shared_ptr<Nic> nic_;
  uint32_t id_;
  std::shared_ptr<std::atomic<bool>> destroyed_;
  std::shared_ptr<doorbell::CpuDoorbell> cpu_db_;

  std::unique_ptr<MemoryRegion> register_range(void* addr, size_t len, uint32_t access) {
    if (nic_->closed.load(std::memory_order_acquire)) closed_error(*nic_, nic_->name, "reg_mr");
    const uint64_t a = reinterpret_cast<uint64_t>(addr);
    const std::string range = "[" + hex(a) + ", +" + std::to_string(len) + ")";
    if (!addr || len == 0)
      throw Error(ErrorCode::InvalidArgument, nic_->name + ": reg_mr: empty range (addr " + hex(a) + ", length " +
                                                  std::to_string(len) + ")");
    if (access & ~uint32_t(kAccessAll))
      throw Error(ErrorCode::InvalidArgument, nic_->name + ": reg_mr: unknown access bits " + hex(access));
    if ((access & (kRemoteWrite | kRemoteAtomic)) && !(access & kLocalWrite))
      throw Error(ErrorCode::InvalidArgument,
                  nic_->name + ": reg_mr: remote write or atomic access requires local write (as in ibv_reg_mr)");
    if (len - 1 > std::numeric_limits<uint64_t>::max() - a)
      throw Error(ErrorCode::InvalidArgument, nic_->name + ": reg_mr: " + range + " wraps the address space");
    MrEntry e;
    e.addr = a;
    e.len = len;
    e.access = access;
    e.pd = id_;
    e.kind = cuda::pointer_kind(addr);
    if (e.kind == MemoryKind::Gpu && !nic_->attr.gpu_memory)
      throw Error(ErrorCode::NotSupported, nic_->name + ": reg_mr: GPU memory but no CUDA runtime to reach it");
    if (e.kind == MemoryKind::Host) check_mapping(nic_->name, a, len, access & kLocalWrite);
    uint32_t key;
    {
      std::unique_lock<std::shared_mutex> g(nic_->mr_mu);
      if (!nic_->mr_ids.take(&key))
        throw Error(ErrorCode::ResourceExhausted, nic_->name + ": reg_mr: " + std::to_string(nic_->mr_ids.limit) +
                                                      " memory regions are alive (DeviceAttr::max_mr)");
      try {
        nic_->mrs[key] = e;
      } catch (...) {
        nic_->mr_ids.release(key >> 8);
        throw;
      }
    }
    std::unique_ptr<EmuMr> mr;
    try {
      mr = std::make_unique<EmuMr>(nic_, key, e);
    } catch (...) {
      std::unique_lock<std::shared_mutex> g(nic_->mr_mu);
      nic_->mrs.erase(key);
      nic_->mr_ids.release(key >> 8);
      throw;
    }
    KINET_LOG(Debug, "%s: registered [%s, +%zu) access %#x key %s", nic_->name.c_str(), hex(e.addr).c_str(), len,
              access, hex(key).c_str());
    return mr;
  }

  std::unique_ptr<QueuePair> make_qp(const QpConfig& cfg_in) {
    if (nic_->closed.load(std::memory_order_acquire)) closed_error(*nic_, nic_->name, "create_qp");
    const QpConfig cfg = kinet::detail::checked_qp_config(nic_->name, cfg_in, kMaxQpWr, nic_->attr.max_msg);
    const bool gpu = cfg.rings == RingPlacement::Gpu;
    if (gpu && !cuda::available())
      throw Error(ErrorCode::NotSupported, nic_->name + ": create_qp: rings in GPU memory need a GPU");
    // Every mode works here: the doorbell word and BlueFlame window are pinned
    // host memory, which kernels reach as they would a UAR mapped into the GPU.
    doorbell::UarReach reach;
    reach.gpu_posters = gpu || cfg.posters == Posters::Gpu;
    if (reach.gpu_posters) cuda::warn_if_lazy_loading("software NIC");  // kernels will wait on its thread
    const doorbell::Decision dm =
        doorbell::decide(nic_->name + ": create_qp", cfg.doorbell, std::getenv("KINET_DOORBELL_MODE"),
                         doorbell::Caps{true, true, true}, reach);
    if (!dm.note.empty()) KINET_LOG(Warn, "%s", dm.note.c_str());
    const dev::DoorbellMode db_mode = dm.mode;

    auto qp = std::make_shared<EmuQp>();
    qp->nic = nic_;
    qp->pd = id_;
    qp->pd_destroyed = destroyed_;
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
    // [0] doorbell record, [8] CQ record, [64] doorbell word = head of the 64-byte BlueFlame window.
    uint8_t* dbb = static_cast<uint8_t*>(cuda::alloc_pinned(128));
    qp->dbrec = reinterpret_cast<uint32_t*>(dbb);
    qp->cq_dbrec = reinterpret_cast<uint32_t*>(dbb + 8);
    qp->db = reinterpret_cast<uint64_t*>(dbb + 64);
    qp->db_mode = db_mode;
    // Host posters run the engine themselves (the CPU-assisted doorbell has a
    // thread of its own that rings later: its QPs stay with the engine).
    qp->host_kick = !gpu && cfg.posters == Posters::Host && db_mode != dev::DoorbellMode::CpuAssisted &&
                    env::get_u64("KINET_EMU_HOST_KICK", 1) != 0;
    init_rings(*qp);
    {
      std::lock_guard<std::mutex> g(nic_->qp_mu);
      if (!nic_->qp_ids.take(&qp->qpn))
        throw Error(ErrorCode::ResourceExhausted, nic_->name + ": create_qp: " + std::to_string(nic_->qp_ids.limit) +
                                                      " QPs are alive (DeviceAttr::max_qp)");
    }
    std::unique_ptr<EmuQueuePair> q;
    try {
      q = std::make_unique<EmuQueuePair>(qp, cpu_db_);  // from here its destructor returns the QPN
    } catch (...) {
      std::lock_guard<std::mutex> g(nic_->qp_mu);
      nic_->qp_ids.release(qp->qpn >> 8);
      throw;
    }
    {
      std::lock_guard<std::mutex> g(nic_->qp_mu);
      nic_->qps[qp->qpn] = qp;
      nic_->qp_generation.fetch_add(1, std::memory_order_acq_rel);
    }
    if (qp->host_kick) Nic::add_kick(qp);
    nic_->wake();  // an engine sleeping over kicked QPs looks at the new one now
    KINET_LOG(Debug, "%s: created QP %s depth %u rings in %s memory", nic_->name.c_str(), hex(qp->qpn).c_str(),
              cfg.sq_depth, gpu ? "GPU" : "host");
    return q;
  }
};

class EmuDevice final : public Device {
 public:
  explicit EmuDevice(std::shared_ptr<Nic> nic)
      : nic_(std::move(nic)), cpu_db_(std::make_shared<doorbell::CpuDoorbell>(nic_->name)), mark_{nic_} {
    try {
      nic_->start_engine();
    } catch (const std::system_error& e) {
      throw Error(ErrorCode::ResourceExhausted, nic_->name + ": open: can't start the NIC engine thread: " + e.what());
    }
  }
  ~EmuDevice() override {
    nic_->closed.store(true, std::memory_order_release);  // control calls racing the teardown throw BadState
    fabric().detach(nic_->node);  // peers now see this NIC as gone
    std::vector<std::shared_ptr<EmuQp>> qps;
    {
      std::lock_guard<std::mutex> g(nic_->qp_mu);
      for (auto& [n, qp] : nic_->qps) qps.push_back(qp);
    }
    for (auto& qp : qps) nic_->quiesce_qp(*qp);  // QPs still alive: flushed, nothing moves after this
    nic_->stop_engine();
    // Remote requests to it now find no device; the last one stops the listener.
    if (nic_->cross_process) remote().leave(nic_->node);
  }
  const DeviceAttr& attr() const override { return nic_->attr; }
  std::unique_ptr<ProtectionDomain> alloc_pd() override {
    return guarded(nic_->name, "alloc_pd",
                   [&]() -> std::unique_ptr<ProtectionDomain> {
                     return std::make_unique<EmuPd>(nic_, nic_->next_pd.fetch_add(1), cpu_db_);
                   });
  }

 private:
  std::shared_ptr<Nic> nic_;
  std::shared_ptr<doorbell::CpuDoorbell> cpu_db_;  // rings for CpuAssisted QPs; QPs keep it alive
  // Marks the NIC closed when the device goes (after the destructor's body):
  // PDs, MRs and QPs that outlive it then throw BadState.
  struct CloseMark {
    std::shared_ptr<Nic> nic;
    ~CloseMark() { nic->closed.store(true, std::memory_order_release); }
  } mark_;
};
}  // namespace

// Reads /proc/self/maps (sorted by address); without it (not Linux) nothing
// is checked.
void check_mapping(const std::string& who, uint64_t addr, uint64_t len, bool write) {
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (!f) {
    const int err = errno;
    if (err == ENOENT || err == EACCES) return;  // no procfs (not Linux): nothing to check against
    throw Error(err == ENOMEM || err == EMFILE || err == ENFILE ? ErrorCode::ResourceExhausted : ErrorCode::System,
                who + ": reg_mr: can't read /proc/self/maps: " + std::strerror(err));
  }
  const uint64_t last = addr + (len - 1);  // no wrap: checked by the caller
  uint64_t pos = addr;                     // first byte not yet found mapped
  bool done = false;                       // pos passed `last` (pos itself may have wrapped to 0)
  char* line = nullptr;
  size_t cap = 0;
  std::string why;
  errno = 0;
  while (!done && getline(&line, &cap, f) > 0) {
    unsigned long long lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%llx-%llx %4s", &lo, &hi, perms) != 3 || hi <= pos) continue;
    if (lo > pos) break;  // a hole at pos
    const char* hole = perms[0] != 'r' ? "is not readable (first unreadable byte "
                       : write && perms[1] != 'w' ? "is read-only but local write access needs a writable mapping "
                                                    "(first read-only byte "
                                                  : nullptr;
    if (hole) {
      why = hole + hex(pos) + ")";
      break;
    }
    done = hi - 1 >= last;
    pos = hi;
  }
  const bool nomem = errno == ENOMEM;
  std::free(line);
  std::fclose(f);
  const std::string range = "[" + hex(addr) + ", +" + std::to_string(len) + ")";
  if (nomem) throw Error(ErrorCode::ResourceExhausted, who + ": reg_mr: out of memory reading /proc/self/maps");
  if (!why.empty()) throw Error(ErrorCode::InvalidArgument, who + ": reg_mr: " + range + " " + why);
  if (!done)
    throw Error(ErrorCode::InvalidArgument,
                who + ": reg_mr: " + range + " is not mapped (first unmapped byte " + hex(pos) + ")");
}

bool IdSpace::take(uint32_t* id) {
  if (live >= limit) return false;
  for (;;) {
    cursor = cursor >= limit ? 1 : cursor + 1;
    if (cursor >= used.size()) {  // first use of this index (indices grow one at a time)
      used.resize(cursor + 1, false);
      gen.resize(cursor + 1, first_gen);
    }
    if (!used[cursor]) break;
  }
  used[cursor] = true;
  ++live;
  *id = cursor << 8 | gen[cursor];
  return true;
}

void IdSpace::release(uint32_t index) {
  if (index >= used.size() || !used[index]) return;
  used[index] = false;
  ++gen[index];  // the freed number never names the index's next object
  --live;
}

EmuQp::~EmuQp() {
  if (external_rings) return;
  if (block_on_gpu) cuda::free_device(block);
  else cuda::free_pinned(block);
  cuda::free_pinned(dbrec);
  cuda::free_device(gpu_state);
}

void check_id_limits(const std::string& who, const DeviceOptions& opt) {
  if (opt.emu_max_mr == 0 || opt.emu_max_mr > kMaxMrLimit)
    throw Error(ErrorCode::InvalidArgument,
                who + ": open: emu_max_mr " + std::to_string(opt.emu_max_mr) + " is outside [1, 2^24-1]");
  if (opt.emu_max_qp == 0 || opt.emu_max_qp > kMaxQpLimit)
    throw Error(ErrorCode::InvalidArgument,
                who + ": open: emu_max_qp " + std::to_string(opt.emu_max_qp) + " is outside [1, 2^16-1]");
}

namespace {
// DeviceOptions::emu_fabric, FromEnv resolved through KINET_EMU_FABRIC:
// false for local, else true and the transports in *via.
bool cross_process(const std::string& who, const DeviceOptions& opt, fabric::Via* via) {
  using F = DeviceOptions::Fabric;
  F f = opt.emu_fabric;
  if (f == F::FromEnv) {
    const std::string v = env::get_str("KINET_EMU_FABRIC", "local");
    if (v == "tcp") f = F::Tcp;
    else if (v == "shm") f = F::Shm;
    else if (v == "auto") f = F::Auto;
    else if (v == "local") f = F::Local;
    else
      throw Error(ErrorCode::InvalidArgument,
                  who + ": open: KINET_EMU_FABRIC=" + v + " is none of local, tcp, shm, auto");
  }
  switch (f) {
    case F::Local: return false;
    case F::Tcp: *via = fabric::Via::Tcp; return true;
    case F::Shm: *via = fabric::Via::Shm; return true;
    case F::Auto: *via = fabric::Via::Auto; return true;
    default: break;
  }
  throw Error(ErrorCode::InvalidArgument,
              who + ": open: emu_fabric " + std::to_string(static_cast<int>(opt.emu_fabric)) + " is unknown");
}
}  // namespace

std::unique_ptr<Device> open_device(std::string_view name, const DeviceOptions& opt) {
  const std::string who(name);
  if (opt.emu_max_msg == 0 || opt.emu_max_msg > kMaxMsg)
    throw Error(ErrorCode::InvalidArgument, who + ": open: emu_max_msg " + std::to_string(opt.emu_max_msg) +
                                                " is outside [1, 2^30] (a NIC's largest message)");
  check_id_limits(who, opt);
  return guarded(who, "open", [&]() -> std::unique_ptr<Device> {
    auto nic = std::make_shared<Nic>();
    nic->attr.provider = "emu";
    nic->attr.max_qp_wr = kMaxQpWr;
    nic->attr.max_msg = opt.emu_max_msg;
    nic->attr.max_mr = opt.emu_max_mr;
    nic->attr.max_qp = opt.emu_max_qp;
    nic->attr.gpu_memory = cuda::available();
    nic->key_tag = static_cast<uint8_t>(std::random_device{}() | 1);
    nic->mr_ids.limit = opt.emu_max_mr;
    nic->mr_ids.first_gen = nic->key_tag;  // keys of different NICs differ
    nic->qp_ids.limit = opt.emu_max_qp;
    nic->cross_process = cross_process(who, opt, &nic->via);
    fabric().attach(nic, name);
    try {
      nic->attr.name = nic->name;
      if (nic->cross_process) remote().join(nic, nic->via);
    } catch (...) {
      fabric().detach(nic->node);
      throw;
    }
    try {
      return std::make_unique<EmuDevice>(nic);
    } catch (...) {
      if (nic->cross_process) remote().leave(nic->node);
      fabric().detach(nic->node);
      throw;
    }
  });
}
}  // namespace kinet::emu
