#include "bootstrap/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <thread>

#include "core/env.hpp"
#include "core/log.hpp"
#include "kinet/kinet.hpp"

namespace kinet::bs {

namespace {
[[noreturn]] void sys_fail(const std::string& what) {
  throw Error(ErrorCode::System, what + ": " + std::strerror(errno));
}
}  // namespace

int ms_left(Deadline d) {
  // Rounded up: a wait must not end before its bound.
  auto left = std::chrono::ceil<std::chrono::milliseconds>(d - Clock::now()).count();
  if (left <= 0) return 0;
  return left > INT_MAX ? INT_MAX : static_cast<int>(left);
}

std::string SockAddr::str() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(a->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    std::string s = "[" + std::string(host);
    if (a->sin6_scope_id) s += "%" + std::to_string(a->sin6_scope_id);
    return s + "]:" + std::to_string(ntohs(a->sin6_port));
  }
  return "<family " + std::to_string(ss.ss_family) + ">";
}

uint16_t SockAddr::port() const {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

WireAddr to_wire(const SockAddr& a) {
  WireAddr w{};
  w.family = a.ss.ss_family;
  w.port = a.port();
  if (a.ss.ss_family == AF_INET) {
    std::memcpy(w.addr, &reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr, 4);
  } else if (a.ss.ss_family == AF_INET6) {
    auto* s6 = reinterpret_cast<const sockaddr_in6*>(&a.ss);
    std::memcpy(w.addr, &s6->sin6_addr, 16);
    w.scope_id = s6->sin6_scope_id;
  }
  return w;
}

SockAddr from_wire(const WireAddr& w, const char* what) {
  SockAddr a;
  if (w.family == AF_INET) {
    auto* s = reinterpret_cast<sockaddr_in*>(&a.ss);
    s->sin_family = AF_INET;
    s->sin_port = htons(w.port);
    std::memcpy(&s->sin_addr, w.addr, 4);
    a.len = sizeof(sockaddr_in);
  } else if (w.family == AF_INET6) {
    auto* s = reinterpret_cast<sockaddr_in6*>(&a.ss);
    s->sin6_family = AF_INET6;
    s->sin6_port = htons(w.port);
    std::memcpy(&s->sin6_addr, w.addr, 16);
    s->sin6_scope_id = w.scope_id;
    a.len = sizeof(sockaddr_in6);
  } else {
    throw Error(ErrorCode::InvalidArgument, std::string(what) + ": address family " +
                                                std::to_string(w.family) + " is neither IPv4 nor IPv6");
  }
  return a;
}

bool ifname_selected(const std::string& spec_in, const std::string& name) {
  std::string spec = spec_in;
  bool exclude = !spec.empty() && spec[0] == '^';
  if (exclude) spec.erase(0, 1);
  bool exact = !spec.empty() && spec[0] == '=';
  if (exact) spec.erase(0, 1);
  bool hit = false;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    std::string item = spec.substr(pos, comma - pos);
    if (!item.empty() && (exact ? name == item : name.compare(0, item.size(), item) == 0)) hit = true;
    pos = comma + 1;
  }
  return exclude ? !hit : hit;
}

Interface pick_interface() {
  const std::string spec = env::get_str("KINET_SOCKET_IFNAME", "");
  const std::string fam_s = env::get_str("KINET_SOCKET_FAMILY", "");
  int only_family = AF_UNSPEC;
  if (fam_s == "AF_INET") only_family = AF_INET;
  else if (fam_s == "AF_INET6") only_family = AF_INET6;
  else if (!fam_s.empty())
    throw Error(ErrorCode::InvalidArgument, "bootstrap: KINET_SOCKET_FAMILY=" + fam_s + " is not AF_INET or AF_INET6");
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) sys_fail("bootstrap: getifaddrs");
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> guard(list, freeifaddrs);
  // Rank: 0 = IPv4 non-loopback, 1 = IPv6 global, 2 = IPv6 link-local,
  // 3 = loopback (only when no variable names it: then it is a choice).
  int best_rank = INT_MAX;
  Interface best;
  std::vector<std::string> seen;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (std::find(seen.begin(), seen.end(), i->ifa_name) == seen.end()) seen.emplace_back(i->ifa_name);
    bool loop = i->ifa_flags & IFF_LOOPBACK;
    if (!spec.empty() && !ifname_selected(spec, i->ifa_name)) continue;
    if (only_family != AF_UNSPEC && fam != only_family) continue;
    int r;
    if (fam == AF_INET) {
      r = loop ? 3 : 0;
    } else {
      auto* s6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      r = loop ? 4 : IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr) ? 2 : 1;
    }
    if (loop && spec.empty()) r += 10;  // last resort
    if (r < best_rank) {
      best_rank = r;
      best.name = i->ifa_name;
      best.addr = SockAddr{};
      size_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      std::memcpy(&best.addr.ss, i->ifa_addr, len);
      best.addr.len = static_cast<socklen_t>(len);
      if (fam == AF_INET) reinterpret_cast<sockaddr_in*>(&best.addr.ss)->sin_port = 0;
      else reinterpret_cast<sockaddr_in6*>(&best.addr.ss)->sin6_port = 0;
    }
  }
  if (best_rank == INT_MAX) {
    std::string names;
    for (auto& s : seen) names += (names.empty() ? "" : ", ") + s;
    throw Error(ErrorCode::NotFound, "bootstrap: no up IPv4/IPv6 interface matches KINET_SOCKET_IFNAME=" +
                                         (spec.empty() ? std::string("<unset>") : spec) +
                                         (fam_s.empty() ? "" : " and KINET_SOCKET_FAMILY=" + fam_s) +
                                         " (interfaces: " + (names.empty() ? "none" : names) + ")");
  }
  KINET_LOG(Debug, "bootstrap: interface %s, address %s", best.name.c_str(), best.addr.str().c_str());
  return best;
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}
void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) sys_fail("bootstrap: fcntl(O_NONBLOCK)");
}

static void set_blocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) sys_fail("bootstrap: fcntl(~O_NONBLOCK)");
}

Fd listen_on(const SockAddr& a, uint16_t port, SockAddr* bound) {
  SockAddr b = a;
  if (b.ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&b.ss)->sin_port = htons(port);
  else reinterpret_cast<sockaddr_in6*>(&b.ss)->sin6_port = htons(port);
  Fd fd(::socket(b.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) sys_fail("bootstrap: socket");
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&b.ss), b.len) != 0)
    sys_fail("bootstrap: bind " + b.str());
  if (::listen(fd.get(), 1024) != 0) sys_fail("bootstrap: listen " + b.str());
  if (bound) {
    bound->len = sizeof bound->ss;
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound->ss), &bound->len) != 0)
      sys_fail("bootstrap: getsockname");
  }
  return fd;
}

Fd connect_to(const SockAddr& to, Deadline d, const std::string& what) {
  int backoff_ms = 1;
  int last_errno = 0;
  for (;;) {
    Fd fd(::socket(to.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) sys_fail("bootstrap: socket");
    int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&to.ss), to.len);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      int n;
      do n = ::poll(&p, 1, ms_left(d));
      while (n < 0 && errno == EINTR);
      if (n < 0) sys_fail("bootstrap: poll while connecting to " + what);
      if (n == 0) {
        throw Error(ErrorCode::System, "bootstrap: timeout connecting to " + what + " at " + to.str());
      }
      int err = 0;
      socklen_t el = sizeof err;
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &el);
      rc = err ? -1 : 0;
      errno = err;
    }
    if (rc == 0) {
      set_blocking(fd.get());
      int one = 1;
      setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    last_errno = errno;
    // Refused / unreachable: the peer may not listen yet or a route may still
    // be coming up; anything else is final.
    if (last_errno != ECONNREFUSED && last_errno != ENETUNREACH && last_errno != EHOSTUNREACH &&
        last_errno != ETIMEDOUT && last_errno != EINTR)
      throw Error(ErrorCode::System, "bootstrap: connect to " + what + " at " + to.str() + ": " +
                                         std::strerror(last_errno));
    if (ms_left(d) == 0)
      throw Error(ErrorCode::System, "bootstrap: timeout connecting to " + what + " at " + to.str() +
                                         " (last error: " + std::strerror(last_errno) + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(backoff_ms, ms_left(d))));
    backoff_ms = std::min(backoff_ms * 2, 100);
  }
}

static void wait_fd(int fd, short ev, Deadline d, const std::string& what, const char* doing) {
  pollfd p{fd, ev, 0};
  for (;;) {
    int n = ::poll(&p, 1, ms_left(d));
    if (n > 0) return;
    if (n == 0)
      throw Error(ErrorCode::System, std::string("bootstrap: timeout ") + doing + " " + what);
    if (errno != EINTR) sys_fail(std::string("bootstrap: poll ") + doing + " " + what);
  }
}

void write_all(int fd, const void* buf, size_t n, Deadline d, const std::string& what) {
  auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_fd(fd, POLLOUT, d, what, "writing to");
    } else if (w < 0 && errno != EINTR) {
      sys_fail("bootstrap: writing to " + what);
    }
  }
}

bool read_all(int fd, void* buf, size_t n, Deadline d, const std::string& what) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
    } else if (r == 0) {
      return false;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_fd(fd, POLLIN, d, what, "reading from");
    } else if (errno == ECONNRESET) {
      return false;
    } else if (errno != EINTR) {
      sys_fail("bootstrap: reading from " + what);
    }
  }
  return true;
}

const char* root_status_name(RootStatus s) {
  switch (s) {
    case RootStatus::Ok: return "ok";
    case RootStatus::WrongSecret: return "wrong secret";
    case RootStatus::RankOutOfRange: return "rank out of range";
    case RootStatus::NranksMismatch: return "nranks differs from the other ranks'";
    case RootStatus::DuplicateRank: return "rank already registered";
    case RootStatus::Timeout: return "timeout: not every rank registered";
  }
  return "unknown status";
}

bool accept_hellos(int lfd, const Deadline& d, int stop_fd, const std::string& who,
                   const std::function<void(Fd&, const SockAddr&, const Hello&)>& on_hello,
                   const std::function<bool()>& done) {
  struct Pending {
    Fd fd;
    SockAddr peer;
    Hello h{};
    size_t got = 0;
  };
  // Bounds the descriptors a flood of silent connections can hold: the
  // oldest pending one is dropped to make room.
  constexpr size_t kMaxPending = 256;
  std::deque<Pending> pend;
  std::vector<pollfd> pfds;
  while (!done()) {
    pfds.clear();
    pfds.push_back({lfd, POLLIN, 0});
    pfds.push_back({stop_fd, POLLIN, 0});  // poll ignores a negative fd
    for (auto& p : pend) pfds.push_back({p.fd.get(), POLLIN, 0});
    int n = ::poll(pfds.data(), pfds.size(), ms_left(d));
    if (n < 0) {
      if (errno == EINTR) continue;
      sys_fail("bootstrap: poll in " + who);
    }
    if (n == 0) return false;
    if (pfds[1].revents) return false;
    // Hellos first: indices into pend stay valid until we erase below.
    for (size_t i = 0; i < pend.size(); ++i) {
      if (!pfds[i + 2].revents) continue;
      Pending& p = pend[i];
      ssize_t r = ::recv(p.fd.get(), reinterpret_cast<uint8_t*>(&p.h) + p.got, sizeof(Hello) - p.got,
                         MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (r <= 0) {
        KINET_LOG(Warn, "%s: dropped %s: connection closed after %zu of %zu handshake bytes", who.c_str(),
                  p.peer.str().c_str(), p.got, sizeof(Hello));
        p.fd.reset();
        continue;
      }
      p.got += static_cast<size_t>(r);
      if (p.got < sizeof(Hello)) continue;
      if (p.h.magic != Hello::kMagic || p.h.version != Hello::kVersion) {
        KINET_LOG(Warn, "%s: refused %s: not a kinet bootstrap handshake (magic 0x%08x, version %u)",
                  who.c_str(), p.peer.str().c_str(), p.h.magic, p.h.version);
        p.fd.reset();
        continue;
      }
      on_hello(p.fd, p.peer, p.h);
      p.fd.reset();  // closes it unless the callback took it
    }
    std::erase_if(pend, [](const Pending& p) { return !p.fd; });
    if (pfds[0].revents) {
      for (;;) {
        Pending p;
        p.peer.len = sizeof p.peer.ss;
        int c = ::accept4(lfd, reinterpret_cast<sockaddr*>(&p.peer.ss), &p.peer.len,
                          SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          if (errno == EMFILE || errno == ENFILE) {
            KINET_LOG(Warn, "%s: accept: %s", who.c_str(), std::strerror(errno));
            break;
          }
          sys_fail("bootstrap: accept in " + who);
        }
        p.fd = Fd(c);
        // As connect_to's side: small frames must not wait for Nagle.
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (pend.size() >= kMaxPending) {
          KINET_LOG(Warn, "%s: dropped %s: %zu handshakes already pending", who.c_str(),
                    pend.front().peer.str().c_str(), kMaxPending);
          pend.pop_front();
        }
        pend.push_back(std::move(p));
      }
    }
  }
  return true;
}

bool FrameReader::feed(const uint8_t* p, size_t n, std::deque<Msg>& out, std::string& why) {
  while (n > 0) {
    if (hdr_got_ < sizeof hdr_) {
      size_t k = std::min(n, sizeof hdr_ - hdr_got_);
      std::memcpy(hdr_ + hdr_got_, p, k);
      hdr_got_ += k;
      p += k;
      n -= k;
      if (hdr_got_ < sizeof hdr_) return true;
      std::memcpy(&h_, hdr_, sizeof h_);
      if ((h_.kind != static_cast<uint16_t>(FrameKind::User) &&
           h_.kind != static_cast<uint16_t>(FrameKind::Collective)) ||
          h_.flags != 0) {
        why = "malformed frame header (kind " + std::to_string(h_.kind) + ", flags " + std::to_string(h_.flags) +
              ")";
        return false;
      }
      if (h_.len > max_) {
        why = "frame of " + std::to_string(h_.len) + " bytes exceeds the limit of " + std::to_string(max_) +
              " bytes (KINET_BOOTSTRAP_MAX_FRAME)";
        return false;
      }
      body_.clear();
      body_.reserve(static_cast<size_t>(std::min<uint64_t>(h_.len, 1u << 20)));
    }
    size_t k = static_cast<size_t>(std::min<uint64_t>(n, h_.len - body_.size()));
    body_.insert(body_.end(), p, p + k);
    p += k;
    n -= k;
    if (body_.size() == h_.len) {
      out.push_back(Msg{static_cast<FrameKind>(h_.kind), h_.tag, std::move(body_)});
      body_ = {};
      hdr_got_ = 0;
    }
  }
  return true;
}

FrameReader::Pump FrameReader::pump(int fd, std::deque<Msg>& out, std::string& why) {
  uint8_t buf[64 * 1024];
  // A budget per call: a peer that writes as fast as we read would keep a
  // read-until-EAGAIN loop here for ever, past every deadline.
  for (int reads = 0; reads < 16; ++reads) {
    ssize_t r = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) {
      if (!feed(buf, static_cast<size_t>(r), out, why)) return Pump::Malformed;
      continue;
    }
    if (r == 0) return Pump::Eof;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Pump::WouldBlock;
    if (errno == ECONNRESET) return Pump::Eof;
    why = std::strerror(errno);
    return Pump::Error;
  }
  return Pump::WouldBlock;  // more may be waiting: poll reports it again
}

}  // namespace kinet::bs
