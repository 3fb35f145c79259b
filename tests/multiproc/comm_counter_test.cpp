// kinet::Comm's local-completion counters (kinet/device/comm.cuh
// "Counters") across processes on a CPU-only machine, on every path CPU
// threads reach: proxy (tcp and shm links), gdaki (the software NIC on its tcp
// and shm fabrics) and self (each rank's operations to itself). Host threads
// post (the CPU stand-in for a kernel). What is checked: a counter reaches
// exactly the number of counted operations and no more; a source rewritten
// as soon as wait_counter returned never leaks into the data of the put it
// fed; counters after quiet(); a wait that times out and what it records;
// refused counter indices at their exact edge (nothing posted); a counted
// operation that fails ends the wait at once with its status.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <thread>
#include <vector>

#include "comm_scenarios.hpp"

namespace {
using namespace kinet;
using namespace kinet::test;
using dev::CounterInc;

// Window layout (bytes).
constexpr uint64_t kChunk = 512, kRounds = 24;     // reuse rounds per (sender, target)
constexpr uint64_t kCSrc = 0;                      // [0, kChunk): the rewritten source
constexpr uint64_t kManySrc = 1 << 10;             // 8-byte sources of the counted storm
constexpr uint64_t kCSig = 4 << 10;                // signal words, one per sender
constexpr uint64_t kRecv = 8 << 10;                // [sender][round] chunks
constexpr uint64_t kManyDst = kRecv + 8 * kRounds * kChunk;  // storm words from the left neighbour
constexpr int kStorm = 100;                        // counted puts per thread, 2 threads: 200 on a 64-slot ring
constexpr uint64_t kCWin = kManyDst + 2 * kStorm * 8 * 2;

CommConfig path_config(const std::string& kind, uint64_t timeout_ms = 20000) {
  const bool tcp = kind.find("tcp") != std::string::npos;
  CommConfig c = config(tcp ? "tcp" : "shm", timeout_ms);
  if (kind.rfind("gdaki", 0) == 0) {
    c.path = "gdaki";
    c.device = "emu";
    c.emu_fabric = tcp ? DeviceOptions::Fabric::Tcp : DeviceOptions::Fabric::Shm;
  } else {
    c.path = "proxy";
  }
  return c;
}

dev::CommPath want_path(const std::string& kind) {
  return kind.rfind("gdaki", 0) == 0 ? dev::CommPath::Gdaki : dev::CommPath::Proxy;
}

// Counters reach exactly the number of counted operations; a source reused
// right after its count never shows in the data it fed.
std::string counts(int r, int n, Bootstrap& bs, const std::string& kind) {
  CommConfig cfg = path_config(kind);
  cfg.counters = 3;
  Comm comm(bs, cfg);
  CommWindow& win = comm.alloc_symmetric(kCWin);  // 3 counters, from the config
  CommWindow& none = comm.alloc_symmetric(4096, 0);
  REQ(win.counters() == 3 && none.counters() == 0, "counters " + std::to_string(win.counters()));
  for (int p = 0; p < n; ++p) REQ(comm.path(p) == (p == r ? dev::CommPath::Self : want_path(kind)), comm.report());
  const dev::CommHandle c = comm.device_handle();
  const dev::WindowHandle w = win.handle();
  uint8_t* mine = static_cast<uint8_t*>(win.local());
  Status s;

  // Rounds to every rank, itself included: the source is rewritten as soon
  // as the previous put was counted. Counter 0, reset before each target.
  for (int p = 0; p < n; ++p) {
    REQ((s = dev::reset_counter(c, w, 0)) == Status::Ok, "reset: " + st(s));
    for (uint64_t k = 0; k < kRounds; ++k) {
      for (uint64_t i = 0; i < kChunk; ++i) mine[kCSrc + i] = pat(r * 31 + int(k), i);
      s = dev::put(c, p, w, kRecv + (uint64_t(r) * kRounds + k) * kChunk, w, kCSrc, kChunk, CounterInc{0});
      REQ(s == Status::Ok, "counted put: " + st(s));
      uint64_t seen = 0;
      s = dev::wait_counter(c, w, 0, k + 1, &seen);
      REQ(s == Status::Ok, "wait_counter round " + std::to_string(k) + ": " + st(s) + " " + comm.device_error());
      REQ(seen == k + 1, "round " + std::to_string(k) + ": counter " + std::to_string(seen));
    }
    // The signal after those puts, itself counted (counter 1), data-less.
    s = dev::put_signal(c, p, w, 0, w, 0, 0, w, kCSig + uint64_t(r) * 8, SigOp::Add, 1, CounterInc{1});
    REQ(s == Status::Ok, "counted signal: " + st(s));
  }
  // A 0-byte counted put counts at once; an uncounted one leaves no trace.
  const int right = (r + 1) % n;
  REQ(dev::put(c, right, w, 0, w, 0, 0, CounterInc{1}) == Status::Ok, "0-byte counted put");
  REQ(dev::put(c, right, w, 0, w, 0, 0) == Status::Ok, "0-byte put");

  // Two threads, 200 counted puts on counter 2 to the right neighbour
  // through a 64-slot ring, interleaved with uncounted operations (their
  // slots keep stale tags of earlier laps).
  for (int i = 0; i < 2 * kStorm; ++i) {
    const uint64_t v = 0xC0DE0000u + uint64_t(r) * 1000 + i;
    std::memcpy(mine + kManySrc + uint64_t(i) * 8, &v, 8);
  }
  Status ts[2] = {Status::Ok, Status::Ok};
  auto storm = [&](int t) {
    for (int i = t * kStorm; i < (t + 1) * kStorm && ts[t] == Status::Ok; ++i) {
      ts[t] = dev::put(c, right, w, kManyDst + uint64_t(i) * 8, w, kManySrc + uint64_t(i) * 8, 8, CounterInc{2});
      if (ts[t] == Status::Ok && i % 3 == 0)
        ts[t] = dev::put(c, right, w, kManyDst + (2 * kStorm + uint64_t(i)) * 8, w, kManySrc + uint64_t(i) * 8, 8);
    }
  };
  std::thread t1(storm, 1);
  storm(0);
  t1.join();
  REQ(ts[0] == Status::Ok && ts[1] == Status::Ok, "storm: " + st(ts[0]) + " " + st(ts[1]) + " " + comm.device_error());
  uint64_t v = 0;
  REQ((s = dev::wait_counter(c, w, 2, 2 * kStorm, &v)) == Status::Ok, "wait 200: " + st(s) + " " + comm.device_error());
  REQ(v == 2 * kStorm, "storm counter " + std::to_string(v));
  // After quiet every counted operation is counted (quiet credits them: the
  // host's plain read, which progresses nothing, sees them): exact, no more.
  for (int i = 0; i < 10; ++i)
    REQ(dev::put(c, right, w, kManyDst + uint64_t(i) * 8, w, kManySrc + uint64_t(i) * 8, 8, CounterInc{1}) == Status::Ok,
        "counted put before quiet");
  REQ((s = dev::quiet(c)) == Status::Ok, "quiet: " + st(s) + " " + comm.device_error());
  REQ(win.counter(1) == uint64_t(n) + 11, "counted before quiet: " + std::to_string(win.counter(1)));
  REQ(dev::read_counter(c, w, 2, &v) == Status::Ok && v == 2 * kStorm, "storm after quiet " + std::to_string(v));
  REQ(dev::read_counter(c, w, 1, &v) == Status::Ok && v == uint64_t(n) + 11, "signals counted " + std::to_string(v));
  REQ(dev::read_counter(c, w, 0, &v) == Status::Ok && v == kRounds, "rounds of the last target " + std::to_string(v));
  REQ(win.counter(2) == 2 * kStorm, "host view");

  // What each sender put here, behind its signal: every round's own bytes.
  for (int q = 0; q < n; ++q) {
    REQ((s = dev::wait_signal(c, w, kCSig + uint64_t(q) * 8, Cmp::Eq, 1, q)) == Status::Ok,
        "signal of rank " + std::to_string(q) + ": " + st(s) + " " + comm.device_error());
    for (uint64_t k = 0; k < kRounds; ++k)
      for (uint64_t i = 0; i < kChunk; ++i)
        REQ(mine[kRecv + (uint64_t(q) * kRounds + k) * kChunk + i] == pat(q * 31 + int(k), i),
            "rank " + std::to_string(q) + " round " + std::to_string(k) + " byte " + std::to_string(i) +
                ": a later source leaked in (counted before the source was read?)");
  }
  REQ((s = dev::barrier(c)) == Status::Ok, "barrier: " + st(s));
  const int left = (r + n - 1) % n;
  for (int i = 0; i < 2 * kStorm; ++i) {
    uint64_t got = 0;
    std::memcpy(&got, mine + kManyDst + uint64_t(i) * 8, 8);
    REQ(got == 0xC0DE0000u + uint64_t(left) * 1000 + i, "storm word " + std::to_string(i));
  }
  // Resets from the host and the device.
  win.reset_counter(2, 7);
  REQ(dev::read_counter(c, w, 2, &v) == Status::Ok && v == 7, "after host reset " + std::to_string(v));
  REQ(dev::reset_counter(c, w, 2) == Status::Ok && win.counter(2) == 0, "after device reset");
  REQ(comm.device_error().empty(), comm.device_error());
  comm.barrier();
  return "";
}

struct CommCounters : ::testing::TestWithParam<std::tuple<std::string, int>> {
  void SetUp() override { setenv("KINET_SOCKET_IFNAME", "lo", 1); }
  void TearDown() override { unsetenv("KINET_SOCKET_IFNAME"); }
};

TEST_P(CommCounters, CountExactlyAndSourceReuse) {
  const auto [kind, n] = GetParam();
  expect_ok(run_ranks(n, [k = kind](int r, int nr, Bootstrap& bs) { return counts(r, nr, bs, k); }, 90s), n);
}

INSTANTIATE_TEST_SUITE_P(Paths, CommCounters,
                         ::testing::Combine(::testing::Values(std::string("proxy_tcp"), std::string("proxy_shm"),
                                                              std::string("gdaki_tcp"), std::string("gdaki_shm")),
                                            ::testing::Values(2, 4)),
                         [](const auto& i) { return std::get<0>(i.param) + "_" + std::to_string(std::get<1>(i.param)); });

// Two ranks: the edges.
struct CommCounterEdges : ::testing::TestWithParam<std::string> {
  void SetUp() override { setenv("KINET_SOCKET_IFNAME", "lo", 1); }
  void TearDown() override { unsetenv("KINET_SOCKET_IFNAME"); }
};

// Refused counters, each at its exact edge: nothing moves, and the first
// refusal is named. Then a wait nobody satisfies.
TEST_P(CommCounterEdges, BadIndexAndTimeout) {
  const std::string kind = GetParam();
  constexpr int n = 2;
  auto res = run_ranks(
      n,
      [k = kind](int r, int nr, Bootstrap& bs) -> std::string {
        const int p = (r + 1) % nr;
        Comm comm(bs, path_config(k, 300));
        CommWindow& win = comm.alloc_symmetric(4096, 3);
        CommWindow& none = comm.alloc_symmetric(4096);  // CommConfig::counters is 0
        REQ(none.counters() == 0, "config default");
        const dev::CommHandle c = comm.device_handle();
        const dev::WindowHandle w = win.handle();
        uint8_t* mine = static_cast<uint8_t*>(win.local());
        for (int i = 0; i < 64; ++i) mine[i] = 0xAB;
        comm.barrier();
        REQ(dev::put(c, p, w, 1024, w, 0, 64, CounterInc{3}) == Status::InvalidArgument, "counter 3 of 3");
        const std::string e = comm.device_error();
        REQ(e.rfind("comm rank " + std::to_string(r) + ": put (rank " + std::to_string(p) +
                        ") window 1 counter 3: invalid argument (counter 3 out of range: the window has 3 counters)",
                    0) == 0,
            e);
        REQ(dev::put_signal(c, p, w, 1024, w, 0, 64, w, 2048, SigOp::Add, 1, CounterInc{3}) == Status::InvalidArgument,
            "put_signal counter 3");
        REQ(dev::put_signal(c, p, w, 0, w, 0, 0, w, 2048, SigOp::Set, 9, CounterInc{~0u}) == Status::InvalidArgument,
            "signal counter 2^32-1");
        REQ(dev::put(c, p, w, 1024, w, 0, 64, CounterInc{~0u}) == Status::InvalidArgument, "counter 2^32-1");
        REQ(dev::put(c, p, w, 1024, none.handle(), 0, 64, CounterInc{0}) == Status::InvalidArgument,
            "a window without counters");
        REQ(dev::put(c, p, w, 1024, w, 0, 64, CounterInc{uint64_t{1} << 32}) == Status::InvalidArgument,
            "counter 2^32");
        // CounterInc{kNoCounter} (the default argument) counts nothing: Ok
        // even from a window without counters.
        REQ(dev::put(c, p, none.handle(), 0, none.handle(), 0, 64, CounterInc{dev::kNoCounter}) == Status::Ok,
            "explicit kNoCounter: " + comm.device_error());
        REQ(dev::put_signal(c, p, none.handle(), 0, none.handle(), 0, 64, none.handle(), 64, SigOp::Add, 1,
                            CounterInc{dev::kNoCounter}) == Status::Ok,
            "put_signal, explicit kNoCounter");
        uint64_t v = 5;
        REQ(dev::read_counter(c, w, 3, &v) == Status::InvalidArgument && v == 5, "read_counter 3");
        REQ(dev::wait_counter(c, w, 3, 0) == Status::InvalidArgument, "wait_counter 3");
        REQ(dev::reset_counter(c, w, 3) == Status::InvalidArgument, "reset_counter 3");
        REQ(dev::read_counter(c, w, 2, &v) == Status::Ok && v == 0, "read_counter 2");
        REQ(dev::wait_counter(c, w, 2, 0) == Status::Ok, "wait for 0");
        dev::WindowHandle bad = w;
        bad.abi ^= 1;
        REQ(dev::read_counter(c, bad, 0, &v) == Status::InvalidArgument, "a bad window handle");
        try {
          win.counter(3);
          return std::string("host counter(3) accepted");
        } catch (const Error& x) {
          REQ(x.code() == ErrorCode::InvalidArgument &&
                  std::string(x.what()).find("counter 3 out of range (the window has 3 counters)") != std::string::npos,
              x.what());
        }
        try {
          comm.alloc_symmetric(4096, CommConfig::kMaxCounters + 1);
          return std::string("kMaxCounters + 1 accepted");
        } catch (const Error& x) {
          REQ(x.code() == ErrorCode::InvalidArgument &&
                  std::string(x.what()).find("counters 65537 is above 65536") != std::string::npos,
              x.what());
        }
        REQ(comm.alloc_symmetric(4096, CommConfig::kMaxCounters).counters() == CommConfig::kMaxCounters, "the max");
        try {
          CommConfig big = path_config(k);
          big.counters = CommConfig::kMaxCounters + 1;
          Comm x(bs, big);
          return std::string("CommConfig::counters 65537 accepted");
        } catch (const Error& x) {
          REQ(x.code() == ErrorCode::InvalidArgument &&
                  std::string(x.what()).find("counters 65537 is above 65536") != std::string::npos,
              x.what());
        }
        // Nothing of the refused calls arrived.
        REQ(dev::barrier(c) == Status::Ok, "barrier");
        for (int i = 0; i < 64; ++i) REQ(mine[1024 + i] == 0, "refused put moved byte " + std::to_string(i));
        uint64_t sig = 1;
        std::memcpy(&sig, mine + 2048, 8);
        REQ(sig == 0, "refused signal applied: " + std::to_string(sig));

        // Two counted puts, then a wait for 5: the bound (300 ms), then
        // TimeoutCompletion; the record names the window, counter and values.
        Comm second(bs, path_config(k, 300));
        CommWindow& w2 = second.alloc_symmetric(4096, 1);
        const dev::CommHandle c2 = second.device_handle();
        for (int i = 0; i < 2; ++i)
          REQ(dev::put(c2, p, w2.handle(), 512, w2.handle(), 0, 64, CounterInc{0}) == Status::Ok, "put");
        const auto t0 = std::chrono::steady_clock::now();
        uint64_t seen = 0;
        const Status s = dev::wait_counter(c2, w2.handle(), 0, 5, &seen);
        REQ(s == Status::TimeoutCompletion, "wait for 5: " + st(s));
        REQ(std::chrono::steady_clock::now() - t0 >= 300ms, "returned before the bound");
        REQ(seen == 2, "seen " + std::to_string(seen));
        const std::string e2 = second.device_error();
        REQ(e2 == "comm rank " + std::to_string(r) +
                      ": wait_counter window 1 counter 0: timed out waiting for a completion (waited for 5, saw 2)",
            e2);
        second.barrier();
        comm.barrier();
        return "";
      },
      60s);
  expect_ok(res, n);
}

// A counted put the target refuses (a corrupted key): the counter never
// counts it, and wait_counter / read_counter end at once with the failure,
// which reset_counter clears.
TEST_P(CommCounterEdges, FailedOperationEndsTheWait) {
  const std::string kind = GetParam();
  auto res = run_ranks(
      2,
      [k = kind](int r, int, Bootstrap& bs) -> std::string {
        Comm comm(bs, path_config(k, 20000));
        CommWindow& win = comm.alloc_symmetric(4096, 1);
        const dev::CommHandle c = comm.device_handle();
        if (r == 0) {
          std::vector<dev::CommWindowPeer> tab(win.handle().peers, win.handle().peers + 2);
          tab[1].rkey ^= k.rfind("gdaki", 0) == 0 ? 0x01000000u : 0x40u;  // a key the target does not know
          dev::WindowHandle bad = win.handle();
          bad.peers = tab.data();
          Status s = dev::put(c, 1, bad, 0, win.handle(), 0, 64, CounterInc{0});
          REQ(s == Status::Ok, "counted put is handed off: " + st(s));
          const auto t0 = std::chrono::steady_clock::now();
          uint64_t seen = 9;
          s = dev::wait_counter(c, win.handle(), 0, 1, &seen);
          REQ(s != Status::Ok && s != Status::TimeoutCompletion && seen == 0,
              "wait_counter: " + st(s) + " seen " + std::to_string(seen));
          REQ(std::chrono::steady_clock::now() - t0 < 5s, "the wait ran towards its timeout");
          const std::string e = comm.device_error();
          REQ(e.find("wait_counter (rank 1) window 1 counter 0: " + st(s) + " (waited for 1, saw 0)") !=
                  std::string::npos,
              e);
          uint64_t v = 9;
          REQ(dev::read_counter(c, win.handle(), 0, &v) == s && v == 0, "read_counter " + std::to_string(v));
          REQ(dev::quiet(c) == s, "quiet reports the same failure");
          REQ(dev::reset_counter(c, win.handle(), 0) == Status::Ok, "reset");
          REQ(dev::read_counter(c, win.handle(), 0, &v) == Status::Ok && v == 0, "failure cleared");
          // The path is in error now: a later counted put's wait ends at once
          // with the path's failure, not at the timeout.
          s = dev::put(c, 1, win.handle(), 0, win.handle(), 0, 64, CounterInc{0});
          if (s == Status::Ok) {
            const auto t1 = std::chrono::steady_clock::now();
            s = dev::wait_counter(c, win.handle(), 0, 1, &seen);
            REQ(std::chrono::steady_clock::now() - t1 < 5s, "the second wait ran towards its timeout: " + st(s));
          }
          REQ(s != Status::Ok && s != Status::TimeoutCompletion,
              "a counted put after the failure: " + st(s) + " " + comm.device_error());
        }
        comm.barrier();
        return "";
      },
      60s);
  expect_ok(res, 2);
}

INSTANTIATE_TEST_SUITE_P(Paths, CommCounterEdges,
                         ::testing::Values(std::string("proxy_tcp"), std::string("proxy_shm"), std::string("gdaki_tcp"),
                                           std::string("gdaki_shm")),
                         [](const auto& i) { return i.param; });

}  // namespace
