// kinet-perf — progress line.
#include "progress.hpp"

#include <chrono>
#include <cstdio>

namespace kinet::perf {

void Progress::begin(std::string label, uint64_t total) {
  if (!enabled_) return;
  label_ = std::move(label);
  total_ = total;
  calls_ = 0;
  start_ns_ = now_ns();
  last_ns_ = 0;
  redraw(0, true);
}

void Progress::redraw(uint64_t done, bool force) {
  const uint64_t now = now_ns();
  if (!force && now - last_ns_ < 100000000ull) return;
  last_ns_ = now;
  const double pct = total_ ? 100.0 * double(done) / double(total_) : 0.0;
  std::fprintf(stderr, "\r  %-28s %5.1f%%  %llu/%llu  %.1f s ", label_.c_str(), pct,
               static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_),
               double(now - start_ns_) * 1e-9);
  std::fflush(stderr);
  shown_ = true;
}

void Progress::clear() {
  if (!enabled_ || !shown_) return;
  std::fprintf(stderr, "\r%72s\r", "");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace kinet::perf
