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

#define CUDA_OK(call)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    CHECK(e_ == cudaSuccess, "%s -> %s", #call, cudaGetErrorString(e_));                      \
  } while (0)

inline int run_all(int argc, char** argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIPPED: no CUDA GPU on this machine (%s)\n", cudaGetErrorString(cudaGetLastError()));
    return 77;
  }
  const char* filter = argc > 1 ? argv[1] : nullptr;
  int fails = 0, runs = 0;
  for (auto& t : registry()) {
    if (filter && !std::string(t.name).starts_with(filter)) continue;
    failed() = false;
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
    std::printf("[ %s ] %s (%.0f ms)\n", failed() ? "  FAILED" : "      OK", t.name, ms);
    fails += failed();
    ++runs;
  }
  std::printf("%d of %d GPU tests passed on %d GPU(s)\n", runs - fails, runs, n);
  return fails ? 1 : 0;
}
}  // namespace kgt
