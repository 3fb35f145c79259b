#include "hw_device.hpp"

#include <cerrno>
#include <cstring>

#include "core/env.hpp"
#include "providers/mlx5/rdma_core_lib.hpp"

namespace kinet::test::hw {
namespace {
std::string names(const Probe& p) {
  std::string s;
  for (const auto& d : p.devices) s += (s.empty() ? "" : ", ") + d.name + (d.mlx5 ? " (mlx5)" : "");
  return s;
}
}  // namespace

Choice choose_device(std::string_view requested, const Probe& p) {
  Choice c;
  if (requested == "mlx5_emu") {
    c.device = requested;
    return c;
  }
  const std::string asked = requested.empty() ? "" : " (KINET_HW_DEVICE=" + std::string(requested) + ")";
  if (!p.rdma_core) {
    c.skip = "no libibverbs/libmlx5" + asked + ": " + p.rdma_core_why;
  } else if (!p.listed) {
    c.skip = "no RDMA device" + asked + ": ibv_get_device_list failed (errno " + std::to_string(p.list_errno) + ": " +
             std::strerror(p.list_errno) + (p.list_errno == ENOSYS ? "; the kernel has no RDMA support loaded" : "") +
             ")";
  } else if (p.devices.empty()) {
    c.skip = "no RDMA device" + asked + ": rdma-core lists none";
  } else if (!requested.empty()) {
    const Probe::Listed* d = nullptr;
    for (const auto& x : p.devices)
      if (x.name == requested) d = &x;
    if (!d)
      c.skip =
          "no RDMA device named " + std::string(requested) + " (KINET_HW_DEVICE; rdma-core lists " + names(p) + ")";
    else if (!d->mlx5)
      c.skip = "device not mlx5: " + d->name +
               " (KINET_HW_DEVICE) is not supported by mlx5dv; kinet's mlx5 provider "
               "drives ConnectX only";
    else
      c.device = d->name;
  } else {
    for (const auto& x : p.devices)
      if (x.mlx5) {
        c.device = x.name;
        return c;
      }
    c.skip = "device not mlx5: none of the RDMA devices rdma-core lists (" + names(p) +
             ") is supported by mlx5dv; kinet's mlx5 provider drives ConnectX only";
  }
  return c;
}

Probe probe() {
  Probe p;
  const mlx5::RdmaCoreLib* l = mlx5::rdma_core(&p.rdma_core_why);
  if (!l) return p;
  p.rdma_core = true;
  int n = 0;
  errno = 0;
  ibv_device** list = l->get_device_list(&n);
  if (!list) {
    p.list_errno = errno;
    return p;
  }
  p.listed = true;
  for (int i = 0; i < n; ++i) p.devices.push_back({l->get_device_name(list[i]), l->is_supported(list[i])});
  l->free_device_list(list);
  return p;
}

const Choice& chosen() {
  static const Choice c = [] {
    const std::string requested = env::get_str("KINET_HW_DEVICE", "");
    // "mlx5_emu" needs no rdma-core: don't load it (choose_device ignores the probe then).
    return choose_device(requested, requested == "mlx5_emu" ? Probe{} : probe());
  }();
  return c;
}

PairOptions devices() {
  PairOptions o;
  o.device_a = o.device_b = chosen().device;
  return o;
}

}  // namespace kinet::test::hw
