#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "kinet/status.hpp"
#include "kinet/transport.hpp"
#include "perf.hpp"

namespace kinet::bench {
namespace {
using Clock = std::chrono::steady_clock;
constexpr size_t kFlagOffset = 0;     // the 8-byte signal word, then the data
constexpr size_t kDataOffset = 64;

void write_all(int fd, const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, b, n);
    if (w <= 0) throw Error(ErrorCode::System, "bench: writing to the peer's socket failed");
    b += w, n -= static_cast<size_t>(w);
  }
}
void read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    ssize_t r = ::read(fd, b, n);
    if (r <= 0) throw Error(ErrorCode::System, "bench: the peer process closed its socket (did it fail?)");
    b += r, n -= static_cast<size_t>(r);
  }
}
void send_blob(int fd, const std::vector<uint8_t>& v) {
  uint32_t n = static_cast<uint32_t>(v.size());
  write_all(fd, &n, 4);
  write_all(fd, v.data(), n);
}
std::vector<uint8_t> recv_blob(int fd) {
  uint32_t n = 0;
  read_all(fd, &n, 4);
  std::vector<uint8_t> v(n);
  read_all(fd, v.data(), n);
  return v;
}

// One side: a transport, a connected peer, a registered buffer and the peer's key.
struct Side {
  std::unique_ptr<Transport> t;
  std::vector<uint8_t> mem;
  std::unique_ptr<TransportRegion> region;
  PeerId peer = 0;
  uint32_t key = 0;
  uint64_t remote_base = 0;
  Completion c[64];

  Side(const Options& o, int fd, size_t bytes, const char* name) {
    t = Transport::open({.provider = o.provider, .name = name});
    mem.assign(kDataOffset + bytes, 0);
    region = t->register_memory(mem.data(), mem.size(), kRemoteWrite | kRemoteRead | kRemoteAtomic);
    send_blob(fd, t->address());
    peer = t->connect(recv_blob(fd), name[0] == 'c' ? "server" : "client");
    send_blob(fd, region->remote_key().serialize());
    uint64_t base = reinterpret_cast<uint64_t>(mem.data());
    write_all(fd, &base, 8);
    auto k = recv_blob(fd);
    key = t->import_key(peer, RemoteKey::deserialize(k.data(), k.size()));
    read_all(fd, &remote_base, 8);
  }
  uint64_t flag() { return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(&mem[kFlagOffset])).load(std::memory_order_acquire); }
  // Polls once; throws on a failed completion.
  void poll() {
    size_t n = t->poll(c, 64);
    for (size_t i = 0; i < n; ++i)
      if (c[i].status != Status::Ok)
        throw Error(ErrorCode::System, std::string("bench: an operation failed: ") + status_string(c[i].status) +
                                           " " + t->peer_error(peer));
  }
  void wait_flag(uint64_t v) {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    // The clock is read once per 1024 polls: a read costs ~90 ns here, a
    // tenth of a shared-memory round trip.
    for (uint32_t n = 1; flag() != v; ++n) {
      poll();
      if (n % 1024 == 0 && Clock::now() > deadline)
        throw Error(ErrorCode::System, "bench: the signal word did not reach " + std::to_string(v) + " within 30 s");
    }
  }
  void post(Status s, const char* what) {
    if (s != Status::Ok) throw Error(ErrorCode::System, std::string("bench: ") + what + " returned " + status_string(s));
  }
  void put_signal(size_t size, uint64_t v) {
    for (;;) {
      Status s = t->put_signal(peer, &mem[kDataOffset], size, key, remote_base + kDataOffset, key,
                               remote_base + kFlagOffset, SignalOp::Set, v, v);
      if (s != Status::NoSpace) return post(s, "put_signal");
      poll();
    }
  }
  void drain() {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (t->outstanding() > 0) {
      poll();
      if (Clock::now() > deadline) throw Error(ErrorCode::System, "bench: operations still outstanding after 30 s");
    }
  }
};

struct Cmd {
  char kind;  // 'L' latency, 'B' bandwidth, 'Q' quit
  uint64_t size, iters;
};

// The forked peer: answers each ping (latency) and executes the stream (bandwidth).
void serve(const Options& o, int fd, size_t bytes) {
  Side s(o, fd, bytes, "server");
  for (;;) {
    // Polls while the next command is not there: the client's last operations
    // complete only through this side's acks (a later poll() sends them).
    for (pollfd pf{fd, POLLIN, 0}; ::poll(&pf, 1, 0) == 0;) s.poll();
    Cmd c{};
    read_all(fd, &c, sizeof c);
    write_all(fd, "R", 1);
    if (c.kind == 'Q') break;
    if (c.kind == 'L') {
      for (uint64_t i = 1; i <= c.iters; ++i) {
        s.wait_flag(i);
        s.put_signal(c.size, i);
      }
    } else {
      s.wait_flag(~0ull - c.size);  // the client's end-of-stream signal
    }
    s.drain();
  }
  s.drain();
}

}  // namespace

void run_kinet(const Options& o, std::vector<Row>& lat, std::vector<Row>& bw) {
  size_t bytes = 8;
  for (size_t s : o.lat_sizes) bytes = std::max(bytes, s);
  for (size_t s : o.bw_sizes) bytes = std::max(bytes, s);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) throw Error(ErrorCode::System, "bench: socketpair failed");
  const pid_t pid = fork();
  if (pid < 0) throw Error(ErrorCode::System, "bench: fork failed");
  if (pid == 0) {
    close(sv[0]);
    int rc = 0;
    try {
      serve(o, sv[1], bytes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kinet-transport-perf (server): %s\n", e.what());
      rc = 1;
    }
    _exit(rc);
  }
  close(sv[1]);
  const int fd = sv[0];
  try {
    Side s(o, fd, bytes, "client");
    auto command = [&](char k, uint64_t size, uint64_t iters) {
      Cmd c{k, size, iters};
      write_all(fd, &c, sizeof c);
      for (pollfd pf{fd, POLLIN, 0}; ::poll(&pf, 1, 0) == 0;) s.poll();  // acks the server may wait for
      char r;
      read_all(fd, &r, 1);
    };
    // Ping-pong of `timed` round trips after `warmup`: r.kinet the median
    // half round trip (us), r.kinet_avg the mean.
    auto pingpong = [&](size_t size, uint64_t warmup, uint64_t timed) {
      const uint64_t n = warmup + timed;
      command('L', size, n);
      std::vector<double> us;
      us.reserve(timed);
      for (uint64_t i = 1; i <= n; ++i) {
        const auto t0 = Clock::now();
        s.put_signal(size, i);
        s.wait_flag(i);
        if (i > warmup) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
      }
      s.drain();
      Row r;
      r.size = size;
      double sum = 0;
      for (double v : us) sum += v;
      r.kinet_avg = sum / static_cast<double>(us.size());
      std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
      r.kinet = us[us.size() / 2];
      return r;
    };
    for (size_t size : o.lat_sizes) lat.push_back(pingpong(size, o.lat_warmup, o.lat_iters));
    for (size_t size : o.bw_sizes) {
      const uint64_t n = std::max<uint64_t>(8, o.bw_bytes / size);
      if (o.bw_pingpong) {  // each round trip moves 2 x size
        Row r = pingpong(size, std::max<uint64_t>(2, n / 20), std::max<uint64_t>(4, n / 2));
        r.kinet = static_cast<double>(size) / r.kinet_avg * 1e6 / (1 << 20);
        bw.push_back(r);
        continue;
      }
      command('B', size, n);
      auto stream = [&](uint64_t count) {
        for (uint64_t i = 0; i < count; ++i) {
          while (s.t->outstanding() >= o.bw_window) s.poll();
          for (;;) {
            Status st = s.t->put(s.peer, &s.mem[kDataOffset], size, s.key, s.remote_base + kDataOffset, i);
            if (st != Status::NoSpace) {
              s.post(st, "put");
              break;
            }
            s.poll();
          }
        }
        s.drain();
      };
      // Warm-up, untimed, as ucx_perftest's -w: a window's worth at least
      // (first-touch page faults of receive buffers, UCX's lazy lane setup).
      stream(std::max<uint64_t>(o.bw_window, n / 10));
      const auto t0 = Clock::now();
      stream(n);
      const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
      for (;;) {  // tell the server the stream is over
        Status st = s.t->signal(s.peer, s.key, s.remote_base + kFlagOffset, SignalOp::Set, ~0ull - size, 0);
        if (st != Status::NoSpace) {
          s.post(st, "signal");
          break;
        }
        s.poll();
      }
      s.drain();
      Row r;
      r.size = size;
      r.kinet = static_cast<double>(n * size) / sec / (1 << 20);
      bw.push_back(r);
    }
    command('Q', 0, 0);
  } catch (...) {
    close(fd);
    waitpid(pid, nullptr, 0);
    throw;
  }
  close(fd);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) throw Error(ErrorCode::System, "bench: the server process failed");
}

}  // namespace kinet::bench
