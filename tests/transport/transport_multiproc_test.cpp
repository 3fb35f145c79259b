// The message engine between two processes (fork) over the tcp and shm
// channels: every operation with data verified byte for byte, more
// operations than the depth, and kill -9 of the target mid-stream ending in
// the documented error ("peer lost: ..." and TransportRetryExceeded) within
// the timeout.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>

#include "../multiproc/netns.hpp"
#include "transport_rig.hpp"

namespace kinet::test {
namespace {
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr size_t kRegion = 4 << 20;

// Length-prefixed blobs over a pipe, bounded.
bool write_blob(int fd, const std::vector<uint8_t>& b) {
  const uint32_t n = static_cast<uint32_t>(b.size());
  return write(fd, &n, 4) == 4 && (n == 0 || write(fd, b.data(), n) == static_cast<ssize_t>(n));
}
bool read_exact(int fd, void* p, size_t n, Clock::time_point d) {
  auto* c = static_cast<uint8_t*>(p);
  while (n) {
    pollfd pf{fd, POLLIN, 0};
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count());
    if (left <= 0 || poll(&pf, 1, left) <= 0) return false;
    const ssize_t k = read(fd, c, n);
    if (k <= 0) return false;
    c += k, n -= static_cast<size_t>(k);
  }
  return true;
}
bool read_blob(int fd, std::vector<uint8_t>& b, Clock::time_point d) {
  uint32_t n = 0;
  if (!read_exact(fd, &n, 4, d) || n > (1 << 20)) return false;
  b.resize(n);
  return read_exact(fd, b.data(), n, d);
}

// Moves the calling thread (and the threads it starts later) into network
// namespace `ns` (made by `ip netns add`); returns the old one's fd, or -1.
int enter_netns(const std::string& ns) {
  const int old = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  const int fd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  const bool ok = fd >= 0 && setns(fd, CLONE_NEWNET) == 0;
  if (fd >= 0) close(fd);
  if (!ok) {
    close(old);
    return -1;
  }
  return old;
}

// The target process: registers a region, publishes address and key, serves
// until the requester is gone (or 60 s). `ns`: a network namespace to serve
// from, `ifname` its interface.
[[noreturn]] void serve(const std::string& provider, int in, int out, const std::string& ns = "",
                        const std::string& ifname = "") {
  int rc = 1;
  if (!ns.empty()) {
    if (enter_netns(ns) < 0) _exit(3);
    setenv("KINET_SOCKET_IFNAME", ("=" + ifname).c_str(), 1);
  }
  try {
    auto t = make_transport(provider, "target", 1024, 10s);
    std::vector<uint8_t> mem(kRegion, 0);
    auto r = t->register_memory(mem.data(), mem.size(), kAccessAll);
    write_blob(out, t->address());
    write_blob(out, r->remote_key().serialize());
    std::vector<uint8_t> peer;
    if (read_blob(in, peer, Clock::now() + 30s)) {
      const PeerId p = t->connect(peer, "requester");
      write_blob(out, {1});
      const auto end = Clock::now() + 60s;
      Completion c[16];
      while (Clock::now() < end && t->peer_error(p).empty()) t->poll(c, 16);
      rc = 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "target: %s\n", e.what());
  }
  _exit(rc);
}

struct Child {
  pid_t pid = -1;
  int to = -1, from = -1;
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (to >= 0) close(to);
    if (from >= 0) close(from);
  }
};

class TransportMultiproc : public ::testing::TestWithParam<std::string> {
 protected:
  Child child;
  std::unique_ptr<MsgTransport> t;
  PeerId peer = 0;
  uint32_t key = 0;
  uint64_t base = 0;

  std::string ns_b, if_b;  // set: the target serves from that namespace
  void start(size_t depth, std::chrono::milliseconds timeout) {
    int a[2], b[2];
    ASSERT_EQ(pipe(a), 0);
    ASSERT_EQ(pipe(b), 0);
    child.pid = fork();
    ASSERT_GE(child.pid, 0);
    if (child.pid == 0) {
      close(a[1]), close(b[0]);
      serve(GetParam(), a[0], b[1], ns_b, if_b);
    }
    close(a[0]), close(b[1]);
    child.to = a[1], child.from = b[0];
    t = make_transport(GetParam(), "requester", depth, timeout);
    std::vector<uint8_t> addr, kb, ready;
    const auto d = Clock::now() + 30s;
    ASSERT_TRUE(read_blob(child.from, addr, d)) << "the target did not publish its address";
    ASSERT_TRUE(read_blob(child.from, kb, d));
    ASSERT_TRUE(write_blob(child.to, t->address()));
    peer = t->connect(addr, "target process");
    ASSERT_TRUE(read_blob(child.from, ready, d)) << "the target did not connect back";
    const RemoteKey rk = RemoteKey::deserialize(kb.data(), kb.size());
    key = t->import_key(peer, rk);
    base = rk.addr;
  }
  std::vector<Completion> wait(size_t n, std::chrono::milliseconds bound = 30s) {
    std::vector<Completion> v;
    EXPECT_EQ(wait_completions(*t, n, v, {}, bound), n);
    return v;
  }
};

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 2654435761u) >> 13) ^ salt;
  return v;
}

TEST_P(TransportMultiproc, EveryOperationByteForByte) {
  start(64, 10s);
  // Split transfers both ways.
  const size_t n = 3 * t->payload_limit() + 777;
  auto src = pattern(n, 1);
  ASSERT_EQ(t->put(peer, src.data(), n, key, base + 8, 1), Status::Ok);
  ASSERT_EQ(wait(1)[0].status, Status::Ok);
  std::vector<uint8_t> back(n);
  ASSERT_EQ(t->get(peer, back.data(), n, key, base + 8, 2), Status::Ok);
  ASSERT_EQ(wait(1)[0].status, Status::Ok);
  EXPECT_EQ(back, src);
  // Atomics and signals on the first word.
  uint64_t old = 1;
  ASSERT_EQ(t->fetch_add(peer, &old, key, base + kRegion - 8, 5, 3), Status::Ok);
  ASSERT_EQ(wait(1)[0].status, Status::Ok);
  EXPECT_EQ(old, 0u);
  ASSERT_EQ(t->compare_swap(peer, &old, key, base + kRegion - 8, 5, 50, 4), Status::Ok);
  ASSERT_EQ(wait(1)[0].status, Status::Ok);
  EXPECT_EQ(old, 5u);
  ASSERT_EQ(t->signal(peer, key, base + kRegion - 8, SignalOp::Add, 2, 5), Status::Ok);
  ASSERT_EQ(t->put_signal(peer, src.data(), 100, key, base + kRegion - 200, key, base + kRegion - 8, SignalOp::Add, 3,
                          6),
            Status::Ok);
  auto two = wait(2);
  EXPECT_EQ(two[0].status, Status::Ok);
  EXPECT_EQ(two[1].status, Status::Ok);
  ASSERT_EQ(t->fetch_add(peer, &old, key, base + kRegion - 8, 0, 7), Status::Ok);
  ASSERT_EQ(wait(1)[0].status, Status::Ok);
  EXPECT_EQ(old, 55u);
  // A rejected one across the process boundary.
  ASSERT_EQ(t->put(peer, src.data(), 16, key, base + kRegion - 15, 8), Status::Ok);
  EXPECT_EQ(wait(1)[0].status, Status::RemoteAccess);
  // More operations than the depth (64): 2000 8-byte puts, then read them back.
  std::vector<uint64_t> vals(2000);
  size_t posted = 0, done = 0, nospace = 0;
  Completion c[64];
  const auto end = Clock::now() + 30s;
  while (done < vals.size() && Clock::now() < end) {
    while (posted < vals.size()) {
      vals[posted] = posted * 7 + 3;
      Status s = t->put(peer, &vals[posted], 8, key, base + 8 * posted, posted);
      if (s == Status::NoSpace) {
        ++nospace;
        break;
      }
      ASSERT_EQ(s, Status::Ok);
      ++posted;
    }
    const size_t k = t->poll(c, 64);
    for (size_t i = 0; i < k; ++i) ASSERT_EQ(c[i].status, Status::Ok);
    done += k;
  }
  ASSERT_EQ(done, vals.size());
  EXPECT_GT(nospace, 0u);
  std::vector<uint64_t> got(vals.size());
  ASSERT_EQ(t->get(peer, got.data(), 8 * got.size(), key, base, 9), Status::Ok);
  ASSERT_EQ(wait(1)[0].status, Status::Ok);
  EXPECT_EQ(got, vals);
}

TEST_P(TransportMultiproc, KillNineEndsInPeerLost) {
  const auto timeout = 4000ms;
  start(256, timeout);
  auto src = pattern(4096, 2);
  // Stream puts; kill the target mid-stream.
  size_t posted = 0, ok = 0, lost = 0;
  Completion c[64];
  bool killed = false;
  Clock::time_point killed_at;
  const auto end = Clock::now() + 30s;
  while (Clock::now() < end) {
    if (!killed && ok >= 200) {
      kill(child.pid, SIGKILL);
      killed = true;
      killed_at = Clock::now();
    }
    if (!killed || posted < ok + lost + 256) {
      Status s = t->put(peer, src.data(), src.size(), key, base + 4096 * (posted % 64), posted);
      if (s == Status::Ok) ++posted;
      else ASSERT_EQ(s, Status::NoSpace);
    }
    const size_t k = t->poll(c, 64);
    for (size_t i = 0; i < k; ++i) {
      if (c[i].status == Status::Ok) ++ok;
      else {
        EXPECT_TRUE(c[i].status == Status::TransportRetryExceeded || c[i].status == Status::WrFlushed)
            << status_string(c[i].status);
        ++lost;
      }
    }
    if (killed && t->outstanding() == 0 && lost > 0) break;
  }
  ASSERT_TRUE(killed);
  EXPECT_EQ(t->outstanding(), 0u) << "operations still in flight 30 s after kill -9";
  EXPECT_GT(lost, 0u);
  EXPECT_LT(Clock::now() - killed_at, timeout + 2s) << "the loss was not reported within the timeout";
  const std::string why = t->peer_error(peer);
  EXPECT_EQ(why.rfind("peer lost: ", 0), 0u) << why;
  // Later operations are flushed at once.
  ASSERT_EQ(t->put(peer, src.data(), 8, key, base, 99), Status::Ok);
  auto f = wait(1, 1s);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].status, Status::WrFlushed);
}

INSTANTIATE_TEST_SUITE_P(Channels, TransportMultiproc, ::testing::Values("tcp", "shm"),
                         [](const auto& i) { return i.param; });

// ---- two network namespaces joined by a veth pair (tcp) ---------------------
class TransportNetns : public TransportMultiproc {
 protected:
  void SetUp() override {
    if (!net.create()) GTEST_SKIP() << kinet::test::kNetnsSkip;
    ns_b = net.ns[1], if_b = net.ifname[1];  // the target serves from side 1
    old_ns = enter_netns(net.ns[0]);
    if (old_ns < 0) GTEST_SKIP() << "cannot enter network namespace " << net.ns[0];
    const char* v = std::getenv("KINET_SOCKET_IFNAME");
    had_ifname = v != nullptr;
    if (v) old_ifname = v;
    setenv("KINET_SOCKET_IFNAME", ("=" + net.ifname[0]).c_str(), 1);
  }
  void TearDown() override {
    t.reset();  // its sockets and threads live in side 0
    if (old_ns >= 0) {
      setns(old_ns, CLONE_NEWNET);
      close(old_ns);
      if (had_ifname) setenv("KINET_SOCKET_IFNAME", old_ifname.c_str(), 1);
      else unsetenv("KINET_SOCKET_IFNAME");
    }
  }
  kinet::test::NetnsPair net{"xp", "x", "10.215.0"};  // side 0: this process
  std::string old_ifname;
  bool had_ifname = false;
  int old_ns = -1;
};

TEST_P(TransportNetns, OperationsAcrossNamespaces) {
  start(64, 10s);
  EXPECT_NE(t->describe().find("10.215.0.1"), std::string::npos) << t->describe();
  auto src = pattern(2 * t->payload_limit() + 99, 4);
  ASSERT_EQ(t->put(peer, src.data(), src.size(), key, base + 16, 1), Status::Ok);
  ASSERT_EQ(wait(1)[0].status, Status::Ok);
  std::vector<uint8_t> back(src.size());
  ASSERT_EQ(t->get(peer, back.data(), back.size(), key, base + 16, 2), Status::Ok);
  ASSERT_EQ(wait(1)[0].status, Status::Ok);
  EXPECT_EQ(back, src);
  uint64_t old = 9;
  ASSERT_EQ(t->fetch_add(peer, &old, key, base, 4, 3), Status::Ok);
  ASSERT_EQ(wait(1)[0].status, Status::Ok);
  EXPECT_EQ(old, 0u);
}

// The veth taken down: nothing crosses, no RST: the operation's deadline ends it.
TEST_P(TransportNetns, LinkCutEndsInTheTimeout) {
  const auto timeout = 1500ms;
  start(64, timeout);
  uint64_t v = 1;
  ASSERT_EQ(t->put(peer, &v, 8, key, base, 1), Status::Ok);
  ASSERT_EQ(wait(1)[0].status, Status::Ok);
  ASSERT_TRUE(kinet::test::netns_sh("ip -n " + ns_b + " link set " + if_b + " down"));
  const auto t0 = Clock::now();
  ASSERT_EQ(t->put(peer, &v, 8, key, base, 2), Status::Ok);
  auto c = wait(1, 20s);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, Status::TransportRetryExceeded);
  EXPECT_GE(Clock::now() - t0, timeout - 100ms);
  EXPECT_LT(Clock::now() - t0, timeout + 3s);
  EXPECT_EQ(t->peer_error(peer), "timeout after 1500 ms waiting for put to target process");
}

INSTANTIATE_TEST_SUITE_P(Tcp, TransportNetns, ::testing::Values("tcp"), [](const auto& i) { return i.param; });

}  // namespace
}  // namespace kinet::test
