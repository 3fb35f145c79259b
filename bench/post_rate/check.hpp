// kinet-post-rate — the checks of one measured run (host only): the posting
// kernels' errors and counts, every QP's SqState against what the NIC
// stand-in retired, quiet()'s contract.
#pragma once
#include <string>
#include <vector>

#include "common.hpp"

namespace kinet::bench {

// What the host read back after the retire kernel stopped.
struct Readback {
  std::vector<uint8_t> states;  // kStateStride bytes per QP (SqState at the start of each)
  std::vector<ConsStats> cons;  // one per QP
  std::vector<uint32_t> errs;   // one per posting thread: non-Ok statuses seen
  unsigned long long posted = 0;  // WQEs the posters published
  int first_err = 0;              // PostParams::first_err
  uint64_t expected = 0;          // WQEs the launches should have published
  uint32_t wqes_per_unit = 0;     // W of the timed runs
};

// "none" or "<where> returned <status> (<text>)" for PostParams::first_err.
std::string decode_err(int fe);

// Fills r (ran, verified, note, warn, nops, retire statistics, rates from the
// timed runs' seconds); r.verified only when every check passed and a timed run exists.
void check_run(const Config& c, const Readback& rb, const std::vector<double>& times, Measure& r);

}  // namespace kinet::bench
