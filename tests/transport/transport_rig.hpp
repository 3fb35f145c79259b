// kinet transport tests — two or more message-engine Transports over the
// loop channel in one process, and bounded waits for their completions.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kinet/transport.hpp"
#include "transports/ipc_path.hpp"
#include "transports/link_channel.hpp"
#include "transports/loop_channel.hpp"
#include "transports/msg_engine.hpp"

namespace kinet::test {

using transport::MsgOptions;
using transport::MsgTransport;

// A message-engine transport over channel `provider` ("loop", "tcp", "shm",
// "cuda_ipc"); a non-null `ipc` is its by-reference data path (MsgOptions::ipc).
inline std::unique_ptr<MsgTransport> make_transport(const std::string& provider, const std::string& name,
                                                    size_t depth = 1024,
                                                    std::chrono::milliseconds timeout = std::chrono::seconds(20),
                                                    std::shared_ptr<transport::IpcMemory> ipc = nullptr) {
  MsgOptions o;
  o.name = name;
  o.depth = depth;
  o.timeout = timeout;
  o.ipc = std::move(ipc);
  const uint64_t node = transport::random_node_id();
  TransportOptions to;
  to.name = name;
  to.timeout = timeout;
  std::unique_ptr<transport::Channel> ch = provider == "tcp"        ? transport::make_tcp_channel(to, node)
                                           : provider == "shm"      ? transport::make_shm_channel(to, node)
                                           : provider == "cuda_ipc" ? transport::make_cuda_ipc_channel(to, node)
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

// `n` bytes of host memory (zeroed, or `fill`) with guard bytes on both
// sides, registered at `t` when given: what a hostile test checks after each
// crafted message.
struct Guarded {
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kGuardByte = 0xA5;
  std::vector<uint8_t> buf;
  std::unique_ptr<TransportRegion> region;
  size_t n;
  explicit Guarded(size_t bytes, uint8_t fill = 0) : buf(bytes + 2 * kGuard, kGuardByte), n(bytes) {
    std::memset(mem(), fill, n);
  }
  Guarded(Transport& t, size_t bytes, uint32_t access) : Guarded(bytes) {
    region = t.register_memory(mem(), n, access);
  }
  uint8_t* mem() { return buf.data() + kGuard; }
  uint64_t base() { return reinterpret_cast<uint64_t>(mem()); }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (buf[i] != kGuardByte || buf[kGuard + n + i] != kGuardByte) return false;
    return true;
  }
  bool all(uint8_t v) const {
    for (size_t i = 0; i < n; ++i)
      if (buf[kGuard + i] != v) return false;
    return true;
  }
  bool zero() const { return all(0); }
};

// Two connected transports a -> b, with b's region imported at a.
struct LoopPair {
  std::unique_ptr<MsgTransport> a, b;
  PeerId ab = 0, ba = 0;  // a's number for b, b's for a
  explicit LoopPair(size_t depth = 1024, std::chrono::milliseconds timeout = std::chrono::seconds(20),
                    const std::string& provider = "loop")
      : LoopPair(make_transport(provider, "rank A", depth, timeout),
                 make_transport(provider, "rank B", depth, timeout)) {}
  // Connects `ta` ("rank A") and `tb` ("rank B").
  LoopPair(std::unique_ptr<MsgTransport> ta, std::unique_ptr<MsgTransport> tb) : a(std::move(ta)), b(std::move(tb)) {
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

// Channel events kept for a test that plays a raw peer: the messages it got.
struct Collector : transport::ChannelEvents {
  std::deque<std::vector<uint8_t>> msgs;
  void on_message(uint32_t, const uint8_t* d, size_t n) override { msgs.emplace_back(d, d + n); }
  void on_stranger(std::string_view, const uint8_t*, size_t) override {}
  void on_sent(uint64_t, bool) override {}
  void on_peer_lost(uint32_t, const std::string&) override {}
};

}  // namespace kinet::test
