// The QpHandle ABI guard: a handle whose abi word is not this build's is
// refused by every verb with InvalidArgument (nothing reserved, nothing
// posted), the mismatch is recorded in the QP's SqState and
// QueuePair::last_error() names both words. The check exists in debug builds
// of the verbs; this file is compiled with NDEBUG undefined (tests/CMakeLists)
// so it runs in every build type.
#ifdef NDEBUG
#error "handle_abi_test.cpp must be compiled without NDEBUG (the check is a debug-build feature)"
#endif
#include <gtest/gtest.h>

#include <cstring>
#include <type_traits>

#include "kinet/kinet.hpp"

namespace {
using kinet::Status;
using kinet::dev::QpHandle;
using kinet::dev::Sharing;
using kinet::dev::Ticket;
namespace dev = kinet::dev;

static_assert(std::is_trivially_copyable_v<QpHandle>);
static_assert(std::is_standard_layout_v<QpHandle>);
static_assert(sizeof(QpHandle) == dev::kQpHandleBytes);
static_assert(dev::kQpHandleAbi == (dev::kQpHandleVersion << 16 | sizeof(QpHandle)));
static_assert(sizeof(dev::SqState) == 72, "bad_abi lives in SqState's former padding");

struct Qp {
  std::unique_ptr<kinet::Device> d = kinet::Device::open("emu");
  std::unique_ptr<kinet::ProtectionDomain> pd = d->alloc_pd();
  std::unique_ptr<kinet::QueuePair> q = [this] {
    kinet::QpConfig c;
    c.sq_depth = 16;
    c.timeout_ms = 2000;
    return pd->create_qp(c);
  }();
};

template <Sharing S> void every_verb_refuses(const QpHandle& h, const char* what) {
  SCOPED_TRACE(what);
  uint64_t first = 77;
  uint64_t buf = 0;
  EXPECT_EQ(dev::reserve<S>(h, 1, &first), Status::InvalidArgument);
  EXPECT_EQ(first, 77u) << "reserve touched *first";
  EXPECT_EQ(dev::try_reserve<S>(h, 1, &first), Status::InvalidArgument);
  EXPECT_EQ(dev::publish<S>(h, 0, 1), Status::InvalidArgument);
  EXPECT_EQ(dev::ring_doorbell<S>(h, 1), Status::InvalidArgument);
  EXPECT_EQ(dev::poll_cq<S>(h), Status::InvalidArgument);
  EXPECT_EQ(dev::test<S>(h, Ticket{1, 0}), Status::InvalidArgument);
  EXPECT_EQ(dev::wait<S>(h, Ticket{1, 0}), Status::InvalidArgument);
  EXPECT_EQ(dev::quiet<S>(h), Status::InvalidArgument);
  EXPECT_EQ(dev::nop<S>(h, dev::kSignal), Status::InvalidArgument);
  EXPECT_EQ(dev::put<S>(h, &buf, kinet::Lkey{0}, 0, kinet::Rkey{0}, 8), Status::InvalidArgument);
  EXPECT_EQ(dev::get<S>(h, &buf, kinet::Lkey{0}, 0, kinet::Rkey{0}, 8), Status::InvalidArgument);
  EXPECT_EQ(dev::fetch_add<S>(h, &buf, kinet::Lkey{0}, 0, kinet::Rkey{0}, 1), Status::InvalidArgument);
  if constexpr (S == Sharing::Exclusive) {
    EXPECT_EQ(dev::post_loop(h, 4, 1, 0, nullptr, [&](uint64_t idx, uint32_t f) { dev::prepare_nop<S>(h, idx, f); }),
              Status::InvalidArgument);
    dev::SqCursor c{};
    EXPECT_EQ(dev::open_cursor(h, &c), Status::InvalidArgument);
  }
}

TEST(HandleAbi, GoodHandlePosts) {
  Qp qp;
  const QpHandle h = qp.q->handle();
  EXPECT_EQ(h.abi, dev::kQpHandleAbi);
  uint64_t first = 0;
  EXPECT_EQ(dev::reserve<Sharing::Exclusive>(h, 1, &first), Status::Ok);
  dev::prepare_nop<Sharing::Exclusive>(h, first, 0);
  EXPECT_EQ(dev::publish<Sharing::Exclusive>(h, first, 1), Status::Ok);
  EXPECT_EQ(h.state->local_error, 0u);
  EXPECT_EQ(qp.q->last_error(), "");
}

// One word off in either half (version, size), and a zeroed one, in every sharing mode.
TEST(HandleAbi, WrongWordIsRefusedRecordedAndNamed) {
  const uint32_t good = dev::kQpHandleAbi;
  for (uint32_t bad : {good + (1u << 16), good - 8, good + 1, 0u}) {
    for (int mode = 0; mode < 3; ++mode) {
      Qp qp;
      QpHandle h = qp.q->handle();
      h.abi = bad;
      if (mode == 0) every_verb_refuses<Sharing::Exclusive>(h, "exclusive");
      if (mode == 1) every_verb_refuses<Sharing::Cta>(h, "cta");
      if (mode == 2) every_verb_refuses<Sharing::Gpu>(h, "gpu");
      EXPECT_EQ(h.state->reserved, 0u) << "nothing may be reserved";
      EXPECT_EQ(h.state->ready, 0u);
      EXPECT_EQ(h.state->rung, 0u);
      EXPECT_EQ(h.dbrec[1], 0u) << "nothing may be announced";
      EXPECT_EQ(h.state->local_error, static_cast<uint8_t>(Status::InvalidArgument));
      EXPECT_EQ(h.state->bad_abi, bad);
      char want[256];
      std::snprintf(want, sizeof want,
                    "device verbs: invalid argument (status 20): the QpHandle's ABI word is 0x%x (version %u, %u "
                    "bytes), these verbs were compiled for 0x%x (version %u, 96 bytes)",
                    bad, bad >> 16, bad & 0xffff, good, dev::kQpHandleVersion);
      EXPECT_NE(qp.q->last_error().find(want), std::string::npos) << qp.q->last_error() << "\nwant: " << want;
      // The handle as built works: a refused handle left no state behind but the reason.
      const QpHandle ok = qp.q->handle();
      EXPECT_EQ(dev::nop<Sharing::Exclusive>(ok, dev::kSignal), Status::Ok);
    }
  }
}

// A handle from foreign memory: wrong word and no state to record in.
TEST(HandleAbi, NoStateNoCrash) {
  QpHandle h{};
  h.abi = 0;
  uint64_t first = 0;
  EXPECT_EQ(dev::reserve<Sharing::Gpu>(h, 1, &first), Status::InvalidArgument);
  EXPECT_EQ(dev::wait<Sharing::Exclusive>(h, Ticket{1, 0}), Status::InvalidArgument);
  EXPECT_EQ(dev::poll_cq<Sharing::Cta>(h), Status::InvalidArgument);
}

}  // namespace
