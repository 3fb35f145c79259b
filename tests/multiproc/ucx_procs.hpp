// kinet multiproc tests — two helper processes exchanging addresses through
// files, on this host or each in its own network namespace (a veth pair;
// root only, else Skipped), for the UCX channel and transport tests.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "netns.hpp"
#include "proc_util.hpp"

namespace kinet::test::ucx {
using namespace std::chrono_literals;

// Two helpers on this host.
class UcxProcs : public ::testing::Test {
 protected:
  explicit UcxProcs(std::string helper) : helper_(std::move(helper)) {}
  // Names this test's two exchange files (derived SetUps skip first when UCX is missing).
  void SetUp() override {
    const std::string base = "/tmp/kinet_ucx_" + std::to_string(getpid()) + "_" + std::to_string(++n_);
    fa_ = base + "_a";
    fb_ = base + "_b";
  }
  void TearDown() override {
    std::remove(fa_.c_str());
    std::remove(fb_.c_str());
  }
  // Runs helper a (--me fa --peer fb) and helper b with modes and env; waits.
  std::vector<kinet::test::Proc> run(std::vector<std::string> a, std::vector<std::string> b,
                                     const std::vector<std::string>& env, std::vector<std::string> prefix_a = {},
                                     std::vector<std::string> prefix_b = {}, std::vector<std::string> env_a = {},
                                     std::vector<std::string> env_b = {}) {
    auto argv = [&](std::vector<std::string> pre, std::vector<std::string> args, const std::string& me,
                    const std::string& peer) {
      pre.push_back(helper_);
      pre.insert(pre.end(), {"--me", me, "--peer", peer});
      pre.insert(pre.end(), args.begin(), args.end());
      return pre;
    };
    env_a.insert(env_a.end(), env.begin(), env.end());
    env_b.insert(env_b.end(), env.begin(), env.end());
    std::vector<kinet::test::Proc> ps;
    ps.push_back(kinet::test::spawn(argv(prefix_a, a, fa_, fb_), env_a));
    ps.push_back(kinet::test::spawn(argv(prefix_b, b, fb_, fa_), env_b));
    kinet::test::wait_all(ps, 90s);
    return ps;
  }
  std::string helper_, fa_, fb_;
  static inline int n_ = 0;
};

// The helper's result line ("OK ..." / "FAIL ..."): UCX writes its own log
// lines to stdout too (e.g. the shm transports' "no peer failure handler").
inline std::string first_line(const kinet::test::Proc& p) {
  size_t at = 0;
  while (at < p.out.size()) {
    const size_t end = p.out.find('\n', at);
    const std::string l = p.out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (l.rfind("OK", 0) == 0 || l.rfind("FAIL", 0) == 0) return l;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "(no result line)";
}

// Two helpers, one per network namespace, joined by a veth pair; tcp only.
class UcxNetns : public UcxProcs {
 protected:
  using UcxProcs::UcxProcs;
  void SetUp() override {
    UcxProcs::SetUp();
    if (IsSkipped()) return;
    if (!net_.create()) GTEST_SKIP() << kinet::test::kNetnsSkip;
    // UCX lists an interface only once it is running: wait for both (bounded).
    ASSERT_TRUE(net_.wait_running(10s)) << "the veth pair is not up after 10 s";
  }
  std::vector<kinet::test::Proc> run_ns(std::vector<std::string> a, std::vector<std::string> b) {
    // tcp only, each side on its veth: shared memory would bypass the namespaces.
    return run(a, b, {"UCX_TLS=tcp"}, net_.exec_prefix(0), net_.exec_prefix(1), {"UCX_NET_DEVICES=" + net_.ifname[0]},
               {"UCX_NET_DEVICES=" + net_.ifname[1]});
  }
  kinet::test::NetnsPair net_{"ucx", "ux", "10.214.0"};
};

}  // namespace kinet::test::ucx
