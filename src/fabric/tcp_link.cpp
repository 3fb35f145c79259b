#include "fabric/tcp_link.hpp"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/cpu_relax.hpp"
#include "core/env.hpp"
#include "fabric/poll_until.hpp"
#include "kinet/kinet.hpp"

namespace kinet::fabric {

std::string tcp_endpoint(const bs::SockAddr& a) { return "tcp " + a.str(); }

bs::SockAddr parse_tcp_endpoint(const std::string& ep) {
  auto bad = [&](const std::string& why) -> bs::SockAddr {
    throw Error(ErrorCode::InvalidArgument, "endpoint \"" + ep + "\": " + why);
  };
  if (ep.rfind("tcp ", 0) != 0) return bad("not a tcp endpoint (expected \"tcp ADDRESS:PORT\")");
  const std::string rest = ep.substr(4);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon + 1 == rest.size()) return bad("no port");
  const std::string port_s = rest.substr(colon + 1);
  if (port_s.size() > 5 || port_s.find_first_not_of("0123456789") != std::string::npos) return bad("bad port");
  const unsigned long port = std::stoul(port_s);
  if (port == 0 || port > 65535) return bad("port " + port_s + " is out of range [1, 65535]");
  std::string host = rest.substr(0, colon);
  bs::SockAddr a;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    uint32_t scope = 0;
    if (const size_t pct = host.find('%'); pct != std::string::npos) {
      const std::string s = host.substr(pct + 1);
      if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
        return bad("bad IPv6 scope id");
      scope = static_cast<uint32_t>(std::stoul(s));
      host.resize(pct);
    }
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
    if (inet_pton(AF_INET6, host.c_str(), &s6->sin6_addr) != 1) return bad("\"" + host + "\" is not an IPv6 address");
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(static_cast<uint16_t>(port));
    s6->sin6_scope_id = scope;
    a.len = sizeof(sockaddr_in6);
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&a.ss);
    if (inet_pton(AF_INET, host.c_str(), &s4->sin_addr) != 1) return bad("\"" + host + "\" is not an IPv4 address");
    s4->sin_family = AF_INET;
    s4->sin_port = htons(static_cast<uint16_t>(port));
    a.len = sizeof(sockaddr_in);
  }
  return a;
}

TcpLink::TcpLink(bs::Fd fd, std::string peer, size_t max_frame)
    : fd_(std::move(fd)), peer_(std::move(peer)), max_frame_(max_frame) {
  bs::set_nonblocking(fd_.get());
  int one = 1;
  setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

TcpLink::~TcpLink() { close(); }

void TcpLink::close() { shut("the link was closed"); }

void TcpLink::shut(const std::string& why) {
  if (closed_.set(why) && fd_) ::shutdown(fd_.get(), SHUT_RDWR);
}

void TcpLink::lost(const std::string& why) {
  shut(why);
  throw Error(ErrorCode::System, peer_ + " peer lost: " + closed_.why(why));
}

void TcpLink::timeout(Clock::time_point start, const char* what) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  throw Error(ErrorCode::System, peer_ + ": timeout after " + std::to_string(ms) + " ms waiting for " + what);
}

namespace {
// KINET_TCP_SPIN_US (src/core/env.cpp): how long a receiver keeps
// polling a dry socket before it sleeps in poll. A sleeping receiver costs
// every frame a wake-up on both sides (the sender's send() wakes it: a
// quarter of a 64-byte write stream's CPU on loopback); polling costs a CPU,
// which small machines do not have to spare.
std::chrono::microseconds spin_window() {
  static const std::chrono::microseconds d = [] {
    cpu_set_t set;
    const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return std::chrono::microseconds(env::get_u64_at_most("KINET_TCP_SPIN_US", cpus >= 4 ? 50 : 0, 10000));
  }();
  return d;
}

// Waits for `events` on fd until `deadline`; false when it passed. EINTR retried.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll_until(&p, 1, deadline);
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return true;  // let the next call report the error
  }
}
}  // namespace

void TcpLink::send_parts(const uint8_t* head, size_t n1, const uint8_t* body, size_t n2,
                         Clock::time_point deadline) {
  const Piece p[2] = {{head, n1}, {body, n2}};
  send_gather(std::span<const Piece>(p, n2 ? 2 : 1), deadline);
}

void TcpLink::send_gather(std::span<const Piece> pieces, Clock::time_point deadline) {
  if (pieces.size() > kMaxPieces)
    throw Error(ErrorCode::InvalidArgument, peer_ + ": a send of " + std::to_string(pieces.size()) +
                                                " pieces (at most " + std::to_string(kMaxPieces) + ")");
  const auto start = Clock::now();
  iovec iov[kMaxPieces];
  size_t cnt = 0;
  for (const Piece& x : pieces)
    if (x.n) iov[cnt++] = {const_cast<uint8_t*>(x.p), x.n};
  // One sendmsg for what is left of every piece; a partial send moves the
  // first piece's start (the array is ours to change).
  size_t first = 0;
  while (first < cnt) {
    if (closed_.closed()) lost("the link was closed");
    msghdr m{};
    m.msg_iov = iov + first;
    m.msg_iovlen = cnt - first;
    const ssize_t k = ::sendmsg(fd_.get(), &m, MSG_NOSIGNAL);
    if (k > 0) {
      size_t left = static_cast<size_t>(k);
      while (first < cnt && left >= iov[first].iov_len) left -= iov[first++].iov_len;
      if (left) {
        iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
      }
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd_.get(), POLLOUT, deadline) && Clock::now() >= deadline)
        timeout(start, "the peer to take a frame (it does not read)");
      continue;
    }
    lost(k < 0 ? std::strerror(errno) : "send returned 0");
  }
}

bool TcpLink::recv(std::vector<uint8_t>& out, Clock::time_point deadline) {
  size_t rest = 0;
  return recv_frame(out, deadline, SIZE_MAX, 0, &rest);
}

bool TcpLink::recv_split(std::vector<uint8_t>& out, Clock::time_point deadline, size_t split_over, size_t head,
                         size_t* rest) {
  if (head <= kHeaderBytes || head > split_over)
    throw Error(ErrorCode::InvalidArgument, peer_ + ": recv_split: cut after " + std::to_string(head) +
                                                " bytes of frames over " + std::to_string(split_over) +
                                                " (want kHeaderBytes < head <= split_over)");
  return recv_frame(out, deadline, split_over, head, rest);
}

bool TcpLink::recv_frame(std::vector<uint8_t>& out, Clock::time_point deadline, size_t split_over, size_t head,
                         size_t* rest) {
  if (cut_rest_)
    throw Error(ErrorCode::InvalidArgument, peer_ + ": a frame received while " + std::to_string(cut_rest_) +
                                                " bytes of the cut one before it were not taken");
  Clock::time_point spin_end{};  // set when the socket first runs dry in this call
  for (;;) {
    if (closed_.closed()) lost("the link was closed");
    if (rx_got_ == rx_need_) {
      if (rx_need_ == kHeaderBytes) {
        uint32_t body = 0;
        std::string why;
        if (!frame_body_len(rx_.data(), max_frame_, &body, &why)) {
          shut("malformed frame header: " + why);
          throw Error(ErrorCode::InvalidArgument, peer_ + ": malformed frame header: " + why);
        }
        rx_need_ = kHeaderBytes + body;
        if (rx_need_ > split_over) {  // cut: the rest is the caller's to take
          cut_rest_ = rx_need_ - head;
          rx_need_ = head;
          // Rests of kReadAhead or more: the next read-ahead takes only the
          // next head. Smaller ones: reading ahead several frames per recv(2)
          // costs less than the copy out of the read-ahead buffer it brings.
          ra_ask_ = cut_rest_ >= kReadAhead ? head : kReadAhead;
        } else {
          ra_ask_ = kReadAhead;
        }
      }
      if (rx_got_ == rx_need_) {  // whole frame, or its head
        *rest = cut_rest_;
        rx_.resize(rx_got_);
        out.swap(rx_);
        // rx_ is now the caller's old buffer: keep its size, so that growing
        // it for the next frame zero-fills only what it lacks.
        rx_got_ = 0;
        rx_need_ = kHeaderBytes;
        return true;
      }
    }
    if (rx_.size() < rx_need_) rx_.resize(rx_need_);
    const size_t want = rx_need_ - rx_got_;
    if (ra_pos_ < ra_end_) {  // bytes already read ahead
      const size_t k = std::min(want, ra_end_ - ra_pos_);
      std::memcpy(rx_.data() + rx_got_, ra_.data() + ra_pos_, k);
      rx_got_ += k;
      ra_pos_ += k;
      continue;
    }
    const bool direct = want >= kReadAhead;
    if (!direct && ra_.size() < kReadAhead) ra_.resize(kReadAhead);
    const ssize_t k = direct ? ::recv(fd_.get(), rx_.data() + rx_got_, want, 0)
                             : ::recv(fd_.get(), ra_.data(), std::max(ra_ask_, want), 0);
    if (k > 0) {
      if (direct) {
        rx_got_ += static_cast<size_t>(k);
      } else {
        ra_pos_ = 0;
        ra_end_ = static_cast<size_t>(k);
      }
      continue;
    }
    if (k == 0) lost("the peer closed the connection");  // or a close() here: lost() names the first reason
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      const auto now = Clock::now();
      if (spin_end == Clock::time_point{}) spin_end = std::min(now + spin_window(), deadline);
      if (now < spin_end) {
        cpu_relax();
        continue;
      }
      if (!wait_fd(fd_.get(), POLLIN, deadline) && Clock::now() >= deadline) return false;
      continue;
    }
    lost(std::strerror(errno));
  }
}

std::span<const uint8_t> TcpLink::rest_buffered(size_t n) {
  const size_t k = std::min({n, cut_rest_, ra_end_ - ra_pos_});
  const std::span<const uint8_t> part(ra_.data() + ra_pos_, k);
  ra_pos_ += k;
  cut_rest_ -= k;
  return part;
}

size_t TcpLink::recv_rest(uint8_t* dst, size_t n, bool* bad_dst) {
  *bad_dst = false;
  if (ra_pos_ < ra_end_ && cut_rest_)
    throw Error(ErrorCode::InvalidArgument, peer_ + ": recv_rest before the bytes read ahead were taken");
  n = std::min(n, cut_rest_);
  // A rest smaller than a read-ahead is read ahead, with the frames after
  // it: one recv(2) for several frames costs less than the copy out of the
  // read-ahead buffer (rest_buffered() then has the bytes).
  const bool ahead = cut_rest_ < kReadAhead;
  if (ahead && ra_.size() < kReadAhead) ra_.resize(kReadAhead);
  for (;;) {
    if (closed_.closed()) lost("the link was closed");
    if (n == 0) return 0;
    const ssize_t k = ahead ? ::recv(fd_.get(), ra_.data(), kReadAhead, 0) : ::recv(fd_.get(), dst, n, 0);
    if (k > 0 && ahead) {
      ra_pos_ = 0;
      ra_end_ = static_cast<size_t>(k);
      return 0;
    }
    if (k > 0) {
      cut_rest_ -= static_cast<size_t>(k);
      return static_cast<size_t>(k);
    }
    if (k == 0) lost("the peer closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == EFAULT) {  // dst is not writable memory; the bytes stay in the socket
      *bad_dst = true;
      return 0;
    }
    lost(std::strerror(errno));
  }
}

bool TcpLink::wait_rest(Clock::time_point deadline) {
  if (closed_.closed()) lost("the link was closed");
  if (ra_pos_ < ra_end_ || cut_rest_ == 0) return true;
  return wait_fd(fd_.get(), POLLIN, deadline) || Clock::now() < deadline;
}

std::unique_ptr<TcpLink> tcp_connect(const std::string& endpoint, Clock::time_point deadline) {
  const bs::SockAddr a = parse_tcp_endpoint(endpoint);
  try {
    return std::make_unique<TcpLink>(bs::connect_to(a, deadline, endpoint), endpoint);
  } catch (const Error& e) {
    throw Error(ErrorCode::System, endpoint + ": can't connect: " + e.what());
  }
}

}  // namespace kinet::fabric
