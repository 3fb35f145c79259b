// kinet-info's PCIe distance (tools/kinet-info/pcie.hpp) on fabricated sysfs
// paths: each relation nvidia-smi topo names, at its edge, the address forms
// CUDA and sysfs print, a fabricated /sys tree, and the pairs' output.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "diagnose.hpp"
#include "pcie.hpp"

namespace {
using namespace kinet::info;

const std::string kRoot0 = "/sys/devices/pci0000:00/0000:00:01.0";  // host bridge 0, root port 00:01.0
PciLocation at(const std::string& path, int numa = -1) { return {path, numa}; }

TEST(KinetInfoPcie, SameSwitchIsPix) {
  // root port -> switch upstream 01:00.0 -> downstream 02:08.0 / 02:10.0 -> GPU 05:00.0, NIC 06:00.0
  const auto d = pcie_distance(at(kRoot0 + "/0000:01:00.0/0000:02:08.0/0000:05:00.0"),
                               at(kRoot0 + "/0000:01:00.0/0000:02:10.0/0000:06:00.0"));
  EXPECT_EQ(d.relation, "PIX");
  EXPECT_EQ(d.why, "through one PCIe switch (below 0000:01:00.0)");
  // Two functions of one NIC, and a device with itself.
  EXPECT_EQ(pcie_distance(at(kRoot0 + "/0000:01:00.0/0000:02:08.0/0000:05:00.0"),
                          at(kRoot0 + "/0000:01:00.0/0000:02:08.0/0000:05:00.1"))
                .relation,
            "PIX");
  EXPECT_EQ(pcie_distance(at(kRoot0 + "/0000:05:00.0"), at(kRoot0 + "/0000:05:00.0")).relation, "PIX");
}

TEST(KinetInfoPcie, OneMoreSwitchLevelIsPxb) {
  // The GPU sits one switch deeper (02:08.0 -> 03:00.0 -> 04:00.0 -> GPU): the edge from PIX.
  const auto d = pcie_distance(at(kRoot0 + "/0000:01:00.0/0000:02:08.0/0000:03:00.0/0000:04:00.0/0000:05:00.0"),
                               at(kRoot0 + "/0000:01:00.0/0000:02:10.0/0000:06:00.0"));
  EXPECT_EQ(d.relation, "PXB");
  EXPECT_EQ(d.why, "through several PCIe switches (below 0000:01:00.0), not the host bridge");
  // Deeper on both sides.
  EXPECT_EQ(pcie_distance(at(kRoot0 + "/0000:01:00.0/0000:02:08.0/0000:03:00.0/0000:04:00.0/0000:05:00.0"),
                          at(kRoot0 + "/0000:01:00.0/0000:02:10.0/0000:07:00.0/0000:08:00.0/0000:09:00.0"))
                .relation,
            "PXB");
}

TEST(KinetInfoPcie, DifferentRootPortsArePhb) {
  const auto d = pcie_distance(at("/sys/devices/pci0000:00/0000:00:01.0/0000:05:00.0"),
                               at("/sys/devices/pci0000:00/0000:00:03.0/0000:06:00.0"));
  EXPECT_EQ(d.relation, "PHB");
  EXPECT_EQ(d.why, "through host bridge pci0000:00 (different root ports)");
  // Integrated endpoints right below the host bridge.
  EXPECT_EQ(
      pcie_distance(at("/sys/devices/pci0000:00/0000:00:02.0"), at("/sys/devices/pci0000:00/0000:00:03.0")).relation,
      "PHB");
}

TEST(KinetInfoPcie, DifferentHostBridgesAreNodeOrSysByNuma) {
  const std::string g = "/sys/devices/pci0000:15/0000:15:01.0/0000:17:00.0";
  const std::string n = "/sys/devices/pci0000:97/0000:97:01.0/0000:98:00.0";
  auto d = pcie_distance(at(g, 0), at(n, 1));
  EXPECT_EQ(d.relation, "SYS");
  EXPECT_EQ(d.why, "across NUMA nodes 0 and 1 (host bridges pci0000:15, pci0000:97)");
  d = pcie_distance(at(g, 1), at(n, 1));
  EXPECT_EQ(d.relation, "NODE");
  EXPECT_EQ(d.why, "between host bridges pci0000:15 and pci0000:97 of one NUMA node");
  // A node unknown on either side (-1, single-node machines) is not evidence of two nodes.
  EXPECT_EQ(pcie_distance(at(g, -1), at(n, 1)).relation, "NODE");
  EXPECT_EQ(pcie_distance(at(g, 0), at(n, -1)).relation, "NODE");
}

TEST(KinetInfoPcie, MissingOrForeignPathsAreUnknown) {
  auto d = pcie_distance(at(""), at(kRoot0 + "/0000:05:00.0"));
  EXPECT_EQ(d.relation, "unknown");
  EXPECT_EQ(d.why, "no sysfs path for the first device");
  d = pcie_distance(at(kRoot0 + "/0000:05:00.0"), at(""));
  EXPECT_EQ(d.why, "no sysfs path for the second device");
  d = pcie_distance(at("/sys/devices/platform/foo"), at(kRoot0 + "/0000:05:00.0"));
  EXPECT_EQ(d.relation, "unknown");
  EXPECT_EQ(d.why, "not a PCI device path: /sys/devices/platform/foo");
  EXPECT_EQ(pcie_distance(at(kRoot0 + "/0000:05:00.0"), at("/sys/devices/pci0000:00")).relation, "unknown");
  EXPECT_EQ(pcie_distance(at(kRoot0 + "/0000:05:00.0"), at(kRoot0 + "/0000:05:00.0/net")).relation, "unknown");
}

TEST(KinetInfoPcie, AddressForms) {
  EXPECT_EQ(normalize_bdf("00000000:17:00.0"), "0000:17:00.0");  // cudaDeviceGetPCIBusId
  EXPECT_EQ(normalize_bdf("0000:17:00.0"), "0000:17:00.0");
  EXPECT_EQ(normalize_bdf("0000:AB:00.1"), "0000:ab:00.1");
  EXPECT_EQ(normalize_bdf("17:00.0"), "0000:17:00.0");
  EXPECT_EQ(normalize_bdf("00010000:17:00.0"), "");  // a domain beyond 16 bits: not sysfs's form
  EXPECT_EQ(normalize_bdf("?"), "");
  EXPECT_EQ(normalize_bdf(""), "");
  EXPECT_EQ(normalize_bdf("0000:17:00"), "");
}

// A fabricated /sys: bus/pci/devices/<bdf> links into devices/pci..., with numa_node.
TEST(KinetInfoPcie, LocationFromAFabricatedSysfs) {
  char tmpl[] = "/tmp/kinet_pcie_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  const std::string dev = root + "/devices/pci0000:00/0000:00:01.0/0000:05:00.0";
  ASSERT_EQ(std::system(("mkdir -p " + dev + " " + root + "/bus/pci/devices").c_str()), 0);
  ASSERT_EQ(symlink("../../../devices/pci0000:00/0000:00:01.0/0000:05:00.0",
                    (root + "/bus/pci/devices/0000:05:00.0").c_str()),
            0);
  std::ofstream(dev + "/numa_node") << "1\n";
  const PciLocation l = pci_location("0000:05:00.0", root);
  EXPECT_EQ(l.path, dev);
  EXPECT_EQ(l.numa, 1);
  const PciLocation none = pci_location("0000:06:00.0", root);
  EXPECT_EQ(none.path, "");
  EXPECT_EQ(none.numa, -1);
  EXPECT_EQ(pcie_distance(l, at("/x/devices/pci0000:00/0000:00:01.0/0000:05:00.1")).relation, "PIX");
  std::system(("rm -rf " + root).c_str());
}

// The pair of a diagnosis carries the distance, in JSON and text.
TEST(KinetInfoPcie, PairsCarryTheDistance) {
  Facts f;
  f.gpus.push_back({0, "NVIDIA H200", 90, "00000000:05:00.0", 1});
  f.rdma_core_built = true;
  kinet::mlx5::RdmaDevice n;
  n.name = "mlx5_0";
  n.mlx5 = true;
  n.pci = "0000:06:00.0";
  f.nics.push_back(n);
  kinet::mlx5::RdmaDevice far = n;
  far.name = "mlx5_1";
  far.pci = "0000:99:00.0";  // no location known
  f.nics.push_back(far);
  f.pci["0000:05:00.0"] = at(kRoot0 + "/0000:01:00.0/0000:02:08.0/0000:05:00.0");
  f.pci["0000:06:00.0"] = at(kRoot0 + "/0000:01:00.0/0000:02:10.0/0000:06:00.0");
  const Diagnosis d = diagnose(f);
  ASSERT_EQ(d.pairs.size(), 2u);
  EXPECT_EQ(d.pairs[0].pcie, "PIX");
  EXPECT_EQ(d.pairs[1].pcie, "unknown");
  EXPECT_EQ(d.pairs[1].pcie_why, "no sysfs path for the second device");
  const auto j = to_json(f, d);
  EXPECT_EQ(j["pairs"][0]["pcie"], "PIX");
  EXPECT_EQ(j["pairs"][0]["pcie_why"], "through one PCIe switch (below 0000:01:00.0)");
  EXPECT_EQ(j["pairs"][1]["pcie"], "unknown");
  const std::string t = to_text(f, d);
  EXPECT_NE(t.find("GPU 0 + mlx5_0: "), std::string::npos) << t;
  EXPECT_NE(t.find("    PCIe PIX: through one PCIe switch (below 0000:01:00.0)\n"), std::string::npos) << t;
  EXPECT_NE(t.find("    PCIe unknown: no sysfs path for the second device\n"), std::string::npos) << t;
}
}  // namespace
