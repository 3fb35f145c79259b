// The requester side of the TCP fabric against a hostile or broken responder
// process, played in-process by a scripted server on loopback that speaks the
// wire protocol (fabric/wire.hpp) through a TcpLink. Each misbehaviour must
// end in an error CQE (or a to_rtr error) naming the peer and what it did,
// within KINET_EMU_PEER_TIMEOUT_MS, with no byte of local memory touched.
// At the end, the other way round: a raw requester against this process's
// responder (held answers, Flush, ack_later where it does not belong).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "bootstrap/socket.hpp"
#include "fabric/endpoint.hpp"
#include "fabric/remote_fabric.hpp"
#include "fabric/tcp_link.hpp"
#include "fabric/wire.hpp"
#include "providers/emu/prm.hpp"
#include "kinet/kinet.hpp"
#include "test_util.hpp"

namespace {
namespace dev = kinet::dev;
namespace fab = kinet::fabric;
using kinet::Status;
using namespace std::chrono_literals;
constexpr auto X = dev::Sharing::Exclusive;
constexpr int kPeerTimeoutMs = 1000;

// Before any device exists (the variables are read at first use).
const bool kEnv = [] {
  setenv("KINET_EMU_PEER_TIMEOUT_MS", std::to_string(kPeerTimeoutMs).c_str(), 1);
  // This process's responder holds answers of ack_later WRITEs (the
  // HostileRequester tests): 5 s asked, over the cap, so 1 s (with a
  // warning); long enough to tell "held" from "at once".
  setenv("KINET_EMU_ACK_DELAY_US", "5000000", 1);
  setenv("KINET_SOCKET_IFNAME", "=lo", 1);
  return true;
}();

// A server that accepts one connection and runs `script` on it.
class FakePeer {
 public:
  using Script = std::function<void(fab::TcpLink&)>;
  explicit FakePeer(Script script) {
    kinet::bs::SockAddr lo;
    auto* a = reinterpret_cast<sockaddr_in*>(&lo.ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    lo.len = sizeof(sockaddr_in);
    kinet::bs::SockAddr bound;
    lfd_ = kinet::bs::listen_on(lo, 0, &bound);
    endpoint_ = fab::tcp_endpoint(bound);
    th_ = std::thread([this, script] {
      pollfd p{lfd_.get(), POLLIN, 0};
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (::poll(&p, 1, 50) != 1)  // until a requester connects, or the test is done with this peer
        if (done_.load() || std::chrono::steady_clock::now() > until) return;
      const int fd = ::accept(lfd_.get(), nullptr, nullptr);
      if (fd < 0) return;
      fab::TcpLink link(kinet::bs::Fd(fd), "requester");
      try {
        script(link);
      } catch (const std::exception&) {  // the requester closed: the script is over
      }
      // Keep the connection until the test is done with it.
      std::vector<uint8_t> sink;
      try {
        while (!done_.load()) link.recv(sink, std::chrono::steady_clock::now() + 50ms);
      } catch (const std::exception&) {
      }
    });
  }
  ~FakePeer() {
    done_.store(true);
    th_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  kinet::bs::Fd lfd_;
  std::string endpoint_;
  std::atomic<bool> done_{false};
  std::thread th_;
};

std::vector<uint8_t> recv_frame(fab::TcpLink& l, fab::Frame* f) {
  std::vector<uint8_t> b;
  if (!l.recv(b, std::chrono::steady_clock::now() + 10s)) throw std::runtime_error("nothing came");
  std::string why;
  if (!fab::decode(b.data(), b.size(), f, &why)) throw std::runtime_error(why);
  return b;
}
void send(fab::TcpLink& l, const std::vector<uint8_t>& b) { l.send(b.data(), b.size(), std::chrono::steady_clock::now() + 10s); }
void send_hello(fab::TcpLink& l, uint64_t process_id, const char* name) {
  fab::Hello h;
  h.process_id = process_id;
  h.max_frame = static_cast<uint32_t>(fab::kMaxFrame);
  h.name = name;
  std::vector<uint8_t> b;
  fab::encode(h, b);
  send(l, b);
}
void hello_back(fab::TcpLink& l) {
  fab::Frame f;
  recv_frame(l, &f);
  send_hello(l, 42, "fake:1");
}

struct Rig {
  std::unique_ptr<kinet::Device> dev;
  std::unique_ptr<kinet::ProtectionDomain> pd;
  std::vector<uint8_t> buf = std::vector<uint8_t>(4096, 0x5a);  // >= 130 x 16 bytes (HostileRequester flood)
  std::unique_ptr<kinet::MemoryRegion> mr;
  std::unique_ptr<kinet::QueuePair> qp;
  kinet::QpInfo peer{};
  explicit Rig(const std::string& endpoint) {
    kinet::DeviceOptions o;
    o.emu_fabric = kinet::DeviceOptions::Fabric::Tcp;
    dev = kinet::Device::open("emu", o);
    pd = dev->alloc_pd();
    mr = pd->reg_mr(buf.data(), buf.size(), kinet::kAccessAll);
    qp = pd->create_qp();
    peer.magic = kinet::QpInfo::kMagic;
    peer.version = 1;
    peer.provider = 1;
    peer.node = 0x123456789abcdef0ull;  // no NIC of this process
    peer.qpn = 0x100;
    peer.mtu = 5;
    peer.port = 1;
    peer.endpoint = endpoint;
  }
  // A READ of 64 bytes into buf[0..64); returns its status.
  Status read64() {
    dev::Ticket t;
    Status s = dev::get<X>(qp->handle(), buf.data(), mr->lkey(), 0x1000, kinet::Rkey{0x01020304}, 64, 0, &t);
    return s == Status::Ok ? dev::wait<X>(qp->handle(), t) : s;
  }
  bool untouched() const {
    for (uint8_t b : buf)
      if (b != 0x5a) return false;
    return true;
  }
  // The QP's last error contains `part`, and nothing landed in buf.
  void expect_failed_untouched(const std::string& part) const {
    EXPECT_NE(qp->last_error().find(part), std::string::npos) << qp->last_error();
    EXPECT_TRUE(untouched());
  }
};

std::string lost(const std::string& ep) { return "peer emu node 0x123456789abcdef0 at " + ep + " lost: "; }

// One READ against a fake peer that answers it with what `crafted` makes of
// it: the peer is lost with a reason containing `why`, and nothing lands.
void expect_read_loses_peer(std::function<fab::Response(const fab::Request&)> crafted, const std::string& why) {
  FakePeer fp([crafted](fab::TcpLink& l) {
    hello_back(l);
    fab::Frame f;
    recv_frame(l, &f);
    std::vector<uint8_t> b;
    fab::encode(crafted(f.request), b);
    send(l, b);
  });
  Rig r(fp.endpoint());
  r.qp->connect(r.peer);
  EXPECT_EQ(r.read64(), Status::TransportRetryExceeded);
  r.expect_failed_untouched(lost(fp.endpoint()) + why);
}

TEST(FabricHostilePeer, AnswerToARequestNeverMade) {
  expect_read_loses_peer(
      [](const fab::Request& rq) {
        fab::Response r;
        r.seq = rq.seq + 1000;
        return r;
      },
      "answered request 1001, which is not pending");
}

TEST(FabricHostilePeer, GarbageInsteadOfAFrame) {
  FakePeer fp([](fab::TcpLink& l) {
    hello_back(l);
    fab::Frame f;
    recv_frame(l, &f);
    send(l, std::vector<uint8_t>(64, 0xff));
  });
  Rig r(fp.endpoint());
  r.qp->connect(r.peer);
  EXPECT_EQ(r.read64(), Status::TransportRetryExceeded);
  r.expect_failed_untouched(lost(fp.endpoint()) + "malformed frame header: ");
}

TEST(FabricHostilePeer, ARequestWhereAResponseBelongs) {
  FakePeer fp([](fab::TcpLink& l) {
    hello_back(l);
    fab::Frame f;
    recv_frame(l, &f);
    fab::Request rq = f.request;
    rq.kind = fab::OpKind::Read;
    std::vector<uint8_t> b;
    fab::encode(rq, b);
    send(l, b);
  });
  Rig r(fp.endpoint());
  r.qp->connect(r.peer);
  EXPECT_EQ(r.read64(), Status::TransportRetryExceeded);
  r.expect_failed_untouched(lost(fp.endpoint()) + "sent a frame of type 2 where a Response was expected");
}

fab::Response ok_to(const fab::Request& rq) {
  fab::Response r;
  r.seq = rq.seq;
  return r;
}
// Answers READ `rq` with rq.len bytes of `fill` (at most 64), covering the
// `covers` Requests before it.
void answer_read(fab::TcpLink& l, const fab::Request& rq, uint8_t fill, uint32_t covers = 0) {
  const std::vector<uint8_t> data(64, fill);
  fab::Response r = ok_to(rq);
  r.covers = covers;
  r.len = std::min<uint64_t>(rq.len, data.size());
  r.payload = data.data();
  std::vector<uint8_t> b;
  fab::encode(r, b);
  send(l, b);
}

// Answers come in the order the Requests went: a peer that answers the
// second before the first is lost, and nothing lands.
TEST(FabricHostilePeer, AnswersOutOfOrder) {
  FakePeer fp([](fab::TcpLink& l) {
    hello_back(l);
    fab::Frame a, b;
    recv_frame(l, &a);
    recv_frame(l, &b);
    std::vector<uint8_t> out;
    fab::encode(ok_to(b.request), out);
    fab::encode(ok_to(a.request), out);
    send(l, out);
  });
  Rig r(fp.endpoint());
  r.qp->connect(r.peer);
  const auto h = r.qp->handle();
  ASSERT_EQ(dev::put<X>(h, r.buf.data(), r.mr->lkey(), 0x1000, kinet::Rkey{0x01020304}, 64, dev::kNoDoorbell),
            Status::Ok);
  EXPECT_EQ(r.read64(), Status::WrFlushed) << "behind the WRITE, which failed first";
  r.expect_failed_untouched(lost(fp.endpoint()) +
                            "answered request 2 before request 1 (answers come in the order asked)");
}

// A cumulative answer (covers) may only stand for held answers: successful
// WRITEs whose answer was allowed to wait. One that covers a READ (which
// needs its data back) loses the peer, and nothing lands.
TEST(FabricHostilePeer, ACumulativeAnswerOverAReadIsRefused) {
  FakePeer fp([](fab::TcpLink& l) {
    hello_back(l);
    fab::Frame a, b;
    recv_frame(l, &a);
    recv_frame(l, &b);
    answer_read(l, b.request, 0xee, 1);
  });
  Rig r(fp.endpoint());
  r.qp->connect(r.peer);
  dev::Ticket t;
  ASSERT_EQ(dev::get<X>(r.qp->handle(), r.buf.data() + 64, r.mr->lkey(), 0x1000, kinet::Rkey{0x01020304}, 64,
                        dev::kNoDoorbell, &t),
            Status::Ok);
  EXPECT_EQ(r.read64(), Status::WrFlushed) << "behind the first READ, which failed";
  r.expect_failed_untouched(lost(fp.endpoint()) +
                            "answered requests 1..2 at once, but request 1 among them was not a WRITE whose answer "
                            "may wait (kAckLater)");
}

// A cumulative answer that reaches past what was asked loses the peer.
TEST(FabricHostilePeer, ACumulativeAnswerPastTheRequests) {
  expect_read_loses_peer(
      [](const fab::Request& rq) {
        fab::Response r = ok_to(rq);
        r.seq += 1;
        r.covers = 1;
        return r;
      },
      "answered requests 1..2, which are not all pending");
}

// Operations are pipelined: the peer sees all eight WRITEs of one doorbell
// before it answers the first (a requester doing one round trip per WQE would
// never send the second).
TEST(FabricPipelining, ManyRequestsBeforeTheFirstAnswer) {
  FakePeer fp([](fab::TcpLink& l) {
    hello_back(l);
    std::vector<std::vector<uint8_t>> held;
    std::vector<fab::Request> rqs;
    for (int i = 0; i < 8; ++i) {
      fab::Frame f;
      held.push_back(recv_frame(l, &f));  // throws (ending the script) if they don't all come
      rqs.push_back(f.request);
    }
    for (auto& rq : rqs) {
      std::vector<uint8_t> b;
      fab::encode(ok_to(rq), b);
      send(l, b);
    }
  });
  Rig r(fp.endpoint());
  r.qp->connect(r.peer);
  const auto h = r.qp->handle();
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(dev::put<X>(h, r.buf.data() + 64 * i, r.mr->lkey(), 0x1000 + 64 * i, kinet::Rkey{0x01020304}, 64,
                          i == 7 ? dev::kSignal : dev::kNoDoorbell),
              Status::Ok);
  EXPECT_EQ(dev::quiet<X>(h), Status::Ok) << r.qp->last_error();
}

// Corking (QpRunner::step_remote): in a deep pipeline (kCorkMinWindow, 8
// WQEs in flight), Requests of unsignalled WQEs rung one doorbell each while
// a signalled WRITE's answer is on its way stay queued, and leave once that
// answer is in. The fake peer holds the answer until 500 ms pass with nothing
// new; the first few (a shallow pipeline) came at once, the rest only after.
struct CorkScript {
  std::atomic<int> before{0}, after{0};  // Requests seen before / after the answer
  std::atomic<int> all_a5{0};             // WRITEs whose payload was all 0xa5 (the first one's aside)
  void count_payload(const fab::Request& rq) {
    if (rq.kind == fab::OpKind::Write && rq.len > 64 &&
        std::all_of(rq.payload, rq.payload + rq.len, [](uint8_t x) { return x == 0xa5; }))
      all_a5.fetch_add(1);
  }
  // Answers the signalled WRITE and everything seen before once 500 ms pass
  // quietly, then every later Request (READs with 64 bytes of 0xd7).
  void run(fab::TcpLink& l) {
    hello_back(l);
    std::vector<fab::Request> seen;
    fab::Frame f;
    recv_frame(l, &f);  // the signalled WRITE
    seen.push_back(f.request);
    std::vector<uint8_t> b;
    while (l.recv(b, std::chrono::steady_clock::now() + 500ms)) {
      std::string why;
      if (!fab::decode(b.data(), b.size(), &f, &why)) throw std::runtime_error(why);
      seen.push_back(f.request);
      count_payload(f.request);
      before.fetch_add(1);
    }
    const std::vector<uint8_t> data(64, 0xd7);
    auto answer = [&](const fab::Request& rq) {
      fab::Response r = ok_to(rq);
      if (rq.kind == fab::OpKind::Read) r.len = rq.len, r.payload = data.data();
      std::vector<uint8_t> o;
      fab::encode(r, o);
      send(l, o);
    };
    for (const auto& rq : seen) answer(rq);
    // The rest, and whatever follows (a quiet's Flush), until the test
    // closes the link.
    while (l.recv(b, std::chrono::steady_clock::now() + 10s)) {
      std::string why;
      if (!fab::decode(b.data(), b.size(), &f, &why)) throw std::runtime_error(why);
      count_payload(f.request);
      if (f.request.kind != fab::OpKind::Flush) after.fetch_add(1);  // counted before it is answered
      answer(f.request);
    }
  }
};

// A signalled WRITE, then 16 unsignalled WRITEs or READs with a doorbell
// each, then a quiet: the first 6 leave at once (7 WQEs in flight: a
// shallow pipeline, under the engine's kCorkMinWindow of 8), the rest once
// the first is answered; every one is answered, READ data lands. The test
// waits for the first 6 to arrive before it posts the rest: an engine that
// took all 17 doorbells in one pass (a loaded machine) would start the
// signalled WRITE in it too, and such a pass sends everything.
void cork_case(bool reads) {
  constexpr int kN = 16, kShallow = 6;
  CorkScript cs;
  FakePeer fp([&](fab::TcpLink& l) { cs.run(l); });
  Rig r(fp.endpoint());
  r.qp->connect(r.peer);
  const auto h = r.qp->handle();
  dev::Ticket t0;
  ASSERT_EQ(dev::put<X>(h, r.buf.data(), r.mr->lkey(), 0x1000, kinet::Rkey{0x01020304}, 64, dev::kSignal, &t0),
            Status::Ok);
  for (int i = 1; i <= kN; ++i) {  // a doorbell each, no completion asked
    uint8_t* local = r.buf.data() + 64 * i;
    ASSERT_EQ(reads ? dev::get<X>(h, local, r.mr->lkey(), 0x1000, kinet::Rkey{0x01020304}, 64, 0, nullptr)
                    : dev::put<X>(h, local, r.mr->lkey(), 0x1000 + 64 * i, kinet::Rkey{0x01020304}, 64, 0),
              Status::Ok);
    if (i == kShallow) {
      const auto until = std::chrono::steady_clock::now() + 5s;
      while (cs.before.load() < kShallow && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      ASSERT_EQ(cs.before.load(), kShallow) << "a shallow pipeline was corked";
    }
  }
  EXPECT_EQ(dev::wait<X>(h, t0), Status::Ok) << r.qp->last_error();
  EXPECT_EQ(dev::quiet<X>(h), Status::Ok) << r.qp->last_error();
  EXPECT_EQ(cs.before.load(), kShallow) << "Requests of a deep pipeline left before the answer on its way";
  EXPECT_EQ(cs.after.load(), kN - kShallow);
  if (reads) {
    for (int i = 64; i < 64 * (kN + 1); ++i) EXPECT_EQ(std::atomic_ref<uint8_t>(r.buf[i]).load(), 0xd7) << i;
  }
}

TEST(FabricCorking, UnsignalledWritesWaitForAnAnswerOnItsWay) { cork_case(false); }

// Destroying a QP with Requests corked sends them (as its passes would have
// without corking) instead of leaving them queued with nobody to flush them;
// the destructor does not wait for the held answer. (WQEs announced but not
// yet issued when a QP is destroyed are flushed, never sent: the test polls
// the CQ for 100 ms first, each poll a pass of the engine, so that all 16
// are issued.)
TEST(FabricCorking, DestroyingTheQpSendsWhatItCorked) {
  constexpr int kN = 16;
  CorkScript cs;
  FakePeer fp([&](fab::TcpLink& l) { cs.run(l); });
  Rig r(fp.endpoint());
  r.qp->connect(r.peer);
  const auto h = r.qp->handle();
  ASSERT_EQ(dev::put<X>(h, r.buf.data(), r.mr->lkey(), 0x1000, kinet::Rkey{0x01020304}, 64, dev::kSignal),
            Status::Ok);
  for (int i = 1; i <= kN; ++i)
    ASSERT_EQ(dev::put<X>(h, r.buf.data() + 64 * i, r.mr->lkey(), 0x1000 + 64 * i, kinet::Rkey{0x01020304}, 64, 0),
              Status::Ok);
  for (const auto until = std::chrono::steady_clock::now() + 100ms; std::chrono::steady_clock::now() < until;)
    ASSERT_EQ(dev::poll_cq<X>(h), Status::Ok);
  const auto t0 = std::chrono::steady_clock::now();
  r.qp.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 400ms) << "teardown waited for the held answer";
  while (cs.before.load() < kN && std::chrono::steady_clock::now() - t0 < 5s) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(cs.before.load(), kN) << "corked WRITEs stayed queued after their QP was destroyed";
}

// WRITEs from kGatherBytes on wait in their region while corked
// (RemotePeer::Payload::UntilSent). Deregistering it sends them before it
// returns: bytes written into the region afterwards never travel.
TEST(FabricCorking, DeregisteringTheSourceSendsTheWritesCorkedFromIt) {
  constexpr int kN = 16, kShallow = 6;
  constexpr size_t kLen = kinet::emu::RemotePeer::kGatherBytes;
  CorkScript cs;
  FakePeer fp([&](fab::TcpLink& l) { cs.run(l); });
  Rig r(fp.endpoint());
  std::vector<uint8_t> src(kN * kLen, 0xa5);
  auto src_mr = r.pd->reg_mr(src.data(), src.size(), kinet::kAccessAll);
  r.qp->connect(r.peer);
  const auto h = r.qp->handle();
  dev::Ticket t0;
  ASSERT_EQ(dev::put<X>(h, r.buf.data(), r.mr->lkey(), 0x1000, kinet::Rkey{0x01020304}, 64, dev::kSignal, &t0),
            Status::Ok);
  for (int i = 1; i <= kN; ++i) {
    ASSERT_EQ(dev::put<X>(h, src.data() + kLen * (i - 1), src_mr->lkey(), 0x1000 + kLen * i, kinet::Rkey{0x01020304},
                          kLen, 0),
              Status::Ok);
    if (i == kShallow) {
      const auto until = std::chrono::steady_clock::now() + 5s;
      while (cs.before.load() < kShallow && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      ASSERT_EQ(cs.before.load(), kShallow) << "a shallow pipeline was corked";
    }
  }
  for (const auto until = std::chrono::steady_clock::now() + 100ms; std::chrono::steady_clock::now() < until;)
    ASSERT_EQ(dev::poll_cq<X>(h), Status::Ok);  // each poll a pass: all 16 issued, 10 of them corked
  ASSERT_EQ(cs.before.load(), kShallow) << "nothing was corked: the case would test nothing";
  const auto t1 = std::chrono::steady_clock::now();
  src_mr.reset();
  std::fill(src.begin(), src.end(), 0x3c);  // never to travel
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 400ms) << "deregistration waited for the held answer";
  EXPECT_EQ(dev::wait<X>(h, t0), Status::Ok) << r.qp->last_error();
  EXPECT_EQ(dev::quiet<X>(h), Status::Ok) << r.qp->last_error();
  EXPECT_EQ(cs.before.load(), kN) << "corked WRITEs stayed queued after their region was deregistered";
  EXPECT_EQ(cs.all_a5.load(), kN) << "a WRITE carried bytes written after its region was deregistered";
}

// READs of unsignalled WQEs are corked the same way.
TEST(FabricCorking, UnsignalledReadsWaitForAnAnswerOnItsWay) { cork_case(true); }

// What a poster waits for is never corked: a signalled WRITE behind a corked
// one leaves at once (taking it along) though an earlier answer is still out.
TEST(FabricCorking, ASignalledWriteTakesTheCorkedOnesAlong) {
  std::atomic<int> seen{0};
  FakePeer fp([&](fab::TcpLink& l) {
    hello_back(l);
    std::vector<fab::Request> rqs;
    for (int i = 0; i < 3; ++i) {  // all three before any answer
      fab::Frame f;
      recv_frame(l, &f);
      rqs.push_back(f.request);
      seen.fetch_add(1);
    }
    std::vector<uint8_t> o;
    for (const auto& rq : rqs) fab::encode(ok_to(rq), o);
    send(l, o);
  });
  Rig r(fp.endpoint());
  r.qp->connect(r.peer);
  const auto h = r.qp->handle();
  dev::Ticket t0, t2;
  ASSERT_EQ(dev::put<X>(h, r.buf.data(), r.mr->lkey(), 0x1000, kinet::Rkey{0x01020304}, 64, dev::kSignal, &t0),
            Status::Ok);
  ASSERT_EQ(dev::put<X>(h, r.buf.data() + 64, r.mr->lkey(), 0x1040, kinet::Rkey{0x01020304}, 64, 0), Status::Ok);
  ASSERT_EQ(dev::put<X>(h, r.buf.data() + 128, r.mr->lkey(), 0x1080, kinet::Rkey{0x01020304}, 64, dev::kSignal, &t2),
            Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, t2), Status::Ok) << r.qp->last_error();
  EXPECT_EQ(dev::wait<X>(h, t0), Status::Ok) << r.qp->last_error();
  EXPECT_EQ(seen.load(), 3);
}

// In order: a WRITE whose source an earlier READ fills is sent only after the
// READ's data landed, so it carries that data.
TEST(FabricPipelining, WriteAfterReadCarriesTheReadData) {
  std::mutex mu;  // the socket orders these accesses, but TSan can't see that
  std::vector<uint8_t> seen;
  FakePeer fp([&](fab::TcpLink& l) {
    hello_back(l);
    fab::Frame f;
    recv_frame(l, &f);
    if (f.request.kind != fab::OpKind::Read) throw std::runtime_error("expected the READ first");
    std::vector<uint8_t> data(64, 0xab);
    fab::Response r = ok_to(f.request);
    r.len = 64;
    r.payload = data.data();
    std::vector<uint8_t> b;
    fab::encode(r, b);
    send(l, b);
    fab::Frame w;
    auto keep = recv_frame(l, &w);
    if (w.request.kind == fab::OpKind::Write) {
      std::lock_guard<std::mutex> g(mu);
      seen.assign(w.request.payload, w.request.payload + w.request.len);
    }
    b.clear();
    fab::encode(ok_to(w.request), b);
    send(l, b);
  });
  Rig r(fp.endpoint());
  r.qp->connect(r.peer);
  const auto h = r.qp->handle();
  ASSERT_EQ(dev::get<X>(h, r.buf.data(), r.mr->lkey(), 0x1000, kinet::Rkey{0x01020304}, 64, dev::kNoDoorbell),
            Status::Ok);
  ASSERT_EQ(dev::put<X>(h, r.buf.data(), r.mr->lkey(), 0x2000, kinet::Rkey{0x01020304}, 64, dev::kSignal),
            Status::Ok);
  EXPECT_EQ(dev::quiet<X>(h), Status::Ok) << r.qp->last_error();
  {
    std::lock_guard<std::mutex> g(mu);
    EXPECT_EQ(seen, std::vector<uint8_t>(64, 0xab));
  }
  EXPECT_EQ(std::vector<uint8_t>(r.buf.begin(), r.buf.begin() + 64), std::vector<uint8_t>(64, 0xab));
}

// A READ whose local region is deregistered while the answer is on its way:
// the key is checked again when the data would land, so it never lands (a
// local protection error, as on hardware once the MR is gone).
TEST(FabricLanding, ReadDataAfterDeregistrationDoesNotLand) {
  std::atomic<int> step{0};  // 1: the READ reached the peer; 2: the test deregistered, answer now
  auto wait_for = [&step](int v) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (step.load() < v && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    return step.load() >= v;
  };
  FakePeer fp([&](fab::TcpLink& l) {
    hello_back(l);
    fab::Frame f;
    recv_frame(l, &f);
    step.store(1);
    if (!wait_for(2)) return;
    answer_read(l, f.request, 0xee);
  });
  Rig r(fp.endpoint());
  r.qp->connect(r.peer);
  const uint32_t lkey = r.mr->lkey_value();
  dev::Ticket t;
  ASSERT_EQ(dev::get<X>(r.qp->handle(), r.buf.data(), r.mr->lkey(), 0x1000, kinet::Rkey{0x01020304}, 64, 0, &t),
            Status::Ok);
  ASSERT_TRUE(wait_for(1)) << "the READ never reached the peer";
  r.mr.reset();  // deregistered while the READ is outstanding
  step.store(2);
  EXPECT_EQ(dev::wait<X>(r.qp->handle(), t), Status::LocalProtection);
  char k[32];
  std::snprintf(k, sizeof k, "0x%x", lkey);
  r.expect_failed_untouched(std::string("WQE 0 RDMA_READ 64 B: lkey ") + k + " is not registered on emu");
}

// A READ answered with fewer bytes than asked: nothing lands.
TEST(FabricHostilePeer, ShortReadData) {
  FakePeer fp([](fab::TcpLink& l) {
    hello_back(l);
    fab::Frame f;
    recv_frame(l, &f);
    std::vector<uint8_t> data(32, 0xee);
    fab::Response r;
    r.seq = f.request.seq;
    r.len = 32;
    r.payload = data.data();
    std::vector<uint8_t> b;
    fab::encode(r, b);
    send(l, b);
  });
  Rig r(fp.endpoint());
  r.qp->connect(r.peer);
  EXPECT_EQ(r.read64(), Status::RemoteOperation);
  r.expect_failed_untouched("WQE 0 RDMA_READ 64 B: peer answered 32 bytes for a READ of 64");
}

// Connected, then silent: the operation ends after the peer timeout, not before.
TEST(FabricHostilePeer, SilentPeerTimesOut) {
  FakePeer fp([](fab::TcpLink& l) { hello_back(l); });
  Rig r(fp.endpoint());
  r.qp->connect(r.peer);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(r.read64(), Status::TransportRetryExceeded);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(ms, kPeerTimeoutMs - 50);
  EXPECT_LT(ms, kPeerTimeoutMs + 5000);
  EXPECT_NE(r.qp->last_error().find(lost(fp.endpoint()) + "timeout after 1000 ms waiting for a response"),
            std::string::npos)
      << r.qp->last_error();
  EXPECT_EQ(r.qp->state(), kinet::QpState::Error);
  EXPECT_TRUE(r.untouched());
  // Later operations on another QP to the same (lost) endpoint: a new link is
  // tried at to_rtr; this peer takes one connection only, so to_rtr fails in time.
}

// A peer that accepts but never says Hello: to_rtr fails within the bound,
// naming the endpoint; the QP stays in INIT.
TEST(FabricHostilePeer, NoHelloFailsToRtr) {
  FakePeer fp([](fab::TcpLink& l) {
    fab::Frame f;
    recv_frame(l, &f);  // the requester's Hello, never answered
  });
  Rig r(fp.endpoint());
  r.qp->to_init(kinet::kAccessAll);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    r.qp->to_rtr(r.peer);
    ADD_FAILURE() << "to_rtr succeeded";
  } catch (const kinet::Error& e) {
    EXPECT_EQ(e.code(), kinet::ErrorCode::System);
    EXPECT_NE(std::string(e.what()).find("to_rtr: can't reach peer emu node 0x123456789abcdef0: " + fp.endpoint() +
                                         ": timeout after 1000 ms waiting for the peer's Hello"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 6s);
  EXPECT_EQ(r.qp->state(), kinet::QpState::Init);
}

// Nobody listens there: refused until the bound, then an error naming it.
// The port stays bound, not listening, for the whole test: a port merely
// freed could be taken by a listener of a test running beside this one (it
// was, once, in CI), and then to_rtr reached it.
TEST(FabricHostilePeer, NobodyListening) {
  kinet::bs::Fd held(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_GE(held.get(), 0) << std::strerror(errno);
  kinet::bs::SockAddr bound;
  auto* a = reinterpret_cast<sockaddr_in*>(&bound.ss);
  a->sin_family = AF_INET;
  a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bound.len = sizeof(sockaddr_in);
  ASSERT_EQ(::bind(held.get(), reinterpret_cast<sockaddr*>(&bound.ss), bound.len), 0) << std::strerror(errno);
  ASSERT_EQ(::getsockname(held.get(), reinterpret_cast<sockaddr*>(&bound.ss), &bound.len), 0) << std::strerror(errno);
  const std::string ep = fab::tcp_endpoint(bound);
  Rig r(ep);
  r.qp->to_init(kinet::kAccessAll);
  try {
    r.qp->to_rtr(r.peer);
    ADD_FAILURE() << "to_rtr succeeded";
  } catch (const kinet::Error& e) {
    EXPECT_EQ(e.code(), kinet::ErrorCode::System);
    EXPECT_NE(std::string(e.what()).find("can't reach peer emu node 0x123456789abcdef0: " + ep + ": can't connect: "),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(r.qp->state(), kinet::QpState::Init);
}

TEST(FabricHostilePeer, MalformedEndpointsAreRefused) {
  for (const char* ep : {"tcp 127.0.0.1", "tcp 127.0.0.1:0", "tcp 127.0.0.1:65536", "udp 1.2.3.4:5", "tcp host:80",
                         "tcp [::1:80", "tcp 1.2.3.4:8x"}) {
    Rig r(ep);
    r.qp->to_init(kinet::kAccessAll);
    try {
      r.qp->to_rtr(r.peer);
      ADD_FAILURE() << ep << ": to_rtr succeeded";
    } catch (const kinet::Error& e) {
      EXPECT_EQ(e.code(), kinet::ErrorCode::InvalidArgument) << ep << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("endpoint \"") + ep + "\": "), std::string::npos) << e.what();
    }
  }
}

}  // namespace

// ---- one TcpLink, its far end played by hand ---------------------------------
// After a failure closes the link, every later send or recv names that
// failure: a sender racing the receiving thread's failure used to report
// only "the link was closed", which could mask why.
namespace {
struct LinkPair {
  int far = -1;
  std::unique_ptr<fab::TcpLink> link;
  LinkPair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    link = std::make_unique<fab::TcpLink>(kinet::bs::Fd(sv[0]), "tcp far-end");
    far = sv[1];
  }
  ~LinkPair() { ::close(far); }
  std::string recv_error(kinet::ErrorCode code = kinet::ErrorCode::System) {
    std::vector<uint8_t> out;
    return kinet::test::error_of([&] { link->recv(out, std::chrono::steady_clock::now() + 2s); }, code);
  }
  std::string send_error() {
    const std::vector<uint8_t> frame(fab::kHeaderBytes, 0);
    return kinet::test::error_of([&] { link->send(frame.data(), frame.size(), std::chrono::steady_clock::now() + 2s); },
                    kinet::ErrorCode::System);
  }
};
}  // namespace

// send_parts writes the two pieces as one byte stream, through partial
// writes that stop inside either piece (a 4 KiB send buffer, a slow reader).
TEST(FabricTcpLink, SendPartsWritesBothPiecesInOrderThroughPartialWrites) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const int small = 4096;
  ASSERT_EQ(::setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  fab::TcpLink link(kinet::bs::Fd(sv[0]), "tcp far-end");
  std::vector<uint8_t> head(20000), body(300000);
  for (size_t i = 0; i < head.size(); ++i) head[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<uint8_t>(i * 13 + 5);
  std::vector<uint8_t> got;
  std::thread reader([&] {
    uint8_t b[1000];
    for (int reads = 1; got.size() < head.size() + body.size(); ++reads) {
      const ssize_t k = ::read(sv[1], b, sizeof b);
      if (k <= 0) break;
      got.insert(got.end(), b, b + k);
      if (reads % 16 == 0) std::this_thread::sleep_for(1ms);  // let the sender's buffer fill up
    }
  });
  link.send_parts(head.data(), head.size(), body.data(), body.size(), std::chrono::steady_clock::now() + 20s);
  reader.join();
  ::close(sv[1]);
  std::vector<uint8_t> want = head;
  want.insert(want.end(), body.begin(), body.end());
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "the bytes differ";
}

TEST(FabricTcpLink, AMalformedFrameIsTheReasonBothDirectionsReport) {
  LinkPair p;
  const std::vector<uint8_t> junk(64, 0xff);
  ASSERT_EQ(::write(p.far, junk.data(), junk.size()), 64);
  const std::string first = p.recv_error(kinet::ErrorCode::InvalidArgument);
  const std::string head = "tcp far-end: malformed frame header: ";
  ASSERT_EQ(first.rfind(head, 0), 0u) << first;
  const std::string lost = "tcp far-end peer lost: malformed frame header: " + first.substr(head.size());
  EXPECT_EQ(p.send_error(), lost);
  EXPECT_EQ(p.recv_error(), lost);
  p.link->close();  // a later close does not replace the reason
  EXPECT_EQ(p.send_error(), lost);
}

TEST(FabricTcpLink, ThePeerClosingIsTheReasonBothDirectionsReport) {
  LinkPair p;
  ::shutdown(p.far, SHUT_WR);
  const std::string lost = "tcp far-end peer lost: the peer closed the connection";
  EXPECT_EQ(p.recv_error(), lost);
  EXPECT_EQ(p.send_error(), lost);
}

TEST(FabricTcpLink, ALocalCloseIsTheReasonWhenNothingFailedFirst) {
  LinkPair p;
  p.link->close();
  const std::string lost = "tcp far-end peer lost: the link was closed";
  EXPECT_EQ(p.send_error(), lost);
  EXPECT_EQ(p.recv_error(), lost);
}

// recv_split: a large frame comes back cut after its head, the caller takes
// its rest (bytes read ahead first, then from the socket), and the frame
// after it arrives whole. Receiving again before the rest is taken is refused.
namespace {
constexpr size_t kWriteHead = fab::kHeaderBytes + fab::kRequestFixed;
// An encoded WRITE Request frame with `n` payload bytes (i * 7 + 3).
std::vector<uint8_t> write_frame(size_t n, std::vector<uint8_t>* payload) {
  payload->resize(n);
  for (size_t i = 0; i < n; ++i) (*payload)[i] = static_cast<uint8_t>(i * 7 + 3);
  fab::Request r;
  r.seq = 9;
  r.kind = fab::OpKind::Write;
  r.raddr = 0x1000;
  r.rkey = 0x0102;
  r.len = n;
  r.payload = payload->data();
  std::vector<uint8_t> b;
  fab::encode(r, b);
  return b;
}
// Writes `bytes` to the far end in pieces of at most `piece`, on a thread.
std::thread write_async(const LinkPair& p, const std::vector<uint8_t>& bytes, size_t piece) {
  return std::thread([&p, &bytes, piece] {
    for (size_t off = 0; off < bytes.size();) {
      const ssize_t k = ::write(p.far, bytes.data() + off, std::min(bytes.size() - off, piece));
      if (k <= 0) return;
      off += static_cast<size_t>(k);
    }
  });
}
// The next frame, cut after its head when over kWriteHead + 1000 bytes; the rest's size.
size_t recv_cut(const LinkPair& p, std::vector<uint8_t>& out, std::chrono::steady_clock::time_point deadline) {
  size_t rest = 0;
  while (!p.link->recv_split(out, deadline, kWriteHead + 1000, kWriteHead, &rest)) {
  }
  return rest;
}
}  // namespace

TEST(FabricTcpLink, ACutFrameHandsItsRestToTheCallerAndTheNextFrameComesWhole) {
  LinkPair p;
  std::vector<uint8_t> payload;
  std::vector<uint8_t> bytes = write_frame(200000, &payload);
  fab::Request fl;
  fl.seq = 10;
  fl.kind = fab::OpKind::Flush;
  fab::encode(fl, bytes);
  std::thread writer = write_async(p, bytes, 30000);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::vector<uint8_t> head;
  size_t rest = recv_cut(p, head, deadline);
  ASSERT_EQ(head.size(), kWriteHead);
  ASSERT_EQ(rest, payload.size());
  fab::Frame f;
  std::string why;
  ASSERT_TRUE(fab::decode_write_head(head.data(), head.size(), &f, &why)) << why;
  EXPECT_EQ(f.request.len, payload.size());
  EXPECT_EQ(f.request.payload, nullptr);
  std::vector<uint8_t> got(payload.size(), 0);
  size_t off = 0, from_ahead = 0, from_socket = 0;
  while (off < got.size()) {
    const auto part = p.link->rest_buffered(got.size() - off);
    if (!part.empty()) {
      std::memcpy(got.data() + off, part.data(), part.size());
      off += part.size();
      from_ahead += part.size();
      continue;
    }
    ASSERT_TRUE(p.link->wait_rest(deadline));
    bool bad = true;
    const size_t k = p.link->recv_rest(got.data() + off, got.size() - off, &bad);
    EXPECT_FALSE(bad);
    off += k;
    from_socket += k;
  }
  EXPECT_TRUE(got == payload) << "the rest differs";
  EXPECT_GT(from_ahead, 0u);
  EXPECT_GT(from_socket, 0u) << "no byte of the rest came straight from the socket";
  std::vector<uint8_t> next;
  ASSERT_TRUE(p.link->recv_split(next, deadline, kWriteHead + 1000, kWriteHead, &rest));
  EXPECT_EQ(rest, 0u);
  ASSERT_TRUE(fab::decode(next.data(), next.size(), &f, &why)) << why;
  EXPECT_EQ(f.request.kind, fab::OpKind::Flush);
  EXPECT_EQ(f.request.seq, 10u);
  writer.join();

  LinkPair q;  // a receive before the rest was taken
  const std::vector<uint8_t> small = write_frame(5000, &payload);
  ASSERT_EQ(::write(q.far, small.data(), small.size()), static_cast<ssize_t>(small.size()));
  EXPECT_EQ(recv_cut(q, head, deadline), 5000u);
  EXPECT_EQ(kinet::test::error_of([&] { q.link->recv(next, deadline); }, kinet::ErrorCode::InvalidArgument),
            "tcp far-end: a frame received while 5000 bytes of the cut one before it were not taken");
}

// recv_rest into memory that can't be written (EFAULT) takes nothing: the
// same bytes then come into good memory, none lost.
TEST(FabricTcpLink, RecvRestIntoUnwritableMemoryTakesNothing) {
  LinkPair p;
  std::vector<uint8_t> payload;
  const std::vector<uint8_t> bytes = write_frame(150000, &payload);
  std::thread writer = write_async(p, bytes, bytes.size());
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::vector<uint8_t> head;
  const size_t rest = recv_cut(p, head, deadline);
  ASSERT_EQ(rest, payload.size());
  std::vector<uint8_t> got;
  for (auto part = p.link->rest_buffered(rest); !part.empty(); part = p.link->rest_buffered(rest - got.size()))
    got.insert(got.end(), part.begin(), part.end());
  ASSERT_LT(got.size(), payload.size());
  void* none = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(none, MAP_FAILED);
  ASSERT_TRUE(p.link->wait_rest(deadline));
  bool bad = false;
  EXPECT_EQ(p.link->recv_rest(static_cast<uint8_t*>(none), 4096, &bad), 0u);
  EXPECT_TRUE(bad);
  ::munmap(none, 4096);
  while (got.size() < payload.size()) {
    ASSERT_TRUE(p.link->wait_rest(deadline));
    std::vector<uint8_t> b(payload.size() - got.size());
    const size_t k = p.link->recv_rest(b.data(), b.size(), &bad);
    EXPECT_FALSE(bad);
    got.insert(got.end(), b.begin(), b.begin() + static_cast<ptrdiff_t>(k));
  }
  EXPECT_TRUE(got == payload) << "bytes were lost or changed";
  writer.join();
}

// ---- this process's responder against a raw requester ----------------------
// A client speaks the wire protocol to this process's listener as the peer
// QP (fake node 0x123456789abcdef0, QPN 0x100) the test's QP is connected to.
namespace {
struct RawRequester {
  FakePeer fp{[](fab::TcpLink& l) { hello_back(l); }};  // the QP's own outbound link: idle
  Rig rig{fp.endpoint()};
  kinet::QpInfo me;
  kinet::RemoteKey rk;
  std::unique_ptr<fab::TcpLink> link;
  uint64_t seq = 0;
  RawRequester() {
    rig.qp->connect(rig.peer);
    me = rig.qp->info();
    rk = rig.mr->remote_key();
    link = fab::tcp_connect(fab::parse_endpoint(me.endpoint).tcp, std::chrono::steady_clock::now() + 10s);
    send_hello(*link, 7, "raw:1");
    fab::Frame f;
    recv_frame(*link, &f);
    EXPECT_EQ(f.type, fab::FrameType::Hello);
  }
  fab::Request base(fab::OpKind k) {
    fab::Request r;
    r.seq = ++seq;
    r.from_node = rig.peer.node;
    r.from_qpn = rig.peer.qpn;
    r.to_node = me.node;
    r.to_qpn = me.qpn;
    r.kind = k;
    return r;
  }
  // Sends a 16-byte WRITE of `fill` at offset `off` of the region; its seq.
  uint64_t write16(uint64_t off, uint8_t fill, uint8_t flags, uint32_t rkey = 0) {
    fab::Request r = base(fab::OpKind::Write);
    const std::vector<uint8_t> p(16, fill);
    r.raddr = rk.addr + off;
    r.rkey = rkey ? rkey : rk.rkey;
    r.len = 16;
    r.payload = p.data();
    r.flags = flags;
    std::vector<uint8_t> b;
    fab::encode(r, b);
    send(*link, b);
    return r.seq;
  }
  uint64_t flush(uint64_t to_node = 0) {
    fab::Request r = base(fab::OpKind::Flush);
    if (to_node) r.to_node = to_node;
    std::vector<uint8_t> b;
    fab::encode(r, b);
    send(*link, b);
    return r.seq;
  }
  // The next answer, one per Request: a Response that covers held ones
  // (wire.hpp) stands for each of them, successes, before its own.
  fab::Response answer() {
    if (answers.empty()) {
      fab::Frame f;
      recv_frame(*link, &f);
      EXPECT_EQ(f.type, fab::FrameType::Response);
      ++frames;
      for (uint32_t i = f.response.covers; i > 0; --i) {
        fab::Response held;
        held.seq = f.response.seq - i;
        answers.push_back(held);
      }
      f.response.covers = 0;
      answers.push_back(f.response);
    }
    fab::Response a = answers.front();
    answers.pop_front();
    return a;
  }
  // The link still serves: a 16-byte WRITE of `fill` at offset 0 is answered Ok and lands.
  void expect_serves(uint8_t fill) {
    const uint64_t s = write16(0, fill, 0);
    const fab::Response ok = answer();
    EXPECT_EQ(ok.seq, s);
    EXPECT_EQ(ok.syndrome, 0);
    EXPECT_EQ(byte(0), fill);
  }
  std::deque<fab::Response> answers;  // received, not yet taken
  int frames = 0;                     // Response frames received
  uint8_t byte(size_t i) const { return std::atomic_ref<const uint8_t>(rig.buf[i]).load(std::memory_order_acquire); }
};
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

// ack_later WRITEs: the data lands at once, the answers wait for the delay
// (1 s here: the 5 s asked for, capped), in order, unless a Flush or another
// answer takes them along.
TEST(FabricHostileRequester, HeldAnswersWaitAndAFlushSendsThem) {
  RawRequester q;
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t s1 = q.write16(0, 0xa1, fab::kAckLater), s2 = q.write16(16, 0xa2, fab::kAckLater);
  // The data is in memory long before the answers come.
  while (q.byte(16) != 0xa2 && ms_since(t0) < 5000) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(q.byte(0), 0xa1);
  EXPECT_EQ(q.byte(16), 0xa2);
  const fab::Response a1 = q.answer(), a2 = q.answer();
  EXPECT_EQ(a1.seq, s1);
  EXPECT_EQ(a2.seq, s2);
  EXPECT_EQ(a1.syndrome, 0);
  EXPECT_EQ(a2.syndrome, 0);
  EXPECT_GE(ms_since(t0), 900) << "answers of ack_later WRITEs were not held";
  EXPECT_LT(ms_since(t0), 3000) << "the 5 s asked for was not capped at 1 s";
  // A Flush takes held answers along, at once.
  const auto t1 = std::chrono::steady_clock::now();
  const uint64_t s3 = q.write16(32, 0xa3, fab::kAckLater), s4 = q.flush();
  EXPECT_EQ(q.answer().seq, s3);
  const fab::Response f = q.answer();
  EXPECT_EQ(f.seq, s4);
  EXPECT_EQ(f.syndrome, 0);
  EXPECT_LT(ms_since(t1), 500) << "the Flush waited for the ack delay";
  // So does a WRITE without the flag.
  const auto t2 = std::chrono::steady_clock::now();
  const uint64_t s5 = q.write16(48, 0xa5, fab::kAckLater), s6 = q.write16(64, 0xa6, 0);
  EXPECT_EQ(q.answer().seq, s5);
  EXPECT_EQ(q.answer().seq, s6);
  EXPECT_LT(ms_since(t2), 500);
  EXPECT_EQ(q.byte(64), 0xa6);
}

// Held answers travel together: a run of ack_later WRITEs and the Flush
// behind them are answered by one Response that covers the run.
TEST(FabricHostileRequester, HeldAnswersTravelAsOneResponse) {
  RawRequester q;
  std::vector<uint8_t> b;
  for (int i = 0; i < 5; ++i) {
    fab::Request r = q.base(fab::OpKind::Write);
    static const std::vector<uint8_t> p(16, 0xc0);
    r.raddr = q.rk.addr + 16 * i;
    r.rkey = q.rk.rkey;
    r.len = 16;
    r.payload = p.data();
    r.flags = fab::kAckLater;
    fab::encode(r, b);
  }
  fab::encode(q.base(fab::OpKind::Flush), b);
  send(*q.link, b);  // one send: the responder reads them all before it answers
  fab::Frame f;
  recv_frame(*q.link, &f);
  ASSERT_EQ(f.type, fab::FrameType::Response);
  EXPECT_EQ(f.response.seq, 6u);
  EXPECT_EQ(f.response.covers, 5u);
  EXPECT_EQ(f.response.syndrome, 0);
  for (int i = 0; i < 80; ++i) EXPECT_EQ(q.byte(i), 0xc0) << i;
  // A failing WRITE behind a run is answered at once, failed, covering the run.
  const uint64_t s7 = q.write16(0, 0xd1, fab::kAckLater);
  const uint64_t s8 = q.write16(16, 0xd2, fab::kAckLater, q.rk.rkey ^ 0x100);
  recv_frame(*q.link, &f);
  EXPECT_EQ(f.response.seq, s8);
  EXPECT_EQ(f.response.covers, s8 - s7);
  EXPECT_NE(f.response.syndrome, 0);
  EXPECT_EQ(q.byte(16), 0xc0);  // untouched by the failed one
}

// A Flush names no memory: to a node that is not here it is still answered
// (with nothing), and a failing ack_later WRITE is answered at once, failed.
TEST(FabricHostileRequester, FlushAnywhereAndErrorsAreNotHeld) {
  RawRequester q;
  const uint64_t s1 = q.flush(0x0badc0de);
  const fab::Response f = q.answer();
  EXPECT_EQ(f.seq, s1);
  EXPECT_EQ(f.syndrome, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t s2 = q.write16(0, 0xbb, fab::kAckLater, q.rk.rkey ^ 0x100);  // a key that is not registered
  const fab::Response e = q.answer();
  EXPECT_EQ(e.seq, s2);
  EXPECT_NE(e.syndrome, 0);
  EXPECT_FALSE(e.why.empty());
  EXPECT_LT(ms_since(t0), 500) << "an error answer was held";
  EXPECT_EQ(q.byte(0), 0x5a);  // untouched
}

// More held answers than the responder keeps (64): they go without waiting
// for the delay (all but the last 63 at least), every one in order.
TEST(FabricHostileRequester, AFloodOfAckLaterWritesIsNotHeldBeyondTheCap) {
  RawRequester q;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 130; ++i) q.write16(16 * i, static_cast<uint8_t>(i), fab::kAckLater);
  for (int i = 0; i < 67; ++i) EXPECT_EQ(q.answer().seq, uint64_t(i + 1));
  EXPECT_LT(ms_since(t0), 900) << "held answers past the cap waited for the delay";
  for (int i = 67; i < 130; ++i) EXPECT_EQ(q.answer().seq, uint64_t(i + 1));
  EXPECT_LT(ms_since(t0), 5000);
  for (int i = 0; i < 130; ++i) EXPECT_EQ(q.byte(16 * i), static_cast<uint8_t>(i)) << i;
}

// ack_later on anything but a WRITE is a malformed frame: the responder
// closes that link (this process lives on and serves a new one).
TEST(FabricHostileRequester, AckLaterOnAReadClosesTheLink) {
  RawRequester q;
  fab::Request r = q.base(fab::OpKind::Read);
  r.raddr = q.rk.addr;
  r.rkey = q.rk.rkey;
  r.len = 8;
  std::vector<uint8_t> b;
  fab::encode(r, b);
  b[fab::kHeaderBytes + 69] = fab::kAckLater;  // encode() asserts against it: patched in
  send(*q.link, b);
  std::vector<uint8_t> got;
  EXPECT_THROW(
      {
        while (!q.link->recv(got, std::chrono::steady_clock::now() + 10s)) {
        }
      },
      kinet::Error);
  EXPECT_EQ(q.byte(0), 0x5a);
  // A new link to the same responder works.
  auto l2 = fab::tcp_connect(fab::parse_endpoint(q.me.endpoint).tcp, std::chrono::steady_clock::now() + 10s);
  EXPECT_TRUE(l2 != nullptr);
}

// A WRITE's payload from 16 KiB on goes from the connection straight into
// the region as it arrives (fabric::respond_from_link), each part checked
// again: after a deregistration between parts nothing more lands, the answer
// is a remote access error, and the link serves on.
TEST(FabricHostileRequester, AWritesPayloadLandsAsItArrivesAndStopsAtADeregistration) {
  RawRequester q;
  constexpr size_t kLen = 256 * 1024, kHalf = kLen / 2;
  std::vector<uint8_t> big(kLen, 0x5a);
  auto mr = q.rig.pd->reg_mr(big.data(), big.size(), kinet::kAccessAll);
  const kinet::RemoteKey rk = mr->remote_key();
  fab::Request r = q.base(fab::OpKind::Write);
  r.raddr = rk.addr;
  r.rkey = rk.rkey;
  r.len = kLen;
  std::vector<uint8_t> payload(kLen);
  for (size_t i = 0; i < kLen; ++i) payload[i] = i < kHalf ? 0xb1 : 0xb2;
  r.payload = payload.data();
  std::vector<uint8_t> head;
  fab::encode_head(r, head);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  q.link->send_parts(head.data(), head.size(), payload.data(), kHalf, deadline);
  // The first half lands before the second is sent: the responder does not
  // wait for the whole frame.
  auto at = [&](size_t i) { return std::atomic_ref<uint8_t>(big[i]).load(std::memory_order_acquire); };
  const auto t0 = std::chrono::steady_clock::now();
  while (at(kHalf - 1) != 0xb1 && ms_since(t0) < 5000) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(at(kHalf - 1), 0xb1) << "the first half did not land as it arrived";
  mr.reset();
  q.link->send_parts(payload.data() + kHalf, kHalf, nullptr, 0, deadline);
  const fab::Response a = q.answer();
  EXPECT_EQ(a.seq, r.seq);
  EXPECT_EQ(a.syndrome, kinet::emu::prm::kSynRemoteAccess);
  EXPECT_NE(a.why.find("is not registered"), std::string::npos) << a.why;
  EXPECT_EQ(std::count(big.begin(), big.begin() + kHalf, 0xb1), static_cast<ptrdiff_t>(kHalf));
  EXPECT_EQ(std::count(big.begin() + kHalf, big.end(), 0x5a), static_cast<ptrdiff_t>(kHalf))
      << "bytes landed after the deregistration";
  q.expect_serves(0xc3);  // the link serves on
}

// A large WRITE into a region part of which lost its access under the
// registration (mprotect, a misuse): a remote access error, not a crash, and
// the link serves on.
TEST(FabricHostileRequester, ALargeWriteIntoMemoryNoLongerWritableFailsAndTheLinkLives) {
  RawRequester q;
  constexpr size_t kLen = 256 * 1024;
  auto* m = static_cast<uint8_t*>(::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  std::memset(m, 0x5a, kLen);
  auto mr = q.rig.pd->reg_mr(m, kLen, kinet::kAccessAll);
  const kinet::RemoteKey rk = mr->remote_key();
  ASSERT_EQ(::mprotect(m + kLen / 2, kLen / 2, PROT_NONE), 0);
  fab::Request r = q.base(fab::OpKind::Write);
  r.raddr = rk.addr + kLen / 4;
  r.rkey = rk.rkey;
  r.len = kLen / 2;  // half of it in the part that can't be written
  const std::vector<uint8_t> payload(r.len, 0xd4);
  r.payload = payload.data();
  std::vector<uint8_t> b;
  fab::encode(r, b);
  send(*q.link, b);
  const fab::Response a = q.answer();
  EXPECT_EQ(a.seq, r.seq);
  EXPECT_EQ(a.syndrome, kinet::emu::prm::kSynRemoteAccess);
  EXPECT_EQ(a.why.rfind("remote memory: ", 0), 0u) << a.why;
  EXPECT_EQ(std::count(m, m + kLen / 4, 0x5a), static_cast<ptrdiff_t>(kLen / 4)) << "bytes landed before the range";
  q.expect_serves(0xc5);  // the link serves on
  mr.reset();
  ::munmap(m, kLen);
}

// A large READ's data leaves from the region itself (respond_read_in_place):
// the bytes arrive right; a READ of memory that lost its read access under
// the registration (mprotect, a misuse) is a remote access error, not a
// crash, and the link serves on.
TEST(FabricHostileRequester, ALargeReadLeavesFromTheRegionAndAnUnreadableOneFails) {
  RawRequester q;
  constexpr size_t kLen = 256 * 1024;
  auto* m = static_cast<uint8_t*>(::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  for (size_t i = 0; i < kLen; ++i) m[i] = static_cast<uint8_t>(i * 5 + 1);
  auto mr = q.rig.pd->reg_mr(m, kLen, kinet::kAccessAll);
  const kinet::RemoteKey rk = mr->remote_key();
  auto read = [&](uint64_t off, uint64_t len) {
    fab::Request r = q.base(fab::OpKind::Read);
    r.raddr = rk.addr + off;
    r.rkey = rk.rkey;
    r.len = len;
    std::vector<uint8_t> b;
    fab::encode(r, b);
    send(*q.link, b);
    return r.seq;
  };
  const uint64_t s1 = read(1000, 64 * 1024);
  fab::Frame f;
  const std::vector<uint8_t> frame = recv_frame(*q.link, &f);
  ASSERT_EQ(f.type, fab::FrameType::Response);
  EXPECT_EQ(f.response.seq, s1);
  EXPECT_EQ(f.response.syndrome, 0) << f.response.why;
  ASSERT_EQ(f.response.len, 64u * 1024);
  EXPECT_EQ(std::memcmp(f.response.payload, m + 1000, 64 * 1024), 0) << "the READ's data differs";
  ASSERT_EQ(::mprotect(m + kLen / 2, kLen / 2, PROT_NONE), 0);
  const uint64_t s2 = read(kLen / 4, kLen / 2);  // half of it unreadable
  const fab::Response a = q.answer();
  EXPECT_EQ(a.seq, s2);
  EXPECT_EQ(a.syndrome, kinet::emu::prm::kSynRemoteAccess);
  EXPECT_EQ(a.why.rfind("remote memory: source [0x", 0), 0u) << a.why;
  q.expect_serves(0xc7);  // the link serves on
  mr.reset();
  ::munmap(m, kLen);
}
