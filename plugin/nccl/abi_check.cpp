// kinet NCCL plugin — where NCCL's installed headers exist, their result
// codes, device types and device-handle layout must be ours. The plugin
// headers themselves (net_v11.h) are not installed; nccl_abi.hpp says where
// the other layouts come from.
#include <cstddef>

#include "nccl_abi.hpp"

#if __has_include(<nccl.h>)
#include <nccl.h>
namespace kinet::nccl {
static_assert(int(ncclSuccess) == kSuccess && int(ncclUnhandledCudaError) == kUnhandledCudaError &&
              int(ncclSystemError) == kSystemError && int(ncclInternalError) == kInternalError &&
              int(ncclInvalidArgument) == kInvalidArgument && int(ncclInvalidUsage) == kInvalidUsage &&
              int(ncclRemoteError) == kRemoteError && int(ncclInProgress) == kInProgress);
static_assert(sizeof(ncclResult_t) == sizeof(Result));
}  // namespace kinet::nccl
#endif

#if __has_include(<nccl_device/net_device.h>)
#include <nccl_device/net_device.h>
namespace kinet::nccl {
static_assert(int(NCCL_NET_DEVICE_HOST) == kDeviceHost && int(NCCL_NET_DEVICE_UNPACK) == kDeviceUnpack &&
              int(NCCL_NET_DEVICE_GIN_PROXY) == kDeviceGinProxy && int(NCCL_NET_DEVICE_GIN_GDAKI) == kDeviceGinGdaki);
static_assert(sizeof(ncclNetDeviceType) == sizeof(DeviceType));
static_assert(sizeof(ncclNetDeviceHandle_v11_t) == sizeof(DeviceHandle) &&
              offsetof(ncclNetDeviceHandle_v11_t, handle) == offsetof(DeviceHandle, handle) &&
              offsetof(ncclNetDeviceHandle_v11_t, size) == offsetof(DeviceHandle, size) &&
              offsetof(ncclNetDeviceHandle_v11_t, needsProxyProgress) == offsetof(DeviceHandle, needs_proxy_progress));
}  // namespace kinet::nccl
#endif
