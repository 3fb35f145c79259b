// Bootstrap::from_store across processes: ranks forked with nothing in
// common but a FileStore directory, then a kinet::Comm (host memory, proxy
// path over tcp) doing put + signal around a ring, data verified; a job
// with a missing rank fails on every rank within the bound, naming it.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>

#include "comm_scenarios.hpp"
#include "kinet/store.hpp"

namespace {
using namespace kinet;
using namespace kinet::test;
namespace fs = std::filesystem;

using StoreFn = std::function<std::string(int rank)>;

// Forks one process per entry of `ranks` running fn(rank); collects verdicts
// as run_ranks does (exit 0: ""; 1: a complaint; 3: an exception).
std::vector<RankResult> fork_ranks(const std::vector<int>& ranks, const StoreFn& fn, std::chrono::milliseconds bound) {
  std::vector<pid_t> pids;
  std::vector<int> outs;
  for (int r : ranks) {
    int op[2];
    if (pipe(op) != 0) break;
    const pid_t pid = fork();
    if (pid == 0) {
      close(op[0]);
      rank_exit(op[1], [&] { return fn(r); });
    }
    close(op[1]);
    pids.push_back(pid);
    outs.push_back(op[0]);
  }
  return collect_ranks(pids, outs, bound);
}

struct FromStoreRanks : ::testing::TestWithParam<int> {
  std::string dir;
  void SetUp() override {
    setenv("KINET_SOCKET_IFNAME", "lo", 1);
    char t[] = "/tmp/kinet-filestore-XXXXXX";
    dir = mkdtemp(t);
  }
  void TearDown() override {
    unsetenv("KINET_SOCKET_IFNAME");
    fs::remove_all(dir);
  }
};

// Every rank puts 2000 bytes + a signal to the next rank and checks what the
// previous one sent; then the key is gone and no temporary file is left.
TEST_P(FromStoreRanks, CommPutSignalAroundARing) {
  const int n = GetParam();
  std::vector<int> ranks(n);
  for (int r = 0; r < n; ++r) ranks[r] = n - 1 - r;  // rank 0 last: the others wait on the store
  auto res = fork_ranks(
      ranks,
      [&](int r) -> std::string {
        FileStore store(dir);
        auto bs = Bootstrap::from_store(store, r, n, "job-" + std::to_string(n), 20s);
        REQ(bs->rank() == r && bs->size() == n, "rank/size");
        Comm comm(*bs, config("tcp"));
        for (int p = 0; p < n; ++p) REQ(comm.path(p) == (p == r ? dev::CommPath::Self : dev::CommPath::Proxy), comm.report());
        CommWindow& win = comm.alloc_symmetric(16 << 10);
        const dev::CommHandle c = comm.device_handle();
        const dev::WindowHandle w = win.handle();
        auto* mine = static_cast<uint8_t*>(win.local());
        for (uint64_t i = 0; i < kLen; ++i) mine[i] = pat(r, i);
        Status s = dev::barrier(c);
        REQ(s == Status::Ok, "barrier: " + st(s));
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        s = dev::put_signal(c, next, w, 4096, w, 0, kLen, w, 8192, SigOp::Add, 1);
        REQ(s == Status::Ok, "put_signal: " + st(s) + " " + comm.device_error());
        s = dev::wait_signal(c, w, 8192, Cmp::Eq, 1, prev);
        REQ(s == Status::Ok, "wait_signal: " + st(s) + " " + comm.device_error());
        for (uint64_t i = 0; i < kLen; ++i) REQ(mine[4096 + i] == pat(prev, i), "byte " + std::to_string(i));
        REQ((s = dev::barrier(c)) == Status::Ok, "barrier: " + st(s));
        comm.barrier();
        return "";
      },
      90s);
  ASSERT_EQ(res.size(), size_t(n));
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE("rank " + std::to_string(ranks[i]));
    EXPECT_FALSE(res[i].timed_out);
    EXPECT_EQ(res[i].exit_code, 0) << res[i].out;
  }
  EXPECT_TRUE(fs::is_empty(dir)) << "the key (rank 0 erases it) or a temporary file is left";
}

INSTANTIATE_TEST_SUITE_P(Ranks, FromStoreRanks, ::testing::Values(2, 4),
                         [](const auto& i) { return std::to_string(i.param); });

// Rank 2 of 3 never starts: ranks 0 and 1 fail within their bound, naming
// rank 2; rank 0's failure is left in the store.
TEST_F(FromStoreRanks, MissingRankFailsEveryRankNamingIt) {
  auto res = fork_ranks(
      {1, 0},
      [&](int r) -> std::string {
        FileStore store(dir);
        try {
          Bootstrap::from_store(store, r, 3, "job-missing", 1500ms);
        } catch (const Error& e) {
          const std::string w = e.what();
          REQ(e.code() == ErrorCode::System, w);
          const bool told = w.find("bootstrap rank " + std::to_string(r) + "/3: timeout at the root") != std::string::npos &&
                            w.find("ranks 2 never registered") != std::string::npos;
          // The root lives in rank 0's process, which exits once its own init
          // failed: rank 1 may see that before the root's verdict.
          const bool root_gone = r == 1 && w.find("bootstrap rank 1/3: the root ") != std::string::npos &&
                                 w.find(" closed the connection") != std::string::npos;
          REQ(told || root_gone, w);
          REQ(w.find("key 'job-missing/kinet_unique_id' in FileStore " + dir) != std::string::npos, w);
          return "";
        }
        return "from_store succeeded with a rank missing";
      },
      60s);
  ASSERT_EQ(res.size(), 2u);
  for (const RankResult& r : res) {
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 0) << r.out;
  }
  // Rank 0's process is gone, so its record counts as stale: a late rank
  // waits for a fresh one, then says what the stale record held.
  FileStore store(dir);
  try {
    Bootstrap::from_store(store, 2, 3, "job-missing", 300ms);
    ADD_FAILURE() << "the late rank joined a failed job";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_EQ(e.code(), ErrorCode::System);
    EXPECT_NE(w.find("from_store rank 2/3: timeout after 300 ms: key 'job-missing/kinet_unique_id' in FileStore " +
                     dir + " holds only a stale record of rank 0's failure"),
              std::string::npos)
        << w;
    EXPECT_NE(w.find("no longer runs; it failed with: init: bootstrap rank 0/3: timeout at the root"), std::string::npos)
        << w;
  }
}

}  // namespace
