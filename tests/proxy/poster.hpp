// kinet proxy tests — ONE poster source for both backends: templated on the
// handle type, it calls the same device API names on a dev::QpHandle (GDAKI:
// emu or a real NIC) and on a dev::ProxyHandle. KINET_HD: host threads run
// it in CI, kernels in tests/gpu.
#pragma once
#include <cstdint>

#include "kinet/device/proxy.cuh"
#include "kinet/device/qp.cuh"

namespace kinet::test {

// Byte layout on both sides:
//   local:  [0, 4096) source data, [4096, 6096) get destination,
//           8192 / 8200 / 8208 atomic results, 8224 put_signal scratch (QP only)
//   remote: [0, 3000) put target, [3000, 3500) put_signal data, [3500, 4096)
//           the small puts, [4096, 6096) get source, 8192 atomic word, 8200 signal word
inline constexpr uint64_t kPosterLocalBytes = 8232;
inline constexpr uint64_t kPosterRemoteBytes = 8208;
inline constexpr uint32_t kPosterMaxMany = (4096 - 3500) / 8;

struct PosterArgs {
  uint8_t* local;
  Lkey lkey;
  uint64_t remote;
  Rkey rkey;
  uint64_t word0;  // the atomic word's value before the run
  uint32_t many;   // small puts at the end (<= kPosterMaxMany): more than a small ring's slots
};

// Every operation once, each waited for, then `many` 8-byte puts (odd ones
// with kNoDoorbell) and quiet. Returns the first status that is not Ok.
template <dev::Sharing S, class H> KINET_HD Status poster(const H& h, const PosterArgs& a) {
  dev::Ticket t;
  Status st = Status::Ok;
  auto done = [&](Status posted) {
    if (posted != Status::Ok) return posted;
    return dev::wait<S>(h, t);
  };
  uint64_t* res = reinterpret_cast<uint64_t*>(a.local + 8192);
  if ((st = done(dev::put<S>(h, a.local, a.lkey, a.remote, a.rkey, 3000, 0, &t))) != Status::Ok) return st;
  if ((st = done(dev::get<S>(h, a.local + 4096, a.lkey, a.remote + 4096, a.rkey, 2000, 0, &t))) != Status::Ok)
    return st;
  if ((st = done(dev::fetch_add<S>(h, res, a.lkey, a.remote + 8192, a.rkey, 5, 0, &t))) != Status::Ok) return st;
  if ((st = done(dev::compare_swap<S>(h, res + 1, a.lkey, a.remote + 8192, a.rkey, a.word0 + 5, 77, dev::kFence,
                                      &t))) != Status::Ok)
    return st;
  if ((st = done(dev::compare_swap<S>(h, res + 2, a.lkey, a.remote + 8192, a.rkey, 1, 2, 0, &t))) != Status::Ok)
    return st;
  if ((st = done(dev::put_signal<S>(h, a.local + 100, a.lkey, a.remote + 3000, a.rkey, 500, a.remote + 8200, a.rkey,
                                    1, reinterpret_cast<uint64_t*>(a.local + 8224), a.lkey, 0, &t))) != Status::Ok)
    return st;
  if ((st = done(dev::nop<S>(h, dev::kSignal, &t))) != Status::Ok) return st;
  for (uint32_t i = 0; i < a.many; ++i) {
    st = dev::put<S>(h, a.local + 8 * i, a.lkey, a.remote + 3500 + 8 * i, a.rkey, 8, (i & 1) ? dev::kNoDoorbell : 0u,
                     &t);
    if (st != Status::Ok) return st;
  }
  return dev::quiet<S>(h);
}

}  // namespace kinet::test
