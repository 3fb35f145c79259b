// kinet-info --comm: the per-peer path report between local processes, on
// CPU: the proxy path (tcp), gdaki on the software NIC, and a p2p request
// that can't be met (every rank's error reported, exit 1).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "proc_util.hpp"

namespace {
using namespace std::chrono_literals;
using json = nlohmann::json;
using kinet::test::Proc;

Proc run_info(std::vector<std::string> args) {
  args.insert(args.begin(), KINET_INFO_BIN);
  std::vector<Proc> ps{kinet::test::spawn(args, {"KINET_SOCKET_IFNAME=lo"})};
  kinet::test::wait_all(ps, 90s);
  return ps[0];
}

TEST(KinetInfoComm, ProxyPathJson) {
  const Proc p = run_info({"--comm", "--ranks", "2", "--path", "proxy", "--transport", "tcp", "--memory", "host", "--json"});
  ASSERT_FALSE(p.timed_out);
  ASSERT_EQ(p.exit_code, 0) << p.out;
  const json r = json::parse(p.out);
  EXPECT_EQ(r["ranks"], 2);
  EXPECT_EQ(r["path"], "proxy");
  EXPECT_FALSE(r.contains("error")) << p.out;
  const json& z = r["rank0"];
  EXPECT_EQ(z["gpu"], false);
  EXPECT_EQ(z["transport"].get<std::string>().rfind("tcp", 0), 0u) << p.out;
  ASSERT_EQ(z["peers"].size(), 2u);
  EXPECT_EQ(z["peers"][0]["path"], "self");
  EXPECT_EQ(z["peers"][1]["peer"], 1);
  EXPECT_EQ(z["peers"][1]["path"], "proxy");
  EXPECT_FALSE(z["peers"][1]["reason"].get<std::string>().empty());
  ASSERT_EQ(z["report"].size(), 2u);
  EXPECT_EQ(z["report"][1].get<std::string>().rfind("rank 0 -> rank 1: proxy over tcp", 0), 0u) << p.out;
}

TEST(KinetInfoComm, GdakiOnTheSoftwareNicText) {
  const Proc p = run_info({"--comm", "--ranks", "3", "--path", "gdaki", "--device", "emu", "--memory", "host"});
  ASSERT_FALSE(p.timed_out);
  ASSERT_EQ(p.exit_code, 0) << p.out;
  EXPECT_NE(p.out.find("Communicator between 3 local processes (path gdaki, memory host"), std::string::npos) << p.out;
  for (int peer : {1, 2})
    EXPECT_NE(p.out.find("rank 0 -> rank " + std::to_string(peer) + ": gdaki over emu0 QP "), std::string::npos) << p.out;
}

TEST(KinetInfoComm, ImpossiblePathFailsNamingEveryRank) {
  const Proc p = run_info({"--comm", "--path", "p2p", "--memory", "host", "--transport", "tcp", "--json"});
  ASSERT_FALSE(p.timed_out);
  EXPECT_EQ(p.exit_code, 1) << p.out;
  const json r = json::parse(p.out);
  EXPECT_EQ(r["error"], "a rank failed to build the communicator");
  ASSERT_EQ(r["ranks_failed"].size(), 2u) << p.out;
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(r["ranks_failed"][k]["rank"], k);
    EXPECT_EQ(r["ranks_failed"][k]["exit"], 3);
    EXPECT_NE(r["ranks_failed"][k]["message"].get<std::string>().find("path p2p to rank " + std::to_string(1 - k) +
                                                                      " impossible"),
              std::string::npos)
        << p.out;
  }
}

TEST(KinetInfoComm, BadOptions) {
  Proc p = run_info({"--comm", "--ranks", "1"});
  EXPECT_EQ(p.exit_code, 1);
  p = run_info({"--comm", "--ranks", "65"});
  EXPECT_EQ(p.exit_code, 1);
  p = run_info({"--ranks", "2"});  // needs --comm
  EXPECT_NE(p.exit_code, 0);
  p = run_info({"--comm", "--path", "bogus"});
  EXPECT_NE(p.exit_code, 0);
}

}  // namespace
