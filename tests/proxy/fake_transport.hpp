// kinet proxy tests — a small in-process Transport standing in for the
// "loop" transport until it exists: every peer is this process; operations
// queue in posting order and execute in that order in poll(), after the
// target-side checks transport.hpp promises (key, bounds, access, atomic
// alignment). Modes simulate a peer that never answers and a lost peer.
#pragma once
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kinet/transport.hpp"

namespace kinet::test {

class FakeTransport : public Transport {
 public:
  enum class Mode { Normal, BlackHole, PeerLost };
  struct Logged {  // what the proxy handed over, in order
    char op;       // 'p' put, 'g' get, 'f' fetch_add, 'c' compare_swap, 's' signal, 'S' put_signal
    uint64_t raddr;
  };

  explicit FakeTransport(size_t capacity = 4096) : capacity_(capacity) {}
  const char* provider() const override { return "fake"; }
  std::string describe() const override { return "fake in-process transport (tests)"; }
  uint64_t node() const override { return 0xfa4e; }
  std::vector<uint8_t> address() const override { return {0xfa}; }
  PeerId connect(const std::vector<uint8_t>&, const std::string&) override { return peers_++; }

  std::unique_ptr<TransportRegion> register_memory(void* addr, size_t bytes, uint32_t access,
                                                   MemoryKind kind) override {
    std::lock_guard<std::mutex> g(mu_);
    regions_.push_back({reinterpret_cast<uint64_t>(addr), bytes, access, true});
    return std::make_unique<Region>(this, static_cast<uint32_t>(regions_.size() - 1), addr, bytes, access, kind);
  }
  uint32_t import_key(PeerId, const RemoteKey& key) override {
    std::lock_guard<std::mutex> g(mu_);
    imported_.push_back(key.rkey);
    return static_cast<uint32_t>(imported_.size() - 1);
  }

  Status put(PeerId p, const void* src, uint64_t n, uint32_t k, uint64_t ra, uint64_t c) override {
    return queue({'p', p, const_cast<void*>(src), n, k, ra, 0, 0, 0, 0, SignalOp::Add, c});
  }
  Status get(PeerId p, void* dst, uint64_t n, uint32_t k, uint64_t ra, uint64_t c) override {
    return queue({'g', p, dst, n, k, ra, 0, 0, 0, 0, SignalOp::Add, c});
  }
  Status fetch_add(PeerId p, uint64_t* r, uint32_t k, uint64_t ra, uint64_t add, uint64_t c) override {
    return queue({'f', p, r, 8, k, ra, add, 0, 0, 0, SignalOp::Add, c});
  }
  Status compare_swap(PeerId p, uint64_t* r, uint32_t k, uint64_t ra, uint64_t cmp, uint64_t swp,
                      uint64_t c) override {
    return queue({'c', p, r, 8, k, ra, cmp, swp, 0, 0, SignalOp::Add, c});
  }
  Status signal(PeerId p, uint32_t k, uint64_t ra, SignalOp op, uint64_t v, uint64_t c) override {
    return queue({'s', p, nullptr, 0, 0, 0, v, 0, k, ra, op, c});
  }
  Status put_signal(PeerId p, const void* src, uint64_t n, uint32_t k, uint64_t ra, uint32_t sk, uint64_t sra,
                    SignalOp op, uint64_t v, uint64_t c) override {
    return queue({'S', p, const_cast<void*>(src), n, k, ra, v, 0, sk, sra, op, c});
  }

  size_t poll(Completion* out, size_t max) override {
    std::lock_guard<std::mutex> g(mu_);
    if (on_poll_) on_poll_();
    ++polls_;
    if (mode_ == Mode::BlackHole) return 0;
    size_t n = 0;
    while (n < max && !q_.empty()) {
      Op o = q_.front();
      q_.pop_front();
      out[n++] = Completion{o.cookie, o.peer, mode_ == Mode::PeerLost ? Status::TransportRetryExceeded : run(o)};
    }
    return n;
  }
  size_t outstanding() const override {
    std::lock_guard<std::mutex> g(mu_);
    return q_.size();
  }
  std::string peer_error(PeerId) const override {
    std::lock_guard<std::mutex> g(mu_);
    return mode_ == Mode::PeerLost ? "peer lost: the fake peer was killed" : "";
  }

  void set_mode(Mode m) {
    std::lock_guard<std::mutex> g(mu_);
    mode_ = m;
  }
  std::vector<Logged> log() const {
    std::lock_guard<std::mutex> g(mu_);
    return log_;
  }
  size_t nospace() const {
    std::lock_guard<std::mutex> g(mu_);
    return nospace_;
  }
  uint64_t polls() const {
    std::lock_guard<std::mutex> g(mu_);
    return polls_;
  }
  // Called at the start of every poll(), on the polling thread, under the
  // transport's lock (it must not call the transport); what it uses must
  // outlive the proxy, or be unset first.
  void set_on_poll(std::function<void()> f) {
    std::lock_guard<std::mutex> g(mu_);
    on_poll_ = std::move(f);
  }

 private:
  struct Op {
    char op;
    PeerId peer;
    void* local;
    uint64_t n;
    uint32_t key;
    uint64_t raddr;
    uint64_t a, b;  // add / compare, swap; signal value in a
    uint32_t skey;
    uint64_t sraddr;
    SignalOp sop;
    uint64_t cookie;
  };
  struct Reg {
    uint64_t base, len;
    uint32_t access;
    bool live;
  };
  class Region : public TransportRegion {
   public:
    Region(FakeTransport* t, uint32_t key, void* a, size_t n, uint32_t acc, MemoryKind k)
        : t_(t), key_(key), a_(a), n_(n), acc_(acc), k_(k) {}
    ~Region() override {
      std::lock_guard<std::mutex> g(t_->mu_);
      t_->regions_[key_].live = false;
    }
    void* addr() const override { return a_; }
    size_t length() const override { return n_; }
    uint32_t access() const override { return acc_; }
    MemoryKind kind() const override { return k_; }
    RemoteKey remote_key() const override {
      RemoteKey k;
      k.provider = RemoteKey::kTransport;
      k.node = t_->node();
      k.addr = reinterpret_cast<uint64_t>(a_);
      k.length = n_;
      k.rkey = key_;
      k.access = acc_;
      return k;
    }

   private:
    FakeTransport* t_;
    uint32_t key_;
    void* a_;
    size_t n_;
    uint32_t acc_;
    MemoryKind k_;
  };

  Status queue(const Op& o) {
    std::lock_guard<std::mutex> g(mu_);
    if (o.peer >= peers_) return Status::InvalidArgument;
    if ((o.op != 's' && o.key >= imported_.size()) || ((o.op == 's' || o.op == 'S') && o.skey >= imported_.size()))
      return Status::InvalidArgument;
    if (q_.size() >= capacity_) {
      ++nospace_;
      return Status::NoSpace;
    }
    q_.push_back(o);
    log_.push_back({o.op, o.raddr});
    return Status::Ok;
  }
  // The target's check, then the operation (mu_ held).
  uint8_t* target(uint32_t key_id, uint64_t ra, uint64_t n, uint32_t need, Status* st) {
    const Reg& r = regions_.at(imported_.at(key_id));
    if (!r.live || !(r.access & need) || ra < r.base || n > r.len || ra - r.base > r.len - n) {
      *st = Status::RemoteAccess;
      return nullptr;
    }
    return reinterpret_cast<uint8_t*>(ra);
  }
  Status run(const Op& o) {
    Status st = Status::Ok;
    switch (o.op) {
      case 'p':
      case 'S':
        if (o.n) {
          uint8_t* t = target(o.key, o.raddr, o.n, kRemoteWrite, &st);
          if (!t) return st;
          std::memcpy(t, o.local, o.n);
        }
        if (o.op == 'S') return apply_signal(o);
        return st;
      case 'g': {
        uint8_t* t = target(o.key, o.raddr, o.n, kRemoteRead, &st);
        if (!t) return st;
        std::memcpy(o.local, t, o.n);
        return st;
      }
      case 'f':
      case 'c': {
        if (o.raddr % 8) return Status::RemoteInvalidRequest;
        uint8_t* t = target(o.key, o.raddr, 8, kRemoteAtomic, &st);
        if (!t) return st;
        uint64_t* w = reinterpret_cast<uint64_t*>(t);
        const uint64_t old = *w;
        if (o.op == 'f') *w = old + o.a;
        else if (old == o.a) *w = o.b;
        *static_cast<uint64_t*>(o.local) = old;
        return st;
      }
      case 's': return apply_signal(o);
    }
    return Status::RemoteInvalidRequest;
  }
  Status apply_signal(const Op& o) {
    if (o.sraddr % 8) return Status::RemoteInvalidRequest;
    Status st = Status::Ok;
    uint8_t* t = target(o.skey, o.sraddr, 8, kRemoteAtomic, &st);
    if (!t) return st;
    // Release: a waiter that acquires the signal sees the data before it.
    std::atomic_ref<uint64_t> w(*reinterpret_cast<uint64_t*>(t));
    if (o.sop == SignalOp::Add) w.fetch_add(o.a, std::memory_order_release);
    else w.store(o.a, std::memory_order_release);
    return st;
  }

  mutable std::mutex mu_;
  size_t capacity_;
  PeerId peers_ = 0;
  Mode mode_ = Mode::Normal;
  std::vector<Reg> regions_;
  std::vector<uint32_t> imported_;
  std::deque<Op> q_;
  std::vector<Logged> log_;
  size_t nospace_ = 0;
  uint64_t polls_ = 0;
  std::function<void()> on_poll_;
};

}  // namespace kinet::test
