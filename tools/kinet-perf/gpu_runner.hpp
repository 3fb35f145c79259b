// kinet-perf — the GPU-kernel runner (gpu_runner.cu, built when CUDA is
// enabled; KINET_PERF_HAVE_GPU_RUNNER is then defined): CUDA kernels post
// through the device verbs, data buffers in GPU memory — client on GPU 0,
// server on GPU 1 when there are two GPUs, else both on GPU 0.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "runner.hpp"
#include "testbed.hpp"

namespace kinet::perf {

// Exit status of kinet-perf --gpu on a machine without a CUDA GPU.
inline constexpr int kExitSkipped = 77;

struct GpuSetup {
  int count = 0;           // CUDA devices visible
  int gpu[2] = {0, 0};     // [0] client, [1] server
  std::string name[2];     // their names, e.g. "NVIDIA H200"
  bool rings_in_gpu = false;  // --rings gpu: send rings and CQs in GPU memory (the emulator copies WQEs out)
};

struct GpuRunnerConfig {
  uint64_t seed = 1;       // payload bytes and atomic operands
  uint32_t threads = 1;    // bw tests: posting threads (1: dev::put/get; <= 32: one warp; else one CTA)
};

#if defined(KINET_PERF_HAVE_GPU_RUNNER)
// Probes CUDA for --gpu. Returns 0 and fills *out when GPUs are usable;
// otherwise prints why on stderr and returns the exit status (77: no CUDA GPU).
int gpu_prepare(GpuSetup* out);
// " [GPU 0: NVIDIA H200]" for side 0 (client) or 1 (server).
std::string gpu_label(const GpuSetup& s, int side);
// Buffers in GPU memory (each side on its GPU), rings in pinned host memory,
// QPs posted by kernels (Posters::Gpu, created with the side's GPU current).
std::unique_ptr<MemoryOps> make_gpu_memory(const GpuSetup& s);
// Needs a Testbed built on make_gpu_memory(s).
std::unique_ptr<Runner> make_gpu_runner(Testbed& tb, const GpuSetup& s, const GpuRunnerConfig& cfg);
#else
// Built without CUDA: --gpu is a usage error (exit 2).
inline int gpu_prepare(GpuSetup*) {
  std::fprintf(stderr,
               "kinet-perf: --gpu: this build has no GPU runner (configured without CUDA; reconfigure with "
               "-DKINET_CUDA=ON and nvcc available)\n");
  return 2;
}
inline std::string gpu_label(const GpuSetup&, int) { return {}; }
inline std::unique_ptr<MemoryOps> make_gpu_memory(const GpuSetup&) {
  throw PerfError("this build has no GPU runner");
}
inline std::unique_ptr<Runner> make_gpu_runner(Testbed&, const GpuSetup&, const GpuRunnerConfig&) {
  throw PerfError("this build has no GPU runner");
}
#endif

}  // namespace kinet::perf
