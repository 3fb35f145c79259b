// kinet — SDK mode on real ConnectX devices (compiled into kinet_mlx5, which
// links rdma-core).
#pragma once
#include <memory>
#include <string_view>

#include "kinet/kinet.hpp"

namespace kinet::doca {
// Opens RDMA device `name` ("mlx5_0", or "auto": the first one mlx5dv
// supports). SDK mode on (Sdk::process() loaded DOCA_SDK_LIB_PATH): the
// context comes from ibv_open_device and the DOCA SDK makes the rest
// (open_device, device.hpp). SDK mode off: mlx5::open_rdma_core_device, the
// open implementation. Throws NotFound naming the devices present,
// NotSupported for a device that is not mlx5, and the SDK's errors.
std::unique_ptr<Device> open_rdma_core_device(std::string_view name);
}  // namespace kinet::doca
