// Memory registration and object numbering of the emu provider: reg_mr
// refuses what ibv_reg_mr refuses (ranges that wrap, are not mapped, or lack
// the rights the access flags need), each check at its exact edge; memory
// keys and QP numbers are reused with a generation, so a stale key never
// reaches the new registration; under a memory limit every failure is a
// kinet::Error.
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "ctl_test_util.hpp"
#include "emu_preamble.hpp"

namespace {

// n pages mapped read-write; unmapped at destruction (pages already unmapped
// by the test are unmapped again harmlessly).
struct Pages {
  uint8_t* p = nullptr;
  size_t n = 0;
  size_t pg = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  explicit Pages(size_t pages) : n(pages) {
    void* m = mmap(nullptr, n * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) p = static_cast<uint8_t*>(m);
  }
  ~Pages() {
    if (p) munmap(p, n * pg);
  }
  uint8_t* page(size_t i) const { return p + i * pg; }
  uint64_t at(size_t off) const { return reinterpret_cast<uint64_t>(p) + off; }
};

struct Rig {
  std::unique_ptr<kinet::Device> d = kinet::Device::open("emu");
  std::unique_ptr<kinet::ProtectionDomain> pd = d->alloc_pd();
  // The exact message of a range error.
  std::string msg(uint64_t addr, size_t len, const std::string& why) const {
    return d->name() + ": reg_mr: [" + hexs(addr) + ", +" + std::to_string(len) + ") " + why;
  }
  void reg(uint64_t addr, size_t len, uint32_t access) {
    pd->reg_mr(reinterpret_cast<void*>(addr), len, access);
  }
};

// Layout: [0 rw][1 hole][2 rw][3 hole]: every edge is next to memory this
// test unmapped itself, not to whatever the process maps next door.
TEST(EmuRegistration, UnmappedEdges) {
  Rig r;
  Pages m(4);
  ASSERT_NE(m.p, nullptr);
  ASSERT_EQ(munmap(m.page(1), m.pg), 0);
  ASSERT_EQ(munmap(m.page(3), m.pg), 0);
  const size_t pg = m.pg;
  // Last byte mapped: fine; one more: refused, naming the first unmapped byte.
  EXPECT_NO_THROW(r.reg(m.at(0), pg, kinet::kAccessAll));
  EXPECT_NO_THROW(r.reg(m.at(pg - 1), 1, kinet::kAccessAll));
  EXPECT_TRUE(throws_exactly([&] { r.reg(m.at(0), pg + 1, kinet::kAccessAll); }, ErrorCode::InvalidArgument,
                             r.msg(m.at(0), pg + 1, "is not mapped (first unmapped byte " + hexs(m.at(pg)) + ")")));
  EXPECT_TRUE(throws_exactly([&] { r.reg(m.at(pg - 1), 2, kinet::kAccessAll); }, ErrorCode::InvalidArgument,
                             r.msg(m.at(pg - 1), 2, "is not mapped (first unmapped byte " + hexs(m.at(pg)) + ")")));
  // Starting in the hole; the last byte of the hole; spanning the hole.
  EXPECT_TRUE(throws_exactly([&] { r.reg(m.at(pg), 1, kinet::kRemoteRead); }, ErrorCode::InvalidArgument,
                             r.msg(m.at(pg), 1, "is not mapped (first unmapped byte " + hexs(m.at(pg)) + ")")));
  EXPECT_TRUE(throws_exactly([&] { r.reg(m.at(2 * pg - 1), 2, kinet::kRemoteRead); }, ErrorCode::InvalidArgument,
                             r.msg(m.at(2 * pg - 1), 2,
                                   "is not mapped (first unmapped byte " + hexs(m.at(2 * pg - 1)) + ")")));
  EXPECT_TRUE(throws_exactly([&] { r.reg(m.at(0), 3 * pg, kinet::kAccessAll); }, ErrorCode::InvalidArgument,
                             r.msg(m.at(0), 3 * pg, "is not mapped (first unmapped byte " + hexs(m.at(pg)) + ")")));
  // The page after the hole: its first byte and its whole length are fine; one past its end is not.
  EXPECT_NO_THROW(r.reg(m.at(2 * pg), pg, kinet::kAccessAll));
  EXPECT_TRUE(throws_exactly([&] { r.reg(m.at(2 * pg), pg + 1, kinet::kAccessAll); }, ErrorCode::InvalidArgument,
                             r.msg(m.at(2 * pg), pg + 1,
                                   "is not mapped (first unmapped byte " + hexs(m.at(3 * pg)) + ")")));
}

TEST(EmuRegistration, WrapsTheAddressSpace) {
  Rig r;
  const uint64_t top = ~0ull - 4095;  // the last page of the address space
  EXPECT_TRUE(throws_exactly([&] { r.reg(top, 4097, kinet::kRemoteRead); }, ErrorCode::InvalidArgument,
                             r.msg(top, 4097, "wraps the address space")));
  EXPECT_TRUE(throws_exactly([&] { r.reg(~0ull, 2, kinet::kRemoteRead); }, ErrorCode::InvalidArgument,
                             r.msg(~0ull, 2, "wraps the address space")));
  Pages m(1);
  ASSERT_NE(m.p, nullptr);
  EXPECT_TRUE(throws_exactly([&] { r.reg(m.at(0), ~size_t(0), kinet::kRemoteRead); }, ErrorCode::InvalidArgument,
                             r.msg(m.at(0), ~size_t(0), "wraps the address space")));
  // Ending exactly at 2^64 does not wrap: it is checked as a range (never mapped for users).
  EXPECT_TRUE(throws_error([&] { r.reg(top, 4096, kinet::kRemoteRead); }, ErrorCode::InvalidArgument,
                           {"is not mapped", "is not readable"}));
  EXPECT_TRUE(throws_error([&] { r.reg(~0ull, 1, kinet::kRemoteRead); }, ErrorCode::InvalidArgument,
                           {"is not mapped", "is not readable"}));
}

// Write access needs a writable mapping; any access needs a readable one.
TEST(EmuRegistration, MappingRights) {
  Rig r;
  Pages m(3);
  ASSERT_NE(m.p, nullptr);
  const size_t pg = m.pg;
  ASSERT_EQ(mprotect(m.page(1), pg, PROT_READ), 0);
  ASSERT_EQ(mprotect(m.page(2), pg, PROT_NONE), 0);
  // Page 0 writable up to its last byte.
  EXPECT_NO_THROW(r.reg(m.at(0), pg, kinet::kLocalWrite));
  EXPECT_TRUE(throws_exactly(
      [&] { r.reg(m.at(0), pg + 1, kinet::kLocalWrite); }, ErrorCode::InvalidArgument,
      r.msg(m.at(0), pg + 1,
            "is read-only but local write access needs a writable mapping (first read-only byte " + hexs(m.at(pg)) +
                ")")));
  // Every access that implies local write is refused on the read-only page.
  for (uint32_t acc : {uint32_t(kinet::kLocalWrite), uint32_t(kinet::kLocalWrite | kinet::kRemoteWrite),
                       uint32_t(kinet::kLocalWrite | kinet::kRemoteAtomic), uint32_t(kinet::kAccessAll)})
    EXPECT_TRUE(throws_error([&] { r.reg(m.at(pg), 8, acc); }, ErrorCode::InvalidArgument, {"read-only"}))
        << "access " << acc;
  // Read-only rights on it are fine (up to its last byte).
  EXPECT_NO_THROW(r.reg(m.at(pg), pg, kinet::kRemoteRead));
  EXPECT_NO_THROW(r.reg(m.at(0), 2 * pg, kinet::kRemoteRead));
  EXPECT_NO_THROW(r.reg(m.at(pg), pg, 0));
  // PROT_NONE: not even readable.
  EXPECT_TRUE(throws_exactly([&] { r.reg(m.at(pg), pg + 1, kinet::kRemoteRead); }, ErrorCode::InvalidArgument,
                             r.msg(m.at(pg), pg + 1,
                                   "is not readable (first unreadable byte " + hexs(m.at(2 * pg)) + ")")));
  EXPECT_TRUE(throws_exactly([&] { r.reg(m.at(2 * pg), 1, 0); }, ErrorCode::InvalidArgument,
                             r.msg(m.at(2 * pg), 1, "is not readable (first unreadable byte " + hexs(m.at(2 * pg)) +
                                                        ")")));
}

// Keys: index << 8 | generation. With room for one MR the index comes back at
// once, with a new generation each time; more than max_mr alive is refused.
TEST(EmuRegistration, KeysReusedWithGeneration) {
  kinet::DeviceOptions o;
  o.emu_max_mr = 2;
  auto d = kinet::Device::open("emu", o);
  auto pd = d->alloc_pd();
  Buffer buf = alloc_buffer(4096);
  auto a = pd->reg_mr(buf.get(), 4096, kinet::kAccessAll);
  auto b = pd->reg_mr(buf.get(), 4096, kinet::kAccessAll);
  EXPECT_NE(a->lkey_value() >> 8, b->lkey_value() >> 8) << "two live MRs, two indices";
  EXPECT_TRUE(throws_exactly([&] { pd->reg_mr(buf.get(), 4096, kinet::kAccessAll); }, ErrorCode::ResourceExhausted,
                             d->name() + ": reg_mr: 2 memory regions are alive (DeviceAttr::max_mr)"));
  const uint32_t freed = b->lkey_value();
  b.reset();
  // Far past 2^8 generations and, scaled, what 2^24 fresh indices would be: nothing runs out.
  uint32_t prev = freed;
  for (int i = 0; i < 3000; ++i) {
    auto m = pd->reg_mr(buf.get(), 4096, kinet::kAccessAll);
    ASSERT_EQ(m->lkey_value() >> 8, freed >> 8) << "iteration " << i << ": the only free index";
    ASSERT_NE(m->lkey_value(), prev) << "iteration " << i << ": same index, new generation";
    ASSERT_NE(m->lkey_value() >> 8, 0u);
    prev = m->lkey_value();
  }
}

TEST(EmuRegistration, QpNumbersReusedWithGeneration) {
  kinet::DeviceOptions o;
  o.emu_max_qp = 2;
  auto d = kinet::Device::open("emu", o);
  auto pd = d->alloc_pd();
  kinet::QpConfig c;
  c.sq_depth = 2;
  auto a = pd->create_qp(c);
  auto b = pd->create_qp(c);
  EXPECT_TRUE(throws_exactly([&] { pd->create_qp(c); }, ErrorCode::ResourceExhausted,
                             d->name() + ": create_qp: 2 QPs are alive (DeviceAttr::max_qp)"));
  const uint32_t freed = b->qpn();
  b.reset();
  uint32_t prev = freed;
  for (int i = 0; i < 2000; ++i) {
    auto q = pd->create_qp(c);
    ASSERT_EQ(q->qpn() >> 8, freed >> 8) << "iteration " << i;
    ASSERT_NE(q->qpn(), prev) << "iteration " << i << ": same index, new generation";
    ASSERT_LT(q->qpn(), 1u << 24);
    ASSERT_NE(q->qpn(), 0u);
    ASSERT_NE(q->qpn(), a->qpn());
    prev = q->qpn();
  }
}

// Distinct numbers while alive, round robin: a freed index waits for the others.
TEST(EmuRegistration, FreedIndexWaitsItsTurn) {
  kinet::DeviceOptions o;
  o.emu_max_mr = 4;
  auto d = kinet::Device::open("emu", o);
  auto pd = d->alloc_pd();
  Buffer buf = alloc_buffer(4096);
  auto m1 = pd->reg_mr(buf.get(), 4096, kinet::kAccessAll);
  const uint32_t i1 = m1->lkey_value() >> 8;
  m1.reset();
  auto m2 = pd->reg_mr(buf.get(), 4096, kinet::kAccessAll);
  EXPECT_NE(m2->lkey_value() >> 8, i1) << "a fresh index comes before the one just freed";
}

// A stale key (its MR deregistered, its index reused) reaches nothing: as an
// rkey it is RemoteAccess, as an lkey LocalProtection; the new key works.
TEST(EmuRegistration, StaleKeyNeverMatches) {
  {
    PairOptions o;
    o.dev_b.emu_max_mr = 1;
    o.cfg_a = test_qp_config(16);
    EmuPair p(o);
    Region& src = p.reg_a(4096);
    uint32_t stale;
    {
      auto old = p.pb->reg_mr(p.ra.back()->p(), 1, kinet::kAccessAll);  // any mapped byte: only its key matters
      stale = old->rkey_value();
    }
    Region& dst = p.reg_b(4096);
    ASSERT_EQ(dst.mr->rkey_value() >> 8, stale >> 8) << "the index came back";
    ASSERT_NE(dst.mr->rkey_value(), stale);
    dev::Ticket t;
    const dev::QpHandle h = p.h();
    ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), 64, dev::kSignal, &t), Status::Ok);
    EXPECT_EQ(dev::wait<X>(h, t), Status::Ok) << "the live key works";
    ASSERT_EQ(dev::put<X>(h, src.p(), src.lkey(), dst.addr(), kinet::Rkey{htobe32(stale)}, 64, dev::kSignal, &t),
              Status::Ok);
    EXPECT_EQ(dev::wait<X>(h, t), Status::RemoteAccess);
    EXPECT_TRUE(mentions_any(p.qa->last_error(), {("rkey " + hexs(stale) + " is not registered").c_str()}))
        << p.qa->last_error();
  }
  {
    PairOptions o;
    o.dev_a.emu_max_mr = 1;
    o.cfg_a = test_qp_config(16);
    EmuPair p(o);
    Region& dst = p.reg_b(4096);
    Buffer b = alloc_buffer(4096);
    uint32_t stale;
    {
      auto old = p.pa->reg_mr(b.get(), 4096, kinet::kAccessAll);
      stale = old->lkey_value();
    }
    auto now = p.pa->reg_mr(b.get(), 4096, kinet::kAccessAll);
    ASSERT_EQ(now->lkey_value() >> 8, stale >> 8);
    const dev::QpHandle h = p.h();
    dev::Ticket t;
    ASSERT_EQ(dev::put<X>(h, b.get(), kinet::Lkey{htobe32(stale)}, dst.addr(), dst.rkey(), 64, dev::kSignal, &t),
              Status::Ok);
    EXPECT_EQ(dev::wait<X>(h, t), Status::LocalProtection);
    EXPECT_TRUE(mentions_any(p.qa->last_error(), {("lkey " + hexs(stale) + " is not registered").c_str()}))
        << p.qa->last_error();
  }
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KINET_NO_RLIMIT_AS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KINET_NO_RLIMIT_AS 1
#endif
#endif

// In a child process: address space limited to what is in use plus `slack`.
void limit_address_space(size_t slack) {
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  const rlimit rl{static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + slack, RLIM_INFINITY};
  if (pages == 0 || setrlimit(RLIMIT_AS, &rl) != 0) {
    std::fprintf(stderr, "can't limit the address space\n");
    _exit(3);
  }
}

// Exits 0 when f throws kinet::Error with `want`, else says what happened.
template <class F>
void expect_in_child(const char* what, ErrorCode want, F&& f) {
  try {
    f();
    std::fprintf(stderr, "%s: no failure under the memory limit\n", what);
    _exit(2);
  } catch (const Error& e) {
    if (e.code() != want) {
      std::fprintf(stderr, "%s: wrong code %s: %s\n", what, kinet::error_code_name(e.code()), e.what());
      _exit(1);
    }
    std::fprintf(stderr, "%s: %s\n", what, e.what());
    _exit(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: a non-kinet exception escaped: %s\n", what, e.what());
    _exit(1);
  }
}

// Under RLIMIT_AS: thread creation, ring allocation and registrations fail
// as kinet::Error(ResourceExhausted), never std::system_error/bad_alloc.
TEST(EmuRegistrationDeathTest, MemoryLimitGivesKinetErrors) {
#ifdef KINET_NO_RLIMIT_AS
  GTEST_SKIP() << "sanitizer runtimes reserve terabytes of address space: RLIMIT_AS can't be tested here";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        limit_address_space(1 << 20);  // a NIC engine thread's stack needs more
        expect_in_child("Device::open", ErrorCode::ResourceExhausted, [] { kinet::Device::open("emu"); });
      },
      ::testing::ExitedWithCode(0), "open: can't start the NIC engine thread");
  EXPECT_EXIT(
      {
        auto d = kinet::Device::open("emu");
        auto pd = d->alloc_pd();
        limit_address_space(1 << 20);
        kinet::QpConfig c;
        c.sq_depth = 1u << 15;  // 4 MiB of rings
        expect_in_child("create_qp", ErrorCode::ResourceExhausted, [&] { pd->create_qp(c); });
      },
      ::testing::ExitedWithCode(0), "create_qp|memory");
  EXPECT_EXIT(
      {
        auto d = kinet::Device::open("emu");
        auto pd = d->alloc_pd();
        Buffer buf = alloc_buffer(4096);
        std::vector<std::unique_ptr<kinet::MemoryRegion>> keep;
        keep.reserve(1 << 20);
        limit_address_space(1 << 20);
        expect_in_child("reg_mr", ErrorCode::ResourceExhausted, [&] {
          for (int i = 0; i < (1 << 20); ++i) keep.push_back(pd->reg_mr(buf.get(), 4096, kinet::kAccessAll));
        });
      },
      ::testing::ExitedWithCode(0), "reg_mr.*memory");
#endif
}

}  // namespace
