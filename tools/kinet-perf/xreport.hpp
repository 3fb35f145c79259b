// kinet-perf — tables and JSON of the cross-process mode (kinet beside the
// plain TCP baseline, and their ratio).
#pragma once
#include <string>
#include <vector>

#include "report.hpp"
#include "xproc.hpp"

namespace kinet::perf {

// kinet / TCP: latency (typical, i.e. median) or bandwidth (MB/s); 0 without
// a baseline. The goals of issue 9: latency <= 1.3x, bandwidth >= 0.8x.
double x_ratio(const XResult& r);
bool x_goal_met(const XResult& r);

void print_x_header(const RunInfo& info, const TestCase& tc, const std::string& peer);
void print_x_row(const XResult& r);
// Every figure of both runs, the ratio and the goal per case.
bool write_x_json(const std::string& path, const RunInfo& info, const MachineInfo& m, const std::string& peer,
                  const std::vector<XResult>& results, const std::string& error);

}  // namespace kinet::perf
