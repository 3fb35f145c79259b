// kinet emu — the state behind the software NIC's DevX entry point, shared by
// its DevX commands (devx_nic.cpp) and its verbs (devx_nic_verbs.cpp).
// Internal to those two files.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "core/cuda_shim.hpp"
#include "providers/emu/devx_nic.hpp"
#include "providers/emu/emu.hpp"
#include "providers/emu/prm.hpp"

namespace kinet::emu::devx_nic {
namespace cmd = mlx5::cmd;

inline constexpr uint8_t kGidPrefix[8] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0};  // link-local

struct Umem {
  uint8_t* addr = nullptr;
  size_t size = 0;
  uint32_t users = 0;  // CQs and QPs placed in it: deregistration waits for them (EBUSY)
};
// The doorbell register of the QP bound to it: pinned host memory, so kernels
// ring it as they ring a UAR mapped into the GPU.
// A BlueFlame-type page (MLX5DV_UAR_ALLOC_TYPE_BF) takes 64-byte BlueFlame
// writes: word[0..7] is the window (dev::DoorbellMode::BlueFlame), checked
// against the ring; a non-cached one (NC) takes the 8-byte doorbell word.
struct Uar {
  uint64_t* word = static_cast<uint64_t*>(cuda::alloc_pinned(64));
  uint32_t qpn = 0;    // 0 = unbound
  bool freed = false;  // freed while bound: kept until its QP goes
  bool blueflame = false;
  explicit Uar(bool bf) : blueflame(bf) {
    for (int i = 1; i < 8; ++i) word[i] = 0;
    *word = prm::kNoDoorbell;
  }
  Uar(const Uar&) = delete;
  ~Uar() { cuda::free_pinned(word); }
};
struct Cq {
  cmd::CreateCq p;
  mlx5::Cqe64* cqes = nullptr;
  uint32_t* dbrec = nullptr;
  uint32_t qpn = 0;  // the QP that writes into it (one per CQ), 0 = none
};
struct Qp {
  std::shared_ptr<EmuQp> q;
  cmd::CreateQp p;
  cmd::Init2RtrQp rtr;
  cmd::Rtr2RtsQp rts;
};

struct DevxNic {
  std::shared_ptr<Nic> nic;
  std::mutex mu;  // guards everything below; commands run one at a time
  std::map<uint32_t, Umem> umems;
  std::map<uint32_t, std::unique_ptr<Uar>> uars;
  std::map<uint32_t, Cq> cqs;
  std::map<uint32_t, Qp> qps;
  std::set<uint32_t> pds;
  uint32_t next_umem = 1, next_uar = 1, next_cqn = 1;
};
// What the opaque rdma-core handles point to here.
struct Obj {
  DevxNic* dn;
  bool is_qp;
  uint32_t id;
};
struct UmemRef {
  DevxNic* dn;
  uint32_t id;
};
struct UarRef {
  DevxNic* dn;
  uint32_t page;
};
struct PdRef {
  DevxNic* dn;
  uint32_t pdn;
};
struct MrRef {
  DevxNic* dn;
  uint32_t key;
};

inline DevxNic& dn_of(ibv_context* c) { return *reinterpret_cast<DevxNic*>(c); }
template <class T, class H> T* ref(H* h) { return reinterpret_cast<T*>(h); }
}  // namespace kinet::emu::devx_nic
