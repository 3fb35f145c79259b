// kinet — VerbsOps over libibverbs + mlx5dv (loaded with dlopen:
// rdma_core_lib.hpp), and the opening of a real device as a provider Backend.
#include "providers/mlx5/rdma_core_lib.hpp"

#include <cerrno>
#include <cstring>
#include <string>

#include "core/env.hpp"
#include "core/log.hpp"
#include "providers/mlx5/provider.hpp"
#include "providers/mlx5/rdma_core.hpp"

namespace kinet::mlx5 {
namespace {

void close_ctx(ibv_context* ctx) {
  if (const int rc = rdma_core()->close_device(ctx); rc != 0) KINET_LOG(Error, "ibv_close_device failed (errno %d)", rc);
}

ibv_pd* alloc_pd(ibv_context* ctx, uint32_t* pdn) {
  const RdmaCoreLib* l = rdma_core();
  ibv_pd* pd = l->alloc_pd(ctx);
  if (!pd) return nullptr;
  mlx5dv_pd dv{};
  mlx5dv_obj obj{};
  obj.pd.in = pd;
  obj.pd.out = &dv;
  if (const int rc = l->init_obj(&obj, MLX5DV_OBJ_PD); rc != 0) {
    l->dealloc_pd(pd);
    errno = rc > 0 ? rc : EINVAL;
    return nullptr;
  }
  *pdn = dv.pdn;
  return pd;
}

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t len, uint32_t access, uint32_t* lkey, uint32_t* rkey) {
  ibv_mr* mr = rdma_core()->reg_mr(pd, addr, len, static_cast<int>(access));
  if (mr) *lkey = mr->lkey, *rkey = mr->rkey;
  return mr;
}

// The GID entry QPs use on an Ethernet port: $KINET_GID_INDEX when set, else
// the first RoCE v2 entry, preferring an IPv4-mapped address (::ffff:a.b.c.d)
// the way RoCE deployments usually route.
int pick_gid(ibv_context* ctx, uint8_t port, const ibv_port_attr& pa, PortInfo* out) {
  const uint64_t forced = env::get_u64("KINET_GID_INDEX", ~0ull);
  int best = -1;
  ibv_gid_entry best_e{};
  for (int i = 0; i < pa.gid_tbl_len; ++i) {
    ibv_gid_entry e{};
    if (rdma_core()->query_gid_entry(ctx, port, uint32_t(i), &e) != 0) continue;  // an empty entry
    if (forced != ~0ull) {
      if (uint64_t(i) != forced) continue;
      best = i, best_e = e;
      break;
    }
    if (e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
    static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const bool mapped = std::memcmp(e.gid.raw, v4, 12) == 0;
    if (best < 0 || mapped) best = i, best_e = e;
    if (mapped) break;
  }
  if (best < 0) return ENOENT;
  out->gid_index = static_cast<uint8_t>(best);
  std::memcpy(out->gid, best_e.gid.raw, 16);
  return 0;
}

int query_port(ibv_context* ctx, uint8_t port, PortInfo* out) {
  ibv_port_attr pa{};
  const RdmaCoreLib* l = rdma_core();
  if (const int rc = l->query_port(ctx, port, &pa); rc != 0) return rc;
  *out = {};
  out->ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
  out->lid = pa.lid;
  out->active_mtu = static_cast<uint8_t>(pa.active_mtu);
  if (out->ethernet) return pick_gid(ctx, port, pa, out);
  ibv_gid g{};
  if (const int rc = l->query_gid(ctx, port, 0, &g); rc != 0) return rc;
  std::memcpy(out->gid, g.raw, 16);
  return 0;
}

ibv_mr* reg_dmabuf_mr(ibv_pd* pd, int fd, uint64_t offset, size_t len, uint64_t iova, uint32_t access,
                      uint32_t* lkey, uint32_t* rkey) {
  const RdmaCoreLib* l = rdma_core();
  if (!l->reg_dmabuf_mr) return errno = EOPNOTSUPP, nullptr;
  ibv_mr* mr = l->reg_dmabuf_mr(pd, offset, len, iova, fd, static_cast<int>(access));
  if (mr) *lkey = mr->lkey, *rkey = mr->rkey;
  return mr;
}

int dealloc_pd(ibv_pd* pd) { return rdma_core()->dealloc_pd(pd); }
int dereg_mr(ibv_mr* mr) { return rdma_core()->dereg_mr(mr); }

const VerbsOps kVerbs = {close_ctx, alloc_pd, dealloc_pd, reg_mr, dereg_mr, query_port, reg_dmabuf_mr};
}  // namespace

const VerbsOps& rdma_core_verbs() {
  rdma_core_or_throw();
  return kVerbs;
}

ListedDevice open_listed_device(std::string_view name, const std::string& what, const char* driver,
                                ibv_context* (*open)(ibv_device*)) {
  const RdmaCoreLib& l = rdma_core_or_throw();
  int n = 0;
  ibv_device** list = l.get_device_list(&n);
  if (!list) {
    const int err = errno;
    throw Error(ErrorCode::NotFound, what + ": no such RDMA device: ibv_get_device_list failed (errno " +
                                         std::to_string(err) + ": " + std::strerror(err) +
                                         "; ENOSYS: the kernel has no RDMA support loaded)");
  }
  ibv_device* dev = nullptr;
  std::string names;
  for (int i = 0; i < n; ++i) {
    const char* nm = l.get_device_name(list[i]);
    names += (names.empty() ? "" : ", ") + std::string(nm);
    if (name == nm || (name == "auto" && !dev && l.is_supported(list[i]))) dev = list[i];
  }
  if (!dev) {
    l.free_device_list(list);
    throw Error(ErrorCode::NotFound, what + ": no such RDMA device" + (name == "auto" ? " supporting mlx5dv" : "") +
                                         " (present: " + (names.empty() ? "none" : names) + ")");
  }
  ListedDevice out;
  out.name = l.get_device_name(dev);
  if (!l.is_supported(dev)) {
    l.free_device_list(list);
    throw Error(ErrorCode::NotSupported,
                what + ": " + out.name + " is not an mlx5 device (" + driver + " drives ConnectX only)");
  }
  out.ctx = open(dev);
  out.err = errno;
  l.free_device_list(list);
  if (out.ctx) out.err = 0;
  return out;
}

std::unique_ptr<Device> open_rdma_core_device(std::string_view name) {
  const ListedDevice d =
      open_listed_device(name, "open " + std::string(name), "the mlx5 provider", [](ibv_device* dev) {
        mlx5dv_context_attr attr{};
        attr.flags = MLX5DV_CONTEXT_FLAGS_DEVX;
        return rdma_core()->open_device(dev, &attr);
      });
  const int err = d.err;
  if (!d.ctx)
    throw Error(err == EPERM || err == EOPNOTSUPP ? ErrorCode::NotSupported : ErrorCode::System,
                d.name + ": opening with DevX failed (errno " + std::to_string(err) + ": " + std::strerror(err) +
                    "; DevX needs a kernel with mlx5_ib DevX and, in a container, access to /dev/infiniband)");
  Backend b{d.ctx, d.name, &rdma_core_ops(), &kVerbs};
  b.uar_gpu_mappable = true;  // tried per QP (cuda::map_io_memory); a failure falls back or throws there
  b.uar_is_io_memory = true;
  b.gpu_rings = true;  // UMEM over GPU memory: dma-buf or nvidia-peermem, tried per QP
  b.gpu_rings_why.clear();
  return open_device(b);
}
}  // namespace kinet::mlx5
