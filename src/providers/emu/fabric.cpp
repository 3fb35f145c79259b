// In-process fabric: Nics find each other by address. The interface (find by
// node address, QPs by number) is what a cross-process fabric would offer too.
#include <map>
#include <mutex>

#include "providers/emu/emu.hpp"

namespace kinet::emu {
namespace {
struct Fabric {
  std::mutex mu;
  std::map<uint64_t, std::weak_ptr<Nic>> nics;
  uint64_t next_node = 1;
};
Fabric& fabric() {
  static Fabric f;
  return f;
}
bool name_taken(Fabric& f, const std::string& n) {
  for (auto& [node, w] : f.nics)
    if (auto p = w.lock(); p && p->name == n) return true;
  return false;
}
}  // namespace

std::shared_ptr<Nic> fabric_find(uint64_t node) {
  Fabric& f = fabric();
  std::lock_guard<std::mutex> g(f.mu);
  auto it = f.nics.find(node);
  return it == f.nics.end() ? nullptr : it->second.lock();
}

void fabric_add(const std::shared_ptr<Nic>& nic, std::string_view want) {
  Fabric& f = fabric();
  std::lock_guard<std::mutex> g(f.mu);
  if (want == "emu") {
    for (int i = 0;; ++i) {
      std::string n = "emu" + std::to_string(i);
      if (!name_taken(f, n)) {
        nic->name = n;
        break;
      }
    }
  } else {
    if (name_taken(f, std::string(want)))
      throw Error(ErrorCode::BadState, std::string(want) + " is already open in this process");
    nic->name = std::string(want);
  }
  nic->node = f.next_node++;
  f.nics[nic->node] = nic;
}

void fabric_remove(uint64_t node) {
  Fabric& f = fabric();
  std::lock_guard<std::mutex> g(f.mu);
  f.nics.erase(node);
}
}  // namespace kinet::emu
