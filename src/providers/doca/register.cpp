// Registers SDK mode with the core's provider registry, as its own provider
// "doca" asked before "mlx5" (CMakeLists.txt puts it there).
//
// Why a provider and not a branch inside mlx5: SDK mode replaces the whole
// control path (DOCA makes the CQ/QP from attribute objects, not from DevX
// mailboxes), so it shares no code with mlx5's DevX layer, and the fallback
// needs nothing from mlx5: matches() claims a device name only when SDK mode
// is on, and when it is off (DOCA_SDK_LIB_PATH unset, or a library or symbol
// missing: one log line, Sdk::process) the name falls through to "mlx5", the
// open implementation. Once claimed, SDK errors are thrown, never a fallback.
//
// Names claimed in libkinet: "mlx5_emu" / "mlx5_emuN", and only under a
// stand-in SDK (tests): the real SDK can't take the software NIC's objects,
// so with it those names stay on the open path. Real devices ("mlx5_0") are
// opened by kinet_mlx5, which is not registered yet: when it is, it calls
// doca::open_device(Sdk::process(), {ctx, name, &rdma_core_verbs()}) when
// Sdk::process() is not null (device.hpp).
#include <string_view>

#include "core/log.hpp"
#include "core/provider.hpp"
#include "providers/doca/device.hpp"

namespace kinet::provider {
namespace {
bool is_mlx5_emu(std::string_view n) {
  constexpr std::string_view p = "mlx5_emu";
  if (n.substr(0, p.size()) != p) return false;
  return n.substr(p.size()).find_first_not_of("0123456789") == std::string_view::npos;
}
bool doca_matches(std::string_view n) {
  if (!is_mlx5_emu(n)) return false;
  const auto sdk = doca::Sdk::process();
  if (!sdk) return false;
  if (!sdk->standin()) {
    KINET_LOG(Debug, "%.*s: stays on kinet's open control path: the DOCA SDK can't drive the software NIC",
              static_cast<int>(n.size()), n.data());
    return false;
  }
  return true;
}
std::unique_ptr<Device> doca_open(std::string_view n, const DeviceOptions& o) {
  return doca::open_emu_device(doca::Sdk::process(), n, o);
}
}  // namespace

void register_doca() {
  add({"doca", "DOCA SDK mode: ConnectX control path through the DOCA SDK named by DOCA_SDK_LIB_PATH (loaded with "
               "dlopen); falls back to 'mlx5' when the SDK is missing or incomplete",
       doca_matches, doca_open, nullptr});
}
}  // namespace kinet::provider
