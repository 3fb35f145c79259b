// Faults through the software NIC. Each bad operation completes with its own
// status (never a hang: every QP here has a 2 s bound), the QP moves to ERROR,
// every later operation is flushed (WrFlushed), last_error() names the
// problem, and no byte changes that a successful operation did not write.
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "fault_rig.hpp"

namespace {

using kinet::QpState;
using kinet::Status;
using kinet::dev::QpHandle;
using kinet::dev::Sharing;
using kinet::dev::Ticket;
namespace dev = kinet::dev;
namespace m = kinet::mlx5;
using namespace kinet::test;
constexpr Sharing X = Sharing::Exclusive;

// ---------------------------------------------------------------------------
// Local side.

TEST(EmuFault, BadLkey) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::put<X>(h, r.la->p(), kinet::Lkey{htobe32(0x1234)}, r.rb->addr(), r.rb->rkey(), 512, 0, t);
      },
      Status::LocalProtection, {"lkey 0x1234", "0x1234"});
}

TEST(EmuFault, BadLkeyOnReadDestination) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::get<X>(h, r.la->p() + 2048, kinet::Lkey{htobe32(0x1234)}, r.rb->addr(), r.rb->rkey(), 512, 0, t);
      },
      Status::LocalProtection, {"0x1234"});
}

TEST(EmuFault, LocalAddressOutsideRegion) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {  // the last 8 bytes of la plus 56 beyond it
        return dev::put<X>(h, r.la->p() + r.la->len - 8, r.la->lkey(), r.rb->addr(), r.rb->rkey(), 64, 0, t);
      },
      Status::LocalProtection, {"outside", "bound", "range"});
}

TEST(EmuFault, LocalAddressBelowRegion) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  Region& mid = r.p.reg_a(4096);
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::get<X>(h, mid.p() - 1, mid.lkey(), r.rb->addr(), r.rb->rkey(), 16, 0, t);
      },
      Status::LocalProtection, {"outside", "bound", "range"});
}

TEST(EmuFault, ReadIntoRegionWithoutLocalWrite) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  Region& ro = r.p.reg_a(4096, 0);  // no local write
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::get<X>(h, ro.p(), ro.lkey(), r.rb->addr(), r.rb->rkey(), 128, 0, t);
      },
      Status::LocalProtection, {"local write", "write"});
}

TEST(EmuFault, LkeyOfAnotherProtectionDomain) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  auto other_pd = r.p.da->alloc_pd();
  Region other = make_region(*other_pd, 4096);
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::put<X>(h, other.p(), other.lkey(), r.rb->addr(), r.rb->rkey(), 128, 0, t);
      },
      Status::LocalProtection, {"protection domain", "pd"});
  other.mr.reset();
}

TEST(EmuFault, RawWriteLongerThanDeviceMaxMsg) {
  KINET_TEST_RNG(rng);
  PairOptions o = fault_options();
  o.dev_a.emu_max_msg = 4096;
  o.dev_b.emu_max_msg = 4096;
  FaultRig r(o);
  ASSERT_EQ(r.p.h().max_msg, 4096u);
  r.run(
      rng,
      [&](QpHandle h, Ticket* t) {
        // The low-level writer does not split: 8192 bytes in one WQE. The
        // poster's copy of max_msg is raised so prepare_*'s contract (asserted
        // in debug builds) holds and the NIC's own limit is what refuses it.
        h.max_msg = 8192;
        uint64_t idx = 0;
        Status st = dev::reserve<X>(h, 1, &idx);
        if (st != Status::Ok) return st;
        dev::prepare_write<X>(h, idx, r.la->p(), r.la->lkey(), r.rb->addr(), r.rb->rkey(), 8192, dev::kSignal);
        st = dev::publish<X>(h, idx, 1);
        if (st != Status::Ok) return st;
        t->idx = idx + 1;
        return dev::ring_doorbell<X>(h, idx + 1);
      },
      Status::LocalLength, {"max_msg", "length", "exceeds"});
}

// ---------------------------------------------------------------------------
// Remote side.

TEST(EmuFault, BadRkey) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::put<X>(h, r.la->p(), r.la->lkey(), r.rb->addr(), kinet::Rkey{htobe32(0x1234)}, 512, 0, t);
      },
      Status::RemoteAccess, {"rkey 0x1234", "0x1234"});
}

TEST(EmuFault, BadRkeyOnInlinePut) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        const uint8_t d[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        return dev::put_inline<X>(h, d, 8, r.rb->addr(), kinet::Rkey{htobe32(0x1234)}, 0, t);
      },
      Status::RemoteAccess, {"0x1234"});
}

TEST(EmuFault, RemoteAddressOutOfBounds) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {  // straddles the end of rb: nothing of it may land
        return dev::put<X>(h, r.la->p(), r.la->lkey(), r.rb->addr() + r.rb->len - 100, r.rb->rkey(), 200, 0, t);
      },
      Status::RemoteAccess, {"outside", "bound", "range"});
}

TEST(EmuFault, RemoteReadOutOfBounds) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::get<X>(h, r.la->p() + 2048, r.la->lkey(), r.rb->addr() - 8, r.rb->rkey(), 64, 0, t);
      },
      Status::RemoteAccess, {"outside", "bound", "range"});
}

TEST(EmuFault, RemoteAtomicOutOfBounds) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::fetch_add<X>(h, r.res->u64(0), r.res->lkey(), r.rb->addr() + r.rb->len, r.rb->rkey(), 1, 0, t);
      },
      Status::RemoteAccess, {"outside", "bound", "range"});
}

TEST(EmuFault, RemoteRegionWithoutRemoteWrite) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  Region& ro = r.p.reg_b(4096, kinet::kLocalWrite | kinet::kRemoteRead | kinet::kRemoteAtomic);
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::put<X>(h, r.la->p(), r.la->lkey(), ro.addr(), ro.rkey(), 256, 0, t);
      },
      Status::RemoteAccess, {"remote write", "write"});
}

TEST(EmuFault, RemoteRegionWithoutRemoteRead) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  Region& wo = r.p.reg_b(4096, kinet::kLocalWrite | kinet::kRemoteWrite | kinet::kRemoteAtomic);
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::get<X>(h, r.la->p() + 2048, r.la->lkey(), wo.addr(), wo.rkey(), 256, 0, t);
      },
      Status::RemoteAccess, {"remote read", "read"});
}

TEST(EmuFault, RemoteRegionWithoutRemoteAtomic) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  Region& na = r.p.reg_b(4096, kinet::kLocalWrite | kinet::kRemoteWrite | kinet::kRemoteRead);
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::compare_swap<X>(h, r.res->u64(0), r.res->lkey(), na.addr(), na.rkey(), 1, 2, 0, t);
      },
      Status::RemoteAccess, {"atomic"});
}

TEST(EmuFault, RkeyOfAnotherProtectionDomainOnTarget) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  auto other_pd = r.p.db->alloc_pd();
  Region other = make_region(*other_pd, 4096);
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::put<X>(h, r.la->p(), r.la->lkey(), other.addr(), other.rkey(), 128, 0, t);
      },
      Status::RemoteAccess, {"protection domain", "pd"});
  EXPECT_TRUE(mentions_any(r.p.qa->last_error(), {"rkey"})) << r.p.qa->last_error();
  other.mr.reset();
}

TEST(EmuFault, TargetQpDoesNotAcceptRemoteWrite) {
  KINET_TEST_RNG(rng);
  FaultRig r(fault_options(kinet::kRemoteRead | kinet::kRemoteAtomic));  // QP b: no remote write
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::put<X>(h, r.la->p(), r.la->lkey(), r.rb->addr() + 3000, r.rb->rkey(), 256, 0, t);
      },
      Status::RemoteAccess, {"write", "accept"});
}

TEST(EmuFault, TargetQpDoesNotAcceptRemoteAtomic) {
  KINET_TEST_RNG(rng);
  FaultRig r(fault_options(kinet::kRemoteRead | kinet::kRemoteWrite));
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::fetch_add<X>(h, r.res->u64(0), r.res->lkey(), r.rb->addr() + 3000, r.rb->rkey(), 5, 0, t);
      },
      Status::RemoteAccess, {"atomic", "accept"});
}

TEST(EmuFault, MisalignedAtomic) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::fetch_add<X>(h, r.res->u64(0), r.res->lkey(), r.rb->addr() + 3004, r.rb->rkey(), 7, 0, t);
      },
      Status::RemoteInvalidRequest, {"align"});
}

TEST(EmuFault, MisalignedCompareSwap) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::compare_swap<X>(h, r.res->u64(0), r.res->lkey(), r.rb->addr() + 3001, r.rb->rkey(), 0, 1, 0, t);
      },
      Status::RemoteInvalidRequest, {"align"});
}

// ---------------------------------------------------------------------------
// QP state.

// Posting on a QP that never reached RTS: its doorbell is a misuse; the NIC
// completes the WQE with a local QP operation error and moves the QP to ERROR.
void post_on_unconnected(int steps) {
  KINET_TEST_RNG(rng);
  PairOptions o = fault_options();
  o.connect = false;
  EmuPair p(o);
  if (steps >= 1) p.qa->to_init(kinet::kAccessAll);
  if (steps >= 2) p.qa->to_rtr(p.qb->info());
  p.qb->connect(p.qa->info());
  Region& src = p.reg_a(4096);
  Region& dst = p.reg_b(4096);
  fill_random(rng, dst.p(), 4096);
  fill_distinct(rng, src.p(), dst.p(), 4096);
  std::vector<uint8_t> before(dst.p(), dst.p() + 4096);
  const auto h = p.h();
  Ticket t1, t2;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), 4096, dev::kSignal, &t1), Status::Ok);
  ASSERT_EQ(dev::nop<X>(h, dev::kSignal, &t2), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, t1), Status::LocalQpOp) << "last_error: " << p.qa->last_error();
  EXPECT_EQ(dev::wait<X>(h, t2), Status::WrFlushed);
  EXPECT_LT(seconds_since(t0), kTimeoutMs / 1000.0);
  EXPECT_EQ(p.qa->state(), QpState::Error);
  const char* was = steps == 0 ? "RESET" : steps == 1 ? "INIT" : "RTR";
  EXPECT_NE(p.qa->last_error().find(was), std::string::npos)
      << "names the state " << was << ": last_error() = \"" << p.qa->last_error() << "\"";
  EXPECT_TRUE(bytes_equal(dst.p(), before.data(), 4096, "target of a put on an unconnected QP"));
}

TEST(EmuFault, PostOnQpInReset) { post_on_unconnected(0); }
TEST(EmuFault, PostOnQpInInit) { post_on_unconnected(1); }
TEST(EmuFault, PostOnQpInRtr) { post_on_unconnected(2); }

// The emu provider writes no last_error() for a flush the host caused (the
// mlx5 provider does: the hw suite checks it).
TEST(EmuFault, HostMovesQpToErrorThenEverythingIsFlushed) {
  qp_in_error_flushes(fault_options(), {"moved to ERROR by QueuePair::to_error()"});
}

// The peer is gone: no answer, the transport gives up.
void destroyed_peer(bool whole_device) {
  KINET_TEST_RNG(rng);
  EmuPair p(fault_options());
  Region& src = p.reg_a(4096);
  Region& dst = p.reg_b(4096);
  fill_random(rng, dst.p(), 4096);
  fill_distinct(rng, src.p(), dst.p(), 4096);
  const auto h = p.h();
  Ticket t;
  ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), 1000, 0, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(h, t), Status::Ok) << p.qa->last_error();
  ASSERT_TRUE(bytes_equal(dst.p(), src.p(), 1000, "put before the peer went away"));
  std::vector<uint8_t> before(dst.p(), dst.p() + 4096);
  const kinet::Rkey rkey = dst.rkey();
  p.destroy_b(whole_device);
  const auto t0 = std::chrono::steady_clock::now();
  Ticket t2, t3;
  ASSERT_EQ(dev::put<X>(h, src.p() + 1000, src.lkey(), dst.addr() + 1000, rkey, 1000, 0, &t), Status::Ok);
  ASSERT_EQ(dev::nop<X>(h, 0, &t2), Status::Ok);
  ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), dst.addr(), rkey, 8, 0, &t3), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, t), Status::TransportRetryExceeded) << "last_error: " << p.qa->last_error();
  EXPECT_EQ(dev::wait<X>(h, t2), Status::WrFlushed);
  EXPECT_EQ(dev::wait<X>(h, t3), Status::WrFlushed);
  EXPECT_LT(seconds_since(t0), kTimeoutMs / 1000.0 + 1.0);
  EXPECT_EQ(p.qa->state(), QpState::Error);
  EXPECT_TRUE(mentions_any(p.qa->last_error(), {"peer", "destroyed", "answer", "retry", "unreachable"}))
      << "last_error() = \"" << p.qa->last_error() << "\"";
  EXPECT_TRUE(bytes_equal(dst.p(), before.data(), 4096, "memory of the destroyed peer"));
}

TEST(EmuFault, DestroyedPeerQp) { destroyed_peer(false); }
TEST(EmuFault, DestroyedPeerDevice) { destroyed_peer(true); }

TEST(EmuFault, PeerQpInErrorDoesNotAnswer) {
  KINET_TEST_RNG(rng);
  EmuPair p(fault_options());
  Region& src = p.reg_a(4096);
  Region& dst = p.reg_b(4096);
  fill_random(rng, dst.p(), 4096);
  fill_distinct(rng, src.p(), dst.p(), 4096);
  std::vector<uint8_t> before(dst.p(), dst.p() + 4096);
  p.qb->to_error();
  const auto h = p.h();
  Ticket t;
  ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), 1000, 0, &t), Status::Ok);
  Ticket t2;
  ASSERT_EQ(dev::nop<X>(h, dev::kSignal, &t2), Status::Ok);
  // A responder in ERROR sends nothing back: the requester's retries run out.
  EXPECT_EQ(dev::wait<X>(h, t), Status::TransportRetryExceeded) << p.qa->last_error();
  EXPECT_EQ(dev::wait<X>(h, t2), Status::WrFlushed);
  EXPECT_EQ(p.qa->state(), QpState::Error);
  char qpn[16];
  std::snprintf(qpn, sizeof qpn, "0x%x", p.qb->qpn());
  EXPECT_NE(p.qa->last_error().find(qpn), std::string::npos) << "names the peer QP: " << p.qa->last_error();
  EXPECT_TRUE(bytes_equal(dst.p(), before.data(), 4096, "target whose QP is in ERROR"));
}

// A fault on one QP leaves the other QPs of the same devices alone.
TEST(EmuFault, FaultIsConfinedToItsQp) {
  KINET_TEST_RNG(rng);
  EmuPair p(fault_options());
  auto qa2 = p.pa->create_qp(test_qp_config(64, kTimeoutMs));
  auto qb2 = p.pb->create_qp(test_qp_config(64, kTimeoutMs));
  qa2->connect(qb2->info());
  qb2->connect(qa2->info());
  {
    Region& src = p.reg_a(4096);
    Region& dst = p.reg_b(4096);
    fill_random(rng, dst.p(), 4096);
    fill_distinct(rng, src.p(), dst.p(), 4096);
    Ticket t;
    ASSERT_EQ(dev::put<X>(p.h(), src.p(), src.lkey(), dst.addr(), kinet::Rkey{htobe32(0x1234)}, 64, 0, &t),
              Status::Ok);
    EXPECT_EQ(dev::wait<X>(p.h(), t), Status::RemoteAccess);
    EXPECT_EQ(p.qa->state(), QpState::Error);
    const auto h2 = qa2->handle();
    ASSERT_EQ(dev::put<X>(h2, src.p(), src.lkey(), dst.addr(), dst.rkey(), 4096, 0, &t), Status::Ok);
    EXPECT_EQ(dev::wait<X>(h2, t), Status::Ok) << qa2->last_error();
    EXPECT_TRUE(bytes_equal(dst.p(), src.p(), 4096, "put on the healthy QP"));
    EXPECT_EQ(qa2->state(), QpState::Rts);
    EXPECT_EQ(qb2->state(), QpState::Rts);
    EXPECT_EQ(p.qb->state(), QpState::Rts) << "a requester-side fault does not break the responder QP";
  }
  p.ra.clear();
  p.rb.clear();
}

// A region deregistered while the QP lives: its keys stop working.
TEST(EmuFault, DeregisteredRegionKeysAreRejected) {
  KINET_TEST_RNG(rng);
  FaultRig r;
  Region& gone = r.p.reg_b(4096);
  const kinet::Rkey rkey = gone.rkey();
  gone.mr.reset();
  r.run(
      rng,
      [&](const QpHandle& h, Ticket* t) {
        return dev::put<X>(h, r.la->p(), r.la->lkey(), gone.addr(), rkey, 64, 0, t);
      },
      Status::RemoteAccess, {"rkey", "registered"});
}

// Deregistration while WQEs that use the region are in flight: once the
// MemoryRegion object is gone, the NIC touches the memory no more (the
// caller may free it: ASan would see a late write). Each transfer either
// completed before (Ok) or is refused (RemoteAccess), then flushed.
TEST(EmuFault, DeregisterTargetWhileWritesInFlight) {
  KINET_TEST_RNG(rng);
  PairOptions o = fault_options();
  o.dev_a.emu_max_msg = 4096;  // 1 MiB = 256 WQEs: plenty in flight
  o.cfg_a = test_qp_config(512, kTimeoutMs);
  EmuPair p(o);
  const size_t n = 1u << 20;
  Region& src = p.reg_a(n);
  fill_random(rng, src.p(), n);
  Region dst = make_region(*p.pb, n);
  fill_distinct(rng, dst.p(), src.p(), n);
  const auto h = p.h();
  Ticket t;
  const kinet::Rkey rkey = dst.rkey();
  ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), dst.addr(), rkey, n, dev::kSignal, &t), Status::Ok);
  dst.mr.reset();  // deregister while the 256 writes run
  std::vector<uint8_t> after(dst.p(), dst.p() + n);
  const Status st = dev::wait<X>(h, t);
  std::printf("[ kinet    ] put raced with deregistration: %s\n", kinet::status_enum_name(st));
  EXPECT_TRUE(bytes_equal(dst.p(), after.data(), n, "region written after its deregistration returned"));
  dst.buf.reset();  // freed: a late engine write would be a use-after-free
  // The race decides which; each outcome is checked exactly. A refused chunk
  // makes the split put's status its own (RemoteAccess), not the flush of the
  // last chunk: expected to pass after test()/wait() report the failing
  // chunk's own status (verbs).
  if (st == Status::Ok) {
    EXPECT_EQ(p.qa->state(), QpState::Rts);
    EXPECT_EQ(p.qa->last_error(), "");
  } else {
    EXPECT_EQ(st, Status::RemoteAccess);
    EXPECT_EQ(p.qa->state(), QpState::Error);
    char key[16];
    std::snprintf(key, sizeof key, "0x%x", kinet::detail::bswap32_constexpr(rkey.be));
    EXPECT_NE(p.qa->last_error().find(key), std::string::npos) << "names the rkey: " << p.qa->last_error();
  }
}

}  // namespace
