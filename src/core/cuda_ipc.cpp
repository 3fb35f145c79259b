#include "core/cuda_ipc.hpp"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

#include "core/dl_util.hpp"
#include "core/text.hpp"
#include "kinet/kinet.hpp"

namespace kinet::cuda_ipc {
namespace {
// The few entry points, declared here so that no CUDA header is needed. The
// handle is a 64-byte struct passed by value, as cudaIpcMemHandle_t is.
struct IpcHandle {
  char reserved[kHandleBytes];
};
struct Api {
  bool ok = false;
  std::string why;
  int (*getDeviceCount)(int*) = nullptr;
  int (*getDevice)(int*) = nullptr;
  int (*setDevice)(int) = nullptr;
  int (*deviceGetPCIBusId)(char*, int, int) = nullptr;
  int (*malloc)(void**, size_t) = nullptr;
  int (*free)(void*) = nullptr;
  int (*memset)(void*, int, size_t) = nullptr;
  int (*ipcGetMemHandle)(IpcHandle*, void*) = nullptr;
  int (*ipcOpenMemHandle)(void**, IpcHandle, unsigned) = nullptr;
  int (*ipcCloseMemHandle)(void*) = nullptr;
  const char* (*getErrorString)(int) = nullptr;
  int (*getLastError)() = nullptr;
  int (*memGetAddressRange)(unsigned long long*, size_t*, unsigned long long) = nullptr;  // driver API
};
constexpr unsigned kLazyEnablePeerAccess = 1;  // cudaIpcMemLazyEnablePeerAccess
constexpr int kInvalidContext = 201;           // CUDA_ERROR_INVALID_CONTEXT

using dl::sym;

const Api& api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dl::open_cudart();
    if (!h) {
      a.why = "no CUDA runtime (libcudart) found";
      return;
    }
    if (!(sym(h, "cudaGetDeviceCount", a.getDeviceCount) && sym(h, "cudaGetDevice", a.getDevice) && sym(h, "cudaSetDevice", a.setDevice) &&
          sym(h, "cudaDeviceGetPCIBusId", a.deviceGetPCIBusId) && sym(h, "cudaMalloc", a.malloc) &&
          sym(h, "cudaFree", a.free) && sym(h, "cudaMemset", a.memset) &&
          sym(h, "cudaIpcGetMemHandle", a.ipcGetMemHandle) && sym(h, "cudaIpcOpenMemHandle", a.ipcOpenMemHandle) &&
          sym(h, "cudaIpcCloseMemHandle", a.ipcCloseMemHandle) && sym(h, "cudaGetErrorString", a.getErrorString) &&
          sym(h, "cudaGetLastError", a.getLastError))) {
      a.why = "libcudart lacks a CUDA IPC symbol";
      return;
    }
    if (void* drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL))
      sym(drv, "cuMemGetAddressRange_v2", a.memGetAddressRange);
    int n = 0;
    if (a.getDeviceCount(&n) != 0 || n <= 0) {
      a.getLastError();
      a.why = "CUDA runtime found but no GPU";
      return;
    }
    a.ok = true;
  });
  return a;
}

std::string err(int e) {
  api().getLastError();
  return api().getErrorString ? api().getErrorString(e) : "CUDA error " + std::to_string(e);
}
}  // namespace

bool available(std::string* why) {
  if (!api().ok && why) *why = api().why;
  return api().ok;
}

std::string device_name() {
  if (!api().ok) return "no GPU";
  int d = -1;
  char bus[32] = {};
  if (api().getDevice(&d) != 0 || api().deviceGetPCIBusId(bus, sizeof bus, d) != 0) return "GPU ?";
  return std::string(bus) + " (device " + std::to_string(d) + ")";
}

void* alloc(size_t bytes) {
  if (!api().ok) throw Error(ErrorCode::NotSupported, "comm: GPU window: " + api().why);
  void* p = nullptr;
  if (int e = api().malloc(&p, bytes); e != 0)
    throw Error(e == 2 ? ErrorCode::ResourceExhausted : ErrorCode::System,
                "comm: cudaMalloc of " + std::to_string(bytes) + " bytes failed: " + err(e));
  if (int e = api().memset(p, 0, bytes); e != 0) {
    api().free(p);
    throw Error(ErrorCode::System, "comm: cudaMemset of a new window failed: " + err(e));
  }
  return p;
}

void free(void* p) {
  if (p && api().ok) api().free(p);
}

bool export_memory(const void* p, Exported* out, std::string* why) {
  if (!api().ok) {
    *why = api().why;
    return false;
  }
  uint64_t base = reinterpret_cast<uintptr_t>(p), len = 0;
  if (api().memGetAddressRange && !allocation(p, &base, &len, why)) return false;
  IpcHandle h;
  if (int e = api().ipcGetMemHandle(&h, reinterpret_cast<void*>(base)); e != 0) {
    *why = "cudaIpcGetMemHandle failed: " + err(e);
    return false;
  }
  std::memcpy(out->handle, h.reserved, kHandleBytes);
  out->offset = reinterpret_cast<uintptr_t>(p) - base;
  return true;
}

void* open(const Exported& e, std::string* why) {
  void* base = open_handle(e.handle, why);
  return base ? static_cast<uint8_t*>(base) + e.offset : nullptr;
}

void close(void* mapped, uint64_t offset) {
  std::string why;
  if (mapped) close_handle(static_cast<uint8_t*>(mapped) - offset, &why);
}

bool ranges_available(std::string* why) {
  if (!available(why)) return false;
  if (!api().memGetAddressRange) {
    *why = "libcuda.so.1 (the CUDA driver) or its cuMemGetAddressRange_v2 is missing";
    return false;
  }
  return true;
}

bool allocation(const void* p, uint64_t* base, uint64_t* size, std::string* why) {
  if (!ranges_available(why)) return false;
  unsigned long long b = 0;
  size_t n = 0;
  int r = api().memGetAddressRange(&b, &n, reinterpret_cast<uintptr_t>(p));
  if (r == kInvalidContext) {
    // A thread that made no runtime call yet (a proxy thread) has no current
    // context: binding the current device's primary context fixes that.
    int d = 0;
    if (api().getDevice(&d) == 0 && api().setDevice(d) == 0)
      r = api().memGetAddressRange(&b, &n, reinterpret_cast<uintptr_t>(p));
    else
      api().getLastError();
  }
  if (r != 0) {
    *why = "cuMemGetAddressRange of " + text::hexp(p) + " failed (CUresult " +
           std::to_string(r) + "): not memory of cudaMalloc";
    return false;
  }
  *base = b;
  *size = n;
  return true;
}

void* open_handle(const uint8_t handle[kHandleBytes], std::string* why) {
  if (!api().ok) {
    *why = api().why;
    return nullptr;
  }
  IpcHandle h;
  std::memcpy(h.reserved, handle, kHandleBytes);
  void* base = nullptr;
  if (int r = api().ipcOpenMemHandle(&base, h, kLazyEnablePeerAccess); r != 0) {
    *why = "cudaIpcOpenMemHandle failed: " + err(r);
    return nullptr;
  }
  return base;
}

bool close_handle(void* base, std::string* why) {
  if (!base || !api().ok) return true;
  if (int r = api().ipcCloseMemHandle(base); r != 0) {
    *why = "cudaIpcCloseMemHandle failed: " + err(r);
    return false;
  }
  return true;
}

}  // namespace kinet::cuda_ipc
