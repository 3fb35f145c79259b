// kinet — what the mlx5 provider needs besides DevX commands (PD, memory
// registration, port and GID query, closing the device), as a table of entry
// points next to DevxOps. rdma-core supplies it on hardware (libibverbs); the
// software NIC supplies it for "mlx5_emu" (src/providers/emu/devx_nic.hpp), so
// the same provider code runs on both.
//
// Contracts are rdma-core's: a null pointer is a failure with errno set; an
// int call returns 0 or an errno value.
#pragma once
#include <cstddef>
#include <cstdint>

struct ibv_context;
struct ibv_pd;
struct ibv_mr;

namespace kinet::mlx5 {

// One port as the provider connects through it.
struct PortInfo {
  bool ethernet = false;  // RoCE v2: peers are addressed by GID (grh); InfiniBand: by LID
  uint16_t lid = 0;       // InfiniBand
  uint8_t gid_index = 0;  // the GID table entry the QPs use (RoCE v2)
  uint8_t gid[16] = {};   // that entry
  uint8_t active_mtu = 0; // IB MTU enum, 1 (256 B) .. 5 (4096 B)
};

struct VerbsOps {
  // Releases the device context; every PD, MR and DevX object of it is gone.
  void (*close)(ibv_context* ctx);
  // A PD and its number (mlx5dv_init_obj(MLX5DV_OBJ_PD)'s pdn).
  ibv_pd* (*alloc_pd)(ibv_context* ctx, uint32_t* pdn);
  int (*dealloc_pd)(ibv_pd* pd);
  // ibv_reg_mr: `access` holds ibv_access_flags (kinet::Access has the same values).
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t len, uint32_t access, uint32_t* lkey, uint32_t* rkey);
  int (*dereg_mr)(ibv_mr* mr);
  // Port `port` (1-based) and the GID entry kinet uses on it.
  int (*query_port)(ibv_context* ctx, uint8_t port, PortInfo* out);
  // ibv_reg_dmabuf_mr (GPU memory exported by cuda::dmabuf_fd): iova = the
  // address the keys answer to. Null when the backend has none (the software
  // NIC reads GPU memory itself; rdma-core older than 34).
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd* pd, int fd, uint64_t offset, size_t len, uint64_t iova, uint32_t access,
                           uint32_t* lkey, uint32_t* rkey) = nullptr;
};
}  // namespace kinet::mlx5
