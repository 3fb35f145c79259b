// The ofi channel between two network namespaces joined by a veth pair: an
// echo helper in one, a driver helper in the other, each with FI_TCP_IFACE
// naming its side of the pair. Needs root (ip netns); Skipped otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "ofi_test_util.hpp"

namespace {
using namespace std::chrono_literals;
using kinet::test::ofi::Child;

bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

class OfiTwoNamespaces : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tag = std::to_string(getpid());
    ns_a_ = "kinet_ofi_a" + tag;
    ns_b_ = "kinet_ofi_b" + tag;
    if_a_ = "kofa" + tag.substr(tag.size() > 8 ? tag.size() - 8 : 0);
    if_b_ = "kofb" + tag.substr(tag.size() > 8 ? tag.size() - 8 : 0);
    bool ok = sh("ip netns add " + ns_a_) && (made_a_ = true) && sh("ip netns add " + ns_b_) && (made_b_ = true) &&
              sh("ip link add " + if_a_ + " netns " + ns_a_ + " type veth peer name " + if_b_ + " netns " + ns_b_) &&
              sh("ip -n " + ns_a_ + " addr add 10.214.0.1/24 dev " + if_a_) &&
              sh("ip -n " + ns_b_ + " addr add 10.214.0.2/24 dev " + if_b_) &&
              sh("ip -n " + ns_a_ + " link set " + if_a_ + " up") && sh("ip -n " + ns_b_ + " link set " + if_b_ + " up") &&
              sh("ip -n " + ns_a_ + " link set lo up") && sh("ip -n " + ns_b_ + " link set lo up");
    if (!ok) GTEST_SKIP() << "cannot create network namespaces and a veth pair (needs root and ip netns)";
  }
  void TearDown() override {
    if (made_a_) sh("ip netns del " + ns_a_);  // deletes the veth pair too
    if (made_b_) sh("ip netns del " + ns_b_);
  }
  Child start(const std::string& ns, const std::string& ifname, std::vector<std::string> args) {
    std::vector<std::string> argv{"/usr/sbin/ip", "netns", "exec", ns, KINET_OFI_HELPER};
    if (access(argv[0].c_str(), X_OK) != 0) argv[0] = "/sbin/ip";
    argv.insert(argv.end(), args.begin(), args.end());
    return Child::start(argv, {"FI_PROVIDER=tcp", "FI_TCP_IFACE=" + ifname});
  }
  std::string ns_a_, ns_b_, if_a_, if_b_;
  bool made_a_ = false, made_b_ = false;
};

TEST_F(OfiTwoNamespaces, DriverAndEchoAcrossTheVethPair) {
  Child echo = start(ns_b_, if_b_, {"echo"});
  Child drive = start(ns_a_, if_a_, {"drive", "400"});
  ASSERT_GT(echo.pid, 0);
  ASSERT_GT(drive.pid, 0);
  const std::string ea = echo.next_line(20s), da = drive.next_line(20s);
  if (ea.rfind("SKIP", 0) == 0) GTEST_SKIP() << ea;
  ASSERT_EQ(ea.rfind("ADDR ", 0), 0u) << ea;
  ASSERT_EQ(da.rfind("ADDR ", 0), 0u) << da;
  echo.say("PEER " + da.substr(5));
  drive.say("PEER " + ea.substr(5));
  EXPECT_EQ(drive.next_line(60s), "OK 400");
  EXPECT_EQ(drive.wait(20s), 0);
  echo.close_in();
  EXPECT_EQ(echo.next_line(20s), "OK 400");
  EXPECT_EQ(echo.wait(20s), 0);
}

}  // namespace
