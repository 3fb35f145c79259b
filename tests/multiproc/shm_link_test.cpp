// The shared-memory link (src/fabric/shm_link.hpp): frames of every size
// round trip byte for byte between two processes, many more frames than a
// ring holds pass under flow control, a full ring times out with the
// documented message, kill -9 of the peer is "peer lost" within a bound, and
// a hostile peer (garbage indices and headers in the shared rings, malformed
// handshakes) gets InvalidArgument, never a crash or a read out of bounds.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fabric/shm_link.hpp"
#include "fabric/wire.hpp"
#include "kinet/kinet.hpp"
#include "shm_link_util.hpp"
#include "test_util.hpp"

namespace {
using namespace kinet;
using namespace kinet::fabric;
using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

using kinet::test::in;

std::string unique_name(const char* what) {
  static int n = 0;
  return std::string("test-") + what + "-" + std::to_string(getpid()) + "-" + std::to_string(++n);
}

// A frame the link accepts (valid header, type `type`) of n bytes whose body
// is a pattern of `seed`.
Bytes frame(size_t n, uint32_t seed, uint8_t type = 2) {
  Bytes b(n);
  const uint32_t body = static_cast<uint32_t>(n - kHeaderBytes);
  const uint8_t h[16] = {'K', 'N', 'F', '1', kVersion, type, 0, 0, uint8_t(body), uint8_t(body >> 8), uint8_t(body >> 16),
                         uint8_t(body >> 24), 0, 0, 0, 0};
  std::memcpy(b.data(), h, 16);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 16; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    b[i] = static_cast<uint8_t>(x >> 16);
  }
  return b;
}

// System error whose message is returned; anything else fails the test.
template <class F>
std::string system_error(F&& f, ErrorCode want = ErrorCode::System) {
  return kinet::test::error_of(std::forward<F>(f), want);
}

struct Pair {
  std::unique_ptr<ShmListener> listener;
  std::unique_ptr<Link> accepted;   // the listener's side
  std::unique_ptr<Link> connected;  // the connector's side
};
Pair connect_pair(size_t ring = kShmMinRing) {
  Pair p;
  p.listener = std::make_unique<ShmListener>(unique_name("pair"));
  std::thread t([&] { p.connected = shm_connect(p.listener->name(), in(20s), ring); });
  p.accepted = p.listener->accept(in(20s));
  t.join();
  return p;
}

// Runs `body` in a child process; its return value is the exit code.
template <class F>
pid_t fork_child(F&& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    int rc = 99;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      rc = 98;
    }
    _exit(rc);
  }
  return pid;
}
int reap(pid_t pid) {
  int st = 0;
  for (int i = 0; i < 3000; ++i) {  // bounded: 30 s
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    std::this_thread::sleep_for(10ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

// ---- two processes --------------------------------------------------------------
TEST(ShmLink, EverySizeRoundTripsByteForByteAcrossProcesses) {
  ShmListener l(unique_name("echo"));
  const pid_t child = fork_child([&] {
    auto link = shm_connect(l.name(), in(20s), kShmMinRing);
    Bytes f;
    for (;;) {
      if (!link->recv(f, in(30s))) return 2;
      link->send(f.data(), f.size(), in(30s));
      if (f[5] == 1) return 0;  // the terminator (a header-only Hello) echoed
    }
  });
  auto link = l.accept(in(20s));
  ASSERT_TRUE(link);
  std::vector<size_t> sizes;
  for (size_t n = 16; n <= 4200; ++n) sizes.push_back(n);
  for (size_t n = 4200; n < kMaxFrame; n += 12289) sizes.push_back(n);  // odd stride: every offset mod 16
  for (size_t n : {kShmMinRing / 2, kMaxFrame - 1, kMaxFrame}) sizes.push_back(n);
  Bytes back;
  uint32_t seed = 0;
  for (size_t n : sizes) {
    const Bytes f = frame(n, ++seed);
    link->send(f.data(), f.size(), in(30s));
    ASSERT_TRUE(link->recv(back, in(30s))) << n;
    ASSERT_TRUE(back == f) << "frame of " << n << " bytes came back different";
  }
  const Bytes end = frame(16, 0, 1);
  link->send(end.data(), end.size(), in(30s));
  ASSERT_TRUE(link->recv(back, in(30s)));
  EXPECT_EQ(reap(child), 0);
}

TEST(ShmLink, ManyMoreFramesThanTheRingHoldsUnderFlowControl) {
  ShmListener l(unique_name("flow"));
  // At the smallest scale still over 2 rings' worth of frames.
  const int kFrames = static_cast<int>(kinet::test::scaled(20000, 3000));
  auto size_of = [](int i) { return 16 + static_cast<size_t>((i * 7919u) % 3000u) + (i % 500 == 0 ? 600000 : 0); };
  // The child receives and checks every frame, then answers with the count of good ones.
  const pid_t child = fork_child([&] {
    auto link = shm_connect(l.name(), in(20s), kShmMinRing);
    Bytes f;
    uint32_t good = 0;
    for (int i = 0; i < kFrames; ++i) {
      if (!link->recv(f, in(30s))) return 2;
      good += f == frame(size_of(i), static_cast<uint32_t>(i));
    }
    const Bytes r = frame(16 + 4, 0);
    Bytes out = r;
    std::memcpy(out.data() + 16, &good, 4);
    link->send(out.data(), out.size(), in(30s));
    return 0;
  });
  auto link = l.accept(in(20s));
  ASSERT_TRUE(link);
  uint64_t total = 0;
  for (int i = 0; i < kFrames; ++i) {
    const Bytes f = frame(size_of(i), static_cast<uint32_t>(i));
    link->send(f.data(), f.size(), in(30s));
    total += f.size();
  }
  EXPECT_GT(total, 4 * kShmMinRing);  // the ring wrapped several times
  Bytes r;
  ASSERT_TRUE(link->recv(r, in(30s)));
  ASSERT_EQ(r.size(), 20u);
  uint32_t good = 0;
  std::memcpy(&good, r.data() + 16, 4);
  EXPECT_EQ(good, static_cast<uint32_t>(kFrames));
  EXPECT_EQ(reap(child), 0);
}

TEST(ShmLink, KillNineOfAWaitedForPeerIsPeerLostPromptly) {
  ShmListener l(unique_name("kill"));
  const pid_t child = fork_child([&] {
    auto link = shm_connect(l.name(), in(20s), kShmMinRing);
    const Bytes f = frame(100, 1);
    link->send(f.data(), f.size(), in(30s));
    for (;;) pause();
    return 0;
  });
  auto link = l.accept(in(20s));
  ASSERT_TRUE(link);
  Bytes f;
  ASSERT_TRUE(link->recv(f, in(30s)));  // the child is up
  ASSERT_EQ(kill(child, SIGKILL), 0);
  const auto t0 = Clock::now();
  const std::string msg = system_error([&] { link->recv(f, in(30s)); });
  EXPECT_LT(Clock::now() - t0, 5s);
  EXPECT_EQ(msg, link->peer_name() + ": peer lost: the connection closed (the peer exited or died)");
  EXPECT_EQ(link->peer_name(), "shm pid " + std::to_string(child));
  EXPECT_EQ(reap(child), 128 + SIGKILL);
}

TEST(ShmLink, KillNineUnblocksASenderOnAFullRing) {
  ShmListener l(unique_name("killsend"));
  const pid_t child = fork_child([&] {
    auto link = shm_connect(l.name(), in(20s), kShmMinRing);
    const Bytes f = frame(100, 1);
    link->send(f.data(), f.size(), in(30s));
    for (;;) pause();  // never reads
    return 0;
  });
  auto link = l.accept(in(20s));
  ASSERT_TRUE(link);
  Bytes f;
  ASSERT_TRUE(link->recv(f, in(30s)));
  const Bytes big = frame(65536, 2);
  for (size_t i = 0; i < kShmMinRing / big.size(); ++i) link->send(big.data(), big.size(), in(5s));  // now full
  std::thread killer([&] { kill(child, SIGKILL); });
  const auto t0 = Clock::now();
  const std::string msg = system_error([&] { link->send(big.data(), big.size(), in(30s)); });
  killer.join();
  EXPECT_LT(Clock::now() - t0, 5s);
  EXPECT_EQ(msg, link->peer_name() + ": peer lost: the connection closed (the peer exited or died)");
  EXPECT_EQ(reap(child), 128 + SIGKILL);
}

// ---- one process, two ends ------------------------------------------------------
// send_parts: the frame in two pieces arrives as the one frame, also when
// the second piece wraps the ring, and a header part shorter than a header
// is refused as send() refuses a short frame.
TEST(ShmLink, SendPartsArrivesAsTheJoinedFrame) {
  Pair p = connect_pair();
  Bytes got;
  uint32_t seed = 100;
  // Offsets walk around the ring, so some bodies wrap it.
  for (size_t n : {size_t{16}, size_t{17}, size_t{4096 + 40}, kShmMinRing / 3, kShmMinRing / 2 + 7}) {
    for (size_t head : {size_t{16}, size_t{40}}) {
      if (head > n) continue;
      const Bytes f = frame(n, ++seed);
      p.connected->send_parts(f.data(), head, f.data() + head, n - head, in(10s));
      ASSERT_TRUE(p.accepted->recv(got, in(10s)));
      ASSERT_EQ(got, f) << n << " bytes, header part " << head;
    }
  }
  const Bytes f = frame(64, 7);
  const std::string e =
      system_error([&] { p.connected->send_parts(f.data(), 8, f.data() + 8, 56, in(1s)); }, ErrorCode::InvalidArgument);
  EXPECT_NE(e.find(": a frame's first part of 8 bytes: it must hold the whole 16-byte header"), std::string::npos) << e;
}

TEST(ShmLink, FullRingTimesOutWithTheDocumentedMessage) {
  Pair p = connect_pair();
  const Bytes big = frame(65536, 3), small = frame(16, 4);
  for (size_t i = 0; i < kShmMinRing / big.size(); ++i) p.connected->send(big.data(), big.size(), in(5s));
  const std::string who = p.connected->peer_name();
  EXPECT_EQ(who, "shm pid " + std::to_string(getpid()));
  const auto t0 = Clock::now();
  EXPECT_EQ(system_error([&] { p.connected->send(small.data(), small.size(), t0 + 200ms); }),
            who + ": timeout after 200 ms waiting for ring space (16 bytes to send, 0 of 2097152 free)");
  EXPECT_GE(Clock::now() - t0, 200ms);
  Bytes f;
  ASSERT_TRUE(p.accepted->recv(f, in(5s)));
  EXPECT_TRUE(f == big);
  // Exactly one frame's room now: one byte more does not fit, that much does.
  const Bytes over = frame(65537, 5);
  EXPECT_EQ(system_error([&] { p.connected->send(over.data(), over.size(), in(50ms)); }),
            who + ": timeout after 50 ms waiting for ring space (65537 bytes to send, 65536 of 2097152 free)");
  p.connected->send(big.data(), big.size(), in(5s));
  for (size_t i = 0; i < kShmMinRing / big.size(); ++i) {
    ASSERT_TRUE(p.accepted->recv(f, in(5s)));
    EXPECT_TRUE(f == big);
  }
  EXPECT_FALSE(p.accepted->recv(f, in(20ms)));  // empty: false at the deadline, not an error
}

TEST(ShmLink, FullDuplexFromFourThreads) {
  Pair p = connect_pair();
  const int kFrames = static_cast<int>(kinet::test::scaled(4000, 1000));  // >= 5 rings' worth each way
  auto size_of = [](int i) { return 16 + static_cast<size_t>((i * 104729u) % 20000u); };
  std::atomic<int> bad{0};
  auto sender = [&](Link* l, uint32_t base) {
    for (int i = 0; i < kFrames; ++i) {
      const Bytes f = frame(size_of(i), base + i);
      l->send(f.data(), f.size(), in(30s));
    }
  };
  auto receiver = [&](Link* l, uint32_t base) {
    Bytes f;
    for (int i = 0; i < kFrames; ++i)
      if (!l->recv(f, in(30s)) || f != frame(size_of(i), base + i)) ++bad;
  };
  std::thread t1(sender, p.connected.get(), 0), t2(receiver, p.accepted.get(), 0);
  std::thread t3(sender, p.accepted.get(), 1000000), t4(receiver, p.connected.get(), 1000000);
  t1.join(), t2.join(), t3.join(), t4.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(ShmLink, CloseWakesBlockedCallsAndThePeerSeesItGo) {
  Pair p = connect_pair();
  std::string msg;
  std::thread t([&] { msg = system_error([&] { Bytes f; p.accepted->recv(f, in(30s)); }); });
  p.accepted->close();
  t.join();
  EXPECT_EQ(msg, p.accepted->peer_name() + ": peer lost: link closed");
  Bytes f;
  EXPECT_EQ(system_error([&] { p.connected->recv(f, in(10s)); }),
            p.connected->peer_name() + ": peer lost: the connection closed (the peer exited or died)");
  const Bytes x = frame(16, 1);
  EXPECT_EQ(system_error([&] { p.accepted->send(x.data(), x.size(), in(1s)); }),
            p.accepted->peer_name() + ": peer lost: link closed");
}

TEST(ShmLink, FramesPublishedBeforeThePeerLeftAreDelivered) {
  Pair p = connect_pair();
  for (uint32_t i = 0; i < 3; ++i) {
    const Bytes f = frame(1000 + i, i);
    p.connected->send(f.data(), f.size(), in(5s));
  }
  p.connected.reset();
  Bytes f;
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(p.accepted->recv(f, in(5s)));
    EXPECT_TRUE(f == frame(1000 + i, i));
  }
  EXPECT_EQ(system_error([&] { p.accepted->recv(f, in(10s)); }),
            p.accepted->peer_name() + ": peer lost: the connection closed (the peer exited or died)");
}

TEST(ShmLink, ConnectAndAcceptAreBounded) {
  const std::string name = unique_name("nobody");
  // The message gives the time from the call's start to its deadline: 100 ms
  // less what passed before the call started (6 ms once under ASan and load).
  const auto t0 = Clock::now();
  const std::string e = system_error([&] { shm_connect(name, t0 + 100ms); });
  const std::string head = "shm connect to " + name + ": timeout after ", tail = " ms waiting for a listener";
  ASSERT_EQ(e.rfind(head, 0), 0u) << e;
  ASSERT_GT(e.size(), head.size() + tail.size()) << e;
  ASSERT_EQ(e.substr(e.size() - tail.size()), tail) << e;
  const long ms = std::stol(e.substr(head.size(), e.size() - head.size() - tail.size()));
  EXPECT_LE(ms, 100) << e;
  EXPECT_GE(ms, 50) << e;
  EXPECT_GE(Clock::now() - t0, 100ms) << "gave up before its deadline";
  ShmListener l(unique_name("idle"));
  EXPECT_EQ(l.accept(in(50ms)), nullptr);
  EXPECT_EQ(system_error([&] { ShmListener again(l.name()); }),
            "shm listener " + l.name() + ": the name is taken (another listener in this network namespace)");
  EXPECT_EQ(system_error([&] { shm_connect("", in(1s)); }, ErrorCode::InvalidArgument),
            "shm: listener name '' must be 1..90 bytes (it is 0)");
  EXPECT_EQ(system_error([&] { shm_connect(l.name(), in(1s), 3u << 20); }, ErrorCode::InvalidArgument),
            "shm connect to " + l.name() + ": ring size 3145728 is not a power of two in [2097152, 1073741824]");
  EXPECT_EQ(system_error([&] { shm_connect(l.name(), in(1s), kShmMinRing / 2); }, ErrorCode::InvalidArgument),
            "shm connect to " + l.name() + ": ring size 1048576 is not a power of two in [2097152, 1073741824]");
}

}  // namespace
