// kinet proxy — one poster source (poster.hpp) over both backends: an emu QP
// (GDAKI through the software NIC) and the proxy over the "loop" transport
// (and over the tests' fake one). Same statuses, same bytes on both sides.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "../emu/emu_fixture.hpp"
#include "poster.hpp"
#include "proxy_rig.hpp"

namespace kinet::test {
namespace {
using dev::Sharing;

struct Outcome {
  Status st;
  std::vector<uint8_t> local, remote;
};

void init(std::mt19937_64& rng, std::vector<uint8_t>& local, std::vector<uint8_t>& remote, uint64_t word0) {
  local.assign(kPosterLocalBytes, 0);
  remote.assign(kPosterRemoteBytes, 0);
  fill_random(rng, local.data(), 4096);
  fill_distinct(rng, remote.data(), local.data(), 4096);
  fill_random(rng, remote.data() + 4096, 2000);
  std::memcpy(remote.data() + 8192, &word0, 8);
}

template <Sharing S> Outcome over_emu(const std::vector<uint8_t>& l0, const std::vector<uint8_t>& r0, uint64_t word0,
                                      uint32_t many) {
  PairOptions o;
  o.cfg_a = test_qp_config(64);
  EmuPair p(o);
  Region& la = p.reg_a(kPosterLocalBytes);
  Region& rb = p.reg_b(kPosterRemoteBytes);
  std::memcpy(la.p(), l0.data(), l0.size());
  std::memcpy(rb.p(), r0.data(), r0.size());
  Outcome out;
  out.st = poster<S>(p.h(), PosterArgs{la.p(), la.lkey(), rb.addr(), rb.rkey(), word0, many});
  out.local.assign(la.p(), la.p() + kPosterLocalBytes);
  out.remote.assign(rb.p(), rb.p() + kPosterRemoteBytes);
  return out;
}

template <Sharing S> Outcome over_proxy(Backend b, const std::vector<uint8_t>& l0, const std::vector<uint8_t>& r0,
                                        uint64_t word0, uint32_t many) {
  ProxyRig r(kPosterLocalBytes, kPosterRemoteBytes, 4096, rig_proxy_config(), b);
  std::memcpy(r.local.p(), l0.data(), l0.size());
  std::memcpy(r.remote.p(), r0.data(), r0.size());
  ProxyChannel& ch = r.channel(rig_channel_config(16));
  Outcome out;
  out.st = poster<S>(ch.handle(), PosterArgs{r.local.p(), r.lkey(), r.remote.a(), r.rkey, word0, many});
  out.local.assign(r.local.p(), r.local.p() + kPosterLocalBytes);
  out.remote.assign(r.remote.p(), r.remote.p() + kPosterRemoteBytes);
  return out;
}

template <Sharing S> void same_result() {
  KINET_TEST_RNG(rng);
  std::vector<uint8_t> l0, r0;
  const uint64_t word0 = random_u64(rng);
  init(rng, l0, r0, word0);
  const uint32_t many = kPosterMaxMany;  // > 64 QP slots, > 16 proxy slots
  Outcome e = over_emu<S>(l0, r0, word0, many);
  Outcome f = over_proxy<S>(Backend::Fake, l0, r0, word0, many);
  Outcome x = over_proxy<S>(Backend::Loop, l0, r0, word0, many);
  ASSERT_EQ(e.st, Status::Ok);
  ASSERT_EQ(f.st, Status::Ok);
  ASSERT_EQ(x.st, Status::Ok);
  EXPECT_EQ(f.local, x.local);
  EXPECT_EQ(f.remote, x.remote);
  // The QP writes the old signal value into the scratch word; the proxy doesn't (proxy.cuh).
  EXPECT_EQ(std::memcmp(e.local.data(), x.local.data(), 8224), 0);
  EXPECT_EQ(e.remote, x.remote);
  // And the result is the expected one, not merely the same.
  EXPECT_EQ(std::memcmp(x.remote.data(), l0.data(), 3000), 0);
  EXPECT_EQ(std::memcmp(x.remote.data() + 3000, l0.data() + 100, 500), 0);
  EXPECT_EQ(std::memcmp(x.remote.data() + 3500, l0.data(), 8 * many), 0);
  EXPECT_EQ(std::memcmp(x.local.data() + 4096, r0.data() + 4096, 2000), 0);
  uint64_t res[3], word, sig;
  std::memcpy(res, x.local.data() + 8192, 24);
  std::memcpy(&word, x.remote.data() + 8192, 8);
  std::memcpy(&sig, x.remote.data() + 8200, 8);
  EXPECT_EQ(res[0], word0);
  EXPECT_EQ(res[1], word0 + 5);
  EXPECT_EQ(res[2], 77u);
  EXPECT_EQ(word, 77u);
  EXPECT_EQ(sig, 1u);
}

TEST(ProxyBackends, OnePosterSourceSameResultExclusive) { same_result<Sharing::Exclusive>(); }
TEST(ProxyBackends, OnePosterSourceSameResultShared) { same_result<Sharing::Gpu>(); }

}  // namespace
}  // namespace kinet::test
