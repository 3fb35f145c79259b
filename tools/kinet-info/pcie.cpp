#include "pcie.hpp"

#include <limits.h>
#include <stdlib.h>

#include <cctype>
#include <fstream>
#include <vector>

namespace kinet::info {
namespace {

bool is_bdf(const std::string& s) {
  // dddd:bb:dd.f, hex digits
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (i != 4 && i != 7 && i != 10 && !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0" -> root "pci0000:00",
// chain {"0000:00:01.0", "0000:01:00.0"}; false when it is not such a path.
bool split(const std::string& path, std::string* root, std::vector<std::string>* chain) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    const size_t j = path.find('/', i);
    const std::string p = path.substr(i, j == std::string::npos ? std::string::npos : j - i);
    if (!p.empty()) parts.push_back(p);
    if (j == std::string::npos) break;
    i = j + 1;
  }
  size_t r = 0;
  while (r < parts.size() && parts[r].rfind("pci", 0) != 0) ++r;
  if (r + 1 >= parts.size()) return false;
  *root = parts[r];
  chain->assign(parts.begin() + long(r) + 1, parts.end());
  for (const std::string& c : *chain)
    if (!is_bdf(c)) return false;
  return true;
}

}  // namespace

std::string normalize_bdf(const std::string& in) {
  std::string s;
  for (char c : in) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t colon = s.find(':');
  if (colon == std::string::npos) return {};
  if (s.find(':', colon + 1) == std::string::npos) s = "0000:" + s;  // no domain
  const size_t c1 = s.find(':');
  if (c1 > 4) {  // a longer domain (CUDA prints 8 digits): keep the low 4 when the rest is zeros
    for (size_t i = 0; i + 4 < c1; ++i)
      if (s[i] != '0') return {};
    s = s.substr(c1 - 4);
  }
  return is_bdf(s) ? s : std::string{};
}

PcieDistance pcie_distance(const PciLocation& a, const PciLocation& b) {
  std::string ra, rb;
  std::vector<std::string> ca, cb;
  if (a.path.empty() || b.path.empty())
    return {"unknown", std::string("no sysfs path for the ") + (a.path.empty() ? "first" : "second") + " device"};
  if (!split(a.path, &ra, &ca)) return {"unknown", "not a PCI device path: " + a.path};
  if (!split(b.path, &rb, &cb)) return {"unknown", "not a PCI device path: " + b.path};
  if (ra != rb) {
    if (a.numa >= 0 && b.numa >= 0 && a.numa != b.numa)
      return {"SYS", "across NUMA nodes " + std::to_string(a.numa) + " and " + std::to_string(b.numa) +
                         " (host bridges " + ra + ", " + rb + ")"};
    return {"NODE", "between host bridges " + ra + " and " + rb + " of one NUMA node"};
  }
  size_t k = 0;  // bridges both chains share below the host bridge
  while (k + 1 < ca.size() && k + 1 < cb.size() && ca[k] == cb[k]) ++k;
  if (ca == cb) return {"PIX", "the same PCI device"};
  if (k == 0) return {"PHB", "through host bridge " + ra + " (different root ports)"};
  // Ports between the shared bridge and each device: one on each side at most
  // means one switch (its downstream ports) or a shared parent; more, several.
  const size_t below_a = ca.size() - k - 1, below_b = cb.size() - k - 1;
  if (below_a <= 1 && below_b <= 1) return {"PIX", "through one PCIe switch (below " + ca[k - 1] + ")"};
  return {"PXB", "through several PCIe switches (below " + ca[k - 1] + "), not the host bridge"};
}

PciLocation pci_location(const std::string& bdf, const std::string& sysfs) {
  PciLocation l;
  if (bdf.empty()) return l;
  const std::string dev = sysfs + "/bus/pci/devices/" + bdf;
  char real[PATH_MAX];
  if (realpath(dev.c_str(), real)) l.path = real;
  std::ifstream n(dev + "/numa_node");
  if (!(n >> l.numa)) l.numa = -1;
  return l;
}

}  // namespace kinet::info
