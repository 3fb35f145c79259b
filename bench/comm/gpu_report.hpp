// kinet-comm-perf, GPU mode — what one run measured, its perftest-like tables
// on stdout, its JSON report and a progress line on stderr. Plain C++ (built
// in CPU-only builds too, so the formatting is compiled everywhere).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kcp {

// Put bandwidth at one size: kinet's cta_put from a full GPU of CTAs vs
// cudaMemcpyAsync device-to-device of the same bytes (the baseline).
struct BwRow {
  uint64_t bytes = 0;
  uint32_t iters = 0;          // operations per timed trial
  uint32_t ctas = 0;           // of kinet's kernel at this size
  double kinet_gbps = 0;       // median over the trials, 10^9 bytes/s (GpuRun::bw_launch)
  double plain_gbps = 0;       // the same kernel in plain stream order; 0: not measured
  double base_gbps = 0;
  bool verified = false;       // the peer's copy matched, byte for byte
  double ratio() const { return base_gbps > 0 ? kinet_gbps / base_gbps : 0; }
  double plain_ratio() const { return base_gbps > 0 ? plain_gbps / base_gbps : 0; }
};

// put_signal ping-pong at one size for one group (thread, warp, cta).
struct LatRow {
  std::string group;
  uint32_t threads = 0;        // of the group
  uint64_t bytes = 0;
  uint64_t round_trips = 0;    // timed round trips per launch
  std::vector<double> half_rtt_us;  // one per launch
  bool verified = false;       // both ranks' received data matched
};

// dev::barrier from one thread per rank.
struct BarrierRow {
  uint64_t barriers = 0;       // timed barriers per launch
  std::vector<double> us;      // per barrier, one value per launch
};

struct GpuRun {
  std::string command_line, gpu, path, transport, comm_report;
  int sms = 0;
  uint32_t bw_grid = 0, bw_threads = 0, lat_cta_threads = 0;
  uint64_t bw_chunk = 0;  // GpuOpts::bw_chunk
  uint32_t bw_bytes_per_thread = 0;  // GpuOpts::bw_bytes_per_thread
  std::string bw_launch;             // "pdl", "plain" or "pdl+plain" (GpuOpts::bw_launch as run)
  int trials = 0, launches = 0;
  std::vector<BwRow> bw;
  std::vector<LatRow> lat;
  std::vector<BarrierRow> barrier;  // empty or one
  std::vector<std::string> notes;   // printed under the tables, kept in the JSON
  std::string error;                // empty when the run completed
  bool all_verified() const;
};

double median(std::vector<double> v);

void print_bw_header(const GpuRun& r);
void print_bw_row(const BwRow& b);
void print_lat_header(const GpuRun& r);
void print_lat_row(const LatRow& l);
void print_barrier(const GpuRun& r, const BarrierRow& b);
void print_rule();

nlohmann::ordered_json to_json(const GpuRun& r);
// Writes j to path; false (and a line on stderr) when it cannot.
bool write_json(const std::string& path, const nlohmann::ordered_json& j);

// A \r-updated line on stderr (only when enabled: a terminal or --progress).
class Progress {
 public:
  Progress(bool enabled, int total) : enabled_(enabled), total_(total) {}
  void step(const std::string& what);  // the next point starts
  void clear();                        // before a table row goes to stdout
 private:
  bool enabled_, shown_ = false;
  int total_, done_ = 0;
  double t0_ = -1;
};

}  // namespace kcp
