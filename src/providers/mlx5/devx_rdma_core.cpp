// kinet — DevxOps over rdma-core's mlx5dv_devx_* calls, loaded with dlopen
// (rdma_core_lib.hpp).
#include "providers/mlx5/devx.hpp"
#include "providers/mlx5/rdma_core_lib.hpp"

namespace kinet::mlx5 {
namespace {

mlx5dv_devx_umem* umem_reg(ibv_context* ctx, void* addr, size_t size, uint32_t access, uint32_t* id) {
  mlx5dv_devx_umem* u = rdma_core()->umem_reg(ctx, addr, size, access);
  if (u) *id = u->umem_id;
  return u;
}

// GPU memory exported as a dma-buf: the kernel takes `addr` as the offset into the dma-buf.
mlx5dv_devx_umem* umem_reg_dmabuf(ibv_context* ctx, int fd, uint64_t offset, size_t size, uint32_t access,
                                  uint32_t* id) {
  mlx5dv_devx_umem_in in{};
  in.addr = reinterpret_cast<void*>(static_cast<uintptr_t>(offset));
  in.size = size;
  in.access = access;
  in.pgsz_bitmap = ~uint64_t{4095};  // any page size from 4 KiB up, as mlx5dv_devx_umem_reg asks
  in.comp_mask = MLX5DV_UMEM_MASK_DMABUF;
  in.dmabuf_fd = fd;
  mlx5dv_devx_umem* u = rdma_core()->umem_reg_ex(ctx, &in);
  if (u) *id = u->umem_id;
  return u;
}

mlx5dv_devx_uar* alloc_uar(ibv_context* ctx, uint32_t flags, uint32_t* page_id, void** reg_addr) {
  mlx5dv_devx_uar* u = rdma_core()->alloc_uar(ctx, flags);
  if (u) *page_id = u->page_id, *reg_addr = u->reg_addr;
  return u;
}
}  // namespace

const DevxOps& rdma_core_ops() {
  const RdmaCoreLib& l = rdma_core_or_throw();
  static const DevxOps o = {l.obj_create, l.obj_modify,  l.obj_query, l.obj_destroy, l.general_cmd,
                            umem_reg,     l.umem_dereg, alloc_uar,   l.free_uar,    l.umem_reg_ex ? umem_reg_dmabuf : nullptr};
  return o;
}
}  // namespace kinet::mlx5
