// kinet-perf — cross-process mode: the rendezvous sockets (xproc_setup.hpp).
#include "xproc_setup.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

namespace kinet::perf::xp {

bs::SockAddr resolve(const std::string& spec, uint16_t default_port) {
  std::string host = spec, port = std::to_string(default_port);
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string::npos) throw PerfError("--client " + spec + ": no closing ]");
    if (close + 1 < host.size()) {
      if (host[close + 1] != ':') throw PerfError("--client " + spec + ": expected :PORT after ]");
      port = host.substr(close + 2);
    }
    host = host.substr(1, close - 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    port = host.substr(host.find(':') + 1);
    host.resize(host.find(':'));
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0 || !res)
    throw PerfError("--client " + spec + ": " + (rc ? gai_strerror(rc) : "no address"));
  bs::SockAddr a;
  std::memcpy(&a.ss, res->ai_addr, res->ai_addrlen);
  a.len = res->ai_addrlen;
  freeaddrinfo(res);
  return a;
}

bs::Fd accept_one(int lfd, Clock::time_point d, const char* what) {
  for (;;) {
    pollfd p{lfd, POLLIN, 0};
    const int k = ::poll(&p, 1, bs::ms_left(d));
    if (k == 0)
      throw PerfError(std::string("--server: no ") + what + " within " +
                      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kAcceptWait).count()) + " s");
    if (k < 0 && errno != EINTR) throw PerfError(std::string("--server: poll: ") + std::strerror(errno));
    if (k <= 0) continue;
    const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return bs::Fd(fd);
    if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
      throw PerfError(std::string("--server: accept: ") + std::strerror(errno));
  }
}

}  // namespace kinet::perf::xp
