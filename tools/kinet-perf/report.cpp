// kinet-perf — statistics, tables and JSON.
#include "report.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
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
      std::printf(" TX depth        : %-13u CQ moderation   : %u (SQ depth %u)\n", tc.tx_depth, tc.signal_every,
                  info.sq_depth);
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

// ---- JSON ---------------------------------------------------------------
namespace {

std::string esc(const std::string& s) {
  std::string o;
  o.reserve(s.size() + 2);
  o += '"';
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (ch < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", ch);
          o += b;
        } else {
          o += static_cast<char>(ch);
        }
    }
  }
  o += '"';
  return o;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char b[40];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}
std::string num(uint64_t v) { return std::to_string(v); }
std::string boolean(bool b) { return b ? "true" : "false"; }

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

}  // namespace

bool write_json(const std::string& path, const RunInfo& info, const MachineInfo& m,
                const std::vector<Result>& results, const std::string& error) {
  std::string j;
  j += "{\n";
  j += "  \"tool\": \"kinet-perf\",\n";
  j += "  \"kinet_version\": " + esc(info.version) + ",\n";
  j += "  \"command_line\": " + esc(info.command_line) + ",\n";
  j += "  \"timestamp_utc\": " + esc(utc_now()) + ",\n";
  j += "  \"status\": " + esc(error.empty() ? "ok" : "failed") + ",\n";
  if (!error.empty()) j += "  \"error\": " + esc(error) + ",\n";
  j += "  \"machine\": {\"hostname\": " + esc(m.hostname) + ", \"os\": " + esc(m.os) + ", \"arch\": " +
       esc(m.arch) + ", \"cpu_model\": " + esc(m.cpu_model) +
       ", \"hardware_threads\": " + num(uint64_t(m.hardware_threads)) +
       ", \"cpus_allowed\": " + num(uint64_t(m.cpus_allowed)) + "},\n";
  j += "  \"provider\": {\"name\": " + esc(info.provider) + ", \"client_device\": " + esc(info.client_device) +
       ", \"server_device\": " + esc(info.server_device) + ", \"max_qp_wr\": " + num(uint64_t(info.max_qp_wr)) +
       ", \"max_msg\": " + num(uint64_t(info.max_msg)) + ", \"gpu_memory\": " + boolean(info.gpu_memory) + "},\n";
  j += "  \"config\": {\"runner\": " + esc(info.runner) + ", \"lat_mode\": " + esc(info.lat_mode) + ", \"pinning\": " + esc(info.pinning) +
       ", \"sq_depth\": " + num(uint64_t(info.sq_depth)) + ", \"timeout_ms\": " + num(info.timeout_ms) +
       ", \"seed\": " + num(info.seed) + ", \"mb_bytes\": 1048576},\n";
  j += "  \"results\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const TestCase& tc = r.tc;
    j += i ? ",\n    {" : "\n    {";
    j += "\"test\": " + esc(test_name(tc.kind)) + ", \"size\": " + num(uint64_t(tc.size)) +
         ", \"iterations\": " + num(tc.iters) + ", \"warmup\": " + num(tc.warmup);
    if (is_latency(tc.kind)) {
      const LatStats s = lat_stats(r.lat_us);
      j += ", \"half_round_trip\": " + boolean(r.half_round_trip);
      if (tc.kind == TestKind::WriteLat)
        j += ", \"inline\": " + boolean(tc.use_inline) + ", \"lat_mode\": " + esc(lat_mode_name(tc.lat_mode));
      j += ", \"t_min_usec\": " + num(s.min) + ", \"t_max_usec\": " + num(s.max) +
           ", \"t_typical_usec\": " + num(s.typical) + ", \"t_avg_usec\": " + num(s.avg) +
           ", \"t_stdev_usec\": " + num(s.stdev) + ", \"p99_usec\": " + num(s.p99) +
           ", \"p99_9_usec\": " + num(s.p999);
    } else {
      const BwStats b = bw_stats(r);
      j += ", \"qps\": " + num(uint64_t(tc.qps)) + ", \"tx_depth\": " + num(uint64_t(tc.tx_depth)) +
           ", \"signal_every\": " + num(uint64_t(tc.signal_every)) + ", \"seconds\": " + num(r.seconds) +
           ", \"bytes\": " + num(r.bytes) + ", \"bw_MB_per_s\": " + num(b.mb_per_s) +
           ", \"bw_Gbit_per_s\": " + num(b.gbit_per_s) + ", \"msg_rate_Mmsg_per_s\": " + num(b.mmsg_per_s);
    }
    j += ", \"verified\": " + esc(r.verified) + "}";
  }
  j += results.empty() ? "]\n" : "\n  ]\n";
  j += "}\n";

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return false;
  f << j;
  f.close();
  return static_cast<bool>(f);
}

}  // namespace kinet::perf
