// kinet-info — loading optional libraries (CUDA, libibverbs) with dlopen, so
// the tool runs where they are not installed.
#pragma once
#include <dlfcn.h>

#include <string>
#include <vector>

namespace kinet::info {
// `name` in `lib` as a function pointer of type F; null when missing.
template <class F> F sym(void* lib, const char* name) { return reinterpret_cast<F>(dlsym(lib, name)); }

// The first of `names` that dlopen loads (its name in *which); null when none does.
inline void* open_first(const std::vector<const char*>& names, std::string* which) {
  for (const char* n : names) {
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) {
      *which = n;
      return h;
    }
  }
  return nullptr;
}
}  // namespace kinet::info
