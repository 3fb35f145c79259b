// kinet transport tests — two or more message-engine Transports over the
// loop channel in one process, and bounded waits for their completions.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kinet/transport.hpp"
#include "transports/link_channel.hpp"
#include "transports/loop_channel.hpp"
#include "transports/msg_engine.hpp"

namespace kinet::test {

using transport::MsgOptions;
using transport::MsgTransport;

// A message-engine transport over channel `provider` ("loop", "tcp", "shm").
inline std::unique_ptr<MsgTransport> make_transport(const std::string& provider, const std::string& name,
                                                    size_t depth = 1024,
                                                    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  MsgOptions o;
  o.name = name;
  o.depth = depth;
  o.timeout = timeout;
  const uint64_t node = transport::random_node_id();
  TransportOptions to;
  to.name = name;
  to.timeout = timeout;
  std::unique_ptr<transport::Channel> ch = provider == "tcp"   ? transport::make_tcp_channel(to, node)
                                           : provider == "shm" ? transport::make_shm_channel(to, node)
                                                               : transport::make_loop_channel();
  return std::make_unique<MsgTransport>(std::move(ch), node, o);
}
inline std::unique_ptr<MsgTransport> loop_transport(const std::string& name, size_t depth = 1024,
                                                    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  return make_transport("loop", name, depth, timeout);
}

// Polls every transport in `all` until `t` returned `n` completions (into
// `out`) or `bound` passed; returns how many it got.
inline size_t wait_completions(Transport& t, size_t n, std::vector<Completion>& out,
                               const std::vector<Transport*>& others,
                               std::chrono::milliseconds bound = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  size_t got = 0;
  Completion c[64];
  while (got < n && std::chrono::steady_clock::now() < deadline) {
    for (Transport* o : others) o->poll(c, 0);
    size_t k = t.poll(c, std::min<size_t>(64, n - got));
    out.insert(out.end(), c, c + k);
    got += k;
  }
  return got;
}

// A registered region of `n` zeroed bytes with guard bytes on both sides:
// what a hostile test checks after each crafted message.
struct Guarded {
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kGuardByte = 0xA5;
  std::vector<uint8_t> buf;
  std::unique_ptr<TransportRegion> region;
  size_t n;
  Guarded(Transport& t, size_t bytes, uint32_t access) : buf(bytes + 2 * kGuard, kGuardByte), n(bytes) {
    std::memset(mem(), 0, n);
    region = t.register_memory(mem(), n, access);
  }
  uint8_t* mem() { return buf.data() + kGuard; }
  uint64_t base() { return reinterpret_cast<uint64_t>(mem()); }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (buf[i] != kGuardByte || buf[kGuard + n + i] != kGuardByte) return false;
    return true;
  }
  bool zero() const {
    for (size_t i = 0; i < n; ++i)
      if (buf[kGuard + i] != 0) return false;
    return true;
  }
};

// Two connected transports a -> b, with b's region imported at a.
struct LoopPair {
  std::unique_ptr<MsgTransport> a, b;
  PeerId ab = 0, ba = 0;  // a's number for b, b's for a
  explicit LoopPair(size_t depth = 1024, std::chrono::milliseconds timeout = std::chrono::seconds(20),
                    const std::string& provider = "loop")
      : a(make_transport(provider, "rank A", depth, timeout)), b(make_transport(provider, "rank B", depth, timeout)) {
    ab = a->connect(b->address(), "rank B");
    ba = b->connect(a->address(), "rank A");
  }
  // Runs one posted operation of `a` to its completion (b polled too).
  Completion one() {
    std::vector<Completion> v;
    EXPECT_EQ(wait_completions(*a, 1, v, {b.get()}), 1u) << "no completion within the bound";
    return v.empty() ? Completion{~0ull, 0, Status::Pending} : v[0];
  }
};

}  // namespace kinet::test
