// kinet — the proxy backend, host side: CPU threads that execute the
// descriptors kernels (or host threads) publish through kinet/device/proxy.cuh
// on a kinet::Transport.
//
//   auto t = Transport::open({.provider = "ucx"});  ... connect, exchange keys
//   Proxy proxy(*t);                       // one proxy thread per transport
//   auto reg = proxy.register_memory(buf, bytes, kRemoteWrite | kRemoteRead);
//   ProxyChannel& ch = proxy.channel(peer, {.slots = 4096, .posters = Posters::Gpu});
//   Rkey rk = ch.import_key(peer_remote_key);
//   kernel<<<...>>>(ch.handle(), reg->lkey(), rk, ...);   // dev::put(h, ...)
//
// Threads: one per transport given to the Proxy (a Transport is driven by one
// thread at a time). Each busy-polls its channels and its transport,
// draining up to ProxyConfig::batch descriptors per channel per pass; when a
// pass finds nothing to do it backs off (polls flat out for ProxyConfig::spin,
// then yields, then sleeps growing to ProxyConfig::max_sleep), and the first
// descriptor it finds resets that. While its rings keep it busy with
// descriptors that need no transport (nops) it polls the transport every few
// passes rather than every pass.
// $KINET_PROXY_CPUS (or ProxyConfig::cpus) pins thread i to the i-th CPU of
// the list.
//
// Errors: a descriptor the proxy refuses (unknown opcode, flag or reserved
// bits; length 0; a local range outside its lkey's region; an unknown lkey)
// or whose transport operation fails puts its channel in the error state
// (proxy.cuh says what posters see); ProxyChannel::last_error() says what
// and why, naming the channel, the peer and the ring index.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kinet/device/proxy.cuh"
#include "kinet/kinet.hpp"
#include "kinet/transport.hpp"

namespace kinet {

struct ProxyConfig {
  uint32_t batch = 32;                            // descriptors taken per channel per pass, 1..65536
  // How long an idle proxy thread keeps polling flat out before it yields:
  // a descriptor published within it is seen within one pass (round-trip
  // latency); the CPU is busy meanwhile. 0: about 64 passes.
  std::chrono::microseconds spin{20};
  std::chrono::microseconds max_sleep{50};        // longest idle sleep of a proxy thread (0: never sleep)
  std::string cpus;                               // "3,5": pin thread i to cpus[i]; empty: $KINET_PROXY_CPUS
  // How long teardown waits for operations in flight (0: the transport
  // timeout, $KINET_TRANSPORT_TIMEOUT_MS, else KINET_TIMEOUT_MS; more than
  // a day, milliseconds::max() included: a day).
  std::chrono::milliseconds drain_timeout{0};
};

struct ProxyChannelConfig {
  uint32_t slots = 1024;                 // ring size: a power of two, 2..2^20
  // Where the posting counters live (kinet::Posters, as for a QP): Host: host
  // threads post (host memory); Gpu: kernels post (GPU memory of the current
  // device; needs CUDA), host threads can't.
  Posters posters = Posters::Host;
  std::chrono::milliseconds timeout{0};  // bound of the posters' waits (0: KINET_TIMEOUT_MS)
  size_t transport = 0;                  // index into the Proxy's transports
};

// A region registered with one of the proxy's transports.
class ProxyRegion {
 public:
  ~ProxyRegion();  // the proxy stops accepting its lkey, then the transport deregisters it
  Lkey lkey() const { return Lkey{id_}; }            // the id proxy descriptors carry (not big-endian)
  TransportRegion& transport_region() const { return *region_; }
  RemoteKey remote_key() const { return region_->remote_key(); }  // what a peer imports
  void* addr() const { return region_->addr(); }
  size_t length() const { return region_->length(); }

 private:
  friend class Proxy;
  ProxyRegion() = default;
  class Proxy* proxy_ = nullptr;
  uint32_t id_ = 0;
  std::unique_ptr<TransportRegion> region_;
};

namespace proxy_detail {
struct Thread;
struct ChannelState;
}  // namespace proxy_detail

// One (transport, peer) channel: a descriptor ring and its counters. Owned
// by its Proxy; valid until the Proxy is destroyed.
class ProxyChannel {
 public:
  ~ProxyChannel();
  dev::ProxyHandle handle() const { return handle_; }
  PeerId peer() const { return peer_; }
  uint32_t id() const { return handle_.channel; }
  // Imports a key of this channel's peer on its transport: the Rkey posters use.
  Rkey import_key(const RemoteKey& key);
  // The channel's first failure ("channel 0 (peer 1) descriptor 17: ..."),
  // empty while healthy.
  std::string last_error() const;
  // Its status (Status::Ok while healthy) and the device-side failure posters recorded.
  Status status() const;
  Status poster_error() const;  // ProxyPostState::local_error (Posters::Host only; Ok for Gpu)
  uint64_t completed() const;   // descriptors completed so far

 private:
  friend class Proxy;
  friend struct proxy_detail::Thread;
  ProxyChannel() = default;
  class Proxy* proxy_ = nullptr;
  Transport* transport_ = nullptr;
  PeerId peer_ = 0;
  dev::ProxyHandle handle_{};
  Posters posters_ = Posters::Host;
  std::unique_ptr<proxy_detail::ChannelState> st_;
};

class Proxy {
 public:
  // Starts one proxy thread per transport. The transports must outlive the
  // Proxy; nothing else may post to them or poll them meanwhile. Throws
  // InvalidArgument (no transport, a null one, batch out of range, a CPU list
  // that is not numbers), System (a thread or pinning failed).
  explicit Proxy(Transport& t, const ProxyConfig& cfg = {});
  explicit Proxy(const std::vector<Transport*>& transports, const ProxyConfig& cfg = {});
  // Stops taking descriptors, waits (bounded by drain_timeout) for the
  // operations in flight, marks every channel closed (unfinished tickets end
  // WrFlushed), then joins the threads. Regions must be destroyed first.
  ~Proxy();
  // The teardown of ~Proxy without freeing anything: afterwards posters see
  // WrFlushed for what did not complete. Idempotent.
  void stop();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // A new channel to `peer` of transport cfg.transport. Throws
  // InvalidArgument (slots not a power of two in range, no such transport),
  // NotSupported (Posters::Gpu without CUDA), ResourceExhausted (at most
  // kMaxChannels per proxy), InvalidArgument after stop() (no thread would
  // serve it).
  ProxyChannel& channel(PeerId peer, const ProxyChannelConfig& cfg = {});
  // Registers memory with transport `transport` (Transport::register_memory's
  // rules and errors) and gives it an lkey (never reused; 0 is never one).
  // Gets and atomics need kLocalWrite in `access` for their local buffer.
  std::unique_ptr<ProxyRegion> register_memory(void* addr, size_t bytes, uint32_t access,
                                               MemoryKind kind = MemoryKind::Host, size_t transport = 0);
  size_t transports() const { return transports_.size(); }
  Transport& transport(size_t i) const { return *transports_.at(i); }

  static constexpr size_t kMaxChannels = 1024;

 private:
  friend class ProxyRegion;
  friend struct proxy_detail::Thread;
  struct RegionEntry {
    uint64_t base = 0, len = 0;
    size_t transport = 0;
    uint32_t access = 0;
  };
  // An lkey's [base, base + len) and transport under regions_mu_; false when unknown.
  bool lookup(uint32_t lkey, RegionEntry* out) const;
  void release_region(uint32_t id);

  std::vector<Transport*> transports_;
  ProxyConfig cfg_;
  mutable std::mutex regions_mu_;
  std::unordered_map<uint32_t, RegionEntry> regions_;
  uint32_t next_region_ = 1;  // lkey ids are never reused (0 is never valid)
  std::mutex channels_mu_;
  bool stopped_ = false;  // under channels_mu_: stop() began, channel() refuses
  std::vector<std::unique_ptr<ProxyChannel>> channels_;
  std::vector<std::unique_ptr<proxy_detail::Thread>> threads_;
};

}  // namespace kinet
