// kinet fabric — poll() until a deadline with microsecond resolution. poll()
// takes whole milliseconds: a wait of 200 us rounded up would last 1 ms, and
// the responder's answer delay (remote_fabric.cpp) is that short. Internal.
#pragma once
#include <poll.h>

#include <chrono>

namespace kinet::fabric {

// ppoll() on `fds` until `deadline` (at most `cap` from now); the remaining
// time is rounded up to the next microsecond, so a wait never ends before
// its bound. Returns ppoll's result: > 0 events, 0 time out, < 0 errno set
// (EINTR is the caller's to retry).
inline int poll_until(pollfd* fds, nfds_t n, std::chrono::steady_clock::time_point deadline,
                      std::chrono::microseconds cap = std::chrono::hours(24)) {
  using namespace std::chrono;
  auto left = ceil<microseconds>(deadline - steady_clock::now());
  if (left < microseconds(0)) left = microseconds(0);
  if (left > cap) left = cap;
  timespec ts{static_cast<time_t>(left.count() / 1000000), static_cast<long>(left.count() % 1000000) * 1000};
  return ::ppoll(fds, n, &ts, nullptr);
}

}  // namespace kinet::fabric
