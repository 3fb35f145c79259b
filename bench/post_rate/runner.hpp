// kinet-post-rate — the host side of one run: device resources, one row's
// measurement (kinet's verbs, then the bare kernel) and its verification.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common.hpp"
#include "report.hpp"

namespace kinet::bench {

// Thrown when the run cannot go on (a CUDA error, a hang). The caller writes
// what it has and leaves with _Exit(code): a kernel may still be running.
struct Fatal {
  int code;
  std::string what;
};

class Bench {
 public:
  explicit Bench(const Options& o);
  ~Bench();
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  // Selects the device and checks what the benchmark needs (mapped host
  // memory, concurrent kernels, sm_70+); fills info(). Throws Fatal.
  void open(RunInfo& info);
  // Allocates rings, CQs and state for the largest row of the sweep; prints
  // the kernels' registers and spills. Throws Fatal.
  void allocate(const std::vector<Config>& sweep);
  // Measures one row: kinet's verbs, then (unless --no-bare, or a table row
  // without --bare-table) the bare kernel, each verified. Throws Fatal on a hang.
  Result run(const Config& c);

 private:
  struct Dev;
  Options o_;
  int sms_ = 0;
  std::unique_ptr<Dev> d_;
};

}  // namespace kinet::bench
