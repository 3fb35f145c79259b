// The ofi channel between two network namespaces joined by a veth pair: an
// echo helper in one, a driver helper in the other, each with FI_TCP_IFACE
// naming its side of the pair. Needs root (ip netns); Skipped otherwise.
#include "test_util.hpp"
#include "ofi_netns.hpp"

namespace {
using namespace std::chrono_literals;
using kinet::test::ofi::Child;
using kinet::test::ofi::OfiTwoNamespaces;

TEST_F(OfiTwoNamespaces, DriverAndEchoAcrossTheVethPair) {
  Child echo = start(1, KINET_OFI_HELPER, {"echo"});
  const std::string n = std::to_string(kinet::test::scaled(400, 100));
  Child drive = start(0, KINET_OFI_HELPER, {"drive", n});
  ASSERT_GT(echo.pid, 0);
  ASSERT_GT(drive.pid, 0);
  const std::string ea = echo.next_line(20s), da = drive.next_line(20s);
  if (ea.rfind("SKIP", 0) == 0) GTEST_SKIP() << ea;
  ASSERT_EQ(ea.rfind("ADDR ", 0), 0u) << ea;
  ASSERT_EQ(da.rfind("ADDR ", 0), 0u) << da;
  echo.say("PEER " + da.substr(5));
  drive.say("PEER " + ea.substr(5));
  EXPECT_EQ(drive.next_line(180s), "OK " + n);
  EXPECT_EQ(drive.wait(20s), 0);
  echo.close_in();
  EXPECT_EQ(echo.next_line(30s), "OK " + n);
  EXPECT_EQ(echo.wait(20s), 0);
}

}  // namespace
