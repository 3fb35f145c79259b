// kinet NCCL plugin — where NCCL's installed nccl.h exists, its result codes
// must be ours (the plugin headers themselves are not installed; see
// nccl_abi.hpp for where the other layouts come from).
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
