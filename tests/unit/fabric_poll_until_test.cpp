// fabric::poll_until: waits end at their deadline, not at the next millisecond
// (the responder's answer delay is 200 us; poll()'s milliseconds made waits
// of a few hundred microseconds last 1 ms), and never before it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "fabric/poll_until.hpp"

namespace {
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { EXPECT_EQ(::pipe(fd), 0); }
  ~Pipe() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
};

TEST(FabricPollUntil, EndsAtTheDeadlineInMicrosecondsNeverBefore) {
  Pipe p;
  std::vector<double> us;
  for (int i = 0; i < 21; ++i) {
    pollfd f{p.fd[0], POLLIN, 0};
    const auto t0 = Clock::now();
    const int n = kinet::fabric::poll_until(&f, 1, t0 + 300us);
    const auto took = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    ASSERT_EQ(n, 0);  // nothing to read: a time-out
    EXPECT_GE(took, 300.0) << "ended before its deadline";
    us.push_back(took);
  }
  std::nth_element(us.begin(), us.begin() + 10, us.end());
  // Median of 21: a millisecond-rounded wait takes >= 1000 us every time.
  EXPECT_LT(us[10], 900.0) << "waits are rounded up to whole milliseconds";
}

TEST(FabricPollUntil, ReturnsAtOnceWhenReadyOrPastTheDeadline) {
  Pipe p;
  pollfd f{p.fd[0], POLLIN, 0};
  EXPECT_EQ(kinet::fabric::poll_until(&f, 1, Clock::now() - 1s), 0);  // past: a poll, no wait
  ASSERT_EQ(::write(p.fd[1], "x", 1), 1);
  const auto t0 = Clock::now();
  EXPECT_EQ(kinet::fabric::poll_until(&f, 1, t0 + 10s), 1);
  EXPECT_TRUE(f.revents & POLLIN);
  EXPECT_LT(Clock::now() - t0, 1s);
}

TEST(FabricPollUntil, CapBoundsALongWait) {
  Pipe p;
  pollfd f{p.fd[0], POLLIN, 0};
  const auto t0 = Clock::now();
  EXPECT_EQ(kinet::fabric::poll_until(&f, 1, t0 + 1h, 2ms), 0);
  EXPECT_LT(Clock::now() - t0, 1s);
}
}  // namespace
