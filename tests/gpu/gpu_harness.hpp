// kinet GPU tests — a tiny harness with no dependencies (the GPU machine has
// no GoogleTest). A test is a function; CHECK records a failure and returns.
// Exit code 77 = skipped (no GPU), which ctest reports as skipped.
#pragma once
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace kgt {
struct Test {
  const char* name;
  std::function<void()> fn;
};
inline std::vector<Test>& registry() {
  static std::vector<Test> r;
  return r;
}
inline bool& failed() {
  static bool f = false;
  return f;
}
inline std::string& skipped() {  // the reason, when the running test skipped itself
  static std::string r;
  return r;
}
struct Reg {
  Reg(const char* n, std::function<void()> f) { registry().push_back({n, std::move(f)}); }
};

#define KGT_TEST(name)                                   \
  static void name();                                    \
  static ::kgt::Reg reg_##name(#name, name);             \
  static void name()

#define CHECK(cond, ...)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);   \
      std::fprintf(stderr, __VA_ARGS__);                                              \
      std::fprintf(stderr, "\n");                                                     \
      ::kgt::failed() = true;                                                         \
      return;                                                                         \
    }                                                                                 \
  } while (0)

// Ends the test as skipped (printf-style reason): a missing capability is never a pass.
#define KGT_SKIP(...)                                                                 \
  do {                                                                                \
    char why_[256];                                                                   \
    std::snprintf(why_, sizeof why_, __VA_ARGS__);                                    \
    ::kgt::skipped() = why_;                                                          \
    return;                                                                           \
  } while (0)

#define CUDA_OK(call)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    CHECK(e_ == cudaSuccess, "%s -> %s", #call, cudaGetErrorString(e_));                      \
  } while (0)

// The name of a CUDA tool attached to this process, or null: compute-sanitizer
// (it sets NV_SANITIZER_INJECTION_* for the processes it runs), or a profiler
// loaded through CUDA_INJECTION64_PATH.
inline const char* cuda_tool() {
  if (std::getenv("NV_SANITIZER_INJECTION_PORT_BASE")) return "compute-sanitizer";
  const char* p = std::getenv("CUDA_INJECTION64_PATH");
  return p && *p ? p : nullptr;
}

// Loads kernels now. CUDA loads a kernel at its first launch by default
// (CUDA_MODULE_LOADING=LAZY), and loading may wait for every kernel running on
// the GPU: a kernel that spins until another kernel is launched must have that
// kernel preloaded, or the launch waits for the spinner (on one GPU the
// spinner then times out). Returns false if one could not be loaded.
template <class... K> bool preload(K*... kernels) {
  cudaFuncAttributes a;
  return ((cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(kernels)) == cudaSuccess) && ...);
}

inline int run_all(int argc, char** argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIPPED: no CUDA GPU on this machine (%s)\n", cudaGetErrorString(cudaGetLastError()));
    return 77;
  }
  const char* filter = argc > 1 ? argv[1] : nullptr;
  int fails = 0, runs = 0, skips = 0;
  for (auto& t : registry()) {
    if (filter && !std::string(t.name).starts_with(filter)) continue;
    failed() = false;
    skipped().clear();
    cudaGetLastError();  // an earlier test's error must not be blamed on this one
    cudaSetDevice(0);
    std::printf("[ RUN      ] %s\n", t.name);
    std::fflush(stdout);
    auto t0 = std::chrono::steady_clock::now();
    try {
      t.fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "exception: %s\n", e.what());
      failed() = true;
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      std::fprintf(stderr, "CUDA error after test: %s\n", cudaGetErrorString(e));
      failed() = true;
    }
    if (!failed() && !skipped().empty()) {
      std::printf("[  SKIPPED ] %s: %s\n", t.name, skipped().c_str());
      ++skips;
      continue;
    }
    std::printf("[ %s ] %s (%.0f ms)\n", failed() ? "  FAILED" : "      OK", t.name, ms);
    fails += failed();
    ++runs;
  }
  std::printf("%d of %d GPU tests passed on %d GPU(s), %d skipped\n", runs - fails, runs, n, skips);
  return fails ? 1 : 0;
}
}  // namespace kgt
