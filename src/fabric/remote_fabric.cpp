#include "fabric/remote_fabric.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/env.hpp"
#include "core/log.hpp"
#include "core/thread_name.hpp"
#include "fabric/responder.hpp"
#include "fabric/shm_link.hpp"
#include "fabric/tcp_link.hpp"
#include "providers/emu/emu.hpp"
#include "providers/emu/prm.hpp"

namespace kinet::emu {
using fabric::Clock;
using namespace std::chrono_literals;

namespace {
uint64_t random64() {
  uint64_t v = 0;
  uint8_t* p = reinterpret_cast<uint8_t*>(&v);
  size_t got = 0;
  while (got < sizeof v) {
    const ssize_t k = getrandom(p + got, sizeof v - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw Error(ErrorCode::System, std::string("emu fabric: getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(k);
  }
  return v;
}

std::string process_name() {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  return std::string(host).substr(0, 100) + ":" + std::to_string(getpid());
}

void send_hello(fabric::Link& l, Clock::time_point d) {
  fabric::Hello h;
  h.process_id = process_id();
  h.max_frame = static_cast<uint32_t>(fabric::kMaxFrame);
  h.name = process_name();
  std::vector<uint8_t> buf;
  fabric::encode(h, buf);
  l.send(buf.data(), buf.size(), d);
}

fabric::Hello recv_hello(fabric::Link& l, Clock::time_point d, uint64_t timeout_ms) {
  std::vector<uint8_t> buf;
  if (!l.recv(buf, d))
    throw Error(ErrorCode::System, l.peer_name() + ": timeout after " + std::to_string(timeout_ms) +
                                       " ms waiting for the peer's Hello");
  fabric::Frame f;
  std::string why;
  if (!fabric::decode(buf.data(), buf.size(), &f, &why))
    throw Error(ErrorCode::InvalidArgument, l.peer_name() + ": malformed Hello: " + why);
  if (f.type != fabric::FrameType::Hello)
    throw Error(ErrorCode::InvalidArgument, l.peer_name() + ": the first frame is of type " +
                                                std::to_string(static_cast<int>(f.type)) + ", not a Hello");
  return f.hello;
}

// The reason in a Link's error, without the peer's name in front.
std::string reason(const std::string& peer, const std::string& what) {
  std::string w = what;
  if (w.rfind(peer, 0) == 0) w.erase(0, peer.size());
  for (const char* lead : {" peer lost: ", ": "})
    if (w.rfind(lead, 0) == 0) return w.substr(std::strlen(lead));
  return w;
}
}  // namespace

uint64_t process_id() {
  static const uint64_t id = random64();
  return id;
}

// ---- requester side ---------------------------------------------------------

RemotePeer::RemotePeer(std::unique_ptr<fabric::Link> link, std::string endpoint, uint64_t timeout_ms)
    : link_(std::move(link)), endpoint_(std::move(endpoint)), timeout_ms_(timeout_ms) {
  rx_ = named_thread("kinet-fab-rx", [this] { receive(); });
}

RemotePeer::~RemotePeer() {
  stop_.store(true, std::memory_order_release);
  link_->close();
  if (rx_.joinable()) rx_.join();
  in_place_total_.fetch_sub(static_cast<int64_t>(in_place_.size()), std::memory_order_acq_rel);  // never sent
}

std::atomic<int64_t> RemotePeer::in_place_total_{0};
// A batch's pieces: two per payload in place (the frames before it, then it),
// the frames after the last one and a payload that leaves at once.
static_assert(2 * (RemotePeer::kGatherBatchBytes / RemotePeer::kGatherBytes) + 2 <= fabric::TcpLink::kMaxPieces);

std::shared_ptr<Call> RemotePeer::start(fabric::Request rq, Payload life) {
  std::shared_ptr<Call> c;
  {
    std::lock_guard<std::mutex> g(spare_mu_);
    if (!spare_calls_.empty()) {
      c = std::move(spare_calls_.back());
      spare_calls_.pop_back();
    }
  }
  if (c) {
    Call& k = *c;  // as new (it keeps a frame buffer of at most kInlineData: recycle())
    k.done.store(false, std::memory_order_relaxed);
    k.lost = false;
    k.syndrome = 0;
    k.why.clear();
    k.old_value = 0;
    k.frame.clear();
    k.data = nullptr;
    k.len = 0;
  } else {
    c = std::make_shared<Call>();
  }
  std::lock_guard<std::mutex> s(send_mu_);
  // A large WRITE's payload goes from where the engine read it: one copy
  // fewer per byte than joining it to the header; it leaves with the
  // Requests queued before it (the engine reuses the payload's buffer).
  const bool gather = rq.kind == fabric::OpKind::Write && rq.len >= kGatherBytes;
  // One send carries at most kMaxFrame bytes (a shm link's limit): what is
  // queued leaves first, before this Call joins the queue (else it would
  // count as sent while it still waits in place).
  if (gather && !buf_.empty() &&
      buf_.size() + in_place_bytes_ + fabric::kHeaderBytes + fabric::kRequestFixed + rq.len > fabric::kMaxFrame)
    send_locked(nullptr, 0);
  if (lost_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(mu_);
    c->seq = 0;  // never sent: "left" for sent_through()
    complete_lost(*c, why_);
    return c;
  }
  rq.seq = ++seq_;
  c->seq = rq.seq;
  c->later = rq.flags & fabric::kAckLater;
  queued_.push_back(c);
  has_queued_.store(true, std::memory_order_release);
  if (gather) {
    fabric::encode_head(rq, buf_);
    if (life == Payload::UntilSent && link_->kernel_reads_body()) {
      // It waits for the batch: several payloads leave in one send(2).
      in_place_.push_back({buf_.size(), rq.payload, rq.len});
      in_place_bytes_ += rq.len;
      in_place_total_.fetch_add(1, std::memory_order_acq_rel);
      if (buf_.size() + in_place_bytes_ >= kGatherBatchBytes) send_locked(nullptr, 0);
      return c;
    }
    send_locked(rq.payload, rq.len);
    return c;
  }
  fabric::encode(rq, buf_);
  if (buf_.size() >= kSendBatchBytes) send_locked(nullptr, 0);
  return c;
}

void RemotePeer::flush() {
  std::lock_guard<std::mutex> s(send_mu_);
  if (!buf_.empty()) send_locked(nullptr, 0);
}

void RemotePeer::send_locked(const uint8_t* body, size_t n) {
  struct Done {  // whatever happens below, the batch is gone after it
    RemotePeer& p;
    ~Done() {
      p.buf_.clear();
      if (!p.in_place_.empty()) {
        in_place_total_.fetch_sub(static_cast<int64_t>(p.in_place_.size()), std::memory_order_acq_rel);
        p.in_place_.clear();
        p.in_place_bytes_ = 0;
      }
    }
  } done{*this};
  {
    // The queued Calls become pending before their Requests leave (an
    // answer can't overtake its Request), in one lock for the whole batch.
    std::lock_guard<std::mutex> g(mu_);
    sent_through_.store(seq_, std::memory_order_release);
    has_queued_.store(false, std::memory_order_release);
    if (lost_.load(std::memory_order_acquire)) {  // lost since they were queued
      for (auto& c : queued_) complete_lost(*c, why_);
      queued_.clear();
      return;
    }
    const auto now = Clock::now();
    for (auto& c : queued_) {
      c->sent = now;
      pending_.push_back(std::move(c));
    }
    queued_.clear();
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  try {
    if (in_place_.empty()) {
      link_->send_parts(buf_.data(), buf_.size(), body, n, deadline);
    } else {
      pieces_.clear();
      size_t at = 0;
      for (const InPlace& x : in_place_) {
        pieces_.push_back({buf_.data() + at, x.head_end - at});
        pieces_.push_back({x.body, x.len});
        at = x.head_end;
      }
      if (at < buf_.size()) pieces_.push_back({buf_.data() + at, buf_.size() - at});
      if (n) pieces_.push_back({body, n});
      link_->send_gather(pieces_, deadline);
    }
  } catch (const Error& e) {
    fail(reason(link_->peer_name(), e.what()));  // completes the queued Calls with the others
  }
}

void RemotePeer::fail(const std::string& why) {
  std::deque<std::shared_ptr<Call>> calls;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (lost_.load(std::memory_order_acquire)) return;
    why_ = why;
    lost_.store(true, std::memory_order_release);
    calls.swap(pending_);
  }
  link_->close();
  // Losing a peer with nothing pending is how a finished peer leaves: not a warning.
  if (!calls.empty() && !stop_.load(std::memory_order_acquire))
    KINET_LOG(Warn, "emu fabric: peer at %s lost: %s (%zu operations pending)", endpoint_.c_str(), why.c_str(),
              calls.size());
  else
    KINET_LOG(Info, "emu fabric: link to %s closed: %s", endpoint_.c_str(), why.c_str());
  for (auto& c : calls) complete_lost(*c, why);
}

void RemotePeer::complete_lost(Call& c, const std::string& why) {
  c.lost = true;
  c.syndrome = prm::kSynTransportRetry;
  c.why = why;
  c.done.store(true, std::memory_order_release);
}

void RemotePeer::recycle(std::shared_ptr<Call>&& c) {
  constexpr size_t kMaxSpareCalls = 4096;  // a window's worth
  if (!c) return;
  std::lock_guard<std::mutex> g(spare_mu_);
  if (c->frame.capacity() > kInlineData) {
    if (spare_.size() < kMaxSpareFrames) spare_.push_back(std::move(c->frame));
    else std::vector<uint8_t>().swap(c->frame);  // a spare Call keeps no frame (up to 1 MiB each)
  }
  // The receiver may still hold it for a moment after `done`: then it goes.
  if (c.use_count() == 1 && spare_calls_.size() < kMaxSpareCalls) spare_calls_.push_back(std::move(c));
  c.reset();
}

size_t RemotePeer::spare_frame_bytes() {
  std::lock_guard<std::mutex> g(spare_mu_);
  size_t n = 0;
  for (const auto& f : spare_) n += f.capacity();
  for (const auto& c : spare_calls_) n += c->frame.capacity();
  return n;
}

void RemotePeer::receive() {
  std::vector<uint8_t> buf;
  std::vector<std::shared_ptr<Call>> covered;
  const auto bound = std::chrono::milliseconds(timeout_ms_);
  while (!stop_.load(std::memory_order_acquire) && !lost()) {
    const auto now = Clock::now();
    auto deadline = now + 100ms;
    if (buf.capacity() == 0) {  // the last frame went to a Call
      std::lock_guard<std::mutex> g(spare_mu_);
      if (!spare_.empty()) {
        buf.swap(spare_.back());
        spare_.pop_back();
      }
    }
    // With a frame read ahead the answers flow: the bound is checked when
    // the link runs dry (one lock per frame fewer).
    if (!link_->buffered()) {
      std::unique_lock<std::mutex> g(mu_);
      if (!pending_.empty()) {
        // A held answer may come up to the ack delay late (both sides read
        // the same variable); a later Request's answer brings the held ones
        // along, so the oldest pending Call bounds them all.
        const Call& oldest = *pending_.front();
        const auto due = oldest.sent + bound +
                         (oldest.later ? RemoteFabric::ack_delay() : std::chrono::microseconds(0));
        if (due <= now) {
          g.unlock();
          fail("timeout after " + std::to_string(timeout_ms_) +
               " ms waiting for a response (KINET_EMU_PEER_TIMEOUT_MS; the peer stalls or the link is cut)");
          return;
        }
        deadline = std::min(deadline, due);
      }
    }
    try {
      if (!link_->recv(buf, deadline)) continue;
    } catch (const Error& e) {
      fail(reason(link_->peer_name(), e.what()));
      return;
    }
    fabric::Frame f;
    std::string why;
    if (!fabric::decode(buf.data(), buf.size(), &f, &why)) {
      fail("sent a malformed frame: " + why);
      return;
    }
    if (f.type != fabric::FrameType::Response) {
      fail("sent a frame of type " + std::to_string(static_cast<int>(f.type)) + " where a Response was expected");
      return;
    }
    // The Calls it answers: the `covers` before seq (held answers of
    // kAckLater WRITEs, all successes) and seq's own, the oldest pending.
    const fabric::Response& rs = f.response;
    const uint64_t first = rs.seq - rs.covers;  // decode(): covers < seq
    std::shared_ptr<Call> c;
    uint64_t oldest = 0, newest = 0, not_later = 0;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!pending_.empty()) {
        oldest = pending_.front()->seq;
        newest = pending_.back()->seq;
        if (oldest == first && newest >= rs.seq) {
          for (uint32_t i = 0; i < rs.covers && !not_later; ++i)
            if (!pending_[i]->later) not_later = pending_[i]->seq;
          if (!not_later) {
            for (uint32_t i = 0; i < rs.covers; ++i) {
              covered.push_back(std::move(pending_.front()));
              pending_.pop_front();
            }
            c = std::move(pending_.front());
            pending_.pop_front();
          }
        }
      }
    }
    if (!c) {
      const std::string what = rs.covers ? "requests " + std::to_string(first) + ".." + std::to_string(rs.seq)
                                         : "request " + std::to_string(rs.seq);
      fail("answered " + what +
           (not_later ? " at once, but request " + std::to_string(not_later) +
                            " among them was not a WRITE whose answer may wait (kAckLater)"
            : oldest && first > oldest && first <= newest
                ? " before request " + std::to_string(oldest) + " (answers come in the order asked)"
                : rs.covers ? ", which are not all pending" : ", which is not pending"));
      return;
    }
    for (auto& k : covered) k->done.store(true, std::memory_order_release);  // successes: nothing else to set
    covered.clear();
    c->syndrome = f.response.syndrome;
    c->why = f.response.why;
    c->old_value = f.response.old_value;
    c->len = f.response.len;
    if (c->len > kInlineData) {
      const size_t off = static_cast<size_t>(f.response.payload - buf.data());
      c->frame.swap(buf);  // the data stays where it is: no copy
      c->data = c->frame.data() + off;
    } else if (c->len) {
      // Small data is copied into the Call's own buffer (kept when it is
      // recycled): the receiver keeps its frame buffer, and neither side
      // takes the spares' lock for it.
      c->frame.assign(f.response.payload, f.response.payload + c->len);
      c->data = c->frame.data();
    }
    c->done.store(true, std::memory_order_release);
  }
}

// ---- responder side and the process's listener -------------------------------

struct RemoteFabric::Inbound {
  std::unique_ptr<fabric::Link> link;
  std::thread th;
  std::atomic<bool> finished{false};
};

std::chrono::microseconds RemoteFabric::ack_delay() {
  // At most 1 s: the requester's bound grows by this much at most.
  static const std::chrono::microseconds d{env::get_u64_at_most("KINET_EMU_ACK_DELAY_US", 200, 1000000)};
  return d;
}

uint64_t RemoteFabric::timeout_ms() {
  static const uint64_t t = [] {
    std::string problem;
    const uint64_t ms =
        env::parse_timeout_ms(std::getenv("KINET_EMU_PEER_TIMEOUT_MS"), &problem, "KINET_EMU_PEER_TIMEOUT_MS");
    if (!problem.empty()) {
      if (ms == env::kMaxTimeoutMs) KINET_LOG(Warn, "%s", problem.c_str());
      else KINET_LOG(Error, "%s", problem.c_str());
    }
    return ms;
  }();
  return t;
}

void RemoteFabric::join(const std::shared_ptr<Nic>& nic, fabric::Via via) {
  std::unique_lock<std::mutex> g(mu_);
  if (stop_fd_[0] < 0 && ::pipe2(stop_fd_, O_CLOEXEC) != 0)
    throw Error(ErrorCode::ResourceExhausted, std::string("emu fabric: pipe: ") + std::strerror(errno));
  try {
    if ((static_cast<uint8_t>(via) & static_cast<uint8_t>(fabric::Via::Tcp)) && listen_fd_ < 0) start_tcp_locked();
    if ((static_cast<uint8_t>(via) & static_cast<uint8_t>(fabric::Via::Shm)) && !shm_) start_shm_locked();
  } catch (...) {
    if (nics_.empty()) shutdown_locked(g);  // nothing else runs: leave no listener behind
    throw;
  }
  nics_[nic->node] = nic;
  nics_gen_.fetch_add(1, std::memory_order_release);
}

void RemoteFabric::start_tcp_locked() {
  const bs::Interface itf = bs::pick_interface();
  bs::SockAddr bound;
  bs::Fd lfd = bs::listen_on(itf.addr, 0, &bound);
  // The descriptors go by value: a leave() right after this join() may
  // reset the members before the thread first looks at them.
  listener_ = named_thread("kinet-fab-lsn", [this, fd = lfd.get(), sfd = stop_fd_[0]] { listen_loop(fd, sfd); });
  listen_fd_ = lfd.release();
  tcp_endpoint_ = fabric::tcp_endpoint(bound);
  KINET_LOG(Info, "emu fabric: listening at %s (interface %s)", tcp_endpoint_.c_str(), itf.name.c_str());
}

void RemoteFabric::start_shm_locked() {
  const fabric::HostId& host = fabric::this_host();
  auto l = std::make_unique<fabric::ShmListener>(hex(process_id()).substr(2));
  shm_listener_ =
      named_thread("kinet-fab-shml", [this, raw = l.get(), sfd = stop_fd_[0]] { shm_listen_loop(raw, sfd); });
  shm_ = std::move(l);
  shm_endpoint_ = fabric::shm_endpoint(shm_->name(), host);
  KINET_LOG(Info, "emu fabric: listening at %s", shm_endpoint_.c_str());
}

std::string RemoteFabric::endpoint(fabric::Via via) {
  std::lock_guard<std::mutex> g(mu_);
  switch (via) {
    case fabric::Via::Tcp: return tcp_endpoint_;
    case fabric::Via::Shm: return shm_endpoint_;
    case fabric::Via::Auto:
      if (tcp_endpoint_.empty() || shm_endpoint_.empty()) return tcp_endpoint_ + shm_endpoint_;
      return tcp_endpoint_ + ", " + shm_endpoint_;
  }
  return "";
}

void RemoteFabric::leave(uint64_t node) {
  std::unique_lock<std::mutex> g(mu_);
  nics_.erase(node);
  nics_gen_.fetch_add(1, std::memory_order_release);
  if (nics_.empty() && stop_fd_[0] >= 0) shutdown_locked(g);
}

// Stops everything: the listener, inbound links and their threads, outbound
// links (pending Calls complete lost). Called with mu_ held; drops it to join.
void RemoteFabric::shutdown_locked(std::unique_lock<std::mutex>& g) {
  const char one = 1;
  (void)!::write(stop_fd_[1], &one, 1);
  std::thread listener = std::move(listener_), shm_listener = std::move(shm_listener_);
  auto shm = std::move(shm_);
  const int lfd = listen_fd_, s0 = stop_fd_[0], s1 = stop_fd_[1];
  listen_fd_ = stop_fd_[0] = stop_fd_[1] = -1;
  tcp_endpoint_.clear();
  shm_endpoint_.clear();
  auto peers = std::move(peers_);
  peers_.clear();
  g.unlock();
  if (listener.joinable()) listener.join();  // no new inbound links after these
  if (shm_listener.joinable()) shm_listener.join();
  shm.reset();
  if (lfd >= 0) ::close(lfd);
  ::close(s0);
  ::close(s1);
  g.lock();
  auto inbound = std::move(inbound_);
  inbound_.clear();
  g.unlock();
  for (auto& in : inbound) in->link->close();
  for (auto& in : inbound)
    if (in->th.joinable()) in->th.join();
  for (auto& [ep, p] : peers) p->fail("this process closed its last cross-process NIC");
  peers.clear();  // the last reference may be a QP's: it joins when that QP goes
  g.lock();
}

void RemoteFabric::reap_inbound(bool all) {
  std::vector<std::unique_ptr<Inbound>> done;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = inbound_.begin(); it != inbound_.end();) {
      if (all || (*it)->finished.load(std::memory_order_acquire)) {
        done.push_back(std::move(*it));
        it = inbound_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& in : done) {
    in->link->close();
    if (in->th.joinable()) in->th.join();
  }
}

void RemoteFabric::listen_loop(int lfd, int sfd) {
  for (;;) {
    pollfd p[2] = {{lfd, POLLIN, 0}, {sfd, POLLIN, 0}};
    const int n = ::poll(p, 2, 1000);  // wakes now and then to join finished inbound threads
    if (n < 0 && errno != EINTR) {
      KINET_LOG(Error, "emu fabric: poll on the listener failed: %s; no more peers accepted", std::strerror(errno));
      return;
    }
    if (p[1].revents) return;
    reap_inbound(false);
    if (n <= 0 || !(p[0].revents & POLLIN)) continue;
    bs::SockAddr from;
    from.len = sizeof from.ss;
    const int fd = ::accept4(lfd, reinterpret_cast<sockaddr*>(&from.ss), &from.len, SOCK_CLOEXEC);
    if (fd < 0) continue;  // EAGAIN, a connection reset before accept, EMFILE: try again later
    try {
      add_inbound(std::make_unique<fabric::TcpLink>(bs::Fd(fd), fabric::tcp_endpoint(from)));
    } catch (const std::exception& e) {
      KINET_LOG(Warn, "emu fabric: can't serve a connection from %s: %s", from.str().c_str(), e.what());
    }
  }
}

void RemoteFabric::shm_listen_loop(fabric::ShmListener* l, int sfd) {
  for (;;) {
    pollfd p[2] = {{l->fd(), POLLIN, 0}, {sfd, POLLIN, 0}};
    const int n = ::poll(p, 2, 1000);  // wakes now and then to join finished inbound threads
    if (n < 0 && errno != EINTR) {
      KINET_LOG(Error, "emu fabric: poll on the shm listener failed: %s; no more peers accepted",
                std::strerror(errno));
      return;
    }
    if (p[1].revents) return;
    reap_inbound(false);
    if (n <= 0 || !(p[0].revents & POLLIN)) continue;
    try {
      // A connector sends its handshake right after connecting: a short
      // bound keeps a silent one from holding up the others for long.
      const auto bound = std::chrono::milliseconds(std::min<uint64_t>(timeout_ms(), 2000));
      std::unique_ptr<fabric::Link> link = l->accept(Clock::now() + bound);
      if (link) add_inbound(std::move(link));
    } catch (const std::exception& e) {
      KINET_LOG(Warn, "emu fabric: shm listener %s: %s", l->name().c_str(), e.what());
    }
  }
}

void RemoteFabric::add_inbound(std::unique_ptr<fabric::Link> link) {
  auto in = std::make_unique<Inbound>();
  in->link = std::move(link);
  Inbound* raw = in.get();
  {
    std::lock_guard<std::mutex> g(mu_);
    inbound_.push_back(std::move(in));
  }
  raw->th = named_thread("kinet-fab-srv", [this, raw] { serve(*raw); });
}

void RemoteFabric::serve(Inbound& in) {
  fabric::Link& link = *in.link;
  std::string who = link.peer_name();
  const auto bound = std::chrono::milliseconds(timeout_ms());
  try {
    const fabric::Hello h = recv_hello(link, Clock::now() + bound, timeout_ms());
    send_hello(link, Clock::now() + bound);
    who += " (" + h.name + ")";
    KINET_LOG(Debug, "emu fabric: requester %s connected", who.c_str());
    std::vector<uint8_t> buf, out, scratch;
    uint64_t cached_node = 0, cached_gen = ~0ull;
    std::weak_ptr<Nic> cached_nic;
    fabric::QpCache qp_cache;
    // Responses are batched: while the requester's next Request is already
    // read ahead, it is answered before anything is sent, and one send(2)
    // carries every answer so far (at most kBatchBytes of them). Nothing read
    // ahead: the answers go now (no syscall spent looking), unless all of
    // them answer kAckLater Writes: those wait for the next Request up to
    // the ack delay (at most kMaxHeld of them), so that a stream of
    // unsignalled WRITEs costs the requester one wake-up per batch, not one
    // per WRITE. A requester that needs its answers sends a Request without
    // the flag (a signalled WQE, a READ, an atomic, a Flush), which takes the
    // held ones along. Held answers are not encoded one by one: a run of
    // them (consecutive seqs) travels as one Response, or inside the next
    // answer as its `covers` (wire.hpp).
    constexpr size_t kBatchBytes = 256 * 1024;
    constexpr size_t kMaxHeld = 64;
    const auto delay = ack_delay();
    size_t held = 0;      // held answers since the last send
    bool urgent = false;  // an answer that may not wait is in `out`
    Clock::time_point held_since{};
    uint64_t run_last = 0;  // the run of held answers not yet in `out`: seqs
    uint32_t run_n = 0;     // run_last - run_n + 1 .. run_last (run_n <= run_last, <= kMaxHeld)
    auto follows_run = [&](uint64_t seq) { return run_n && seq == run_last + 1 && seq > run_n; };
    // A WRITE's payload from kPlaceBytes on is not received into `buf`: the
    // frame comes cut after the Request's fixed part, and the payload goes
    // from the connection straight into the target region
    // (fabric::respond_from_link): one copy fewer per byte.
    constexpr size_t kPlaceBytes = 16 * 1024;
    // A READ's data from kReadPlaceBytes on leaves from the region itself,
    // each answer a send(2) of its own; smaller ones are copied into the
    // batch of answers (read_bw at 16-32 KiB ran a third slower when they
    // left in place from 16 KiB, 1.1-1.3x faster at 64 KiB-512 KiB:
    // docs/PERFORMANCE.md section 4, session 14).
    constexpr size_t kReadPlaceBytes = 64 * 1024;
    constexpr size_t kWriteHead = fabric::kHeaderBytes + fabric::kRequestFixed;
    size_t rest = 0;  // bytes of the frame in `buf` still on the link
    auto next = [&](Clock::time_point deadline) {
      return link.recv_split(buf, deadline, kWriteHead + kPlaceBytes - 1, kWriteHead, &rest);
    };
    auto close_run = [&] {  // the run as one Response at the end of `out`
      if (!run_n) return;
      fabric::Response a;
      a.seq = run_last;
      a.covers = run_n - 1;
      fabric::encode(a, out);
      run_n = 0;
    };
    for (;;) {
      const bool waiting = !out.empty() || run_n;
      bool have = waiting && out.size() < kBatchBytes && in.link->buffered() && next(Clock::now());
      if (!have && waiting && !urgent && held < kMaxHeld && out.size() < kBatchBytes) {
        const auto due = held_since + delay;
        if (Clock::now() < due) have = next(due);
      }
      if (!have && waiting) {
        close_run();
        link.send(out.data(), out.size(), Clock::now() + bound);
        out.clear();
        held = 0;
        urgent = false;
      }
      if (!have && !next(Clock::now() + 1s)) continue;  // idle: a requester may rest
      fabric::Frame f;
      std::string why;
      if (rest ? !fabric::decode_write_head(buf.data(), buf.size(), &f, &why)
               : !fabric::decode(buf.data(), buf.size(), &f, &why))
        throw Error(ErrorCode::InvalidArgument, "malformed frame: " + why);
      if (f.type != fabric::FrameType::Request)
        throw Error(ErrorCode::InvalidArgument,
                    "a frame of type " + std::to_string(static_cast<int>(f.type)) + " where a Request was expected");
      // The NIC it names: looked up under mu_ only when the node or the
      // set of NICs changed since the last Request (a weak_ptr: a NIC that
      // left is not kept alive by a link).
      const uint64_t gen = nics_gen_.load(std::memory_order_acquire);
      if (f.request.to_node != cached_node || gen != cached_gen) {
        std::lock_guard<std::mutex> g(mu_);
        auto it = nics_.find(f.request.to_node);
        cached_nic = it != nics_.end() ? it->second : std::weak_ptr<Nic>();
        cached_node = f.request.to_node;
        cached_gen = nics_gen_.load(std::memory_order_relaxed);
      }
      std::shared_ptr<Nic> nic = cached_nic.lock();
      fabric::Response r;
      r.seq = f.request.seq;
      bool read_in_place = false;
      if (f.request.kind == fabric::OpKind::Flush) {
        // Nothing to execute: its answer carries the held ones.
      } else if (!nic) {
        Fault gone{prm::kSynTransportRetry, "no emu device at node " + hex(f.request.to_node) +
                                                " on the cross-process fabric in " + process_name() +
                                                " (closed, or never there)"};
        if (rest) fabric::respond_from_link(nullptr, f.request, link, &qp_cache, scratch, gone);  // dropped
        r.syndrome = gone.syndrome;
        r.why = gone.why;
      } else if (rest) {
        const Fault fault = fabric::respond_from_link(nic.get(), f.request, link, &qp_cache, scratch);
        r.syndrome = fault.syndrome;
        r.why = fabric::printable(fault.why, fabric::kMaxWhy);
      } else if (f.request.kind == fabric::OpKind::Read && f.request.len >= kReadPlaceBytes &&
                 link.kernel_reads_body()) {
        read_in_place = true;  // answered below, its data sent from the region itself
      } else {
        // The one responder check and access (fabric/responder.hpp), as the
        // in-process fabric runs it; over a wire every buffer is ours.
        const fabric::Request& rq = f.request;
        uint64_t old = 0;
        fabric::RequesterBuffers rb;
        if (rq.kind == fabric::OpKind::Read) {
          scratch.resize(rq.len);
          rb.read_dst = scratch.data();
        }
        rb.old_value = &old;
        Fault fault;
        {
          std::shared_lock<std::shared_mutex> guard(memory_guard());
          fault = fabric::respond(*nic, rq, rb, &qp_cache);
        }
        r.syndrome = fault.syndrome;
        r.why = fabric::printable(fault.why, fabric::kMaxWhy);
        r.old_value = old;
        if (!fault && rq.kind == fabric::OpKind::Read) {
          r.len = rq.len;
          r.payload = scratch.data();
        }
      }
      if ((f.request.flags & fabric::kAckLater) && !r.syndrome) {
        if (out.empty() && !run_n) held_since = Clock::now();
        ++held;
        if (follows_run(r.seq) && run_n < kMaxHeld) {
          ++run_n;
        } else {  // a new run (a gap in the seqs, or the last one is full)
          close_run();
          run_n = 1;
        }
        run_last = r.seq;
        continue;
      }
      urgent = true;
      if (follows_run(r.seq)) {
        r.covers = run_n;  // the held answers ride along
        run_n = 0;
      } else {
        close_run();
      }
      if (read_in_place) {
        // A large READ's data leaves from the region itself, read by the
        // kernel (one copy fewer per byte), with the answers batched before
        // it; the guard and the QP's responder lock are held across the send.
        Fault fault;
        {
          std::shared_lock<std::shared_mutex> guard(memory_guard());
          fault = fabric::respond_read_in_place(*nic, f.request, &qp_cache, scratch, [&](const uint8_t* data) {
            r.len = f.request.len;
            r.payload = data;
            fabric::encode_head(r, out);
            link.send_parts(out.data(), out.size(), data, r.len, Clock::now() + bound);
            out.clear();
            held = 0;
            urgent = false;
          });
        }
        if (fault) {
          r.syndrome = fault.syndrome;
          r.why = fabric::printable(fault.why, fabric::kMaxWhy);
          fabric::encode(r, out);
        }
      } else if (r.len >= kBatchBytes) {
        // A READ answer that fills a batch by itself leaves now, from the
        // scratch it was read into, with the answers batched before it.
        // Smaller ones gain more from waiting to share a send with the next
        // answers (read_bw at 4 KiB looked a quarter lower when they left
        // in place from 4 KiB).
        fabric::encode_head(r, out);
        link.send_parts(out.data(), out.size(), r.payload, r.len, Clock::now() + bound);
        out.clear();
        held = 0;
        urgent = false;
      } else {
        fabric::encode(r, out);  // appended; sent when no Request waits
      }
    }
  } catch (const std::exception& e) {
    // The requester died, closed, or spoke garbage: what it still had in
    // flight is dropped with the link.
    KINET_LOG(Info, "emu fabric: requester %s: %s; link closed", who.c_str(), e.what());
  }
  link.close();
  in.finished.store(true, std::memory_order_release);
}

std::unique_ptr<fabric::Link> RemoteFabric::connect(const std::string& ep, fabric::Via via,
                                                    Clock::time_point deadline, std::string* key) {
  const fabric::Endpoint e = fabric::parse_endpoint(ep);
  const bool use_shm_ok = static_cast<uint8_t>(via) & static_cast<uint8_t>(fabric::Via::Shm);
  const bool use_tcp_ok = static_cast<uint8_t>(via) & static_cast<uint8_t>(fabric::Via::Tcp);
  const fabric::HostId& here = fabric::this_host();
  const bool same_host = !e.shm_name.empty() && e.shm_host == here;
  std::string shm_error;
  if (use_shm_ok && same_host) {
    try {
      *key = "shm " + e.shm_name;
      return fabric::shm_connect(e.shm_name, deadline);
    } catch (const Error& err) {
      if (!use_tcp_ok || e.tcp.empty()) throw;
      shm_error = err.what();
      KINET_LOG(Info, "emu fabric: shm to %s failed (%s); trying %s", e.shm_name.c_str(), err.what(), e.tcp.c_str());
    }
  }
  if (use_tcp_ok && !e.tcp.empty()) {
    *key = e.tcp;
    try {
      return fabric::tcp_connect(e.tcp, deadline);
    } catch (const Error& err) {
      if (shm_error.empty()) throw;
      throw Error(err.code(), std::string(err.what()) + " (after shm failed: " + shm_error + ")");
    }
  }
  // Nothing this NIC may use.
  std::string why = std::string("this NIC is on the ") + fabric::via_name(via) + " fabric, and ";
  if (via == fabric::Via::Shm)
    why += e.shm_name.empty() ? "the peer offers no shm listener (it is on the tcp fabric)"
                              : "the peer is on another host (" + e.shm_host.str() + "; this process: " + here.str() +
                                    "): shared memory reaches only processes of one boot and network namespace";
  else
    why += "the peer offers no tcp listener (it is on the shm fabric)" +
           (e.shm_name.empty() ? std::string() : same_host ? std::string() : " and is on another host");
  throw Error(ErrorCode::NotFound, "endpoint \"" + ep + "\": no transport in common: " + why +
                                       " (KINET_EMU_FABRIC=auto uses whichever works)");
}

std::shared_ptr<RemotePeer> RemoteFabric::peer(const std::string& ep, fabric::Via via) {
  std::lock_guard<std::mutex> c(connect_mu_);
  const std::string cache = std::string(fabric::via_name(via)) + " " + ep;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = peers_.find(cache);
    if (it != peers_.end() && !it->second->lost()) return it->second;
  }
  const uint64_t t = timeout_ms();
  const auto deadline = Clock::now() + std::chrono::milliseconds(t);
  std::string used;
  std::unique_ptr<fabric::Link> link = connect(ep, via, deadline, &used);
  send_hello(*link, deadline);
  recv_hello(*link, deadline, t);
  auto p = std::make_shared<RemotePeer>(std::move(link), used, t);
  std::lock_guard<std::mutex> g(mu_);
  peers_[cache] = p;
  return p;
}

void RemoteFabric::send_queued() {
  if (!RemotePeer::any_in_place()) return;
  std::vector<std::shared_ptr<RemotePeer>> ps;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [k, p] : peers_) ps.push_back(p);
  }
  for (auto& p : ps) p->flush();
}

void drain_memory() {
  { std::unique_lock<std::shared_mutex> drain(memory_guard()); }
  if (RemotePeer::any_in_place()) remote().send_queued();
}

RemoteFabric& remote() {
  static auto* r = new RemoteFabric;  // immortal, as fabric(): devices in globals die after statics
  return *r;
}

}  // namespace kinet::emu
