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
