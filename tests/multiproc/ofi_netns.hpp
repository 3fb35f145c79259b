// kinet ofi tests — two network namespaces joined by a veth pair (10.214.0.1
// and .2), helpers started in either with FI_PROVIDER=tcp and FI_TCP_IFACE
// naming their side. Needs root (ip netns); the test is Skipped otherwise.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <string>
#include <vector>

#include "ofi_test_util.hpp"

namespace kinet::test::ofi {

inline bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

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
    // libfabric's tcp provider lists only interfaces that are running: wait
    // for both ends' carrier (else it picks lo and peers can't reach it).
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!(sh("ip -n " + ns_a_ + " link show dev " + if_a_ + " | grep -q LOWER_UP") &&
             sh("ip -n " + ns_b_ + " link show dev " + if_b_ + " | grep -q LOWER_UP"))) {
      ASSERT_LT(std::chrono::steady_clock::now(), end) << "the veth pair never came up";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  void TearDown() override {
    if (made_a_) sh("ip netns del " + ns_a_);  // deletes the veth pair too
    if (made_b_) sh("ip netns del " + ns_b_);
  }
  Child start(const std::string& ns, const std::string& ifname, const std::string& helper,
              std::vector<std::string> args) {
    std::vector<std::string> argv{"/usr/sbin/ip", "netns", "exec", ns, helper};
    if (access(argv[0].c_str(), X_OK) != 0) argv[0] = "/sbin/ip";
    argv.insert(argv.end(), args.begin(), args.end());
    return Child::start(argv, {"FI_PROVIDER=tcp", "FI_TCP_IFACE=" + ifname});
  }
  std::string ns_a_, ns_b_, if_a_, if_b_;
  bool made_a_ = false, made_b_ = false;
};

}  // namespace kinet::test::ofi
