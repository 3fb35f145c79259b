// kinet GPU tests — what the communicator tests (gpu_comm_test.cu,
// gpu_comm_group_test.cu, gpu_comm_ring_test.cu) share: each path's
// CommConfig, the check that every peer got that path, and main's loop that
// forks the ranks once per path and prints one line per path. Ranks are forked
// before any CUDA call (tests/multiproc/comm_ranks.hpp).
#pragma once
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include <kinet/comm.hpp>

#include "../multiproc/comm_ranks.hpp"

namespace kinet::test {

// A rank's answer when this process sees no GPU: run_comm_paths then exits 77.
inline constexpr const char* kNoGpu = "SKIP";

inline bool have_gpu() {
  int ngpu = 0;
  return cudaGetDeviceCount(&ngpu) == cudaSuccess && ngpu > 0;
}

// The communicator of one run on `path` ("p2p", "proxy" or "gdaki"): the
// proxy over tcp, windows in GPU memory, gdaki on the software NIC over its
// tcp fabric; `timeout` bounds every wait.
inline CommConfig gpu_comm_config(const std::string& path, std::chrono::milliseconds timeout) {
  CommConfig cfg;
  cfg.transport = "tcp";
  cfg.path = path;
  cfg.memory = CommConfig::Memory::Gpu;
  if (path == "gdaki") {
    cfg.device = "emu";
    cfg.emu_fabric = DeviceOptions::Fabric::Tcp;
  }
  cfg.timeout = timeout;
  return cfg;
}

// "" when every peer of this rank got `path`; else "path: " and the report.
inline std::string check_comm_path(const Comm& comm, const std::string& path) {
  for (int p = 0; p < comm.size(); ++p)
    if (p != comm.rank() && dev::comm_path_name(uint32_t(comm.path(p))) != path) return "path: " + comm.report();
  return "";
}

// main's loop: forks `nranks` ranks once per path of `paths` (only the one
// KINET_COMM_TEST_ONLY names, when set: debugging), each returning
// run(rank, bootstrap, path) within `bound`. Prints "FAIL <path> rank <r>:
// ..." for each failed rank, then "      OK <path><note>" or
// "  FAILED <path><note>". Returns 77 (skipped) as soon as a rank answered
// kNoGpu, else 1 if a path failed, else 0.
template <class Run>
int run_comm_paths(int nranks, std::initializer_list<const char*> paths, Run run, std::chrono::seconds bound,
                   const std::string& note = "") {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  int rc = 0;
  const char* only = std::getenv("KINET_COMM_TEST_ONLY");
  for (const std::string path : paths) {
    if (only && path != only) continue;
    auto res = run_ranks(
        nranks, [&](int r, int, Bootstrap& bs) { return run(r, bs, path); }, bound);
    bool skip = false, failed = false;
    for (size_t r = 0; r < res.size(); ++r) {
      skip |= res[r].out == kNoGpu;
      if (res[r].out != kNoGpu && (res[r].exit_code != 0 || res[r].timed_out)) {
        std::printf("FAIL %s rank %zu: exit %d%s: %s\n", path.c_str(), r, res[r].exit_code,
                    res[r].timed_out ? " (timed out)" : "", res[r].out.c_str());
        failed = true;
      }
    }
    if (skip) return std::printf("SKIPPED: no GPU\n"), 77;
    std::printf("%s %s%s\n", failed ? "  FAILED" : "      OK", path.c_str(), note.c_str());
    rc |= failed ? 1 : 0;
  }
  return rc;
}

}  // namespace kinet::test
