// The responder check (src/fabric/responder.hpp) driven as a hostile peer
// would: crafted Requests against a software NIC built by hand (one region
// with guard bytes on both sides, QPs in every relevant state). Every refusal
// has its exact syndrome and reason, and leaves every byte as it was: the
// region, its guards, the requester's READ buffer and old-value word.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "fabric/responder.hpp"
#include "providers/emu/emu.hpp"
#include "providers/emu/prm.hpp"

namespace {
using namespace kinet;
using namespace kinet::fabric;
using emu::hex;
namespace prm = kinet::emu::prm;

constexpr uint64_t kNode = 0x1111000000000001ull, kPeerNode = 0x2222000000000002ull;
constexpr uint32_t kQpn = 0x201, kPeerQpn = 0x305;
constexpr uint32_t kKey = 7u << 8 | 3, kKeyOtherPd = 8u << 8 | 1, kKeyNoRights = 9u << 8 | 1;
constexpr uint32_t kQpInit = 0x401, kQpDestroyed = 0x501, kQpOther = 0x601, kQpNoAtomic = 0x701;
constexpr size_t kGuard = 64, kLen = 4096;
constexpr uint8_t kGuardByte = 0xa5, kDstByte = 0xee;

struct Rig {
  std::shared_ptr<emu::Nic> nic = std::make_shared<emu::Nic>();
  std::vector<uint8_t> mem = std::vector<uint8_t>(kGuard + kLen + kGuard, kGuardByte);
  std::vector<uint8_t> other = std::vector<uint8_t>(kLen, 0);  // the other PD's region
  std::vector<uint8_t> snapshot;
  std::vector<uint8_t> dst = std::vector<uint8_t>(kLen + 64, kDstByte);
  uint64_t old = 0x0badc0ffee0ddf00ull;

  uint64_t base() const { return reinterpret_cast<uint64_t>(mem.data() + kGuard); }
  uint64_t end() const { return base() + kLen; }

  Rig() {
    nic->name = "emuR";
    nic->node = kNode;
    for (size_t i = 0; i < kLen; ++i) mem[kGuard + i] = static_cast<uint8_t>(i * 7 + 3);
    add_mr(kKey, base(), kLen, kAccessAll, 1);
    add_mr(kKeyOtherPd, reinterpret_cast<uint64_t>(other.data()), kLen, kAccessAll, 2);
    add_mr(kKeyNoRights, base(), kLen, kLocalWrite, 1);
    add_qp(kQpn, QpState::Rts, kPeerNode, kPeerQpn, kAccessAll);
    add_qp(kQpInit, QpState::Init, kPeerNode, kPeerQpn, kAccessAll);
    add_qp(kQpDestroyed, QpState::Rts, kPeerNode, kPeerQpn, kAccessAll)->destroyed = true;
    add_qp(kQpOther, QpState::Rts, kPeerNode, 0x999, kAccessAll);
    add_qp(kQpNoAtomic, QpState::Rtr, kPeerNode, kPeerQpn, kRemoteWrite | kRemoteRead);
    snapshot = mem;
  }
  void add_mr(uint32_t key, uint64_t addr, uint64_t len, uint32_t access, uint32_t pd) {
    emu::MrEntry m;
    m.addr = addr, m.len = len, m.access = access, m.pd = pd, m.kind = MemoryKind::Host;
    nic->mrs[key] = m;
  }
  std::shared_ptr<emu::EmuQp> add_qp(uint32_t qpn, QpState st, uint64_t rnode, uint32_t rqpn, uint32_t access) {
    auto q = std::make_shared<emu::EmuQp>();
    q->qpn = qpn, q->pd = 1, q->remote_node = rnode, q->remote_qpn = rqpn, q->remote_access = access;
    q->state.store(st);
    nic->qps[qpn] = q;
    return q;
  }

  Request rq(OpKind k, uint64_t raddr, uint64_t len, const uint8_t* payload = nullptr) const {
    Request r;
    r.from_node = kPeerNode, r.from_qpn = kPeerQpn, r.to_node = kNode, r.to_qpn = kQpn;
    r.kind = k, r.raddr = raddr, r.rkey = kKey, r.len = len, r.payload = payload;
    if (k == OpKind::FetchAdd) r.operand = 5;
    if (k == OpKind::CompareSwap) r.operand = 9, r.compare = 0;
    return r;
  }
  RequesterBuffers bufs() {
    RequesterBuffers b;
    b.read_dst = dst.data();
    b.old_value = &old;
    return b;
  }
  emu::Fault run(const Request& r) { return run(r, bufs()); }
  emu::Fault run(const Request& r, const RequesterBuffers& b) {
    std::shared_lock<std::shared_mutex> g(emu::memory_guard());  // respond()'s contract
    return respond(*nic, r, b);
  }
  // Nothing moved: region, guards, READ destination, old-value word.
  void expect_untouched() {
    EXPECT_TRUE(mem == snapshot) << "the region or its guard bytes changed";
    for (uint8_t b : dst) ASSERT_EQ(b, kDstByte) << "the READ destination changed";
    EXPECT_EQ(old, 0x0badc0ffee0ddf00ull) << "the old-value word changed";
  }
  void expect_refused(const Request& r, uint8_t syn, const std::string& why) {
    emu::Fault f = run(r);
    EXPECT_EQ(f.syndrome, syn) << f.why;
    EXPECT_EQ(f.why, why);
    expect_untouched();
  }
  std::string range_why(uint64_t raddr, uint64_t len) const {
    return "remote range [" + hex(raddr) + ", +" + std::to_string(len) + ") is outside rkey " + hex(kKey) +
           "'s region [" + hex(base()) + ", +" + std::to_string(kLen) + ") on emuR";
  }
};

const OpKind kKinds[] = {OpKind::Write, OpKind::Read, OpKind::FetchAdd, OpKind::CompareSwap};

// ---- positive controls: the checks let the right ones through -------------
TEST(FabricResponder, WriteAtBothEdgesLandsExactlyThere) {
  Rig r;
  const uint8_t src[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  ASSERT_FALSE(r.run(r.rq(OpKind::Write, r.base(), 16, src)));
  ASSERT_FALSE(r.run(r.rq(OpKind::Write, r.end() - 16, 16, src)));
  std::memcpy(r.snapshot.data() + kGuard, src, 16);
  std::memcpy(r.snapshot.data() + kGuard + kLen - 16, src, 16);
  r.expect_untouched();  // guards and every other byte as before
}

TEST(FabricResponder, ReadAndAtomicsAtTheEdges) {
  Rig r;
  ASSERT_FALSE(r.run(r.rq(OpKind::Read, r.base(), kLen)));
  EXPECT_EQ(0, std::memcmp(r.dst.data(), r.mem.data() + kGuard, kLen));
  EXPECT_EQ(r.dst[kLen], kDstByte);  // not one byte more
  uint64_t first, last;
  std::memcpy(&first, r.mem.data() + kGuard, 8);
  std::memcpy(&last, r.mem.data() + kGuard + kLen - 8, 8);
  ASSERT_FALSE(r.run(r.rq(OpKind::FetchAdd, r.base(), 8)));
  EXPECT_EQ(r.old, first);
  Request cs = r.rq(OpKind::CompareSwap, r.end() - 8, 8);
  cs.compare = last;
  ASSERT_FALSE(r.run(cs));
  EXPECT_EQ(r.old, last);
  uint64_t v;
  std::memcpy(&v, r.mem.data() + kGuard, 8);
  EXPECT_EQ(v, first + 5);
  std::memcpy(&v, r.mem.data() + kGuard + kLen - 8, 8);
  EXPECT_EQ(v, 9u);
  for (size_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(r.mem[i], kGuardByte);
    ASSERT_EQ(r.mem[kGuard + kLen + i], kGuardByte);
  }
}

TEST(FabricResponder, ZeroLengthAtTheEndIsInside) {
  Rig r;
  EXPECT_FALSE(r.run(r.rq(OpKind::Write, r.end(), 0)));
  EXPECT_FALSE(r.run(r.rq(OpKind::Read, r.end(), 0)));
  r.expect_untouched();
}

// ---- bounds ----------------------------------------------------------------
TEST(FabricResponder, OutOfBoundsAtTheExactEdges) {
  for (OpKind k : {OpKind::Write, OpKind::Read}) {
    Rig r;
    std::vector<uint8_t> src(kLen + 1, 0x77);
    for (uint64_t len : {uint64_t{1}, uint64_t{8}, uint64_t{kLen}}) {
      r.expect_refused(r.rq(k, r.base() - 1, len, src.data()), prm::kSynRemoteAccess, r.range_why(r.base() - 1, len));
      const uint64_t past = r.end() - len + 1;
      r.expect_refused(r.rq(k, past, len, src.data()), prm::kSynRemoteAccess, r.range_why(past, len));
    }
    r.expect_refused(r.rq(k, r.base(), kLen + 1, src.data()), prm::kSynRemoteAccess, r.range_why(r.base(), kLen + 1));
    r.expect_refused(r.rq(k, r.end(), 1, src.data()), prm::kSynRemoteAccess, r.range_why(r.end(), 1));
  }
}

TEST(FabricResponder, LengthsNearTwoToTheSixtyFourAreRefused) {
  Rig r;
  const uint8_t src[8] = {};
  for (OpKind k : {OpKind::Write, OpKind::Read}) {
    for (uint64_t len : {~0ull, ~0ull - 1, (1ull << 63), ~0ull - r.base() + 1, 0ull - 8}) {
      // 0 - 8 from base + 8 wraps back onto base exactly.
      for (uint64_t raddr : {r.base(), r.base() + 8, r.end() - 1}) {
        SCOPED_TRACE(std::to_string(len) + " at " + hex(raddr));
        r.expect_refused(r.rq(k, raddr, len, src), prm::kSynRemoteAccess, r.range_why(raddr, len));
      }
    }
  }
  // The top of the address space, one byte and eight.
  r.expect_refused(r.rq(OpKind::Read, ~0ull, 1), prm::kSynRemoteAccess, r.range_why(~0ull, 1));
  r.expect_refused(r.rq(OpKind::FetchAdd, ~0ull - 7, 8), prm::kSynRemoteAccess, r.range_why(~0ull - 7, 8));
}

// ---- keys --------------------------------------------------------------------
TEST(FabricResponder, WrongAndStaleKeys) {
  Rig r;
  for (OpKind k : kKinds) {
    const uint8_t src[8] = {};
    for (uint32_t key : {0u, kKey ^ 1u /* right index, stale generation */, kKey + (1u << 8) /* next index */,
                         ~0u}) {
      Request q = r.rq(k, r.base(), 8, src);
      q.rkey = key;
      r.expect_refused(q, prm::kSynRemoteAccess, "rkey " + hex(key) + " is not registered on emuR");
    }
    Request q = r.rq(k, reinterpret_cast<uint64_t>(r.other.data()), 8, src);
    q.rkey = kKeyOtherPd;
    r.expect_refused(q, prm::kSynRemoteAccess,
                     "rkey " + hex(kKeyOtherPd) + " belongs to another protection domain on emuR");
    EXPECT_TRUE(std::all_of(r.other.begin(), r.other.end(), [](uint8_t b) { return b == 0; }));
  }
}

TEST(FabricResponder, MissingRightsOnTheRegionAndOnTheQp) {
  Rig r;
  const char* what[] = {"remote write", "remote read", "remote atomic", "remote atomic"};
  for (int i = 0; i < 4; ++i) {
    const uint8_t src[8] = {};
    Request q = r.rq(kKinds[i], r.base(), 8, src);
    q.rkey = kKeyNoRights;
    r.expect_refused(q, prm::kSynRemoteAccess, "rkey " + hex(kKeyNoRights) + " on emuR was registered without " + what[i]);
  }
  for (OpKind k : {OpKind::FetchAdd, OpKind::CompareSwap}) {
    Request q = r.rq(k, r.base(), 8);
    q.to_qpn = kQpNoAtomic;
    r.expect_refused(q, prm::kSynRemoteAccess, "peer QP " + hex(kQpNoAtomic) + " on emuR does not accept remote atomic");
  }
}

// ---- QPs and connections -------------------------------------------------------
TEST(FabricResponder, UnknownDestroyedUnreadyAndForeignQps) {
  Rig r;
  for (OpKind k : kKinds) {
    const uint8_t src[8] = {};
    Request q = r.rq(k, r.base(), 8, src);
    for (uint32_t qpn : {0x777u, 0u, 0xffffffu, kQpDestroyed}) {
      q.to_qpn = qpn;
      r.expect_refused(q, prm::kSynTransportRetry,
                       "peer QP " + hex(qpn) + " does not answer (destroyed, or its device closed)");
    }
    q.to_qpn = kQpInit;
    r.expect_refused(q, prm::kSynTransportRetry, "peer QP " + hex(kQpInit) + " on emuR is in state INIT and does not answer");
    q.to_qpn = kQpOther;  // connected to (kPeerNode, 0x999)
    r.expect_refused(q, prm::kSynTransportRetry, "peer QP " + hex(kQpOther) + " is connected to another QP");
    q.to_qpn = kQpn;
    q.from_qpn = kPeerQpn + 1;
    r.expect_refused(q, prm::kSynTransportRetry, "peer QP " + hex(kQpn) + " is connected to another QP");
    q.from_qpn = kPeerQpn;
    q.from_node = kPeerNode + 1;
    r.expect_refused(q, prm::kSynTransportRetry, "peer QP " + hex(kQpn) + " is connected to another QP");
    q.from_node = kPeerNode;
    q.to_node = kNode + 1;
    r.expect_refused(q, prm::kSynTransportRetry,
                     "request for node " + hex(kNode + 1) + " reached node " + hex(kNode) + " (emuR)");
  }
}

// ---- the operation's own shape ---------------------------------------------------
TEST(FabricResponder, WrongKindsAndAtomicLengths) {
  Rig r;
  for (int k : {0, 5, 0x7f, 0xff}) {
    Request q = r.rq(OpKind::Read, r.base(), 8);
    q.kind = static_cast<OpKind>(k);
    r.expect_refused(q, prm::kSynRemoteInvalReq, "unknown operation kind " + std::to_string(k));
  }
  for (uint64_t len : {0ull, 4ull, 7ull, 9ull, 16ull, ~0ull}) {
    r.expect_refused(r.rq(OpKind::FetchAdd, r.base(), len), prm::kSynRemoteInvalReq,
                     "FETCH_ADD of " + std::to_string(len) + " bytes (atomics are 8 bytes)");
    r.expect_refused(r.rq(OpKind::CompareSwap, r.base(), len), prm::kSynRemoteInvalReq,
                     "COMPARE_SWAP of " + std::to_string(len) + " bytes (atomics are 8 bytes)");
  }
}

TEST(FabricResponder, MisalignedAtomicsInsideTheRegion) {
  Rig r;
  for (OpKind k : {OpKind::FetchAdd, OpKind::CompareSwap})
    for (uint64_t off = 1; off < 8; ++off) {
      const uint64_t a = r.base() + off;
      r.expect_refused(r.rq(k, a, 8), prm::kSynRemoteInvalReq, "atomic target " + hex(a) + " is not 8-byte aligned");
      // Misaligned and past the end: the range is reported first.
      const uint64_t b = r.end() - 8 + off;
      r.expect_refused(r.rq(k, b, 8), prm::kSynRemoteAccess, r.range_why(b, 8));
    }
}

TEST(FabricResponder, MissingRequesterBuffers) {
  Rig r;
  r.expect_refused(r.rq(OpKind::Write, r.base(), 8, nullptr), prm::kSynRemoteInvalReq,
                   "WRITE of 8 bytes without its payload");
  RequesterBuffers b = r.bufs();
  b.read_dst = nullptr;
  emu::Fault f = r.run(r.rq(OpKind::Read, r.base(), 8), b);
  EXPECT_EQ(f.syndrome, prm::kSynRemoteInvalReq);
  EXPECT_EQ(f.why, "READ of 8 bytes without a destination");
  b = r.bufs();
  b.old_value = nullptr;
  f = r.run(r.rq(OpKind::FetchAdd, r.base(), 8), b);
  EXPECT_EQ(f.syndrome, prm::kSynRemoteInvalReq);
  EXPECT_EQ(f.why, "FETCH_ADD without a result buffer");
  r.expect_untouched();
}

}  // namespace
