// kinet — provider registry. The core knows no provider by name: each built
// provider has a registration function (kinet::provider::register_<name>(),
// listed by CMake in the generated providers.cpp) that calls add() once.
// Static self-registration is not used: kinet is a static library, and the
// linker drops object files that nothing references.
#pragma once
#include <memory>
#include <span>
#include <string_view>

#include "kinet/kinet.hpp"

namespace kinet::provider {

struct Provider {
  const char* name;         // "emu": also DeviceAttr::provider of its devices
  const char* description;  // one line for kinet-info and Device::open's errors
  // True if `device_name` belongs to this provider. Providers are asked in
  // registration order; the first match opens the device.
  bool (*matches)(std::string_view device_name);
  // Opens a device whose name matched; failures are kinet::Error.
  std::unique_ptr<Device> (*open)(std::string_view device_name, const DeviceOptions& opt);
  // A device name kinet-info may open to show the provider works here, or
  // nullptr when none can be opened without hardware knowledge.
  const char* probe_device;
};

// Registers `p` (called by register_<name>() only; names must be unique).
void add(const Provider& p);

// Every registered provider, in registration order. The first call runs the
// built providers' registration functions; thread-safe.
std::span<const Provider> all();

// Defined in the CMake-generated providers.cpp: calls every built provider's
// register_<name>().
void register_builtin();

}  // namespace kinet::provider
