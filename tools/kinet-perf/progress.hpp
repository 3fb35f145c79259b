// kinet-perf — a \r-updated progress line on stderr: only when stderr is a
// terminal or --progress was given, so CI logs stay clean.
#pragma once
#include <cstdint>
#include <string>

#include "kinet/device/platform.cuh"  // now_ns

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

// The bandwidth tests' loop: `warmup` posts round-robin over `qps` QPs,
// drain(), then `iters` timed posts, drain(). Returns the seconds of the
// timed part (its drain included: the last message has landed).
template <class Post, class Drain>
double timed_loop(Progress& pr, const std::string& label, uint64_t warmup, uint64_t iters, uint32_t qps,
                  Post&& post_one, Drain&& drain) {
  pr.begin(label, warmup + iters);
  for (uint64_t k = 0; k < warmup; ++k) {
    post_one(static_cast<uint32_t>(k % qps));
    pr.update(k + 1);
  }
  drain();
  const uint64_t t0 = now_ns();
  for (uint64_t k = 0; k < iters; ++k) {
    post_one(static_cast<uint32_t>(k % qps));
    pr.update(warmup + k + 1);
  }
  drain();
  return double(now_ns() - t0) * 1e-9;
}

}  // namespace kinet::perf
