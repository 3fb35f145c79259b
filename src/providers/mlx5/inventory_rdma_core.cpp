// kinet — rdma_inventory() over libibverbs + mlx5dv (library kinet_mlx5).
#include <arpa/inet.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <net/if.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>

#include "providers/mlx5/inventory.hpp"

namespace kinet::mlx5 {
namespace {
std::string gid_text(const uint8_t raw[16]) {
  char b[INET6_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET6, raw, b, sizeof b);
  return b;
}
const char* port_state(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN: return "down";
    case IBV_PORT_INIT: return "init";
    case IBV_PORT_ARMED: return "armed";
    case IBV_PORT_ACTIVE: return "active";
    case IBV_PORT_ACTIVE_DEFER: return "active (deferred)";
    default: return "unknown";
  }
}
// The PCI address: the last component of /sys/class/infiniband/<dev>/device's target.
std::string pci_of(const char* ibdev_path) {
  char real[PATH_MAX];
  const std::string p = std::string(ibdev_path) + "/device";
  if (!realpath(p.c_str(), real)) return {};
  const char* slash = std::strrchr(real, '/');
  return slash ? slash + 1 : real;
}
}  // namespace

std::vector<RdmaDevice> rdma_inventory(std::string* problem) {
  problem->clear();
  std::vector<RdmaDevice> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) {
    const int e = errno;
    *problem = std::string("ibv_get_device_list failed: ") + std::strerror(e) +
               (e == ENOSYS ? " (no RDMA support in this kernel, or /sys/class/infiniband not visible here)" : "");
    return out;
  }
  for (int i = 0; i < n; ++i) {
    RdmaDevice d;
    d.name = ibv_get_device_name(list[i]);
    d.mlx5 = mlx5dv_is_supported(list[i]);
    d.pci = pci_of(list[i]->ibdev_path);
    ibv_context* ctx = ibv_open_device(list[i]);
    if (!ctx) {
      const int e = errno;
      d.open_error = std::string("ibv_open_device failed: ") + std::strerror(e) +
                     (e == EACCES || e == EPERM ? " (no access to /dev/infiniband/uverbs*)" : "");
      out.push_back(std::move(d));
      continue;
    }
    ibv_device_attr da{};
    if (ibv_query_device(ctx, &da) == 0) {
      d.fw = da.fw_ver;
      for (int p = 1; p <= da.phys_port_cnt; ++p) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, static_cast<uint8_t>(p), &pa) != 0) continue;
        PortEntry pe;
        pe.port = p;
        pe.state = port_state(pa.state);
        pe.link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
        pe.lid = pa.lid;
        pe.active_mtu = 128 << pa.active_mtu;
        for (int g = 0; g < pa.gid_tbl_len; ++g) {
          ibv_gid_entry e{};
          if (ibv_query_gid_ex(ctx, static_cast<uint32_t>(p), static_cast<uint32_t>(g), &e, 0) != 0) continue;
          GidEntry ge;
          ge.index = g;
          ge.gid = gid_text(e.gid.raw);
          ge.type = e.gid_type == IBV_GID_TYPE_IB ? "IB" : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1" : "RoCE v2";
          char ifname[IF_NAMESIZE + 1] = {};
          if (e.ndev_ifindex && if_indextoname(e.ndev_ifindex, ifname)) ge.netdev = ifname;
          pe.gids.push_back(std::move(ge));
        }
        d.ports.push_back(std::move(pe));
      }
    } else {
      d.open_error = std::string("ibv_query_device failed: ") + std::strerror(errno);
    }
    ibv_close_device(ctx);
    out.push_back(std::move(d));
  }
  ibv_free_device_list(list);
  return out;
}
}  // namespace kinet::mlx5
