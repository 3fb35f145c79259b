// kinet-post-rate — output: one line per row while running, the summary
// table (kinet, bare, ratio per row), JSON (nlohmann-json) and CSV.
#pragma once
#include <string>
#include <vector>

#include "common.hpp"

namespace kinet::bench {

struct RunInfo {
  std::string device = "?";
  int sms = 0;
  std::string date_utc;  // ISO 8601, when the run started
  double elapsed_s = 0;
};

std::string fmt_rate(double mwqe);
void print_row_line(size_t i, size_t n, const Result& r);
// Prints the summary; returns the number of rows that failed verification.
int print_summary(const std::vector<Result>& rows, const RunInfo& info, const Options& o);
// Write every row; false (with a message on stderr) when the file cannot be written.
bool write_json(const std::string& path, const std::vector<Result>& rows, const RunInfo& info, const Options& o);
bool write_csv(const std::string& path, const std::vector<Result>& rows);  // "" = stdout

}  // namespace kinet::bench
