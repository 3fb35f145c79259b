// kinet — host-side pieces the two ConnectX providers share (internal to
// src/providers): the open mlx5 provider (provider.cpp) and SDK mode
// (src/providers/doca) both take the PD, the MRs and the port from VerbsOps and
// hand kernels the same QpHandle over the same ring block, so the MR, memory
// registration, PD allocation, the port query and the QP's host views live
// here once. Each provider keeps its own device state: the templates take its
// PD record, which must have
//   std::shared_ptr<S> s;  ibv_pd* pd;
// where S has  std::mutex mu;  B be (be.verbs: const VerbsOps*);
//   const std::string& name() const;  void check_open(const std::string& who, const char* op) const.
#pragma once
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>

#include <unistd.h>

#include "core/cuda_shim.hpp"
#include "core/doorbell.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "kinet/kinet.hpp"
#include "kinet/mlx5/wire.hpp"
#include "providers/mlx5/verbs_ops.hpp"

namespace kinet::mlx5::host {

using text::hex;
inline bool is_pow2(uint64_t v) { return v && !(v & (v - 1)); }
inline uint32_t log2u(uint64_t v) { return static_cast<uint32_t>(63 - __builtin_clzll(v)); }
using text::errno_text;

// An ibv_mr of the PD record `pd`, deregistered (under the device lock) when
// the object goes; the PD outlives it.
template <class PdRes>
class VerbsMr final : public MemoryRegion {
 public:
  VerbsMr(std::shared_ptr<PdRes> pd, ibv_mr* mr, void* addr, size_t len, uint32_t access, MemoryKind kind,
          uint32_t lkey, uint32_t rkey)
      : pd_(std::move(pd)), mr_(mr), addr_(addr), len_(len), access_(access), kind_(kind), lkey_(lkey), rkey_(rkey) {}
  ~VerbsMr() override {
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

// ProtectionDomain::reg_mr over VerbsOps::reg_mr. Throws BadState once the
// device is closed; InvalidArgument for an empty or wrapping range, unknown
// access bits, remote write/atomic without local write; for a refusal
// ResourceExhausted (ENOMEM), NotSupported (EOPNOTSUPP), else InvalidArgument,
// each naming the device and the range.
template <class PdRes>
std::unique_ptr<MemoryRegion> register_mr(const std::shared_ptr<PdRes>& pd, void* addr, size_t len, uint32_t access) {
  auto& s = *pd->s;
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
  int err = 0;
  // GPU memory on a NIC that DMAs by itself: dma-buf first (no kernel module
  // beyond the GPU driver's), then plain ibv_reg_mr, which nvidia-peermem serves.
  std::string dmabuf_why;
  if (kind == MemoryKind::Gpu && s.be.verbs->reg_dmabuf_mr) {
    uint64_t off = 0;
    const int fd = cuda::dmabuf_fd(addr, len, &off, &dmabuf_why);
    if (fd >= 0) {
      {
        std::lock_guard<std::mutex> g(s.mu);
        mr = s.be.verbs->reg_dmabuf_mr(pd->pd, fd, off, len, a, access, &lkey, &rkey);
        err = errno;
      }
      ::close(fd);  // the MR holds its own reference
      if (!mr) dmabuf_why = "ibv_reg_dmabuf_mr refused it (" + errno_text(err) + ")";
    }
    if (!mr)
      KINET_LOG(Info, "%s: reg_mr %s: no dma-buf registration (%s); trying ibv_reg_mr (nvidia-peermem)",
                s.name().c_str(), range.c_str(), dmabuf_why.c_str());
  }
  if (!mr) {
    std::lock_guard<std::mutex> g(s.mu);
    mr = s.be.verbs->reg_mr(pd->pd, addr, len, access, &lkey, &rkey);
    err = errno;
  }
  if (!mr) {
    const ErrorCode code = err == ENOMEM       ? ErrorCode::ResourceExhausted
                           : err == EOPNOTSUPP ? ErrorCode::NotSupported
                                               : ErrorCode::InvalidArgument;
    throw Error(code, s.name() + ": reg_mr: " + range + " was refused (" + errno_text(err) +
                          (err == EFAULT ? ": not mapped, or not writable with local write access)" : ")") +
                          (dmabuf_why.empty() ? "" : "; GPU memory: dma-buf failed too (" + dmabuf_why +
                                                         ") and ibv_reg_mr needs nvidia-peermem"));
  }
  return std::make_unique<VerbsMr<PdRes>>(pd, mr, addr, len, access, kind, lkey, rkey);
}

// VerbsOps::alloc_pd, called under the device lock: the PD, its number in
// *pdn. Throws ResourceExhausted (ENOMEM) or System naming `device`.
inline ibv_pd* alloc_pd(const VerbsOps& v, ibv_context* ctx, uint32_t* pdn, const std::string& device) {
  ibv_pd* pd = v.alloc_pd(ctx, pdn);
  if (!pd) {
    const int err = errno;
    throw Error(err == ENOMEM ? ErrorCode::ResourceExhausted : ErrorCode::System,
                device + ": alloc_pd failed (" + errno_text(err) + ")");
  }
  return pd;
}

// Port 1, the one both providers connect through. Throws System "<who>:
// querying port 1 failed" or, for an MTU code outside 1..5, "<who>: port 1
// reports MTU code N".
inline void query_port1(const VerbsOps& v, ibv_context* ctx, PortInfo* out, const std::string& who) {
  if (const int rc = v.query_port(ctx, 1, out); rc != 0)
    throw Error(ErrorCode::System, who + ": querying port 1 failed (" + errno_text(rc) + ")");
  if (out->active_mtu < 1 || out->active_mtu > 5)
    throw Error(ErrorCode::System, who + ": port 1 reports MTU code " + std::to_string(out->active_mtu));
}

// QueuePair::info() of QP `qpn` on `port`: provider 2 (the wire is ConnectX
// RC in either mode), node = the GID's subnet prefix, PSN 0.
inline QpInfo qp_info(const PortInfo& port, uint32_t qpn) {
  QpInfo i{};
  i.magic = QpInfo::kMagic;
  i.version = 1;
  i.provider = 2;
  for (int k = 0; k < 8; ++k) i.node = i.node << 8 | port.gid[k];
  std::memcpy(i.gid, port.gid, 16);
  i.qpn = qpn;
  i.psn = 0;
  i.lid = port.lid;
  i.mtu = port.active_mtu;
  i.port = 1;
  return i;
}

// A QP's block of pinned host memory, registered as one UMEM:
//   [0, n*64)       send ring
//   [n*64, 2n*64)   CQ (n CQEs: one per send slot at most)
//   then the two doorbell records, 64 B apart: the QP's ([1] = send counter)
//   first, or with cq_dbr_first the CQ's ([0] = consumer index) first, where
//   DOCA puts it for a CQ on external UMEM (right after the ring:
//   doca_verbs_cq.cpp of NVIDIA-DOCA/gpunetio).
struct RingLayout {
  size_t sq = 0, cq = 0, qp_dbr = 0, cq_dbr = 0, bytes = 0;
  RingLayout(uint32_t n, bool cq_dbr_first) {
    cq = size_t(n) * kSendWqeBB;
    const size_t records = cq + size_t(n) * kCqeSize;
    qp_dbr = cq_dbr_first ? records + 64 : records;
    cq_dbr = cq_dbr_first ? records : records + 64;
    bytes = records + 128;
  }
};

// The block's RESET contents (n slots): both doorbell records zero, every CQE
// invalid with owner 1 so the first lap (owner 0) is recognised. The posting
// state is the caller's (it may be in GPU memory).
inline void clear_rings(uint8_t* block, const RingLayout& lay, uint32_t n) {
  std::memset(block + lay.qp_dbr, 0, 8);
  std::memset(block + lay.cq_dbr, 0, 8);
  std::memset(block + lay.cq, 0, size_t(n) * kCqeSize);
  for (size_t i = 0; i < n; ++i) block[lay.cq + i * kCqeSize + 63] = kCqeInitOpOwn;
}

// QpHandle::timeout_ns of QpConfig::timeout_ms, saturating.
inline uint64_t timeout_ns(uint64_t ms) {
  constexpr uint64_t kMaxMs = std::numeric_limits<uint64_t>::max() / 1000000ull;
  return ms > kMaxMs ? std::numeric_limits<uint64_t>::max() : ms * 1000000ull;
}

// QueuePair::last_error() from the posting state `state` (in GPU memory when
// `on_gpu`; else host threads may be posting: error_status is released after
// the fields it publishes) of QP `qpn` on `device`; empty when all is well.
inline std::string last_error_text(dev::SqState* state, bool on_gpu, const std::string& device, uint32_t qpn) {
  dev::SqState st{};
  try {
    if (on_gpu) {
      cuda::copy(&st, state, sizeof st);
    } else {
      st.error_status = std::atomic_ref<int32_t>(state->error_status).load(std::memory_order_acquire);
      if (st.error_status != 0) {
        st.error_wqe = state->error_wqe;
        st.error_syndrome = state->error_syndrome;
        st.error_vendor_syndrome = state->error_vendor_syndrome;
      }
      st.local_error = std::atomic_ref<uint8_t>(state->local_error).load(std::memory_order_acquire);
      st.bad_abi = std::atomic_ref<uint32_t>(state->bad_abi).load(std::memory_order_relaxed);
    }
  } catch (const Error& e) {
    return std::string("device verbs: can't read the posting state: ") + e.what();
  }
  if (st.error_status != 0)
    return "WQE " + std::to_string(st.error_wqe) + ": " + status_string(static_cast<Status>(st.error_status)) +
           ", CQE syndrome " + hex(st.error_syndrome) + ", vendor syndrome " + hex(st.error_vendor_syndrome) +
           ", on " + device + " QP " + hex(qpn);
  return doorbell::local_error_text(st.local_error, st.bad_abi);
}
}  // namespace kinet::mlx5::host
