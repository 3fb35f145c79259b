// kinet-perf — a \r-updated progress line on stderr: only when stderr is a
// terminal or --progress was given, so CI logs stay clean.
#pragma once
#include <cstdint>
#include <string>

namespace kinet::perf {

class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }
  // Starts a new line of work (e.g. "write_bw 65536 B").
  void begin(std::string label, uint64_t total);
  // Cheap to call often: redraws at most every 100 ms.
  void update(uint64_t done) {
    if (enabled_ && (++calls_ & 0x3f) == 0) redraw(done, false);
  }
  // Erases the line (before printing a table row to stdout).
  void clear();

 private:
  void redraw(uint64_t done, bool force);
  bool enabled_;
  bool shown_ = false;
  uint64_t calls_ = 0;
  uint64_t total_ = 0;
  uint64_t last_ns_ = 0;
  uint64_t start_ns_ = 0;
  std::string label_;
};

}  // namespace kinet::perf
