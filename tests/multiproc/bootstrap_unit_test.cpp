// Bootstrap pieces in one process: the unique ID's text form and checks,
// interface selection, the frame reader's limits, argument checks, and a
// whole job whose ranks are threads (the TSan build runs this one).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/socket.hpp"
#include "kinet/bootstrap.hpp"
#include "test_util.hpp"

namespace {
using namespace std::chrono_literals;
using kinet::ErrorCode;

using kinet::test::expect_error;

struct Loopback : ::testing::Test {
  void SetUp() override { setenv("KINET_SOCKET_IFNAME", "lo", 1); }
  void TearDown() override { unsetenv("KINET_SOCKET_IFNAME"); }
};

TEST(UniqueId, TextRoundTripAndChecks) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto id = kinet::UniqueId::create();
  unsetenv("KINET_SOCKET_IFNAME");
  std::string s = id.to_string();
  ASSERT_EQ(s.size(), 256u);
  auto back = kinet::UniqueId::from_string(s);
  EXPECT_EQ(std::memcmp(&back, &id, sizeof id), 0);
  EXPECT_EQ(id.address_string().rfind("127.0.0.1:", 0), 0u) << id.address_string();
  // Two ids never share a secret.
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto id2 = kinet::UniqueId::create();
  unsetenv("KINET_SOCKET_IFNAME");
  EXPECT_NE(std::memcmp(id.secret, id2.secret, sizeof id.secret), 0);

  expect_error([&] { kinet::UniqueId::from_string(s.substr(1)); }, ErrorCode::InvalidArgument, "255 characters, expected 256");
  std::string bad = s;
  bad[255] = 'g';
  expect_error([&] { kinet::UniqueId::from_string(bad); }, ErrorCode::InvalidArgument, "character 255 is not a hex digit");
  kinet::UniqueId x = id;
  x.magic ^= 1;
  expect_error([&] { kinet::UniqueId::from_string(x.to_string()); }, ErrorCode::InvalidArgument, "is not a kinet unique id");
  x = id;
  x.version = 2;
  expect_error([&] { x.validate(); }, ErrorCode::InvalidArgument, "version 2");
  x = id;
  x.family = 1;
  expect_error([&] { x.validate(); }, ErrorCode::InvalidArgument, "address family 1");
  x = id;
  x.port = 0;
  expect_error([&] { x.validate(); }, ErrorCode::InvalidArgument, "port 0");
}

TEST(UniqueId, PortFromEnvironment) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  setenv("KINET_BOOTSTRAP_PORT", "65536", 1);
  expect_error([] { kinet::UniqueId::create(); }, ErrorCode::InvalidArgument, "KINET_BOOTSTRAP_PORT=65536");
  // A port that is free now: take an ephemeral one and release it.
  auto probe = kinet::bs::listen_on(kinet::bs::pick_interface().addr, 0, nullptr);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(probe.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  kinet::bs::SockAddr a;
  a.ss = ss;
  a.len = len;
  uint16_t port = a.port();
  probe.reset();
  setenv("KINET_BOOTSTRAP_PORT", std::to_string(port).c_str(), 1);
  auto id = kinet::UniqueId::create();
  EXPECT_EQ(id.port, port);
  unsetenv("KINET_BOOTSTRAP_PORT");
  unsetenv("KINET_SOCKET_IFNAME");
}

TEST(Interface, SelectionSyntax) {
  using kinet::bs::ifname_selected;
  EXPECT_TRUE(ifname_selected("eth", "eth0"));
  EXPECT_FALSE(ifname_selected("eth", "et"));
  EXPECT_TRUE(ifname_selected("ib,eth", "eth1"));
  EXPECT_FALSE(ifname_selected("ib,eth", "lo"));
  EXPECT_TRUE(ifname_selected("=eth0", "eth0"));
  EXPECT_FALSE(ifname_selected("=eth0", "eth01"));
  EXPECT_FALSE(ifname_selected("^lo,docker", "lo"));
  EXPECT_FALSE(ifname_selected("^lo,docker", "docker0"));
  EXPECT_TRUE(ifname_selected("^lo,docker", "eth0"));
  EXPECT_FALSE(ifname_selected("^=eth0", "eth0"));
  EXPECT_TRUE(ifname_selected("^=eth0", "eth00"));
  EXPECT_FALSE(ifname_selected("", "eth0"));  // an empty list selects nothing
}

TEST(Interface, NoMatchIsNotFoundNamingTheVariable) {
  setenv("KINET_SOCKET_IFNAME", "=kinet-no-such-if", 1);
  expect_error([] { kinet::bs::pick_interface(); }, ErrorCode::NotFound, "KINET_SOCKET_IFNAME==kinet-no-such-if");
  expect_error([] { kinet::UniqueId::create(); }, ErrorCode::NotFound, "(interfaces: ");
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  EXPECT_EQ(kinet::bs::pick_interface().name, "lo");
  unsetenv("KINET_SOCKET_IFNAME");
}

// ---- frames -------------------------------------------------------------------
std::vector<uint8_t> frame(uint16_t kind, uint32_t tag, const std::vector<uint8_t>& body, uint64_t len_claim = ~0ull) {
  kinet::bs::FrameHeader h{kind, 0, tag, len_claim == ~0ull ? body.size() : len_claim};
  std::vector<uint8_t> v(sizeof h);
  std::memcpy(v.data(), &h, sizeof h);
  v.insert(v.end(), body.begin(), body.end());
  return v;
}

TEST(FrameReader, ReassemblesAcrossAnySplit) {
  std::vector<uint8_t> stream;
  std::vector<uint8_t> b1(1000), b3(77);
  for (size_t i = 0; i < b1.size(); ++i) b1[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t i = 0; i < b3.size(); ++i) b3[i] = static_cast<uint8_t>(i * 3 + 2);
  for (auto& f : {frame(1, 5, b1), frame(2, 6, {}), frame(1, 7, b3)}) stream.insert(stream.end(), f.begin(), f.end());
  for (size_t chunk : {size_t(1), size_t(15), size_t(16), size_t(17), size_t(1016), stream.size()}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    kinet::bs::FrameReader rd(1 << 20);
    std::deque<kinet::bs::Msg> out;
    std::string why;
    for (size_t off = 0; off < stream.size(); off += chunk)
      ASSERT_TRUE(rd.feed(stream.data() + off, std::min(chunk, stream.size() - off), out, why)) << why;
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0].tag, 5u);
    EXPECT_EQ(out[0].data, b1);
    EXPECT_EQ(out[1].kind, kinet::bs::FrameKind::Collective);
    EXPECT_TRUE(out[1].data.empty());  // a 0-byte frame completes with its header
    EXPECT_EQ(out[2].data, b3);
    EXPECT_FALSE(rd.mid_frame());
  }
}

TEST(FrameReader, LengthLimitAtItsEdge) {
  std::deque<kinet::bs::Msg> out;
  std::string why;
  kinet::bs::FrameReader ok(100);
  auto f = frame(1, 1, std::vector<uint8_t>(100, 9));
  EXPECT_TRUE(ok.feed(f.data(), f.size(), out, why)) << why;
  EXPECT_EQ(out.size(), 1u);
  kinet::bs::FrameReader over(100);
  auto g = frame(1, 1, {}, 101);
  EXPECT_FALSE(over.feed(g.data(), g.size(), out, why));
  EXPECT_EQ(why, "frame of 101 bytes exceeds the limit of 100 bytes (KINET_BOOTSTRAP_MAX_FRAME)");
  // A huge claim is refused from the header alone: nothing is allocated for it.
  kinet::bs::FrameReader huge(uint64_t(1) << 30);
  auto h = frame(1, 1, {}, ~0ull - 1);
  EXPECT_FALSE(huge.feed(h.data(), h.size(), out, why));
  EXPECT_NE(why.find("exceeds the limit"), std::string::npos);
}

TEST(FrameReader, MalformedHeaderAndTruncation) {
  std::deque<kinet::bs::Msg> out;
  std::string why;
  for (uint16_t kind : {uint16_t(0), uint16_t(3), uint16_t(0xffff)}) {
    kinet::bs::FrameReader rd(100);
    auto f = frame(kind, 1, {1, 2});
    EXPECT_FALSE(rd.feed(f.data(), f.size(), out, why)) << kind;
    EXPECT_NE(why.find("malformed frame header (kind " + std::to_string(kind)), std::string::npos) << why;
  }
  kinet::bs::FrameReader flags(100);
  auto f = frame(1, 1, {});
  f[2] = 1;  // flags
  EXPECT_FALSE(flags.feed(f.data(), f.size(), out, why));
  EXPECT_NE(why.find("flags 1"), std::string::npos) << why;
  // Truncated: half a frame, then the peer closes; the reader reports it.
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  auto t = frame(1, 1, std::vector<uint8_t>(50, 1));
  ASSERT_EQ(write(sv[1], t.data(), 30), 30);
  close(sv[1]);
  kinet::bs::FrameReader rd(100);
  out.clear();
  EXPECT_EQ(rd.pump(sv[0], out, why), kinet::bs::FrameReader::Pump::Eof);
  EXPECT_TRUE(rd.mid_frame());
  EXPECT_TRUE(out.empty());
  close(sv[0]);
}

// ---- a job of threads ---------------------------------------------------------------
// Runs fn(rank) in n threads, each with its own Bootstrap; returns the
// messages of the errors they threw ("" for none).
template <class F>
std::vector<std::string> run_threads(int n, const kinet::UniqueId& id, std::chrono::milliseconds t, F fn) {
  std::vector<std::string> errs(n);
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        auto bs = kinet::Bootstrap::init(id, r, n, t);
        fn(*bs);
      } catch (const kinet::Error& e) {
        errs[r] = std::string(kinet::error_code_name(e.code())) + ": " + e.what();
      }
    });
  for (auto& x : th) x.join();
  return errs;
}

TEST_F(Loopback, ThreadsAllgatherP2pAndArgumentChecks) {
  auto id = kinet::UniqueId::create();
  const int n = 4;
  auto errs = run_threads(n, id, 10s, [&](kinet::Bootstrap& bs) {
    EXPECT_EQ(bs.size(), n);
    std::vector<uint8_t> mine(bs.rank() * 5, static_cast<uint8_t>(bs.rank() + 1));
    for (int round = 0; round < 20; ++round) {
      auto all = bs.allgather(mine.data(), mine.size());
      for (int j = 0; j < n; ++j) ASSERT_EQ(all[j], std::vector<uint8_t>(j * 5, static_cast<uint8_t>(j + 1)));
    }
    int next = (bs.rank() + 1) % n, prev = (bs.rank() + n - 1) % n;
    for (uint32_t k = 0; k < 50; ++k) bs.send(next, 3, &k, sizeof k);
    for (uint32_t k = 0; k < 50; ++k) {
      auto v = bs.recv(prev, 3);
      ASSERT_EQ(v.size(), sizeof k);
      uint32_t got;
      std::memcpy(&got, v.data(), sizeof got);
      ASSERT_EQ(got, k) << "messages of one tag arrive in order";
    }
    expect_error([&] { bs.send(bs.rank(), 1, nullptr, 0); }, ErrorCode::InvalidArgument, "peer " + std::to_string(bs.rank()) + " is not another rank");
    expect_error([&] { bs.recv(n, 1); }, ErrorCode::InvalidArgument, "peer 4 is not another rank (0..3)");
    expect_error([&] { bs.send(-1, 1, nullptr, 0); }, ErrorCode::InvalidArgument, "peer -1 is not another rank");
    expect_error([&] { bs.send(next, 1, nullptr, 1); }, ErrorCode::InvalidArgument, "null data of 1 bytes");
    bs.barrier();
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errs[r], "") << "rank " << r;
}

// cancel(): the rendezvous stops (a rank that comes later fails to init,
// within its bound), a second cancel or another id finds nothing, and a used
// rendezvous that ended is not "running".
TEST_F(Loopback, CancelledRendezvousRefusesLateRanks) {
  auto unused = kinet::UniqueId::create();
  auto other = kinet::UniqueId::create();
  EXPECT_TRUE(kinet::UniqueId::cancel(unused));
  EXPECT_FALSE(kinet::UniqueId::cancel(unused));
  const auto t0 = std::chrono::steady_clock::now();
  auto errs = run_threads(1, unused, 1s, [](kinet::Bootstrap&) {});
  EXPECT_NE(errs[0], "") << "init at a cancelled rendezvous succeeded";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  auto ok = run_threads(2, other, 10s, [](kinet::Bootstrap& bs) { bs.barrier(); });
  EXPECT_EQ(ok[0], "");
  EXPECT_EQ(ok[1], "");
  kinet::UniqueId forged = other;
  forged.secret[0] ^= 1;
  EXPECT_FALSE(kinet::UniqueId::cancel(forged));
}

TEST_F(Loopback, RecvTimeoutNamesPeerAndTag) {
  auto id = kinet::UniqueId::create();
  auto errs = run_threads(2, id, 300ms, [&](kinet::Bootstrap& bs) {
    if (bs.rank() == 1) {
      std::this_thread::sleep_for(2s);  // connected but silent well past rank 0's bound
      return;
    }
    auto t0 = std::chrono::steady_clock::now();
    expect_error([&] { bs.recv(1, 42); }, ErrorCode::System,
                 "bootstrap rank 0/2: timeout after 300 ms waiting for tag 42 from rank 1: nothing from rank 1 (127.0.0.1:");
    auto el = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(el, 300ms);
    EXPECT_LT(el, 1500ms);  // generous: sanitizer builds on a loaded machine
  });
  EXPECT_EQ(errs[0], "");
  EXPECT_EQ(errs[1], "");
}

// A peer that goes away is reported as lost, naming it, at once (not after the bound).
TEST_F(Loopback, ClosedPeerIsLostNotATimeout) {
  auto id = kinet::UniqueId::create();
  auto errs = run_threads(2, id, 5s, [&](kinet::Bootstrap& bs) {
    if (bs.rank() == 1) return;  // destroys its Bootstrap: closes the connection
    auto t0 = std::chrono::steady_clock::now();
    expect_error([&] { bs.recv(1, 1); }, ErrorCode::System, "rank 1 (127.0.0.1:");
    expect_error([&] { bs.allgather(nullptr, 0); }, ErrorCode::System, "in allgather #1: rank 1 (127.0.0.1:");
    expect_error([&] { bs.barrier(); }, ErrorCode::System, "lost: connection closed (peer lost)");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  });
  EXPECT_EQ(errs[0], "");
}

TEST(Bootstrap, InitArgumentChecks) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto id = kinet::UniqueId::create();
  unsetenv("KINET_SOCKET_IFNAME");
  expect_error([&] { kinet::Bootstrap::init(id, 0, 0, 1s); }, ErrorCode::InvalidArgument, "nranks 0 is not in 1..2^20");
  expect_error([&] { kinet::Bootstrap::init(id, 2, 2, 1s); }, ErrorCode::InvalidArgument, "rank 2 is not in 0..1");
  expect_error([&] { kinet::Bootstrap::init(id, -1, 2, 1s); }, ErrorCode::InvalidArgument, "rank -1 is not in 0..1");
  expect_error([&] { kinet::Bootstrap::init(id, 0, 1, 0ms); }, ErrorCode::InvalidArgument, "timeout 0 ms");
  kinet::UniqueId bad = id;
  bad.magic = 0;
  expect_error([&] { kinet::Bootstrap::init(bad, 0, 1, 1s); }, ErrorCode::InvalidArgument, "not a kinet unique id");
}

TEST(Bootstrap, SingleRankJob) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto id = kinet::UniqueId::create();
  auto bs = kinet::Bootstrap::init(id, 0, 1, 5s);
  unsetenv("KINET_SOCKET_IFNAME");
  uint8_t x = 9;
  auto all = bs->allgather(&x, 1);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], std::vector<uint8_t>{9});
  bs->barrier();
}

// A timeout too large for a deadline (milliseconds::max()) saturates at 30
// days: init and the calls after it work instead of timing out at once.
TEST(Bootstrap, HugeTimeoutSaturates) {
  setenv("KINET_SOCKET_IFNAME", "lo", 1);
  auto id = kinet::UniqueId::create();
  auto bs = kinet::Bootstrap::init(id, 0, 1, std::chrono::milliseconds::max());
  unsetenv("KINET_SOCKET_IFNAME");
  EXPECT_EQ(bs->timeout(), std::chrono::hours(24 * 30));
  bs->barrier();
  uint8_t x = 3;
  EXPECT_EQ(bs->allgather(&x, 1).size(), 1u);
}

TEST_F(Loopback, RootRefusesDuplicateRankAndNranksMismatch) {
  auto id = kinet::UniqueId::create();
  std::string e_dup, e_n;
  std::unique_ptr<kinet::Bootstrap> b0, b1;
  std::thread t0([&] { b0 = kinet::Bootstrap::init(id, 0, 2, 10s); });
  // Give rank 0 time to register so the duplicate comes second.
  std::this_thread::sleep_for(200ms);
  expect_error([&] { kinet::Bootstrap::init(id, 0, 2, 10s); }, ErrorCode::InvalidArgument, "refused the registration: rank already registered");
  expect_error([&] { kinet::Bootstrap::init(id, 1, 3, 10s); }, ErrorCode::InvalidArgument, "refused the registration: nranks differs");
  b1 = kinet::Bootstrap::init(id, 1, 2, 10s);
  t0.join();
  ASSERT_TRUE(b0 && b1);
  b1->send(0, 1, "hi", 2);
  EXPECT_EQ(b0->recv(1, 1), (std::vector<uint8_t>{'h', 'i'}));
}

}  // namespace

namespace {
namespace bs = kinet::bs;
// Registers rank `rank` of `nranks` with id's root by hand, announcing the
// listener at `mine`: returns the root's table (every rank's address) and,
// in *h, the hello it sent, for the handshakes with the other ranks.
std::vector<bs::WireAddr> register_by_hand(const kinet::UniqueId& id, int rank, int nranks, const bs::SockAddr& mine,
                                           bs::Clock::time_point d, bs::Hello* h) {
  bs::WireAddr rw{};
  rw.family = id.family;
  rw.port = id.port;
  std::memcpy(rw.addr, id.addr, sizeof rw.addr);
  bs::Fd root = bs::connect_to(bs::from_wire(rw, "test"), d, "root");
  *h = bs::Hello{};
  h->magic = bs::Hello::kMagic;
  h->version = bs::Hello::kVersion;
  h->kind = static_cast<uint16_t>(bs::HelloKind::ToRoot);
  h->rank = static_cast<uint32_t>(rank);
  h->nranks = static_cast<uint32_t>(nranks);
  h->timeout_ms = 5000;
  std::memcpy(h->secret, id.secret, sizeof h->secret);
  h->addr = bs::to_wire(mine);
  bs::write_all(root.get(), h, sizeof *h, d, "root");
  bs::Hello reply{};
  std::vector<bs::WireAddr> table(nranks);
  EXPECT_TRUE(bs::read_all(root.get(), &reply, sizeof reply, d, "root"));
  EXPECT_EQ(reply.status, 0u);
  EXPECT_TRUE(bs::read_all(root.get(), table.data(), table.size() * sizeof table[0], d, "root"));
  return table;
}
}  // namespace

namespace {
// Rank 1 of a 2-rank job played by hand, to present bad handshakes and bad
// frames to a real rank 0.
TEST_F(Loopback, PeerRefusesBadHandshakesAndOversizedFrames) {
  namespace bs = kinet::bs;
  setenv("KINET_BOOTSTRAP_MAX_FRAME", "1000", 1);
  auto id = kinet::UniqueId::create();
  std::string err0;
  std::vector<uint8_t> first;
  ::testing::internal::CaptureStderr();
  std::thread t0([&] {
    try {
      auto b0 = kinet::Bootstrap::init(id, 0, 2, 5s);
      first = b0->recv(1, 9);
      b0->recv(1, 9);
    } catch (const kinet::Error& e) {
      err0 = std::string(kinet::error_code_name(e.code())) + ": " + e.what();
    }
  });
  const auto d = bs::Clock::now() + 5s;
  bs::SockAddr mine;
  bs::Fd lfd = bs::listen_on(bs::pick_interface().addr, 0, &mine);
  bs::Hello h{};
  const auto table = register_by_hand(id, 1, 2, mine, d, &h);
  ASSERT_EQ(table.size(), 2u);
  const bs::SockAddr rank0 = bs::from_wire(table[0], "table");

  auto refused = [&](bs::Hello bad) {
    bs::Fd fd = bs::connect_to(rank0, d, "rank 0");
    bs::write_all(fd.get(), &bad, sizeof bad, d, "rank 0");
    uint8_t b;
    return !bs::read_all(fd.get(), &b, 1, d, "rank 0");  // closed by rank 0
  };
  h.kind = static_cast<uint16_t>(bs::HelloKind::ToPeer);
  bs::Hello bad = h;
  bad.secret[0] ^= 0x80;
  EXPECT_TRUE(refused(bad));
  bad = h;
  bad.rank = 0;
  EXPECT_TRUE(refused(bad));
  bad = h;
  bad.nranks = 3;
  EXPECT_TRUE(refused(bad));

  bs::Fd fd = bs::connect_to(rank0, d, "rank 0");
  bs::write_all(fd.get(), &h, sizeof h, d, "rank 0");
  std::vector<uint8_t> body(1000, 0x5a);  // exactly the limit: delivered
  bs::FrameHeader fh{static_cast<uint16_t>(bs::FrameKind::User), 0, 9, body.size()};
  bs::write_all(fd.get(), &fh, sizeof fh, d, "rank 0");
  bs::write_all(fd.get(), body.data(), body.size(), d, "rank 0");
  fh.len = 1001;  // one over: refused from the header
  bs::write_all(fd.get(), &fh, sizeof fh, d, "rank 0");
  t0.join();
  std::string log = ::testing::internal::GetCapturedStderr();
  unsetenv("KINET_BOOTSTRAP_MAX_FRAME");
  EXPECT_EQ(first, body);
  EXPECT_EQ(err0, "system error: bootstrap rank 0/2: waiting for tag 9 from rank 1: rank 1 (" + mine.str() +
                      ") lost: frame of 1001 bytes exceeds the limit of 1000 bytes (KINET_BOOTSTRAP_MAX_FRAME)");
  EXPECT_NE(log.find("(claims rank 1 of 2): wrong secret"), std::string::npos) << log;
  EXPECT_NE(log.find("(claims rank 0 of 2): rank out of range"), std::string::npos) << log;
  EXPECT_NE(log.find("(claims rank 1 of 3): nranks differs"), std::string::npos) << log;
}
}  // namespace

namespace {
TEST_F(Loopback, Ipv6JobAndFamilyChecks) {
  setenv("KINET_SOCKET_FAMILY", "AF_INET7", 1);
  expect_error([] { kinet::bs::pick_interface(); }, ErrorCode::InvalidArgument, "KINET_SOCKET_FAMILY=AF_INET7 is not AF_INET or AF_INET6");
  setenv("KINET_SOCKET_FAMILY", "AF_INET6", 1);
  kinet::bs::Interface lo6;
  try {
    lo6 = kinet::bs::pick_interface();
  } catch (const kinet::Error& e) {
    unsetenv("KINET_SOCKET_FAMILY");
    GTEST_SKIP() << "no IPv6 on lo: " << e.what();
  }
  EXPECT_EQ(lo6.addr.ss.ss_family, AF_INET6);
  auto id = kinet::UniqueId::create();
  EXPECT_EQ(id.family, AF_INET6);
  EXPECT_EQ(id.address_string().rfind("[::1]:", 0), 0u) << id.address_string();
  auto errs = run_threads(3, id, 10s, [&](kinet::Bootstrap& bs) {
    int32_t mine = bs.rank() * 11;
    auto all = bs.allgather(&mine, sizeof mine);
    for (int j = 0; j < 3; ++j) {
      int32_t v = -1;
      ASSERT_EQ(all[j].size(), sizeof v);
      std::memcpy(&v, all[j].data(), sizeof v);
      EXPECT_EQ(v, j * 11);
    }
  });
  unsetenv("KINET_SOCKET_FAMILY");
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errs[r], "") << "rank " << r;
}
}  // namespace

namespace {
namespace bs = kinet::bs;
using Clock = std::chrono::steady_clock;

// Joins `id` as rank `rank` of `nranks` by hand (the highest rank: it
// connects to every other, nobody connects to it) and returns its
// connections, indexed by rank: a peer that sends whatever a test wants.
std::vector<bs::Fd> join_by_hand(const kinet::UniqueId& id, int rank, int nranks) {
  const auto d = bs::Clock::now() + 5s;
  bs::SockAddr mine;
  bs::Fd lfd = bs::listen_on(bs::pick_interface().addr, 0, &mine);
  bs::Hello h{};
  const auto table = register_by_hand(id, rank, nranks, mine, d, &h);
  h.kind = static_cast<uint16_t>(bs::HelloKind::ToPeer);
  std::vector<bs::Fd> to(nranks);
  for (int j = 0; j < rank; ++j) {
    to[j] = bs::connect_to(bs::from_wire(table[j], "table"), d, "rank " + std::to_string(j));
    bs::write_all(to[j].get(), &h, sizeof h, d, "rank " + std::to_string(j));
  }
  return to;
}

// Streams empty User frames of `tag` into `fd` until `stop` or `bound` or
// the peer closes; returns the frames sent.
long long flood(int fd, uint32_t tag, const std::atomic<bool>& stop, std::chrono::milliseconds bound) {
  std::vector<bs::FrameHeader> burst(4096, bs::FrameHeader{static_cast<uint16_t>(bs::FrameKind::User), 0, tag, 0});
  const auto end = Clock::now() + bound;
  long long frames = 0;
  while (!stop && Clock::now() < end) {
    try {
      bs::write_all(fd, burst.data(), burst.size() * sizeof burst[0], Clock::now() + 1s, "flood");
    } catch (const kinet::Error&) {
      break;  // closed by the receiver
    }
    frames += static_cast<long long>(burst.size());
  }
  return frames;
}

// Rank 0 of `nranks`, in a thread: init with `bound`, then a receive of tag
// 42 from rank 1 that must fail with `want` (*err: the message, *el: how long
// the receive took); sets *stop when done.
std::thread rank0_recv_fails(const kinet::UniqueId& id, int nranks, std::chrono::milliseconds bound,
                             const std::string& want, std::string* err, Clock::duration* el,
                             std::atomic<bool>* stop) {
  return std::thread([=] {
    try {
      auto b0 = kinet::Bootstrap::init(id, 0, nranks, bound);
      const auto t = Clock::now();
      *err = expect_error([&] { b0->recv(1, 42); }, ErrorCode::System, want);
      *el = Clock::now() - t;
    } catch (const kinet::Error& e) {
      ADD_FAILURE() << "init: " << e.what();
    }
    *stop = true;
  });
}

// A receive's bound holds while another peer keeps sending (frames of
// another tag): the deadline was only checked when poll() found nothing, so
// rank 2's stream stretched rank 0's 400 ms wait for rank 1 without end.
TEST_F(Loopback, RecvBoundHoldsWhileAnotherPeerKeepsSending) {
  auto id = kinet::UniqueId::create();
  std::atomic<bool> stop{false};
  std::string e0;
  auto el = Clock::duration::max();
  std::thread t1([&] {  // rank 1: connected, silent
    try {
      auto b1 = kinet::Bootstrap::init(id, 1, 3, 5s);
      while (!stop) std::this_thread::sleep_for(10ms);
    } catch (const kinet::Error&) {
    }
  });
  std::thread t0 = rank0_recv_fails(id, 3, 400ms, "timeout after 400 ms waiting for tag 42 from rank 1: nothing from rank 1 (",
                                     &e0, &el, &stop);
  auto to = join_by_hand(id, 2, 3);
  const long long frames = flood(to[0].get(), 7, stop, 2s);
  stop = true;
  t0.join();
  t1.join();
  EXPECT_GT(frames, 0);
  EXPECT_LT(el, 1500ms) << "a 400 ms recv returned after " << std::chrono::duration_cast<std::chrono::milliseconds>(el).count()
                        << " ms while rank 2 streamed " << frames << " frames";
}

// Messages nobody receives are bounded per peer (4 x MAX_FRAME, at least
// 64 MiB): past it the flooding peer is lost, naming the limit, long before
// the wait's bound (the inbox grew without limit).
TEST_F(Loopback, UnreceivedMessagesAreBoundedPerPeer) {
  setenv("KINET_BOOTSTRAP_MAX_FRAME", "1024", 1);
  auto id = kinet::UniqueId::create();
  std::atomic<bool> stop{false};
  std::string e0;
  auto el = Clock::duration::max();
  std::thread t0 = rank0_recv_fails(id, 2, 10s, "waiting for tag 42 from rank 1: rank 1 (", &e0, &el, &stop);
  auto to = join_by_hand(id, 1, 2);
  flood(to[0].get(), 7, stop, 12s);
  stop = true;
  t0.join();
  unsetenv("KINET_BOOTSTRAP_MAX_FRAME");
  EXPECT_NE(e0.find(" bytes of messages not received here yet, over the limit of 67108864 "
                    "(4 x KINET_BOOTSTRAP_MAX_FRAME, at least 64 MiB)"),
            std::string::npos)
      << e0;
  EXPECT_LT(el, 10s);  // the cap ended it, not the bound (slow under sanitizers: 1.4M frames)
}

// A send that times out after part of its frame went out closes the
// connection: the next send is refused naming why, and the receiver sees a
// frame cut short. (The retry used to be spliced into the old frame's body:
// the receiver got one blob of old prefix + new header + new data.)
TEST_F(Loopback, SendTimeoutMidFrameClosesTheConnection) {
  auto id = kinet::UniqueId::create();
  const size_t n = 64u << 20;  // more than loopback's socket buffers hold
  auto errs = run_threads(2, id, 400ms, [&](kinet::Bootstrap& b) {
    if (b.rank() == 0) {
      std::vector<uint8_t> a(n, 0xAA);
      expect_error([&] { b.send(1, 1, a.data(), a.size()); }, ErrorCode::System,
                   "timeout after 400 ms sending tag 1 to rank 1: rank 1 (127.0.0.1:");
      std::this_thread::sleep_for(300ms);  // rank 1 reads now
      expect_error([&] { b.send(1, 1, a.data(), 8); }, ErrorCode::System,
                   "lost: timeout in the middle of a frame (sending tag 1 to rank 1)");
      return;
    }
    std::this_thread::sleep_for(600ms);
    expect_error([&] { b.recv(0, 1); }, ErrorCode::System,
                 "waiting for tag 1 from rank 0: rank 0 (127.0.0.1:");
    expect_error([&] { b.recv(0, 1); }, ErrorCode::System, "lost: connection closed in the middle of a frame");
  });
  EXPECT_EQ(errs[0], "");
  EXPECT_EQ(errs[1], "");
}

// Small messages go both ways without Nagle + delayed-ACK stalls: the
// accepted side lacked TCP_NODELAY and a frame went out as two send()s
// (about 40 ms a round trip: 100 took 4 s).
TEST_F(Loopback, SmallMessagePingPongIsFastBothWays) {
  auto id = kinet::UniqueId::create();
  const int rounds = 100;
  Clock::duration took[2] = {Clock::duration::max(), Clock::duration::max()};
  auto errs = run_threads(2, id, 10s, [&](kinet::Bootstrap& b) {
    std::vector<uint8_t> m(64, 7);
    const int other = 1 - b.rank();
    for (int starter = 0; starter < 2; ++starter) {
      b.barrier();
      const auto t0 = Clock::now();
      for (int i = 0; i < rounds; ++i) {
        if (b.rank() == starter) {
          b.send(other, 5, m);
          ASSERT_EQ(b.recv(other, 5), m);
        } else {
          ASSERT_EQ(b.recv(other, 5), m);
          b.send(other, 5, m);
        }
      }
      if (b.rank() == starter) took[starter] = Clock::now() - t0;
    }
  });
  EXPECT_EQ(errs[0], "");
  EXPECT_EQ(errs[1], "");
  EXPECT_LT(took[0], 1s) << "100 round trips started by rank 0";
  EXPECT_LT(took[1], 1s) << "100 round trips started by rank 1";
}

// allgather refuses a blob over KINET_BOOTSTRAP_MAX_FRAME as send does,
// before sending anything: the peers used to refuse the frame and drop the
// connection ("peer lost" instead of the caller's mistake). Rank 1 sees no
// frame (a timeout, not a lost peer) and the connection stays usable.
TEST_F(Loopback, AllgatherAboveMaxFrameIsRefusedLikeSend) {
  setenv("KINET_BOOTSTRAP_MAX_FRAME", "1024", 1);
  auto id = kinet::UniqueId::create();
  auto errs = run_threads(2, id, 500ms, [&](kinet::Bootstrap& b) {
    std::vector<uint8_t> big(1025, 1), small(8, 2);
    if (b.rank() == 0) {
      expect_error([&] { b.allgather(big.data(), big.size()); }, ErrorCode::InvalidArgument,
                   "bootstrap rank 0/2: allgather: 1025 bytes exceed KINET_BOOTSTRAP_MAX_FRAME (1024)");
      b.send(1, 3, small);
      std::this_thread::sleep_for(1s);  // rank 1's allgather must time out, not see a close
    } else {
      expect_error([&] { b.allgather(small.data(), small.size()); }, ErrorCode::System,
                   "timeout after 500 ms in allgather #1: nothing from rank 0");
      EXPECT_EQ(b.recv(0, 3), small);
    }
  });
  unsetenv("KINET_BOOTSTRAP_MAX_FRAME");
  EXPECT_EQ(errs[0], "");
  EXPECT_EQ(errs[1], "");
}

// KINET_BOOTSTRAP_TIMEOUT_MS of 2^63 and more saturates at 30 days, as
// init's argument does (it wrapped to a negative count: init then failed
// with "timeout -1 ms").
TEST(Bootstrap, HugeTimeoutFromEnvironmentSaturates) {
  for (const char* v : {"9223372036854775808", "18446744073709551615", "2592000001"}) {
    setenv("KINET_BOOTSTRAP_TIMEOUT_MS", v, 1);
    EXPECT_EQ(kinet::Bootstrap::default_timeout(), std::chrono::hours(24 * 30)) << v;
  }
  setenv("KINET_BOOTSTRAP_TIMEOUT_MS", "2592000000", 1);
  EXPECT_EQ(kinet::Bootstrap::default_timeout(), std::chrono::hours(24 * 30));
  unsetenv("KINET_BOOTSTRAP_TIMEOUT_MS");
  EXPECT_EQ(kinet::Bootstrap::default_timeout(), 30000ms);
}
}  // namespace
