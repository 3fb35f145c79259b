// kinet — the thin layer that issues the DevX command mailboxes built in
// commands/ through rdma-core (mlx5dv_devx_*), owns the objects it creates and
// turns every failure into a kinet::Error that names the device, the command,
// errno and the PRM status and syndrome of the reply, e.g.
//   "mlx5_0: CREATE_QP failed: status 0x3 (bad parameter), syndrome 0x1a2b3c4d
//    (errno 121: Remote I/O error)".
//
// The entry points go through DevxOps so the same layer runs against the
// software NIC in CI (a DevxOps whose calls answer from src/providers/emu/devx)
// and against rdma-core on hardware (rdma_core_ops(), only in the kinet_mlx5
// library, which needs libibverbs and libmlx5).
//
// Not thread-safe per Devx object: the provider serialises its control path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "providers/mlx5/commands/command_types.hpp"

struct ibv_context;
struct mlx5dv_devx_obj;
struct mlx5dv_devx_umem;
struct mlx5dv_devx_uar;

namespace kinet::mlx5 {

// The DevX calls the layer makes, with rdma-core's contracts: a null pointer
// is a failure with errno set; an int call returns 0 or an errno value. On a
// command the device rejected, the out mailbox holds its status and syndrome.
struct DevxOps {
  mlx5dv_devx_obj* (*obj_create)(ibv_context* ctx, const void* in, size_t inlen, void* out, size_t outlen);
  int (*obj_modify)(mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out, size_t outlen);
  int (*obj_query)(mlx5dv_devx_obj* obj, const void* in, size_t inlen, void* out, size_t outlen);
  int (*obj_destroy)(mlx5dv_devx_obj* obj);
  int (*general_cmd)(ibv_context* ctx, const void* in, size_t inlen, void* out, size_t outlen);
  // UMEM: `id` receives the umem id (rdma-core's struct mlx5dv_devx_umem::umem_id).
  mlx5dv_devx_umem* (*umem_reg)(ibv_context* ctx, void* addr, size_t size, uint32_t access, uint32_t* id);
  int (*umem_dereg)(mlx5dv_devx_umem* umem);
  // UAR: page id and the doorbell register's address (mlx5dv_devx_uar fields).
  mlx5dv_devx_uar* (*alloc_uar)(ibv_context* ctx, uint32_t flags, uint32_t* page_id, void** reg_addr);
  void (*free_uar)(mlx5dv_devx_uar* uar);
  // Optional (null: not offered): a UMEM over [offset, offset + size) of the
  // dma-buf `fd` (mlx5dv_devx_umem_reg_ex with MLX5DV_UMEM_MASK_DMABUF), e.g.
  // GPU memory exported with cuMemGetHandleForAddressRange.
  mlx5dv_devx_umem* (*umem_reg_dmabuf)(ibv_context* ctx, int fd, uint64_t offset, size_t size, uint32_t access,
                                       uint32_t* id) = nullptr;
};

// rdma-core's entry points (defined in devx_rdma_core.cpp, library kinet_mlx5).
const DevxOps& rdma_core_ops();

// Text of a PRM command status, e.g. 0x3 -> "bad parameter".
const char* prm_status_name(uint8_t status);

class Devx {
 public:
  // `name` (e.g. "mlx5_0") prefixes every error. ctx stays owned by the caller
  // and must outlive this object and every Object, Umem and Uar it returns.
  Devx(ibv_context* ctx, std::string name, const DevxOps& ops);
  // Objects, Umems and Uars point back at their Devx: it must outlive them and
  // stays where it is.
  Devx(const Devx&) = delete;
  Devx& operator=(const Devx&) = delete;

  // A created CQ or QP; destroyed (mlx5dv_devx_obj_destroy) when dropped. A
  // failed destroy is logged, not thrown.
  class Object {
   public:
    Object() = default;
    Object(Object&& o) noexcept { *this = std::move(o); }
    Object& operator=(Object&& o) noexcept;
    ~Object() { reset(); }
    uint32_t id() const { return id_; }  // cqn or qpn
    mlx5dv_devx_obj* get() const { return obj_; }
    void reset();

   private:
    friend class Devx;
    const Devx* owner_ = nullptr;
    mlx5dv_devx_obj* obj_ = nullptr;
    uint32_t id_ = 0;
  };
  struct Umem {
    Umem() = default;
    Umem(Umem&& o) noexcept { *this = std::move(o); }
    Umem& operator=(Umem&& o) noexcept;
    ~Umem() { reset(); }
    void reset();
    const Devx* owner = nullptr;
    mlx5dv_devx_umem* umem = nullptr;
    uint32_t id = 0;
  };
  struct Uar {
    Uar() = default;
    Uar(Uar&& o) noexcept { *this = std::move(o); }
    Uar& operator=(Uar&& o) noexcept;
    ~Uar() { reset(); }
    void reset();
    const Devx* owner = nullptr;
    mlx5dv_devx_uar* uar = nullptr;
    uint32_t page_id = 0;
    void* reg_addr = nullptr;
  };

  mlx5::cmd::HcaCaps query_general_caps(bool current = true);
  mlx5::cmd::AtomicCaps query_atomic_caps(bool current = true);
  Umem register_umem(void* addr, size_t size, uint32_t access);
  // A UMEM over [offset, offset + size) of dma-buf `fd` (the caller keeps and
  // closes fd). NotSupported when the ops have no umem_reg_dmabuf.
  Umem register_umem_dmabuf(int fd, uint64_t offset, size_t size, uint32_t access);
  bool has_umem_dmabuf() const { return ops_.umem_reg_dmabuf != nullptr; }
  Uar alloc_uar(uint32_t flags);
  Object create_cq(const mlx5::cmd::CreateCq& p);
  Object create_qp(const mlx5::cmd::CreateQp& p);
  // State transitions of `qp`; the qpn in p is ignored (qp's is used).
  void rst2init(Object& qp, mlx5::cmd::Rst2InitQp p);
  void init2rtr(Object& qp, mlx5::cmd::Init2RtrQp p);
  void rtr2rts(Object& qp, mlx5::cmd::Rtr2RtsQp p);
  void to_err(Object& qp);
  void to_rst(Object& qp);
  mlx5::cmd::QpQuery query_qp(Object& qp);

  const std::string& name() const { return name_; }
  const DevxOps& ops() const { return ops_; }

 private:
  [[noreturn]] void fail(mlx5::cmd::Op op, int err, const uint8_t* out, size_t out_len) const;
  void need(const Object& qp, mlx5::cmd::Op op) const;
  void modify_qp(Object& qp, mlx5::cmd::Op op, const uint8_t* in, size_t in_len, size_t out_len);
  ibv_context* ctx_;
  std::string name_;
  DevxOps ops_;
};
}  // namespace kinet::mlx5
