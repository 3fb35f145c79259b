// The "tcp" and "shm" channels: kinet's fabric links (src/fabric) carrying the
// engine's messages as frames of type Transport.
//
// Each side sends on links it opened (add_peer connects, then sends a hello
// naming its own address) and receives on links it accepted; a link accepted
// is matched to a peer by the address its hello claims. One thread per link
// (links block, progress() must not): a sender draining a queue of copied
// frames, a receiver filling the shared event queue (bounded: a receiver
// whose engine does not poll stops reading, so TCP / the shm ring push back).
// EOF, reset or a send that can't finish within the timeout is on_peer_lost.
#include "transports/link_channel.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "bootstrap/socket.hpp"
#include "core/log.hpp"
#include "core/thread_name.hpp"
#include "fabric/endpoint.hpp"
#include "fabric/shm_link.hpp"
#include "fabric/tcp_link.hpp"
#include "fabric/wire.hpp"
#include "kinet/kinet.hpp"

namespace kinet::transport {
namespace {
using fabric::Clock;
constexpr uint32_t kHelloMagic = 0x484c4e4b;  // "KNLH"
constexpr size_t kMaxQueued = size_t{64} << 20;  // bytes queued per sender / in the event queue
constexpr size_t kMaxAddress = 512;
constexpr size_t kMaxInbound = 1024;  // links accepted and alive at once (a thread each)

// A whole link frame around an engine message.
std::vector<uint8_t> frame(const iovec* iov, int n) {
  size_t body = 0;
  for (int i = 0; i < n; ++i) body += iov[i].iov_len;
  std::vector<uint8_t> f(fabric::kHeaderBytes + body, 0);
  const uint32_t magic = fabric::kMagic, len = static_cast<uint32_t>(body);
  std::memcpy(f.data(), &magic, 4);
  f[4] = fabric::kVersion;
  f[5] = static_cast<uint8_t>(fabric::FrameType::Transport);
  std::memcpy(f.data() + 8, &len, 4);
  size_t off = fabric::kHeaderBytes;
  for (int i = 0; i < n; ++i) {
    if (iov[i].iov_len) std::memcpy(f.data() + off, iov[i].iov_base, iov[i].iov_len);
    off += iov[i].iov_len;
  }
  return f;
}

// A link's error without its own "peer lost: " (the engine adds one):
// "tcp 192.0.2.2:41234: the peer closed the connection".
std::string reason(std::string w) {
  for (const char* lead : {": peer lost: ", " peer lost: "})
    if (auto at = w.find(lead); at != std::string::npos) return w.replace(at, std::strlen(lead), ": ");
  return w;
}

class LinkChannel final : public Channel {
 public:
  LinkChannel(bool shm, const TransportOptions& opt, uint64_t node)
      : shm_(shm), node_(node), timeout_(opt.timeout.count() > 0 ? opt.timeout : std::chrono::milliseconds(10000)) {
    if (shm_) {
      char n[32];
      std::snprintf(n, sizeof n, "knt-%016llx", static_cast<unsigned long long>(node));
      shm_listener_ = std::make_unique<fabric::ShmListener>(n);
      address_ = fabric::shm_endpoint(n, fabric::this_host());
      listen_fd_ = shm_listener_->fd();
    } else {
      const bs::Interface itf = bs::pick_interface();
      bs::SockAddr bound;
      tcp_listener_ = bs::listen_on(itf.addr, 0, &bound);
      address_ = fabric::tcp_endpoint(bound);
      listen_fd_ = tcp_listener_.get();
      itf_ = itf.name;
    }
    if (::pipe2(stop_pipe_, O_CLOEXEC) != 0)
      throw Error(ErrorCode::System, std::string("transport: pipe: ") + std::strerror(errno));
    listener_ = named_thread("kinet-chan-lsn", [this] { listen_loop(); });
  }

  ~LinkChannel() override {
    stop_ = true;
    (void)!::write(stop_pipe_[1], "x", 1);
    if (listener_.joinable()) listener_.join();
    {
      std::lock_guard lk(mu_);
      for (auto& o : outs_) {
        std::lock_guard ol(o->mu);
        o->stop = true;
        o->cv.notify_all();
        if (o->link) o->link->close();
      }
      for (auto& in : ins_) in->link->close();
    }
    {
      std::lock_guard el(ev_mu_);  // a receiver waiting for room sees stop_
    }
    ev_cv_.notify_all();
    for (auto& o : outs_)
      if (o->th.joinable()) o->th.join();
    for (auto& in : ins_)
      if (in->th.joinable()) in->th.join();
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
  }

  const char* provider() const override { return shm_ ? "shm" : "tcp"; }
  std::string describe() const override {
    return std::string(shm_ ? "shm" : "tcp") + " links, listening at " + address_ +
           (itf_.empty() ? "" : " (interface " + itf_ + ")");
  }
  bool ordered() const override { return true; }
  size_t max_message() const override { return fabric::kMaxChunk; }
  std::vector<uint8_t> address() const override { return {address_.begin(), address_.end()}; }

  uint32_t add_peer(const std::vector<uint8_t>& address, const std::string& name) override {
    const std::string a(address.begin(), address.end());
    const auto deadline = Clock::now() + timeout_;
    std::unique_ptr<fabric::Link> link;
    if (shm_) {
      const fabric::Endpoint e = fabric::parse_endpoint(a);  // InvalidArgument
      if (e.shm_name.empty() || !e.tcp.empty())
        throw Error(ErrorCode::InvalidArgument, "transport shm: address of " + name + " is not one shm endpoint");
      if (!(e.shm_host == fabric::this_host()))
        throw Error(ErrorCode::System, "transport shm: " + name + " unreachable: it is on " + e.shm_host.str() +
                                           ", this process on " + fabric::this_host().str());
      link = fabric::shm_connect(e.shm_name, deadline);
    } else {
      if (a.rfind("tcp ", 0) != 0 || a.size() > kMaxAddress)
        throw Error(ErrorCode::InvalidArgument, "transport tcp: address of " + name + " is not \"tcp ADDRESS:PORT\"");
      fabric::parse_tcp_endpoint(a);  // InvalidArgument naming what is wrong
      link = fabric::tcp_connect(a, deadline);
    }
    // Hello: who we are, so the peer can tell our link from a stranger's.
    std::vector<uint8_t> body(12 + address_.size());
    std::memcpy(body.data(), &kHelloMagic, 4);
    std::memcpy(body.data() + 4, &node_, 8);
    std::memcpy(body.data() + 12, address_.data(), address_.size());
    iovec iov{body.data(), body.size()};
    const std::vector<uint8_t> hello = frame(&iov, 1);
    try {
      link->send(hello.data(), hello.size(), deadline);
    } catch (const Error& e) {
      throw Error(ErrorCode::System, "transport " + std::string(provider()) + ": " + name + " unreachable: " +
                                         e.what());
    }
    std::lock_guard lk(mu_);
    auto o = std::make_unique<Out>();
    o->link = std::move(link);
    o->name = name;
    const uint32_t peer = static_cast<uint32_t>(outs_.size());
    o->peer = peer;
    Out* raw = o.get();
    outs_.push_back(std::move(o));
    by_address_[a] = peer;
    raw->th = named_thread("kinet-chan-tx", [this, raw] { send_loop(*raw); });
    return peer;
  }

  bool send(uint32_t peer, const iovec* iov, int n, uint64_t token) override {
    Out* o;
    {
      std::lock_guard lk(mu_);
      if (peer >= outs_.size()) return false;
      o = outs_[peer].get();
    }
    std::vector<uint8_t> f = frame(iov, n);
    bool delivered = true;
    {
      std::lock_guard ol(o->mu);
      if (o->failed) {
        delivered = false;
      } else {
        if (o->bytes + f.size() > kMaxQueued && !o->q.empty()) return false;
        o->bytes += f.size();
        o->q.push_back(std::move(f));
        o->cv.notify_one();
      }
    }
    std::lock_guard el(ev_mu_);
    sent_.push_back({token, delivered});  // the frame is a copy: the buffers are free now
    return true;
  }

  size_t progress(ChannelEvents& ev) override {
    std::deque<Event> evs;
    std::deque<std::pair<uint64_t, bool>> sent;
    {
      std::lock_guard el(ev_mu_);
      evs.swap(events_);
      sent.swap(sent_);
      ev_bytes_ = 0;
    }
    if (!evs.empty()) ev_cv_.notify_all();
    size_t n = 0;
    for (auto& [tok, ok] : sent) ev.on_sent(tok, ok), ++n;
    for (Event& e : evs) {
      ++n;
      if (e.out_peer >= 0) {
        lost(ev, static_cast<uint32_t>(e.out_peer), e.why);
        continue;
      }
      const int32_t peer = match(*e.in);  // e.in keeps the link's record alive
      if (e.lost) {
        if (peer >= 0) lost(ev, static_cast<uint32_t>(peer), e.why);
      } else if (peer >= 0) {
        ev.on_message(static_cast<uint32_t>(peer), e.data.data(), e.data.size());
      } else {
        ev.on_stranger(e.in->who, e.data.data(), e.data.size());
      }
    }
    return n;
  }

 private:
  struct Out {
    std::unique_ptr<fabric::Link> link;
    std::string name;
    uint32_t peer = 0;
    std::thread th;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::vector<uint8_t>> q;
    size_t bytes = 0;
    bool stop = false, failed = false;
  };
  struct In {
    std::unique_ptr<fabric::Link> link;
    std::string who;      // the link's peer name, and the address its hello claims
    std::string claimed;  // set by the receiver before its first message event
    int32_t peer = -1;    // progress()'s cache of match()
    std::thread th;
    std::atomic<bool> done{false};  // the receiver returned: the listener joins and drops it
  };
  struct Event {
    std::shared_ptr<In> in;
    int32_t out_peer = -1;  // a sender failed: that peer is lost
    bool lost = false;
    std::string why;
    std::vector<uint8_t> data;
  };

  int32_t match(In& in) {
    if (in.peer >= 0) return in.peer;
    std::lock_guard lk(mu_);
    auto it = by_address_.find(in.claimed);
    if (it != by_address_.end()) in.peer = static_cast<int32_t>(it->second);
    return in.peer;
  }

  void lost(ChannelEvents& ev, uint32_t peer, const std::string& why) {
    if (reported_.size() <= peer) reported_.resize(peer + 1, false);
    if (reported_[peer]) return;
    reported_[peer] = true;
    {
      std::lock_guard lk(mu_);
      Out& o = *outs_[peer];
      std::lock_guard ol(o.mu);
      o.failed = true;
      o.q.clear();
      o.bytes = 0;
      o.link->close();
      o.cv.notify_all();
    }
    ev.on_peer_lost(peer, why);
  }

  void push(Event e) {
    std::unique_lock el(ev_mu_);
    // Back-pressure: don't read further ahead of the engine than kMaxQueued.
    ev_cv_.wait(el, [&] { return stop_.load() || ev_bytes_ + e.data.size() <= kMaxQueued || events_.empty(); });
    ev_bytes_ += e.data.size();
    events_.push_back(std::move(e));
  }

  void send_loop(Out& o) {
    constexpr size_t kBatchBytes = 256 * 1024;
    for (;;) {
      std::vector<uint8_t> f;
      {
        std::unique_lock ol(o.mu);
        o.cv.wait(ol, [&] { return o.stop || o.failed || !o.q.empty(); });
        if (o.stop || o.failed) return;
        f = std::move(o.q.front());
        o.q.pop_front();
        o.bytes -= f.size();
        // Small frames queued behind it go in the same send (the links take
        // back-to-back frames as one byte run): one syscall for many messages.
        while (!o.q.empty() && f.size() + o.q.front().size() <= kBatchBytes) {
          f.insert(f.end(), o.q.front().begin(), o.q.front().end());
          o.bytes -= o.q.front().size();
          o.q.pop_front();
        }
      }
      try {
        o.link->send(f.data(), f.size(), Clock::now() + timeout_);
      } catch (const std::exception& e) {
        if (stop_) return;
        {
          std::lock_guard ol(o.mu);
          o.failed = true;
          o.q.clear();
        }
        Event ev;
        ev.out_peer = static_cast<int32_t>(o.peer);
        ev.why = reason(e.what());
        push(std::move(ev));
        return;
      }
    }
  }

  void recv_loop(const std::shared_ptr<In>& self) {
    In& in = *self;
    struct Done {
      In& in;
      ~Done() { in.done = true; }
    } done{in};
    std::vector<uint8_t> buf;
    auto fail = [&](const std::string& why, bool report) {
      if (stop_) return;
      if (report) {
        Event ev;
        ev.in = self;
        ev.lost = true;
        ev.why = why;
        push(std::move(ev));
      } else {
        KINET_LOG(Warn, "transport %s: dropped the link from %s: %s", provider(), in.who.c_str(), why.c_str());
      }
      in.link->close();
    };
    try {
      // The hello first, within the timeout.
      if (!in.link->recv(buf, Clock::now() + timeout_)) return fail("no hello within the timeout", false);
      uint32_t magic = 0;
      if (buf.size() < fabric::kHeaderBytes + 12 || buf[5] != static_cast<uint8_t>(fabric::FrameType::Transport) ||
          (std::memcpy(&magic, buf.data() + fabric::kHeaderBytes, 4), magic != kHelloMagic) ||
          buf.size() > fabric::kHeaderBytes + 12 + kMaxAddress)
        return fail("malformed hello", false);
      in.claimed.assign(buf.begin() + fabric::kHeaderBytes + 12, buf.end());
      in.who = in.link->peer_name() + " (claims " + fabric::printable(in.claimed, 120) + ")";
      while (!stop_) {
        if (!in.link->recv(buf, Clock::now() + std::chrono::milliseconds(200))) continue;
        if (buf[5] != static_cast<uint8_t>(fabric::FrameType::Transport)) return fail("a frame of type " +
                                                                                          std::to_string(buf[5]), true);
        Event ev;
        ev.in = self;
        ev.data.assign(buf.begin() + fabric::kHeaderBytes, buf.end());
        push(std::move(ev));
      }
    } catch (const std::exception& e) {
      fail(reason(e.what()), true);
    }
  }

  void listen_loop() {
    while (!stop_) {
      pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
      const int n = ::poll(p, 2, 1000);
      if (n < 0 && errno != EINTR) {
        KINET_LOG(Error, "transport %s: poll on the listener failed: %s; no more peers accepted", provider(),
                  std::strerror(errno));
        return;
      }
      if (p[1].revents || stop_) return;
      reap();
      if (n <= 0 || !(p[0].revents & POLLIN)) continue;
      std::unique_ptr<fabric::Link> link;
      try {
        if (shm_) {
          link = shm_listener_->accept(Clock::now() + std::chrono::milliseconds(2000));
        } else {
          bs::SockAddr from;
          from.len = sizeof from.ss;
          const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from.ss), &from.len, SOCK_CLOEXEC);
          if (fd >= 0) link = std::make_unique<fabric::TcpLink>(bs::Fd(fd), fabric::tcp_endpoint(from));
        }
      } catch (const std::exception& e) {
        KINET_LOG(Warn, "transport %s: refused a connection: %s", provider(), e.what());
      }
      if (!link) continue;
      auto in = std::make_shared<In>();
      in->who = link->peer_name();
      in->link = std::move(link);
      std::lock_guard lk(mu_);
      if (stop_) return;
      if (ins_.size() >= kMaxInbound) {
        KINET_LOG(Warn, "transport %s: refused %s: already %zu inbound links", provider(), in->who.c_str(),
                  ins_.size());
        continue;  // closes it
      }
      ins_.push_back(in);
      in->th = named_thread("kinet-chan-rx", [this, in] { recv_loop(in); });
    }
  }

  // Joins and drops the receivers that returned (their links are closed).
  void reap() {
    std::list<std::shared_ptr<In>> dead;
    {
      std::lock_guard lk(mu_);
      for (auto it = ins_.begin(); it != ins_.end();)
        if ((*it)->done) dead.splice(dead.end(), ins_, it++);
        else ++it;
    }
    for (auto& in : dead) in->th.join();
  }

  const bool shm_;
  const uint64_t node_;
  const std::chrono::milliseconds timeout_;
  std::string address_, itf_;
  std::unique_ptr<fabric::ShmListener> shm_listener_;
  bs::Fd tcp_listener_;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::thread listener_;

  std::mutex mu_;  // outs_, ins_, by_address_
  std::vector<std::unique_ptr<Out>> outs_;
  std::list<std::shared_ptr<In>> ins_;
  std::unordered_map<std::string, uint32_t> by_address_;

  std::mutex ev_mu_;  // events_, sent_, ev_bytes_
  std::condition_variable ev_cv_;
  std::deque<Event> events_;
  std::deque<std::pair<uint64_t, bool>> sent_;
  size_t ev_bytes_ = 0;
  std::vector<bool> reported_;  // progress() thread only
};
}  // namespace

std::unique_ptr<Channel> make_tcp_channel(const TransportOptions& opt, uint64_t node) {
  return std::make_unique<LinkChannel>(false, opt, node);
}
std::unique_ptr<Channel> make_shm_channel(const TransportOptions& opt, uint64_t node) {
  return std::make_unique<LinkChannel>(true, opt, node);
}

}  // namespace kinet::transport
