// kinet-info — can GDAKI run here, and if not, exactly why and how to fix it.
//
// Two halves: collect_facts() reads the machine (GPUs through CUDA via dlopen,
// RDMA devices through rdma-core when kinet_mlx5 is built, /sys, /proc, /dev,
// rlimits, capabilities, GDRCopy via dlopen), and diagnose() decides from
// those facts alone: a pure function, unit-tested with fabricated fact sets
// (tests/unit/kinet_info_diagnose_test.cpp).
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pcie.hpp"
#include "providers/mlx5/inventory.hpp"

namespace kinet::info {

struct Gpu {
  int index = 0;
  std::string name;
  int sm = 0;
  std::string pci;
  int dmabuf = -1;  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: 1, 0, or -1 unknown
};

struct Facts {
  // GPUs (CUDA via dlopen). gpu_problem: why none is usable (no runtime, no driver...).
  std::vector<Gpu> gpus;
  std::string gpu_problem;
  // RDMA devices. rdma_core_built: this kinet-info has kinet_mlx5 (ports, GIDs);
  // without it only names are known (nic_names, via a dlopen'ed libibverbs).
  bool rdma_core_built = false;
  std::vector<mlx5::RdmaDevice> nics;
  std::vector<std::string> nic_names;
  std::string rdma_problem;
  // GPU memory registration paths.
  std::string kernel_release;   // uname -r
  bool nvidia_driver = false;   // /proc/driver/nvidia exists
  bool peermem_loaded = false;  // /sys/module/nvidia_peermem exists
  std::string registry_dwords;  // NVIDIA driver RegistryDwords (/proc/driver/nvidia/params)
  // Container: device files and pinning.
  bool dev_infiniband = false;               // /dev/infiniband exists
  std::vector<std::string> uverbs;           // /dev/infiniband/uverbs*
  std::vector<std::string> uverbs_denied;    // of those, not readable+writable by this process
  bool rdma_cm = false;                      // /dev/infiniband/rdma_cm exists
  bool cap_ipc_lock = false;
  uint64_t memlock_bytes = 0;  // RLIMIT_MEMLOCK soft limit; UINT64_MAX = unlimited
  // GDRCopy (optional).
  bool gdrcopy = false;
  std::string gdrcopy_problem;
  // The doorbell page: whether kinet's mlx5 provider maps a UAR into the GPU
  // (mlx5::Backend::uar_gpu_mappable on hardware) and why not.
  bool provider_maps_uar = false;
  std::string provider_uar_why;
  // $KINET_DOORBELL_MODE (null: unset).
  const char* doorbell_env = nullptr;
  // Where the GPUs and NICs sit on PCIe, by normalized address (normalize_bdf
  // of Gpu::pci and RdmaDevice::pci); a missing entry is an unknown location.
  std::map<std::string, PciLocation> pci;
};

// One check's outcome. blocker: GDAKI can't run until it is fixed.
struct Finding {
  std::string check;  // "gpu", "nic", "port", "gid", "memory", "uar", "devices", "memlock", "gdrcopy", "build"
  bool blocker = false;
  std::string what;   // what is wrong (or, for ok checks, what was found)
  std::string fix;    // how to fix it; empty when nothing to do
};

struct Pair {
  int gpu = 0;
  std::string nic;
  bool gdaki = false;             // no blocker for this pair
  std::vector<Finding> findings;  // the NIC's own; machine-wide ones are in Diagnosis::machine
  std::string doorbell;           // mode kinet would pick for kernels posting on this pair: uar, bf, cpu
  std::string doorbell_why;       // the reason when it is cpu
  std::string pcie;               // PCIe distance as nvidia-smi topo names it: PIX, PXB, PHB, NODE, SYS, unknown
  std::string pcie_why;           // in words (pcie.hpp)
};

struct Diagnosis {
  std::vector<Finding> machine;  // blockers apply to every pair
  std::vector<Pair> pairs;       // every GPU x every RDMA device
  std::string backend;           // what kinet would use here, in words
  std::string summary;           // one line: can GDAKI run, and the first reason if not
  bool any_gdaki = false;
};

// The decision: a pure function of `f`.
Diagnosis diagnose(const Facts& f);
// Reads this machine (see the header comment).
Facts collect_facts();
nlohmann::ordered_json to_json(const Facts& f, const Diagnosis& d);
// Human-readable report, for kinet-info's text output.
std::string to_text(const Facts& f, const Diagnosis& d);

// "5.12.0-rc1" -> {5, 12}; {0, 0} when unparsable.
std::pair<int, int> kernel_version(const std::string& release);

}  // namespace kinet::info
