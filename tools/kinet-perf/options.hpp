// kinet-perf — command-line options.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "affinity.hpp"
#include "test_kind.hpp"

namespace kinet::perf {

// How the latency ping-pong is driven by host threads.
enum class LatMode : uint8_t {
  Auto,        // TwoThreads when the machine has >= 4 hardware threads, else OneThread
  TwoThreads,  // one host thread per endpoint, as two nodes would run it
  OneThread,   // one thread alternates between both endpoints (no busy-wait contention on small machines)
  Kernels,     // --gpu: one CUDA kernel per endpoint (not selectable with --lat-mode)
};
const char* lat_mode_name(LatMode m);

struct Options {
  std::vector<TestKind> tests;    // in run order
  std::vector<size_t> sizes;      // message sizes, bytes
  uint64_t iters = 0;             // 0 = default per test, scaled down for large sizes
  int64_t warmup = -1;            // -1 = default per test
  uint32_t tx_depth = 128;        // bw: operations in flight per QP
  uint32_t signal_every = 0;      // bw: request a completion every N operations; 0 = auto
  uint32_t post_list = 1;         // bw: host posters ring the doorbell once per N operations
  uint32_t qps = 1;               // bw tests: QPs per side (latency tests use the first)
  bool inline_small = true;       // write_lat: inline payloads of <= 28 B
  LatMode lat_mode = LatMode::Auto;
  PinMode pin = PinMode::Auto;
  std::string device = "emu";
  std::string json_path;          // empty = no JSON
  bool progress = false;          // --progress: progress line even when stderr is not a tty
  bool demo = false;
  bool gpu_rings = false;         // --rings gpu: with --gpu, rings and CQs in GPU memory
  bool gpu = false;               // --gpu: CUDA kernels post, buffers in GPU memory (gpu_runner.cu)
  uint32_t gpu_threads = 1;       // --gpu-threads: bw tests, threads of one warp/CTA posting together
  uint64_t timeout_ms = 0;        // 0 = library default ($KINET_TIMEOUT_MS or 10 s)
  uint64_t seed = 0;              // 0 = random
  // Cross-process mode (xproc.hpp): --server waits for one client; --client
  // HOST[:PORT] runs the tests against it through the cross-process software
  // NIC over TCP, each with a plain TCP baseline unless --no-baseline.
  bool server = false;
  std::string client_of;          // HOST[:PORT] given to --client; empty = not a client
  uint16_t port = 18515;          // --port: the server's control port (as perftest's default)
  bool baseline = true;
  std::string command_line;       // as typed, for the JSON report
};

// Parses argv. Prints help and exits 0 on --help; prints the error and exits 2
// on bad usage.
Options parse_options(int argc, char** argv);

}  // namespace kinet::perf
