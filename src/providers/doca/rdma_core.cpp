// kinet — SDK mode on real ConnectX devices (see rdma_core.hpp).
#include "providers/doca/rdma_core.hpp"

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
  // DOCA's own workflow opens the context with plain verbs and hands it to the
  // SDK (doca_verbs_bridge_verbs_context_import), which adds what it needs.
  const mlx5::ListedDevice d = mlx5::open_listed_device(name, what, "DOCA", ibv_open_device);
  const int err = d.err;
  if (!d.ctx)
    throw Error(err == EPERM || err == EACCES ? ErrorCode::NotSupported : ErrorCode::System,
                what + ": ibv_open_device(" + d.name + ") failed (errno " + std::to_string(err) + ": " +
                    std::strerror(err) + "; in a container it needs /dev/infiniband)");
  return open_device(std::move(sdk), {d.ctx, d.name, &mlx5::rdma_core_verbs()});
}
}  // namespace kinet::doca
