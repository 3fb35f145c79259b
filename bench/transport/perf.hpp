// kinet-transport-perf — latency and bandwidth of kinet::Transport over a
// message provider (ucx, ofi, tcp, shm), and in the same run the provider's
// own benchmark on the same transport (ucx_perftest for ucx, fi_pingpong for
// ofi; see baseline.cpp for how to add one), side by side with their ratio.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kinet::bench {

struct Options {
  std::string provider = "ucx";
  std::string tls = "tcp";  // UCX_TLS for kinet and ucx_perftest ("" = leave the environment alone)
  std::vector<size_t> lat_sizes;
  std::vector<size_t> bw_sizes;
  uint64_t lat_iters = 2000;
  uint64_t lat_warmup = 200;
  // Per size. Default: 1 GiB for a stream (with 64 MiB a shared-memory size
  // took 4 ms and ucx_perftest's own figure moved 3x between runs), 64 MiB
  // for a ping-pong (fi_pingpong runs 15 times its count: minutes at 1 GiB).
  uint64_t bw_bytes = 0;
  uint32_t bw_window = 64;          // puts in flight
  // Bandwidth as a ping-pong (size / mean half round trip) instead of a
  // stream: the form of fi_pingpong's figure, the ofi baseline.
  bool bw_pingpong = false;
  bool baseline = true;
  int port = 23700;                 // first port of the baseline's server (one per run)
  std::string json;
};

// One measurement: kinet's, the baseline's (0 when none) and what ran.
struct Row {
  size_t size = 0;
  double kinet = 0;      // latency: median half round trip in us; bandwidth: MiB/s
  double kinet_avg = 0;  // latency only: mean half round trip in us
  double base = 0;
  bool base_is_mean = false;  // latency: the baseline reports a mean (fi_pingpong): compare kinet_avg
  std::string base_cmd;
  std::string base_note;  // why there is no baseline figure
  double ratio() const { return base > 0 ? (base_is_mean ? kinet_avg : kinet) / base : 0; }
};

// Runs kinet's side of every measurement between this process and a forked
// peer. Throws kinet::Error when the transport can't open or an operation fails.
void run_kinet(const Options& o, std::vector<Row>& lat, std::vector<Row>& bw);

// The provider's own benchmark for one size; fills base, base_cmd, base_note.
void run_baseline(const Options& o, bool latency, Row& row, int port);

}  // namespace kinet::bench
