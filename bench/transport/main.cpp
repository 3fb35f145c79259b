// kinet-transport-perf: kinet::Transport over a provider vs the provider's own
// benchmark, in one run, between two processes on this host.
//   kinet-transport-perf [--provider ucx] [--tls tcp|sm|...] [--quick] [--json FILE]
// Latency: ping-pong of put_signal (the peer waits for the signal, answers
// with its own put_signal), half the round trip, median over --iters.
// Bandwidth: a stream of puts with --window in flight, bytes / time until
// the last completion. Baselines: ucx_perftest ucp_am_lat / ucp_am_bw with
// the same UCX_TLS (ucx); fi_pingpong over RDM (ofi: its latency is a mean,
// so the ratio takes kinet's mean; its bandwidth a ping-pong's, so kinet's
// bandwidth is measured as one too, --bw-pingpong). Ratios: latency
// kinet/baseline (goal <= 1.2), bandwidth kinet/baseline (goal >= 0.9).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kinet/kinet.hpp"
#include "perf.hpp"

using namespace kinet::bench;

namespace {
double load_average() {
  double l = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = -1;
    std::fclose(f);
  }
  return l;
}

void print_table(const std::string& title, const char* unit, const std::vector<Row>& rows, bool latency) {
  std::printf("\n%s (%s)\n%10s %12s %12s %14s %8s\n", title.c_str(), unit, "bytes", latency ? "kinet median" : "kinet",
              latency ? "kinet mean" : "", "baseline", "ratio");
  for (const Row& r : rows) {
    char mean[32] = "";
    if (latency) std::snprintf(mean, sizeof mean, "%.2f", r.kinet_avg);
    if (r.base > 0)
      std::printf("%10zu %12.2f %12s %14.2f %8.2f%s\n", r.size, r.kinet, mean, r.base, r.ratio(),
                  r.base_is_mean ? "  (means)" : "");
    else
      std::printf("%10zu %12.2f %12s %14s %8s   %s\n", r.size, r.kinet, mean, "-", "-", r.base_note.c_str());
  }
  std::printf("goal: ratio %s\n", latency ? "<= 1.2 (kinet / baseline)" : ">= 0.9 (kinet / baseline)");
}

nlohmann::json rows_json(const std::vector<Row>& rows, bool latency) {
  nlohmann::json a = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json j{{"bytes", r.size}, {latency ? "kinet_median_us" : "kinet_mib_s", r.kinet}};
    if (latency) j["kinet_mean_us"] = r.kinet_avg;
    if (r.base > 0) {
      j[!latency ? "baseline_mib_s" : r.base_is_mean ? "baseline_mean_us" : "baseline_median_us"] = r.base;
      j["ratio"] = r.ratio();
    } else {
      j["baseline_note"] = r.base_note;
    }
    j["baseline_command"] = r.base_cmd;
    a.push_back(j);
  }
  return a;
}
}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool quick = false;
  CLI::App app{"kinet::Transport latency and bandwidth vs the provider's own benchmark"};
  app.add_option("--provider", o.provider, "transport provider: ucx (ucx_perftest), ofi (fi_pingpong); tcp, shm have no baseline");
  app.add_option("--tls", o.tls, "UCX_TLS for kinet and ucx_perftest; empty: the environment's");
  app.add_option("--lat-sizes", o.lat_sizes, "latency sizes (default 8 .. 64 KiB, x4)");
  app.add_option("--bw-sizes", o.bw_sizes, "bandwidth sizes (default 64 KiB .. 4 MiB, x4)");
  app.add_option("--iters", o.lat_iters, "latency iterations per size");
  app.add_option("--bw-bytes", o.bw_bytes, "bytes moved per bandwidth size (default 1 GiB streamed, 64 MiB as a ping-pong)");
  app.add_option("--window", o.bw_window, "puts in flight in the bandwidth test");
  app.add_option("--port", o.port, "first TCP port of the baseline's server");
  app.add_flag("--quick", quick, "fewer iterations and sizes");
  auto* pp = app.add_flag("--bw-pingpong", o.bw_pingpong,
                          "bandwidth as size / mean half round trip of a ping-pong (default for ofi, as fi_pingpong)");
  app.add_flag("!--no-baseline", o.baseline, "skip the provider's own benchmark");
  app.add_option("--json", o.json, "write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  if (o.lat_sizes.empty()) o.lat_sizes = quick ? std::vector<size_t>{8, 4096, 65536}
                                               : std::vector<size_t>{8, 64, 512, 4096, 16384, 65536};
  if (o.bw_sizes.empty()) o.bw_sizes = quick ? std::vector<size_t>{65536, 1 << 20}
                                             : std::vector<size_t>{65536, 262144, 1 << 20, 4 << 20};
  if (quick) o.lat_iters = 500, o.lat_warmup = 50, o.bw_bytes = 16ull << 20;
  if (!o.tls.empty() && o.provider == "ucx") setenv("UCX_TLS", o.tls.c_str(), 1);
  if (pp->count() == 0 && o.provider == "ofi") o.bw_pingpong = true;
  if (o.bw_bytes == 0) o.bw_bytes = o.bw_pingpong ? 64ull << 20 : 1ull << 30;

  const double load0 = load_average();
  std::vector<Row> lat, bw;
  try {
    run_kinet(o, lat, bw);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kinet-transport-perf: %s\n", e.what());
    return 1;
  }
  int port = o.port;
  if (o.baseline) {
    for (Row& r : lat) run_baseline(o, true, r, port++);
    for (Row& r : bw) run_baseline(o, false, r, port++);
  } else {
    for (Row& r : lat) r.base_note = "--no-baseline";
    for (Row& r : bw) r.base_note = "--no-baseline";
  }
  const double load1 = load_average();
  const char* tls = std::getenv("UCX_TLS");
  // ofi: the channel sets it unless the user did; the baseline ran with it too.
  const char* rxm = std::getenv("FI_OFI_RXM_BUFFER_SIZE");
  std::printf("kinet-transport-perf: provider %s, UCX_TLS=%s, FI_OFI_RXM_BUFFER_SIZE=%s, load average %.2f -> %.2f, %ld CPUs\n",
              o.provider.c_str(), tls ? tls : "(unset)", rxm ? rxm : "(unset)", load0, load1, sysconf(_SC_NPROCESSORS_ONLN));
  print_table("latency, half round trip", "us", lat, true);
  print_table(o.bw_pingpong ? "bandwidth of a ping-pong, size / mean half round trip" : "bandwidth, a stream", "MiB/s",
              bw, false);
  if (!o.json.empty()) {
    nlohmann::json j{{"provider", o.provider},
                     {"ucx_tls", tls ? tls : ""},
                     {"fi_ofi_rxm_buffer_size", rxm ? rxm : ""},
                     {"load_average_before", load0},
                     {"load_average_after", load1},
                     {"cpus", sysconf(_SC_NPROCESSORS_ONLN)},
                     {"latency_iterations", o.lat_iters},
                     {"bandwidth_bytes", o.bw_bytes},
                     {"bandwidth_window", o.bw_window},
                     {"bandwidth_mode", o.bw_pingpong ? "pingpong" : "stream"},
                     {"latency", rows_json(lat, true)},
                     {"bandwidth", rows_json(bw, false)}};
    std::ofstream(o.json) << j.dump(2) << "\n";
  }
  return 0;
}
