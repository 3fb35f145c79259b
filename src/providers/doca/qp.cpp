// kinet — SDK mode's queue pairs: UMEM, UAR, CQ and QP made by the DOCA SDK
// on kinet's ring block, transitions by doca_verbs_qp_modify (device.hpp).
#include <limits>
#include <optional>

#include "core/cuda_shim.hpp"
#include "core/qp_checks.hpp"
#include "kinet/mlx5/wire.hpp"
#include "providers/doca/objects.hpp"

namespace kinet::doca::detail {
namespace {
using namespace kinet::mlx5;  // wire constants (WQE BB, CQE) and Cqe64
using mlx5::host::RingLayout;

constexpr uint8_t kRetry = 7, kRnrRetry = 7, kAckTimeout = 14, kMinRnrNak = 12;
constexpr uint8_t kRdAtomic = 16;  // outstanding reads/atomics per QP (ConnectX reports 16)

class Qp final : public QueuePair {
 public:
  Qp(std::shared_ptr<PdRes> pd, const QpConfig& cfg) : pd_(std::move(pd)), s_(pd_->s), cfg_(cfg) {
    log_n_ = log2u(cfg.sq_depth);
    lay_ = RingLayout(cfg.sq_depth, true);  // the CQ's record where DOCA puts it
    state_ = static_cast<dev::SqState*>(cuda::alloc_pinned(sizeof(dev::SqState)));
    try {
      block_ = static_cast<uint8_t*>(cuda::alloc_pinned(lay_.bytes));
      init_rings();
      std::lock_guard<std::mutex> g(s_->mu);
      create();
    } catch (...) {
      release();
      throw;
    }
    KINET_LOG(Debug, "%s: DOCA SDK created QP %s (CQ %s) depth %u", s_->name().c_str(), hex(qpn_).c_str(),
              hex(cqn_).c_str(), cfg.sq_depth);
  }
  ~Qp() override { release(); }

  uint32_t qpn() const override { return qpn_; }
  QpState state() const override {
    std::lock_guard<std::mutex> g(s_->mu);
    try {
      return query_state();
    } catch (const Error& e) {
      KINET_LOG(Error, "%s", e.what());
      return QpState::Error;
    }
  }
  QpInfo info() const override {
    s_->check_open(who(), "info");
    return mlx5::host::qp_info(s_->port, qpn_);
  }
  void to_init(uint32_t remote_access) override {
    s_->check_open(who(), "to_init");
    if (remote_access & ~uint32_t(kAccessAll))
      throw Error(ErrorCode::InvalidArgument, who() + ": to_init: unknown access bits " + hex(remote_access));
    const bool atomic = remote_access & kRemoteAtomic;
    modify(QpState::Reset, api::kQpInit, "to_init", [&](Obj a) {
      const api::Fns& f = s_->f();
      ck(f.qp_attr_set_allow_remote_write(a, (remote_access & kRemoteWrite) ? 1 : 0),
         "doca_verbs_qp_attr_set_allow_remote_write");
      ck(f.qp_attr_set_allow_remote_read(a, (remote_access & kRemoteRead) ? 1 : 0),
         "doca_verbs_qp_attr_set_allow_remote_read");
      ck(f.qp_attr_set_atomic_mode(a, atomic ? api::kAtomicUpTo8Bytes : api::kAtomicNone),
         "doca_verbs_qp_attr_set_atomic_mode");
      ck(f.qp_attr_set_pkey_index(a, 0), "doca_verbs_qp_attr_set_pkey_index");
      ck(f.qp_attr_set_port_num(a, 1), "doca_verbs_qp_attr_set_port_num");
      return api::kAttrAllowRemoteWrite | api::kAttrAllowRemoteRead | api::kAttrAtomicMode | api::kAttrPkeyIndex |
             api::kAttrPortNum;
    });
  }
  void to_rtr(const QpInfo& r) override {
    s_->check_open(who(), "to_rtr");
    kinet::detail::check_remote_qp(who(), r, 2, "a ConnectX QP connects only to mlx5");
    const uint8_t mtu = std::min(r.mtu, s_->port.active_mtu);  // IB enum 1..5; DOCA's is 0..4
    modify(QpState::Init, api::kQpRtr, "to_rtr", [&](Obj a) {
      const api::Fns& f = s_->f();
      // The path object lives with the QP (as DOCA's samples keep theirs
      // until teardown): a new connection after reset() replaces it.
      destroy(ah_, f.ah_attr_destroy, "doca_verbs_ah_attr_destroy");
      ck(f.ah_attr_create(s_->vctx, &ah_), "doca_verbs_ah_attr_create");
      if (s_->port.ethernet) {  // RoCE v2: routed by GID
        api::Gid gid{};
        std::memcpy(gid.raw, r.gid, 16);
        static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        ck(f.ah_attr_set_addr_type(ah_, std::memcmp(r.gid, v4, 12) == 0 ? api::kAddrIpv4 : api::kAddrIpv6),
           "doca_verbs_ah_attr_set_addr_type");
        ck(f.ah_attr_set_gid(ah_, gid), "doca_verbs_ah_attr_set_gid");
        ck(f.ah_attr_set_sgid_index(ah_, s_->port.gid_index), "doca_verbs_ah_attr_set_sgid_index");
        ck(f.ah_attr_set_hop_limit(ah_, 64), "doca_verbs_ah_attr_set_hop_limit");
      } else {
        ck(f.ah_attr_set_addr_type(ah_, api::kAddrIbNoGrh), "doca_verbs_ah_attr_set_addr_type");
        ck(f.ah_attr_set_dlid(ah_, r.lid), "doca_verbs_ah_attr_set_dlid");
      }
      ck(f.qp_attr_set_ah_attr(a, ah_), "doca_verbs_qp_attr_set_ah_attr");
      ck(f.qp_attr_set_path_mtu(a, mtu - 1), "doca_verbs_qp_attr_set_path_mtu");
      ck(f.qp_attr_set_dest_qp_num(a, r.qpn), "doca_verbs_qp_attr_set_dest_qp_num");
      ck(f.qp_attr_set_rq_psn(a, r.psn), "doca_verbs_qp_attr_set_rq_psn");
      ck(f.qp_attr_set_min_rnr_timer(a, kMinRnrNak), "doca_verbs_qp_attr_set_min_rnr_timer");
      ck(f.qp_attr_set_max_dest_rd_atomic(a, kRdAtomic), "doca_verbs_qp_attr_set_max_dest_rd_atomic");
      return api::kAttrAhAttr | api::kAttrPathMtu | api::kAttrDestQpNum | api::kAttrRqPsn | api::kAttrMinRnrTimer |
             api::kAttrMaxDestRdAtomic;
    });
  }
  void to_rts() override {
    s_->check_open(who(), "to_rts");
    modify(QpState::Rtr, api::kQpRts, "to_rts", [&](Obj a) {
      const api::Fns& f = s_->f();
      ck(f.qp_attr_set_sq_psn(a, 0), "doca_verbs_qp_attr_set_sq_psn");
      ck(f.qp_attr_set_ack_timeout(a, kAckTimeout), "doca_verbs_qp_attr_set_ack_timeout");
      ck(f.qp_attr_set_retry_cnt(a, kRetry), "doca_verbs_qp_attr_set_retry_cnt");
      ck(f.qp_attr_set_rnr_retry(a, kRnrRetry), "doca_verbs_qp_attr_set_rnr_retry");
      ck(f.qp_attr_set_max_rd_atomic(a, kRdAtomic), "doca_verbs_qp_attr_set_max_rd_atomic");
      return api::kAttrSqPsn | api::kAttrAckTimeout | api::kAttrRetryCnt | api::kAttrRnrRetry |
             api::kAttrMaxQpRdAtomic;
    });
  }
  void to_error() override {
    s_->check_open(who(), "to_error");
    modify(std::nullopt, api::kQpErr, "to_error", [](Obj) { return 0; });
  }
  void reset() override {
    s_->check_open(who(), "reset");
    modify(std::nullopt, api::kQpRst, "reset", [](Obj) { return 0; });
    init_rings();  // the NIC forgot its progress: the rings start over, empty
  }
  dev::QpHandle handle() const override {
    s_->check_open(who(), "handle");
    dev::QpHandle h{};
    h.sq = sq_;
    h.dbrec = qp_dbr_;
    h.db = static_cast<uint64_t*>(db_);
    h.state = state_;
    h.cq.cqes = reinterpret_cast<Cqe64*>(cq_buf_);
    h.cq.dbrec = cq_ci_dbr_;
    h.cq.log_n = log_n_;
    h.cq.cqn = cqn_;
    h.timeout_ns = mlx5::host::timeout_ns(cfg_.timeout_ms);
    h.log_n = log_n_;
    h.qpn = qpn_;
    h.qpn_be8 = kinet::detail::bswap32_constexpr(qpn_ << 8);
    h.max_msg = cfg_.max_msg;
    h.signal_period = cfg_.signal_period;
    h.rings_in_gpu_memory = 0;
    return h;
  }
  std::string last_error() const override {
    return mlx5::host::last_error_text(state_, false, s_->name(), qpn_);
  }

 private:
  std::shared_ptr<PdRes> pd_;
  std::shared_ptr<Shared> s_;
  QpConfig cfg_;
  uint32_t log_n_ = 0;
  RingLayout lay_{2, true};
  uint8_t* block_ = nullptr;
  dev::SqState* state_ = nullptr;
  Obj umem_ = nullptr, uar_ = nullptr, cq_ = nullptr, qp_ = nullptr, ah_ = nullptr;
  uint32_t qpn_ = 0, cqn_ = 0;
  uint8_t* sq_ = nullptr;
  uint8_t* cq_buf_ = nullptr;
  uint32_t* cq_ci_dbr_ = nullptr;
  uint32_t* qp_dbr_ = nullptr;
  void* db_ = nullptr;

  // Before doca_verbs_qp_create answers there is no QP number to name.
  std::string who() const { return qpn_ ? s_->name() + " QP " + hex(qpn_) : s_->name() + ": create_qp"; }
  void ck(api::doca_error_t rc, const char* call) const { s_->check(rc, call, who()); }
  // An address the SDK reports must be the one kinet laid out in its block:
  // the handle's rings are kinet's, and a mismatch would post into the void.
  void expect_at(const void* got, size_t off, const char* call, const char* what) const {
    if (got != block_ + off)
      throw Error(ErrorCode::System, who() + ": " + call + " reports the " + what + " at " +
                                         hex(reinterpret_cast<uintptr_t>(got)) + ", not at " +
                                         hex(reinterpret_cast<uintptr_t>(block_ + off)) +
                                         " in the external UMEM kinet gave it");
  }

  void create() {
    const api::Fns& f = s_->f();
    const uint32_t n = cfg_.sq_depth;
    Obj dev = pd_->dev;
    ck(f.umem_create(dev, block_, lay_.bytes, kLocalWrite, &umem_), "doca_umem_create");
    ck(f.uar_create(dev, api::kUarNoncache, &uar_), "doca_uar_create");
    ck(f.uar_reg_addr_get(uar_, &db_), "doca_uar_reg_addr_get");
    {
      Attr a{*s_, f.cq_attr_destroy, "doca_verbs_cq_attr_destroy"};
      ck(f.cq_attr_create(&a.o), "doca_verbs_cq_attr_create");
      ck(f.cq_attr_set_cq_size(a.o, n), "doca_verbs_cq_attr_set_cq_size");
      ck(f.cq_attr_set_external_umem(a.o, umem_, lay_.cq), "doca_verbs_cq_attr_set_external_umem");
      ck(f.cq_attr_set_external_uar(a.o, uar_), "doca_verbs_cq_attr_set_external_uar");
      ck(f.cq_create(s_->vctx, a.o, &cq_), "doca_verbs_cq_create");
    }
    cqn_ = f.cq_get_cqn(cq_);
    void* cq_buf = nullptr;
    uint32_t cq_n = 0;
    uint8_t cqe_size = 0;
    f.cq_get_wq(cq_, &cq_buf, &cq_n, &cqe_size);
    expect_at(cq_buf, lay_.cq, "doca_verbs_cq_get_wq", "CQ ring");
    if (cq_n != n || cqe_size != kCqeSize)
      throw Error(ErrorCode::System, who() + ": doca_verbs_cq_get_wq reports " + std::to_string(cq_n) + " CQEs of " +
                                         std::to_string(cqe_size) + " B; kinet asked for " + std::to_string(n) +
                                         " of 64 B");
    uint64_t* cq_db = nullptr;
    uint32_t* arm = nullptr;
    f.cq_get_dbr_addr(cq_, &cq_db, &cq_ci_dbr_, &arm);
    expect_at(cq_ci_dbr_, lay_.cq_dbr, "doca_verbs_cq_get_dbr_addr", "CQ doorbell record");
    cq_buf_ = static_cast<uint8_t*>(cq_buf);
    {
      Attr a{*s_, f.qp_init_attr_destroy, "doca_verbs_qp_init_attr_destroy"};
      ck(f.qp_init_attr_create(&a.o), "doca_verbs_qp_init_attr_create");
      ck(f.qp_init_attr_set_pd(a.o, pd_->vpd), "doca_verbs_qp_init_attr_set_pd");
      ck(f.qp_init_attr_set_send_cq(a.o, cq_), "doca_verbs_qp_init_attr_set_send_cq");
      ck(f.qp_init_attr_set_receive_cq(a.o, cq_), "doca_verbs_qp_init_attr_set_receive_cq");
      ck(f.qp_init_attr_set_sq_wr(a.o, n), "doca_verbs_qp_init_attr_set_sq_wr");
      ck(f.qp_init_attr_set_rq_wr(a.o, 0), "doca_verbs_qp_init_attr_set_rq_wr");  // one-sided only: no RQ
      ck(f.qp_init_attr_set_send_max_sges(a.o, 1), "doca_verbs_qp_init_attr_set_send_max_sges");  // one 64 B WQEBB
      ck(f.qp_init_attr_set_qp_type(a.o, api::kQpTypeRc), "doca_verbs_qp_init_attr_set_qp_type");
      ck(f.qp_init_attr_set_external_umem(a.o, umem_, lay_.sq), "doca_verbs_qp_init_attr_set_external_umem");
      ck(f.qp_init_attr_set_external_dbr_umem(a.o, umem_, lay_.qp_dbr),
         "doca_verbs_qp_init_attr_set_external_dbr_umem");
      ck(f.qp_init_attr_set_external_uar(a.o, uar_), "doca_verbs_qp_init_attr_set_external_uar");
      ck(f.qp_create(s_->vctx, a.o, &qp_), "doca_verbs_qp_create");
    }
    qpn_ = f.qp_get_qpn(qp_);
    void* sq = nullptr;
    void* rq = nullptr;
    uint32_t sq_n = 0, rq_n = 0, rwqe = 0;
    f.qp_get_wq(qp_, &sq, &sq_n, &rq, &rq_n, &rwqe);
    expect_at(sq, lay_.sq, "doca_verbs_qp_get_wq", "send ring");
    if (sq_n != n)
      throw Error(ErrorCode::System, who() + ": doca_verbs_qp_get_wq reports " + std::to_string(sq_n) +
                                         " send WQEs; kinet asked for " + std::to_string(n));
    void* dbr = f.qp_get_dbr_addr(qp_);
    expect_at(dbr, lay_.qp_dbr, "doca_verbs_qp_get_dbr_addr", "QP doorbell record");
    void* db = f.qp_get_uar_addr(qp_);
    if (!db) throw Error(ErrorCode::System, who() + ": doca_verbs_qp_get_uar_addr gave no doorbell register");
    sq_ = static_cast<uint8_t*>(sq);
    qp_dbr_ = static_cast<uint32_t*>(dbr);
    db_ = db;
  }

  QpState query_state() const {
    const api::Fns& f = s_->f();
    Attr a{*s_, f.qp_attr_destroy, "doca_verbs_qp_attr_destroy"};
    Attr ia{*s_, f.qp_init_attr_destroy, "doca_verbs_qp_init_attr_destroy"};
    ck(f.qp_attr_create(&a.o), "doca_verbs_qp_attr_create");
    ck(f.qp_init_attr_create(&ia.o), "doca_verbs_qp_init_attr_create");
    int mask = 0;
    ck(f.qp_query(qp_, a.o, ia.o, &mask), "doca_verbs_qp_query");
    switch (f.qp_attr_get_current_state(a.o)) {
      case api::kQpRst: return QpState::Reset;
      case api::kQpInit: return QpState::Init;
      case api::kQpRtr: return QpState::Rtr;
      case api::kQpRts: return QpState::Rts;
      default: return QpState::Error;
    }
  }

  // One doca_verbs_qp_modify to `next`, from `from` only (any state when
  // unset): attributes set by `set`, which returns their mask bits.
  template <class F> void modify(std::optional<QpState> from, int next, const char* op, F&& set) {
    const api::Fns& f = s_->f();
    std::lock_guard<std::mutex> g(s_->mu);
    if (from) {
      const QpState now = query_state();
      if (now != *from)
        throw Error(ErrorCode::BadState, who() + ": " + op + ": the QP is in " + qp_state_name(now) + ", not " +
                                             qp_state_name(*from));
    }
    Attr a{*s_, f.qp_attr_destroy, "doca_verbs_qp_attr_destroy"};
    ck(f.qp_attr_create(&a.o), "doca_verbs_qp_attr_create");
    ck(f.qp_attr_set_next_state(a.o, next), "doca_verbs_qp_attr_set_next_state");
    const int mask = api::kAttrNextState | set(a.o);
    ck(f.qp_modify(qp_, a.o, mask), "doca_verbs_qp_modify");
  }

  // RESET contents: records and posting state zero, every CQE invalid with
  // owner 1 so the first lap (owner 0) is recognised.
  void init_rings() {
    mlx5::host::clear_rings(block_, lay_, cfg_.sq_depth);
    const dev::SqState zero{};
    std::memcpy(state_, &zero, sizeof zero);
  }
  void destroy(Obj& o, api::doca_error_t (*fn)(Obj), const char* call) {
    if (!o) return;
    if (const auto rc = fn(o)) KINET_LOG(Error, "%s: %s", who().c_str(), s_->sdk->describe(rc, call).c_str());
    o = nullptr;
  }
  // The QP first (the NIC lets go of the rings), then the CQ, UAR and UMEM.
  void release() {
    {
      const api::Fns& f = s_->f();
      std::lock_guard<std::mutex> g(s_->mu);
      destroy(qp_, f.qp_destroy, "doca_verbs_qp_destroy");
      destroy(ah_, f.ah_attr_destroy, "doca_verbs_ah_attr_destroy");
      destroy(cq_, f.cq_destroy, "doca_verbs_cq_destroy");
      destroy(uar_, f.uar_destroy, "doca_uar_destroy");
      destroy(umem_, f.umem_destroy, "doca_umem_destroy");
    }
    cuda::free_pinned(block_);
    block_ = nullptr;
    cuda::free_pinned(state_);
    state_ = nullptr;
  }
};
}  // namespace

std::unique_ptr<QueuePair> make_qp(std::shared_ptr<PdRes> pd, const QpConfig& cfg) {
  return std::make_unique<Qp>(std::move(pd), cfg);
}
}  // namespace kinet::doca::detail
