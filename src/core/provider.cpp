#include "core/provider.hpp"

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace kinet::provider {
namespace {
std::vector<Provider>& registry() {
  static std::vector<Provider> r;
  return r;
}
std::once_flag g_once;
}  // namespace

void add(const Provider& p) {
  for (const Provider& q : registry())
    if (std::strcmp(q.name, p.name) == 0)
      throw Error(ErrorCode::InvalidArgument, std::string("provider '") + p.name + "' registered twice");
  registry().push_back(p);
}

std::span<const Provider> all() {
  std::call_once(g_once, register_builtin);
  return registry();
}
}  // namespace kinet::provider
