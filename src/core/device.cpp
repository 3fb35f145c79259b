#include <string>

#include "kinet/kinet.hpp"
#include "providers/emu/emu.hpp"

namespace kinet {
std::unique_ptr<Device> Device::open(std::string_view name, const DeviceOptions& opt) {
  if (name == "emu") return emu::open_device(name, opt);
  if (name.size() > 3 && name.substr(0, 3) == "emu" &&
      name.substr(3).find_first_not_of("0123456789") == std::string_view::npos)
    return emu::open_device(name, opt);
  throw Error(ErrorCode::NotFound, "no RDMA device named '" + std::string(name) +
                                       "': this build knows the software NIC ('emu', 'emuN'); the mlx5 provider is "
                                       "not built yet (run kinet-info)");
}
}  // namespace kinet
