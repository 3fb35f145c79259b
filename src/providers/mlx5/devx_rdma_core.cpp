// kinet — DevxOps over rdma-core's mlx5dv_devx_* calls (library kinet_mlx5;
// compiled against rdma-core 44's <infiniband/mlx5dv.h>).
#include <infiniband/mlx5dv.h>

#include "providers/mlx5/devx.hpp"

namespace kinet::mlx5 {
namespace {

mlx5dv_devx_umem* umem_reg(ibv_context* ctx, void* addr, size_t size, uint32_t access, uint32_t* id) {
  mlx5dv_devx_umem* u = mlx5dv_devx_umem_reg(ctx, addr, size, access);
  if (u) *id = u->umem_id;
  return u;
}

mlx5dv_devx_uar* alloc_uar(ibv_context* ctx, uint32_t flags, uint32_t* page_id, void** reg_addr) {
  mlx5dv_devx_uar* u = mlx5dv_devx_alloc_uar(ctx, flags);
  if (u) *page_id = u->page_id, *reg_addr = u->reg_addr;
  return u;
}

const DevxOps kRdmaCore = {
    mlx5dv_devx_obj_create,  mlx5dv_devx_obj_modify, mlx5dv_devx_obj_query, mlx5dv_devx_obj_destroy,
    mlx5dv_devx_general_cmd, umem_reg,               mlx5dv_devx_umem_dereg, alloc_uar,
    mlx5dv_devx_free_uar,
};
}  // namespace

const DevxOps& rdma_core_ops() { return kRdmaCore; }
}  // namespace kinet::mlx5
