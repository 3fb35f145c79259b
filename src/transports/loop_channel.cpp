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
  std::deque<Msg> q;
};

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
    std::lock_guard lk(inbox_->mu);
    inbox_->alive = false;
    inbox_->q.clear();
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
    return static_cast<uint32_t>(peers_.size() - 1);
  }
  bool send(uint32_t peer, const iovec* iov, int n, uint64_t token) override {
    std::shared_ptr<Inbox> in;
    {
      std::lock_guard lk(mu_);
      if (peer >= peers_.size()) return false;
      in = peers_[peer].inbox.lock();
    }
    size_t total = 0;
    for (int i = 0; i < n; ++i) total += iov[i].iov_len;
    bool ok = false;
    if (in) {
      std::lock_guard lk(in->mu);
      if (in->alive) {
        if (in->bytes + total > kLoopInboxBytes && !in->q.empty()) return false;
        Inbox::Msg m{id_, std::vector<uint8_t>(total)};
        size_t off = 0;
        for (int i = 0; i < n; ++i) {
          if (iov[i].iov_len) std::memcpy(m.data.data() + off, iov[i].iov_base, iov[i].iov_len);
          off += iov[i].iov_len;
        }
        in->bytes += total;
        in->q.push_back(std::move(m));
        ok = true;
      }
    }
    std::lock_guard lk(mu_);
    sent_.push_back({token, ok});
    return true;
  }
  size_t progress(ChannelEvents& ev) override {
    size_t events = 0;
    std::deque<std::pair<uint64_t, bool>> sent;
    std::deque<Inbox::Msg> msgs;
    {
      std::lock_guard lk(mu_);
      sent.swap(sent_);
    }
    {
      std::lock_guard lk(inbox_->mu);
      msgs.swap(inbox_->q);
      inbox_->bytes = 0;
    }
    for (auto& [tok, ok] : sent) ev.on_sent(tok, ok), ++events;
    for (auto& m : msgs) {
      uint32_t p = UINT32_MAX;
      {
        std::lock_guard lk(mu_);
        auto it = by_id_.find(m.from);
        if (it != by_id_.end()) p = it->second;
      }
      if (p == UINT32_MAX)
        ev.on_stranger("loop channel " + std::to_string(m.from), m.data.data(), m.data.size());
      else
        ev.on_message(p, m.data.data(), m.data.size());
      ++events;
    }
    // Liveness: a peer whose channel closed is reported once.
    std::vector<std::pair<uint32_t, std::string>> lost;
    {
      std::lock_guard lk(mu_);
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
  uint64_t id_ = 0;
  std::shared_ptr<Inbox> inbox_;
  std::mutex mu_;  // peers_, by_id_, sent_ (add_peer may run concurrently with progress)
  std::deque<Peer> peers_;
  std::unordered_map<uint64_t, uint32_t> by_id_;
  std::deque<std::pair<uint64_t, bool>> sent_;
};
}  // namespace

std::unique_ptr<Channel> make_loop_channel() { return std::make_unique<LoopChannel>(); }

}  // namespace kinet::transport
