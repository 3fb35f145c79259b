#include "comm/ipc.hpp"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

#include "core/dl_util.hpp"
#include "kinet/kinet.hpp"

namespace kinet::comm_ipc {
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
    if (!(sym(h, "cudaGetDeviceCount", a.getDeviceCount) && sym(h, "cudaGetDevice", a.getDevice) &&
          sym(h, "cudaDeviceGetPCIBusId", a.deviceGetPCIBusId) && sym(h, "cudaMalloc", a.malloc) &&
          sym(h, "cudaFree", a.free) && sym(h, "cudaMemset", a.memset) &&
          sym(h, "cudaIpcGetMemHandle", a.ipcGetMemHandle) && sym(h, "cudaIpcOpenMemHandle", a.ipcOpenMemHandle) &&
          sym(h, "cudaIpcCloseMemHandle", a.ipcCloseMemHandle) && sym(h, "cudaGetErrorString", a.getErrorString) &&
          sym(h, "cudaGetLastError", a.getLastError))) {
      a.why = "libcudart lacks a CUDA IPC symbol";
      return;
    }
    if (void* drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) sym(drv, "cuMemGetAddressRange_v2", a.memGetAddressRange);
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
  unsigned long long base = reinterpret_cast<uintptr_t>(p);
  size_t len = 0;
  if (api().memGetAddressRange && api().memGetAddressRange(&base, &len, reinterpret_cast<uintptr_t>(p)) != 0) {
    *why = "cuMemGetAddressRange failed: not memory of cudaMalloc";
    return false;
  }
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
  if (!api().ok) {
    *why = api().why;
    return nullptr;
  }
  IpcHandle h;
  std::memcpy(h.reserved, e.handle, kHandleBytes);
  void* base = nullptr;
  if (int r = api().ipcOpenMemHandle(&base, h, kLazyEnablePeerAccess); r != 0) {
    *why = "cudaIpcOpenMemHandle failed: " + err(r);
    return nullptr;
  }
  return static_cast<uint8_t*>(base) + e.offset;
}

void close(void* mapped, uint64_t offset) {
  if (mapped && api().ok) api().ipcCloseMemHandle(static_cast<uint8_t*>(mapped) - offset);
}

}  // namespace kinet::comm_ipc
