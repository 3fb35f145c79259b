// kinet::Transport over "ucx" end to end between two processes and across two
// network namespaces: every operation with data checked byte for byte, more
// operations than the depth, a split transfer, crafted out-of-bounds /
// wrong-key / wrong-access operations rejected with exact statuses and
// nothing touched (guards), and kill -9 of the peer -> TransportRetryExceeded
// with peer_error "peer lost: ..." (tcp) or "timeout after ..." (shared
// memory, where UCX can't see the death), then WrFlushed.
#include <gtest/gtest.h>

#include <csignal>

#include "kinet/kinet.hpp"
#include "kinet/transport.hpp"
#include "ucx_procs.hpp"

namespace {
using namespace kinet::test::ucx;

bool ucx_available() {
  try {
    kinet::Transport::open({.provider = "ucx", .name = "probe"});
    return true;
  } catch (const kinet::Error&) {
    return false;
  }
}

class UcxTransportProcs : public UcxProcs {
 protected:
  UcxTransportProcs() : UcxProcs(KINET_UCX_TRANSPORT_HELPER) {}
  void SetUp() override {
    if (!ucx_available()) GTEST_SKIP() << "Transport provider ucx can't open here";
    UcxProcs::SetUp();
  }
};
class UcxTransportNetns : public UcxNetns {
 protected:
  UcxTransportNetns() : UcxNetns(KINET_UCX_TRANSPORT_HELPER) {}
  void SetUp() override {
    if (!ucx_available()) GTEST_SKIP() << "Transport provider ucx can't open here";
    UcxNetns::SetUp();
  }
};

void expect_ops_ok(const std::vector<kinet::test::Proc>& ps) {
  EXPECT_FALSE(ps[0].timed_out || ps[1].timed_out);
  EXPECT_EQ(first_line(ps[0]), "OK guards intact") << ps[0].out;
  EXPECT_EQ(first_line(ps[1]).rfind("OK up to ", 0), 0u) << ps[1].out;
  EXPECT_EQ(ps[0].exit_code, 0);
  EXPECT_EQ(ps[1].exit_code, 0);
}
void expect_lost(const std::vector<kinet::test::Proc>& ps, const std::string& why_prefix) {
  EXPECT_EQ(ps[0].exit_code, 128 + SIGKILL) << ps[0].out;
  const std::string l = first_line(ps[1]);
  EXPECT_EQ(l.rfind("OK after ", 0), 0u) << ps[1].out;
  EXPECT_NE(l.find(": " + why_prefix), std::string::npos) << l;
  EXPECT_EQ(ps[1].exit_code, 0);
}

TEST_F(UcxTransportProcs, EveryOperationOverTcp) {
  expect_ops_ok(run({"--role", "target"}, {"--role", "initiator"}, {"UCX_TLS=tcp", "UCX_NET_DEVICES=lo"}));
}

TEST_F(UcxTransportProcs, EveryOperationOverSharedMemory) {
  expect_ops_ok(run({"--role", "target"}, {"--role", "initiator"}, {"UCX_TLS=sm,self"}));
}

TEST_F(UcxTransportProcs, KilledPeerOverTcpIsPeerLost) {
  expect_lost(run({"--role", "victim"}, {"--role", "killer"}, {"UCX_TLS=tcp", "UCX_NET_DEVICES=lo"}),
              "peer lost: UCX reported ");
}

TEST_F(UcxTransportProcs, KilledPeerOverSharedMemoryTimesOut) {
  expect_lost(run({"--role", "victim"}, {"--role", "killer"}, {"UCX_TLS=sm,self", "KINET_TRANSPORT_TIMEOUT_MS=1500"}),
              "timeout after 1500 ms waiting for ");
}

TEST_F(UcxTransportNetns, EveryOperationAcrossNamespaces) {
  expect_ops_ok(run_ns({"--role", "target"}, {"--role", "initiator"}));
}

TEST_F(UcxTransportNetns, KilledPeerAcrossNamespacesIsPeerLost) {
  expect_lost(run_ns({"--role", "victim"}, {"--role", "killer"}), "peer lost: UCX reported ");
}

}  // namespace
