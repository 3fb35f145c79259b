// kinet-ofi-pingpong — Transport over "ofi" measured by hand, to set beside
// fi_pingpong (run.sh runs both). Forks a target before anything touches
// libfabric; the parent is the requester. Latency: one put in flight, its
// completion is a round trip (request out, answer back); the table prints the
// median round trip and its half (fi_pingpong's usec/xfer is per one-way
// transfer). Bandwidth: a window of 64 puts of one size, 64 MiB in all.
// Usage: kinet-ofi-pingpong [iterations, default 2000]
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kinet/transport.hpp"

using namespace kinet;
using Clock = std::chrono::steady_clock;

namespace {
void put_blob(int fd, const std::vector<uint8_t>& b) {
  const uint32_t n = static_cast<uint32_t>(b.size());
  if (write(fd, &n, 4) != 4 || write(fd, b.data(), n) != static_cast<ssize_t>(n)) std::_Exit(3);
}
std::vector<uint8_t> get_blob(int fd) {
  uint32_t n = 0;
  if (read(fd, &n, 4) != 4) std::_Exit(3);
  std::vector<uint8_t> b(n);
  size_t at = 0;
  while (at < n) {
    const ssize_t k = read(fd, b.data() + at, n - at);
    if (k <= 0) std::_Exit(3);
    at += static_cast<size_t>(k);
  }
  return b;
}
constexpr size_t kMem = 64u << 20;
}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 2000;
  int to_child[2], to_parent[2];
  if (pipe(to_child) || pipe(to_parent)) return 3;
  const pid_t pid = fork();
  if (pid == 0) {  // target: registers, connects, polls until the parent says stop
    auto t = Transport::open({.provider = "ofi", .name = "target"});
    std::vector<uint8_t> mem(kMem);
    auto r = t->register_memory(mem.data(), mem.size(), kRemoteWrite | kRemoteRead);
    put_blob(to_parent[1], t->address());
    put_blob(to_parent[1], r->remote_key().serialize());
    t->connect(get_blob(to_child[0]), "requester");
    fcntl(to_child[0], F_SETFL, O_NONBLOCK);
    Completion c[16];
    char x;
    while (read(to_child[0], &x, 1) != 1) t->poll(c, 16);
    std::_Exit(0);
  }
  auto t = Transport::open({.provider = "ofi", .name = "requester"});
  std::vector<uint8_t> mem(kMem, 1);
  const auto addr = get_blob(to_parent[0]);
  const auto keyb = get_blob(to_parent[0]);
  put_blob(to_child[1], t->address());
  const PeerId p = t->connect(addr, "target");
  const RemoteKey key = RemoteKey::deserialize(keyb.data(), keyb.size());
  const uint32_t k = t->import_key(p, key);
  std::printf("# %s; target pid %d; %d iterations\n", t->describe().c_str(), pid, iters);
  Completion c[64];
  auto wait_one = [&] {
    for (;;) {
      const size_t n = t->poll(c, 1);
      if (n == 1) {
        if (c[0].status != Status::Ok) {
          std::fprintf(stderr, "operation failed: %d (%s)\n", int(c[0].status), t->peer_error(p).c_str());
          std::_Exit(4);
        }
        return;
      }
    }
  };
  std::printf("%-9s %12s %12s %12s\n", "bytes", "rtt_med_us", "half_rtt_us", "rtt_avg_us");
  for (size_t sz : {8ul, 64ul, 1024ul, 4096ul, 16384ul, 65536ul}) {
    std::vector<double> us;
    for (int i = 0; i < iters + iters / 10; ++i) {
      const auto t0 = Clock::now();
      while (t->put(p, mem.data(), sz, k, key.addr, i) == Status::NoSpace) t->poll(c, 0);
      wait_one();
      if (i >= iters / 10) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    double avg = 0;
    for (double u : us) avg += u;
    avg /= static_cast<double>(us.size());
    std::printf("%-9zu %12.2f %12.2f %12.2f\n", sz, us[us.size() / 2], us[us.size() / 2] / 2, avg);
  }
  std::printf("%-9s %12s\n", "bytes", "MiB/s");
  for (size_t sz : {65536ul, 1ul << 20, 4ul << 20}) {
    const size_t n = (64u << 20) / sz;
    size_t posted = 0, done = 0;
    const auto t0 = Clock::now();
    while (done < n) {
      while (posted < n && posted - done < 64 &&
             t->put(p, mem.data() + (posted * sz) % kMem, sz, k, key.addr + (posted * sz) % kMem, posted) == Status::Ok)
        ++posted;
      const size_t got = t->poll(c, 64);
      for (size_t i = 0; i < got; ++i)
        if (c[i].status != Status::Ok) return 4;
      done += got;
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("%-9zu %12.1f\n", sz, 64.0 / s);
  }
  if (write(to_child[1], "x", 1) != 1) return 3;
  int st = 0;
  waitpid(pid, &st, 0);
  return 0;
}
