// kinet-info — what kinet can run on this machine, and why not.
//
// CUDA and libibverbs are probed with dlopen at run time, so this binary has
// no link dependency on either and runs everywhere kinet builds.
#include <dlfcn.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "kinet/kinet.hpp"

#ifndef KINET_INFO_VERSION
#define KINET_INFO_VERSION "unknown"
#endif

extern char** environ;

namespace {

// Environment variables the library reads (keep in sync with src/core/env.cpp).
struct EnvVar {
  const char* name;
  const char* meaning;
};
constexpr EnvVar kEnvVars[] = {
    {"KINET_TIMEOUT_MS", "bound of every wait in device verbs and tools (default 10000)"},
    {"KINET_LOG_LEVEL", "error | warn (default) | info | debug"},
};

void* open_first(const std::vector<const char*>& names, std::string* which) {
  for (const char* n : names) {
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) {
      *which = n;
      return h;
    }
  }
  return nullptr;
}

template <class F> F sym(void* lib, const char* name) { return reinterpret_cast<F>(dlsym(lib, name)); }

std::string version_str(int v) {  // CUDA encodes 1000*major + 10*minor
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// ---- providers ----------------------------------------------------------
bool report_emu() {
  try {
    auto dev = kinet::Device::open("emu");
    const kinet::DeviceAttr& a = dev->attr();
    std::printf("  emu    available: software NIC %s (max_qp_wr %u, max_msg %u, GPU memory %s)\n", a.name.c_str(),
                a.max_qp_wr, a.max_msg, a.gpu_memory ? "yes" : "no");
    return true;
  } catch (const std::exception& e) {
    std::printf("  emu    NOT available: %s\n", e.what());
    return false;
  }
}

// ---- GPU ----------------------------------------------------------------
int report_cuda() {
  std::printf("GPU (CUDA runtime via dlopen)\n");
  std::string lib_name;
  void* rt = open_first({"libcudart.so.13", "libcudart.so.12", "libcudart.so"}, &lib_name);
  if (!rt) {
    std::printf("  no CUDA runtime: libcudart.so.13/.12/.so not found (%s)\n", dlerror());
    return 0;
  }
  using IntFn = int (*)(int*);
  using ErrStrFn = const char* (*)(int);
  using AttrFn = int (*)(int*, int, int);
  using BusIdFn = int (*)(char*, int, int);
  auto runtime_version = sym<IntFn>(rt, "cudaRuntimeGetVersion");
  auto driver_version = sym<IntFn>(rt, "cudaDriverGetVersion");
  auto device_count = sym<IntFn>(rt, "cudaGetDeviceCount");
  auto error_string = sym<ErrStrFn>(rt, "cudaGetErrorString");
  auto attribute = sym<AttrFn>(rt, "cudaDeviceGetAttribute");
  auto bus_id = sym<BusIdFn>(rt, "cudaDeviceGetPCIBusId");
  if (!device_count || !error_string) {
    std::printf("  %s loaded but cudaGetDeviceCount/cudaGetErrorString missing\n", lib_name.c_str());
    return 0;
  }
  int rv = 0, dv = 0;
  if (runtime_version) runtime_version(&rv);
  if (driver_version) driver_version(&dv);
  std::printf("  %s: runtime %s, driver %s\n", lib_name.c_str(), rv ? version_str(rv).c_str() : "?",
              dv ? version_str(dv).c_str() : "none (no NVIDIA driver)");
  int n = 0;
  const int err = device_count(&n);
  if (err != 0) {
    std::printf("  no usable GPU: cudaGetDeviceCount: %s (error %d)\n", error_string(err), err);
    return 0;
  }
  // Names come from the driver API (stable across CUDA versions).
  std::string drv_name;
  void* drv = open_first({"libcuda.so.1", "libcuda.so"}, &drv_name);
  using CuInitFn = int (*)(unsigned);
  using CuNameFn = int (*)(char*, int, int);
  using CuMemFn = int (*)(size_t*, int);
  auto cu_init = drv ? sym<CuInitFn>(drv, "cuInit") : nullptr;
  auto cu_name = drv ? sym<CuNameFn>(drv, "cuDeviceGetName") : nullptr;
  auto cu_mem = drv ? sym<CuMemFn>(drv, "cuDeviceTotalMem_v2") : nullptr;
  const bool cu_ok = cu_init && cu_init(0) == 0;
  for (int d = 0; d < n; ++d) {
    char name[256] = "?";
    if (cu_ok && cu_name) cu_name(name, sizeof name, d);
    int major = 0, minor = 0;
    if (attribute) {
      attribute(&major, 75, d);  // cudaDevAttrComputeCapabilityMajor
      attribute(&minor, 76, d);  // cudaDevAttrComputeCapabilityMinor
    }
    char bus[32] = "?";
    if (bus_id) bus_id(bus, sizeof bus, d);
    size_t mem = 0;
    if (cu_ok && cu_mem) cu_mem(&mem, d);
    std::printf("  GPU %d: %s, sm_%d%d, %.0f GiB, PCI %s\n", d, name, major, minor, double(mem) / (1ull << 30), bus);
  }
  return n;
}

// ---- RDMA ---------------------------------------------------------------
int report_rdma() {
  std::printf("RDMA (libibverbs via dlopen)\n");
  std::string lib_name;
  void* ib = open_first({"libibverbs.so.1", "libibverbs.so"}, &lib_name);
  if (!ib) {
    std::printf("  no libibverbs: %s (install rdma-core / ibverbs-providers)\n", dlerror());
    return 0;
  }
  using ListFn = void** (*)(int*);
  using FreeFn = void (*)(void**);
  using NameFn = const char* (*)(void*);
  auto get_list = sym<ListFn>(ib, "ibv_get_device_list");
  auto free_list = sym<FreeFn>(ib, "ibv_free_device_list");
  auto get_name = sym<NameFn>(ib, "ibv_get_device_name");
  if (!get_list || !get_name) {
    std::printf("  %s loaded but ibv_get_device_list/ibv_get_device_name missing\n", lib_name.c_str());
    return 0;
  }
  int n = 0;
  void** list = get_list(&n);
  if (!list) {
    const int e = errno;
    std::printf("  %s: no RDMA devices: ibv_get_device_list: %s%s\n", lib_name.c_str(), std::strerror(e),
                e == ENOSYS ? " (no RDMA support in this kernel or container)" : "");
    return 0;
  }
  if (n == 0) std::printf("  %s: no RDMA devices (no NIC, or /dev/infiniband not visible here)\n", lib_name.c_str());
  for (int i = 0; i < n; ++i) {
    const char* name = get_name(list[i]);
    std::string status;
    try {
      auto dev = kinet::Device::open(name);
      status = "usable by kinet (provider " + dev->attr().provider + ")";
    } catch (const std::exception& e) {
      status = std::string("not usable by kinet: ") + e.what();
    }
    std::printf("  %s: %s\n", name ? name : "?", status.c_str());
  }
  if (free_list) free_list(list);
  return n;
}

// ---- environment ----------------------------------------------------------
void report_env() {
  std::printf("Environment\n");
  for (const EnvVar& v : kEnvVars) {
    const char* val = std::getenv(v.name);
    std::printf("  %-17s %-10s %s\n", v.name, val ? val : "(unset)", v.meaning);
  }
  std::printf("  (bound of waits now: %llu ms)\n", static_cast<unsigned long long>(kinet::default_timeout_ms()));
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "KINET_", 6) != 0) continue;
    std::string name(*e, std::strcspn(*e, "="));
    bool known = false;
    for (const EnvVar& v : kEnvVars) known |= name == v.name;
    if (!known) std::printf("  %s is set but not read by this version\n", name.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::printf("Usage: %s\nPrints the kinet version, its providers, the GPUs and RDMA devices found here\n"
                  "(CUDA and libibverbs are loaded with dlopen) and the environment variables kinet reads.\n",
                  argv[0]);
      return 0;
    }
    std::fprintf(stderr, "%s: unknown argument %s (try --help)\n", argv[0], argv[i]);
    return 2;
  }
  std::printf("kinet %s\n", KINET_INFO_VERSION);
  std::printf("Providers\n");
  const bool emu = report_emu();
  const int gpus = report_cuda();
  const int nics = report_rdma();
  report_env();

  std::printf("Can run here\n");
  std::printf("  host threads on the software NIC (emu): %s\n", emu ? "yes" : "no");
  std::printf("  GPU kernels on the software NIC:        %s\n",
              !emu ? "no (emu missing)" : gpus > 0 ? "yes (GPU present)" : "no (no usable GPU)");
  std::printf("  GPU kernels on an RDMA NIC (GDAKI):     %s\n",
              gpus > 0 && nics > 0 ? "maybe: see the RDMA devices above"
              : gpus > 0           ? "no (no RDMA device)"
              : nics > 0           ? "no (no usable GPU)"
                                   : "no (no GPU, no RDMA device)");
  return 0;
}
