// kinet — rdma-core (libibverbs.so.1 + libmlx5.so.1) loaded with dlopen, so
// libkinet needs no RDMA library to link or to run: where they are missing,
// "auto" falls back to the software NIC and a named device says why it can't
// open. Compiled against rdma-core's headers (their struct layouts); every
// entry point comes from dlsym. Header-inline calls of verbs.h
// (ibv_query_port, ibv_query_gid_ex, ibv_reg_mr) are rebuilt on the exported
// functions they wrap.
#pragma once
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <string>

namespace kinet::mlx5 {

struct RdmaCoreLib {
  // libibverbs
  ibv_device** (*get_device_list)(int* n);
  void (*free_device_list)(ibv_device** list);
  const char* (*get_device_name)(ibv_device* dev);
  int (*close_device)(ibv_context* ctx);
  ibv_pd* (*alloc_pd)(ibv_context* ctx);
  int (*dealloc_pd)(ibv_pd* pd);
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t len, int access);
  // Optional (rdma-core 34+): null when the library lacks it.
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd* pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access);
  int (*dereg_mr)(ibv_mr* mr);
  int (*query_port_compat)(ibv_context* ctx, uint8_t port, _compat_ibv_port_attr* attr);
  int (*query_gid)(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid);
  int (*query_gid_ex)(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* e, uint32_t flags,
                      size_t entry_size);
  // libmlx5
  bool (*is_supported)(ibv_device* dev);
  ibv_context* (*open_device)(ibv_device* dev, mlx5dv_context_attr* attr);
  int (*init_obj)(mlx5dv_obj* obj, uint64_t type);
  mlx5dv_devx_obj* (*obj_create)(ibv_context* ctx, const void* in, size_t inlen, void* out, size_t outlen);
  int (*obj_modify)(mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out, size_t outlen);
  int (*obj_query)(mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out, size_t outlen);
  int (*obj_destroy)(mlx5dv_devx_obj* obj);
  int (*general_cmd)(ibv_context* ctx, const void* in, size_t inlen, void* out, size_t outlen);
  mlx5dv_devx_umem* (*umem_reg)(ibv_context* ctx, void* addr, size_t size, uint32_t access);
  int (*umem_dereg)(mlx5dv_devx_umem* umem);
  mlx5dv_devx_uar* (*alloc_uar)(ibv_context* ctx, uint32_t flags);
  void (*free_uar)(mlx5dv_devx_uar* uar);
  // Optional (rdma-core 35+; dma-buf UMEMs need the kernel's support too): null when the library lacks it.
  mlx5dv_devx_umem* (*umem_reg_ex)(ibv_context* ctx, mlx5dv_devx_umem_in* in);

  // ibv_query_port as verbs.h's inline does it (the extended op when the
  // provider has one, else the exported compat call).
  int query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const;
  int query_gid_entry(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* e) const {
    return query_gid_ex(ctx, port, index, e, 0, sizeof *e);
  }
};

// Loads the two files into *out. false: *why says which file or symbol failed.
// (rdma_core() below is the process's one copy; tests call this directly.)
bool load_rdma_core(const std::string& verbs_file, const std::string& mlx5_file, RdmaCoreLib* out, std::string* why);

// The process's rdma-core, loaded on first use (thread-safe). Null when it
// can't load: *why (if given) then says which library or symbol is missing.
// $KINET_IBVERBS_LIB / $KINET_MLX5_LIB name other files to load.
const RdmaCoreLib* rdma_core(std::string* why = nullptr);
// rdma_core(), or throws Error(NotSupported) saying why it can't load.
const RdmaCoreLib& rdma_core_or_throw();

}  // namespace kinet::mlx5
