// kinet-perf — statistics, perftest-style tables on stdout, JSON report.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runner.hpp"

namespace kinet::perf {

inline constexpr double kMB = 1048576.0;  // perftest's MB

struct LatStats {
  double min = 0, max = 0, typical = 0, avg = 0, stdev = 0, p99 = 0, p999 = 0;
};
LatStats lat_stats(std::vector<double> samples_us);  // typical = median

struct BwStats {
  double mb_per_s = 0;      // MB = 2^20 bytes
  double gbit_per_s = 0;    // 10^9 bits
  double mmsg_per_s = 0;    // 10^6 messages
};
BwStats bw_stats(const Result& r);

// Everything a report header says about where it ran.
struct RunInfo {
  std::string version;
  std::string command_line;
  std::string client_device, server_device, provider;
  uint32_t max_qp_wr = 0, max_msg = 0;
  bool gpu_memory = false;
  uint32_t sq_depth = 0;
  std::string runner;
  std::string lat_mode;
  std::string pinning;
  uint64_t timeout_ms = 0;
  uint64_t seed = 0;
};

// Host name, OS, CPU: filled from the running machine.
struct MachineInfo {
  std::string hostname, os, arch, cpu_model;
  unsigned hardware_threads = 0;
  unsigned cpus_allowed = 0;  // sched_getaffinity: what this process may use
};
MachineInfo machine_info();

// perftest-like table: header once per test, a row per size.
void print_header(const RunInfo& info, const TestCase& tc, const std::string& runner_line);
void print_row(const Result& r);
void print_footer();

// Writes the JSON report. error: empty when the run succeeded.
bool write_json(const std::string& path, const RunInfo& info, const MachineInfo& m,
                const std::vector<Result>& results, const std::string& error);

// The pieces of that report, for reports of another shape (cross-process):
// everything up to "results" (tool, version, command line, time, status,
// machine, provider, config), one result's object, and the file write.
nlohmann::ordered_json json_head(const RunInfo& info, const MachineInfo& m, const std::string& error);
nlohmann::ordered_json json_result(const Result& r);
bool write_json_file(const std::string& path, const nlohmann::ordered_json& j);

}  // namespace kinet::perf
