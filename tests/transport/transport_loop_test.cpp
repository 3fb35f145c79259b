// The message engine over the loop channel: every operation with its data
// byte for byte and exact statuses, split transfers, the depth, signals
// after data, timeouts, Transport::open().
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <set>
#include <thread>

#include "test_util.hpp"
#include "transport_rig.hpp"

namespace kinet::test {
namespace {
using namespace std::chrono_literals;

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + salt + (i >> 8));
  return v;
}

// The engine's behaviour over each channel of this library (in one process).
class TransportOps : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Channels, TransportOps, ::testing::Values("loop", "tcp", "shm"),
                         [](const auto& i) { return i.param; });

struct Target {
  std::vector<uint8_t> mem;
  std::unique_ptr<TransportRegion> region;
  uint32_t key_id = 0;
  uint64_t base() const { return reinterpret_cast<uint64_t>(mem.data()); }
  Target(LoopPair& p, size_t n, uint32_t access = kAccessAll) : mem(n, 0) {
    region = p.b->register_memory(mem.data(), n, access);
    key_id = p.a->import_key(p.ab, region->remote_key());
  }
};

TEST_P(TransportOps, PutGetByteForByte) {
  LoopPair p(1024, 20s, GetParam());
  Target t(p, 4096);
  auto src = pattern(1000, 7);
  ASSERT_EQ(p.a->put(p.ab, src.data(), src.size(), t.key_id, t.base() + 100, 11), Status::Ok);
  Completion c = p.one();
  EXPECT_EQ(c.cookie, 11u);
  EXPECT_EQ(c.peer, p.ab);
  EXPECT_EQ(c.status, Status::Ok);
  EXPECT_EQ(0, std::memcmp(t.mem.data() + 100, src.data(), src.size()));
  EXPECT_EQ(t.mem[99], 0);
  EXPECT_EQ(t.mem[1100], 0);
  std::vector<uint8_t> back(1000, 0xee);
  ASSERT_EQ(p.a->get(p.ab, back.data(), back.size(), t.key_id, t.base() + 100, 12), Status::Ok);
  c = p.one();
  EXPECT_EQ(c.cookie, 12u);
  EXPECT_EQ(c.status, Status::Ok);
  EXPECT_EQ(back, src);
  EXPECT_EQ(p.a->outstanding(), 0u);
}

TEST_P(TransportOps, Atomics) {
  LoopPair p(1024, 20s, GetParam());
  Target t(p, 64);
  uint64_t init = 40;
  std::memcpy(t.mem.data() + 8, &init, 8);
  uint64_t old = 0;
  ASSERT_EQ(p.a->fetch_add(p.ab, &old, t.key_id, t.base() + 8, 2, 1), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  EXPECT_EQ(old, 40u);
  ASSERT_EQ(p.a->compare_swap(p.ab, &old, t.key_id, t.base() + 8, 41, 99, 2), Status::Ok);  // miss
  EXPECT_EQ(p.one().status, Status::Ok);
  EXPECT_EQ(old, 42u);
  ASSERT_EQ(p.a->compare_swap(p.ab, &old, t.key_id, t.base() + 8, 42, 99, 3), Status::Ok);  // hit
  EXPECT_EQ(p.one().status, Status::Ok);
  EXPECT_EQ(old, 42u);
  uint64_t now = 0;
  std::memcpy(&now, t.mem.data() + 8, 8);
  EXPECT_EQ(now, 99u);
}

TEST_P(TransportOps, SignalsAndPutSignal) {
  LoopPair p(1024, 20s, GetParam());
  Target t(p, 256);
  ASSERT_EQ(p.a->signal(p.ab, t.key_id, t.base(), SignalOp::Add, 5, 1), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  ASSERT_EQ(p.a->signal(p.ab, t.key_id, t.base(), SignalOp::Add, 6, 2), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  uint64_t w = 0;
  std::memcpy(&w, t.mem.data(), 8);
  EXPECT_EQ(w, 11u);
  ASSERT_EQ(p.a->signal(p.ab, t.key_id, t.base(), SignalOp::Set, 3, 3), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  std::memcpy(&w, t.mem.data(), 8);
  EXPECT_EQ(w, 3u);
  auto src = pattern(100, 3);
  ASSERT_EQ(p.a->put_signal(p.ab, src.data(), src.size(), t.key_id, t.base() + 64, t.key_id, t.base() + 8,
                            SignalOp::Set, 77, 4),
            Status::Ok);
  Completion c = p.one();
  EXPECT_EQ(c.cookie, 4u);
  EXPECT_EQ(c.status, Status::Ok);
  EXPECT_EQ(0, std::memcmp(t.mem.data() + 64, src.data(), 100));
  std::memcpy(&w, t.mem.data() + 8, 8);
  EXPECT_EQ(w, 77u);
  // No data: a bare signal on the signal key.
  ASSERT_EQ(p.a->put_signal(p.ab, nullptr, 0, t.key_id, 0, t.key_id, t.base() + 8, SignalOp::Add, 1, 5), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  std::memcpy(&w, t.mem.data() + 8, 8);
  EXPECT_EQ(w, 78u);
}

TEST(TransportLoop, PostingArgumentsRejectedAtOnce) {
  LoopPair p;
  Target t(p, 64);
  uint64_t r;
  char buf[8];
  EXPECT_EQ(p.a->put(7, buf, 8, t.key_id, t.base(), 1), Status::InvalidArgument);           // no such peer
  EXPECT_EQ(p.a->put(p.ab, buf, 8, t.key_id + 1, t.base(), 1), Status::InvalidArgument);    // no such key id
  EXPECT_EQ(p.a->put(p.ab, nullptr, 8, t.key_id, t.base(), 1), Status::InvalidArgument);    // no buffer
  EXPECT_EQ(p.a->get(p.ab, nullptr, 8, t.key_id, t.base(), 1), Status::InvalidArgument);
  EXPECT_EQ(p.a->fetch_add(p.ab, nullptr, t.key_id, t.base(), 1, 1), Status::InvalidArgument);
  EXPECT_EQ(p.a->compare_swap(p.ab, nullptr, t.key_id, t.base(), 1, 2, 1), Status::InvalidArgument);
  EXPECT_EQ(p.a->signal(p.ab, t.key_id, t.base(), static_cast<SignalOp>(3), 1, 1), Status::InvalidArgument);
  // Lengths past the largest operation, at its edge and far beyond (2^31 + 1, 2^32, 2^64 - 1).
  for (uint64_t n : {Transport::kMaxOpBytes + 1, uint64_t{1} << 32, ~uint64_t{0}}) {
    EXPECT_EQ(p.a->put(p.ab, buf, n, t.key_id, t.base(), 1), Status::InvalidArgument) << n;
    EXPECT_EQ(p.a->get(p.ab, buf, n, t.key_id, t.base(), 1), Status::InvalidArgument) << n;
    EXPECT_EQ(p.a->put_signal(p.ab, buf, n, t.key_id, t.base(), t.key_id, t.base(), SignalOp::Add, 1, 1),
              Status::InvalidArgument)
        << n;
  }
  (void)r;
  EXPECT_EQ(p.a->outstanding(), 0u);
  // A key imported for another peer is not a key of this one.
  auto c = loop_transport("rank C");
  PeerId ac = p.a->connect(c->address(), "rank C");
  EXPECT_EQ(p.a->put(ac, buf, 8, t.key_id, t.base(), 1), Status::InvalidArgument);
  // import_key: a key of another node, of another provider.
  RemoteKey k = t.region->remote_key();
  EXPECT_THROW(p.a->import_key(ac, k), Error);
  k.provider = RemoteKey::kEmu;
  try {
    p.a->import_key(p.ab, k);
    FAIL() << "an emu key was imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("not a transport key"), std::string::npos) << e.what();
  }
}

TEST_P(TransportOps, SplitTransfers) {
  LoopPair p(1024, 20s, GetParam());
  const size_t piece = p.a->payload_limit();
  const size_t n = 3 * piece + 12345;
  Target t(p, n + 64);
  auto src = pattern(n, 9);
  ASSERT_EQ(p.a->put(p.ab, src.data(), n, t.key_id, t.base() + 32, 1), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  EXPECT_EQ(0, std::memcmp(t.mem.data() + 32, src.data(), n));
  std::vector<uint8_t> back(n);
  ASSERT_EQ(p.a->get(p.ab, back.data(), n, t.key_id, t.base() + 32, 2), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  EXPECT_EQ(back, src);
  // The middle pieces run past the region: the first failing piece's status, earlier pieces landed.
  std::fill(t.mem.begin(), t.mem.end(), 0);
  ASSERT_EQ(p.a->put(p.ab, src.data(), n, t.key_id, t.base() + 128, 3), Status::Ok);
  EXPECT_EQ(p.one().status, Status::RemoteAccess);
  EXPECT_EQ(0, std::memcmp(t.mem.data() + 128, src.data(), 3 * piece));  // pieces 0..2 inside
  // A split put_signal whose data fails does not signal.
  uint64_t w = 0;
  ASSERT_EQ(p.a->put_signal(p.ab, src.data(), n, t.key_id, t.base() + 128, t.key_id, t.base(), SignalOp::Set, 5, 4),
            Status::Ok);
  EXPECT_EQ(p.one().status, Status::RemoteAccess);
  std::memcpy(&w, t.mem.data(), 8);
  EXPECT_EQ(w, 0u);
  ASSERT_EQ(p.a->put_signal(p.ab, src.data(), n, t.key_id, t.base() + 32, t.key_id, t.base(), SignalOp::Set, 5, 5),
            Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  std::memcpy(&w, t.mem.data(), 8);
  EXPECT_EQ(w, 5u);
  EXPECT_EQ(0, std::memcmp(t.mem.data() + 32, src.data(), n));
}

TEST_P(TransportOps, MoreOperationsThanTheDepth) {
  LoopPair p(/*depth=*/16, 20s, GetParam());
  Target t(p, 8 * 1000);
  size_t posted = 0, nospace = 0;
  std::vector<Completion> done;
  std::vector<uint64_t> vals(1000);
  while (done.size() < 1000) {
    while (posted < 1000) {
      vals[posted] = posted * 3 + 1;
      Status s = p.a->put(p.ab, &vals[posted], 8, t.key_id, t.base() + 8 * posted, posted);
      if (s == Status::NoSpace) {
        ++nospace;
        EXPECT_EQ(p.a->outstanding(), 16u);
        break;
      }
      ASSERT_EQ(s, Status::Ok);
      ++posted;
    }
    ASSERT_GT(wait_completions(*p.a, 1, done, {p.b.get()}), 0u);
  }
  EXPECT_GT(nospace, 0u);
  for (size_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(done[i].cookie, i);  // one requester, one target, ordered: in posting order
    EXPECT_EQ(done[i].status, Status::Ok);
    uint64_t v;
    std::memcpy(&v, t.mem.data() + 8 * i, 8);
    ASSERT_EQ(v, i * 3 + 1);
  }
}

// A waiter on the target that sees the signal sees every earlier put's data.
TEST_P(TransportOps, SignalAfterData) {
  LoopPair p(/*depth=*/4096, 20s, GetParam());
  const size_t kPuts = 500, kEach = 256;
  Target t(p, kPuts * kEach + 64);
  std::vector<uint8_t> src = pattern(kPuts * kEach, 1);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{-1};
  auto* sig = reinterpret_cast<uint64_t*>(t.mem.data() + kPuts * kEach);
  std::thread target([&] {
    Completion c[8];
    while (!stop.load()) {
      p.b->poll(c, 8);
    }
  });
  std::thread waiter([&] {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (__atomic_load_n(sig, __ATOMIC_ACQUIRE) != 1 && std::chrono::steady_clock::now() < deadline) {
    }
    if (__atomic_load_n(sig, __ATOMIC_ACQUIRE) != 1) return;
    bad = std::memcmp(t.mem.data(), src.data(), kPuts * kEach) == 0 ? 0 : 1;
  });
  for (size_t i = 0; i < kPuts; ++i)
    ASSERT_EQ(p.a->put(p.ab, src.data() + i * kEach, kEach, t.key_id, t.base() + i * kEach, i), Status::Ok);
  ASSERT_EQ(p.a->signal(p.ab, t.key_id, t.base() + kPuts * kEach, SignalOp::Set, 1, 999), Status::Ok);
  std::vector<Completion> done;
  EXPECT_EQ(wait_completions(*p.a, kPuts + 1, done, {}), kPuts + 1);
  waiter.join();
  stop = true;
  target.join();
  EXPECT_EQ(bad.load(), 0) << "-1: the waiter never saw the signal; 1: it saw it before the data";
}

TEST_P(TransportOps, TimeoutNamesThePeer) {
  LoopPair p(1024, 300ms, GetParam());
  Target t(p, 64);
  uint64_t v = 1;
  ASSERT_EQ(p.a->put(p.ab, &v, 8, t.key_id, t.base(), 1), Status::Ok);
  ASSERT_EQ(p.a->put(p.ab, &v, 8, t.key_id, t.base(), 2), Status::Ok);
  // b never polls.
  std::vector<Completion> done;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(wait_completions(*p.a, 2, done, {}), 2u);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
  for (auto& c : done) EXPECT_EQ(c.status, Status::TransportRetryExceeded);
  EXPECT_EQ(p.a->peer_error(p.ab), "timeout after 300 ms waiting for put to rank B");
  // Later operations: flushed at once.
  ASSERT_EQ(p.a->put(p.ab, &v, 8, t.key_id, t.base(), 3), Status::Ok);
  done.clear();
  ASSERT_EQ(wait_completions(*p.a, 1, done, {}, 100ms), 1u);
  EXPECT_EQ(done[0].status, Status::WrFlushed);
  EXPECT_EQ(done[0].cookie, 3u);
}

TEST_P(TransportOps, PeerClosedIsLost) {
  LoopPair p(1024, 20s, GetParam());
  Target t(p, 64);
  uint64_t v = 1;
  ASSERT_EQ(p.a->put(p.ab, &v, 8, t.key_id, t.base(), 1), Status::Ok);
  t.region.reset();
  p.b.reset();
  std::vector<Completion> done;
  ASSERT_EQ(wait_completions(*p.a, 1, done, {}, 5s), 1u);
  EXPECT_EQ(done[0].status, Status::TransportRetryExceeded);
  EXPECT_EQ(p.a->peer_error(p.ab).rfind("peer lost: ", 0), 0u) << p.a->peer_error(p.ab);
}

TEST(TransportLoop, RegisterAndConnectArguments) {
  auto t = loop_transport("rank A");
  std::vector<uint8_t> buf(64);
  auto code = [&](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.code();
    }
    return static_cast<ErrorCode>(-1);
  };
  EXPECT_EQ(code([&] { t->register_memory(nullptr, 8, kAccessAll); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code([&] { t->register_memory(buf.data(), 0, kAccessAll); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code([&] { t->register_memory(reinterpret_cast<void*>(~uintptr_t{0} - 3), 8, kAccessAll); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(code([&] { t->register_memory(buf.data(), 8, kAccessAll + 1); }), ErrorCode::InvalidArgument);
  auto r = t->register_memory(buf.data(), 64, kRemoteRead);
  const RemoteKey k = r->remote_key();
  EXPECT_EQ(k.provider, RemoteKey::kTransport);
  EXPECT_EQ(k.node, t->node());
  EXPECT_NE(k.rkey, 0u);
  EXPECT_EQ(k.access, uint32_t{kRemoteRead});
  EXPECT_EQ(RemoteKey::deserialize(k.serialize().data(), k.serialize().size()).rkey, k.rkey);
  // Keys are never reused in the process.
  std::set<uint32_t> keys{k.rkey};
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(keys.insert(t->register_memory(buf.data(), 8, 0)->remote_key().rkey).second);
  // connect: a malformed blob names the peer; a loop channel that is gone is unreachable.
  try {
    t->connect({1, 2, 3}, "rank Z");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("rank Z"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> gone;
  {
    auto u = loop_transport("rank U");
    gone = u->address();
  }
  EXPECT_EQ(code([&] { t->connect(gone, "rank U"); }), ErrorCode::System);
  EXPECT_EQ(t->connect(loop_transport("rank V")->address(), "rank V") + 0, 0u) << "not numbered from 0";
}

// register_memory / a region's destructor / import_key on other threads while
// operations flow (the header's threading rule; the TSan build runs it).
TEST(TransportLoop, RegistrationConcurrentWithTraffic) {
  LoopPair p;
  std::vector<uint8_t> mem(4096);
  auto r = p.b->register_memory(mem.data(), mem.size(), kAccessAll);
  const uint32_t k = p.a->import_key(p.ab, r->remote_key());
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    std::vector<uint8_t> other(256);
    while (!stop.load()) {
      auto q = p.b->register_memory(other.data(), other.size(), kAccessAll);
      (void)p.a->import_key(p.ab, q->remote_key());
    }
  });
  std::vector<uint64_t> v(512);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = i;
    ASSERT_EQ(p.a->put(p.ab, &v[i], 8, k, reinterpret_cast<uint64_t>(mem.data()) + 8 * i, i), Status::Ok);
  }
  std::vector<Completion> done;
  EXPECT_EQ(wait_completions(*p.a, v.size(), done, {p.b.get()}), v.size());
  stop = true;
  churn.join();
  for (auto& c : done) EXPECT_EQ(c.status, Status::Ok);
  EXPECT_EQ(0, std::memcmp(mem.data(), v.data(), 8 * v.size()));
}

// A channel that does not keep order: each progress() delivers what the
// loop channel under it received in reverse. The engine must reorder by
// sequence number, so data still lands before the signal after it.
class ReversingChannel final : public transport::Channel, transport::ChannelEvents {
 public:
  ReversingChannel() : in_(transport::make_loop_channel()) {}
  const char* provider() const override { return "reversing"; }
  std::string describe() const override { return "reversing loop"; }
  bool ordered() const override { return false; }
  size_t max_message() const override { return 4096; }
  std::vector<uint8_t> address() const override { return in_->address(); }
  uint32_t add_peer(const std::vector<uint8_t>& a, const std::string& n) override { return in_->add_peer(a, n); }
  bool send(uint32_t p, const iovec* iov, int n, uint64_t t) override { return in_->send(p, iov, n, t); }
  size_t progress(transport::ChannelEvents& ev) override {
    up_ = &ev;
    const size_t n = in_->progress(*this);
    for (auto it = batch_.rbegin(); it != batch_.rend(); ++it) ev.on_message(it->first, it->second.data(), it->second.size());
    reversed_ += batch_.size() > 1;
    batch_.clear();
    return n;
  }
  size_t reversed_ = 0;

 private:
  void on_message(uint32_t p, const uint8_t* d, size_t n) override { batch_.emplace_back(p, std::vector<uint8_t>(d, d + n)); }
  void on_stranger(std::string_view w, const uint8_t* d, size_t n) override { up_->on_stranger(w, d, n); }
  void on_sent(uint64_t t, bool ok) override { up_->on_sent(t, ok); }
  void on_peer_lost(uint32_t p, const std::string& w) override { up_->on_peer_lost(p, w); }
  std::unique_ptr<transport::Channel> in_;
  transport::ChannelEvents* up_ = nullptr;
  std::vector<std::pair<uint32_t, std::vector<uint8_t>>> batch_;
};

TEST(TransportLoop, UnorderedChannelIsReordered) {
  MsgOptions o;
  o.timeout = 20s;
  auto rc = std::make_unique<ReversingChannel>();
  ReversingChannel* raw = rc.get();
  auto b = std::make_unique<MsgTransport>(std::move(rc), transport::random_node_id(), o);
  auto a = std::make_unique<MsgTransport>(std::make_unique<ReversingChannel>(), transport::random_node_id(), o);
  const PeerId ab = a->connect(b->address(), "rank B");
  b->connect(a->address(), "rank A");
  std::vector<uint8_t> mem(64 * 1024 + 8, 0);
  auto r = b->register_memory(mem.data(), mem.size(), kAccessAll);
  const uint32_t k = a->import_key(ab, r->remote_key());
  const uint64_t base = reinterpret_cast<uint64_t>(mem.data());
  // Split puts (4 KiB messages) then a set of the word, then an add: applied in order.
  auto src = pattern(64 * 1024, 5);
  ASSERT_EQ(a->put(ab, src.data(), src.size(), k, base, 1), Status::Ok);
  ASSERT_EQ(a->signal(ab, k, base + 64 * 1024, SignalOp::Set, 10, 2), Status::Ok);
  ASSERT_EQ(a->signal(ab, k, base + 64 * 1024, SignalOp::Add, 1, 3), Status::Ok);
  std::vector<Completion> done;
  ASSERT_EQ(wait_completions(*a, 3, done, {b.get()}), 3u);
  for (auto& c : done) EXPECT_EQ(c.status, Status::Ok);
  EXPECT_GT(raw->reversed_, 0u) << "the channel never reordered anything: the test proves nothing";
  EXPECT_EQ(0, std::memcmp(mem.data(), src.data(), src.size()));
  uint64_t w;
  std::memcpy(&w, mem.data() + 64 * 1024, 8);
  EXPECT_EQ(w, 11u) << "set then add: 11; add then set would give 10";
}

TEST(TransportOpen, EnvironmentAndMissingBackends) {
  setenv("KINET_TRANSPORT", "loop", 1);
  auto t = Transport::open({});
  unsetenv("KINET_TRANSPORT");
  EXPECT_STREQ(t->provider(), "loop");
  auto names = Transport::providers();
  EXPECT_EQ(names.front() == "ucx" || names.front() == "ofi" || names.front() == "tcp", true) << names.front();
  EXPECT_EQ(Transport::open({.provider = "auto", .name = {}})->provider(), names.front()) << "auto takes the first that starts";
  for (const char* n : {"ucx", "ofi"})
    if (std::find(names.begin(), names.end(), n) == names.end()) {
      try {
        Transport::open({.provider = n, .name = {}});
        FAIL() << n;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::NotSupported);
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
      }
    }
}

TEST(TransportOpen, Providers) {
  auto names = Transport::providers();
  EXPECT_NE(std::find(names.begin(), names.end(), "loop"), names.end());
  auto t = Transport::open({.provider = "loop", .name = "x"});
  EXPECT_STREQ(t->provider(), "loop");
  EXPECT_NE(t->node(), 0u);
  try {
    Transport::open({.provider = "nonesuch", .name = {}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("nonesuch"), std::string::npos);
  }
}

// Zero-length transfers: a put/get of 0 bytes moves nothing and completes Ok
// (as an RDMA write/read of 0 bytes does); a put_signal of 0 bytes is the
// signal alone. Nothing outside the target's region is touched.
TEST(TransportEdges, ZeroLengthTransfers) {
  LoopPair p;
  Target t(p, 64);
  char buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_EQ(p.a->put(p.ab, buf, 0, t.key_id, t.base(), 1), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  ASSERT_EQ(p.a->get(p.ab, buf, 0, t.key_id, t.base() + 64, 2), Status::Ok);  // at the end: an empty range
  Completion c = p.one();
  EXPECT_EQ(c.status, Status::Ok);
  EXPECT_EQ(c.cookie, 2u);
  EXPECT_EQ(buf[0], 1);
  ASSERT_EQ(p.a->put_signal(p.ab, buf, 0, t.key_id, t.base(), t.key_id, t.base() + 8, SignalOp::Add, 5, 3),
            Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  uint64_t sig = 0;
  std::memcpy(&sig, t.mem.data() + 8, 8);
  EXPECT_EQ(sig, 5u);
  for (size_t i = 0; i < t.mem.size(); ++i) {
    if (i < 8 || i >= 16) {
      EXPECT_EQ(t.mem[i], 0) << i;
    }
  }
  // Zero bytes one past the end are still past the end of a 64-byte region.
  ASSERT_EQ(p.a->put(p.ab, buf, 0, t.key_id, t.base() + 65, 4), Status::Ok);
  EXPECT_EQ(p.one().status, Status::RemoteAccess);
}

// A region deregistered on the target while the requester still holds its
// imported key: later operations are refused at the target (RemoteAccess),
// the freed memory is never touched, and the transport keeps serving others.
TEST(TransportEdges, KeyOfADeregisteredRegion) {
  LoopPair p;
  Target dead(p, 64), live(p, 64);
  dead.region.reset();
  uint64_t v = 7;
  ASSERT_EQ(p.a->put(p.ab, &v, 8, dead.key_id, dead.base(), 1), Status::Ok);
  EXPECT_EQ(p.one().status, Status::RemoteAccess);
  for (uint8_t b : dead.mem) EXPECT_EQ(b, 0);
  ASSERT_EQ(p.a->put(p.ab, &v, 8, live.key_id, live.base(), 2), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
}

// Destroying a transport with operations in flight: the destructor returns
// within a bound; the peer sees it lost; nothing crashes.
TEST(TransportEdges, DestroyedWithOperationsInFlight) {
  LoopPair p;
  Target t(p, 1 << 20);
  std::vector<uint8_t> src(1 << 20, 0x5a);
  for (uint64_t i = 0; i < 16; ++i) ASSERT_EQ(p.a->put(p.ab, src.data(), src.size(), t.key_id, t.base(), i), Status::Ok);
  const auto t0 = std::chrono::steady_clock::now();
  p.a.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 15s);
  // b is still usable: a new peer can reach it (both sides connect).
  auto c = loop_transport("rank C");
  PeerId cb = c->connect(p.b->address(), "rank B");
  p.b->connect(c->address(), "rank C");
  const uint32_t k = c->import_key(cb, t.region->remote_key());
  uint64_t v = 9;
  ASSERT_EQ(c->put(cb, &v, 8, k, t.base(), 1), Status::Ok);
  std::vector<Completion> done;
  EXPECT_EQ(wait_completions(*c, 1, done, {p.b.get()}), 1u);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, Status::Ok);
}
// Remote fetch_adds and signal adds on host memory are CPU atomics at the
// target: none is lost against the target's own threads adding to the same
// word at the same time (a read-modify-write through copies lost updates).
TEST(TransportEdges, AtomicsAreAtomicWithTheTargetsCpuAtomics) {
  LoopPair p;
  Target t(p, 64);
  auto* word = reinterpret_cast<uint64_t*>(t.mem.data());
  auto* sig = reinterpret_cast<uint64_t*>(t.mem.data() + 8);
  constexpr int kRemote = 2000;
  std::atomic<bool> stop{false}, started{false};
  uint64_t local_adds = 0;  // the target's own adds, for as long as the remote ones run
  std::thread local([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      __atomic_fetch_add(word, 1, __ATOMIC_RELAXED);
      __atomic_fetch_add(sig, 1, __ATOMIC_RELAXED);
      if (++local_adds == 1000) started.store(true);
    }
  });
  while (!started.load()) std::this_thread::yield();  // the two sides overlap
  std::vector<uint64_t> olds(kRemote);
  size_t posted = 0, done = 0;
  while (done < 2 * kRemote) {
    while (posted < 2 * kRemote) {
      const size_t i = posted / 2;
      const Status s = posted % 2 == 0 ? p.a->fetch_add(p.ab, &olds[i], t.key_id, t.base(), 1, posted)
                                       : p.a->signal(p.ab, t.key_id, t.base() + 8, SignalOp::Add, 1, posted);
      if (s == Status::NoSpace) break;
      ASSERT_EQ(s, Status::Ok);
      ++posted;
    }
    Completion c[64];
    const size_t n = p.a->poll(c, 64);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(c[i].status, Status::Ok) << c[i].cookie;
    done += n;
    p.b->poll(c, 64);
  }
  stop = true;
  local.join();
  EXPECT_EQ(__atomic_load_n(word, __ATOMIC_ACQUIRE), local_adds + kRemote);
  EXPECT_EQ(__atomic_load_n(sig, __ATOMIC_ACQUIRE), local_adds + kRemote);
  std::set<uint64_t> seen(olds.begin(), olds.end());
  EXPECT_EQ(seen.size(), size_t{kRemote}) << "two fetch_adds saw the same old value";
  EXPECT_GT(local_adds, 0u);
}
}  // namespace
// Imported keys are capped (2^20 per transport: they are read without a lock
// from fixed chunks): the key one past the cap is ResourceExhausted and takes
// nothing; the last one that fit still serves a put.
TEST(TransportEdges, ImportedKeysCapIsExactAndTheLastKeyWorks) {
  LoopPair p;
  Target t(p, 64);  // key id 0
  const RemoteKey k = t.region->remote_key();
  constexpr uint32_t kCap = 1u << 20;
  uint32_t last = 0;
  for (uint32_t i = 1; i < kCap; ++i) last = p.a->import_key(p.ab, k);
  ASSERT_EQ(last, kCap - 1);
  expect_error([&] { p.a->import_key(p.ab, k); }, ErrorCode::ResourceExhausted, "keys imported and not released");
  const uint64_t v = 0x1122334455667788ull;
  ASSERT_EQ(p.a->put(p.ab, &v, 8, last, t.base() + 8, 5), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  EXPECT_EQ(std::memcmp(t.mem.data() + 8, &v, 8), 0);
  EXPECT_EQ(p.a->put(p.ab, &v, 8, kCap, t.base(), 6), Status::InvalidArgument);  // never issued
}

// release_key: the id no longer posts, a re-import reuses the place under
// another id (the old one stays dead), a second release and an id never
// imported are refused, and import / release cycles past the 2^20 cap go on.
TEST(TransportEdges, ReleasedKeysNeverPostAgainAndTheirPlacesAreReused) {
  LoopPair p;
  Target t(p, 64);
  const RemoteKey k = t.region->remote_key();
  const uint64_t v = 7;
  const uint32_t a = p.a->import_key(p.ab, k);
  ASSERT_EQ(p.a->put(p.ab, &v, 8, a, t.base(), 1), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  p.a->release_key(a);
  EXPECT_EQ(p.a->put(p.ab, &v, 8, a, t.base(), 2), Status::InvalidArgument);
  expect_error([&] { p.a->release_key(a); }, ErrorCode::InvalidArgument, "released already");
  expect_error([&] { p.a->release_key(a + 1); }, ErrorCode::InvalidArgument, "never imported");
  const uint32_t b = p.a->import_key(p.ab, k);
  EXPECT_NE(b, a);
  EXPECT_EQ(b & ((1u << 20) - 1), a) << "the released place is reused";
  EXPECT_EQ(p.a->put(p.ab, &v, 8, a, t.base(), 3), Status::InvalidArgument) << "the old id matched the new key";
  ASSERT_EQ(p.a->put(p.ab, &v, 8, b, t.base(), 4), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
  p.a->release_key(b);
  for (uint32_t i = 0; i < (1u << 20) + 16; ++i) p.a->release_key(p.a->import_key(p.ab, k));
  const uint32_t c = p.a->import_key(p.ab, k);
  ASSERT_EQ(p.a->put(p.ab, &v, 8, c, t.base(), 5), Status::Ok);
  EXPECT_EQ(p.one().status, Status::Ok);
}

}  // namespace kinet::test
