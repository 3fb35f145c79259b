#include "providers/mlx5/rdma_core_lib.hpp"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

#include "core/env.hpp"
#include "core/log.hpp"
#include "kinet/kinet.hpp"

namespace kinet::mlx5 {
namespace {

struct Loaded {
  RdmaCoreLib lib{};
  bool ok = false;
  std::string why;
};

// Resolves `name` from `dl` into `slot`; false (with why) when it is missing.
bool sym(void* dl, const char* file, const char* name, void* slot, std::string* why) {
  void* a = dlsym(dl, name);
  if (!a) {
    *why = std::string(file) + " lacks " + name + " (rdma-core too old?)";
    return false;
  }
  std::memcpy(slot, &a, sizeof a);
  return true;
}

}  // namespace

bool load_rdma_core(const std::string& verbs_file, const std::string& mlx5_file, RdmaCoreLib* out,
                    std::string* why) {
  // Never closed: providers' objects may outlive any owner.
  void* v = dlopen(verbs_file.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!v) {
    const char* e = dlerror();
    *why = verbs_file + " could not be loaded (" + (e ? e : "no reason given") +
           "; install rdma-core: apt-get install libibverbs1 ibverbs-providers)";
    return false;
  }
  void* m = dlopen(mlx5_file.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!m) {
    const char* e = dlerror();
    *why = mlx5_file + " could not be loaded (" + (e ? e : "no reason given") +
           "; it comes with rdma-core's ibverbs-providers)";
    return false;
  }
  RdmaCoreLib& l = *out;
  const char* vf = verbs_file.c_str();
  const char* mf = mlx5_file.c_str();
  std::string* w = why;
  const bool ok = sym(v, vf, "ibv_get_device_list", &l.get_device_list, w) &&
                  sym(v, vf, "ibv_free_device_list", &l.free_device_list, w) &&
                  sym(v, vf, "ibv_get_device_name", &l.get_device_name, w) &&
                  sym(v, vf, "ibv_close_device", &l.close_device, w) &&
                  sym(v, vf, "ibv_alloc_pd", &l.alloc_pd, w) && sym(v, vf, "ibv_dealloc_pd", &l.dealloc_pd, w) &&
                  sym(v, vf, "ibv_reg_mr", &l.reg_mr, w) && sym(v, vf, "ibv_dereg_mr", &l.dereg_mr, w) &&
                  sym(v, vf, "ibv_query_port", &l.query_port_compat, w) &&
                  sym(v, vf, "ibv_query_gid", &l.query_gid, w) &&
                  sym(v, vf, "_ibv_query_gid_ex", &l.query_gid_ex, w) &&
                  sym(m, mf, "mlx5dv_is_supported", &l.is_supported, w) &&
                  sym(m, mf, "mlx5dv_open_device", &l.open_device, w) &&
                  sym(m, mf, "mlx5dv_init_obj", &l.init_obj, w) &&
                  sym(m, mf, "mlx5dv_devx_obj_create", &l.obj_create, w) &&
                  sym(m, mf, "mlx5dv_devx_obj_modify", &l.obj_modify, w) &&
                  sym(m, mf, "mlx5dv_devx_obj_query", &l.obj_query, w) &&
                  sym(m, mf, "mlx5dv_devx_obj_destroy", &l.obj_destroy, w) &&
                  sym(m, mf, "mlx5dv_devx_general_cmd", &l.general_cmd, w) &&
                  sym(m, mf, "mlx5dv_devx_umem_reg", &l.umem_reg, w) &&
                  sym(m, mf, "mlx5dv_devx_umem_dereg", &l.umem_dereg, w) &&
                  sym(m, mf, "mlx5dv_devx_alloc_uar", &l.alloc_uar, w) &&
                  sym(m, mf, "mlx5dv_devx_free_uar", &l.free_uar, w);
  if (!ok) return false;
  std::string ignored;
  if (!sym(v, vf, "ibv_reg_dmabuf_mr", &l.reg_dmabuf_mr, &ignored)) l.reg_dmabuf_mr = nullptr;
  if (!sym(m, mf, "mlx5dv_devx_umem_reg_ex", &l.umem_reg_ex, &ignored)) l.umem_reg_ex = nullptr;
  return true;
}

int RdmaCoreLib::query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const {
  std::memset(attr, 0, sizeof *attr);
  // verbs_get_ctx_op reads the context's own op table (no library symbol).
  if (verbs_context* vctx = verbs_get_ctx_op(ctx, query_port))
    return vctx->query_port(ctx, port, attr, sizeof *attr);
  return query_port_compat(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

const RdmaCoreLib* rdma_core(std::string* why) {
  static const Loaded l = [] {
    Loaded r;
    r.ok = load_rdma_core(env::get_str("KINET_IBVERBS_LIB", "libibverbs.so.1"),
                          env::get_str("KINET_MLX5_LIB", "libmlx5.so.1"), &r.lib, &r.why);
    if (!r.ok) KINET_LOG(Debug, "rdma-core not loaded: %s", r.why.c_str());
    return r;
  }();
  if (!l.ok) {
    if (why) *why = l.why;
    return nullptr;
  }
  return &l.lib;
}

const RdmaCoreLib& rdma_core_or_throw() {
  std::string why;
  if (const RdmaCoreLib* l = rdma_core(&why)) return *l;
  throw Error(ErrorCode::NotSupported, "rdma-core: " + why);
}

}  // namespace kinet::mlx5
