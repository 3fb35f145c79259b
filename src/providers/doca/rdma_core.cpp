// kinet — SDK mode on real ConnectX devices (see rdma_core.hpp).
#include "providers/doca/rdma_core.hpp"

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "providers/doca/device.hpp"
#include "providers/mlx5/rdma_core.hpp"

namespace kinet::doca {
std::unique_ptr<Device> open_rdma_core_device(std::string_view name) {
  std::shared_ptr<const Sdk> sdk = Sdk::process();
  if (!sdk) return mlx5::open_rdma_core_device(name);  // SDK mode off: the open implementation
  const std::string what = "open " + std::string(name) + " in DOCA SDK mode";
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) {
    const int err = errno;
    throw Error(ErrorCode::NotFound, what + ": no such RDMA device: ibv_get_device_list failed (errno " +
                                         std::to_string(err) + ": " + std::strerror(err) +
                                         "; ENOSYS: the kernel has no RDMA support loaded)");
  }
  ibv_device* dev = nullptr;
  std::string names;
  for (int i = 0; i < n; ++i) {
    const char* nm = ibv_get_device_name(list[i]);
    names += (names.empty() ? "" : ", ") + std::string(nm);
    if (name == nm || (name == "auto" && !dev && mlx5dv_is_supported(list[i]))) dev = list[i];
  }
  if (!dev) {
    ibv_free_device_list(list);
    throw Error(ErrorCode::NotFound, what + ": no such RDMA device" + (name == "auto" ? " supporting mlx5dv" : "") +
                                         " (present: " + (names.empty() ? "none" : names) + ")");
  }
  const std::string dev_name = ibv_get_device_name(dev);
  if (!mlx5dv_is_supported(dev)) {
    ibv_free_device_list(list);
    throw Error(ErrorCode::NotSupported, what + ": " + dev_name + " is not an mlx5 device (DOCA drives ConnectX only)");
  }
  // DOCA's own workflow opens the context with plain verbs and hands it to the
  // SDK (doca_verbs_bridge_verbs_context_import), which adds what it needs.
  ibv_context* ctx = ibv_open_device(dev);
  const int err = errno;
  ibv_free_device_list(list);
  if (!ctx)
    throw Error(err == EPERM || err == EACCES ? ErrorCode::NotSupported : ErrorCode::System,
                what + ": ibv_open_device(" + dev_name + ") failed (errno " + std::to_string(err) + ": " +
                    std::strerror(err) + "; in a container it needs /dev/infiniband)");
  return open_device(std::move(sdk), {ctx, dev_name, &mlx5::rdma_core_verbs()});
}
}  // namespace kinet::doca
