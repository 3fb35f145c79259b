// kinet bootstrap — a rank: registration with the root, the full mesh, and
// framed messages over it.
//
// The mesh is connected eagerly at init: every failure to reach a peer (wrong
// secret, a rank that never came, a firewall) surfaces in init, within one
// bound, naming the rank; and no listener thread has to stay behind. The cost
// is nranks-1 sockets per rank, fine at bootstrap scale (thousands of ranks
// would want a ring and lazy connections instead).
#include <poll.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>

#include "bootstrap/socket.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "kinet/bootstrap.hpp"

namespace kinet {
using namespace bs;

struct Bootstrap::Impl {
  struct Peer {
    Fd fd;
    SockAddr addr;
    std::string lost;  // why the connection is unusable; empty while it works
    FrameReader reader{Bootstrap::max_frame()};
    std::deque<Msg> inbox;
    uint64_t inbox_bytes = 0;  // held by `inbox`: bodies plus kMsgOverhead each
  };
  // What one queued message costs besides its body: counted so that a flood
  // of empty frames is bounded too.
  static constexpr uint64_t kMsgOverhead = sizeof(Msg) + 16;
  uint64_t inbox_limit = 0;  // per peer: 4 x max_frame(), at least 64 MiB (bootstrap.hpp)
  int rank = 0;
  int nranks = 0;
  std::chrono::milliseconds timeout{};
  uint32_t coll_seq = 0;
  std::vector<Peer> peers;  // indexed by rank; peers[rank] unused
  std::string me;           // "bootstrap rank 3/8"

  std::string peer_name(int r) const { return "rank " + std::to_string(r) + " (" + peers[r].addr.str() + ")"; }

  // A clean close (`orderly`) is how every job ends, so it is only logged at
  // info; an error thrown to the caller names the peer either way.
  void mark_lost(int r, const std::string& why, bool orderly = false) {
    Peer& p = peers[r];
    if (!p.lost.empty()) return;
    p.lost = why;
    p.fd.reset();
    if (orderly) KINET_LOG(Info, "%s: %s: %s", me.c_str(), peer_name(r).c_str(), why.c_str());
    else KINET_LOG(Warn, "%s: %s: %s", me.c_str(), peer_name(r).c_str(), why.c_str());
  }

  [[noreturn]] void fail_lost(int r, const std::string& doing) const {
    throw Error(ErrorCode::System, me + ": " + doing + ": " + peer_name(r) + " lost: " + peers[r].lost);
  }

  // Reads whatever every live peer has sent. A peer that closes, errs or
  // sends a malformed frame is marked lost; the others are unaffected.
  void drain(int r) {
    Peer& p = peers[r];
    std::string why;
    const size_t before = p.inbox.size();
    const FrameReader::Pump got = p.reader.pump(p.fd.get(), p.inbox, why);
    for (size_t i = before; i < p.inbox.size(); ++i) p.inbox_bytes += p.inbox[i].data.size() + kMsgOverhead;
    // Nobody asked for these yet; a peer that sends faster than this rank
    // takes would otherwise grow the inbox without bound.
    if (p.inbox_bytes > inbox_limit) {
      mark_lost(r, "it sent " + std::to_string(p.inbox_bytes) + " bytes of messages not received here yet, over the "
                   "limit of " + std::to_string(inbox_limit) + " (4 x KINET_BOOTSTRAP_MAX_FRAME, at least 64 MiB)");
      p.inbox.clear();  // the peer is gone: what it sent is not delivered
      p.inbox_bytes = 0;
      return;
    }
    switch (got) {
      case FrameReader::Pump::WouldBlock: return;
      case FrameReader::Pump::Eof:
        if (p.reader.mid_frame()) mark_lost(r, "connection closed in the middle of a frame (peer lost)");
        else mark_lost(r, "connection closed (peer lost)", true);
        return;
      case FrameReader::Pump::Malformed: mark_lost(r, why); return;
      case FrameReader::Pump::Error: mark_lost(r, "receive failed: " + why); return;
    }
  }

  // One round of progress: waits (until `d`) for input from any live peer or
  // for room to write to `out_peer` (-1: none). Returns false on timeout.
  bool progress(Deadline d, int out_peer, bool* writable) {
    std::vector<pollfd> pfds;
    std::vector<int> who;
    for (int r = 0; r < nranks; ++r) {
      if (r == rank || !peers[r].lost.empty()) continue;
      short ev = POLLIN;
      if (r == out_peer) ev |= POLLOUT;
      pfds.push_back({peers[r].fd.get(), ev, 0});
      who.push_back(r);
    }
    if (pfds.empty()) return ms_left(d) > 0;
    int n = ::poll(pfds.data(), pfds.size(), ms_left(d));
    if (n < 0) {
      if (errno == EINTR) return true;
      throw Error(ErrorCode::System, me + ": poll: " + std::strerror(errno));
    }
    if (n == 0) return false;
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) drain(who[i]);
      if (who[i] == out_peer && (pfds[i].revents & POLLOUT) && writable) *writable = true;
    }
    return true;
  }

  // Throws the timeout of a wait for `what`, naming the bound.
  [[noreturn]] void fail_timeout(const std::string& doing, const std::string& what) const {
    throw Error(ErrorCode::System,
                me + ": timeout after " + std::to_string(timeout.count()) + " ms " + doing + ": " + what);
  }

  // Sends one frame, receiving meanwhile so that two ranks sending large
  // blobs to each other (or around a cycle) can't block each other. Header
  // and body go out in one sendmsg: as two sends, a small frame met Nagle
  // and delayed ACK (about 40 ms a message). The deadline is checked before
  // every wait, not only when a wait finds nothing: a peer that keeps
  // sending must not stretch it.
  void send_frame(int r, FrameKind kind, uint32_t tag, const void* data, size_t bytes, Deadline d,
                  const std::string& doing) {
    if (!peers[r].lost.empty()) fail_lost(r, doing);
    FrameHeader h{static_cast<uint16_t>(kind), 0, tag, bytes};
    iovec iov[2] = {{&h, sizeof h}, {const_cast<void*>(data), bytes}};
    size_t first = 0;  // iov[first] is the first part not wholly sent
    bool started = false;
    while (first < 2) {
      msghdr mh{};
      mh.msg_iov = iov + first;
      mh.msg_iovlen = 2 - first;
      ssize_t w = ::sendmsg(peers[r].fd.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        started = true;
        auto k = static_cast<size_t>(w);
        while (first < 2 && k >= iov[first].iov_len) k -= iov[first++].iov_len;
        if (first < 2) {
          iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + k;
          iov[first].iov_len -= k;
        }
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        mark_lost(r, std::string("send failed: ") + std::strerror(errno));
        fail_lost(r, doing);
      }
      bool writable = false;
      while (!writable) {
        if (Clock::now() >= d || !progress(d, r, &writable)) {
          // Part of the frame is out: the next frame would be read as the
          // rest of this one. The stream can't be resumed, so it is closed.
          if (started) mark_lost(r, "timeout in the middle of a frame (" + doing + ")");
          fail_timeout(doing, peer_name(r) + " is not reading" +
                                  (started ? " (the frame was cut short: connection closed)" : ""));
        }
        if (!peers[r].lost.empty()) fail_lost(r, doing);
      }
    }
  }

  // Takes the first message of `kind` and `tag` that `r` sent, waiting until
  // `d` (checked on every round, since other peers' traffic wakes the wait).
  std::vector<uint8_t> take(int r, FrameKind kind, uint32_t tag, Deadline d, const std::string& doing) {
    for (;;) {
      auto& q = peers[r].inbox;
      auto it = std::find_if(q.begin(), q.end(), [&](const Msg& m) { return m.kind == kind && m.tag == tag; });
      if (it != q.end()) {
        std::vector<uint8_t> v = std::move(it->data);
        q.erase(it);
        peers[r].inbox_bytes -= v.size() + kMsgOverhead;
        return v;
      }
      if (!peers[r].lost.empty()) fail_lost(r, doing);
      if (Clock::now() >= d || !progress(d, -1, nullptr)) fail_timeout(doing, "nothing from " + peer_name(r));
    }
  }

  void check_peer(int peer, const char* op) const {
    if (peer < 0 || peer >= nranks || peer == rank)
      throw Error(ErrorCode::InvalidArgument, me + ": " + op + ": peer " + std::to_string(peer) +
                                                  " is not another rank (0.." + std::to_string(nranks - 1) + ")");
  }
};

std::chrono::milliseconds Bootstrap::default_timeout() {
  // Saturated where init() saturates a timeout: 2^63 and above would wrap to
  // a negative count.
  constexpr uint64_t kMaxMs = std::chrono::milliseconds(std::chrono::hours(24 * 30)).count();
  return std::chrono::milliseconds(env::get_u64_at_most("KINET_BOOTSTRAP_TIMEOUT_MS", 30000, kMaxMs));
}

uint64_t Bootstrap::max_frame() { return env::get_u64("KINET_BOOTSTRAP_MAX_FRAME", uint64_t(1) << 30); }

namespace {
Hello make_hello(const UniqueId& id, HelloKind kind, int rank, int nranks, std::chrono::milliseconds t) {
  Hello h{};
  h.magic = Hello::kMagic;
  h.version = Hello::kVersion;
  h.kind = static_cast<uint16_t>(kind);
  h.rank = static_cast<uint32_t>(rank);
  h.nranks = static_cast<uint32_t>(nranks);
  h.timeout_ms = static_cast<uint32_t>(std::min<int64_t>(t.count(), UINT32_MAX));
  std::memcpy(h.secret, id.secret, sizeof h.secret);
  return h;
}
}  // namespace

std::unique_ptr<Bootstrap> Bootstrap::init(const UniqueId& id, int rank, int nranks,
                                           std::chrono::milliseconds timeout) {
  id.validate();
  if (nranks < 1 || nranks > (1 << 20))
    throw Error(ErrorCode::InvalidArgument, "bootstrap: nranks " + std::to_string(nranks) + " is not in 1..2^20");
  if (rank < 0 || rank >= nranks)
    throw Error(ErrorCode::InvalidArgument,
                "bootstrap: rank " + std::to_string(rank) + " is not in 0.." + std::to_string(nranks - 1));
  if (timeout.count() <= 0)
    throw Error(ErrorCode::InvalidArgument, "bootstrap: timeout " + std::to_string(timeout.count()) + " ms");
  timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 30));  // now + timeout must not overflow
  const Deadline d = Clock::now() + timeout;
  const std::string tmo = "timeout after " + std::to_string(timeout.count()) + " ms";
  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->nranks = nranks;
  impl->timeout = timeout;
  const uint64_t mf = max_frame();
  impl->inbox_limit = std::max<uint64_t>(mf > UINT64_MAX / 4 ? UINT64_MAX : mf * 4, uint64_t(64) << 20);
  impl->peers.resize(nranks);
  impl->me = "bootstrap rank " + std::to_string(rank) + "/" + std::to_string(nranks);
  const std::string& me = impl->me;

  // 1. Our listener, on the interface this process selects.
  Interface iface = pick_interface();
  SockAddr mine;
  Fd lfd = listen_on(iface.addr, 0, &mine);

  // 2. Registration: our address out, everyone's back.
  WireAddr rw{};
  rw.family = id.family;
  rw.port = id.port;
  rw.scope_id = id.scope_id;
  std::memcpy(rw.addr, id.addr, sizeof rw.addr);
  const SockAddr root_addr = from_wire(rw, "unique id");
  const std::string root = "the root " + root_addr.str();
  std::vector<WireAddr> table(nranks);
  {
    Fd fd = connect_to(root_addr, d, me + ": the root");
    Hello h = make_hello(id, HelloKind::ToRoot, rank, nranks, timeout);
    h.addr = to_wire(mine);
    write_all(fd.get(), &h, sizeof h, d, root);
    Hello r{};
    try {
      if (!read_all(fd.get(), &r, sizeof r, d, root))
        throw Error(ErrorCode::System, me + ": " + root + " closed the connection without answering");
    } catch (const Error& e) {
      if (std::string_view(e.what()).find("timeout") == std::string_view::npos) throw;
      throw Error(ErrorCode::System, me + ": " + tmo + " waiting for the rank table from " + root +
                                         " (not every rank has registered)");
    }
    if (r.magic != Hello::kMagic || r.version != Hello::kVersion ||
        r.kind != static_cast<uint16_t>(HelloKind::RootReply))
      throw Error(ErrorCode::System, me + ": " + root + " answered with something that is not a kinet root reply");
    auto st = static_cast<RootStatus>(r.status);
    if (st != RootStatus::Ok && st != RootStatus::Timeout)
      throw Error(ErrorCode::InvalidArgument, me + ": " + root + " refused the registration: " + root_status_name(st));
    if (r.nranks != static_cast<uint32_t>(nranks))
      throw Error(ErrorCode::System, me + ": " + root + " sent a table of " + std::to_string(r.nranks) + " ranks");
    if (!read_all(fd.get(), table.data(), table.size() * sizeof(WireAddr), d, root))
      throw Error(ErrorCode::System, me + ": " + root + " closed the connection in the middle of the rank table");
    if (st == RootStatus::Timeout) {
      std::string missing;
      for (int i = 0; i < nranks; ++i)
        if (table[i].family == 0) missing += (missing.empty() ? "" : ",") + std::to_string(i);
      throw Error(ErrorCode::System, me + ": timeout at " + root + ": ranks " + missing + " never registered");
    }
  }
  for (int i = 0; i < nranks; ++i) impl->peers[i].addr = from_wire(table[i], "rank table");

  // 3. The mesh: connect to every lower rank, accept every higher one.
  for (int j = 0; j < rank; ++j) {
    Fd fd = connect_to(impl->peers[j].addr, d, me + ": rank " + std::to_string(j));
    Hello h = make_hello(id, HelloKind::ToPeer, rank, nranks, timeout);
    write_all(fd.get(), &h, sizeof h, d, impl->peer_name(j));
    impl->peers[j].fd = std::move(fd);
  }
  int want = nranks - 1 - rank;
  int got = 0;
  auto on_hello = [&](Fd& fd, const SockAddr& from, const Hello& h) {
    const char* why = nullptr;
    if (h.kind != static_cast<uint16_t>(HelloKind::ToPeer)) why = "not a peer handshake";
    else if (std::memcmp(h.secret, id.secret, sizeof h.secret) != 0) why = "wrong secret";
    else if (h.nranks != static_cast<uint32_t>(nranks)) why = "nranks differs";
    else if (h.rank <= static_cast<uint32_t>(rank) || h.rank >= static_cast<uint32_t>(nranks))
      why = "rank out of range (only higher ranks connect to us)";
    else if (impl->peers[h.rank].fd) why = "rank already connected";
    if (why) {
      KINET_LOG(Warn, "%s: refused %s (claims rank %u of %u): %s", me.c_str(), from.str().c_str(), h.rank, h.nranks,
                why);
      return;
    }
    impl->peers[h.rank].fd = std::move(fd);
    ++got;
  };
  if (!accept_hellos(lfd.get(), d, -1, me, on_hello, [&] { return got == want; })) {
    std::string missing;
    for (int j = rank + 1; j < nranks; ++j)
      if (!impl->peers[j].fd) missing += (missing.empty() ? "" : ",") + std::to_string(j);
    throw Error(ErrorCode::System, me + ": " + tmo + " waiting for ranks " + missing + " to connect");
  }
  for (int j = 0; j < nranks; ++j)
    if (j != rank) set_nonblocking(impl->peers[j].fd.get());
  KINET_LOG(Debug, "%s: mesh connected on %s (%s)", me.c_str(), mine.str().c_str(), iface.name.c_str());
  return std::unique_ptr<Bootstrap>(new Bootstrap(std::move(impl)));
}

Bootstrap::Bootstrap(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Bootstrap::~Bootstrap() = default;
int Bootstrap::rank() const { return impl_->rank; }
int Bootstrap::size() const { return impl_->nranks; }
std::chrono::milliseconds Bootstrap::timeout() const { return impl_->timeout; }

std::vector<std::vector<uint8_t>> Bootstrap::allgather(const void* mine, size_t bytes) {
  Impl& m = *impl_;
  if (bytes && !mine) throw Error(ErrorCode::InvalidArgument, m.me + ": allgather: null data of " + std::to_string(bytes) + " bytes");
  // Before the sequence number is taken: the peers would refuse the frame
  // and drop the connection.
  if (bytes > max_frame())
    throw Error(ErrorCode::InvalidArgument, m.me + ": allgather: " + std::to_string(bytes) +
                                                " bytes exceed KINET_BOOTSTRAP_MAX_FRAME (" + std::to_string(max_frame()) + ")");
  const uint32_t seq = ++m.coll_seq;
  const std::string doing = "in allgather #" + std::to_string(seq);
  const Deadline d = Clock::now() + m.timeout;
  // Send to the ranks after us first, in rank order from there, so that the
  // load spreads instead of everyone writing to rank 0 first.
  for (int k = 1; k < m.nranks; ++k) {
    int r = (m.rank + k) % m.nranks;
    m.send_frame(r, FrameKind::Collective, seq, mine, bytes, d, doing);
  }
  std::vector<std::vector<uint8_t>> out(m.nranks);
  auto* p = static_cast<const uint8_t*>(mine);
  out[m.rank].assign(p, p + bytes);
  for (int k = 1; k < m.nranks; ++k) {
    int r = (m.rank - k + m.nranks) % m.nranks;
    out[r] = m.take(r, FrameKind::Collective, seq, d, doing);
  }
  return out;
}

void Bootstrap::barrier() { allgather(nullptr, 0); }

void Bootstrap::send(int peer, uint32_t tag, const void* data, size_t bytes) {
  Impl& m = *impl_;
  m.check_peer(peer, "send");
  if (bytes && !data) throw Error(ErrorCode::InvalidArgument, m.me + ": send: null data of " + std::to_string(bytes) + " bytes");
  if (bytes > max_frame())
    throw Error(ErrorCode::InvalidArgument, m.me + ": send: " + std::to_string(bytes) +
                                                " bytes exceed KINET_BOOTSTRAP_MAX_FRAME (" + std::to_string(max_frame()) + ")");
  m.send_frame(peer, FrameKind::User, tag, data, bytes, Clock::now() + m.timeout,
               "sending tag " + std::to_string(tag) + " to rank " + std::to_string(peer));
}

std::vector<uint8_t> Bootstrap::recv(int peer, uint32_t tag) {
  Impl& m = *impl_;
  m.check_peer(peer, "recv");
  return m.take(peer, FrameKind::User, tag, Clock::now() + m.timeout,
                "waiting for tag " + std::to_string(tag) + " from rank " + std::to_string(peer));
}

}  // namespace kinet
