// kinet — the proxy backend's host side (include/kinet/proxy.hpp): channels,
// regions, thread start and teardown. The proxy thread's loop is in
// proxy_thread.cpp.
#include "kinet/proxy.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/cuda_shim.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "proxy/proxy_thread.hpp"

namespace kinet {
using proxy_detail::ChannelState;
using proxy_detail::Thread;

namespace {
std::vector<int> parse_cpus(const std::string& s, const char* what) {
  std::vector<int> out;
  size_t i = 0;
  for (;;) {  // every token, the empty ones of "1,", ",1" and "1,,2" too
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string tok = s.substr(i, j - i);
    if (tok.empty() || tok.size() > 6 || tok.find_first_not_of("0123456789") != std::string::npos)
      throw Error(ErrorCode::InvalidArgument,
                  std::string("proxy: ") + what + " '" + s + "' is not a comma-separated list of CPU numbers");
    out.push_back(std::atoi(tok.c_str()));
    if (j == s.size()) break;
    i = j + 1;
  }
  return out;
}
}  // namespace

// ---- regions ------------------------------------------------------------------
ProxyRegion::~ProxyRegion() {
  if (proxy_) proxy_->release_region(id_);
  region_.reset();
}

std::unique_ptr<ProxyRegion> Proxy::register_memory(void* addr, size_t bytes, uint32_t access, MemoryKind kind,
                                                    size_t transport) {
  if (transport >= transports_.size())
    throw Error(ErrorCode::InvalidArgument, "proxy: register_memory: transport " + std::to_string(transport) +
                                                " does not exist (the proxy has " +
                                                std::to_string(transports_.size()) + ")");
  std::unique_ptr<ProxyRegion> r(new ProxyRegion());
  r->region_ = transports_[transport]->register_memory(addr, bytes, access, kind);
  std::lock_guard<std::mutex> g(regions_mu_);
  if (next_region_ == 0)
    throw Error(ErrorCode::ResourceExhausted, "proxy: register_memory: 2^32 - 1 lkeys were handed out");
  r->id_ = next_region_++;
  r->proxy_ = this;
  regions_[r->id_] = RegionEntry{reinterpret_cast<uint64_t>(addr), bytes, transport, access};
  return r;
}

bool Proxy::lookup(uint32_t lkey, RegionEntry* out) const {
  auto it = regions_.find(lkey);  // caller holds regions_mu_
  if (it == regions_.end()) return false;
  *out = it->second;
  return true;
}

void Proxy::release_region(uint32_t id) {
  std::lock_guard<std::mutex> g(regions_mu_);
  regions_.erase(id);
}

// ---- channels -----------------------------------------------------------------
ProxyChannel::~ProxyChannel() {
  if (!st_) return;
  cuda::free_pinned(st_->ring);
  cuda::free_pinned(st_->shared);
  if (posters_ == Posters::Gpu) cuda::free_device(st_->post);
  else cuda::free_pinned(st_->post);
}

Rkey ProxyChannel::import_key(const RemoteKey& key) { return Rkey{transport_->import_key(peer_, key)}; }

std::string ProxyChannel::last_error() const {
  std::lock_guard<std::mutex> g(st_->err_mu);
  return st_->last_error;
}
Status ProxyChannel::status() const {
  return static_cast<Status>(load_acquire<Scope::System>(&st_->shared->error_status));
}
Status ProxyChannel::poster_error() const {
  if (posters_ == Posters::Gpu) return Status::Ok;
  return static_cast<Status>(load_relaxed<Scope::System>(&st_->post->local_error));
}
uint64_t ProxyChannel::completed() const {
  return load_acquire<Scope::System>(&st_->shared->completed) & dev::kProxyDoneIndex;
}

ProxyChannel& Proxy::channel(PeerId peer, const ProxyChannelConfig& cfg) {
  if (cfg.transport >= transports_.size())
    throw Error(ErrorCode::InvalidArgument, "proxy: channel to peer " + std::to_string(peer) + ": transport " +
                                                std::to_string(cfg.transport) + " does not exist (the proxy has " +
                                                std::to_string(transports_.size()) + ")");
  if (cfg.slots < 2 || cfg.slots > (1u << 20) || (cfg.slots & (cfg.slots - 1)))
    throw Error(ErrorCode::InvalidArgument, "proxy: channel to peer " + std::to_string(peer) + ": slots = " +
                                                std::to_string(cfg.slots) + " is not a power of two in 2..2^20");
  if (cfg.posters == Posters::Gpu && !cuda::available())
    throw Error(ErrorCode::NotSupported, "proxy: channel to peer " + std::to_string(peer) +
                                             ": Posters::Gpu needs a CUDA GPU, and none is available");
  if (cfg.posters == Posters::Gpu) cuda::warn_if_lazy_loading("proxy");  // kernels will wait on this thread
  std::lock_guard<std::mutex> g(channels_mu_);
  if (stopped_)
    throw Error(ErrorCode::InvalidArgument, "proxy: channel to peer " + std::to_string(peer) +
                                                ": the proxy was stopped (no thread would serve it)");
  if (channels_.size() >= kMaxChannels)
    throw Error(ErrorCode::ResourceExhausted,
                "proxy: channel to peer " + std::to_string(peer) + ": the proxy already has " +
                    std::to_string(kMaxChannels) + " channels");
  std::unique_ptr<ProxyChannel> c(new ProxyChannel());
  c->proxy_ = this;
  c->transport_ = transports_[cfg.transport];
  c->peer_ = peer;
  c->posters_ = cfg.posters;
  auto st = std::make_unique<ChannelState>();
  uint32_t log_n = 0;
  while ((1u << log_n) < cfg.slots) ++log_n;
  st->log_n = log_n;
  st->ring = static_cast<dev::ProxyDesc*>(cuda::alloc_pinned(sizeof(dev::ProxyDesc) << log_n));
  st->shared = static_cast<dev::ProxyShared*>(cuda::alloc_pinned(sizeof(dev::ProxyShared)));
  st->post = static_cast<dev::ProxyPostState*>(cfg.posters == Posters::Gpu
                                                   ? cuda::alloc_device(sizeof(dev::ProxyPostState))
                                                   : cuda::alloc_pinned(sizeof(dev::ProxyPostState)));
  st->status.assign(size_t{1} << log_n, proxy_detail::kFree);
  st->ops.assign(size_t{1} << log_n, 0);
  st->id = static_cast<uint32_t>(channels_.size());
  st->peer = peer;
  const uint64_t ms = cfg.timeout.count() > 0 ? static_cast<uint64_t>(cfg.timeout.count()) : default_timeout_ms();
  c->handle_.log_n = log_n;
  c->handle_.ring = st->ring;
  c->handle_.post = st->post;
  c->handle_.shared = st->shared;
  c->handle_.timeout_ns = ms * 1000000ull;
  c->handle_.channel = st->id;
  c->st_ = std::move(st);
  ProxyChannel& ref = *c;
  channels_.push_back(std::move(c));
  threads_[cfg.transport]->add(&ref);  // the thread starts serving it
  return ref;
}

// ---- threads ------------------------------------------------------------------
Proxy::Proxy(Transport& t, const ProxyConfig& cfg) : Proxy(std::vector<Transport*>{&t}, cfg) {}

Proxy::Proxy(const std::vector<Transport*>& transports, const ProxyConfig& cfg) : transports_(transports), cfg_(cfg) {
  if (transports_.empty()) throw Error(ErrorCode::InvalidArgument, "proxy: no transport given");
  for (size_t i = 0; i < transports_.size(); ++i)
    if (!transports_[i]) throw Error(ErrorCode::InvalidArgument, "proxy: transport " + std::to_string(i) + " is null");
  if (cfg_.batch == 0 || cfg_.batch > 65536)
    throw Error(ErrorCode::InvalidArgument,
                "proxy: batch = " + std::to_string(cfg_.batch) + " is outside 1..65536 descriptors per pass");
  std::vector<int> cpus;
  if (!cfg_.cpus.empty()) cpus = parse_cpus(cfg_.cpus, "ProxyConfig::cpus");
  else if (const char* e = std::getenv("KINET_PROXY_CPUS"); e && *e) cpus = parse_cpus(e, "KINET_PROXY_CPUS");
  if (cfg_.drain_timeout.count() <= 0) cfg_.drain_timeout = std::chrono::milliseconds(default_timeout_ms());
  // now() + milliseconds::max() would overflow to a deadline in the past.
  cfg_.drain_timeout = std::min(cfg_.drain_timeout, std::chrono::milliseconds(env::kMaxTimeoutMs));
  for (size_t i = 0; i < transports_.size(); ++i)
    threads_.push_back(std::make_unique<Thread>(this, transports_[i], cfg_, static_cast<uint32_t>(i)));
  for (size_t i = 0; i < threads_.size(); ++i) {
    threads_[i]->start();
    if (i < cpus.size()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      if (cpus[i] >= CPU_SETSIZE) {
        for (auto& th : threads_) th->stop_and_join();
        throw Error(ErrorCode::InvalidArgument, "proxy: CPU " + std::to_string(cpus[i]) + " is out of range");
      }
      CPU_SET(cpus[i], &set);
      const int rc = pthread_setaffinity_np(threads_[i]->native(), sizeof(set), &set);
      if (rc != 0) {
        for (auto& th : threads_) th->stop_and_join();
        throw Error(ErrorCode::System, "proxy: pinning thread " + std::to_string(i) + " to CPU " +
                                           std::to_string(cpus[i]) + ": " + std::strerror(rc));
      }
    }
  }
}

void Proxy::stop() {
  {
    std::lock_guard<std::mutex> g(channels_mu_);
    stopped_ = true;
  }
  for (auto& th : threads_) th->request_stop();
  for (auto& th : threads_) th->stop_and_join();
}

Proxy::~Proxy() {
  stop();
  threads_.clear();
  channels_.clear();
}

}  // namespace kinet
