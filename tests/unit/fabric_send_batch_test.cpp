// The requester's send batching (RemotePeer::start / flush): Requests queue
// until flush(), a full queue or an in-place WRITE; they leave in order, in as
// few sends as that allows, no send larger than kMaxFrame; a send that fails
// completes every queued Call as lost; recycled Calls keep at most a few
// frame buffers. Driven through a Link that records each send_parts call and
// hands out scripted frames (no socket, no responder).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fabric/remote_fabric.hpp"
#include "fabric/wire.hpp"
#include "kinet/kinet.hpp"

namespace {
namespace fab = kinet::fabric;
using kinet::emu::Call;
using kinet::emu::RemotePeer;
using namespace std::chrono_literals;

class RecordingLink final : public fab::Link {
 public:
  void send_parts(const uint8_t* head, size_t n1, const uint8_t* body, size_t n2, fab::Clock::time_point) override {
    std::lock_guard<std::mutex> g(mu_);
    if (fail_sends_) throw kinet::Error(kinet::ErrorCode::System, name_ + " peer lost: cable pulled");
    std::vector<uint8_t> b(head, head + n1);
    if (n2) b.insert(b.end(), body, body + n2);
    sends_.push_back(std::move(b));
  }
  // Hands out the frames deliver() queued; none else ever comes. Ends soon
  // after close().
  bool recv(std::vector<uint8_t>& out, fab::Clock::time_point deadline) override {
    while (fab::Clock::now() < deadline) {
      if (closed_.load()) throw kinet::Error(kinet::ErrorCode::System, name_ + " peer lost: the link was closed");
      {
        std::lock_guard<std::mutex> g(mu_);
        if (!inbox_.empty()) {
          out.assign(inbox_.front().begin(), inbox_.front().end());
          inbox_.erase(inbox_.begin());
          return true;
        }
      }
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }
  void deliver(std::vector<uint8_t> frame) {
    std::lock_guard<std::mutex> g(mu_);
    inbox_.push_back(std::move(frame));
  }
  void close() override { closed_.store(true); }
  const std::string& peer_name() const override { return name_; }
  // As a TCP link: payloads may wait in place for the batch (the default
  // send_gather joins the pieces into one recorded send).
  bool kernel_reads_body() const override { return kernel_reads_; }
  bool kernel_reads_ = false;

  std::vector<std::vector<uint8_t>> sends() {
    std::lock_guard<std::mutex> g(mu_);
    return sends_;
  }
  void fail_sends() {
    std::lock_guard<std::mutex> g(mu_);
    fail_sends_ = true;
  }

 private:
  std::string name_ = "recording";
  std::mutex mu_;
  std::vector<std::vector<uint8_t>> sends_;
  std::vector<std::vector<uint8_t>> inbox_;
  bool fail_sends_ = false;
  std::atomic<bool> closed_{false};
};

struct Rig {
  RecordingLink* link;
  std::unique_ptr<RemotePeer> peer;
  std::vector<uint8_t> payload = std::vector<uint8_t>(fab::kMaxChunk);
  Rig() {
    auto l = std::make_unique<RecordingLink>();
    link = l.get();
    peer = std::make_unique<RemotePeer>(std::move(l), "tcp 192.0.2.1:1", 10000);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 3);
  }
  std::shared_ptr<Call> write(uint64_t len, RemotePeer::Payload life = RemotePeer::Payload::UntilReturn,
                              const uint8_t* src = nullptr) {
    fab::Request rq;
    rq.from_node = 1;
    rq.to_node = 2;
    rq.from_qpn = 3;
    rq.to_qpn = 4;
    rq.kind = fab::OpKind::Write;
    rq.raddr = 0x1000;
    rq.rkey = 5;
    rq.len = len;
    rq.payload = src ? src : payload.data();
    return peer->start(rq, life);
  }
  std::shared_ptr<Call> read(uint64_t len) {
    fab::Request rq;
    rq.from_node = 1;
    rq.to_node = 2;
    rq.kind = fab::OpKind::Read;
    rq.raddr = 0x1000;
    rq.len = len;
    return peer->start(rq);
  }
};

// The frames of one send, decoded in order (each Request's seq and length).
std::vector<fab::Request> frames(const std::vector<uint8_t>& b) {
  std::vector<fab::Request> out;
  size_t off = 0;
  while (off < b.size()) {
    uint32_t body = 0;
    std::string why;
    EXPECT_TRUE(fab::frame_body_len(b.data() + off, fab::kMaxFrame, &body, &why)) << why;
    const size_t n = fab::kHeaderBytes + body;
    EXPECT_LE(off + n, b.size()) << "a frame runs past the end of its send";
    fab::Frame f;
    EXPECT_TRUE(fab::decode(b.data() + off, n, &f, &why)) << why;
    EXPECT_EQ(f.type, fab::FrameType::Request);
    out.push_back(f.request);
    off += n;
  }
  return out;
}
}  // namespace

TEST(FabricSendBatch, QueuedRequestsLeaveTogetherAtFlush) {
  Rig r;
  for (int i = 0; i < 3; ++i) r.write(64 + i);
  EXPECT_TRUE(r.link->sends().empty()) << "a Request left before flush()";
  r.peer->flush();
  const auto s = r.link->sends();
  ASSERT_EQ(s.size(), 1u);
  const auto f = frames(s[0]);
  ASSERT_EQ(f.size(), 3u);
  for (size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(f[i].seq, i + 1);
    EXPECT_EQ(f[i].len, 64 + i);
    EXPECT_EQ(std::vector<uint8_t>(f[i].payload, f[i].payload + f[i].len),
              std::vector<uint8_t>(r.payload.begin(), r.payload.begin() + 64 + i));
  }
  r.peer->flush();  // nothing queued: no send
  EXPECT_EQ(r.link->sends().size(), 1u);
}

TEST(FabricSendBatch, AnInPlaceWriteTakesTheQueueAlong) {
  Rig r;
  r.write(100);
  r.write(RemotePeer::kGatherBytes - 1);  // still copied into the queue
  EXPECT_TRUE(r.link->sends().empty());
  r.write(RemotePeer::kGatherBytes);  // leaves now, after the two before it
  const auto s = r.link->sends();
  ASSERT_EQ(s.size(), 1u);
  const auto f = frames(s[0]);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[2].seq, 3u);
  EXPECT_EQ(f[2].len, RemotePeer::kGatherBytes);
  EXPECT_EQ(std::vector<uint8_t>(f[2].payload, f[2].payload + f[2].len),
            std::vector<uint8_t>(r.payload.begin(), r.payload.begin() + RemotePeer::kGatherBytes));
}

// Payloads that stay put until they leave (Payload::UntilSent: a registered
// region) wait for the batch over a link whose kernel reads them: every
// Request, copied or in place, leaves at flush() in one send, in order,
// each payload its own bytes. Over a link that would copy them itself they
// leave at once, as a staging buffer's do.
TEST(FabricSendBatch, InPlacePayloadsJoinTheBatch) {
  using P = RemotePeer::Payload;
  Rig r;
  r.link->kernel_reads_ = true;
  std::vector<uint8_t> a(RemotePeer::kGatherBytes, 0xa1), b(RemotePeer::kGatherBytes + 5, 0xb2);
  r.write(100);
  r.write(a.size(), P::UntilSent, a.data());
  r.write(200);
  r.write(b.size(), P::UntilSent, b.data());
  r.write(300);
  EXPECT_TRUE(r.link->sends().empty()) << "an in-place payload left before flush()";
  r.peer->flush();
  auto s = r.link->sends();
  ASSERT_EQ(s.size(), 1u);
  const auto f = frames(s[0]);
  ASSERT_EQ(f.size(), 5u);
  const std::vector<uint64_t> lens = {100, a.size(), 200, b.size(), 300};
  for (size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(f[i].seq, i + 1);
    ASSERT_EQ(f[i].len, lens[i]);
    const uint8_t* want = i == 1 ? a.data() : i == 3 ? b.data() : r.payload.data();
    EXPECT_EQ(std::memcmp(f[i].payload, want, f[i].len), 0) << "frame " << i;
  }
  // A staging buffer's payload (UntilReturn) leaves at once and takes the
  // waiting ones along, in order.
  r.write(a.size(), P::UntilSent, a.data());
  r.write(RemotePeer::kGatherBytes);
  s = r.link->sends();
  ASSERT_EQ(s.size(), 2u);
  ASSERT_EQ(frames(s[1]).size(), 2u);
  EXPECT_EQ(frames(s[1])[0].payload[0], 0xa1);
  // A link that copies what it sends: UntilSent leaves at once too.
  Rig c;
  c.write(a.size(), P::UntilSent, a.data());
  EXPECT_EQ(c.link->sends().size(), 1u) << "an in-place payload waited over a link that reads it itself";
}

// A batch of in-place payloads leaves by itself at kGatherBatchBytes,
// never over kMaxFrame.
TEST(FabricSendBatch, InPlaceBatchesLeaveAtTheirLimit) {
  using P = RemotePeer::Payload;
  Rig r;
  r.link->kernel_reads_ = true;
  for (const uint64_t len : {RemotePeer::kGatherBytes, uint64_t{128 * 1024}}) {
    const size_t before = r.link->sends().size();
    const size_t per = len + fab::kHeaderBytes + fab::kRequestFixed;
    const size_t n = (RemotePeer::kGatherBatchBytes + per - 1) / per;  // the last one fills it
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(r.link->sends().size(), before) << "left at " << i << " payloads of " << len << " B";
      r.write(len, P::UntilSent);
    }
    const auto s = r.link->sends();
    ASSERT_EQ(s.size(), before + 1) << "kGatherBatchBytes of " << len << " B payloads waited";
    EXPECT_EQ(frames(s.back()).size(), n);
  }
  // Whole chunks: each over kGatherBatchBytes, each leaves on its own.
  r.write(fab::kMaxChunk, P::UntilSent);
  r.write(fab::kMaxChunk, P::UntilSent);
  r.peer->flush();
  const auto s = r.link->sends();
  ASSERT_EQ(s.size(), 4u);
  for (const auto& x : s) EXPECT_LE(x.size(), fab::kMaxFrame);
  EXPECT_EQ(frames(s[2]).size(), 1u);
  EXPECT_EQ(frames(s[3]).size(), 1u);
}

TEST(FabricSendBatch, AFullQueueLeavesAndNoSendExceedsAFrame) {
  Rig r;
  const uint64_t len = 4000;
  const size_t per = fab::kHeaderBytes + fab::kRequestFixed + len;
  const size_t n = RemotePeer::kSendBatchBytes / per + 1;  // the last one fills the queue
  for (size_t i = 0; i < n; ++i) r.write(len);
  auto s = r.link->sends();
  ASSERT_EQ(s.size(), 1u) << "the queue reached kSendBatchBytes without leaving";
  EXPECT_EQ(frames(s[0]).size(), n);
  // A queue, then a WRITE of a whole chunk: together over kMaxFrame, so the
  // queue goes first, on its own.
  r.write(len);
  r.write(fab::kMaxChunk);
  s = r.link->sends();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(frames(s[1]).size(), 1u);
  const auto big = frames(s[2]);
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].len, fab::kMaxChunk);
  EXPECT_EQ(big[0].seq, n + 2);
  for (const auto& b : s) EXPECT_LE(b.size(), fab::kMaxFrame);
}

// A queue that a large in-place WRITE would push past kMaxFrame leaves
// first; the WRITE itself then waits in place and must not count as sent
// (the engine corks on has_queued(), a peer timeout runs from the send).
TEST(FabricSendBatch, AWriteWaitingInPlaceAfterAnEarlyFlushIsNotSent) {
  using P = RemotePeer::Payload;
  Rig r;
  r.link->kernel_reads_ = true;
  const size_t head = fab::kHeaderBytes + fab::kRequestFixed;
  const size_t in_place = (RemotePeer::kGatherBatchBytes - 1) / (RemotePeer::kGatherBytes + head);
  for (size_t i = 0; i < in_place; ++i) r.write(RemotePeer::kGatherBytes, P::UntilSent);
  const uint64_t small = 4000;  // copied: the queue stays under kSendBatchBytes
  const size_t copied = (RemotePeer::kSendBatchBytes - in_place * head - 1) / (small + head);
  for (size_t i = 0; i < copied; ++i) r.write(small);
  ASSERT_TRUE(r.link->sends().empty());
  const size_t queued = in_place * (RemotePeer::kGatherBytes + head) + copied * (small + head);
  // Under kGatherBatchBytes alone, over kMaxFrame with the queue.
  const uint64_t len = RemotePeer::kGatherBatchBytes - 2 * head;
  ASSERT_GT(queued + head + len, fab::kMaxFrame);
  std::vector<uint8_t> big(len, 0x5c);
  auto c = r.write(len, P::UntilSent, big.data());
  const auto s = r.link->sends();
  ASSERT_EQ(s.size(), 1u) << "the queue before the WRITE did not leave on its own";
  EXPECT_EQ(frames(s[0]).size(), in_place + copied);
  EXPECT_TRUE(r.peer->has_queued()) << "the WRITE waits in place";
  EXPECT_LT(r.peer->sent_through(), c->seq) << "the WRITE counts as sent before it left";
  r.peer->flush();
  const auto t = r.link->sends();
  ASSERT_EQ(t.size(), 2u);
  const auto f = frames(t[1]);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].seq, c->seq);
  EXPECT_EQ(r.peer->sent_through(), c->seq);
  EXPECT_FALSE(r.peer->has_queued());
}

TEST(FabricSendBatch, AFailedSendLosesEveryQueuedCall) {
  Rig r;
  auto a = r.write(64), b = r.write(64);
  EXPECT_FALSE(a->done.load());
  r.link->fail_sends();
  r.peer->flush();
  for (const auto& c : {a, b}) {
    ASSERT_TRUE(c->done.load());
    EXPECT_TRUE(c->lost);
    EXPECT_NE(c->why.find("cable pulled"), std::string::npos) << c->why;
  }
  EXPECT_TRUE(r.peer->lost());
  auto later = r.write(64);  // after the loss: done and lost at once, nothing queued
  EXPECT_TRUE(later->done.load() && later->lost);
  r.peer->flush();
  EXPECT_TRUE(r.link->sends().empty());
}

// A batch with payloads in place whose send fails: every Call is lost, and
// nothing stays counted as queued in place (a deregistration would flush
// every peer for nothing), nor after a peer is destroyed with some queued.
TEST(FabricSendBatch, InPlacePayloadsOfAFailedSendAreNotLeftCounted) {
  using P = RemotePeer::Payload;
  {
    Rig r;
    r.link->kernel_reads_ = true;
    auto a = r.write(RemotePeer::kGatherBytes, P::UntilSent), b = r.write(64);
    EXPECT_TRUE(RemotePeer::any_in_place());
    r.link->fail_sends();
    r.peer->flush();
    for (const auto& c : {a, b}) {
      ASSERT_TRUE(c->done.load());
      EXPECT_TRUE(c->lost) << c->seq;
    }
    EXPECT_FALSE(RemotePeer::any_in_place());
  }
  {
    Rig r;
    r.link->kernel_reads_ = true;
    r.write(RemotePeer::kGatherBytes, P::UntilSent);
    EXPECT_TRUE(RemotePeer::any_in_place());
  }
  EXPECT_FALSE(RemotePeer::any_in_place()) << "a destroyed peer's queue stayed counted";
}

// Recycled Calls: READ answers' frame buffers go back to the receiver, at
// most kMaxSpareFrames of them; the Calls are reused without their frames
// (4096 spare Calls holding a 1 MiB answer each would be 4 GiB).
TEST(FabricSendBatch, RecycledCallsKeepAtMostAFewFrames) {
  Rig r;
  constexpr uint64_t kLen = 256 * 1024;
  const size_t n = RemotePeer::kMaxSpareFrames + 4;
  std::vector<std::shared_ptr<Call>> calls;
  for (size_t i = 0; i < n; ++i) calls.push_back(r.read(kLen));
  r.peer->flush();
  for (const auto& c : calls) {  // each answered with its data, in order
    fab::Response a;
    a.seq = c->seq;
    a.len = kLen;
    a.payload = r.payload.data();
    std::vector<uint8_t> f;
    fab::encode(a, f);
    r.link->deliver(std::move(f));
  }
  const auto until = std::chrono::steady_clock::now() + 10s;
  for (const auto& c : calls) {
    while (!c->done.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(c->done.load()) << "request " << c->seq << " was not answered";
    ASSERT_FALSE(c->lost) << c->why;
    ASSERT_EQ(c->len, kLen);
    EXPECT_EQ(std::vector<uint8_t>(c->data, c->data + 16), std::vector<uint8_t>(r.payload.begin(), r.payload.begin() + 16));
  }
  for (auto& c : calls) {
    // The receiver drops its reference right after `done`.
    while (c.use_count() > 1 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    r.peer->recycle(std::move(c));
  }
  const size_t held = r.peer->spare_frame_bytes();
  EXPECT_GT(held, 0u) << "no frame kept for the receiver to reuse";
  EXPECT_LE(held, RemotePeer::kMaxSpareFrames * (kLen + 4096)) << "spare Calls kept their frames";
  // A reused Call starts clean.
  fab::Request w;
  w.kind = fab::OpKind::Write;
  w.len = 8;
  w.payload = r.payload.data();
  const auto c = r.peer->start(w);
  EXPECT_FALSE(c->done.load());
  EXPECT_EQ(c->len, 0u);
  EXPECT_TRUE(c->frame.empty());
}

// READ data lands where the Call says, whichever way it came: copied into
// the Call's own buffer (up to kInlineData) or left in its frame; Calls
// reused across sizes (a buffer kept from a small answer, a frame handed on
// from a large one) still carry exactly their own answer's bytes.
TEST(FabricSendBatch, ReadDataOfEverySizeLandsThroughReusedCalls) {
  Rig r;
  const uint64_t k = RemotePeer::kInlineData;
  for (int round = 0; round < 3; ++round) {
    for (uint64_t len : {uint64_t{1}, k - 1, k, k + 1, uint64_t{64 * 1024}, uint64_t{8}}) {
      auto c = r.read(len);
      r.peer->flush();
      const size_t off = static_cast<size_t>(round * 13 + len % 17);  // different bytes each time
      fab::Response a;
      a.seq = c->seq;
      a.len = len;
      a.payload = r.payload.data() + off;
      std::vector<uint8_t> f;
      fab::encode(a, f);
      r.link->deliver(std::move(f));
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (!c->done.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      ASSERT_TRUE(c->done.load()) << "READ of " << len << " was not answered";
      ASSERT_FALSE(c->lost) << c->why;
      ASSERT_EQ(c->len, len);
      ASSERT_EQ(0, std::memcmp(c->data, r.payload.data() + off, len)) << "READ of " << len << ", round " << round;
      while (c.use_count() > 1 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      r.peer->recycle(std::move(c));
    }
  }
  // What the spares keep stays bounded: a few frames, small buffers in Calls.
  EXPECT_LE(r.peer->spare_frame_bytes(), RemotePeer::kMaxSpareFrames * (64 * 1024 + 4096) + 8 * k);
}
