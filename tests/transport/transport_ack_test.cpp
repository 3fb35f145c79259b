// The message engine's acknowledgements (msg_engine.hpp): a put, signal or
// put_signal that succeeded completes through a cumulative ack that rides on
// the target's next request to the requester, or goes as an Ack message from
// the target's next poll(); failures are answered at once, ahead of the ack
// that covers them. Over the loop channel, poll by poll.
#include <gtest/gtest.h>

#include <cstring>

#include "transport_rig.hpp"

namespace kinet::test {
namespace {

struct Mem {
  std::vector<uint8_t> buf = std::vector<uint8_t>(256, 0);
  std::unique_ptr<TransportRegion> region;
  uint64_t base() const { return reinterpret_cast<uint64_t>(buf.data()); }
  uint64_t word(size_t off) const {
    uint64_t v;
    std::memcpy(&v, buf.data() + off, 8);
    return v;
  }
};

// Polls `t` once; returns its completions.
std::vector<Completion> poll_once(Transport& t) {
  Completion c[16];
  const size_t n = t.poll(c, 16);
  return {c, c + n};
}

// `c` is exactly one completion, of `cookie` with `st`.
void expect_one(const std::vector<Completion>& c, uint64_t cookie, Status st) {
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].cookie, cookie);
  EXPECT_EQ(c[0].status, st);
}

TEST(TransportAck, PutCompletesFromTheTargetsNextPoll) {
  LoopPair p;
  Mem m;
  m.region = p.b->register_memory(m.buf.data(), m.buf.size(), kAccessAll);
  const uint32_t k = p.a->import_key(p.ab, m.region->remote_key());
  const uint64_t v = 0x1234;
  ASSERT_EQ(p.a->put(p.ab, &v, 8, k, m.base() + 16, 7), Status::Ok);
  EXPECT_TRUE(poll_once(*p.b).empty());  // executes it: the data is there, the ack is owed
  EXPECT_EQ(m.word(16), v);
  EXPECT_TRUE(poll_once(*p.a).empty());  // nothing was sent back yet
  EXPECT_EQ(p.a->outstanding(), 1u);
  EXPECT_TRUE(poll_once(*p.b).empty());  // the next poll sends the ack
  const auto c = poll_once(*p.a);
  expect_one(c, 7u, Status::Ok);
  EXPECT_EQ(p.a->outstanding(), 0u);
  EXPECT_EQ(p.a->rejected("bad ack") + p.a->rejected("malformed ack"), 0u);
}

TEST(TransportAck, PingPongReplyCarriesTheAck) {
  LoopPair p;
  Mem ma, mb;
  ma.region = p.a->register_memory(ma.buf.data(), ma.buf.size(), kAccessAll);
  mb.region = p.b->register_memory(mb.buf.data(), mb.buf.size(), kAccessAll);
  const uint32_t kb = p.a->import_key(p.ab, mb.region->remote_key());
  const uint32_t ka = p.b->import_key(p.ba, ma.region->remote_key());
  const uint64_t x = 0xAB;
  ASSERT_EQ(p.a->put_signal(p.ab, &x, 8, kb, mb.base() + 64, kb, mb.base(), SignalOp::Set, 1, 1), Status::Ok);
  EXPECT_TRUE(poll_once(*p.b).empty());
  ASSERT_EQ(mb.word(0), 1u);  // b saw the ping, and replies before polling again
  ASSERT_EQ(p.b->put_signal(p.ba, &x, 8, ka, ma.base() + 64, ka, ma.base(), SignalOp::Set, 2, 2), Status::Ok);
  auto c = poll_once(*p.a);  // the pong: a's ping completes with it, no Ack message needed
  expect_one(c, 1u, Status::Ok);
  EXPECT_EQ(ma.word(0), 2u);
  EXPECT_TRUE(poll_once(*p.b).empty());  // a has not acked the pong yet
  EXPECT_EQ(p.b->outstanding(), 1u);
  EXPECT_TRUE(poll_once(*p.a).empty());  // a's next poll sends its ack
  c = poll_once(*p.b);
  expect_one(c, 2u, Status::Ok);
}

TEST(TransportAck, FailureIsAnsweredAheadOfTheAckThatCoversIt) {
  LoopPair p;
  Mem m;
  m.region = p.b->register_memory(m.buf.data(), m.buf.size(), kAccessAll);
  const uint32_t k = p.a->import_key(p.ab, m.region->remote_key());
  const uint64_t v1 = 1, v3 = 3;
  ASSERT_EQ(p.a->put(p.ab, &v1, 8, k, m.base(), 1), Status::Ok);
  ASSERT_EQ(p.a->put(p.ab, &v1, 8, k, m.base() + 249, 2), Status::Ok);  // one byte past the region
  ASSERT_EQ(p.a->signal(p.ab, k, m.base() + 3, SignalOp::Add, 1, 3), Status::Ok);  // unaligned
  ASSERT_EQ(p.a->put(p.ab, &v3, 8, k, m.base() + 8, 4), Status::Ok);
  EXPECT_TRUE(poll_once(*p.b).empty());
  auto c = poll_once(*p.a);  // the two failures, at once
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].cookie, 2u);
  EXPECT_EQ(c[0].status, Status::RemoteAccess);
  EXPECT_EQ(c[1].cookie, 3u);
  EXPECT_EQ(c[1].status, Status::RemoteInvalidRequest);
  EXPECT_TRUE(poll_once(*p.b).empty());
  c = poll_once(*p.a);  // one ack for the two puts that landed
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].cookie, 1u);
  EXPECT_EQ(c[0].status, Status::Ok);
  EXPECT_EQ(c[1].cookie, 4u);
  EXPECT_EQ(c[1].status, Status::Ok);
  EXPECT_EQ(m.word(0), v1);
  EXPECT_EQ(m.word(8), v3);
}

// A split put_signal's last piece travels right behind its data pieces
// (flag kFlagAfterPieces): one poll of the target lands the data and then the
// signal, with no round trip between them; the whole operation completes by
// one ack.
TEST(TransportAck, SplitPutSignalLandsWithItsDataInOnePoll) {
  LoopPair p;
  Mem mb;
  std::vector<uint8_t> big(2 * p.a->payload_limit() + 100, 0x5A), dst(big.size(), 0);
  mb.region = p.b->register_memory(mb.buf.data(), mb.buf.size(), kAccessAll);
  auto big_region = p.b->register_memory(dst.data(), dst.size(), kAccessAll);
  const uint32_t kb = p.a->import_key(p.ab, mb.region->remote_key());
  const uint32_t kbig = p.a->import_key(p.ab, big_region->remote_key());
  const uint64_t dbase = reinterpret_cast<uint64_t>(dst.data());
  ASSERT_EQ(p.a->put_signal(p.ab, big.data(), big.size(), kbig, dbase, kb, mb.base(), SignalOp::Set, 9, 1),
            Status::Ok);
  EXPECT_TRUE(poll_once(*p.b).empty());  // three data pieces, then the signal
  EXPECT_EQ(mb.word(0), 9u);
  EXPECT_TRUE(dst == big);
  EXPECT_TRUE(poll_once(*p.a).empty());  // b has not acked yet
  EXPECT_TRUE(poll_once(*p.b).empty());  // now it does, once for the four
  const auto c = poll_once(*p.a);
  expect_one(c, 1u, Status::Ok);
}

// The target withholds the last piece (its data and the signal) when any of
// the operation's data pieces failed, the first one too (the edge of the
// window the piece names), even though a piece after it landed; a failure
// just before the operation (outside the window) does not withhold it.
TEST(TransportAck, SplitPutSignalIsWithheldAfterAnyFailedDataPiece) {
  LoopPair p;
  Mem mb;
  const size_t limit = p.a->payload_limit();
  std::vector<uint8_t> big(2 * limit + 100, 0x5A), dst(big.size(), 0);
  mb.region = p.b->register_memory(mb.buf.data(), mb.buf.size(), kAccessAll);
  auto big_region = p.b->register_memory(dst.data(), dst.size(), kAccessAll);
  const uint32_t kb = p.a->import_key(p.ab, mb.region->remote_key());
  const uint32_t kbig = p.a->import_key(p.ab, big_region->remote_key());
  const uint64_t dbase = reinterpret_cast<uint64_t>(dst.data());
  // Starts 8 bytes before the region: piece 0 fails, piece 1 lands, the
  // last piece (its data and the signal) is withheld.
  const size_t n = big.size() - 8;
  ASSERT_EQ(p.a->put_signal(p.ab, big.data(), n, kbig, dbase - 8, kb, mb.base(), SignalOp::Set, 9, 1), Status::Ok);
  EXPECT_TRUE(poll_once(*p.b).empty());
  EXPECT_EQ(mb.word(0), 0u) << "the signal claimed data that did not land";
  EXPECT_EQ(0, std::memcmp(dst.data() + limit - 8, big.data() + limit, limit));  // piece 1
  EXPECT_EQ(dst[2 * limit - 8], 0) << "the withheld piece's data landed";
  EXPECT_EQ(p.b->rejected("out of bounds"), 1u);
  EXPECT_TRUE(poll_once(*p.a).empty());  // pieces 0 and 2 answered (failures, at once); piece 1 waits for the ack
  EXPECT_TRUE(poll_once(*p.b).empty());  // the ack
  auto c = poll_once(*p.a);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].cookie, 1u);
  EXPECT_EQ(c[0].status, Status::RemoteAccess);  // the first failing piece's
  // A failed put right before the next split put_signal: outside its window.
  const uint64_t v = 1;
  ASSERT_EQ(p.a->put(p.ab, &v, 8, kb, mb.base() + 256, 2), Status::Ok);  // one past the end
  ASSERT_EQ(p.a->put_signal(p.ab, big.data(), big.size(), kbig, dbase, kb, mb.base(), SignalOp::Set, 7, 3),
            Status::Ok);
  EXPECT_TRUE(poll_once(*p.b).empty());
  EXPECT_EQ(mb.word(0), 7u);
  EXPECT_TRUE(dst == big);
  c = poll_once(*p.a);
  expect_one(c, 2u, Status::RemoteAccess);
  EXPECT_TRUE(poll_once(*p.b).empty());  // the ack
  c = poll_once(*p.a);
  expect_one(c, 3u, Status::Ok);
}

// A target acknowledges only puts that succeeded; a failed one is answered.
// The requester keeps each put until its ack or answer: 2000 failed puts
// leave nothing behind (one entry each stayed, for the transport's lifetime).
TEST(TransportAck, FailedPutsLeaveNothingKept) {
  LoopPair p;
  Guarded g(*p.b, 64, kRemoteRead);  // no write access: every put fails
  const uint32_t k = p.a->import_key(p.ab, g.region->remote_key());
  uint64_t v = 1;
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(p.a->put(p.ab, &v, 8, k, g.base(), i), Status::Ok);
    ASSERT_EQ(p.one().status, Status::RemoteAccess);
  }
  EXPECT_LE(p.a->backlog(p.ab).unacked, 1u);
  EXPECT_TRUE(g.zero());
}

TEST(TransportAck, GetsAndAtomicsAreAnsweredAtOnce) {
  LoopPair p;
  Mem m;
  m.buf[0] = 5;
  m.region = p.b->register_memory(m.buf.data(), m.buf.size(), kAccessAll);
  const uint32_t k = p.a->import_key(p.ab, m.region->remote_key());
  uint64_t got = 0, old = 0;
  ASSERT_EQ(p.a->get(p.ab, &got, 8, k, m.base(), 1), Status::Ok);
  ASSERT_EQ(p.a->fetch_add(p.ab, &old, k, m.base(), 2, 2), Status::Ok);
  EXPECT_TRUE(poll_once(*p.b).empty());
  const auto c = poll_once(*p.a);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].status, Status::Ok);
  EXPECT_EQ(c[1].status, Status::Ok);
  EXPECT_EQ(got, 5u);
  EXPECT_EQ(old, 5u);
  EXPECT_EQ(m.word(0), 7u);
}

}  // namespace
}  // namespace kinet::test
