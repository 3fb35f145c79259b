// kinet-info — collect_facts(): reads this machine for diagnose() (diagnose.hpp).
// CUDA's driver API and (without kinet_mlx5) libibverbs are loaded with
// dlopen, so kinet-info runs where neither is installed.
#include <dirent.h>
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include "diagnose.hpp"
#include "dl.hpp"
#include "providers/mlx5/provider.hpp"

namespace kinet::info {
namespace {

bool exists(const char* p) { return access(p, F_OK) == 0; }

void collect_gpus(Facts& f) {
  void* cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cu) {
    f.gpu_problem = "no NVIDIA driver (libcuda.so.1 not found)";
    return;
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  using GetFn = int (*)(int*, int);
  using NameFn = int (*)(char*, int, int);
  using AttrFn = int (*)(int*, int, int);
  using BusFn = int (*)(char*, int, int);
  auto init = sym<InitFn>(cu, "cuInit");
  auto count = sym<CountFn>(cu, "cuDeviceGetCount");
  auto get = sym<GetFn>(cu, "cuDeviceGet");
  auto name = sym<NameFn>(cu, "cuDeviceGetName");
  auto attr = sym<AttrFn>(cu, "cuDeviceGetAttribute");
  auto bus = sym<BusFn>(cu, "cuDeviceGetPCIBusId");
  if (!init || !count || !get || !name || !attr || !bus) {
    f.gpu_problem = "libcuda.so.1 lacks cuInit/cuDeviceGet*";
    return;
  }
  if (const int rc = init(0); rc != 0) {
    f.gpu_problem = "cuInit failed (CUresult " + std::to_string(rc) + (rc == 100 ? ": no CUDA-capable device)" : ")");
    return;
  }
  int n = 0;
  if (count(&n) != 0 || n == 0) {
    f.gpu_problem = "the NVIDIA driver reports no GPU";
    return;
  }
  for (int i = 0; i < n; ++i) {
    int d = 0;
    if (get(&d, i) != 0) continue;
    Gpu g;
    g.index = i;
    char nm[256] = "?", pci[64] = "?";
    name(nm, sizeof nm, d);
    bus(pci, sizeof pci, d);
    g.name = nm;
    g.pci = pci;
    int major = 0, minor = 0, dmabuf = 0;
    attr(&major, 75, d);  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    attr(&minor, 76, d);  // ..._MINOR
    g.sm = major * 10 + minor;
    g.dmabuf = attr(&dmabuf, 124, d) == 0 ? (dmabuf != 0) : -1;  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
    f.gpus.push_back(g);
  }
}

void collect_rdma(Facts& f) {
#if KINET_INFO_HAVE_RDMA_CORE
  f.rdma_core_built = true;
  f.nics = mlx5::rdma_inventory(&f.rdma_problem);
#else
  void* ib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!ib) {
    f.rdma_problem = "no libibverbs.so.1 (rdma-core is not installed)";
    return;
  }
  using ListFn = void** (*)(int*);
  using FreeFn = void (*)(void**);
  using NameFn = const char* (*)(void*);
  auto list_fn = sym<ListFn>(ib, "ibv_get_device_list");
  auto free_fn = sym<FreeFn>(ib, "ibv_free_device_list");
  auto name_fn = sym<NameFn>(ib, "ibv_get_device_name");
  if (!list_fn || !free_fn || !name_fn) return;
  int n = 0;
  void** l = list_fn(&n);
  if (!l) {
    f.rdma_problem = std::string("ibv_get_device_list failed: ") + std::strerror(errno);
    return;
  }
  for (int i = 0; i < n; ++i) f.nic_names.push_back(name_fn(l[i]));
  free_fn(l);
#endif
}

// CAP_IPC_LOCK (bit 14) in this process's effective set.
bool cap_ipc_lock() {
  std::ifstream s("/proc/self/status");
  std::string line;
  while (std::getline(s, line))
    if (line.rfind("CapEff:", 0) == 0) return (std::strtoull(line.c_str() + 7, nullptr, 16) >> 14) & 1;
  return false;
}
}  // namespace

Facts collect_facts() {
  Facts f;
  collect_gpus(f);
  collect_rdma(f);
  utsname u{};
  if (uname(&u) == 0) f.kernel_release = u.release;
  f.nvidia_driver = exists("/proc/driver/nvidia");
  f.peermem_loaded = exists("/sys/module/nvidia_peermem");
  {
    std::ifstream p("/proc/driver/nvidia/params");
    std::string line;
    while (std::getline(p, line))
      if (line.rfind("RegistryDwords:", 0) == 0) f.registry_dwords = line.substr(15);
  }
  f.dev_infiniband = exists("/dev/infiniband");
  if (DIR* d = opendir("/dev/infiniband")) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.rfind("uverbs", 0) != 0) continue;
      const std::string p = "/dev/infiniband/" + n;
      f.uverbs.push_back(p);
      if (access(p.c_str(), R_OK | W_OK) != 0) f.uverbs_denied.push_back(p);
    }
    closedir(d);
  }
  f.rdma_cm = exists("/dev/infiniband/rdma_cm");
  f.cap_ipc_lock = cap_ipc_lock();
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0)
    f.memlock_bytes = rl.rlim_cur == RLIM_INFINITY ? std::numeric_limits<uint64_t>::max() : rl.rlim_cur;
  if (void* g = dlopen("libgdrapi.so.2", RTLD_NOW | RTLD_LOCAL)) {
    f.gdrcopy = true;
    dlclose(g);
  } else {
    const char* e = dlerror();
    f.gdrcopy_problem = e ? e : "libgdrapi.so.2 not found";
  }
  const mlx5::Backend hw;  // what the provider does on hardware
  f.provider_maps_uar = hw.uar_gpu_mappable;
  f.provider_uar_why = hw.uar_gpu_why;
  f.doorbell_env = std::getenv("KINET_DOORBELL_MODE");
  // PCIe locations of every GPU and NIC (the pairs' distances).
  auto locate = [&f](const std::string& bdf) {
    const std::string b = normalize_bdf(bdf);
    if (!b.empty()) f.pci[b] = pci_location(b);
  };
  for (const Gpu& g : f.gpus) locate(g.pci);
  for (const mlx5::RdmaDevice& n : f.nics) locate(n.pci);
  return f;
}
}  // namespace kinet::info
