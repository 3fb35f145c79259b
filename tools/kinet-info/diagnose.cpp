// kinet-info — the diagnosis (see diagnose.hpp). Facts of the NVIDIA driver
// and GPU memory registration that the messages state, and where they come from:
// - PeerMappingOverride: NVSHMEM's maintainers say `NVreg_RegistryDwords=
//   "PeerMappingOverride=1;"` is still needed for fully device-initiated IBGDA
//   (the GPU rings the NIC's doorbell), not for CPU-assisted IBGDA
//   (NVIDIA/nvshmem issue #23); mapping the doorbell page into the GPU
//   (cudaHostRegister with cudaHostRegisterIoMemory) failing with CUDA error
//   800 is the symptom users report (deepseek-ai/DeepEP issue #163).
// - dma-buf: registering GPU memory with ibv_reg_dmabuf_mr needs rdma-core
//   41+ and CUDA 11.7+ with CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (openucx/ucx
//   pull request #11002), and a kernel whose RDMA core imports dma-bufs
//   (Linux 5.12 added ib_umem_dmabuf); else nvidia_peermem (ibv_reg_mr on
//   GPU memory).
// - RMForceStaticBar1: reported as found; no public source we can cite says
//   how it affects doorbell mappings, so it is not interpreted.
#include "diagnose.hpp"

#include <cstdio>
#include <limits>

#include "core/doorbell.hpp"

namespace kinet::info {
namespace {
using json = nlohmann::ordered_json;

std::string mib(uint64_t b) {
  if (b == std::numeric_limits<uint64_t>::max()) return "unlimited";
  return std::to_string(b >> 20) + " MiB";
}
bool has_word(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

// A NIC's own checks: mlx5, opened, an active port, a RoCE v2 GID on Ethernet.
std::vector<Finding> nic_findings(const mlx5::RdmaDevice& n) {
  std::vector<Finding> out;
  if (!n.mlx5) {
    out.push_back({"nic", true, n.name + " is not an mlx5 (ConnectX) device",
                   "GDAKI writes mlx5 WQEs: use a ConnectX-6 Dx or newer"});
    return out;
  }
  if (!n.open_error.empty()) {
    out.push_back({"nic", true, n.name + ": " + n.open_error,
                   "check /dev/infiniband permissions (see 'devices') and that the mlx5_ib module is loaded"});
    return out;
  }
  const mlx5::PortEntry* active = nullptr;
  std::string states;
  for (const mlx5::PortEntry& p : n.ports) {
    states += (states.empty() ? "" : ", ") + std::string("port ") + std::to_string(p.port) + " " + p.state;
    if (!active && p.state == "active") active = &p;
  }
  if (!active) {
    out.push_back({"port", true, n.name + " has no active port (" + (states.empty() ? "no ports" : states) + ")",
                   "connect the link (cable, switch port, subnet manager on InfiniBand)"});
    return out;
  }
  if (active->link_layer == "Ethernet") {
    bool v2 = false;
    for (const mlx5::GidEntry& g : active->gids) v2 |= g.type == "RoCE v2";
    if (!v2)
      out.push_back({"gid", true,
                     n.name + " port " + std::to_string(active->port) + " (RoCE) has no RoCE v2 GID",
                     "give its network interface an IP address (RoCE v2 GIDs follow the interface's addresses), "
                     "or set KINET_GID_INDEX to an existing entry"});
  }
  return out;
}

std::string doorbell_for(const Facts& f, std::string* why) {
  doorbell::UarReach reach;
  reach.gpu_posters = true;
  reach.gpu_mappable = f.provider_maps_uar;
  reach.why_not = f.provider_uar_why;
  try {
    const doorbell::Decision d =
        doorbell::decide("kinet", Doorbell::Auto, f.doorbell_env, doorbell::Caps{true, true, true}, reach);
    if (!d.note.empty()) *why = f.provider_uar_why;
    return doorbell::mode_name(d.mode);
  } catch (const Error& e) {
    *why = e.what();
    return "none";
  }
}

// Facts::pci's entry for PCI address `bdf` (any form normalize_bdf takes); empty when unknown.
PciLocation location(const Facts& f, const std::string& bdf) {
  const auto it = f.pci.find(normalize_bdf(bdf));
  return it == f.pci.end() ? PciLocation{} : it->second;
}
}  // namespace

std::pair<int, int> kernel_version(const std::string& r) {
  int a = 0, b = 0;
  if (std::sscanf(r.c_str(), "%d.%d", &a, &b) != 2) return {0, 0};
  return {a, b};
}

Diagnosis diagnose(const Facts& f) {
  Diagnosis d;
  auto add = [&](Finding x) { d.machine.push_back(std::move(x)); };
  const size_t n_nics = f.rdma_core_built ? f.nics.size() : f.nic_names.size();

  if (!f.rdma_core_built)
    add({"build", false,
         "kinet-info was built without rdma-core (kinet_mlx5): RDMA devices are known by name only, without ports, "
         "link layer or GID table",
         "install rdma-core's headers (libibverbs-dev) and rebuild kinet"});
  if (f.gpus.empty())
    add({"gpu", true, "no GPU" + (f.gpu_problem.empty() ? std::string() : ": " + f.gpu_problem),
         "GDAKI needs an NVIDIA GPU and its driver; host threads can still post with the device verbs"});
  if (n_nics == 0)
    add({"nic", true,
         "no RDMA device" + (f.rdma_problem.empty() ? std::string() : " (" + f.rdma_problem + ")"),
         "GDAKI needs a ConnectX-6 Dx or newer (and, in a container, /dev/infiniband); without one, kinet's "
         "software NIC (devices 'emu', 'mlx5_emu') runs the same kernels and host threads"});

  // GPU memory registration: nvidia_peermem, or dma-buf (kernel and GPU).
  const auto [kmaj, kmin] = kernel_version(f.kernel_release);
  const bool kernel_dmabuf = kmaj > 5 || (kmaj == 5 && kmin >= 12);
  bool gpu_dmabuf = false;
  for (const Gpu& g : f.gpus) gpu_dmabuf |= g.dmabuf == 1;
  if (!f.gpus.empty()) {
    if (f.peermem_loaded)
      add({"memory", false, "nvidia_peermem is loaded: GPU memory registers with ibv_reg_mr", ""});
    else if (kernel_dmabuf && gpu_dmabuf)
      add({"memory", false,
           "dma-buf: kernel " + f.kernel_release + " imports dma-bufs and the GPU exports them "
           "(ibv_reg_dmabuf_mr)", ""});
    else
      add({"memory", true,
           "neither dma-buf nor nvidia_peermem: " +
               std::string(kernel_dmabuf ? "the GPU does not report dma-buf support (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)"
                                         : "kernel " + f.kernel_release + " is older than 5.12 (no RDMA dma-buf import)") +
               " and /sys/module/nvidia_peermem is absent",
           "load nvidia_peermem (modprobe nvidia_peermem), or use Linux >= 5.12 with rdma-core >= 41, CUDA >= 11.7 "
           "and a GPU driver that exports dma-bufs"});
  }

  // Device files and pinning (what a container most often lacks).
  if (n_nics > 0 || f.dev_infiniband) {
    if (!f.dev_infiniband)
      add({"devices", true, "/dev/infiniband is missing (RDMA devices are listed, but can't be opened here)",
           "in a container: pass the devices (--device=/dev/infiniband/uverbsN and --device=/dev/infiniband/rdma_cm) "
           "or run privileged"});
    else if (f.uverbs.empty())
      add({"devices", true, "/dev/infiniband has no uverbs* files", "pass --device=/dev/infiniband/uverbsN"});
    else if (!f.uverbs_denied.empty()) {
      std::string l;
      for (const std::string& u : f.uverbs_denied) l += (l.empty() ? "" : ", ") + u;
      add({"devices", true, "no read/write access to " + l,
           "run as a user allowed to open them (group rdma, or udev rules) or pass them to the container"});
    }
    if (f.dev_infiniband && !f.rdma_cm)
      add({"devices", false, "/dev/infiniband/rdma_cm is missing (kinet connects through its bootstrap, not rdma_cm)",
           ""});
  }
  const uint64_t kWantPin = uint64_t(1) << 30;
  if (!f.cap_ipc_lock && f.memlock_bytes < kWantPin)
    add({"memlock", n_nics > 0,
         "memlock limit " + mib(f.memlock_bytes) + " and no CAP_IPC_LOCK: memory registrations beyond it fail",
         "raise it (ulimit -l unlimited; docker: --ulimit memlock=-1) or grant CAP_IPC_LOCK (--cap-add IPC_LOCK)"});

  // The doorbell page.
  std::string db_why;
  const std::string db_mode = doorbell_for(f, &db_why);
  if (!f.provider_maps_uar && !f.gpus.empty() && n_nics > 0) {
    std::string what = "kernels can't ring the NIC's doorbell themselves: " + f.provider_uar_why;
    std::string fix = "nothing needed to run; for GPU-rung doorbells the UAR must map into the GPU";
    if (f.nvidia_driver && !has_word(f.registry_dwords, "PeerMappingOverride=1")) {
      what += "; also, the NVIDIA driver runs without PeerMappingOverride=1, which NVSHMEM needs for "
              "GPU-initiated doorbells";
      fix += ": NVIDIA driver option NVreg_RegistryDwords=\"PeerMappingOverride=1;\" (then reload the driver)";
    }
    add({"uar", false, what + "; kinet uses the CPU-assisted doorbell (a CPU thread rings for the GPU)", fix});
  }
  if (has_word(f.registry_dwords, "RMForceStaticBar1"))
    add({"uar", false, "the NVIDIA driver's RegistryDwords set RMForceStaticBar1 (" + f.registry_dwords + ")", ""});

  if (!f.gdrcopy)
    add({"gdrcopy", false,
         "GDRCopy is absent (" + (f.gdrcopy_problem.empty() ? std::string("libgdrapi.so.2 not found") : f.gdrcopy_problem) +
             "): CPU reads of indices in GPU memory go through cudaMemcpy",
         "optional: install GDRCopy (libgdrapi.so.2 and the gdrdrv module)"});

  bool machine_blocked = false;
  for (const Finding& x : d.machine) machine_blocked |= x.blocker;
  if (f.rdma_core_built)
    for (const Gpu& g : f.gpus)
      for (const mlx5::RdmaDevice& n : f.nics) {
        Pair p;
        p.gpu = g.index;
        p.nic = n.name;
        p.findings = nic_findings(n);
        bool blocked = machine_blocked;
        for (const Finding& x : p.findings) blocked |= x.blocker;
        p.gdaki = !blocked;
        p.doorbell = db_mode;
        p.doorbell_why = db_why;
        const PcieDistance dist = pcie_distance(location(f, g.pci), location(f, n.pci));
        p.pcie = dist.relation;
        p.pcie_why = dist.why;
        d.any_gdaki |= p.gdaki;
        d.pairs.push_back(std::move(p));
      }

  const Finding* first = nullptr;
  for (const Finding& x : d.machine)
    if (x.blocker && !first) first = &x;
  for (const Pair& p : d.pairs)
    for (const Finding& x : p.findings)
      if (x.blocker && !first) first = &x;
  if (d.any_gdaki) {
    d.backend = "mlx5 provider over rdma-core (DevX), doorbell mode " + db_mode;
    d.summary = "GDAKI can run here (doorbell mode " + db_mode + ")";
  } else {
    d.backend = n_nics == 0 ? "the software NIC only (devices 'emu', 'mlx5_emu'): no RDMA device"
                            : "none for GPU kernels on the NICs here (see the reasons); the software NIC runs "
                              "everywhere";
    d.summary = "GDAKI can't run here: " +
                (first ? first->what
                       : std::string(f.rdma_core_built ? "no GPU-NIC pair" : "kinet-info was built without rdma-core"));
  }
  return d;
}

json to_json(const Facts& f, const Diagnosis& d) {
  auto finding = [](const Finding& x) {
    return json{{"check", x.check}, {"blocker", x.blocker}, {"what", x.what},
                {"fix", x.fix.empty() ? json(nullptr) : json(x.fix)}};
  };
  json nics = json::array();
  for (const mlx5::RdmaDevice& n : f.nics) {
    json ports = json::array();
    for (const mlx5::PortEntry& p : n.ports) {
      json gids = json::array();
      for (const mlx5::GidEntry& g : p.gids)
        gids.push_back({{"index", g.index}, {"gid", g.gid}, {"type", g.type}, {"netdev", g.netdev}});
      ports.push_back({{"port", p.port}, {"state", p.state}, {"link_layer", p.link_layer}, {"lid", p.lid},
                       {"active_mtu", p.active_mtu}, {"gids", gids}});
    }
    nics.push_back({{"name", n.name}, {"mlx5", n.mlx5}, {"pci", n.pci}, {"fw", n.fw},
                    {"open_error", n.open_error.empty() ? json(nullptr) : json(n.open_error)}, {"ports", ports}});
  }
  json machine = json::array(), pairs = json::array();
  for (const Finding& x : d.machine) machine.push_back(finding(x));
  for (const Pair& p : d.pairs) {
    json fs = json::array();
    for (const Finding& x : p.findings) fs.push_back(finding(x));
    pairs.push_back({{"gpu", p.gpu}, {"nic", p.nic}, {"gdaki", p.gdaki}, {"doorbell", p.doorbell},
                     {"doorbell_why", p.doorbell_why.empty() ? json(nullptr) : json(p.doorbell_why)},
                     {"pcie", p.pcie}, {"pcie_why", p.pcie_why.empty() ? json(nullptr) : json(p.pcie_why)},
                     {"findings", fs}});
  }
  return {{"summary", d.summary},
          {"gdaki", d.any_gdaki},
          {"backend", d.backend},
          {"rdma_core_built", f.rdma_core_built},
          {"rdma_devices", f.rdma_core_built ? nics : json(f.nic_names)},
          {"kernel", f.kernel_release},
          {"nvidia_peermem", f.peermem_loaded},
          {"memlock", mib(f.memlock_bytes)},
          {"cap_ipc_lock", f.cap_ipc_lock},
          {"gdrcopy", f.gdrcopy},
          {"machine", machine},
          {"pairs", pairs}};
}

std::string to_text(const Facts& f, const Diagnosis& d) {
  std::string s = "RDMA devices (rdma-core" + std::string(f.rdma_core_built ? ")\n" : ": built without rdma-core)\n");
  if (f.rdma_core_built && f.nics.empty()) s += "  none" + (f.rdma_problem.empty() ? "" : ": " + f.rdma_problem) + "\n";
  if (!f.rdma_core_built)
    for (const std::string& n : f.nic_names) s += "  " + n + "\n";
  for (const mlx5::RdmaDevice& n : f.nics) {
    s += "  " + n.name + (n.mlx5 ? " (mlx5)" : " (not mlx5)") + (n.pci.empty() ? "" : ", PCI " + n.pci) +
         (n.fw.empty() ? "" : ", fw " + n.fw) + "\n";
    if (!n.open_error.empty()) s += "    " + n.open_error + "\n";
    for (const mlx5::PortEntry& p : n.ports) {
      s += "    port " + std::to_string(p.port) + ": " + p.state + ", " + p.link_layer + ", LID " +
           std::to_string(p.lid) + ", MTU " + std::to_string(p.active_mtu) + "\n";
      for (const mlx5::GidEntry& g : p.gids)
        s += "      GID[" + std::to_string(g.index) + "] " + g.gid + " " + g.type +
             (g.netdev.empty() ? "" : " (" + g.netdev + ")") + "\n";
    }
  }
  s += "GDAKI diagnosis\n";
  for (const Finding& x : d.machine) {
    s += std::string("  ") + (x.blocker ? "BLOCKER " : "note    ") + "[" + x.check + "] " + x.what + "\n";
    if (!x.fix.empty()) s += "          fix: " + x.fix + "\n";
  }
  for (const Pair& p : d.pairs) {
    s += "  GPU " + std::to_string(p.gpu) + " + " + p.nic + ": " + (p.gdaki ? "GDAKI can run" : "GDAKI can't run") +
         ", doorbell mode " + p.doorbell + "\n";
    s += "    PCIe " + p.pcie + (p.pcie_why.empty() ? "" : ": " + p.pcie_why) + "\n";
    for (const Finding& x : p.findings) {
      s += std::string("    ") + (x.blocker ? "BLOCKER " : "note    ") + "[" + x.check + "] " + x.what + "\n";
      if (!x.fix.empty()) s += "            fix: " + x.fix + "\n";
    }
  }
  s += "  kinet would use: " + d.backend + "\n  => " + d.summary + "\n";
  return s;
}

}  // namespace kinet::info
