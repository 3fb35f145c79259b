#include "transports/loop_channel.hpp"

#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "kinet/kinet.hpp"

namespace kinet::transport {
namespace {
constexpr uint32_t kLoopMagic = 0x314c4e4b;  // "KNL1"

struct Inbox {
  std::mutex mu;
  bool alive = true;
  size_t bytes = 0;
  struct Msg {
    uint64_t from;
    std::vector<uint8_t> data;
  };
  std::vector<Msg> q;
  std::atomic<size_t> queued{0};  // q.size(), read without the lock by the receiver
  std::vector<std::vector<uint8_t>> spare;  // buffers of delivered messages, for the next sends
};

// Bumped when any loop channel closes: progress() looks at its peers'
// liveness only then, not on every call.
std::atomic<uint64_t> g_closes{0};

struct Table {
  std::mutex mu;
  std::unordered_map<uint64_t, std::shared_ptr<Inbox>> live;
  uint64_t next = 1;
};
Table& table() {
  static Table* t = new Table;  // never destroyed: channels may outlive static destruction order
  return *t;
}

class LoopChannel final : public Channel {
 public:
  LoopChannel() : inbox_(std::make_shared<Inbox>()) {
    Table& t = table();
    std::lock_guard lk(t.mu);
    id_ = t.next++;
    t.live.emplace(id_, inbox_);
  }
  ~LoopChannel() override {
    {
      Table& t = table();
      std::lock_guard lk(t.mu);
      t.live.erase(id_);
    }
    {
      std::lock_guard lk(inbox_->mu);
      inbox_->alive = false;
      inbox_->q.clear();
      inbox_->queued.store(0, std::memory_order_relaxed);
    }
    g_closes.fetch_add(1, std::memory_order_release);
  }
  const char* provider() const override { return "loop"; }
  std::string describe() const override { return "loop channel " + std::to_string(id_) + " (this process)"; }
  bool ordered() const override { return true; }
  size_t max_message() const override { return kLoopMaxMessage; }
  std::vector<uint8_t> address() const override {
    std::vector<uint8_t> a(12);
    std::memcpy(a.data(), &kLoopMagic, 4);
    std::memcpy(a.data() + 4, &id_, 8);
    return a;
  }
  uint32_t add_peer(const std::vector<uint8_t>& address, const std::string& name) override {
    uint32_t magic = 0;
    uint64_t id = 0;
    if (address.size() != 12 || (std::memcpy(&magic, address.data(), 4), magic != kLoopMagic))
      throw Error(ErrorCode::InvalidArgument, "loop channel: address of " + name + " is not a loop address (" +
                                                  std::to_string(address.size()) + " bytes)");
    std::memcpy(&id, address.data() + 4, 8);
    std::shared_ptr<Inbox> in;
    {
      Table& t = table();
      std::lock_guard lk(t.mu);
      auto it = t.live.find(id);
      if (it == t.live.end())
        throw Error(ErrorCode::System, "loop channel: " + name + " unreachable: loop channel " +
                                           std::to_string(id) + " does not exist (closed?)");
      in = it->second;
    }
    std::lock_guard lk(mu_);
    peers_.push_back(Peer{id, in, name, false});
    by_id_.emplace(id, static_cast<uint32_t>(peers_.size() - 1));
    seen_closes_.store(UINT64_MAX, std::memory_order_release);  // look at the new peer on the next progress()
    return static_cast<uint32_t>(peers_.size() - 1);
  }
  // send() and progress() run on the transport's polling thread (one at a
  // time, as Channel says); add_peer() may run beside them, under mu_.
  bool send(uint32_t peer, const iovec* iov, int n, uint64_t token) override {
    if (peer >= out_.size() || !out_[peer]) {
      // First send to this peer: take its inbox once (a strong reference; a
      // closed peer's inbox says alive = false).
      std::lock_guard lk(mu_);
      if (peer >= peers_.size()) return false;
      if (out_.size() <= peer) out_.resize(peer + 1);
      out_[peer] = peers_[peer].inbox.lock();
      if (!out_[peer]) {
        sent_.emplace_back(token, false);
        return true;
      }
    }
    Inbox& in = *out_[peer];
    size_t total = 0;
    for (int i = 0; i < n; ++i) total += iov[i].iov_len;
    bool ok = false;
    {
      std::lock_guard ilk(in.mu);
      if (in.alive) {
        if (in.bytes + total > kLoopInboxBytes && !in.q.empty()) return false;
        std::vector<uint8_t> buf;
        if (!in.spare.empty()) {
          buf = std::move(in.spare.back());
          in.spare.pop_back();
        }
        buf.resize(total);
        size_t off = 0;
        for (int i = 0; i < n; ++i) {
          if (iov[i].iov_len) std::memcpy(buf.data() + off, iov[i].iov_base, iov[i].iov_len);
          off += iov[i].iov_len;
        }
        in.bytes += total;
        in.q.push_back(Inbox::Msg{id_, std::move(buf)});
        in.queued.store(in.q.size(), std::memory_order_release);
        ok = true;
      }
    }
    sent_.emplace_back(token, ok);
    return true;
  }
  size_t progress(ChannelEvents& ev) override {
    size_t events = 0;
    sent_work_.clear();
    sent_work_.swap(sent_);
    for (auto& [tok, ok] : sent_work_) ev.on_sent(tok, ok), ++events;
    // An empty inbox costs no lock. The buffers of the messages delivered
    // last time go back to it for the next sender, under the same lock.
    if (inbox_->queued.load(std::memory_order_acquire) != 0) {
      std::lock_guard lk(inbox_->mu);
      for (auto& m : msgs_)
        if (inbox_->spare.size() < kSpareBuffers && m.data.capacity() <= kSpareBufferBytes)
          inbox_->spare.push_back(std::move(m.data));
      msgs_.clear();
      msgs_.swap(inbox_->q);
      inbox_->bytes = 0;
      inbox_->queued.store(0, std::memory_order_relaxed);
    } else {
      msgs_.clear();
    }
    for (Inbox::Msg& m : msgs_) {
      const uint32_t p = sender(m.from);
      if (p == UINT32_MAX)
        ev.on_stranger("loop channel " + std::to_string(m.from), m.data.data(), m.data.size());
      else
        ev.on_message(p, m.data.data(), m.data.size());
      ++events;
    }
    // Liveness: a peer whose channel closed is reported once (looked at only
    // when some loop channel closed or a peer was added since last time).
    const uint64_t closes = g_closes.load(std::memory_order_acquire);
    if (closes == seen_closes_.load(std::memory_order_acquire)) return events;
    std::vector<std::pair<uint32_t, std::string>> lost;
    {
      std::lock_guard lk(mu_);
      seen_closes_.store(closes, std::memory_order_relaxed);
      for (uint32_t i = 0; i < peers_.size(); ++i) {
        Peer& p = peers_[i];
        if (p.lost) continue;
        auto in = p.inbox.lock();
        bool alive = false;
        if (in) {
          std::lock_guard ilk(in->mu);
          alive = in->alive;
        }
        if (!alive) {
          p.lost = true;
          lost.emplace_back(i, "loop channel " + std::to_string(p.id) + " (" + p.name + ") closed");
        }
      }
    }
    for (auto& [p, why] : lost) ev.on_peer_lost(p, why), ++events;
    return events;
  }

 private:
  struct Peer {
    uint64_t id;
    std::weak_ptr<Inbox> inbox;
    std::string name;
    bool lost;
  };
  static constexpr size_t kSpareBuffers = 256, kSpareBufferBytes = 64 * 1024;
  uint64_t id_ = 0;
  std::shared_ptr<Inbox> inbox_;
  std::mutex mu_;  // peers_, by_id_ (add_peer may run concurrently with progress)
  std::deque<Peer> peers_;
  std::unordered_map<uint64_t, uint32_t> by_id_;
  std::atomic<uint64_t> seen_closes_{UINT64_MAX};  // g_closes when the peers were last looked at
  // Polling thread only (send / progress):
  std::vector<std::pair<uint64_t, bool>> sent_, sent_work_;  // (token, delivered) not yet reported
  std::vector<Inbox::Msg> msgs_;                           // delivered by the last progress()
  std::vector<std::shared_ptr<Inbox>> out_;                // peers' inboxes, by peer index
  uint64_t last_from_ = 0;                                 // sender() cache: channel id ...
  uint32_t last_peer_ = UINT32_MAX;                        // ... and its peer index

  // The peer index of the channel with id `from` (UINT32_MAX: a stranger).
  uint32_t sender(uint64_t from) {
    if (from == last_from_ && last_peer_ != UINT32_MAX) return last_peer_;
    std::lock_guard lk(mu_);
    auto it = by_id_.find(from);
    if (it == by_id_.end()) return UINT32_MAX;
    last_from_ = from;
    last_peer_ = it->second;
    return last_peer_;
  }
};
}  // namespace

std::unique_ptr<Channel> make_loop_channel() { return std::make_unique<LoopChannel>(); }

}  // namespace kinet::transport
