// kinet — "mlx5_emu": the mlx5 provider over the software NIC's DevX entry point.
#include "providers/emu/devx_nic.hpp"
#include "providers/mlx5/provider.hpp"

namespace kinet::mlx5 {
std::unique_ptr<Device> open_emu_device(std::string_view name, const DeviceOptions& opt, const DevxOps* devx) {
  constexpr std::string_view kPrefix = "mlx5_";
  if (name.substr(0, kPrefix.size()) != kPrefix)
    throw Error(ErrorCode::InvalidArgument, "open: '" + std::string(name) + "' is not an mlx5_emu device name");
  const emu::DevxNicHandle h = emu::open_devx_nic(name.substr(kPrefix.size()), opt);  // "emu" or "emuN"
  Backend b{h.ctx, std::string(kPrefix) + h.name, devx ? devx : &emu::devx_nic_ops(), &emu::devx_nic_verbs()};
  b.uar_gpu_mappable = true;  // the software NIC's doorbell registers are pinned host memory
  b.uar_gpu_why.clear();
  return open_device(b);
}
}  // namespace kinet::mlx5
