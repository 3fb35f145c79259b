// kinet — what rdma-core reports about this machine's RDMA devices, as plain
// data (for kinet-info's diagnosis). Filled by rdma_inventory() in the
// kinet_mlx5 library (libibverbs + mlx5dv); the structs need no rdma-core.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kinet::mlx5 {

struct GidEntry {
  int index = 0;
  std::string gid;   // "fe80::..." (IPv6 text; IPv4-mapped shows as ::ffff:a.b.c.d)
  std::string type;  // "IB", "RoCE v1", "RoCE v2"
  std::string netdev;
};
struct PortEntry {
  int port = 1;
  std::string state;       // "active", "down", ...
  std::string link_layer;  // "InfiniBand", "Ethernet"
  uint16_t lid = 0;
  int active_mtu = 0;      // bytes
  std::vector<GidEntry> gids;  // non-empty entries only
};
struct RdmaDevice {
  std::string name;        // "mlx5_0"
  bool mlx5 = false;       // mlx5dv_is_supported
  std::string pci;         // "0000:17:00.0" (from sysfs), empty if unknown
  std::string fw;          // firmware version
  std::string open_error;  // ibv_open_device / queries failed: why (then no ports)
  std::vector<PortEntry> ports;
};

// Every device ibv_get_device_list() returns, with ports and GID tables. On
// failure to list, *problem says why (e.g. no RDMA support in the kernel) and
// the result is empty; an empty list with no problem means no device.
std::vector<RdmaDevice> rdma_inventory(std::string* problem);

}  // namespace kinet::mlx5
