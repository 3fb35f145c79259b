// kinet — dlopen helpers shared by the parts that load the CUDA runtime at
// run time (core/cuda_shim.cpp, core/cuda_ipc.cpp), so no CUDA library is a link
// dependency.
#pragma once
#include <dlfcn.h>

#include <initializer_list>

namespace kinet::dl {

// Sets `f` to `name` in library `h`; false (and `f` null) when it is missing.
template <class F>
bool sym(void* h, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(h, name));
  return f != nullptr;
}

// The CUDA runtime, newest soname first (RTLD_NOW | RTLD_LOCAL); null when
// none loads.
inline void* open_cudart() {
  for (const char* n : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"})
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
  return nullptr;
}

}  // namespace kinet::dl
