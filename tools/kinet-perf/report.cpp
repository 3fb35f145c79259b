// kinet-perf — statistics, tables and JSON.
#include "report.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "affinity.hpp"
#include "kinet/device/qp.cuh"

namespace kinet::perf {

namespace {
const char* kRule =
    "---------------------------------------------------------------------------------------------------------------";

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  // Nearest rank, as perftest.
  size_t k = static_cast<size_t>(std::ceil(p * double(sorted.size())));
  if (k == 0) k = 1;
  if (k > sorted.size()) k = sorted.size();
  return sorted[k - 1];
}
}  // namespace

LatStats lat_stats(std::vector<double> v) {
  LatStats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.typical = v[v.size() / 2];
  double sum = 0;
  for (double x : v) sum += x;
  s.avg = sum / double(v.size());
  double var = 0;
  for (double x : v) var += (x - s.avg) * (x - s.avg);
  s.stdev = std::sqrt(var / double(v.size()));
  s.p99 = percentile(v, 0.99);
  s.p999 = percentile(v, 0.999);
  return s;
}

BwStats bw_stats(const Result& r) {
  BwStats b;
  if (r.seconds <= 0) return b;
  b.mb_per_s = double(r.bytes) / r.seconds / kMB;
  b.gbit_per_s = double(r.bytes) * 8 / r.seconds * 1e-9;
  b.mmsg_per_s = double(r.msgs) / r.seconds * 1e-6;
  return b;
}

MachineInfo machine_info() {
  MachineInfo m;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) m.hostname = host;
  struct utsname u;
  if (uname(&u) == 0) {
    m.os = std::string(u.sysname) + " " + u.release;
    m.arch = u.machine;
  }
  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpu, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) m.cpu_model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  m.hardware_threads = std::thread::hardware_concurrency();
  m.cpus_allowed = static_cast<unsigned>(allowed_cpus().size());
  return m;
}

void print_header(const RunInfo& info, const TestCase& tc, const std::string& runner_line) {
  std::printf("%s\n", kRule);
  std::printf("                    %s\n", test_title(tc.kind));
  std::printf(" Devices         : %s -> %s (provider %s)\n", info.client_device.c_str(), info.server_device.c_str(),
              info.provider.c_str());
  std::printf(" Transport type  : RC            Number of qps   : %u\n",
              tc.kind == TestKind::WriteBw || tc.kind == TestKind::ReadBw ? tc.qps : 1u);
  std::printf(" Runner          : %s\n", runner_line.c_str());
  std::printf(" CPU pinning     : %s\n", info.pinning.c_str());
  switch (tc.kind) {
    case TestKind::WriteLat:
      std::printf(" TX depth        : 1             Inline data     : %s\n",
                  tc.use_inline ? "up to 28 bytes" : "off");
      std::printf(" Reported        : half round trip (usec)\n");
      break;
    case TestKind::AtomicLat:
      std::printf(" TX depth        : 1             Outstand reads  : 1\n");
      std::printf(" Reported        : full round trip (usec), 8-byte FETCH_AND_ADD\n");
      break;
    default:
      std::printf(" TX depth        : %-13u CQ moderation   : %u (SQ depth %u)   Post list: %u\n", tc.tx_depth,
                  tc.signal_every, info.sq_depth, tc.post_list);
      std::printf(" Reported        : MB = 2^20 bytes, MsgRate in Mpps\n");
      break;
  }
  std::printf("%s\n", kRule);
  if (is_latency(tc.kind))
    std::printf(" %-8s %-12s %-12s %-12s %-16s %-12s %-14s %-22s %s\n", "#bytes", "#iterations", "t_min[usec]",
                "t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]", "99% percentile[usec]",
                "99.9% percentile[usec]");
  else
    std::printf(" %-10s %-14s %-20s %-20s %s\n", "#bytes", "#iterations", "BW average[MB/sec]",
                "BW average[Gb/sec]", "MsgRate[Mpps]");
  std::fflush(stdout);
}

void print_row(const Result& r) {
  if (is_latency(r.tc.kind)) {
    const LatStats s = lat_stats(r.lat_us);
    std::printf(" %-8zu %-12llu %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f %-22.2f %.2f\n", r.tc.size,
                static_cast<unsigned long long>(r.tc.iters), s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999);
  } else {
    const BwStats b = bw_stats(r);
    std::printf(" %-10zu %-14llu %-20.2f %-20.2f %.6f\n", r.tc.size, static_cast<unsigned long long>(r.tc.iters),
                b.mb_per_s, b.gbit_per_s, b.mmsg_per_s);
  }
  std::fflush(stdout);
}

void print_footer() {
  std::printf("%s\n", kRule);
  std::fflush(stdout);
}

// ---- JSON (nlohmann-json) ------------------------------------------------
namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

// Non-finite numbers (a statistic of nothing) as null.
nlohmann::ordered_json num(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

nlohmann::ordered_json json_head(const RunInfo& info, const MachineInfo& m, const std::string& error) {
  using json = nlohmann::ordered_json;  // keys in the order written
  json j;
  j["tool"] = "kinet-perf";
  j["kinet_version"] = info.version;
  j["command_line"] = info.command_line;
  j["timestamp_utc"] = utc_now();
  j["status"] = error.empty() ? "ok" : "failed";
  if (!error.empty()) j["error"] = error;
  j["machine"] = {{"hostname", m.hostname},   {"os", m.os},
                  {"arch", m.arch},           {"cpu_model", m.cpu_model},
                  {"hardware_threads", m.hardware_threads}, {"cpus_allowed", m.cpus_allowed}};
  j["provider"] = {{"name", info.provider},         {"client_device", info.client_device},
                   {"server_device", info.server_device}, {"max_qp_wr", info.max_qp_wr},
                   {"max_msg", info.max_msg},        {"gpu_memory", info.gpu_memory}};
  j["config"] = {{"runner", info.runner},   {"lat_mode", info.lat_mode},     {"pinning", info.pinning},
                 {"sq_depth", info.sq_depth}, {"timeout_ms", info.timeout_ms}, {"seed", info.seed},
                 {"mb_bytes", 1048576}};
  return j;
}

nlohmann::ordered_json json_result(const Result& r) {
  using json = nlohmann::ordered_json;
  const TestCase& tc = r.tc;
  json x = {{"test", test_name(tc.kind)}, {"size", tc.size}, {"iterations", tc.iters}, {"warmup", tc.warmup}};
  if (is_latency(tc.kind)) {
    const LatStats s = lat_stats(r.lat_us);
    x["half_round_trip"] = r.half_round_trip;
    if (tc.kind == TestKind::WriteLat) {
      x["inline"] = tc.use_inline;
      x["lat_mode"] = lat_mode_name(tc.lat_mode);
    }
    x["t_min_usec"] = num(s.min);
    x["t_max_usec"] = num(s.max);
    x["t_typical_usec"] = num(s.typical);
    x["t_avg_usec"] = num(s.avg);
    x["t_stdev_usec"] = num(s.stdev);
    x["p99_usec"] = num(s.p99);
    x["p99_9_usec"] = num(s.p999);
  } else {
    const BwStats b = bw_stats(r);
    x["qps"] = tc.qps;
    x["tx_depth"] = tc.tx_depth;
    x["signal_every"] = tc.signal_every;
    x["post_list"] = tc.post_list;
    x["seconds"] = num(r.seconds);
    x["bytes"] = r.bytes;
    x["bw_MB_per_s"] = num(b.mb_per_s);
    x["bw_Gbit_per_s"] = num(b.gbit_per_s);
    x["msg_rate_Mmsg_per_s"] = num(b.mmsg_per_s);
  }
  x["verified"] = r.verified;
  return x;
}

bool write_json_file(const std::string& path, const nlohmann::ordered_json& j) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return false;
  f << j.dump(2) << '\n';
  f.close();
  return static_cast<bool>(f);
}

bool write_json(const std::string& path, const RunInfo& info, const MachineInfo& m,
                const std::vector<Result>& results, const std::string& error) {
  nlohmann::ordered_json j = json_head(info, m, error);
  nlohmann::ordered_json rs = nlohmann::ordered_json::array();
  for (const Result& r : results) rs.push_back(json_result(r));
  j["results"] = std::move(rs);
  return write_json_file(path, j);
}

}  // namespace kinet::perf
