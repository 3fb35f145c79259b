// kinet-info — PCIe distance between a GPU and a NIC, as `nvidia-smi topo -m`
// names it, computed from sysfs: the realpath of /sys/bus/pci/devices/<bdf>
// is the device's chain of bridges below its host bridge, e.g.
//   /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:05:00.0
//                ^host bridge ^root port   ^switch up   ^switch down ^device
// PCIe switches show up as an upstream port followed by a downstream port.
#pragma once
#include <string>

namespace kinet::info {

// Where one PCI device sits (from sysfs; fabricated in tests).
struct PciLocation {
  std::string path;  // realpath of /sys/bus/pci/devices/<bdf>; empty: unknown
  int numa = -1;     // /sys/bus/pci/devices/<bdf>/numa_node; -1: unknown / single node
};

struct PcieDistance {
  // "PIX": through at most one PCIe switch (or functions of one device);
  // "PXB": through several switches, not through the host bridge;
  // "PHB": through the host bridge (the CPU's root complex);
  // "NODE": between host bridges of one NUMA node;
  // "SYS": across NUMA nodes (the CPUs' interconnect);
  // "unknown": a path is missing or not a PCI device path (`why` says which).
  std::string relation;
  std::string why;  // in words, for the text output
};

// Pure: the relation between devices at `a` and `b`. Host bridges differ and
// both NUMA nodes are known and differ: SYS; else NODE.
PcieDistance pcie_distance(const PciLocation& a, const PciLocation& b);

// "00000000:17:00.0" (CUDA's 8-digit domain), "0000:17:00.0", "17:00.0" ->
// "0000:17:00.0" (sysfs's form, lower case); "" when not a PCI address.
std::string normalize_bdf(const std::string& bdf);

// The location of `bdf` (normalized by the caller) under `sysfs` (tests pass
// a fabricated tree); path empty when <sysfs>/bus/pci/devices/<bdf> does not
// resolve. The path is returned relative to nothing: pcie_distance only looks
// at its components from the host bridge ("pciDDDD:BB") on.
PciLocation pci_location(const std::string& bdf, const std::string& sysfs = "/sys");

}  // namespace kinet::info
