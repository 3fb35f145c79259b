// kinet::Comm's gdaki path across processes on a CPU-only machine: one RC QP
// per peer on the software NIC ("emu") over its tcp and shm fabrics, the
// device API run by host threads (the CPU stand-in for a kernel): every
// operation with data verified byte for byte (comm_scenarios.hpp), signals
// after data, a SIGKILLed rank, a QP in error ending waits with its status,
// the path choice and its refusals.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <vector>

#include "comm_scenarios.hpp"

namespace {
using namespace kinet;
using namespace kinet::test;
using Fabric = DeviceOptions::Fabric;

CommConfig gdaki(const std::string& fabric, uint64_t timeout_ms = 20000) {
  CommConfig c = config(fabric, timeout_ms);  // the transport (liveness, none of the data) on the same link kind
  c.path = "gdaki";
  c.device = "emu";
  c.emu_fabric = fabric == "tcp" ? Fabric::Tcp : Fabric::Shm;
  return c;
}

struct CommGdaki : ::testing::TestWithParam<std::tuple<std::string, int>> {
  void SetUp() override { setenv("KINET_SOCKET_IFNAME", "lo", 1); }
  void TearDown() override { unsetenv("KINET_SOCKET_IFNAME"); }
};

TEST_P(CommGdaki, EveryOperationOverQps) {
  const auto [fabric, n] = GetParam();
  auto res = run_ranks(
      n,
      [f = fabric](int r, int nr, Bootstrap& bs) {
        return all_ops(r, nr, bs, gdaki(f), dev::CommPath::Gdaki, "path is gdaki; RC QPs on emu");
      },
      90s);
  expect_ok(res, n);
}

TEST_P(CommGdaki, KilledRankGivesPeerLost) {
  const auto [fabric, n] = GetParam();
  setenv("KINET_TRANSPORT_TIMEOUT_MS", "3000", 1);
  auto res = run_ranks(
      n, [f = fabric](int r, int nr, Bootstrap& bs) { return killed_rank(r, nr, bs, gdaki(f, 30000)); }, 90s);
  unsetenv("KINET_TRANSPORT_TIMEOUT_MS");
  expect_killed(res, n);
}

INSTANTIATE_TEST_SUITE_P(Fabrics, CommGdaki,
                         ::testing::Combine(::testing::Values(std::string("tcp"), std::string("shm")),
                                            ::testing::Values(2, 4)),
                         [](const auto& i) { return std::get<0>(i.param) + "_" + std::to_string(std::get<1>(i.param)); });

// Ping-pong of put_signal rounds, Add and Set alternating, each carrying a
// whole window half: the waiter checks every byte once it sees the signal,
// so a signal that overtook its data fails here.
TEST(CommGdakiSingle, SignalAfterDataAddAndSet) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto res = run_ranks(
      2,
      [](int r, int, Bootstrap& bs) -> std::string {
        Comm comm(bs, gdaki("shm"));
        constexpr uint64_t kHalf = 96 << 10, kAdd = 2 * kHalf, kSet = kAdd + 8;
        CommWindow& win = comm.alloc_symmetric(2 * kHalf + 64);
        const dev::CommHandle c = comm.device_handle();
        const dev::WindowHandle w = win.handle();
        uint8_t* mine = static_cast<uint8_t*>(win.local());
        const int p = 1 - r;
        uint64_t adds = 0;  // Add rounds received so far
        for (int round = 1; round <= 16; ++round) {
          const int sender = (round & 1) ? 0 : 1;
          const bool set = round % 4 >= 2;  // two rounds Add, two rounds Set, ...
          Status s;
          if (sender == r) {
            for (uint64_t i = 0; i < kHalf; ++i) mine[i] = pat(r + round, i);
            s = dev::put_signal(c, p, w, kHalf, w, 0, kHalf, w, set ? kSet : kAdd, set ? SigOp::Set : SigOp::Add,
                                set ? uint64_t(round) : 1);
            REQ(s == Status::Ok, "put_signal round " + std::to_string(round) + ": " + st(s));
            REQ((s = dev::quiet(c)) == Status::Ok, "quiet: " + st(s) + " " + comm.device_error());
            continue;
          }
          uint64_t seen = 0;
          s = set ? dev::wait_signal(c, w, kSet, Cmp::Eq, uint64_t(round), p, &seen)
                  : dev::wait_signal(c, w, kAdd, Cmp::Eq, ++adds, p, &seen);
          REQ(s == Status::Ok, "wait round " + std::to_string(round) + ": " + st(s) + " " + comm.device_error());
          for (uint64_t i = 0; i < kHalf; ++i)
            REQ(mine[kHalf + i] == pat(p + round, i),
                "round " + std::to_string(round) + " byte " + std::to_string(i) + " behind the signal");
        }
        Status s = dev::barrier(c);
        REQ(s == Status::Ok, "barrier: " + st(s));
        comm.barrier();
        return "";
      },
      60s);
  unsetenv("KINET_SOCKET_IFNAME");
  expect_ok(res, 2);
}

// An operation the responder refuses (a corrupted rkey): the error CQE's
// status at quiet, named by device_error; afterwards the QP is in error and a
// wait on that peer ends at once with that status (not at the timeout).
TEST(CommGdakiSingle, QpErrorEndsWaitsWithItsStatus) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto res = run_ranks(
      2,
      [](int r, int, Bootstrap& bs) -> std::string {
        Comm comm(bs, gdaki("tcp", 20000));
        CommWindow& win = comm.alloc_symmetric(4096);
        const dev::CommHandle c = comm.device_handle();
        if (r == 0) {
          // A window handle whose table names another rkey for rank 1.
          std::vector<dev::CommWindowPeer> tab(win.handle().peers, win.handle().peers + 2);
          tab[1].rkey ^= 0x01000000u;  // big-endian: the low byte (generation) of the key
          dev::WindowHandle bad = win.handle();
          bad.peers = tab.data();
          Status s = dev::put(c, 1, bad, 0, win.handle(), 0, 64);
          REQ(s == Status::Ok, "put is handed off: " + st(s));
          s = dev::quiet(c);
          REQ(s == Status::RemoteAccess, "quiet: " + st(s));
          const std::string e = comm.device_error();
          REQ(e.find("quiet (rank 1): ") != std::string::npos && e.find("is not registered") != std::string::npos &&
                  e.find(" to rank 1: ERROR]") != std::string::npos,
              e);
          const auto t0 = std::chrono::steady_clock::now();
          s = dev::wait_signal(c, win.handle(), 0, Cmp::Ge, 1, 1);
          REQ(s == Status::RemoteAccess, "wait on the failed peer: " + st(s));
          REQ(std::chrono::steady_clock::now() - t0 < 5s, "the wait ran towards its timeout");
          REQ(dev::put_value(c, 1, win.handle(), 0, 1) == Status::Ok, "put_value is handed off");
          REQ(dev::quiet(c) == Status::WrFlushed, "later operations are flushed");
          REQ(comm.report().find("gdaki over emu") != std::string::npos &&
                  comm.report().find("(ERROR)") != std::string::npos,
              comm.report());
        }
        comm.barrier();
        return "";
      },
      60s);
  unsetenv("KINET_SOCKET_IFNAME");
  expect_ok(res, 2);
}

// Path choice: auto takes the software NIC only when CommConfig::device names
// it; path gdaki without a NIC is refused on every rank, naming the peer.
TEST(CommGdakiSingle, PathChoiceAndRefusals) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto res = run_ranks(
      2,
      [](int r, int, Bootstrap& bs) -> std::string {
        const int p = 1 - r;
        {
          CommConfig a = gdaki("tcp");
          a.path = "auto";  // device "emu" named: asked for
          Comm comm(bs, a);
          REQ(comm.path(p) == dev::CommPath::Gdaki, comm.report());
          REQ(comm.path_reason(p).find("host memory") != std::string::npos, comm.path_reason(p));
          REQ(comm.report().find("-> rank " + std::to_string(p) + ": gdaki over emu") != std::string::npos,
              comm.report());
          comm.barrier();
        }
        {
          CommConfig a = config("tcp");
          a.path = "auto";  // device auto: no ConnectX here, so no gdaki
          Comm comm(bs, a);
          REQ(comm.path(p) == dev::CommPath::Proxy, comm.report());
          REQ(comm.path_reason(p).find("no gdaki: no RDMA NIC here") != std::string::npos, comm.path_reason(p));
          comm.barrier();
        }
        CommConfig bad = gdaki("tcp");
        bad.device = "nosuchnic0";
        try {
          Comm x(bs, bad);
          return "path gdaki without a device accepted";
        } catch (const Error& e) {
          const std::string w = e.what();
          const std::string want =
              "path gdaki to rank " + std::to_string(p) + " impossible: device \"nosuchnic0\" did not open";
          REQ(e.code() == ErrorCode::NotSupported && w.find(want) != std::string::npos, w);
        }
        try {
          CommConfig x = gdaki("tcp");
          x.path = "Gdaki";
          Comm c2(bs, x);
          return "path Gdaki accepted";
        } catch (const Error& e) {
          REQ(e.code() == ErrorCode::InvalidArgument &&
                  std::string(e.what()).find("\"Gdaki\" is not auto, proxy, p2p or gdaki") != std::string::npos,
              e.what());
        }
        bs.barrier();
        return "";
      },
      60s);
  unsetenv("KINET_SOCKET_IFNAME");
  expect_ok(res, 2);
}

// Path auto where one rank of three has no NIC: ranks 0 and 1 take gdaki
// between them, rank 2 the proxy to both. Rank 2 has no gdaki peer, yet it
// must join the QP-info exchange and its barrier: it used to skip them, and
// from then on its collectives were two behind (rank 0 and 1's exchange took
// rank 2's window blob and barrier message).
TEST(CommGdakiSingle, RankWithoutNicStaysInStep) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto res = run_ranks(
      3,
      [](int r, int n, Bootstrap& bs) -> std::string {
        CommConfig a = gdaki("tcp", 5000);
        a.path = "auto";
        if (r == 2) a.device = "nosuchnic0";
        Comm comm(bs, a);
        for (int p = 0; p < n; ++p) {
          if (p == r) continue;
          const dev::CommPath want = r < 2 && p < 2 ? dev::CommPath::Gdaki : dev::CommPath::Proxy;
          REQ(comm.path(p) == want, comm.report());
        }
        CommWindow& w = comm.alloc_symmetric(4096);
        REQ(w.id() == 1, "window " + std::to_string(w.id()));
        const dev::CommHandle c = comm.device_handle();
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        Status s = dev::signal(c, next, w.handle(), 64, SigOp::Set, 70 + r);
        REQ(s == Status::Ok, "signal: " + st(s));
        REQ((s = dev::wait_signal(c, w.handle(), 64, Cmp::Eq, 70 + prev, prev)) == Status::Ok, "wait: " + st(s));
        REQ((s = dev::barrier(c)) == Status::Ok, "device barrier: " + st(s) + " " + comm.device_error());
        comm.barrier();
        return "";
      },
      60s, 5000ms);
  unsetenv("KINET_SOCKET_IFNAME");
  expect_ok(res, 3);
}

}  // namespace
