// exit() while kinet objects are alive: a Comm (with its Transport, Proxy,
// monitor thread and windows) leaked on the heap or held in static storage,
// with operations still in flight to a peer that is exiting too. The process
// must exit with the caller's code, without a crash or a hang (static
// destructors run after the peer may be gone; leaked objects never run theirs).
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "comm_ranks.hpp"
#include "kinet/comm.hpp"

namespace kinet::test {
namespace {
using namespace std::chrono_literals;

enum class Hold { Leaked, Static };

std::string exit_mid_traffic(int r, Bootstrap& bs, Hold hold, const char* transport) {
  CommConfig cfg;
  cfg.transport = transport;
  cfg.path = "proxy";
  cfg.memory = CommConfig::Memory::Host;
  cfg.timeout = 5000ms;
  static std::unique_ptr<Comm> held;
  Comm* c = new Comm(bs, cfg);
  if (hold == Hold::Static) held.reset(c);
  CommWindow& w = c->alloc_symmetric(1 << 20);
  const dev::CommHandle h = c->device_handle();
  const int peer = 1 - r;
  for (int i = 0; i < 64; ++i)
    if (dev::put(h, peer, w.handle(), (i % 16) * 65536, w.handle(), 0, 65536) != Status::Ok) return "put failed";
  std::exit(0);  // operations in flight, the peer exiting at the same time
}

TEST(ExitWithLiveObjects, LeakedOrStaticCommExitsCleanly) {
  for (const char* transport : {"tcp", "shm"})
    for (Hold hold : {Hold::Leaked, Hold::Static}) {
      SCOPED_TRACE(std::string(transport) + (hold == Hold::Leaked ? " leaked" : " static"));
      const auto t0 = std::chrono::steady_clock::now();
      auto res = run_ranks(2, [&](int r, int, Bootstrap& bs) { return exit_mid_traffic(r, bs, hold, transport); }, 60s);
      ASSERT_EQ(res.size(), 2u);
      for (size_t r = 0; r < res.size(); ++r) {
        EXPECT_FALSE(res[r].timed_out) << "rank " << r << " did not exit";
        EXPECT_EQ(res[r].exit_code, 0) << "rank " << r << ": " << res[r].out;
      }
      EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
    }
}
}  // namespace
}  // namespace kinet::test
