// kinet proxy tests — a Proxy over one FakeTransport connected to itself,
// with a local and a "remote" region, and helpers to post raw descriptors.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "fake_transport.hpp"
#include "kinet/proxy.hpp"
#include "test_util.hpp"

namespace kinet::test {

// The tests post to each channel from one thread.
inline constexpr dev::Sharing X = dev::Sharing::Exclusive;

inline ProxyConfig rig_proxy_config() {
  ProxyConfig c;
  c.drain_timeout = std::chrono::milliseconds(2000);
  return c;
}
inline ProxyChannelConfig rig_channel_config(uint32_t slots = 64, uint64_t timeout_ms = 10000) {
  ProxyChannelConfig c;
  c.slots = slots;
  c.timeout = std::chrono::milliseconds(timeout_ms);
  return c;
}

// 8-byte aligned bytes.
struct Bytes {
  explicit Bytes(size_t n) : w((n + 7) / 8, 0), n(n) {}
  uint8_t* p() { return reinterpret_cast<uint8_t*>(w.data()); }
  uint64_t a() { return reinterpret_cast<uint64_t>(w.data()); }
  uint64_t* u64(size_t off) { return reinterpret_cast<uint64_t*>(p() + off); }
  std::vector<uint64_t> w;
  size_t n;
};

// Destruction order: regions, proxy, transports (members in reverse).
// Fake: one FakeTransport connected to itself (fault modes, an operation log).
// Loop: two "loop" transports (the message engine, this process), the proxy
// running one thread for each: the local region and the channel on a, the
// remote region on b, served by the proxy's second thread.
enum class Backend { Fake, Loop };
inline const char* backend_name(Backend b) { return b == Backend::Fake ? "fake" : "loop"; }

struct ProxyRig {
  explicit ProxyRig(size_t local_bytes = 1 << 16, size_t remote_bytes = 1 << 16, size_t capacity = 4096,
                    const ProxyConfig& pc = rig_proxy_config(), Backend backend = Backend::Fake)
      : t(capacity), local(local_bytes), remote(remote_bytes) {
    size_t remote_transport = 0;
    if (backend == Backend::Loop) {
      TransportOptions o;
      o.provider = "loop";
      o.name = "proxy side";
      la = Transport::open(o);
      o.name = "target side";
      lb = Transport::open(o);
      self = la->connect(lb->address(), "target side");
      lb->connect(la->address(), "proxy side");
      proxy = std::make_unique<Proxy>(std::vector<Transport*>{la.get(), lb.get()}, pc);
      remote_transport = 1;
    } else {
      self = t.connect({0xfa}, "self");
      proxy = std::make_unique<Proxy>(t, pc);
    }
    lreg = proxy->register_memory(local.p(), local.n, kAccessAll);
    rreg = proxy->register_memory(remote.p(), remote.n, kAccessAll, MemoryKind::Host, remote_transport);
  }
  ProxyChannel& channel(const ProxyChannelConfig& c = rig_channel_config()) {
    ProxyChannel& ch = proxy->channel(self, c);
    rkey = ch.import_key(rreg->remote_key());
    return ch;
  }
  Lkey lkey() const { return lreg->lkey(); }

  FakeTransport t;
  std::unique_ptr<Transport> la, lb;
  PeerId self = 0;
  Bytes local, remote;
  std::unique_ptr<Proxy> proxy;
  std::unique_ptr<ProxyRegion> lreg, rreg;
  Rkey rkey{0};
};

// Polls pred until it holds, bounded (generous: sanitizers, 2 loaded cores).
template <class Pred> bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::milliseconds(20000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

// Posts one raw descriptor (valid bits are added by publish).
inline Status post_raw(const dev::ProxyHandle& h, const dev::ProxyDesc& d, dev::Ticket* t) {
  uint64_t idx = 0;
  const Status st = dev::reserve<dev::Sharing::Exclusive>(h, 1, &idx);
  if (st != Status::Ok) return st;
  dev::publish<dev::Sharing::Exclusive>(h, idx, d);
  *t = dev::Ticket{idx + 1, idx};
  return Status::Ok;
}

}  // namespace kinet::test
