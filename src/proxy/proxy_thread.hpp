// kinet — one proxy thread: drains the descriptor rings of its channels into
// its transport and writes completions back (include/kinet/proxy.hpp).
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/thread_name.hpp"
#include "kinet/proxy.hpp"

namespace kinet::proxy_detail {

// Per-slot state of a taken descriptor (ChannelState::status): kFree once
// its completion was published, kInFlight while the transport has it, else
// its final Status (>= 0).
inline constexpr int32_t kFree = -2;
inline constexpr int32_t kInFlight = -1;

struct ChannelState {
  // Shared with posters (see kinet/device/proxy.cuh).
  uint32_t log_n = 0;
  dev::ProxyDesc* ring = nullptr;
  dev::ProxyShared* shared = nullptr;
  dev::ProxyPostState* post = nullptr;
  uint32_t id = 0;          // the proxy's channel number
  uint32_t local = 0;       // index in its thread's list (completion cookies: local << 32 | ring index)
  PeerId peer = 0;
  // Proxy thread only.
  uint64_t head = 0;        // next ring index to take
  uint64_t completed = 0;   // every descriptor below it finished, in ring order
  uint64_t published = 0;   // what shared->completed says (completed, published once per pass)
  uint64_t inflight = 0;    // taken, handed to the transport, not completed
  bool failed = false;      // a failure was seen: later descriptors are flushed, not executed
  bool error_published = false;
  // By slot, for [completed, head): a descriptor that finished at once while
  // nothing before it was pending never gets an entry (completed passes it).
  std::vector<int32_t> status;
  std::unordered_map<size_t, std::string> reason;  // by slot, failures only: why
  std::vector<uint8_t> ops;         // by slot: the opcode of a descriptor in flight
  // Read by ProxyChannel::last_error().
  mutable std::mutex err_mu;
  std::string last_error;
};

struct Thread {
  Thread(Proxy* proxy, Transport* t, const ProxyConfig& cfg, uint32_t index)
      : proxy_(proxy), t_(t), cfg_(cfg), index_(index) {}
  ~Thread() { stop_and_join(); }
  void start() { th_ = named_thread("kinet-proxy", [this] { run(); }); }
  std::thread::native_handle_type native() { return th_.native_handle(); }
  void request_stop() { stop_.store(true, std::memory_order_release); }
  void stop_and_join() {
    request_stop();
    if (th_.joinable()) th_.join();
  }
  // Starts serving c (any thread; c outlives the thread).
  void add(ProxyChannel* c);

 private:
  void run();
  size_t drain(ProxyChannel& c);             // takes published descriptors
  size_t reap();                              // transport completions
  void finish(ChannelState& s, uint64_t idx, int32_t st, std::string why);
  void advance(ChannelState& s);              // completes in ring order, publishes completed
  // Validates and posts one descriptor; Status::NoSpace: not taken, retry later.
  // Takes `regions` (Proxy::regions_mu_) only when it looks an lkey up.
  Status execute(ProxyChannel& c, uint64_t idx, const dev::ProxyDesc& d, std::unique_lock<std::mutex>& regions,
                 std::string* why);

  Proxy* proxy_;
  Transport* t_;
  ProxyConfig cfg_;
  uint32_t index_;
  std::thread th_;
  std::atomic<bool> stop_{false};
  std::atomic<ProxyChannel*> channels_[Proxy::kMaxChannels] = {};
  std::atomic<size_t> nchannels_{0};
  uint64_t inflight_ = 0;  // operations of all its channels the transport has (this thread only)
  std::mutex add_mu_;
};

}  // namespace kinet::proxy_detail
