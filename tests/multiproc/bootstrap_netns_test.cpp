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
#include "proc_util.hpp"

namespace {
using namespace std::chrono_literals;

bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

class TwoNamespaces : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tag = std::to_string(getpid());
    ns_a_ = "kinet_bs_a" + tag;
    ns_b_ = "kinet_bs_b" + tag;
    if_a_ = "kbsa" + tag.substr(tag.size() > 8 ? tag.size() - 8 : 0);
    if_b_ = "kbsb" + tag.substr(tag.size() > 8 ? tag.size() - 8 : 0);
    bool ok = sh("ip netns add " + ns_a_) && (made_a_ = true) && sh("ip netns add " + ns_b_) && (made_b_ = true) &&
              sh("ip link add " + if_a_ + " netns " + ns_a_ + " type veth peer name " + if_b_ + " netns " + ns_b_) &&
              sh("ip -n " + ns_a_ + " addr add 10.213.0.1/24 dev " + if_a_) &&
              sh("ip -n " + ns_b_ + " addr add 10.213.0.2/24 dev " + if_b_) &&
              sh("ip -n " + ns_a_ + " link set " + if_a_ + " up") && sh("ip -n " + ns_b_ + " link set " + if_b_ + " up") &&
              sh("ip -n " + ns_a_ + " link set lo up") && sh("ip -n " + ns_b_ + " link set lo up");
    if (!ok) GTEST_SKIP() << "cannot create network namespaces and a veth pair (needs root and ip netns)";
  }
  void TearDown() override {
    if (made_a_) sh("ip netns del " + ns_a_);  // deletes the veth pair too
    if (made_b_) sh("ip netns del " + ns_b_);
  }
  kinet::test::Proc start(const std::string& ns, const std::string& ifname, std::vector<std::string> args) {
    std::vector<std::string> argv{"/usr/sbin/ip", "netns", "exec", ns, KINET_BOOTSTRAP_HELPER};
    if (access(argv[0].c_str(), X_OK) != 0) argv[0] = "/sbin/ip";
    argv.insert(argv.end(), args.begin(), args.end());
    return kinet::test::spawn(argv, {"KINET_SOCKET_IFNAME=" + ifname});
  }
  std::string ns_a_, ns_b_, if_a_, if_b_;
  bool made_a_ = false, made_b_ = false;
};

TEST_F(TwoNamespaces, RanksFindEachOtherThroughTheSelectedInterface) {
  const std::string file = "/tmp/kinet_bs_id_" + std::to_string(getpid());
  std::remove(file.c_str());
  // Rank 0 creates the id in namespace A (the root runs there).
  std::vector<kinet::test::Proc> ps;
  ps.push_back(start(ns_a_, "=" + if_a_, {"--create-id", file, "--rank", "0", "--nranks", "2", "--timeout", "15000"}));
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
  ps.push_back(start(ns_b_, if_b_, {"--id", hex, "--rank", "1", "--nranks", "2", "--timeout", "15000"}));
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
