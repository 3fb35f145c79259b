// kinet-perf — what a runner executes and what it returns.
//
// A Runner drives the data path of one test case between the two endpoints of
// a Testbed. The host-thread runner (host_runner.cpp) posts from CPU threads
// through the device verbs; a GPU runner can be added in a separate .cu file
// implementing the same interface (its own MemoryOps for GPU buffers and GPU
// rings, kernels posting with Sharing::Cta/Gpu) and selected in main.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "options.hpp"
#include "test_kind.hpp"

namespace kinet::perf {

class Testbed;
class Progress;

// A failure that ends the run: a verb's error status, a timeout, or data that
// did not verify. what() is the full message for the user.
class PerfError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TestCase {
  TestKind kind = TestKind::WriteLat;
  size_t size = 2;           // bytes per message (8 for atomics)
  uint64_t iters = 1000;     // measured
  uint64_t warmup = 0;       // unmeasured, before the measured ones
  uint32_t tx_depth = 128;   // bw: in flight per QP
  uint32_t signal_every = 32;
  uint32_t post_list = 1;    // bw, host posters: one doorbell per this many operations (perftest's --post_list)
  uint32_t qps = 1;          // bw: QPs used round-robin
  bool use_inline = false;   // write_lat: payload inside the WQE
  LatMode lat_mode = LatMode::TwoThreads;  // resolved (never Auto)
};

struct Result {
  TestCase tc;
  // Latency tests: one sample per measured iteration, in microseconds, as
  // reported (half round trip for write_lat, full round trip for atomic_lat).
  std::vector<double> lat_us;
  bool half_round_trip = false;
  // Bandwidth tests: wall time of the measured iterations (from the first
  // post to the last completion) and what moved in it.
  double seconds = 0;
  uint64_t msgs = 0;
  uint64_t bytes = 0;
  std::string verified;  // what was checked, e.g. "last message, 65536 B on each of 1 QP"
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual std::string name() const = 0;        // "host-threads"
  virtual std::string describe(const TestCase& tc) const = 0;  // one line for the table header
  // Runs one test case. Throws PerfError (or kinet::Error) on failure.
  Result run(const TestCase& tc, Progress& progress) {
    switch (tc.kind) {
      case TestKind::WriteLat: return write_lat(tc, progress);
      case TestKind::WriteBw: return bw(tc, progress, false);
      case TestKind::ReadBw: return bw(tc, progress, true);
      case TestKind::AtomicLat: return atomic_lat(tc, progress);
    }
    throw PerfError("unknown test");
  }

 protected:
  virtual Result write_lat(const TestCase& tc, Progress& progress) = 0;
  virtual Result bw(const TestCase& tc, Progress& progress, bool read) = 0;  // write_bw, or read_bw
  virtual Result atomic_lat(const TestCase& tc, Progress& progress) = 0;
};

struct HostRunnerConfig {
  uint64_t seed = 1;               // payload bytes and atomic operands
  std::vector<int> poster_cpus;    // [1]: CPU of the write_lat server thread (empty: not pinned)
  uint64_t spins_before_yield = 4096;  // busy-poll this often (~30 ns each) before yielding the CPU
};
std::unique_ptr<Runner> make_host_runner(Testbed& tb, const HostRunnerConfig& cfg);

}  // namespace kinet::perf
