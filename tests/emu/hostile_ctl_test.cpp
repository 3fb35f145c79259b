// The control path as a hostile user drives it: connection blobs that lie,
// QpConfig edge values, $KINET_TIMEOUT_MS values that would switch the bound
// off (each in a child process: the library reads it once), and
// create/destroy cycles far past the key and QPN spaces.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "ctl_test_util.hpp"
#include "emu_preamble.hpp"

extern char** environ;

namespace {

TEST(EmuHostileCtl, QpInfoBlobs) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto q = pd->create_qp();
  const std::vector<uint8_t> good = q->info().serialize();
  ASSERT_EQ(good.size(), 64u);
  EXPECT_NO_THROW(kinet::QpInfo::deserialize(good.data(), 64));
  for (size_t len : {size_t{0}, size_t{1}, size_t{63}, size_t{65}, size_t{4096}, SIZE_MAX}) {
    std::vector<uint8_t> blob(std::min<size_t>(len, 4096) + 1, 0);
    std::memcpy(blob.data(), good.data(), std::min<size_t>(blob.size(), 64));
    const std::string want = len < 64 ? "QP info blob has " + std::to_string(len) +
                                            " bytes, shorter than its 64-byte header"
                                      : "QP info blob has " + std::to_string(len) +
                                            " bytes, expected 64 (64-byte header + a 0-byte endpoint)";
    EXPECT_TRUE(throws_exactly([&] { kinet::QpInfo::deserialize(blob.data(), len); }, ErrorCode::InvalidArgument,
                               want))
        << len;
  }
  EXPECT_TRUE(throws_exactly([&] { kinet::QpInfo::deserialize(nullptr, 64); }, ErrorCode::InvalidArgument,
                             "QP info blob is a null pointer"));
  std::vector<uint8_t> garbage(64, 0xa5);
  EXPECT_TRUE(throws_error([&] { kinet::QpInfo::deserialize(garbage.data(), 64); }, ErrorCode::InvalidArgument,
                           {"bad magic 0xa5a5a5a5"}));
  // QPN edges: 0 and 2^24 refused, 1 and 2^24-1 accepted.
  for (uint32_t qpn : {0u, 1u << 24, 0xffffffffu}) {
    kinet::QpInfo i = q->info();
    i.qpn = qpn;
    EXPECT_TRUE(throws_exactly([&] { i.validate(); }, ErrorCode::InvalidArgument,
                               "QP info: QP number " + hexs(qpn) + " is out of range [1, 2^24)"));
  }
  for (uint32_t qpn : {1u, (1u << 24) - 1}) {
    kinet::QpInfo i = q->info();
    i.qpn = qpn;
    EXPECT_NO_THROW(i.validate());
  }
  // A blob valid in form but for a QPN no one has: connect succeeds (as in
  // IB), traffic finds no peer.
  auto peer = pd->create_qp();
  kinet::QpInfo i = peer->info();
  i.qpn = (1u << 24) - 1;
  q->connect(i);
  Buffer buf = alloc_buffer(64);
  auto mr = pd->reg_mr(buf.get(), 64, kinet::kAccessAll);
  dev::Ticket t;
  ASSERT_EQ(dev::put<X>(q->handle(), buf.get(), mr->lkey(), mr->addr_u64(), mr->rkey(), 8, 0, &t), Status::Ok);
  EXPECT_EQ(dev::wait<X>(q->handle(), t), Status::TransportRetryExceeded);
}

TEST(EmuHostileCtl, QpConfigEdges) {
  auto d = kinet::Device::open("emu");
  auto pd = d->alloc_pd();
  auto depth = [&](uint32_t n) {
    kinet::QpConfig c;
    c.sq_depth = n;
    return pd->create_qp(c);
  };
  for (uint32_t n : {0u, 1u, 3u, 6u, 1u << 16, 0x80000000u, 0xffffffffu})
    EXPECT_TRUE(throws_exactly([&] { depth(n); }, ErrorCode::InvalidArgument,
                               d->name() + ": create_qp: sq_depth " + std::to_string(n) +
                                   " must be a power of two in [2, 32768]"))
        << n;
  for (uint32_t n : {2u, 4u, 1u << 15}) EXPECT_EQ(depth(n)->handle().size(), n);
  auto period = [&](uint32_t depth_, uint32_t p) {
    kinet::QpConfig c;
    c.sq_depth = depth_;
    c.signal_period = p;
    return pd->create_qp(c);
  };
  EXPECT_EQ(period(2, 0)->handle().signal_period, 1u);
  EXPECT_EQ(period(256, 0)->handle().signal_period, 64u);
  EXPECT_EQ(period(256, 128)->handle().signal_period, 128u);
  EXPECT_EQ(period(256, 1)->handle().signal_period, 1u);
  for (uint32_t p : {3u, 256u, 512u, 0x80000000u})
    EXPECT_TRUE(throws_exactly([&] { period(256, p); }, ErrorCode::InvalidArgument,
                               d->name() + ": create_qp: signal_period " + std::to_string(p) +
                                   " must be a power of two <= sq_depth/2"))
        << p;
  kinet::QpConfig c;
  c.timeout_ms = UINT64_MAX;
  EXPECT_EQ(pd->create_qp(c)->handle().timeout_ns, UINT64_MAX);
  c.timeout_ms = UINT64_MAX / 1000000;  // the largest that fits in ns
  EXPECT_EQ(pd->create_qp(c)->handle().timeout_ns, UINT64_MAX / 1000000 * 1000000);
  c.timeout_ms = 1;
  EXPECT_EQ(pd->create_qp(c)->handle().timeout_ns, 1000000u);
  c = {};
  c.max_msg = d->attr().max_msg + 1;
  EXPECT_TRUE(throws_error([&] { pd->create_qp(c); }, ErrorCode::InvalidArgument, {"exceeds the device's max_msg"}));
}

// An unbounded timeout is still a timeout that works: a put completes.
TEST(EmuHostileCtl, MaxTimeoutStillCompletes) {
  PairOptions o;
  o.cfg_a.timeout_ms = UINT64_MAX;
  EmuPair p(o);
  Region& a = p.reg_a(64);
  Region& b = p.reg_b(64);
  dev::Ticket t;
  ASSERT_EQ(dev::put<X>(p.h(), a.p(), a.lkey(), b.addr(), b.rkey(), 64, 0, &t), Status::Ok);
  EXPECT_EQ(dev::wait<X>(p.h(), t), Status::Ok);
  EXPECT_EQ(dev::quiet<X>(p.h()), Status::Ok);
}

// ---- $KINET_TIMEOUT_MS in a child (the library reads it once per process) ----
// The child runs this binary's EmuHostileChild.Timeout with the variable set
// and KINET_HOSTILE_WANT = the bound default_timeout_ms() must report.
TEST(EmuHostileChild, Timeout) {
  const char* want = std::getenv("KINET_HOSTILE_WANT");
  if (!want) GTEST_SKIP() << "run by EmuHostileCtl.TimeoutEnvironment";
  EXPECT_EQ(kinet::default_timeout_ms(), std::strtoull(want, nullptr, 0));
  // Whatever the variable said, waits neither expire at once nor fail.
  EmuPair p;
  Region& a = p.reg_a(64);
  Region& b = p.reg_b(64);
  dev::Ticket t;
  ASSERT_EQ(dev::put<X>(p.h(), a.p(), a.lkey(), b.addr(), b.rkey(), 64, 0, &t), Status::Ok);
  EXPECT_EQ(dev::wait<X>(p.h(), t), Status::Ok);
  EXPECT_GE(p.h().timeout_ns, 1000000u);
}

int run_child(const std::string& value, const std::string& want) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "KINET_TIMEOUT_MS=", 17) && std::strncmp(*e, "GTEST_", 6)) env.emplace_back(*e);
  env.push_back("KINET_TIMEOUT_MS=" + value);
  env.push_back("KINET_HOSTILE_WANT=" + want);
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", filter = "--gtest_filter=EmuHostileChild.Timeout", brief = "--gtest_brief=1";
  char* argv[] = {self.data(), filter.data(), brief.data(), nullptr};
  pid_t pid;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()) != 0) return -1;
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST(EmuHostileCtl, TimeoutEnvironment) {
  // value -> the bound the library must use (env::parse_timeout_ms's rules):
  // invalid values (0 would expire every wait at once; negatives, garbage and
  // anything but a decimal integer are not bounds) fall back to the default;
  // values above one day, 2^64-1 and beyond included, saturate to one day.
  const std::pair<const char*, const char*> cases[] = {
      {"0", "10000"},
      {"-1", "10000"},
      {"-0", "10000"},
      {"garbage", "10000"},
      {"12abc", "10000"},
      {"0x7530", "10000"},
      {"18446744073709551615", "86400000"},
      {"18446744073709551616", "86400000"},  // 2^64
      {"86400001", "86400000"},
      {"86400000", "86400000"},
      {"60000", "60000"},
      {"1500", "1500"},  // small but still a bound the child's one put meets, sanitizers included
  };
  for (auto& [v, want] : cases) EXPECT_EQ(run_child(v, want), 0) << "KINET_TIMEOUT_MS=" << v;
}

// Far more create/destroy cycles than the key and QPN spaces hold (made
// quick by limits of one): nothing runs out, and no number of a destroyed
// object names the next one.
TEST(EmuHostileCtl, CyclesPastTheIdSpaces) {
  kinet::DeviceOptions o;
  o.emu_max_mr = 1;
  o.emu_max_qp = 1;
  auto d = kinet::Device::open("emu", o);
  auto pd = d->alloc_pd();
  Buffer buf = alloc_buffer(4096);
  uint32_t prev_key = 0, prev_qpn = 0;
  const int n = static_cast<int>(scaled(600, 300));  // > 256 generations: they wrap at least once
  for (int i = 0; i < n; ++i) {
    auto mr = pd->reg_mr(buf.get(), 4096, kinet::kAccessAll);
    EXPECT_NE(mr->lkey_value(), prev_key) << i;
    EXPECT_TRUE(throws_error([&] { pd->reg_mr(buf.get(), 64, kinet::kAccessAll); }, ErrorCode::ResourceExhausted,
                             {"1 memory regions are alive"}));
    prev_key = mr->lkey_value();
  }
  for (int i = 0; i < n; ++i) {
    auto q = pd->create_qp(test_qp_config(2));
    EXPECT_NE(q->qpn(), prev_qpn) << i;
    EXPECT_GT(q->qpn(), 0u);
    EXPECT_LT(q->qpn(), 1u << 24);
    prev_qpn = q->qpn();
  }
}

}  // namespace
