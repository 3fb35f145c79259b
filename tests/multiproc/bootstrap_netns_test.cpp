// Bootstrap across two network namespaces joined by a veth pair: two "hosts"
// with their own addresses, each rank selecting its side's interface with
// KINET_SOCKET_IFNAME. Needs root (ip netns); Skipped when it can't set up.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "kinet/bootstrap.hpp"
#include "netns.hpp"
#include "proc_util.hpp"

namespace {
using namespace std::chrono_literals;

class TwoNamespaces : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!net_.create()) GTEST_SKIP() << kinet::test::kNetnsSkip;
  }
  // `ifname`: the KINET_SOCKET_IFNAME value ("=name" exact, else a prefix).
  kinet::test::Proc start(int side, const std::string& ifname, std::vector<std::string> args) {
    std::vector<std::string> argv = net_.exec_prefix(side);
    argv.push_back(KINET_BOOTSTRAP_HELPER);
    argv.insert(argv.end(), args.begin(), args.end());
    return kinet::test::spawn(argv, {"KINET_SOCKET_IFNAME=" + ifname});
  }
  kinet::test::NetnsPair net_{"bs", "bs", "10.213.0"};
};

TEST_F(TwoNamespaces, RanksFindEachOtherThroughTheSelectedInterface) {
  const std::string file = "/tmp/kinet_bs_id_" + std::to_string(getpid());
  std::remove(file.c_str());
  // Rank 0 creates the id in namespace A (the root runs there).
  std::vector<kinet::test::Proc> ps;
  ps.push_back(
      start(0, "=" + net_.ifname[0], {"--create-id", file, "--rank", "0", "--nranks", "2", "--timeout", "15000"}));
  std::string hex;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (hex.empty() && std::chrono::steady_clock::now() < deadline) {
    std::ifstream f(file);
    std::getline(f, hex);
    if (hex.empty()) std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(hex.size(), 256u) << "rank 0 did not write the unique id";
  auto id = kinet::UniqueId::from_string(hex);
  EXPECT_EQ(id.address_string().rfind("10.213.0.1:", 0), 0u) << id.address_string();
  ps.push_back(start(1, net_.ifname[1], {"--id", hex, "--rank", "1", "--nranks", "2", "--timeout", "15000"}));
  kinet::test::wait_all(ps, 40s);
  std::remove(file.c_str());
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_FALSE(ps[r].timed_out);
    EXPECT_EQ(ps[r].out.substr(0, ps[r].out.find('\n')), "OK");
    EXPECT_EQ(ps[r].exit_code, 0);
  }
}

}  // namespace
