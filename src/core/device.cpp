#include <string>

#include "kinet/kinet.hpp"
#include "providers/emu/emu.hpp"
#include "providers/mlx5/provider.hpp"

namespace kinet {
namespace {
// "<prefix>" or "<prefix>N".
bool names(std::string_view name, std::string_view prefix) {
  return name.substr(0, prefix.size()) == prefix &&
         name.substr(prefix.size()).find_first_not_of("0123456789") == std::string_view::npos;
}
}  // namespace

std::unique_ptr<Device> Device::open(std::string_view name, const DeviceOptions& opt) {
  if (names(name, "emu")) return emu::open_device(name, opt);
  if (names(name, "mlx5_emu")) return mlx5::open_emu_device(name, opt);
  throw Error(ErrorCode::NotFound, "no RDMA device named '" + std::string(name) +
                                       "': this build knows the software NIC ('emu', 'emuN') and the mlx5 provider "
                                       "over it ('mlx5_emu', 'mlx5_emuN'); rdma-core devices are not wired into "
                                       "Device::open yet (run kinet-info)");
}
}  // namespace kinet
