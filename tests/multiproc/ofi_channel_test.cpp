// The libfabric channel ("ofi"): loading libfabric, address blobs, messages
// in order (small, empty, max-size, gathered, bounced), many in flight, a
// stranger, a peer killed with SIGKILL, and two processes in two network
// namespaces. Skipped where libfabric or its tcp provider isn't usable.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "test_util.hpp"
#include "ofi_test_util.hpp"
#include "transports/ofi/ofi_channel.hpp"
#include "transports/ofi/ofi_lib.hpp"

namespace {
using namespace std::chrono_literals;
using namespace kinet::test::ofi;
using kinet::ErrorCode;
using kinet::transport::Channel;
namespace ofi = kinet::transport::ofi;
using Clock = std::chrono::steady_clock;

std::unique_ptr<Channel> open_or_skip(const std::string& name, uint64_t node, std::string* skip) {
  try {
    return ofi::make_ofi_channel({.provider = "ofi", .name = name}, node);
  } catch (const kinet::Error& e) {
    if (e.code() != ErrorCode::NotSupported) throw;
    *skip = e.what();
    return nullptr;
  }
}
#define OPEN_OR_SKIP(var, name, node)                  \
  std::string var##_skip;                              \
  auto var = open_or_skip(name, node, &var##_skip);    \
  if (!var) GTEST_SKIP() << var##_skip;

// Progresses `chs` until `done` or 60 s (false then).
template <class F>
bool progress_until(std::initializer_list<std::pair<Channel*, Recorder*>> chs, F&& done) {
  const auto end = Clock::now() + 60s;
  kinet::test::IdleBackoff idle;
  while (!done()) {
    if (Clock::now() > end) return false;
    size_t events = 0;
    for (auto& [c, r] : chs) events += c->progress(*r);
    idle(events > 0);
  }
  return true;
}

kinet::Error catch_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const kinet::Error& e) {
    return e;
  }
  return kinet::Error(ErrorCode::BadState, "(nothing thrown)");
}

TEST(OfiLib, MissingLibraryOrSymbolIsNamed) {
  std::string why;
  EXPECT_EQ(ofi::Lib::load("/nonexistent/libfabric.so.1", &why), nullptr);
  EXPECT_EQ(why.rfind("/nonexistent/libfabric.so.1 could not be loaded (", 0), 0u) << why;
  EXPECT_EQ(ofi::Lib::load("libc.so.6", &why), nullptr);
  EXPECT_EQ(why, "libc.so.6 lacks fi_getinfo");
}

TEST(OfiChannel, DescribesItselfAndItsAddress) {
  OPEN_OR_SKIP(a, "rank 0", 0x1122334455667788ull);
  EXPECT_STREQ(a->provider(), "ofi");
  EXPECT_EQ(a->describe().rfind("ofi 1.", 0), 0u) << a->describe();
  EXPECT_EQ(a->max_message(), ofi::kMaxMessage);
  const auto addr = a->address();
  ASSERT_GT(addr.size(), ofi::kAddrHeaderBytes);
  EXPECT_EQ(std::memcmp(addr.data(), "KOFA", 4), 0);
  EXPECT_EQ(addr[4], 1);  // version
  uint64_t node = 0;
  std::memcpy(&node, &addr[16], 8);
  EXPECT_EQ(node, 0x1122334455667788ull);
  if (std::string(a->describe()).find("tcp") != std::string::npos) {
    EXPECT_TRUE(a->ordered()) << a->describe();
  }
}

TEST(OfiChannel, MalformedAddressesAreRejectedNamingThePeer) {
  OPEN_OR_SKIP(a, "rank 0", 1);
  OPEN_OR_SKIP(b, "rank 1", 2);
  const auto good = b->address();
  auto expect_bad = [&](std::vector<uint8_t> blob, const std::string& says) {
    const kinet::Error e = catch_error([&] { a->add_peer(blob, "rank 9"); });
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  };
  expect_bad({}, "0 bytes, less than the 24-byte header");
  expect_bad({good.begin(), good.begin() + 23}, "23 bytes");
  auto v = good;
  v[0] ^= 1;
  expect_bad(v, "not an ofi address");
  v = good;
  v[4] = 2;
  expect_bad(v, "version 2");
  v = good;
  v.push_back(0);  // name length no longer matches the blob
  expect_bad(v, "endpoint name of");
  v = good;
  v.pop_back();
  expect_bad(v, "endpoint name of");
  v = good;
  v[8] ^= 0x7f;  // another address format
  expect_bad(v, "its endpoint uses");
  // The edges that are accepted: the intact blob, once.
  EXPECT_EQ(a->add_peer(good, "rank 1"), 0u);
  expect_bad(good, "already added as rank 1");
  // A failed add_peer took no peer number.
  OPEN_OR_SKIP(c, "rank 2", 3);
  EXPECT_EQ(a->add_peer(c->address(), "rank 2"), 1u);
}

// tcp;ofi_rxm sends a whole max_message() eagerly only with bounce buffers
// that large: the channel sets FI_OFI_RXM_BUFFER_SIZE when the user did not.
// rxm's eager size (a whole channel message eagerly) and its receive path
// (no shared receive context: see kRxmUseSrx), each unless the user chose.
TEST(OfiChannel, SetsRxmEagerSizeAndReceivePathUnlessTheUserDid) {
  const char* before = std::getenv("FI_OFI_RXM_BUFFER_SIZE");
  const std::string user = before ? before : "";
  const char* srx_before = std::getenv("FI_OFI_RXM_USE_SRX");
  const std::string srx_user = srx_before ? srx_before : "";
  OPEN_OR_SKIP(a, "rank 0", 1);
  const char* after = std::getenv("FI_OFI_RXM_BUFFER_SIZE");
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(std::string(after), before ? user : std::string(ofi::kRxmBufferSize));
  EXPECT_GE(std::stoul(ofi::kRxmBufferSize), ofi::kMaxMessage + ofi::kHeaderBytes);
  const char* srx_after = std::getenv("FI_OFI_RXM_USE_SRX");
  ASSERT_NE(srx_after, nullptr);
  EXPECT_EQ(std::string(srx_after), srx_before ? srx_user : std::string(ofi::kRxmUseSrx));
}

TEST(OfiChannel, SendRejectsBadArgumentsAtTheEdge) {
  OPEN_OR_SKIP(a, "rank 0", 1);
  OPEN_OR_SKIP(b, "rank 1", 2);
  const uint32_t pb = a->add_peer(b->address(), "rank 1");
  std::vector<uint8_t> big(a->max_message() + 1);
  iovec v{big.data(), big.size()};
  const kinet::Error e = catch_error([&] { a->send(pb, &v, 1, 1); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("max_message() is " + std::to_string(ofi::kMaxMessage)), std::string::npos)
      << e.what();
  EXPECT_EQ(catch_error([&] { a->send(pb + 1, &v, 1, 1); }).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(catch_error([&] { a->send(pb, nullptr, 1, 1); }).code(), ErrorCode::InvalidArgument);
  // Exactly max_message() is accepted and arrives whole.
  b->add_peer(a->address(), "rank 0");
  v.iov_len = a->max_message();
  big[0] = 0x5a, big[v.iov_len - 1] = 0xa5;
  Recorder ra, rb;
  ASSERT_TRUE(progress_until({{a.get(), &ra}, {b.get(), &rb}}, [&] { return a->send(pb, &v, 1, 7); }));
  ASSERT_TRUE(progress_until({{a.get(), &ra}, {b.get(), &rb}}, [&] { return ra.sent.count(7) && rb.msgs.size() == 1; }));
  EXPECT_TRUE(ra.sent[7]);
  EXPECT_EQ(rb.msgs[0].first, 0u);
  EXPECT_EQ(rb.msgs[0].second, std::vector<uint8_t>(big.begin(), big.begin() + v.iov_len));
}

// Two channels in this process: a stream in order, gathered from up to 9 iov
// entries (more than the tcp provider's iov_limit of 4: the bounce path),
// more sends than the channel keeps in flight (send() says false; retry).
TEST(OfiChannel, ManyMessagesArriveInOrderWhole) {
  OPEN_OR_SKIP(a, "rank 0", 1);
  OPEN_OR_SKIP(b, "rank 1", 2);
  if (!a->ordered()) GTEST_SKIP() << a->describe() << " does not promise order";
  const uint32_t pb = a->add_peer(b->address(), "rank 1");
  b->add_peer(a->address(), "rank 0");
  Recorder ra, rb;
  const uint64_t kN = kinet::test::scaled(2000, 600);  // over the 256 sends kept in flight
  std::vector<std::vector<uint8_t>> data(kN);
  uint64_t next = 0;
  size_t refused = 0;
  const auto end = Clock::now() + 60s;  // under ctest's bound, so a stall reports itself
  while (rb.msgs.size() < kN && Clock::now() < end) {
    while (next < kN) {
      data[next] = pattern(next, pattern_size(next, a->max_message()));
      const int parts = 1 + static_cast<int>(next % 9);
      std::vector<iovec> v(parts);
      size_t at = 0;
      for (int i = 0; i < parts; ++i) {
        const size_t len = i + 1 == parts ? data[next].size() - at : data[next].size() / parts;
        v[i] = {data[next].data() + at, len};
        at += len;
      }
      if (!a->send(pb, v.data(), parts, next)) {
        ++refused;
        break;
      }
      ++next;
    }
    a->progress(ra);
    b->progress(rb);
  }
  ASSERT_EQ(rb.msgs.size(), kN) << "within 60 s: " << next << " posted, " << refused << " refusals, "
                                << ra.sent.size() << " send completions";
  EXPECT_GT(refused, 0u) << "never more sends than the channel keeps in flight";
  for (uint64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(rb.msgs[i].first, 0u);
    ASSERT_EQ(rb.msgs[i].second, data[i]) << "message " << i;
  }
  ASSERT_TRUE(progress_until({{a.get(), &ra}}, [&] { return ra.sent.size() == kN; }));
  for (auto& [t, ok] : ra.sent) EXPECT_TRUE(ok) << t;
  EXPECT_TRUE(ra.lost.empty() && rb.lost.empty() && rb.strangers.empty());
}

// The receive buffers are the endpoint's, shared by its peers. A peer whose
// first message went to on_stranger (it sent before the target added it)
// leaves a gap no later message closes: what it sends next is held, at most
// half of the buffers, and then it is lost, so another peer still gets
// through (every buffer was held, the endpoint received nothing more).
TEST(OfiChannel, APeerWithAGapCannotHoldEveryReceiveBuffer) {
  OPEN_OR_SKIP(t, "target", 1);
  OPEN_OR_SKIP(h, "gap", 2);
  OPEN_OR_SKIP(a, "honest", 3);
  if (!t->ordered()) GTEST_SKIP() << t->describe() << " does not promise order";
  Recorder rt, rh, ra;
  const uint32_t ht = h->add_peer(t->address(), "target");
  std::vector<uint8_t> m(64, 0x42);
  iovec v{m.data(), m.size()};
  // Sends one message (the channel may refuse while it connects).
  auto send = [&](Channel& c, uint32_t peer, uint64_t token, Recorder& r) {
    for (int i = 0; i < 100000; ++i) {
      if (c.send(peer, &v, 1, token)) return true;
      c.progress(r);
      t->progress(rt);
    }
    return false;
  };
  ASSERT_TRUE(send(*h, ht, 1, rh));  // message 0: the target doesn't know the sender yet
  ASSERT_TRUE(progress_until({{t.get(), &rt}, {h.get(), &rh}}, [&] { return rt.strangers.size() == 1; }));
  const uint32_t th = t->add_peer(h->address(), "gap");
  uint64_t sent = 0;
  for (uint64_t i = 0; i < 200 && rt.lost.empty(); ++i) {
    if (send(*h, ht, 2 + i, rh)) ++sent;
  }
  ASSERT_TRUE(progress_until({{t.get(), &rt}, {h.get(), &rh}}, [&] { return !rt.lost.empty(); }))
      << sent << " messages after the gap, none lost the sender";
  EXPECT_EQ(rt.lost[0].first, th);
  EXPECT_NE(rt.lost[0].second.find("held for a gap at message 0"), std::string::npos) << rt.lost[0].second;
  EXPECT_TRUE(rt.msgs.empty());
  const uint32_t at = a->add_peer(t->address(), "target");
  t->add_peer(a->address(), "honest");
  ASSERT_TRUE(send(*a, at, 7, ra));
  ASSERT_TRUE(progress_until({{t.get(), &rt}, {a.get(), &ra}, {h.get(), &rh}}, [&] { return rt.msgs.size() == 1; }))
      << "the honest peer's message never arrived";
}

std::string helper() { return KINET_OFI_HELPER; }

// Starts a helper, connects it to `a` both ways (unless `one_way`); returns
// the helper's peer number in `a`.
uint32_t pair_with(Channel& a, Recorder& ra, Child& h, bool one_way = false) {
  const std::string l = h.next_line(20s);
  if (l.rfind("SKIP", 0) == 0) throw std::runtime_error(l);
  EXPECT_EQ(l.rfind("ADDR ", 0), 0u) << l;
  h.say("PEER " + to_hex(a.address()));
  (void)ra;
  return one_way ? 0 : a.add_peer(from_hex(l.substr(5)), "helper");
}

TEST(OfiChannelTwoProcesses, EchoesComeBackInOrderWhole) {
  OPEN_OR_SKIP(a, "test", 1);
  Child h = Child::start({helper(), "echo"});
  ASSERT_GT(h.pid, 0);
  Recorder ra;
  const uint32_t p = pair_with(*a, ra, h);
  const uint64_t kN = kinet::test::scaled(500, 100);
  std::vector<std::vector<uint8_t>> data(kN);
  uint64_t next = 0;
  const auto end = Clock::now() + 120s;
  while (ra.msgs.size() < kN && Clock::now() < end) {
    while (next < kN && next < ra.msgs.size() + 100) {
      data[next] = pattern(next, pattern_size(next, a->max_message()));
      iovec v{data[next].data(), data[next].size()};
      if (!a->send(p, &v, 1, next)) break;
      ++next;
    }
    a->progress(ra);
  }
  ASSERT_EQ(ra.msgs.size(), kN);
  for (uint64_t i = 0; i < kN; ++i) ASSERT_EQ(ra.msgs[i].second, data[i]) << "echo " << i;
  h.close_in();
  EXPECT_EQ(h.next_line(30s, [&] { a->progress(ra); }), "OK " + std::to_string(kN));
  EXPECT_EQ(h.wait(20s), 0);
  EXPECT_TRUE(ra.lost.empty());
}

// A process this side never added sends a message: on_stranger with its
// bytes, and one with a node id of a known peer but another address (where
// the provider reports sources) is a stranger too.
TEST(OfiChannelTwoProcesses, StrangersAreReportedNotDelivered) {
  OPEN_OR_SKIP(a, "test", 1);
  Recorder ra;
  {
    Child h = Child::start({helper(), "stranger", "--node", "abcdef"});
    ASSERT_GT(h.pid, 0);
    pair_with(*a, ra, h, /*one_way=*/true);
    ASSERT_TRUE(progress_until({{a.get(), &ra}}, [&] { return !ra.strangers.empty(); }));
    EXPECT_TRUE(ra.msgs.empty());
    EXPECT_EQ(ra.strangers[0].first, "ofi node 0x0000000000abcdef (never added)");
    EXPECT_EQ(ra.strangers[0].second, std::vector<uint8_t>({'s', 't', 'r', 'a', 'n', 'g', 'e', 'r'}));  // no header
    EXPECT_EQ(h.next_line(20s, [&] { a->progress(ra); }), "SENT 1");
  }
  // A spoofer: claims node 0x77 that `a` knows as another channel.
  OPEN_OR_SKIP(b, "real 0x77", 0x77);
  a->add_peer(b->address(), "real 0x77");
  Child h = Child::start({helper(), "stranger", "--node", "77"});
  ASSERT_GT(h.pid, 0);
  pair_with(*a, ra, h, true);
  ra.strangers.clear();
  ASSERT_TRUE(progress_until({{a.get(), &ra}}, [&] { return !ra.strangers.empty() || !ra.msgs.empty(); }));
  if (!ra.msgs.empty()) {
    // Without FI_SOURCE the node id in the header is all there is.
    EXPECT_EQ(a->describe().find("tcp"), std::string::npos) << "the tcp provider reports sources";
    GTEST_SKIP() << a->describe() << ": no FI_SOURCE, a spoofed node id is not detected";
  }
  EXPECT_EQ(ra.strangers[0].first, "ofi node 0x0000000000000077 claiming to be real 0x77 from another address");
}

// kill -9 of the peer: the next sends fail with an error completion, then
// on_peer_lost (once) naming the peer and libfabric's reason; later sends
// fail at once. The tcp provider notices only when sending (documented).
TEST(OfiChannelTwoProcesses, KilledPeerFailsTheNextSendsAndIsLostOnce) {
  OPEN_OR_SKIP(a, "test", 1);
  Child h = Child::start({helper(), "echo"});
  ASSERT_GT(h.pid, 0);
  Recorder ra;
  const uint32_t p = pair_with(*a, ra, h);
  uint8_t one = 1;
  iovec v{&one, 1};
  ASSERT_TRUE(progress_until({{a.get(), &ra}}, [&] { return a->send(p, &v, 1, 1); }));  // false while connecting
  ASSERT_TRUE(progress_until({{a.get(), &ra}}, [&] { return ra.msgs.size() == 1 && ra.sent.count(1); }));
  kill(h.pid, SIGKILL);
  EXPECT_EQ(h.wait(20s), 128 + SIGKILL);
  uint64_t token = 2;
  const auto t0 = Clock::now();
  // Keep sending (as the engine's traffic would) until the loss shows.
  const bool lost = progress_until({{a.get(), &ra}}, [&] {
    if (ra.lost.empty() && token < 100000 && a->send(p, &v, 1, token)) ++token;
    return !ra.lost.empty();
  });
  ASSERT_TRUE(lost) << "no on_peer_lost within 20 s of sending to a killed peer";
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  std::printf("peer lost after %lld ms, %llu sends: %s\n", static_cast<long long>(ms),
              static_cast<unsigned long long>(token - 2), ra.lost[0].second.c_str());
  EXPECT_EQ(ra.lost[0].first, p);
  EXPECT_EQ(ra.lost[0].second.rfind("fi_sendmsg to helper ", 0), 0u) << ra.lost[0].second;
  // Every send so far completes, at least one not ok; one loss report only.
  ASSERT_TRUE(progress_until({{a.get(), &ra}}, [&] { return ra.sent.size() == token - 1; }));
  size_t failed = 0;
  for (auto& [t, ok] : ra.sent) failed += !ok;
  EXPECT_GT(failed, 0u);
  ASSERT_TRUE(a->send(p, &v, 1, 999999));
  ASSERT_TRUE(progress_until({{a.get(), &ra}}, [&] { return ra.sent.count(999999); }));
  EXPECT_FALSE(ra.sent[999999]);
  EXPECT_EQ(ra.lost.size(), 1u);
}

}  // namespace
