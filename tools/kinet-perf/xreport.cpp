// kinet-perf — cross-process tables and JSON.
#include "xreport.hpp"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "affinity.hpp"

namespace kinet::perf {
namespace {
const char* kRule =
    "---------------------------------------------------------------------------------------------------------------";
constexpr double kLatGoal = 1.3, kBwGoal = 0.8;
}  // namespace

double x_ratio(const XResult& r) {
  if (!r.has_base) return 0;
  if (is_latency(r.kinet.tc.kind)) {
    const double b = lat_stats(r.base.lat_us).typical;
    return b > 0 ? lat_stats(r.kinet.lat_us).typical / b : 0;
  }
  const double b = bw_stats(r.base).mb_per_s;
  return b > 0 ? bw_stats(r.kinet).mb_per_s / b : 0;
}

bool x_goal_met(const XResult& r) {
  const double q = x_ratio(r);
  if (q <= 0) return false;
  return is_latency(r.kinet.tc.kind) ? q <= kLatGoal : q >= kBwGoal;
}

void print_x_header(const RunInfo& info, const TestCase& tc, const std::string& peer) {
  std::printf("%s\n", kRule);
  std::printf("                    %s, cross-process (kinet beside plain TCP)\n", test_title(tc.kind));
  std::printf(" Devices         : %s here -> %s at %s (provider %s, fabric tcp)\n", info.client_device.c_str(),
              info.server_device.c_str(), peer.c_str(), info.provider.c_str());
  std::printf(" Runner          : %s\n", info.runner.c_str());
  switch (tc.kind) {
    case TestKind::WriteLat:
      std::printf(" TX depth        : 1             Inline data     : %s\n",
                  tc.use_inline ? "up to 28 bytes" : "off");
      std::printf(" Reported        : half round trip (usec); TCP: ping-pong of the same size\n");
      break;
    case TestKind::AtomicLat:
      std::printf(" Reported        : full round trip (usec), 8-byte FETCH_AND_ADD; TCP: 8-byte ping-pong\n");
      break;
    default:
      std::printf(" TX depth        : %-13u CQ moderation   : %u (SQ depth %u)   QPs: %u   Post list: %u\n",
                  tc.tx_depth, tc.signal_every, info.sq_depth, tc.qps, tc.post_list);
      std::printf(" Reported        : MB = 2^20 bytes, MsgRate in Mpps; TCP: one-way stream, one send() per message\n");
      break;
  }
  std::printf(" Goal            : kinet/TCP %s\n", is_latency(tc.kind) ? "<= 1.3 (typical latency)" : ">= 0.8 (bandwidth)");
  // Each process has a busy poster and link threads that wake per message:
  // with fewer than two CPUs per process they queue behind each other.
  if (const size_t n = allowed_cpus().size(); n < 4)
    std::printf(" Note            : %zu CPU%s for two processes' posters and link threads: single runs vary 2-5x;\n"
                "                   compare medians of several (bench/xproc/ab.sh)\n",
                n, n == 1 ? "" : "s");
  std::printf("%s\n", kRule);
  if (is_latency(tc.kind))
    std::printf(" %-8s %-8s | %-10s %-10s %-10s | %-10s %-10s %-10s | %s\n", "#bytes", "#iters", "kinet typ",
                "kinet avg", "kinet p99", "tcp typ", "tcp avg", "tcp p99", "kinet/tcp");
  else
    std::printf(" %-8s %-8s | %-12s %-10s | %-12s %-10s | %s\n", "#bytes", "#iters", "kinet MB/s", "kinet Mpps",
                "tcp MB/s", "tcp Mpps", "kinet/tcp");
  std::fflush(stdout);
}

void print_x_row(const XResult& r) {
  const TestCase& tc = r.kinet.tc;
  char ratio[48] = "-";
  if (r.has_base) std::snprintf(ratio, sizeof ratio, "%.2f %s", x_ratio(r), x_goal_met(r) ? "(goal met)" : "(goal missed)");
  if (is_latency(tc.kind)) {
    const LatStats k = lat_stats(r.kinet.lat_us), b = lat_stats(r.base.lat_us);
    if (r.has_base)
      std::printf(" %-8zu %-8llu | %-10.2f %-10.2f %-10.2f | %-10.2f %-10.2f %-10.2f | %s\n", tc.size,
                  static_cast<unsigned long long>(tc.iters), k.typical, k.avg, k.p99, b.typical, b.avg, b.p99, ratio);
    else
      std::printf(" %-8zu %-8llu | %-10.2f %-10.2f %-10.2f | %-32s | %s\n", tc.size,
                  static_cast<unsigned long long>(tc.iters), k.typical, k.avg, k.p99, "(no baseline)", ratio);
  } else {
    const BwStats k = bw_stats(r.kinet), b = bw_stats(r.base);
    if (r.has_base)
      std::printf(" %-8zu %-8llu | %-12.2f %-10.4f | %-12.2f %-10.4f | %s\n", tc.size,
                  static_cast<unsigned long long>(tc.iters), k.mb_per_s, k.mmsg_per_s, b.mb_per_s, b.mmsg_per_s,
                  ratio);
    else
      std::printf(" %-8zu %-8llu | %-12.2f %-10.4f | %-23s | %s\n", tc.size,
                  static_cast<unsigned long long>(tc.iters), k.mb_per_s, k.mmsg_per_s, "(no baseline)", ratio);
  }
  std::fflush(stdout);
}

bool write_x_json(const std::string& path, const RunInfo& info, const MachineInfo& m, const std::string& peer,
                  const std::vector<XResult>& results, const std::string& error) {
  using json = nlohmann::ordered_json;
  json j = json_head(info, m, error);
  j["mode"] = "cross-process";
  j["server"] = peer;
  j["baseline"] =
      "plain TCP on a socket set up as kinet's TCP link (non-blocking, TCP_NODELAY, default buffers, MSG_NOSIGNAL, "
      "poll): ping-pong for latency tests, one-way stream (one send() per message) for bandwidth tests";
  j["goals"] = {{"latency_ratio_max", kLatGoal}, {"bandwidth_ratio_min", kBwGoal}};
  json rs = json::array();
  for (const XResult& r : results) {
    json x = json_result(r.kinet);
    if (r.has_base) {
      json b = json_result(r.base);
      b.erase("test");
      b.erase("inline");
      b.erase("lat_mode");
      x["tcp"] = std::move(b);
      const double q = x_ratio(r);
      x["ratio_kinet_over_tcp"] = std::isfinite(q) ? json(q) : json(nullptr);
      x["ratio_of"] = is_latency(r.kinet.tc.kind) ? "t_typical_usec" : "bw_MB_per_s";
      x["goal_met"] = x_goal_met(r);
    }
    rs.push_back(std::move(x));
  }
  j["results"] = std::move(rs);
  return write_json_file(path, j);
}

}  // namespace kinet::perf
