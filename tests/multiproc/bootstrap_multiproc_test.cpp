// Bootstrap across processes on loopback: the test process creates the
// unique ID (so the root runs here) and starts one helper process per rank.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "bootstrap/socket.hpp"
#include "kinet/bootstrap.hpp"
#include "proc_util.hpp"

namespace {
using kinet::test::Proc;
using namespace std::chrono_literals;

// Loopback for the root here and for every helper.
struct Loopback : ::testing::Test {
  void SetUp() override { setenv("KINET_SOCKET_IFNAME", "lo", 1); }
  void TearDown() override { unsetenv("KINET_SOCKET_IFNAME"); }
};

Proc start_rank(const std::string& id, int rank, int nranks, long timeout_ms, const std::string& scenario = "full",
                int victim = -1) {
  return kinet::test::spawn({KINET_BOOTSTRAP_HELPER, "--id", id, "--rank", std::to_string(rank), "--nranks",
                             std::to_string(nranks), "--timeout", std::to_string(timeout_ms), "--scenario", scenario,
                             "--victim", std::to_string(victim)},
                            {"KINET_SOCKET_IFNAME=lo"});
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

class BootstrapRanks : public Loopback, public ::testing::WithParamInterface<int> {};

// Allgather of blobs of different sizes (rank 0's is empty), barriers, and a
// ring of p2p blobs up to 4 MiB, verified byte for byte in every rank.
TEST_P(BootstrapRanks, AllgatherBarrierRing) {
  const int n = GetParam();
  auto id = kinet::UniqueId::create();
  std::vector<Proc> ps;
  for (int r = 0; r < n; ++r) ps.push_back(start_rank(id.to_string(), r, n, 20000));
  kinet::test::wait_all(ps, 40s);
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_GT(ps[r].pid, 0);
    EXPECT_FALSE(ps[r].timed_out);
    EXPECT_EQ(first_line(ps[r].out), "OK");
    EXPECT_EQ(ps[r].exit_code, 0);
  }
}
INSTANTIATE_TEST_SUITE_P(N, BootstrapRanks, ::testing::Values(2, 4, 8));

// A process with the right root but another secret is refused (and the root
// logs it, naming its address); the real ranks complete.
TEST_F(Loopback, WrongSecretIsRefusedOthersComplete) {
  auto id = kinet::UniqueId::create();
  kinet::UniqueId bad = id;
  bad.secret[7] ^= 0x01;
  ::testing::internal::CaptureStderr();
  // The impostor claims rank 1 and starts first.
  std::vector<Proc> imp{start_rank(bad.to_string(), 1, 3, 10000, "init")};
  kinet::test::wait_all(imp, 15s);
  std::vector<Proc> ps;
  for (int r = 0; r < 3; ++r) ps.push_back(start_rank(id.to_string(), r, 3, 20000));
  kinet::test::wait_all(ps, 30s);
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(imp[0].exit_code, 3);
  EXPECT_NE(imp[0].out.find("ERROR invalid argument"), std::string::npos) << imp[0].out;
  EXPECT_NE(imp[0].out.find("refused the registration: wrong secret"), std::string::npos) << imp[0].out;
  EXPECT_NE(log.find("refused 127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("wrong secret"), std::string::npos) << log;
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(first_line(ps[r].out), "OK");
    EXPECT_EQ(ps[r].exit_code, 0);
  }
}

// Rank 1 of 3 never starts: the others end in the documented error, naming
// it, within their bound.
TEST_F(Loopback, MissingRankTimesOutNamingIt) {
  auto id = kinet::UniqueId::create();
  const long t = 1500;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Proc> ps{start_rank(id.to_string(), 0, 3, t, "init"), start_rank(id.to_string(), 2, 3, t, "init")};
  kinet::test::wait_all(ps, 20s);
  auto elapsed = std::chrono::steady_clock::now() - t0;
  for (auto& p : ps) {
    EXPECT_FALSE(p.timed_out);
    EXPECT_EQ(p.exit_code, 3);
    EXPECT_NE(p.out.find("ERROR system error"), std::string::npos) << p.out;
    EXPECT_NE(p.out.find("timeout"), std::string::npos) << p.out;
    EXPECT_NE(p.out.find("ranks 1 never registered"), std::string::npos) << p.out;
  }
  // Within the bound (plus process start-up), not merely "eventually".
  EXPECT_LT(elapsed, std::chrono::milliseconds(t) + 3s);
}

// A rank killed with SIGKILL after a barrier, having sent part of its data:
// every survivor's allgather ends in a clear error naming it, without hanging.
TEST_F(Loopback, PeerKilledMidAllgatherIsReported) {
  auto id = kinet::UniqueId::create();
  const int n = 4, victim = 2;
  std::vector<Proc> ps;
  for (int r = 0; r < n; ++r) ps.push_back(start_rank(id.to_string(), r, n, 10000, "die_after_barrier", victim));
  auto t0 = std::chrono::steady_clock::now();
  kinet::test::wait_all(ps, 30s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 9s) << "survivors waited for their timeout instead of seeing the loss";
  EXPECT_EQ(ps[victim].exit_code, 128 + SIGKILL);
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_FALSE(ps[r].timed_out);
    EXPECT_EQ(ps[r].exit_code, 3);
    EXPECT_NE(ps[r].out.find("ERROR system error"), std::string::npos) << ps[r].out;
    EXPECT_NE(ps[r].out.find("rank 2 (127.0.0.1:"), std::string::npos) << ps[r].out;
    EXPECT_NE(ps[r].out.find("lost"), std::string::npos) << ps[r].out;
  }
}

kinet::bs::Fd raw_connect(const kinet::UniqueId& id) {
  kinet::bs::WireAddr w{};
  w.family = id.family;
  w.port = id.port;
  std::memcpy(w.addr, id.addr, sizeof w.addr);
  return kinet::bs::connect_to(kinet::bs::from_wire(w, "test"), kinet::bs::Clock::now() + 5s, "root");
}

// Whether the root closed `fd` (EOF, after any answer it sent) within 10 s.
bool root_closes(const kinet::bs::Fd& fd) {
  const auto end = std::chrono::steady_clock::now() + 10s;
  uint8_t buf[256];
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n <= 0) return true;  // EOF or reset
  }
  return false;
}

// Garbage, a truncated handshake, a silent connection, a well-formed
// handshake of the wrong kind and one claiming an absurd nranks reach the
// root before and during the job: each is refused, the job completes.
// The ranks start once the root has closed each refused connection (so it
// has logged why): the root stops reading stragglers once every rank is in.
TEST_F(Loopback, HostileConnectionsToRootDoNotDisturbTheJob) {
  auto id = kinet::UniqueId::create();
  ::testing::internal::CaptureStderr();
  std::vector<kinet::bs::Fd> refused, held;
  auto send_bytes = [&](const void* p, size_t n) {
    auto fd = raw_connect(id);
    ASSERT_EQ(::send(fd.get(), p, n, MSG_NOSIGNAL), static_cast<ssize_t>(n));
    refused.push_back(std::move(fd));
  };
  std::vector<uint8_t> garbage(4096, 0xab);
  send_bytes(garbage.data(), garbage.size());                       // garbage
  kinet::bs::Hello h{};
  h.magic = kinet::bs::Hello::kMagic;
  h.version = kinet::bs::Hello::kVersion;
  send_bytes(&h, 10);                                               // truncated, then no more
  ::shutdown(refused.back().get(), SHUT_WR);
  held.push_back(raw_connect(id));                                  // silent
  h.kind = static_cast<uint16_t>(kinet::bs::HelloKind::ToPeer);     // wrong kind, right secret
  std::memcpy(h.secret, id.secret, sizeof h.secret);
  send_bytes(&h, sizeof h);
  h.kind = static_cast<uint16_t>(kinet::bs::HelloKind::ToRoot);     // nranks 0 with the right secret
  h.nranks = 0;
  send_bytes(&h, sizeof h);
  for (size_t i = 0; i < refused.size(); ++i) EXPECT_TRUE(root_closes(refused[i])) << "connection " << i;

  std::vector<Proc> ps;
  for (int r = 0; r < 2; ++r) ps.push_back(start_rank(id.to_string(), r, 2, 20000));
  // During the job (the root may already be done and closed: then the
  // connection is refused, which is fine too).
  try {
    kinet::bs::WireAddr w{};
    w.family = id.family;
    w.port = id.port;
    std::memcpy(w.addr, id.addr, sizeof w.addr);
    auto fd = kinet::bs::connect_to(kinet::bs::from_wire(w, "test"), kinet::bs::Clock::now(), "root");
    ::send(fd.get(), garbage.data(), 100, MSG_NOSIGNAL);
  } catch (const kinet::Error&) {
  }
  kinet::test::wait_all(ps, 30s);
  std::string log = ::testing::internal::GetCapturedStderr();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(first_line(ps[r].out), "OK");
    EXPECT_EQ(ps[r].exit_code, 0);
  }
  EXPECT_NE(log.find("not a kinet bootstrap handshake (magic 0xabababab"), std::string::npos) << log;
  EXPECT_NE(log.find("connection closed after 10 of 72 handshake bytes"), std::string::npos) << log;
  EXPECT_NE(log.find("is not a registration"), std::string::npos) << log;
  EXPECT_NE(log.find("(rank 0 of 0): rank out of range"), std::string::npos) << log;
}

}  // namespace

#if defined(__SANITIZE_ADDRESS__)
// LeakSanitizer in a forked child of this multi-threaded process can hang
// stopping threads the child doesn't have, and would report the parent's
// thread heap as leaked; the child's leak check is switched off (LSan's
// documented hook).
static bool g_forked_child = false;
extern "C" int __lsan_is_turned_off() { return g_forked_child; }
#define KINET_MARK_FORKED_CHILD() (g_forked_child = true)
#else
#define KINET_MARK_FORKED_CHILD() ((void)0)
#endif

namespace {
// A child forked without exec that exits normally must leave the parent's
// root alone (it shares the root's descriptors, not its thread).
TEST_F(Loopback, ForkedChildExitingDoesNotStopTheRoot) {
  auto id = kinet::UniqueId::create();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    KINET_MARK_FORKED_CHILD();
    std::exit(0);  // runs static destructors, as a normal child would
  }
  int st = 0;
  for (int i = 0; i < 500 && waitpid(child, &st, WNOHANG) == 0; ++i) usleep(10000);
  if (waitpid(child, &st, WNOHANG) == 0) {
    kill(child, SIGKILL);
    waitpid(child, &st, 0);
    FAIL() << "the forked child hung at exit";
  }
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
  std::vector<Proc> ps;
  for (int r = 0; r < 2; ++r) ps.push_back(start_rank(id.to_string(), r, 2, 10000));
  kinet::test::wait_all(ps, 20s);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(first_line(ps[r].out), "OK");
  }
}
}  // namespace
