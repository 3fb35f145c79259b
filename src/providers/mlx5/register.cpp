// Registers the mlx5 provider with the core's provider registry (called once
// by the CMake-generated register_builtin()). In libkinet it opens
// "mlx5_emu"/"mlx5_emuN": the real provider (DevX mailboxes, UMEM rings, UAR
// doorbell) over the software NIC's DevX entry point. rdma-core devices are
// opened through kinet_mlx5 (open_rdma_core_device), not registered here yet.
#include "core/provider.hpp"
#include "providers/mlx5/provider.hpp"

namespace kinet::provider {
namespace {
bool mlx5_emu_matches(std::string_view n) {
  constexpr std::string_view p = "mlx5_emu";
  if (n.substr(0, p.size()) != p) return false;
  return n.substr(p.size()).find_first_not_of("0123456789") == std::string_view::npos;
}
std::unique_ptr<Device> open_mlx5_emu(std::string_view n, const DeviceOptions& o) {
  return mlx5::open_emu_device(n, o);
}
}  // namespace

void register_mlx5() {
  add({"mlx5", "ConnectX provider (DevX, UMEM rings, UAR doorbell); here over the software NIC's DevX entry point "
               "(devices 'mlx5_emu', 'mlx5_emuN')",
       mlx5_emu_matches, open_mlx5_emu, "mlx5_emu"});
}
}  // namespace kinet::provider
