// kinet-comm-perf, GPU mode — tables, JSON, progress line.
#include "gpu_report.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

namespace kcp {

namespace {
const char* kRule = "-----------------------------------------------------------------------------------------------";

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

// Non-finite numbers (a statistic of nothing) as null.
nlohmann::ordered_json num(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(); }

double vmin(const std::vector<double>& v) { return v.empty() ? NAN : *std::min_element(v.begin(), v.end()); }
double vmax(const std::vector<double>& v) { return v.empty() ? NAN : *std::max_element(v.begin(), v.end()); }
}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bool GpuRun::all_verified() const {
  for (const auto& b : bw)
    if (!b.verified) return false;
  for (const auto& l : lat)
    if (!l.verified) return false;
  return true;
}

void print_rule() {
  std::printf("%s\n", kRule);
  std::fflush(stdout);
}

void print_bw_header(const GpuRun& r) {
  std::printf("\n%s\n", kRule);
  std::printf("                    kinet-comm-perf: put bandwidth, rank 0 -> rank 1\n");
  std::printf(" Ranks           : 2 processes on one GPU (%s, %d SMs), path %s\n", r.gpu.c_str(), r.sms,
              r.path.c_str());
  if (r.bw_chunk)
    std::printf(" kinet           : dev::cta_put, up to %u CTAs x %u threads, %llu-byte chunks round-robin\n",
                r.bw_grid, r.bw_threads, static_cast<unsigned long long>(r.bw_chunk));
  else
    std::printf(" kinet           : dev::cta_put, up to %u CTAs x %u threads, each its slice of the buffer\n",
                r.bw_grid, r.bw_threads);
  if (r.bw_bytes_per_thread)
    std::printf(" CTAs            : #bytes / (%u threads x %u bytes) while one wave holds them, then x %u bytes,\n"
                "                   at most the grid\n",
                r.bw_threads, r.bw_bytes_per_thread, 2 * r.bw_bytes_per_thread);
  if (r.bw_launch != "plain")
    std::printf(" Launch          : PDL (programmatic dependent launch): each put's kernel is launched while the\n"
                "                   previous one ends, and waits for it before it puts%s\n",
                r.bw_launch == "pdl+plain" ? "; plain: the same kernel in stream order" : "");
  std::printf(" Baseline        : cudaMemcpyAsync device-to-device of the same bytes on the same GPU\n");
  std::printf(" Reported        : GB/s = 10^9 bytes/s, CUDA events over #iterations, median of %d trials\n",
              r.trials);
  std::printf(" Goal (issue 11) : kinet/baseline >= 0.9 from 1 MiB up\n");
  std::printf("%s\n", kRule);
  if (r.bw_launch == "pdl+plain")
    std::printf(" %-12s %-12s %-6s %-13s %-13s %-18s %-15s %-15s %s\n", "#bytes", "#iterations", "#CTAs", "kinet[GB/s]",
                "plain[GB/s]", "cudaMemcpy[GB/s]", "kinet/baseline", "plain/baseline", "data");
  else
    std::printf(" %-12s %-12s %-6s %-16s %-20s %-16s %s\n", "#bytes", "#iterations", "#CTAs", "kinet[GB/s]",
                "cudaMemcpy[GB/s]", "kinet/baseline", "data");
  std::fflush(stdout);
}

void print_bw_row(const BwRow& b) {
  const auto bytes = static_cast<unsigned long long>(b.bytes);
  const char* data = b.verified ? "ok" : "WRONG";
  if (b.plain_gbps > 0)
    std::printf(" %-12llu %-12u %-6u %-13.1f %-13.1f %-18.1f %-15.3f %-15.3f %s\n", bytes, b.iters, b.ctas,
                b.kinet_gbps, b.plain_gbps, b.base_gbps, b.ratio(), b.plain_ratio(), data);
  else
    std::printf(" %-12llu %-12u %-6u %-16.1f %-20.1f %-16.3f %s\n", bytes, b.iters, b.ctas, b.kinet_gbps, b.base_gbps,
                b.ratio(), data);
  std::fflush(stdout);
}

void print_lat_header(const GpuRun& r) {
  std::printf("\n%s\n", kRule);
  std::printf("                    kinet-comm-perf: put_signal ping-pong latency\n");
  std::printf(" Ranks           : 2 processes on one GPU (%s), path %s\n", r.gpu.c_str(), r.path.c_str());
  std::printf(" Round trip      : rank 0 put_signal -> rank 1 waits, answers put_signal -> rank 0 waits\n");
  std::printf(" Groups          : thread (put_signal), warp (warp_put_signal), cta of %u (cta_put_signal)\n",
              r.lat_cta_threads);
  std::printf(" Reported        : half round trip (usec), one kernel launch per side per sample, %d launches\n",
              r.launches);
  std::printf("%s\n", kRule);
  std::printf(" %-8s %-10s %-14s %-16s %-12s %-12s %s\n", "group", "#bytes", "#round trips", "t_typical[usec]",
              "t_min[usec]", "t_max[usec]", "data");
  std::fflush(stdout);
}

void print_lat_row(const LatRow& l) {
  std::printf(" %-8s %-10llu %-14llu %-16.2f %-12.2f %-12.2f %s\n", l.group.c_str(),
              static_cast<unsigned long long>(l.bytes), static_cast<unsigned long long>(l.round_trips),
              median(l.half_rtt_us), vmin(l.half_rtt_us), vmax(l.half_rtt_us), l.verified ? "ok" : "WRONG");
  std::fflush(stdout);
}

void print_barrier(const GpuRun& r, const BarrierRow& b) {
  std::printf("\n%s\n", kRule);
  std::printf("                    kinet-comm-perf: dev::barrier latency (one thread per rank, 2 ranks)\n");
  std::printf(" Ranks           : 2 processes on one GPU (%s), path %s\n", r.gpu.c_str(), r.path.c_str());
  std::printf("%s\n", kRule);
  std::printf(" %-14s %-16s %-12s %s\n", "#barriers", "t_typical[usec]", "t_min[usec]", "t_max[usec]");
  std::printf(" %-14llu %-16.2f %-12.2f %.2f\n", static_cast<unsigned long long>(b.barriers), median(b.us), vmin(b.us),
              vmax(b.us));
  std::fflush(stdout);
}

nlohmann::ordered_json to_json(const GpuRun& r) {
  using json = nlohmann::ordered_json;
  json j;
  j["tool"] = "kinet-comm-perf";
  j["mode"] = "gpu";
  j["command_line"] = r.command_line;
  j["timestamp_utc"] = utc_now();
  j["status"] = !r.error.empty() ? "error" : r.all_verified() ? "ok" : "wrong result";
  if (!r.error.empty()) j["error"] = r.error;
  j["gpu"] = {{"name", r.gpu}, {"sms", r.sms}};
  j["path"] = r.path;
  j["transport"] = r.transport;
  j["comm_report"] = r.comm_report;
  j["config"] = {{"bw_grid", r.bw_grid},
                 {"bw_threads", r.bw_threads},
                 {"bw_chunk", r.bw_chunk},
                 {"bw_bytes_per_thread", r.bw_bytes_per_thread},
                 {"bw_launch", r.bw_launch},
                 {"lat_cta_threads", r.lat_cta_threads},
                 {"bw_trials", r.trials},
                 {"lat_launches", r.launches}};
  json bw = json::array();
  for (const auto& b : r.bw) {
    json row = {{"bytes", b.bytes},
                {"iterations", b.iters},
                {"ctas", b.ctas},
                {"kinet_GBps", num(b.kinet_gbps)},
                {"cudaMemcpy_GBps", num(b.base_gbps)},
                {"ratio", num(b.ratio())},
                {"verified", b.verified}};
    if (b.plain_gbps > 0) row["kinet_plain_GBps"] = num(b.plain_gbps), row["plain_ratio"] = num(b.plain_ratio());
    bw.push_back(row);
  }
  j["put_bw"] = bw;
  if (!r.notes.empty()) j["notes"] = r.notes;
  json lat = json::array();
  for (const auto& l : r.lat)
    lat.push_back({{"group", l.group},
                   {"threads", l.threads},
                   {"bytes", l.bytes},
                   {"round_trips", l.round_trips},
                   {"half_rtt_us_median", num(median(l.half_rtt_us))},
                   {"half_rtt_us_min", num(vmin(l.half_rtt_us))},
                   {"half_rtt_us_max", num(vmax(l.half_rtt_us))},
                   {"half_rtt_us", l.half_rtt_us},
                   {"verified", l.verified}});
  j["pingpong"] = lat;
  if (!r.barrier.empty()) {
    const BarrierRow& b = r.barrier.front();
    j["barrier"] = {{"barriers", b.barriers},
                    {"us_median", num(median(b.us))},
                    {"us_min", num(vmin(b.us))},
                    {"us_max", num(vmax(b.us))},
                    {"us", b.us}};
  }
  return j;
}

bool write_json(const std::string& path, const nlohmann::ordered_json& j) {
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  f.close();
  if (!f) {
    std::fprintf(stderr, "kinet-comm-perf: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

void Progress::step(const std::string& what) {
  if (!enabled_) return;
  if (t0_ < 0) t0_ = now_s();
  ++done_;
  std::fprintf(stderr, "\r  [%d/%d] %-36s %6.1f s ", done_, total_, what.c_str(), now_s() - t0_);
  std::fflush(stderr);
  shown_ = true;
}

void Progress::clear() {
  if (!enabled_ || !shown_) return;
  std::fprintf(stderr, "\r%72s\r", "");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace kcp
