// kinet tests — backing off in a test's own wait loops. Header-only, without
// GoogleTest, so helper processes use it too.
//
// A test that waits for a peer timeout or an engine timeout (0.4-5 s) by
// polling at full speed takes a whole core for it. CI runs six test binaries
// at once on two cores, and such loops were most of the CPU of the slowest
// multi-process binaries (perf: the fabric helper's wait for a lost peer,
// the ofi requester's wait for a killed or stopped target). IdleBackoff lets
// a loop spin while it keeps finding work, and sleeps kNap per call once it
// has found none kSpins times in a row: a test reacts up to ~kNap (plus the
// timer slack) later, which no assertion here depends on. The library's own
// waits are not touched: what is under test keeps its behaviour.
#pragma once
#include <chrono>
#include <thread>

namespace kinet::test {

class IdleBackoff {
 public:
  static constexpr unsigned kSpins = 256;
  static constexpr std::chrono::microseconds kNap{200};
  // Call once per loop turn; `progressed`: the turn found something to do.
  void operator()(bool progressed = false) {
    if (progressed) {
      idle_ = 0;
      return;
    }
    if (++idle_ > kSpins) std::this_thread::sleep_for(kNap);
  }

 private:
  unsigned idle_ = 0;
};

}  // namespace kinet::test
