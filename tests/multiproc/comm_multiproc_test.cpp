// kinet::Comm across processes on a CPU-only machine: every device-API
// operation through the proxy path over kinet's tcp and shm links, run by
// host threads (the CPU stand-in for a kernel), data verified byte for byte.
// The scenarios are shared with the gdaki path (comm_scenarios.hpp).
#include <gtest/gtest.h>
#include <stdlib.h>

#include "comm_scenarios.hpp"

namespace {
using namespace kinet;
using namespace kinet::test;

struct CommRanks : ::testing::TestWithParam<std::tuple<std::string, int>> {
  void SetUp() override { setenv("KINET_SOCKET_IFNAME", "lo", 1); }
  void TearDown() override { unsetenv("KINET_SOCKET_IFNAME"); }
};

TEST_P(CommRanks, EveryOperationThroughTheProxy) {
  const auto [transport, n] = GetParam();
  auto res = run_ranks(
      n,
      [t = transport](int r, int nr, Bootstrap& bs) {
        return all_ops(r, nr, bs, config(t), dev::CommPath::Proxy, "host memory");
      },
      90s);
  expect_ok(res, n);
}

TEST_P(CommRanks, KilledRankGivesPeerLost) {
  const auto [transport, n] = GetParam();
  setenv("KINET_TRANSPORT_TIMEOUT_MS", "3000", 1);
  auto res = run_ranks(
      n, [t = transport](int r, int nr, Bootstrap& bs) { return killed_rank(r, nr, bs, config(t, 30000)); }, 90s);
  unsetenv("KINET_TRANSPORT_TIMEOUT_MS");
  expect_killed(res, n);
}

INSTANTIATE_TEST_SUITE_P(Links, CommRanks,
                         ::testing::Combine(::testing::Values(std::string("tcp"), std::string("shm")),
                                            ::testing::Values(2, 4)),
                         [](const auto& i) { return std::get<0>(i.param) + "_" + std::to_string(std::get<1>(i.param)); });

// A wait nobody satisfies ends at the Comm's bound with TimeoutCompletion,
// and device_error() names the wait, the rank it expected and the values.
TEST(CommSingle, WaitSignalTimesOutAndSaysWhat) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto res = run_ranks(
      2,
      [](int r, int, Bootstrap& bs) -> std::string {
        Comm comm(bs, config("tcp", 300));
        CommWindow& win = comm.alloc_symmetric(4096);
        const dev::CommHandle c = comm.device_handle();
        uint64_t seen = 7;
        const auto t0 = std::chrono::steady_clock::now();
        const Status s = dev::wait_signal(c, win.handle(), 64, Cmp::Ge, 5, 1 - r, &seen);
        REQ(s == Status::TimeoutCompletion, st(s));
        REQ(std::chrono::steady_clock::now() - t0 >= 300ms, "returned before the bound");
        REQ(seen == 0, "seen " + std::to_string(seen));
        const std::string e = comm.device_error();
        REQ(e.find("wait_signal (rank " + std::to_string(1 - r) + ") window 1 offset 64") != std::string::npos, e);
        REQ(e.find("waited for 5, saw 0") != std::string::npos, e);
        REQ(dev::wait_signal(c, win.handle(), 60, Cmp::Ge, 5) == Status::InvalidArgument, "misaligned wait");
        comm.barrier();
        return "";
      },
      60s);
  unsetenv("KINET_SOCKET_IFNAME");
  expect_ok(res, 2);
}

// The caller's own memory as a window: a put and a signal into it, the
// bytes checked; a null pointer refused.
TEST(CommSingle, RegisterWindow) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto res = run_ranks(
      2,
      [](int r, int, Bootstrap& bs) -> std::string {
        Comm comm(bs, config("shm"));
        std::vector<uint64_t> mem(1024, 0);  // 8 KiB, 8-byte aligned
        auto* bytes = reinterpret_cast<uint8_t*>(mem.data());
        for (int i = 0; i < 4096; ++i) bytes[i] = pat(r, i);
        try {
          comm.register_window(nullptr, 8192);
          return "null window accepted";
        } catch (const Error& e) {
          REQ(e.code() == ErrorCode::InvalidArgument && std::string(e.what()).find("null") != std::string::npos,
              e.what());
        }
        CommWindow& w = comm.register_window(mem.data(), 8192);
        REQ(w.local() == mem.data() && w.bytes() == 8192 && !w.gpu(), "window fields");
        const dev::CommHandle c = comm.device_handle();
        Status s = dev::put_signal(c, 1 - r, w.handle(), 4096, w.handle(), 0, 4088, w.handle(), 8184, SigOp::Add, 1);
        REQ(s == Status::Ok, "put_signal: " + st(s));
        REQ((s = dev::wait_signal(c, w.handle(), 8184, Cmp::Eq, 1, 1 - r)) == Status::Ok, "wait: " + st(s));
        for (int i = 0; i < 4088; ++i) REQ(bytes[4096 + i] == pat(1 - r, i), "byte " + std::to_string(i));
        REQ((s = dev::barrier(c)) == Status::Ok, "barrier: " + st(s));
        comm.barrier();
        return "";
      },
      60s);
  unsetenv("KINET_SOCKET_IFNAME");
  expect_ok(res, 2);
}

// Collective mistakes are errors on every rank, naming what differs.
TEST(CommSingle, AsymmetricWindowAndBadConfig) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto res = run_ranks(
      2,
      [](int r, int, Bootstrap& bs) -> std::string {
        CommConfig bad = config("tcp");
        bad.slots = 48;
        try {
          Comm x(bs, bad);
          return "slots 48 accepted";
        } catch (const Error& e) {
          REQ(e.code() == ErrorCode::InvalidArgument && std::string(e.what()).find("slots 48") != std::string::npos,
              e.what());
        }
        bad = config("tcp");
        bad.path = "bogus";
        try {
          Comm x(bs, bad);
          return "path bogus accepted";
        } catch (const Error& e) {
          REQ(e.code() == ErrorCode::InvalidArgument && std::string(e.what()).find("\"bogus\"") != std::string::npos,
              e.what());
        }
        bad.path = "p2p";  // host memory here: impossible, and said so on every rank
        try {
          Comm x(bs, bad);
          return "path p2p accepted without a GPU";
        } catch (const Error& e) {
          REQ(e.code() == ErrorCode::NotSupported &&
                  std::string(e.what()).find("path p2p to rank " + std::to_string(1 - r) + " impossible") !=
                      std::string::npos,
              e.what());
        }
        Comm comm(bs, config("tcp"));
        try {
          comm.alloc_symmetric(r == 0 ? 4096 : 8192);
          return "asymmetric window accepted";
        } catch (const Error& e) {
          REQ(e.code() == ErrorCode::InvalidArgument &&
                  std::string(e.what()).find("not symmetric: rank 0 has 4096 bytes, rank 1 has 8192") != std::string::npos,
              e.what());
        }
        try {
          comm.alloc_symmetric(0);
          return "0-byte window accepted";
        } catch (const Error& e) {
          REQ(e.code() == ErrorCode::InvalidArgument, e.what());
        }
        try {
          comm.path(2);
          return "path(2) accepted";
        } catch (const Error& e) {
          REQ(e.code() == ErrorCode::InvalidArgument, e.what());
        }
        comm.barrier();
        return "";
      },
      60s);
  unsetenv("KINET_SOCKET_IFNAME");
  expect_ok(res, 2);
}

// One rank's bad argument fails the call on every rank, and the ranks stay
// in step. The bad rank used to throw before the allgather the others joined:
// from then on the bootstrap's collective sequence numbers differed by one,
// rank 0's next barrier took rank 1's window blob and "succeeded", rank 1's
// next window took rank 0's barrier message, and rank 1's barrier timed out.
TEST(CommSingle, OneRanksBadWindowArgumentFailsEveryRankInStep) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto res = run_ranks(
      2,
      [](int r, int, Bootstrap& bs) -> std::string {
        Comm comm(bs, config("tcp", 5000));
        // Every rank's error names the bad rank and its reason; the bad
        // rank's is its own. `bad`: the rank with the bad argument.
        auto check = [&](const Error& e, int bad, const std::string& reason) -> std::string {
          const std::string w = e.what();
          if (e.code() != ErrorCode::InvalidArgument) return std::string(error_code_name(e.code())) + ": " + w;
          const std::string own = "comm rank " + std::to_string(bad) + ": window 1: " + reason;
          if (r == bad && w.rfind(own, 0) != 0) return "bad rank's error: " + w;
          if (r != bad && w.find("rank " + std::to_string(bad) + " failed: " + own) == std::string::npos)
            return "other rank's error: " + w;
          return "";
        };
        try {
          comm.alloc_symmetric(r == 1 ? 0 : 4096);
          return "alloc_symmetric accepted with 0 bytes on rank 1";
        } catch (const Error& e) {
          if (std::string m = check(e, 1, "0 bytes"); !m.empty()) return "alloc_symmetric: " + m;
        }
        std::vector<uint64_t> mem(512, 0);
        try {
          comm.register_window(r == 0 ? nullptr : mem.data(), 4096);
          return "register_window accepted with a null pointer on rank 0";
        } catch (const Error& e) {
          if (std::string m = check(e, 0, "null pointer"); !m.empty()) return "register_window: " + m;
        }
        try {
          comm.alloc_symmetric(4096, r == 1 ? CommConfig::kMaxCounters + 1 : 4);
          return "alloc_symmetric accepted too many counters on rank 1";
        } catch (const Error& e) {
          if (std::string m = check(e, 1, "counters " + std::to_string(CommConfig::kMaxCounters + 1)); !m.empty())
            return "counters: " + m;
        }
        // Still in step: a barrier, then a window (the first one made: id 1
        // on both) that carries a signal each way.
        comm.barrier();
        CommWindow& w = comm.alloc_symmetric(4096);
        REQ(w.id() == 1 && w.bytes() == 4096, "window " + std::to_string(w.id()));
        const dev::CommHandle c = comm.device_handle();
        Status s = dev::signal(c, 1 - r, w.handle(), 64, SigOp::Set, 70 + r);
        REQ(s == Status::Ok, "signal: " + st(s));
        REQ((s = dev::wait_signal(c, w.handle(), 64, Cmp::Eq, 70 + (1 - r), 1 - r)) == Status::Ok, "wait: " + st(s));
        REQ((s = dev::barrier(c)) == Status::Ok, "device barrier: " + st(s));
        comm.barrier();
        return "";
      },
      60s, 5000ms);
  unsetenv("KINET_SOCKET_IFNAME");
  expect_ok(res, 2);
}

// The constructor's own checks likewise: one rank's bad CommConfig fails the
// Comm on every rank, and a Comm made next works.
TEST(CommSingle, OneRanksBadConfigFailsEveryRankInStep) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto res = run_ranks(
      2,
      [](int r, int, Bootstrap& bs) -> std::string {
        CommConfig cfg = config("tcp", 5000);
        if (r == 1) cfg.slots = 48;
        try {
          Comm x(bs, cfg);
          return "a Comm made with slots 48 on rank 1";
        } catch (const Error& e) {
          const std::string w = e.what();
          REQ(e.code() == ErrorCode::InvalidArgument, std::string(error_code_name(e.code())) + ": " + w);
          REQ(w.find(r == 1 ? "comm rank 1: slots 48" : "rank 1 failed: comm rank 1: slots 48") != std::string::npos,
              w);
        }
        Comm comm(bs, config("tcp", 5000));
        CommWindow& w = comm.alloc_symmetric(4096);
        REQ(w.id() == 1, "window " + std::to_string(w.id()));
        comm.barrier();
        return "";
      },
      60s, 5000ms);
  unsetenv("KINET_SOCKET_IFNAME");
  expect_ok(res, 2);
}

// A window too large to exist (SIZE_MAX - 100: a negative length converted)
// is ResourceExhausted naming the size, and the Comm stays usable. The host
// allocation rounded the size up to pages, which wrapped to 0: a SIGSEGV.
TEST(CommSingle, HugeWindowIsResourceExhausted) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto res = run_ranks(
      1,
      [](int r, int, Bootstrap& bs) -> std::string {
        Comm comm(bs, config("tcp"));
        const size_t huge = SIZE_MAX - 100;
        try {
          comm.alloc_symmetric(huge);
          return "a window of SIZE_MAX - 100 bytes accepted";
        } catch (const Error& e) {
          REQ(e.code() == ErrorCode::ResourceExhausted &&
                  std::string(e.what()).find("allocation of " + std::to_string(huge) + " bytes") != std::string::npos,
              std::string(error_code_name(e.code())) + ": " + e.what());
        }
        REQ(comm.alloc_symmetric(4096).bytes() == 4096, "a window after the refused one");
        comm.barrier();
        return "";
      },
      60s);
  unsetenv("KINET_SOCKET_IFNAME");
  expect_ok(res, 1);
}

}  // namespace
