// The target's check at each exact edge, and a hostile peer: raw crafted
// messages through the channel (truncated, oversized, bad fields, wrong
// node, replayed sequence numbers, answers to unknown op ids, a flood and a
// stranger) rejected without touching memory (guard bytes around the
// region) and without crashing. Over the loop channel.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <deque>

#include <fstream>

#include "core/text.hpp"
#include "fabric/tcp_link.hpp"
#include "fabric/wire.hpp"
#include "transport_rig.hpp"
#include "transports/msg_wire.hpp"

namespace kinet::test {
namespace {
using namespace std::chrono_literals;
using transport::wire::MsgType;
namespace wire = transport::wire;

TEST(TransportTarget, BoundsAtTheExactEdge) {
  LoopPair p;
  Guarded g(*p.b, 256, kAccessAll);
  const uint32_t k = p.a->import_key(p.ab, g.region->remote_key());
  uint64_t v = 0x1122334455667788;
  uint8_t buf[16] = {};
  // One byte before the start, one byte past the end: rejected.
  ASSERT_EQ(p.a->put(p.ab, &v, 8, k, g.base() - 1, 1), Status::Ok);
  EXPECT_EQ(p.one().status, Status::RemoteAccess);
  ASSERT_EQ(p.a->put(p.ab, &v, 8, k, g.base() + 256 - 7, 2), Status::Ok);
  EXPECT_EQ(p.one().status, Status::RemoteAccess);
  ASSERT_EQ(p.a->get(p.ab, buf, 8, k, g.base() + 256 - 7, 3), Status::Ok);
  EXPECT_EQ(p.one().status, Status::RemoteAccess);
  ASSERT_EQ(p.a->get(p.ab, buf, 1, k, g.base() - 1, 4), Status::Ok);
  EXPECT_EQ(p.one().status, Status::RemoteAccess);
  // A range wrapping past 2^64.
  ASSERT_EQ(p.a->put(p.ab, &v, 8, k, ~uint64_t{0} - 3, 5), Status::Ok);
  EXPECT_EQ(p.one().status, Status::RemoteAccess);
  EXPECT_TRUE(g.zero());
  EXPECT_TRUE(g.guards_intact());
  // The last bytes, and 0 bytes at the very end: accepted.
  ASSERT_EQ(p.a->put(p.ab, &v, 8, k, g.base() + 256 - 8, 6), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  ASSERT_EQ(p.a->put(p.ab, &v, 0, k, g.base() + 256, 7), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  ASSERT_EQ(p.a->get(p.ab, buf, 8, k, g.base() + 256 - 8, 8), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  EXPECT_EQ(0, std::memcmp(buf, &v, 8));
  EXPECT_TRUE(g.guards_intact());
  EXPECT_EQ(p.b->rejected("out of bounds"), 5u);
}

TEST(TransportTarget, WrongAndDeregisteredKeys) {
  LoopPair p;
  Guarded g(*p.b, 64, kAccessAll);
  RemoteKey rk = g.region->remote_key();
  const uint32_t good = p.a->import_key(p.ab, rk);
  rk.rkey ^= 0x5a5a5a5a;
  const uint32_t wrong = p.a->import_key(p.ab, rk);
  uint64_t v = 7, old = 0;
  ASSERT_EQ(p.a->put(p.ab, &v, 8, wrong, g.base(), 1), Status::Ok);
  EXPECT_EQ(p.one().status, Status::RemoteAccess);
  ASSERT_EQ(p.a->fetch_add(p.ab, &old, wrong, g.base(), 1, 2), Status::Ok);
  EXPECT_EQ(p.one().status, Status::RemoteAccess);
  EXPECT_EQ(p.b->rejected("unknown key"), 2u);
  g.region.reset();  // deregistered: the key never matches again
  ASSERT_EQ(p.a->put(p.ab, &v, 8, good, g.base(), 3), Status::Ok);
  EXPECT_EQ(p.one().status, Status::RemoteAccess);
  EXPECT_TRUE(g.zero());
  EXPECT_TRUE(g.guards_intact());
  // A new registration of the same memory gets a new key: the old one still fails.
  Guarded g2(*p.b, 64, kAccessAll);
  EXPECT_NE(g2.region->remote_key().rkey, rk.rkey ^ 0x5a5a5a5a);
  ASSERT_EQ(p.a->put(p.ab, &v, 8, good, g.base(), 4), Status::Ok);
  EXPECT_EQ(p.one().status, Status::RemoteAccess);
}

// Each operation against a region missing exactly the right it needs, then
// one holding only that right.
TEST(TransportTarget, EachAccessRightOnEachOperation) {
  LoopPair p;
  struct Case {
    const char* op;
    uint32_t need;
  } cases[] = {{"put", kRemoteWrite},        {"get", kRemoteRead},     {"fetch_add", kRemoteAtomic},
               {"compare_swap", kRemoteAtomic}, {"signal", kRemoteAtomic}, {"put_signal data", kRemoteWrite},
               {"put_signal word", kRemoteAtomic}};
  for (const Case& c : cases) {
    for (bool granted : {false, true}) {
      SCOPED_TRACE(std::string(c.op) + (granted ? " with only its right" : " without its right"));
      const uint32_t acc = granted ? c.need : (kAccessAll & ~c.need);
      Guarded g(*p.b, 64, acc);
      Guarded all(*p.b, 64, kAccessAll);
      const uint32_t k = p.a->import_key(p.ab, g.region->remote_key());
      const uint32_t ka = p.a->import_key(p.ab, all.region->remote_key());
      uint64_t v = 5, old = 0;
      const std::string op = c.op;
      Status s;
      if (op == "put") s = p.a->put(p.ab, &v, 8, k, g.base(), 1);
      else if (op == "get") s = p.a->get(p.ab, &v, 8, k, g.base(), 1);
      else if (op == "fetch_add") s = p.a->fetch_add(p.ab, &old, k, g.base(), 1, 1);
      else if (op == "compare_swap") s = p.a->compare_swap(p.ab, &old, k, g.base(), 0, 1, 1);
      else if (op == "signal") s = p.a->signal(p.ab, k, g.base(), SignalOp::Add, 1, 1);
      else if (op == "put_signal data") s = p.a->put_signal(p.ab, &v, 8, k, g.base(), ka, all.base(), SignalOp::Add, 1, 1);
      else s = p.a->put_signal(p.ab, &v, 8, ka, all.base() + 8, k, g.base(), SignalOp::Add, 1, 1);
      ASSERT_EQ(s, Status::Ok);
      EXPECT_EQ(p.one().status, granted ? Status::Ok : Status::RemoteAccess);
      if (!granted) {
        EXPECT_TRUE(g.zero());
        EXPECT_TRUE(all.zero()) << "a rejected put_signal moved no byte of either range";
      }
      EXPECT_TRUE(g.guards_intact());
      EXPECT_TRUE(all.guards_intact());
    }
  }
}

TEST(TransportTarget, UnalignedAtomicsAndSignals) {
  LoopPair p;
  Guarded g(*p.b, 64, kAccessAll);
  const uint32_t k = p.a->import_key(p.ab, g.region->remote_key());
  uint64_t old = 0, v = 1;
  for (uint64_t off : {1, 4, 7}) {
    ASSERT_EQ(p.a->fetch_add(p.ab, &old, k, g.base() + off, 1, 1), Status::Ok);
    EXPECT_EQ(p.one().status, Status::RemoteInvalidRequest);
    ASSERT_EQ(p.a->compare_swap(p.ab, &old, k, g.base() + off, 0, 1, 2), Status::Ok);
    EXPECT_EQ(p.one().status, Status::RemoteInvalidRequest);
    ASSERT_EQ(p.a->signal(p.ab, k, g.base() + off, SignalOp::Set, 1, 3), Status::Ok);
    EXPECT_EQ(p.one().status, Status::RemoteInvalidRequest);
    ASSERT_EQ(p.a->put_signal(p.ab, &v, 8, k, g.base() + 32, k, g.base() + off, SignalOp::Set, 1, 4), Status::Ok);
    EXPECT_EQ(p.one().status, Status::RemoteInvalidRequest);
  }
  EXPECT_TRUE(g.zero());
  EXPECT_TRUE(g.guards_intact());
  EXPECT_EQ(p.b->rejected("unaligned"), 12u);
  ASSERT_EQ(p.a->fetch_add(p.ab, &old, k, g.base() + 8, 1, 5), Status::Ok);  // aligned: fine
  EXPECT_EQ(p.one().status, Status::Ok);
}

// ---- a hostile peer: raw messages through a loop channel -------------------

struct Hostile {
  std::unique_ptr<transport::Channel> raw = transport::make_loop_channel();
  uint64_t node = transport::random_node_id();
  uint64_t seq = 0;
  Collector got;
  // Makes `t` accept the raw channel as a peer; returns t's PeerId for it.
  PeerId join(MsgTransport& t, bool connect = true) {
    uint64_t tn;
    std::vector<uint8_t> ca;
    transport::parse_engine_address(t.address(), "target", &tn, &ca);
    raw->add_peer(ca, "target");
    return connect ? t.connect(transport::engine_address(node, raw->address()), "hostile") : 0;
  }
  void send(const std::vector<uint8_t>& m) {
    iovec iov{const_cast<uint8_t*>(m.data()), m.size()};
    ASSERT_TRUE(raw->send(0, &iov, 1, 0));
  }
  std::vector<uint8_t> request(wire::Request r, const std::vector<uint8_t>& payload = {}) {
    if (!r.node) r.node = node;
    if (!r.seq) r.seq = ++seq;
    std::vector<uint8_t> m(wire::kRequestBytes);
    wire::encode_header(r, m.data());
    m.insert(m.end(), payload.begin(), payload.end());
    return m;
  }
  std::vector<uint64_t> acks;  // Ack messages received, in order
  // Answers received (polls the target twice first: an owed ack goes from
  // the poll after the one that executed the request; acks land in `acks`).
  std::vector<wire::Answer> answers(MsgTransport& t) {
    Completion c[4];
    t.poll(c, 0);
    t.poll(c, 0);
    raw->progress(got);
    std::vector<wire::Answer> out;
    for (auto& m : got.msgs) {
      wire::MsgType ty{};
      if (wire::peek_type(m.data(), m.size(), &ty) && ty == wire::MsgType::Ack) {
        wire::Ack k;
        EXPECT_EQ(wire::decode(m.data(), m.size(), &k), "");
        EXPECT_EQ(k.node, t.node());
        acks.push_back(k.ack);
        continue;
      }
      wire::Answer a;
      EXPECT_EQ(wire::decode(m.data(), m.size(), &a), "");
      out.push_back(a);
    }
    got.msgs.clear();
    return out;
  }
};

TEST(TransportHostile, CraftedRequestsTouchNothing) {
  auto t = loop_transport("target");
  Guarded g(*t, 128, kAccessAll);
  const uint32_t key = g.region->remote_key().rkey;
  Hostile h;
  h.join(*t);
  std::vector<uint8_t> pay(16, 0xEE);
  wire::Request put;
  put.type = MsgType::Put, put.op_id = 1, put.key = key, put.raddr = g.base(), put.length = 16;
  const std::vector<uint8_t> good = h.request(put, pay);
  --h.seq;  // `good` is a template: its sequence number is reused below
  size_t expect_answers = 0, expect_malformed = 0;
  // Truncated: every prefix of a valid put.
  for (size_t n = 0; n < good.size(); ++n) {
    h.send(std::vector<uint8_t>(good.begin(), good.begin() + n));
    ++expect_malformed;
    if (n >= 32) ++expect_answers;
  }
  // Oversized: payload longer than the length field, and trailing bytes on a get.
  {
    auto m = good;
    m.push_back(0);
    h.send(m);
    wire::Request gr = put;
    gr.type = MsgType::Get, gr.length = 8;
    auto m2 = h.request(gr);
    --h.seq;
    m2.resize(m2.size() + 8);
    h.send(m2);
    expect_malformed += 2, expect_answers += 2;
  }
  // Bad fields, one at a time: (offset, value).
  const std::pair<size_t, uint8_t> bad[] = {{0, 0x00}, {4, 1}, {5, 0}, {5, 7}, {5, 0x81}, {6, 1},
                                            {7, 1},    {24, 0}, {32, 0}, {36, 1}, {56, 1}, {64, 1}, {72, 1}};
  for (auto [off, v] : bad) {
    auto m = good;
    if (off == 24 || off == 32) std::memset(m.data() + off, 0, off == 24 ? 8 : 4);  // op id 0, key 0
    else m[off] = v;
    h.send(m);
    ++expect_malformed;
    // An op id of 0 can't be answered; type 0x81 reads as a (malformed) answer.
    if (off != 24 && !(off == 5 && v == 0x81)) ++expect_answers;
  }
  EXPECT_EQ(h.answers(*t).size(), expect_answers);
  EXPECT_EQ(t->rejected("malformed"), expect_malformed);
  EXPECT_TRUE(g.zero());
  EXPECT_TRUE(g.guards_intact());
  // Every answer to a malformed request is RemoteInvalidRequest.
  for (size_t n = 40; n < 41; ++n) {
    h.send(std::vector<uint8_t>(good.begin(), good.begin() + n));
    auto a = h.answers(*t);
    ASSERT_EQ(a.size(), 1u);
    EXPECT_EQ(a[0].status, Status::RemoteInvalidRequest);
    EXPECT_EQ(a[0].op_id, 1u);
  }
  // A request claiming another node.
  wire::Request other = put;
  other.node = h.node ^ 1;
  h.send(h.request(other, pay));
  auto a = h.answers(*t);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, Status::RemoteInvalidRequest);
  EXPECT_EQ(t->rejected("wrong node"), 1u);
  // The sequence: the valid put with seq 1 runs (acknowledged, not
  // answered), its replay doesn't.
  h.seq = 0;
  ASSERT_TRUE(h.acks.empty());
  h.send(h.request(put, pay));
  a = h.answers(*t);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(h.acks, std::vector<uint64_t>{1});
  EXPECT_EQ(0, std::memcmp(g.mem(), pay.data(), 16));
  std::memset(g.mem(), 0, 16);
  h.seq = 0;
  h.send(h.request(put, pay));
  a = h.answers(*t);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, Status::RemoteInvalidRequest);
  EXPECT_EQ(t->rejected("sequence"), 1u);
  EXPECT_TRUE(g.zero());
  EXPECT_TRUE(g.guards_intact());
}

TEST(TransportHostile, StrangerIsDropped) {
  auto t = loop_transport("target");
  Guarded g(*t, 64, kAccessAll);
  Hostile h;
  h.join(*t, /*connect=*/false);
  wire::Request put;
  put.type = MsgType::Put, put.op_id = 1, put.key = g.region->remote_key().rkey, put.raddr = g.base(),
  put.length = 8;
  h.send(h.request(put, std::vector<uint8_t>(8, 1)));
  EXPECT_TRUE(h.answers(*t).empty());
  EXPECT_EQ(t->rejected("stranger"), 1u);
  EXPECT_TRUE(g.zero());
  EXPECT_TRUE(g.guards_intact());
}

TEST(TransportHostile, AnswersToUnknownOpsAreIgnored) {
  LoopPair p(1024, 20s);
  Guarded g(*p.b, 64, kAccessAll);
  const uint32_t k = p.a->import_key(p.ab, g.region->remote_key());
  Hostile h;
  h.join(*p.a);
  // Answers from the hostile peer: unknown op ids, and the op id of an
  // operation in flight to another peer (b), malformed ones.
  uint64_t v = 9;
  ASSERT_EQ(p.a->put(p.ab, &v, 8, k, g.base(), 1), Status::Ok);  // op id 1 on the wire, not yet answered
  for (uint64_t id : {1ull, 2ull, 12345ull, ~0ull}) {
    wire::Answer an;
    an.node = h.node, an.op_id = id;
    std::vector<uint8_t> m(wire::kAnswerBytes);
    wire::encode_header(an, m.data());
    h.send(m);
  }
  h.send({0x31, 0x4b, 0x4e, 0x54, 1, 0x81});  // truncated answer
  Completion c[4];
  EXPECT_EQ(p.a->poll(c, 4), 0u);
  EXPECT_EQ(p.a->rejected("unknown op id"), 4u);
  EXPECT_EQ(p.a->outstanding(), 1u);
  Completion done = p.one();  // b answers the real one
  EXPECT_EQ(done.status, Status::Ok);
  EXPECT_EQ(done.cookie, 1u);
}

TEST(TransportHostile, AcksBeyondWhatWasSentAreRejected) {
  auto a = loop_transport("rank A");
  Hostile h;
  const PeerId hp = h.join(*a);
  RemoteKey key;
  key.provider = RemoteKey::kTransport, key.node = h.node, key.rkey = 5;
  const uint32_t k = a->import_key(hp, key);
  uint64_t v = 1;
  ASSERT_EQ(a->put(hp, &v, 8, k, 0x1000, 1), Status::Ok);  // request 1 to the hostile peer
  auto send_ack = [&](uint64_t node, uint64_t ack, int reserved) {
    std::vector<uint8_t> m(wire::kAckBytes);
    wire::encode(wire::Ack{node, ack}, m.data());
    m[7] = static_cast<uint8_t>(reserved);
    h.send(m);
  };
  send_ack(h.node, 2, 0);      // request 2 was never sent
  send_ack(h.node, 1, 1);      // malformed
  send_ack(h.node ^ 1, 1, 0);  // another node
  Completion c[4];
  EXPECT_EQ(a->poll(c, 4), 0u);
  EXPECT_EQ(a->rejected("bad ack"), 1u);
  EXPECT_EQ(a->rejected("malformed ack"), 1u);
  EXPECT_EQ(a->rejected("wrong node"), 1u);
  EXPECT_EQ(a->outstanding(), 1u);
  send_ack(h.node, 1, 0);  // the real one
  ASSERT_EQ(a->poll(c, 4), 1u);
  EXPECT_EQ(c[0].cookie, 1u);
  EXPECT_EQ(c[0].status, Status::Ok);
  send_ack(h.node, 1, 0);  // again: nothing left to complete, nothing happens
  EXPECT_EQ(a->poll(c, 4), 0u);
  EXPECT_EQ(a->rejected("bad ack"), 1u);
}

TEST(TransportHostile, FloodIsRejectedAndTheTargetStillServes) {
  LoopPair p(1024, 20s);
  Guarded g(*p.b, 4096, kAccessAll);
  Hostile h;
  h.join(*p.b);
  const uint32_t key = g.region->remote_key().rkey;
  std::vector<uint8_t> pay(64, 0xEE);
  const size_t kFlood = 20000;
  Completion c[16];
  for (size_t i = 0; i < kFlood; ++i) {
    wire::Request r;
    r.type = MsgType::Put, r.op_id = i + 1, r.key = key, r.raddr = g.base() + 4096 - 63, r.length = 64;  // 1 past
    h.send(h.request(r, pay));
    if (i % 1000 == 999) p.b->poll(c, 0);  // the hostile side never takes its answers
  }
  p.b->poll(c, 0);
  EXPECT_EQ(p.b->rejected("out of bounds"), kFlood);
  EXPECT_TRUE(g.zero());
  EXPECT_TRUE(g.guards_intact());
  const uint32_t k = p.a->import_key(p.ab, g.region->remote_key());
  uint64_t v = 3;
  ASSERT_EQ(p.a->put(p.ab, &v, 8, k, g.base(), 1), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
}

// A get's answer is one message of the channel: at the longest one answer
// carries it is served; one byte more is refused (the target's poll() threw
// from the channel's send, or a too-large answer went out).
TEST(TransportHostile, AGetLongerThanOneAnswerIsRefused) {
  auto t = loop_transport("target");
  const size_t most = t->channel().max_message() - wire::kAnswerBytes;
  std::vector<uint8_t> mem(most + 1, 0x5a);
  auto region = t->register_memory(mem.data(), mem.size(), kAccessAll);
  Hostile h;
  h.join(*t);
  wire::Request g;
  g.type = MsgType::Get, g.op_id = 1, g.key = region->remote_key().rkey;
  g.raddr = reinterpret_cast<uint64_t>(mem.data()), g.length = most;
  h.send(h.request(g));
  auto a = h.answers(*t);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, Status::Ok);
  EXPECT_EQ(a[0].length, most);
  g.op_id = 2, g.length = most + 1;
  h.send(h.request(g));
  a = h.answers(*t);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, Status::RemoteInvalidRequest);
  EXPECT_EQ(a[0].length, 0u);
  EXPECT_EQ(t->rejected("too long"), 1u);
}

// A put_signal whose data lands and whose signal word faults (read-only
// memory): the log names the signal word and its key, not the data's.
TEST(TransportHostile, ASignalWordThatFaultsIsTheOneLogged) {
  LoopPair p;
  Guarded data(*p.b, 64, kAccessAll);
  const size_t pg = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* ro = mmap(nullptr, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  auto sig = p.b->register_memory(ro, pg, kAccessAll);
  const uint32_t dk = p.a->import_key(p.ab, data.region->remote_key());
  const uint32_t sk = p.a->import_key(p.ab, sig->remote_key());
  std::vector<uint8_t> src(16, 0x11);
  testing::internal::CaptureStderr();
  ASSERT_EQ(p.a->put_signal(p.ab, src.data(), 16, dk, data.base(), sk, reinterpret_cast<uint64_t>(ro),
                            SignalOp::Add, 1, 9),
            Status::Ok);
  const Completion done = p.one();
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(done.status, Status::RemoteAccess);
  EXPECT_EQ(0, std::memcmp(data.mem(), src.data(), 16)) << "the data lands before the word is tried";
  EXPECT_NE(log.find("signal word at " + text::hex(reinterpret_cast<uint64_t>(ro)) + ": the memory behind key " +
                     text::hex(sig->remote_key().rkey) + " faulted"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("behind key " + text::hex(data.region->remote_key().rkey)), std::string::npos) << log;
  sig.reset();
  munmap(ro, pg);
}

// Strangers name themselves (a port, a node id, here a loop channel): they
// share one counter and one log line, whatever names they give.
TEST(TransportHostile, StrangersShareOneCounterAndOneLogLine) {
  auto t = loop_transport("target");
  testing::internal::CaptureStderr();
  const int kStrangers = 300;
  for (int i = 0; i < kStrangers; ++i) {
    Hostile h;
    h.join(*t, /*connect=*/false);
    h.send({1, 2, 3, 4, 5, 6, 7, 8});
    h.answers(*t);
  }
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(t->rejected("stranger"), uint64_t(kStrangers));
  size_t lines = 0;
  for (size_t at = 0; (at = log.find("rejected a message from", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 1u) << log.substr(0, 2000);
}

// A channel that reorders (ordered() false): the engine holds early
// requests, at most max_held. A reorder deeper than that loses the peer,
// with the reason: dropping the request would leave a gap no later request
// closes (every later one held or refused, the peer never lost).
struct Unordered final : transport::Channel {
  std::unique_ptr<transport::Channel> in = transport::make_loop_channel();
  const char* provider() const override { return "unordered-loop"; }
  std::string describe() const override { return "loop, reporting ordered() false"; }
  bool ordered() const override { return false; }
  size_t max_message() const override { return in->max_message(); }
  std::vector<uint8_t> address() const override { return in->address(); }
  uint32_t add_peer(const std::vector<uint8_t>& a, const std::string& n) override { return in->add_peer(a, n); }
  bool send(uint32_t p, const iovec* iov, int n, uint64_t tok) override { return in->send(p, iov, n, tok); }
  size_t progress(transport::ChannelEvents& ev) override { return in->progress(ev); }
};

TEST(TransportHostile, AReorderDeeperThanMaxHeldLosesThePeer) {
  for (const uint64_t early : {4, 5}) {  // max_held 4: 4 held and then run; 5 is one too many
    MsgOptions o;
    o.name = "target";
    o.max_held = 4;
    MsgTransport t(std::make_unique<Unordered>(), transport::random_node_id(), o);
    Guarded g(t, 64, kAccessAll);
    Hostile h;
    const PeerId th = h.join(t);
    auto put = [&](uint64_t seq) {
      wire::Request r;
      r.type = MsgType::Put, r.op_id = seq, r.key = g.region->remote_key().rkey, r.raddr = g.base() + 8 * (seq % 8);
      r.length = 8, r.seq = seq;
      h.send(h.request(r, std::vector<uint8_t>(8, static_cast<uint8_t>(seq))));
    };
    for (uint64_t s = 2; s <= early + 1; ++s) put(s);
    put(1);
    auto a = h.answers(t);
    if (early == 4) {
      EXPECT_EQ(t.peer_error(th), "");
      ASSERT_EQ(a.size(), 5u);  // an unordered channel answers every put
      for (auto& x : a) EXPECT_EQ(x.status, Status::Ok);
    } else {
      EXPECT_NE(t.peer_error(th).find("reordered beyond 4 held (request 6 while expecting 1)"), std::string::npos)
          << "'" << t.peer_error(th) << "'";
    }
  }
}

// What the target queues for a peer that asks and never reads: answers are
// bounded in bytes as well as in number (a get's answer holds up to a piece:
// 88-byte requests pinned up to max_backlog pieces), and owed acks behind
// the stuck queue are one message, updated, not one per poll.
TEST(TransportHostile, APeerThatDoesNotReadIsBoundedInBytesAndAcks) {
  MsgOptions o;
  o.name = "target";
  o.max_backlog = 16;
  o.max_backlog_bytes = size_t{4} << 20;
  MsgTransport t(transport::make_loop_channel(), transport::random_node_id(), o);
  std::vector<uint8_t> mem(1 << 20, 0x5a);
  auto region = t.register_memory(mem.data(), mem.size(), kAccessAll);
  Hostile h;
  const PeerId th = h.join(t);
  Completion c[4];
  auto get = [&](uint64_t id, uint64_t len) {
    wire::Request g;
    g.type = MsgType::Get, g.op_id = id, g.key = region->remote_key().rkey;
    g.raddr = reinterpret_cast<uint64_t>(mem.data()), g.length = len;
    h.send(h.request(g));
    t.poll(c, 0);
  };
  // Gets of a piece each until the loop channel's inbox is full (64 MiB):
  // from then on answers wait in the target's queue.
  const size_t piece = t.payload_limit();
  uint64_t id = 0;
  while (t.backlog(th).queued == 0 && id < 1000) get(++id, piece);
  ASSERT_EQ(t.backlog(th).queued, 1u);
  ASSERT_EQ(t.backlog(th).answer_bytes, piece);
  // Puts that succeed: each owes an ack; the acks waiting share one message.
  for (int i = 0; i < 200; ++i) {
    wire::Request r;
    r.type = MsgType::Put, r.op_id = ++id, r.key = region->remote_key().rkey;
    r.raddr = reinterpret_cast<uint64_t>(mem.data()), r.length = 8;
    h.send(h.request(r, std::vector<uint8_t>(8, 1)));
    t.poll(c, 0);
    t.poll(c, 0);
  }
  EXPECT_EQ(t.backlog(th).queued, 2u) << "one answer and one ack";
  EXPECT_EQ(t.peer_error(th), "");
  // More of them: 4 MiB of answers queued is the bound (one piece is).
  size_t n = 0;
  while (t.peer_error(th).empty() && n < 15) get(++id, piece), ++n;
  EXPECT_EQ(n, (size_t{4} << 20) / piece) << "gets queued before the peer was lost";
  EXPECT_NE(t.peer_error(th).find("asked for data faster than it took it"), std::string::npos) << t.peer_error(th);
  EXPECT_EQ(t.backlog(th).queued, 0u);
  EXPECT_EQ(t.backlog(th).answer_bytes, 0u);
}

// ---- the tcp channel's listener against raw connections --------------------

int threads_now() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

std::vector<uint8_t> link_frame(const std::vector<uint8_t>& body) {
  std::vector<uint8_t> f(fabric::kHeaderBytes, 0);
  const uint32_t magic = fabric::kMagic, len = static_cast<uint32_t>(body.size());
  std::memcpy(f.data(), &magic, 4);
  f[4] = fabric::kVersion;
  f[5] = static_cast<uint8_t>(fabric::FrameType::Transport);
  std::memcpy(f.data() + 8, &len, 4);
  f.insert(f.end(), body.begin(), body.end());
  return f;
}

TEST(TransportLinkHostile, GarbageStrangersAndManyConnections) {
  auto t = make_transport("tcp", "target");
  Guarded g(*t, 64, kAccessAll);
  uint64_t node;
  std::vector<uint8_t> ca;
  transport::parse_engine_address(t->address(), "target", &node, &ca);
  const std::string ep(ca.begin(), ca.end());
  const int base_threads = threads_now();
  Completion c[4];
  auto poll_until = [&](auto&& done) {
    const auto end = std::chrono::steady_clock::now() + 20s;
    while (!done() && std::chrono::steady_clock::now() < end) t->poll(c, 4);
    return done();
  };
  // Garbage instead of a frame: the link is dropped, nothing else happens.
  {
    auto l = fabric::tcp_connect(ep, std::chrono::steady_clock::now() + 5s);
    const std::vector<uint8_t> junk(100, 0x42);
    l->send(junk.data(), junk.size(), std::chrono::steady_clock::now() + 5s);
  }
  // A hello claiming an address nobody connected, then a valid-looking put: a stranger.
  auto stranger = [&](const std::string& claim, uint32_t nth) {
    auto l = fabric::tcp_connect(ep, std::chrono::steady_clock::now() + 5s);
    std::vector<uint8_t> hello(12);
    const uint32_t hm = 0x484c4e4b;
    std::memcpy(hello.data(), &hm, 4);
    hello.insert(hello.end(), claim.begin(), claim.end());
    auto f = link_frame(hello);
    l->send(f.data(), f.size(), std::chrono::steady_clock::now() + 5s);
    wire::Request r;
    r.type = MsgType::Put, r.node = 5, r.seq = 1, r.op_id = 1, r.key = g.region->remote_key().rkey;
    r.raddr = g.base(), r.length = 8;
    std::vector<uint8_t> m(wire::kRequestBytes);
    wire::encode_header(r, m.data());
    m.resize(m.size() + 8, 0xEE);
    f = link_frame(m);
    l->send(f.data(), f.size(), std::chrono::steady_clock::now() + 5s);
    EXPECT_TRUE(poll_until([&] { return t->rejected("stranger") == nth; })) << t->rejected("stranger");
  };
  stranger("tcp 192.0.2.99:1", 1);
  // Many connections opened and closed: their receiver threads end (the
  // listener joins them; the kernel count shows only that they ended).
  for (int i = 0; i < 50; ++i) {
    auto l = fabric::tcp_connect(ep, std::chrono::steady_clock::now() + 5s);
    l->close();
  }
  // One more stranger: once it is rejected, the listener has accepted every
  // connection before it, so no receiver thread is still to start (without
  // this the count could touch the base while connections wait in the
  // backlog, then rise again).
  stranger("tcp 192.0.2.98:1", 2);
  EXPECT_TRUE(poll_until([&] { return threads_now() <= base_threads; }))
      << threads_now() << " threads, " << base_threads << " before the connections";
  EXPECT_TRUE(g.zero());
  EXPECT_TRUE(g.guards_intact());
  // Still serving: a real peer's put lands.
  auto a = make_transport("tcp", "rank A");
  const PeerId ab = a->connect(t->address(), "target");
  t->connect(a->address(), "rank A");
  const uint32_t k = a->import_key(ab, g.region->remote_key());
  uint64_t v = 77;
  ASSERT_EQ(a->put(ab, &v, 8, k, g.base(), 1), Status::Ok);
  std::vector<Completion> done;
  ASSERT_EQ(wait_completions(*a, 1, done, {t.get()}), 1u);
  EXPECT_EQ(done[0].status, Status::Ok);
  EXPECT_EQ(0, std::memcmp(g.mem(), &v, 8));
}

}  // namespace
}  // namespace kinet::test
