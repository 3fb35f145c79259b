// The public API as a hostile user drives it: every length class on every
// verb, keys that are stale, forged or foreign, connection blobs that lie,
// transitions in the wrong order and objects used after their parents died.
// One exact expectation per case. Control-path-only cases and the ones that
// need a child process are in hostile_ctl_test.cpp.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "ctl_test_util.hpp"
#include "emu_preamble.hpp"

namespace {

constexpr uint32_t kMsg = 4096;  // the devices' max_msg here: split transfers come cheap

kinet::test::PairOptions small_msg() {
  PairOptions o;
  o.dev_a.emu_max_msg = kMsg;
  o.dev_b.emu_max_msg = kMsg;
  o.cfg_a = test_qp_config(64);
  o.cfg_b = test_qp_config(64);
  return o;
}

uint64_t reserved(const dev::QpHandle& h) { return h.state->reserved; }

// WQEs in [from, reserved) that still sit in their ring slot and are not
// NOPs: what a split transfer posted after its error was seen (it must
// publish the reservation it already holds as NOPs).
int data_wqes_from(const dev::QpHandle& h, uint64_t from) {
  int n = 0;
  for (uint64_t i = from; i < reserved(h); ++i) {
    const uint8_t* w = h.sq + (i & (h.size() - 1)) * 64;
    const uint16_t idx = static_cast<uint16_t>((w[1] << 8) | w[2]);
    if (idx == static_cast<uint16_t>(i) && w[3] != kinet::mlx5::kOpNop) ++n;
  }
  return n;
}

// put/get of `bytes` from/to regions of 2*kMsg: the status of the wait, or
// the post's own status when it failed before anything was posted.
struct LenCase {
  size_t bytes;
  Status put, get;
  bool posts;  // false: refused before anything was reserved
};

TEST(EmuHostile, EveryLengthClassOnPutAndGet) {
  const LenCase cases[] = {
      {0, Status::Ok, Status::Ok, true},
      {1, Status::Ok, Status::Ok, true},
      {kMsg, Status::Ok, Status::Ok, true},
      {kMsg + 1, Status::Ok, Status::Ok, true},  // two WQEs, both inside the regions
      {2 * kMsg, Status::Ok, Status::Ok, true},
      {2 * kMsg + 1, Status::LocalProtection, Status::LocalProtection, true},  // the third chunk is 1 B past
      {(size_t{1} << 31) - 1, Status::LocalProtection, Status::LocalProtection, true},
      {size_t{1} << 31, Status::LocalProtection, Status::LocalProtection, true},
      {size_t{1} << 32, Status::LocalProtection, Status::LocalProtection, true},
      // 2^62 / 4096 = 2^50 WQEs > kMaxWqesPerTransfer: refused up front.
      {size_t{1} << 62, Status::InvalidArgument, Status::InvalidArgument, false},
      {SIZE_MAX, Status::InvalidArgument, Status::InvalidArgument, false},
      {SIZE_MAX - kMsg + 2, Status::InvalidArgument, Status::InvalidArgument, false},
  };
  for (const LenCase& c : cases) {
    for (int op = 0; op < 2; ++op) {
      SCOPED_TRACE((op ? "get " : "put ") + std::to_string(c.bytes) + " B");
      EmuPair p(small_msg());
      Region& a = p.reg_a(2 * kMsg);
      Region& b = p.reg_b(2 * kMsg);
      const dev::QpHandle h = p.h();
      dev::Ticket t;
      const auto t0 = std::chrono::steady_clock::now();
      const Status s = op ? dev::get<X>(h, a.p(), a.lkey(), b.addr(), b.rkey(), c.bytes, dev::kSignal, &t)
                          : dev::put<X>(h, a.p(), a.lkey(), b.addr(), b.rkey(), c.bytes, dev::kSignal, &t);
      const Status want = op ? c.get : c.put;
      if (!c.posts) {
        EXPECT_EQ(s, want);
        EXPECT_EQ(reserved(h), 0u) << "nothing may be posted for a refused length";
        EXPECT_EQ(p.qa->state(), QpState::Rts);
        continue;
      }
      const Status w = is_error(s) ? s : dev::wait<X>(h, t);
      EXPECT_EQ(w, want);
      EXPECT_LT(seconds_since(t0), 3.0) << "a failing transfer must stop at its first error";
      // A failed split transfer stops at the first error it sees: past one
      // ring (when reserve() had to poll the error CQE) only NOPs.
      EXPECT_LE(reserved(h), uint64_t{64 + 32});
      EXPECT_EQ(data_wqes_from(h, 64), 0) << "posting went on after the error";
      EXPECT_EQ(p.qa->state(), want == Status::Ok ? QpState::Rts : QpState::Error);
    }
  }
}

// A huge length that stays within kMaxWqesPerTransfer: the error of the first
// chunk stops the loop long before 2^31 WQEs.
TEST(EmuHostile, HugeSplitTransferStopsAtFirstError) {
  EmuPair p;  // default max_msg 2^30
  Region& a = p.reg_a(4096);
  Region& b = p.reg_b(4096);
  const dev::QpHandle h = p.h();
  for (size_t bytes : {size_t{1} << 61, (size_t{1} << 61) - 1}) {
    SCOPED_TRACE(bytes);
    p.qa->reset();
    p.qa->connect(p.qb->info());
    const uint64_t r0 = reserved(h);
    dev::Ticket t;
    const auto t0 = std::chrono::steady_clock::now();
    Status s = dev::put<X>(h, a.p(), a.lkey(), b.addr(), b.rkey(), bytes, 0, &t);
    if (!is_error(s)) s = dev::wait<X>(h, t);
    EXPECT_EQ(s, Status::LocalProtection);
    EXPECT_LT(seconds_since(t0), 3.0);
    EXPECT_LE(reserved(h) - r0, uint64_t{h.size() * 3 / 2});
    EXPECT_EQ(data_wqes_from(h, r0 + h.size()), 0) << "posting went on after the error";
  }
  // One WQE more than a transfer may need: refused up front.
  const uint64_t r0 = reserved(h);
  EXPECT_EQ(dev::put<X>(h, a.p(), a.lkey(), b.addr(), b.rkey(), (size_t{1} << 61) + 1), Status::InvalidArgument);
  EXPECT_EQ(reserved(h), r0);
}

TEST(EmuHostile, PutSignalLengthClasses) {
  struct C {
    size_t bytes;
    Status want;
  };
  const C cases[] = {{0, Status::Ok},
                     {kMsg, Status::Ok},
                     {kMsg + 1, Status::Ok},
                     {2 * kMsg + 1, Status::LocalProtection},
                     {size_t{1} << 31, Status::LocalProtection},
                     {SIZE_MAX, Status::InvalidArgument}};
  for (const C& c : cases) {
    SCOPED_TRACE(c.bytes);
    EmuPair p(small_msg());
    Region& a = p.reg_a(2 * kMsg);
    Region& b = p.reg_b(2 * kMsg);
    Region& sig = p.reg_b(8);
    Region& scratch = p.reg_a(8);
    const dev::QpHandle h = p.h();
    dev::Ticket t;
    Status s = dev::put_signal<X>(h, a.p(), a.lkey(), b.addr(), b.rkey(), c.bytes, sig.addr(), sig.rkey(), 1,
                                  scratch.u64(), scratch.lkey(), 0, &t);
    if (!is_error(s)) s = dev::wait<X>(h, t);
    EXPECT_EQ(s, c.want);
    // The signal moves only when the data went through.
    EXPECT_EQ(*sig.u64(), c.want == Status::Ok ? 1u : 0u);
    if (c.want == Status::InvalidArgument) {
      EXPECT_EQ(reserved(h), 0u);
    }
  }
}

TEST(EmuHostile, InlineSizesAtAndPastTheLimit) {
  EmuPair p;
  Region& b = p.reg_b(64);
  const dev::QpHandle h = p.h();
  uint8_t src[64];
  for (int i = 0; i < 64; ++i) src[i] = uint8_t(i + 1);
  for (uint32_t n : {0u, 1u, kinet::mlx5::kMaxInlineOneBB}) {
    SCOPED_TRACE(n);
    std::memset(b.p(), 0, 64);
    dev::Ticket t;
    ASSERT_EQ(dev::put_inline<X>(h, src, n, b.addr(), b.rkey(), 0, &t), Status::Ok);
    ASSERT_EQ(dev::wait<X>(h, t), Status::Ok);
    EXPECT_EQ(std::memcmp(b.p(), src, n), 0);
    EXPECT_EQ(b.p()[n], 0) << "one byte too many";
  }
  const uint64_t r0 = reserved(h);
  for (uint32_t n : {kinet::mlx5::kMaxInlineOneBB + 1, 0x80000000u, 0xffffffffu})
    EXPECT_EQ(dev::put_inline<X>(h, src, n, b.addr(), b.rkey()), Status::InvalidArgument) << n;
  EXPECT_EQ(reserved(h), r0);
  EXPECT_EQ(p.qa->state(), QpState::Rts);
}

// Null and odd pointers never reach memory outside a region; an odd local
// result buffer of an atomic is fine (the NIC has no alignment rule there),
// an odd remote target is not.
TEST(EmuHostile, NullAndOddPointers) {
  {
    EmuPair p;
    Region& b = p.reg_b(64);
    Region& a = p.reg_a(64);
    dev::Ticket t;
    ASSERT_EQ(dev::put<X>(p.h(), nullptr, a.lkey(), b.addr(), b.rkey(), 8, 0, &t), Status::Ok);
    EXPECT_EQ(dev::wait<X>(p.h(), t), Status::LocalProtection);
  }
  {
    EmuPair p;
    Region& a = p.reg_a(64);
    Region& b = p.reg_b(64);
    dev::Ticket t;
    ASSERT_EQ(dev::put<X>(p.h(), a.p(), a.lkey(), 0, b.rkey(), 8, 0, &t), Status::Ok);
    EXPECT_EQ(dev::wait<X>(p.h(), t), Status::RemoteAccess);
  }
  {
    EmuPair p;
    Region& a = p.reg_a(64);
    Region& b = p.reg_b(64);
    *b.u64(8) = 41;
    dev::Ticket t;
    auto* odd = reinterpret_cast<uint64_t*>(a.p() + 3);
    ASSERT_EQ(dev::fetch_add<X>(p.h(), odd, a.lkey(), b.addr() + 8, b.rkey(), 1, 0, &t), Status::Ok);
    EXPECT_EQ(dev::wait<X>(p.h(), t), Status::Ok);
    uint64_t old;
    std::memcpy(&old, a.p() + 3, 8);
    EXPECT_EQ(old, 41u);
    EXPECT_EQ(*b.u64(8), 42u);
    ASSERT_EQ(dev::fetch_add<X>(p.h(), a.u64(), a.lkey(), b.addr() + 9, b.rkey(), 1, 0, &t), Status::Ok);
    EXPECT_EQ(dev::wait<X>(p.h(), t), Status::RemoteInvalidRequest);
  }
}

// Keys: another device's, another PD's, a stale one, and forgeries of a
// live one (its index with a wrong generation; its generation on another index).
TEST(EmuHostile, ForeignStaleAndForgedKeys) {
  struct K {
    const char* what;
    bool local;  // the forged key is the lkey (else the rkey)
    Status want;
  };
  for (int which = 0; which < 10; ++which) {
    SCOPED_TRACE(which);
    EmuPair p;
    Region& a = p.reg_a(64);
    Region& b = p.reg_b(64);
    auto pb2 = p.db->alloc_pd();
    Region other_pd = make_region(*pb2, 64);
    uint32_t lkey = a.mr->lkey_value(), rkey = b.mr->rkey_value();
    // Keys of two devices are independent numbers and may coincide (the first
    // key's generation is a random tag per NIC): then the other device's key
    // IS valid here, as on hardware. Cases 0 and 1 use a key of the other
    // device that differs from every key this one has.
    std::unique_ptr<kinet::MemoryRegion> extra;
    auto foreign = [&](kinet::ProtectionDomain& pd, uint8_t* where) {
      extra = pd.reg_mr(where, 64, kinet::kAccessAll);  // an index the other device has not (or not in this PD)
      return extra->rkey_value();
    };
    Status want = Status::RemoteAccess;
    switch (which) {
      case 0:  // a key of the requester's own device
        rkey = a.mr->rkey_value() != b.mr->rkey_value() ? a.mr->rkey_value() : foreign(*p.pa, a.p());
        break;
      case 1:  // the target's key as lkey
        lkey = b.mr->lkey_value() != a.mr->lkey_value() ? b.mr->lkey_value() : foreign(*p.pb, b.p());
        want = Status::LocalProtection;
        break;
      case 2: rkey = other_pd.mr->rkey_value(); break;           // the target device, another PD
      case 3: {                                                   // stale: deregistered
        auto m = p.pb->reg_mr(b.p(), 64, kinet::kAccessAll);
        rkey = m->rkey_value();
        break;
      }
      case 4: rkey ^= 0x01; break;                               // index ok, tag wrong
      case 5: rkey ^= 0x80; break;
      case 6: rkey += 0x100; break;                              // tag ok, index wrong (unused)
      case 7: rkey = (other_pd.mr->rkey_value() & ~0xffu) | (rkey & 0xff); break;  // another live index, our tag
      case 8: lkey ^= 0x01, want = Status::LocalProtection; break;
      case 9: lkey += 0x100, want = Status::LocalProtection; break;
    }
    if (which == 7 && rkey == other_pd.mr->rkey_value()) want = Status::RemoteAccess;  // other PD either way
    dev::Ticket t;
    ASSERT_EQ(dev::put<X>(p.h(), a.p(), kinet::Lkey{kinet::detail::bswap32_constexpr(lkey)}, b.addr(),
                          kinet::Rkey{kinet::detail::bswap32_constexpr(rkey)}, 8, 0, &t),
              Status::Ok);
    EXPECT_EQ(dev::wait<X>(p.h(), t), want);
    EXPECT_FALSE(p.qa->last_error().empty());
  }
}

// A QP connected to itself is a loopback QP (legal in IB): it moves data.
TEST(EmuHostile, SelfConnectionIsLoopback) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp(test_qp_config());
  q->connect(q->info());
  Region src = make_region(*pd, 64), dst = make_region(*pd, 64);
  std::memset(src.p(), 0x5a, 64);
  dev::Ticket t;
  ASSERT_EQ(dev::put<X>(q->handle(), src.p(), src.lkey(), dst.addr(), dst.rkey(), 64, 0, &t), Status::Ok);
  ASSERT_EQ(dev::wait<X>(q->handle(), t), Status::Ok);
  EXPECT_EQ(std::memcmp(src.p(), dst.p(), 64), 0);
}

// Connecting twice fails at to_init and leaves the connected QP as it was.
TEST(EmuHostile, ConnectTwiceKeepsTheConnection) {
  EmuPair p;
  Region& a = p.reg_a(64);
  Region& b = p.reg_b(64);
  EXPECT_TRUE(throws_error([&] { p.qa->connect(p.qb->info()); }, ErrorCode::BadState, {"needs state RESET"}));
  EXPECT_EQ(p.qa->state(), QpState::Rts);
  dev::Ticket t;
  ASSERT_EQ(dev::put<X>(p.h(), a.p(), a.lkey(), b.addr(), b.rkey(), 64, 0, &t), Status::Ok);
  EXPECT_EQ(dev::wait<X>(p.h(), t), Status::Ok);
}

// A peer QP destroyed before or after the connection: transport retries
// exceeded, never a hang. A peer on a closed device: refused at to_rtr and
// the QP is back in RESET.
TEST(EmuHostile, ConnectToDestroyedQpOrClosedDevice) {
  {
    EmuPair p(PairOptions{.connect = false});
    Region& a = p.reg_a(64);
    const kinet::QpInfo gone = p.qb->info();
    p.qb.reset();
    p.qa->connect(gone);
    dev::Ticket t;
    ASSERT_EQ(dev::put<X>(p.h(), a.p(), a.lkey(), a.addr(), a.rkey(), 8, 0, &t), Status::Ok);
    EXPECT_EQ(dev::wait<X>(p.h(), t), Status::TransportRetryExceeded);
    EXPECT_TRUE(mentions_any(p.qa->last_error(), {"does not answer"})) << p.qa->last_error();
  }
  {
    EmuPair p(PairOptions{.connect = false});
    const kinet::QpInfo gone = p.qb->info();
    p.destroy_b(true);
    EXPECT_TRUE(throws_error([&] { p.qa->connect(gone); }, ErrorCode::NotFound, {"no emu device at fabric address"}));
    EXPECT_EQ(p.qa->state(), QpState::Reset);
  }
}

// to_error() while a thread keeps posting: every operation ends Ok (done
// before the error) or WrFlushed, within the bound; the poster then stops.
TEST(EmuHostile, ToErrorDuringTrafficEveryMode) {
  for (int mode = 0; mode < 3; ++mode) {
    SCOPED_TRACE(mode);
    EmuPair p;
    Region& a = p.reg_a(1 << 16);
    Region& b = p.reg_b(1 << 16);
    const dev::QpHandle h = p.h();
    std::atomic<int> bad{0}, flushed{0};
    std::atomic<bool> stop{false};
    auto poster = [&] {
      for (int i = 0; i < 100000 && !stop.load(); ++i) {
        dev::Ticket t;
        Status s;
        if (mode == 0) {
          s = dev::put<X>(h, a.p(), a.lkey(), b.addr(), b.rkey(), 4096, 0, &t);
          if (s == Status::Ok) s = dev::wait<X>(h, t);
        } else if (mode == 1) {
          s = dev::put<dev::Sharing::Cta>(h, a.p(), a.lkey(), b.addr(), b.rkey(), 4096, 0, &t);
          if (s == Status::Ok) s = dev::wait<dev::Sharing::Cta>(h, t);
        } else {
          s = dev::put<dev::Sharing::Gpu>(h, a.p(), a.lkey(), b.addr(), b.rkey(), 4096, 0, &t);
          if (s == Status::Ok) s = dev::wait<dev::Sharing::Gpu>(h, t);
        }
        if (s == Status::WrFlushed) {
          ++flushed;
          return;
        }
        if (s != Status::Ok) {
          ++bad;
          return;
        }
      }
    };
    std::vector<std::thread> th;
    const int n = mode == 0 ? 1 : 4;
    for (int i = 0; i < n; ++i) th.emplace_back(poster);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    p.qa->to_error();
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& t : th) t.join();
    stop = true;
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(flushed.load(), n) << "every poster must see the flush";
    EXPECT_LT(seconds_since(t0), 4.0);
    EXPECT_EQ(p.qa->state(), QpState::Error);
    EXPECT_EQ(dev::quiet<X>(h), Status::WrFlushed);
  }
}

// Transitions out of order: BadState naming both states, the state unchanged.
TEST(EmuHostile, TransitionsOutOfOrder) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  auto peer = pd->create_qp();
  const kinet::QpInfo pi = peer->info();
  EXPECT_TRUE(throws_error([&] { q->to_rtr(pi); }, ErrorCode::BadState, {"to_rtr needs state INIT, QP is in RESET"}));
  EXPECT_TRUE(throws_error([&] { q->to_rts(); }, ErrorCode::BadState, {"to_rts needs state RTR, QP is in RESET"}));
  q->to_init(kinet::kAccessAll);
  EXPECT_TRUE(throws_error([&] { q->to_rts(); }, ErrorCode::BadState, {"to_rts needs state RTR, QP is in INIT"}));
  EXPECT_TRUE(throws_error([&] { q->to_init(0); }, ErrorCode::BadState, {"to_init needs state RESET, QP is in INIT"}));
  EXPECT_EQ(q->state(), QpState::Init);
  q->to_rtr(pi);
  EXPECT_TRUE(throws_error([&] { q->to_rtr(pi); }, ErrorCode::BadState, {"to_rtr needs state INIT, QP is in RTR"}));
  q->to_rts();
  EXPECT_TRUE(throws_error([&] { q->to_rts(); }, ErrorCode::BadState, {"to_rts needs state RTR, QP is in RTS"}));
  q->to_error();
  q->to_error();  // any -> ERROR, also from ERROR
  EXPECT_TRUE(throws_error([&] { q->to_rts(); }, ErrorCode::BadState, {"to_rts needs state RTR, QP is in ERROR"}));
  EXPECT_EQ(q->state(), QpState::Error);
}

// Posting on a QP that is not in RTS: the WQE completes with a local QP
// operation error naming the state; nothing moves.
TEST(EmuHostile, PostBeforeRts) {
  for (int st = 0; st < 3; ++st) {
    SCOPED_TRACE(st);
    EmuPair p(PairOptions{.connect = false});
    Region& a = p.reg_a(64);
    Region& b = p.reg_b(64);
    std::memset(a.p(), 0x11, 64);
    if (st >= 1) p.qa->to_init(kinet::kAccessAll);
    if (st >= 2) p.qa->to_rtr(p.qb->info());
    p.qb->connect(p.qa->info());
    dev::Ticket t;
    ASSERT_EQ(dev::put<X>(p.h(), a.p(), a.lkey(), b.addr(), b.rkey(), 64, 0, &t), Status::Ok);
    EXPECT_EQ(dev::wait<X>(p.h(), t), Status::LocalQpOp);
    EXPECT_EQ(b.p()[0], 0);
    EXPECT_TRUE(mentions_any(p.qa->last_error(), {"post only after to_rts"})) << p.qa->last_error();
  }
}

// The data path of a QP whose device was closed: the handle taken before
// still points at live rings (the QP object owns them), and a wait ends
// within the QP's bound, never hangs.
TEST(EmuHostile, DataPathAfterDeviceClosedIsBounded) {
  EmuPair p(PairOptions{.cfg_a = test_qp_config(64, 200)});
  p.reg_a(64);
  Region& b = p.reg_b(64);
  const dev::QpHandle h = p.h();
  p.ra.clear();  // MRs first (they outlive the device safely too)
  p.da.reset();
  dev::Ticket t;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t src = 0;
  Status s = dev::put<X>(h, &src, kinet::Lkey{0}, b.addr(), b.rkey(), 8, 0, &t);
  if (!is_error(s)) s = dev::wait<X>(h, t);
  // No NIC executes it any more: the wait runs out its bound, and says so.
  EXPECT_EQ(s, Status::TimeoutCompletion);
  EXPECT_LT(seconds_since(t0), 2.0);
  EXPECT_EQ(p.qa->last_error(), "device verbs: timed out waiting for a completion (status 12)");
  EXPECT_TRUE(throws_error([&] { p.qa->handle(); }, ErrorCode::BadState, {"was closed"}));
}

// reset() while a thread is still posting is outside the contract (nothing in
// flight); reset() of a QP whose last operations were waited for, in ERROR,
// gives a QP that connects and moves data again.
TEST(EmuHostile, ResetAfterFlushedTrafficStartsOver) {
  EmuPair p;
  Region& a = p.reg_a(4096);
  Region& b = p.reg_b(4096);
  const dev::QpHandle h = p.h();
  for (int i = 0; i < 10; ++i) ASSERT_EQ(dev::put<X>(h, a.p(), a.lkey(), b.addr(), b.rkey(), 4096, dev::kNoDoorbell), Status::Ok);
  p.qa->to_error();
  EXPECT_EQ(dev::quiet<X>(h), Status::WrFlushed);
  p.qa->reset();
  EXPECT_EQ(p.qa->state(), QpState::Reset);
  EXPECT_EQ(p.qa->last_error(), "");
  EXPECT_EQ(h.state->reserved, 0u) << "the rings start over";
  EXPECT_EQ(h.state->error_status, 0);
  p.qa->connect(p.qb->info());
  std::memset(a.p(), 0x77, 4096);
  dev::Ticket t;
  ASSERT_EQ(dev::put<X>(h, a.p(), a.lkey(), b.addr(), b.rkey(), 4096, 0, &t), Status::Ok);
  EXPECT_EQ(dev::wait<X>(h, t), Status::Ok);
  EXPECT_EQ(b.p()[4095], 0x77);
}

// Registration after munmap during traffic: the NIC answers with an error
// CQE, the process survives.
TEST(EmuHostile, SourceUnmappedDuringTraffic) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "fault recovery inside TSan's memcpy interceptor is not supported";
#endif
  EmuPair p;
  const size_t pg = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* m = mmap(nullptr, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto mr = p.pa->reg_mr(m, 4 * pg, kinet::kAccessAll);
  Region& b = p.reg_b(4 * pg);
  const dev::QpHandle h = p.h();
  int ok = 0;
  Status last = Status::Ok;
  for (int i = 0; i < 200 && last == Status::Ok; ++i) {
    if (i == 20) {
      ASSERT_EQ(munmap(m, 4 * pg), 0);
    }
    dev::Ticket t;
    last = dev::put<X>(h, m, mr->lkey(), b.addr(), b.rkey(), 4 * pg, 0, &t);
    if (last == Status::Ok) last = dev::wait<X>(h, t);
    ok += last == Status::Ok;
  }
  EXPECT_EQ(ok, 20);
  EXPECT_EQ(last, Status::LocalProtection);
}

}  // namespace
