// kinet-proxy-cpu-bench — the proxy backend's host side on a CPU (no GPU):
// what one proxy thread costs per descriptor, and how fast it reacts.
//   stream  posters (host threads, one channel each) post no-op descriptors
//           flat out to ONE proxy thread: descriptors/s, and the share of
//           posts that found the ring full (near 1: the proxy set the pace)
//   burst   the consumer alone: a whole ring of published nops released at
//           once; ns per descriptor until the last completion
//   rtt     an 8-byte put_signal through the proxy (loop transport connected
//           to itself: one proxy thread) until the poster sees the signal,
//           vs a bare thread-to-thread flag round trip in the same run
// Table on stdout (median and best of the rounds; the load average, since
// other work on the machine moves these figures); --json FILE for all.
//   ./build/bench/proxy_cpu/kinet-proxy-cpu-bench [--quick] [--json out.json]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kinet/kinet.hpp"
#include "runs.hpp"

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double best(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }
std::vector<double> loadavg() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) != 3) return {};
  return {l[0], l[1], l[2]};
}
}  // namespace

int main(int argc, char** argv) {
  kpcb::Setup s;
  std::string mode = "all", json;
  uint64_t ops = 200'000;
  uint32_t rounds = 100, iters = 500;
  bool quick = false;
  CLI::App app{"kinet-proxy-cpu-bench: the proxy thread's per-descriptor cost and round trip on a CPU"};
  app.add_option("--mode", mode, "all, stream, burst or rtt")
      ->check(CLI::IsMember({"all", "stream", "burst", "rtt"}));
  app.add_option("--slots", s.slots, "ring slots per channel (power of two)")->check(CLI::Range(2u, 1u << 20));
  app.add_option("--batch", s.batch, "ProxyConfig::batch")->check(CLI::Range(1u, 65536u));
  app.add_option("--posters", s.posters, "stream: poster threads (one channel each)")->check(CLI::Range(1u, 64u));
  app.add_option("--ops", ops, "stream: descriptors per poster per round")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  app.add_option("--rounds", rounds, "rounds of each measurement (median and best reported: best is what a quiet machine gives)")
      ->check(CLI::Range(1u, 100000u));
  app.add_option("--iters", iters, "rtt: round trips per round")->check(CLI::Range(1u, 100000000u));
  app.add_option("--spin-us", s.spin_us, "ProxyConfig::spin in microseconds (default: the library's)")
      ->check(CLI::Range(0, 10000000));
  std::vector<int> cpus;
  app.add_option("--cpus", cpus, "POSTER,CONSUMER: pin the posters and the proxy thread (or the bare consumer / echo thread); "
                                 "default 0,1 on a machine of 2 CPUs or more, -1,-1: no pinning")
      ->expected(2);
  app.add_option("--json", json, "write every figure as JSON to this file");
  app.add_flag("--quick", quick, "fewer operations (a smoke run)");
  CLI11_PARSE(app, argc, argv);
  if (cpus.empty() && std::thread::hardware_concurrency() >= 2) cpus = {0, 1};
  if (cpus.size() == 2) {
    s.poster_cpu = cpus[0];
    s.consumer_cpu = cpus[1];
  }
  if (quick) {
    ops = std::min<uint64_t>(ops, 50'000);
    rounds = std::min(rounds, 5u);
    iters = std::min(iters, 200u);
  }
  nlohmann::json j;
  j["config"] = {{"slots", s.slots}, {"batch", s.batch}, {"posters", s.posters}, {"ops", ops},
                 {"rounds", rounds}, {"iters", iters}, {"cpus", std::thread::hardware_concurrency()},
                 {"poster_cpu", s.poster_cpu}, {"consumer_cpu", s.consumer_cpu},
                 {"spin_us", s.spin_us}};
  j["loadavg_before"] = loadavg();
  try {
    std::printf("%-58s %12s %12s\n", "measurement", "median", "best");
    if (mode == "all" || mode == "stream") {
      const kpcb::Stream r = kpcb::stream(s, ops, rounds);
      const std::vector<double>& v = r.ns_per_op;
      j["stream"] = {{"ns_per_op", v}, {"median_ns_per_op", median(v)}, {"best_ns_per_op", best(v)},
                     {"median_ops_per_s", 1e9 / median(v)}, {"stall_share", r.stall_share}};
      std::printf("%-58s %9.1f ns %9.1f ns  (%.1f M/s median, %.0f%% of posts found the ring full)\n",
                  ("stream: nops, " + std::to_string(s.posters) + " poster(s) -> 1 proxy thread").c_str(), median(v),
                  best(v), 1e3 / median(v), 100 * r.stall_share);
    }
    if (mode == "all" || mode == "burst") {
      const std::vector<double> v = kpcb::burst(s, rounds);
      j["burst"] = {{"ns_per_op", v}, {"median_ns_per_op", median(v)}, {"best_ns_per_op", best(v)},
                    {"median_ops_per_s", 1e9 / median(v)}};
      std::printf("%-58s %9.1f ns %9.1f ns  (%.1f M/s median)\n",
                  ("burst: consumer alone, " + std::to_string(s.slots) + " nops per round").c_str(), median(v),
                  best(v), 1e3 / median(v));
      const std::vector<double> b = kpcb::bare_burst(s, rounds);
      j["bare_burst"] = {{"ns_per_op", b}, {"median_ns_per_op", median(b)}, {"best_ns_per_op", best(b)}};
      std::printf("%-58s %9.1f ns %9.1f ns  (%.1f M/s median)\n", "burst: bare consumer thread (the ring's floor)",
                  median(b), best(b), 1e3 / median(b));
    }
    if (mode == "all" || mode == "rtt") {
      const std::vector<double> bare = kpcb::bare_round_trip(s, iters, rounds);
      const std::vector<double> px = kpcb::proxy_round_trip(s, iters, rounds);
      j["rtt"] = {{"bare_ns", bare},
                  {"proxy_put_signal_ns", px},
                  {"median_bare_ns", median(bare)},
                  {"median_proxy_ns", median(px)},
                  {"ratio", median(px) / median(bare)}};
      std::printf("%-58s %9.1f ns %9.1f ns\n", "rtt: bare thread -> thread -> thread flag", median(bare), best(bare));
      std::printf("%-58s %9.1f ns %9.1f ns\n", "rtt: 8-byte put_signal through the proxy (loop)", median(px),
                  best(px));
      std::printf("%-58s %9.2f x\n", "rtt ratio (medians)", median(px) / median(bare));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kinet-proxy-cpu-bench: %s\n", e.what());
    return 1;
  }
  j["loadavg_after"] = loadavg();
  const auto la = j["loadavg_after"].get<std::vector<double>>();
  if (la.size() == 3)
    std::printf("load average %.2f %.2f %.2f on %u CPUs\n", la[0], la[1], la[2], std::thread::hardware_concurrency());
  if (!json.empty()) {
    std::ofstream f(json);
    f << j.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "kinet-proxy-cpu-bench: can't write %s\n", json.c_str());
      return 1;
    }
  }
  return 0;
}
