// kinet ofi tests — two network namespaces joined by a veth pair (10.214.0.1
// and .2), helpers started in either with FI_PROVIDER=tcp and FI_TCP_IFACE
// naming their side. Needs root (ip netns); the test is Skipped otherwise.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "netns.hpp"
#include "ofi_test_util.hpp"

namespace kinet::test::ofi {

class OfiTwoNamespaces : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!net_.create()) GTEST_SKIP() << kinet::test::kNetnsSkip;
    // libfabric's tcp provider lists only interfaces that are running: wait
    // for both ends (else it picks lo and peers can't reach it).
    ASSERT_TRUE(net_.wait_running()) << "the veth pair never came up";
  }
  Child start(int side, const std::string& helper, std::vector<std::string> args) {
    std::vector<std::string> argv = net_.exec_prefix(side);
    argv.push_back(helper);
    argv.insert(argv.end(), args.begin(), args.end());
    return Child::start(argv, {"FI_PROVIDER=tcp", "FI_TCP_IFACE=" + net_.ifname[side]});
  }
  kinet::test::NetnsPair net_{"ofi", "of", "10.214.0"};
};

}  // namespace kinet::test::ofi
