// The UCX channel (src/transports/ucx): loading, address checks, send edges
// and message delivery in one process; between two processes (in order, small
// and rendezvous sizes, many in flight, kill -9 -> on_peer_lost, a stranger);
// across two network namespaces joined by a veth pair (root only, else
// Skipped).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "kinet/kinet.hpp"
#include "proc_util.hpp"
#include "ucx_procs.hpp"
#include "transports/ucx/ucx_channel.hpp"
#include "ucx_channel_util.hpp"

namespace {
using namespace std::chrono_literals;
using namespace kinet::test::ucx;
namespace ucx = kinet::transport::ucx;
using kinet::Error;
using kinet::ErrorCode;

// What a call threw: code and message.
template <class F>
std::pair<ErrorCode, std::string> thrown(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  ADD_FAILURE() << "nothing was thrown";
  return {ErrorCode::System, ""};
}

std::unique_ptr<kinet::transport::Channel> open_or_skip(uint64_t node, const std::string& name) {
  try {
    return ucx::make_channel(node, name);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::NotSupported) return nullptr;
    throw;
  }
}
#define OPEN_OR_SKIP(var, node, name)                                              \
  auto var = open_or_skip(node, name);                                             \
  if (!var) GTEST_SKIP() << "UCX can't start here (libucp.so.0: apt-get install libucx0)"

TEST(UcxChannelLoad, MissingLibraryOrSymbolIsNotSupportedNamingIt) {
  auto [c1, m1] = thrown([] { ucx::make_channel(1, "x", "libkinet_no_such_ucp.so.0"); });
  EXPECT_EQ(c1, ErrorCode::NotSupported);
  EXPECT_EQ(m1.rfind("ucx: libkinet_no_such_ucp.so.0 could not be loaded (", 0), 0u) << m1;
  // libc loads but has no UCP: the first symbol of the table is named.
  auto [c2, m2] = thrown([] { ucx::make_channel(1, "x", "libc.so.6"); });
  EXPECT_EQ(c2, ErrorCode::NotSupported);
  EXPECT_EQ(m2, "ucx: libc.so.6 lacks ucp_config_read");
  auto [c3, m3] = thrown([] { ucx::make_channel(0, "x"); });
  EXPECT_EQ(c3, ErrorCode::InvalidArgument);
  EXPECT_EQ(m3, "ucx: channel x needs a non-zero node id");
}

TEST(UcxChannelLocal, DescribesItself) {
  OPEN_OR_SKIP(a, 0x11, "a");
  EXPECT_STREQ(a->provider(), "ucx");
  EXPECT_TRUE(a->ordered());
  EXPECT_EQ(a->max_message(), (size_t{1} << 20) + 128);  // 1 MiB of payload and the engine's header
  EXPECT_EQ(a->describe().rfind("ucx 1.", 0), 0u) << a->describe();
  const auto addr = a->address();
  ASSERT_GT(addr.size(), 24u);
  EXPECT_EQ(std::string(addr.begin(), addr.begin() + 4), "KUCX");
  EXPECT_EQ(addr[8], 0x11);  // node id, little-endian
}

TEST(UcxChannelLocal, MalformedAddressesAreRejectedAtTheirEdge) {
  OPEN_OR_SKIP(a, 0x21, "a");
  OPEN_OR_SKIP(b, 0x22, "b");
  const auto good = b->address();
  auto expect_bad = [&](std::vector<uint8_t> blob, const std::string& what) {
    auto [c, m] = thrown([&] { a->add_peer(blob, "rank 9"); });
    EXPECT_EQ(c, ErrorCode::InvalidArgument) << m;
    EXPECT_EQ(m, "ucx: the address of rank 9 " + what);
  };
  expect_bad(std::vector<uint8_t>(good.begin(), good.begin() + 23),
             "is 23 bytes, shorter than the 24-byte kinet UCX header");
  auto v = good;
  v[3] ^= 1;
  expect_bad(v, "is not a kinet UCX address (magic 0x0000000059435" + std::string("54b") + ")");
  v = good;
  v[4] = 2;
  expect_bad(v, "has version 2 with a 24-byte header; this side speaks version 1");
  const std::string n = std::to_string(good.size() - 24);
  v = good;
  v.pop_back();
  expect_bad(v, "says " + n + " bytes of UCP address but carries " + std::to_string(good.size() - 25));
  v = good;
  v.push_back(0);
  expect_bad(v, "says " + n + " bytes of UCP address but carries " + std::to_string(good.size() - 23));
  v = std::vector<uint8_t>(good.begin(), good.begin() + 24);
  v[16] = v[17] = v[18] = v[19] = 0;
  expect_bad(v, "says 0 bytes of UCP address but carries 0");
  v = good;
  for (int i = 8; i < 16; ++i) v[i] = 0;
  expect_bad(v, "has node id 0");
  // The good one works once; the same node again is refused, naming the first.
  EXPECT_EQ(a->add_peer(good, "b"), 0u);
  expect_bad(good, "names node 0x0000000000000022, already peer 0 (b)");
}

TEST(UcxChannelLocal, SendEdges) {
  OPEN_OR_SKIP(a, 0x31, "a");
  OPEN_OR_SKIP(b, 0x32, "b");
  iovec iov{nullptr, 0};
  auto [c1, m1] = thrown([&] { a->send(0, &iov, 1, 1); });
  EXPECT_EQ(c1, ErrorCode::InvalidArgument);
  EXPECT_EQ(m1, "ucx: send to peer 0, but a has 0 peers");
  const uint32_t pb = a->add_peer(b->address(), "b");
  const uint32_t pa = b->add_peer(a->address(), "a");
  // max_message() bytes go (split over iovs); one more is refused.
  std::vector<uint8_t> big = make_message(5, ucx::kMaxMessage + 1);
  iovec two[2] = {{big.data(), 1000}, {big.data() + 1000, ucx::kMaxMessage - 1000}};
  ASSERT_TRUE(a->send(pb, two, 2, 10));
  two[1].iov_len += 1;
  auto [c2, m2] = thrown([&] { a->send(pb, two, 2, 11); });
  EXPECT_EQ(c2, ErrorCode::InvalidArgument);
  EXPECT_EQ(m2, "ucx: a message of " + std::to_string(ucx::kMaxMessage + 1) + " bytes to b exceeds max_message() = " +
                    std::to_string(ucx::kMaxMessage));
  // An empty message arrives empty.
  ASSERT_TRUE(a->send(pb, nullptr, 0, 12));
  // A first part of up to 128 bytes rides in UCX's AM header (the rest goes
  // contiguously, rendezvous when large); 129 bytes take the iov path. Each
  // arrives whole (the recorder joins the parts).
  iovec p128[2] = {{big.data(), 128}, {big.data() + 128, ucx::kMaxMessage - 128}};
  iovec p129[2] = {{big.data(), 129}, {big.data() + 129, 5000}};
  iovec p88[2] = {{big.data(), 88}, {big.data() + 88, 8}};
  ASSERT_TRUE(a->send(pb, p128, 2, 13));
  ASSERT_TRUE(a->send(pb, p129, 2, 14));
  ASSERT_TRUE(a->send(pb, p88, 2, 15));
  Recorder ra, rb;
  ASSERT_TRUE(progress_until({{a.get(), &ra}, {b.get(), &rb}},
                             [&] { return rb.msgs.size() == 5 && ra.sent.size() == 5; }, 20s));
  EXPECT_EQ(rb.msgs[0].peer, pa);
  ASSERT_EQ(rb.msgs[0].data.size(), ucx::kMaxMessage);
  EXPECT_TRUE(std::equal(rb.msgs[0].data.begin(), rb.msgs[0].data.end(), big.begin()));
  EXPECT_EQ(rb.msgs[1].data.size(), 0u);
  const size_t want[3] = {ucx::kMaxMessage, 129 + 5000, 96};
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(rb.msgs[2 + i].data.size(), want[i]) << i;
    EXPECT_TRUE(std::equal(rb.msgs[2 + i].data.begin(), rb.msgs[2 + i].data.end(), big.begin())) << i;
  }
  EXPECT_EQ(ra.sent, (std::map<uint64_t, bool>{{10, true}, {12, true}, {13, true}, {14, true}, {15, true}}));
  EXPECT_TRUE(ra.lost.empty());
  EXPECT_TRUE(rb.strangers.empty());
}

TEST(UcxChannelLocal, StreamArrivesInOrderBothWays) {
  OPEN_OR_SKIP(a, 0x41, "a");
  OPEN_OR_SKIP(b, 0x42, "b");
  const uint32_t pb = a->add_peer(b->address(), "b");
  const uint32_t pa = b->add_peer(a->address(), "a");
  Recorder ra, rb;
  StreamSender ta{a.get(), pb, 100}, tb{b.get(), pa, 100};
  StreamReceiver xa, xb;
  ASSERT_TRUE(progress_until({{a.get(), &ra}, {b.get(), &rb}},
                             [&] {
                               ta.pump(ra), tb.pump(rb), xa.pump(ra, pb), xb.pump(rb, pa);
                               return (ta.done() && tb.done() && xa.got == 100 && xb.got == 100) ||
                                      !(xa.error + xb.error + ta.error + tb.error).empty();
                             },
                             30s))
      << "sent " << ta.next << "/" << tb.next << " received " << xa.got << "/" << xb.got;
  EXPECT_EQ(xa.error, "");
  EXPECT_EQ(xb.error, "");
  EXPECT_EQ(ta.error, "");
  EXPECT_GT(ta.max_inflight, 1u) << "never more than one message in flight";
}

TEST(UcxChannelLocal, StrangerIsReportedNotDelivered) {
  OPEN_OR_SKIP(a, 0x51, "a");
  OPEN_OR_SKIP(c, 0x5c, "c");
  const uint32_t pa = c->add_peer(a->address(), "a");  // a never adds c
  const std::string text = "not yours";
  iovec iov{const_cast<char*>(text.data()), text.size()};
  ASSERT_TRUE(c->send(pa, &iov, 1, 1));
  Recorder ra, rc;
  ASSERT_TRUE(progress_until({{a.get(), &ra}, {c.get(), &rc}}, [&] { return !ra.strangers.empty(); }, 20s));
  EXPECT_EQ(ra.strangers[0].who, "UCX sender node 0x000000000000005c (never added as a peer)");
  EXPECT_EQ(std::string(ra.strangers[0].data.begin(), ra.strangers[0].data.end()), text);
  EXPECT_TRUE(ra.msgs.empty());
}

// ---- two processes ----------------------------------------------------------

class UcxChannelProcs : public UcxProcs {
 protected:
  UcxChannelProcs() : UcxProcs(KINET_UCX_CHANNEL_HELPER) {}
  void SetUp() override {
    if (!open_or_skip(0x99, "probe")) GTEST_SKIP() << "UCX can't start here";
    UcxProcs::SetUp();
  }
};

void expect_stream_ok(const std::vector<kinet::test::Proc>& ps) {
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("helper " + std::to_string(i));
    EXPECT_FALSE(ps[i].timed_out);
    EXPECT_EQ(first_line(ps[i]).rfind("OK 60 each way", 0), 0u) << ps[i].out;
    EXPECT_EQ(ps[i].exit_code, 0);
  }
}

TEST_F(UcxChannelProcs, StreamOverSharedMemory) {
  expect_stream_ok(run({"--mode", "stream", "--count", "60"}, {"--mode", "stream", "--count", "60"},
                       {"UCX_TLS=sm,self"}));
}

TEST_F(UcxChannelProcs, StreamOverTcp) {
  expect_stream_ok(run({"--mode", "stream", "--count", "60"}, {"--mode", "stream", "--count", "60"},
                       {"UCX_TLS=tcp", "UCX_NET_DEVICES=lo"}));
}

// kill -9 of the peer: on_peer_lost within a bound, once; later sends fail.
void expect_lost(const std::vector<kinet::test::Proc>& ps, const std::string& why_part) {
  EXPECT_EQ(ps[1].exit_code, 128 + SIGKILL) << ps[1].out;
  EXPECT_FALSE(ps[0].timed_out);
  const std::string l = first_line(ps[0]);
  EXPECT_EQ(l.rfind("OK lost after ", 0), 0u) << ps[0].out;
  EXPECT_NE(l.find(why_part), std::string::npos) << l;
  EXPECT_EQ(ps[0].exit_code, 0);
}

TEST_F(UcxChannelProcs, KilledPeerIsLostOverTcpWhileSending) {
  expect_lost(run({"--mode", "killer"}, {"--mode", "victim"}, {"UCX_TLS=tcp", "UCX_NET_DEVICES=lo"}),
              "on the endpoint to the other helper");
}

TEST_F(UcxChannelProcs, KilledPeerIsLostOverTcpWhenIdle) {
  expect_lost(run({"--mode", "killer", "--idle"}, {"--mode", "victim"}, {"UCX_TLS=tcp", "UCX_NET_DEVICES=lo"}),
              "on the endpoint to the other helper");
}

TEST_F(UcxChannelProcs, KilledPeerOverSharedMemoryIsNotDetectedByUcx) {
  // UCX 1.13's shm transports have no peer failure handler: the channel falls
  // back to an endpoint without error handling, reports nothing and never
  // blocks; the engine's timeout finds the dead peer.
  auto ps = run({"--mode", "killer", "--silent"}, {"--mode", "victim"}, {"UCX_TLS=sm,self"});
  EXPECT_EQ(ps[1].exit_code, 128 + SIGKILL) << ps[1].out;
  EXPECT_EQ(first_line(ps[0]).rfind("OK silent for 2000 ms, ", 0), 0u) << ps[0].out;
  EXPECT_EQ(ps[0].exit_code, 0);
}

TEST_F(UcxChannelProcs, StrangerFromAnotherProcess) {
  auto ps = run({"--mode", "stranger"}, {"--mode", "intruder"}, {"UCX_TLS=tcp", "UCX_NET_DEVICES=lo"});
  EXPECT_EQ(first_line(ps[0]).rfind("OK UCX sender node 0x", 0), 0u) << ps[0].out;
  EXPECT_EQ(ps[0].exit_code, 0);
  EXPECT_EQ(first_line(ps[1]), "OK sent") << ps[1].out;
}

// ---- two network namespaces ---------------------------------------------------

class UcxChannelNetns : public UcxNetns {
 protected:
  UcxChannelNetns() : UcxNetns(KINET_UCX_CHANNEL_HELPER) {}
  void SetUp() override {
    if (!open_or_skip(0x99, "probe")) GTEST_SKIP() << "UCX can't start here";
    UcxNetns::SetUp();
  }
};

TEST_F(UcxChannelNetns, StreamAcrossNamespaces) {
  expect_stream_ok(run_ns({"--mode", "stream", "--count", "60"}, {"--mode", "stream", "--count", "60"}));
}

TEST_F(UcxChannelNetns, KilledPeerAcrossNamespacesIsLost) {
  expect_lost(run_ns({"--mode", "killer"}, {"--mode", "victim"}), "on the endpoint to the other helper");
}

}  // namespace
