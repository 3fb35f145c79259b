// kinet-perf — plain TCP ping-pong and stream (the cross-process baseline).
#include "tcp_baseline.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string>

#include "kinet/kinet.hpp"
#include "progress.hpp"
#include "runner.hpp"

namespace kinet::perf {
namespace {

[[noreturn]] void fail(const std::string& what) { throw PerfError("tcp baseline: " + what); }

// Waits for `ev` until the absolute deadline (ns); throws naming `what`.
void wait_fd(int fd, short ev, uint64_t deadline, const char* what) {
  for (;;) {
    const uint64_t now = now_ns();
    if (now >= deadline) fail(std::string("timeout waiting for ") + what);
    pollfd p{fd, ev, 0};
    const int ms = static_cast<int>(std::min<uint64_t>((deadline - now) / 1000000 + 1, 1000));
    const int k = ::poll(&p, 1, ms);
    if (k > 0) return;
    if (k < 0 && errno != EINTR) fail(std::string("poll: ") + std::strerror(errno));
  }
}

void send_all(int fd, const uint8_t* p, size_t n, uint64_t deadline, const char* what) {
  size_t done = 0;
  while (done < n) {
    const ssize_t k = ::send(fd, p + done, n - done, MSG_NOSIGNAL);
    if (k > 0) {
      done += static_cast<size_t>(k);
    } else if (k < 0 && errno == EINTR) {
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_fd(fd, POLLOUT, deadline, what);
    } else {
      fail(std::string(what) + ": send: " + (k < 0 ? std::strerror(errno) : "returned 0"));
    }
  }
}

// Reads exactly n bytes into p.
void recv_all(int fd, uint8_t* p, size_t n, uint64_t deadline, const char* what) {
  size_t done = 0;
  while (done < n) {
    const ssize_t k = ::recv(fd, p + done, n - done, 0);
    if (k > 0) {
      done += static_cast<size_t>(k);
    } else if (k == 0) {
      fail(std::string(what) + ": the peer closed the connection");
    } else if (errno == EINTR) {
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_fd(fd, POLLIN, deadline, what);
    } else {
      fail(std::string(what) + ": recv: " + std::strerror(errno));
    }
  }
}

std::vector<uint8_t> pattern(size_t n, uint64_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(1 + (i * 131 + salt * 7) % 251);
  return v;
}

}  // namespace

void tcp_link_options(int fd) {
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) fail(std::string("fcntl: ") + std::strerror(errno));
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    fail(std::string("TCP_NODELAY: ") + std::strerror(errno));
}

std::vector<double> tcp_pingpong_client(int fd, size_t n, uint64_t warmup, uint64_t iters, uint64_t timeout_ns,
                                        Progress& pr) {
  std::vector<uint8_t> tx = pattern(n, n), rx(n);
  std::vector<double> lat;
  lat.reserve(iters);
  const uint64_t total = warmup + iters;
  pr.begin("tcp ping-pong " + std::to_string(n) + " B", total);
  for (uint64_t i = 0; i < total; ++i) {
    tx[0] = static_cast<uint8_t>(i);
    const uint64_t t0 = now_ns();
    send_all(fd, tx.data(), n, t0 + timeout_ns, "ping-pong: sending a ping");
    recv_all(fd, rx.data(), n, t0 + timeout_ns, "ping-pong: the pong");
    const uint64_t t1 = now_ns();
    if (i >= warmup) lat.push_back(double(t1 - t0) * 1e-3 / 2);
    pr.update(i + 1);
  }
  pr.clear();
  if (std::memcmp(tx.data(), rx.data(), n) != 0) fail("ping-pong: the last pong differs from its ping");
  return lat;
}

void tcp_pingpong_server(int fd, size_t n, uint64_t total, uint64_t timeout_ns) {
  std::vector<uint8_t> buf(n);
  for (uint64_t i = 0; i < total; ++i) {
    const uint64_t d = now_ns() + timeout_ns;
    recv_all(fd, buf.data(), n, d, "ping-pong: a ping");
    send_all(fd, buf.data(), n, d, "ping-pong: sending a pong");
  }
}

double tcp_stream_send(int fd, size_t n, uint64_t count, uint64_t timeout_ns, Progress* pr) {
  const std::vector<uint8_t> tx = pattern(n, n + 1);
  const uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < count; ++i) {
    send_all(fd, tx.data(), n, now_ns() + timeout_ns, "stream: sending");
    if (pr) pr->update(i + 1);
  }
  uint8_t ack = 0;
  recv_all(fd, &ack, 1, now_ns() + timeout_ns, "stream: the receiver's answer after the last message");
  const uint64_t t1 = now_ns();
  if (ack != 1) fail("stream: the receiver found the data corrupt");
  return double(t1 - t0) * 1e-9;
}

void tcp_stream_recv(int fd, size_t n, uint64_t count, uint64_t timeout_ns) {
  const std::vector<uint8_t> want = pattern(n, n + 1);
  const uint64_t total = uint64_t(n) * count;
  std::vector<uint8_t> buf(std::max<size_t>(n, 256 << 10));
  uint64_t got = 0;
  bool ok = true;
  while (got < total) {
    const size_t room = static_cast<size_t>(std::min<uint64_t>(buf.size(), total - got));
    const ssize_t k = ::recv(fd, buf.data(), room, 0);
    if (k > 0) {
      // Spot check: the first byte of every message that starts in this read.
      for (uint64_t off = (n - got % n) % n; off < uint64_t(k); off += n) ok &= buf[off] == want[0];
      got += static_cast<uint64_t>(k);
    } else if (k == 0) {
      fail("stream: the sender closed the connection");
    } else if (errno == EINTR) {
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_fd(fd, POLLIN, now_ns() + timeout_ns, "stream: data");
    } else {
      fail(std::string("stream: recv: ") + std::strerror(errno));
    }
  }
  const uint8_t ack = ok ? 1 : 2;
  send_all(fd, &ack, 1, now_ns() + timeout_ns, "stream: the answer after the last message");
}

}  // namespace kinet::perf
