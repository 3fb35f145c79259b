// Registers the software NIC with the core's provider registry (called once by
// the CMake-generated register_builtin()).
#include "core/provider.hpp"
#include "providers/emu/emu.hpp"

namespace kinet::provider {
namespace {
// "emu" opens a new software NIC; "emuN" names one (see Device::open).
bool emu_matches(std::string_view n) {
  if (n.substr(0, 3) != "emu") return false;
  return n.size() == 3 || n.substr(3).find_first_not_of("0123456789") == std::string_view::npos;
}
}  // namespace

void register_emu() {
  add({"emu", "software NIC executing mlx5 WQEs in a host thread (devices 'emu', 'emuN')", emu_matches,
       emu::open_device, "emu"});
}
}  // namespace kinet::provider
