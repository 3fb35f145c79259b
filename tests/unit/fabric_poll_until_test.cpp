// fabric::poll_until: waits end at their deadline, not at the next millisecond
// (the responder's answer delay is 200 us; poll()'s milliseconds made waits
// of a few hundred microseconds last 1 ms), and never before it.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
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
  // Each wait is paired with a plain ppoll(2) of the same 300 us, measured
  // in the same loop: on a loaded machine both overshoot alike, so the
  // difference isolates what poll_until adds (a millisecond-rounded wait
  // adds ~700 us to every pair).
  std::vector<double> extra;
  for (int i = 0; i < 21; ++i) {
    pollfd f{p.fd[0], POLLIN, 0};
    auto t0 = Clock::now();
    const int n = kinet::fabric::poll_until(&f, 1, t0 + 300us);
    const auto took = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    ASSERT_EQ(n, 0);  // nothing to read: a time-out
    EXPECT_GE(took, 300.0) << "ended before its deadline";
    const timespec ts{0, 300'000};
    t0 = Clock::now();
    ASSERT_EQ(::ppoll(&f, 1, &ts, nullptr), 0);
    const auto ref = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    extra.push_back(took - ref);
  }
  std::nth_element(extra.begin(), extra.begin() + 10, extra.end());
  // Median of 21 pairs.
  EXPECT_LT(extra[10], 350.0) << "waits are rounded up to whole milliseconds";
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
