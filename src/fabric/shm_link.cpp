// kinet fabric — the shared-memory link (shm_link.hpp).
#include "fabric/shm_link.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "core/log.hpp"
#include "fabric/poll_until.hpp"
#include "fabric/wire.hpp"
#include "kinet/kinet.hpp"

namespace kinet::fabric {
namespace {

static_assert(std::atomic_ref<uint64_t>::is_always_lock_free && std::atomic_ref<uint32_t>::is_always_lock_free,
              "the shared indices must be lock-free (address-free) atomics");
static_assert(kShmMinRing >= kMaxFrame && (kShmMinRing & (kShmMinRing - 1)) == 0);

// A waiter re-checks this often even without a wake-up: a safety net against
// a peer that never sends one, not how wake-ups normally arrive.
constexpr std::chrono::milliseconds kPollCap{100};
constexpr int kSpin = 64;  // index checks before a waiter announces it sleeps

std::string errtext(int e) { return std::system_category().message(e); }
[[noreturn]] void sys_fail(const std::string& what, int e) {
  throw Error(ErrorCode::System, what + ": " + errtext(e));
}

long long ms_between(Clock::time_point a, Clock::time_point b) {
  return b > a ? std::chrono::ceil<std::chrono::milliseconds>(b - a).count() : 0;
}

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

struct Unmap {  // a mapping until a link owns it
  void* p;
  size_t n;
  ~Unmap() {
    if (p) munmap(p, n);
  }
};

// poll() on one descriptor until `d`; EINTR retried. Returns revents (0 on timeout).
short poll1(int fd, short events, Clock::time_point d) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll_until(&p, 1, d);
    if (n > 0) return p.revents;
    if (n == 0 && Clock::now() >= d) return 0;
    if (n < 0 && errno != EINTR) sys_fail("shm: poll", errno);
  }
}

sockaddr_un abstract_addr(const std::string& name, socklen_t* len) {
  if (name.empty() || name.size() > 90)
    throw Error(ErrorCode::InvalidArgument,
                "shm: listener name '" + printable(name, 100) + "' must be 1..90 bytes (it is " +
                    std::to_string(name.size()) + ")");
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string path = "kinet-shm/" + name;
  std::memcpy(a.sun_path + 1, path.data(), path.size());  // sun_path[0] = 0: the abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + path.size());
  return a;
}

ucred peer_cred(int fd) {
  ucred c{};
  socklen_t l = sizeof c;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &l) != 0) sys_fail("shm: SO_PEERCRED", errno);
  return c;
}

bool valid_ring(uint64_t r) { return r >= kShmMinRing && r <= kShmMaxRing && (r & (r - 1)) == 0; }
size_t map_bytes(uint64_t ring) { return kShmCtlBytes + 2 * ring; }

// ---- ordering between the two sides, one helper per need ------------------
uint64_t& u64_at(uint8_t* ctl, size_t off) { return *reinterpret_cast<uint64_t*>(ctl + off); }
uint32_t& u32_at(uint8_t* ctl, size_t off) { return *reinterpret_cast<uint32_t*>(ctl + off); }
// Producer: the frame's bytes are written before the index that hands them over.
void publish_tail(uint8_t* ctl, uint64_t v) {
  std::atomic_ref<uint64_t>(u64_at(ctl, kShmTail)).store(v, std::memory_order_release);
}
// Consumer: the producer's index is read before the bytes it covers.
uint64_t acquire_tail(uint8_t* ctl) {
  return std::atomic_ref<uint64_t>(u64_at(ctl, kShmTail)).load(std::memory_order_acquire);
}
// Consumer: its copies out of the consumed bytes are done before the producer may overwrite them.
void release_head(uint8_t* ctl, uint64_t v) {
  std::atomic_ref<uint64_t>(u64_at(ctl, kShmHead)).store(v, std::memory_order_release);
}
// Producer: the consumer's index is read before the bytes it freed are overwritten.
uint64_t acquire_head(uint8_t* ctl) {
  return std::atomic_ref<uint64_t>(u64_at(ctl, kShmHead)).load(std::memory_order_acquire);
}
// A waiter's "I sleep" flag is visible before it re-checks the index; paired
// with peer_waits(), either the waiter sees the new index or the other side
// sees the flag and sends a wake-up.
void announce_wait(uint8_t* ctl, size_t flag) {
  std::atomic_ref<uint32_t>(u32_at(ctl, flag)).store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
void clear_wait(uint8_t* ctl, size_t flag) {
  std::atomic_ref<uint32_t>(u32_at(ctl, flag)).store(0, std::memory_order_relaxed);
}
// The index just published is ordered before reading the other side's flag.
bool peer_waits(uint8_t* ctl, size_t flag) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return std::atomic_ref<uint32_t>(u32_at(ctl, flag)).load(std::memory_order_relaxed) != 0;
}

void copy_in(uint8_t* ring, uint64_t size, uint64_t at, const uint8_t* src, size_t n) {
  const size_t off = at & (size - 1), first = std::min<size_t>(n, size - off);
  std::memcpy(ring + off, src, first);
  std::memcpy(ring, src + first, n - first);
}
void copy_out(uint8_t* dst, const uint8_t* ring, uint64_t size, uint64_t at, size_t n) {
  const size_t off = at & (size - 1), first = std::min<size_t>(n, size - off);
  std::memcpy(dst, ring + off, first);
  std::memcpy(dst + first, ring, n - first);
}

class ShmLink final : public Link {
 public:
  // `conn`: data wake-ups (our receiver reads it); `pair`: space wake-ups
  // (our sender reads it). `base` maps map_bytes(ring); once constructed,
  // the link unmaps it.
  ShmLink(Fd conn, Fd pair, uint8_t* base, uint64_t ring, bool listener_side, std::string peer)
      : conn_(std::move(conn)), pair_(std::move(pair)), base_(base), ring_(ring), peer_(std::move(peer)) {
    const int tx = listener_side ? 1 : 0, rx = 1 - tx;
    tx_ctl_ = base_ + tx * kShmCtlStride;
    rx_ctl_ = base_ + rx * kShmCtlStride;
    tx_data_ = base_ + kShmCtlBytes + tx * ring_;
    rx_data_ = base_ + kShmCtlBytes + rx * ring_;
    closer_ = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (closer_.get() < 0) sys_fail("shm link to " + peer_ + ": eventfd", errno);
  }
  ~ShmLink() override {
    close();
    munmap(base_, map_bytes(ring_));
  }

  void send_parts(const uint8_t* head, size_t n1, const uint8_t* body, size_t n2,
                  Clock::time_point deadline) override {
    const size_t n = n1 + n2;
    if (n < kHeaderBytes || n > kMaxFrame)
      throw Error(ErrorCode::InvalidArgument, peer_ + ": frame of " + std::to_string(n) + " bytes (16.." +
                                                  std::to_string(kMaxFrame) + " allowed)");
    if (n1 < kHeaderBytes)
      throw Error(ErrorCode::InvalidArgument, peer_ + ": a frame's first part of " + std::to_string(n1) +
                                                  " bytes: it must hold the whole 16-byte header");
    const auto start = Clock::now();
    uint64_t free = 0;
    auto room = [&] {
      // The consumer's index moves forward, never past what we wrote.
      const uint64_t head = acquire_head(tx_ctl_);
      if (head - tx_head_seen_ > tx_tail_ - tx_head_seen_)
        hostile("the peer's read index " + std::to_string(head) + " is outside [" + std::to_string(tx_head_seen_) +
                ", " + std::to_string(tx_tail_) + "] (from what it had read to what we wrote)");
      tx_head_seen_ = head;
      free = ring_ - (tx_tail_ - head);
      return free >= n;
    };
    if (!wait(pair_.get(), tx_ctl_, kShmProducerWaits, deadline, room))
      throw Error(ErrorCode::System, peer_ + ": timeout after " + std::to_string(ms_between(start, deadline)) +
                                         " ms waiting for ring space (" + std::to_string(n) + " bytes to send, " +
                                         std::to_string(free) + " of " + std::to_string(ring_) + " free)");
    copy_in(tx_data_, ring_, tx_tail_, head, n1);
    if (n2) copy_in(tx_data_, ring_, tx_tail_ + n1, body, n2);
    tx_tail_ += n;
    publish_tail(tx_ctl_, tx_tail_);
    if (peer_waits(tx_ctl_, kShmConsumerWaits)) wake(conn_.get());
  }

  bool recv(std::vector<uint8_t>& out, Clock::time_point deadline) override {
    uint64_t avail = 0;
    auto ready = [&] {
      // The producer's index moves forward, never more than a ring past what we read.
      const uint64_t tail = acquire_tail(rx_ctl_);
      if (tail - rx_tail_seen_ > rx_head_ + ring_ - rx_tail_seen_)
        hostile("the peer's write index " + std::to_string(tail) + " is outside [" + std::to_string(rx_tail_seen_) +
                ", " + std::to_string(rx_head_ + ring_) + "] (from what it had published to a full ring)");
      rx_tail_seen_ = tail;
      avail = tail - rx_head_;
      return avail >= kHeaderBytes;
    };
    if (!wait(conn_.get(), rx_ctl_, kShmConsumerWaits, deadline, ready)) return false;
    uint8_t hdr[kHeaderBytes];
    copy_out(hdr, rx_data_, ring_, rx_head_, kHeaderBytes);  // our copy: the peer may change the ring's
    uint32_t body = 0;
    std::string why;
    if (!frame_body_len(hdr, kMaxFrame, &body, &why)) hostile("malformed frame: " + why);
    const uint64_t n = kHeaderBytes + uint64_t{body};
    if (n > avail)
      hostile("a frame of " + std::to_string(n) + " bytes but only " + std::to_string(avail) +
              " published (frames are published whole)");
    out.resize(n);
    copy_out(out.data(), rx_data_, ring_, rx_head_, n);
    rx_head_ += n;
    release_head(rx_ctl_, rx_head_);
    if (peer_waits(rx_ctl_, kShmProducerWaits)) wake(pair_.get());
    return true;
  }

  void close() override { shut("link closed"); }

  // Closes the link for `why` (the first reason given is kept: later calls report it).
  void shut(const std::string& why) {
    if (!closed_.set(why)) return;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(closer_.get(), &one, sizeof one);  // wakes our waiters
    ::shutdown(conn_.get(), SHUT_RDWR);  // the peer's waits see EOF
    ::shutdown(pair_.get(), SHUT_RDWR);
  }

  const std::string& peer_name() const override { return peer_; }

 private:
  Fd conn_, pair_, closer_;
  uint8_t* base_;
  uint64_t ring_;
  uint8_t *tx_ctl_, *rx_ctl_, *tx_data_, *rx_data_;
  // Each thread's own indices (never read back from the mapping) and the
  // peer's index as last checked. Sending thread: tx_*; receiving thread: rx_*.
  uint64_t tx_tail_ = 0, tx_head_seen_ = 0;
  uint64_t rx_head_ = 0, rx_tail_seen_ = 0;
  CloseReason closed_;
  std::string peer_;

  // "peer lost: <why>", or the reason the link was closed for when it is.
  [[noreturn]] void lost(const std::string& why) {
    throw Error(ErrorCode::System, peer_ + ": peer lost: " + closed_.why(why));
  }
  // The peer broke the protocol: the link is closed (a ring can't resynchronise).
  [[noreturn]] void hostile(const std::string& why) {
    KINET_LOG(Warn, "shm link with %s: %s; closing the link", peer_.c_str(), why.c_str());
    shut(why);
    throw Error(ErrorCode::InvalidArgument, peer_ + ": " + why);
  }

  static void wake(int fd) {
    const uint8_t b = 1;  // EAGAIN: wake-ups are pending anyway; EPIPE: the next wait reports the loss
    [[maybe_unused]] ssize_t n = ::send(fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  // Reads pending wake-ups; false on EOF or a socket error (the peer is gone).
  static bool drain(int fd) {
    uint8_t buf[256];
    for (int i = 0; i < 64; ++i) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) continue;
      if (n == 0) return false;
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    return true;
  }

  // Waits until cond() holds (true) or `deadline` passes (false); wake-ups
  // come on `fd`, our waiting flag is `flag` in `ctl`. Throws "peer lost" on
  // EOF of `fd` (after one last look at the ring: frames the peer published
  // before it went are delivered) and after close().
  template <class Cond>
  bool wait(int fd, uint8_t* ctl, size_t flag, Clock::time_point deadline, Cond&& cond) {
    if (closed_.closed()) lost("link closed");
    for (int i = 0; i < kSpin; ++i)
      if (cond()) return true;
    for (;;) {
      announce_wait(ctl, flag);
      if (cond()) {
        clear_wait(ctl, flag);
        return true;
      }
      if (Clock::now() >= deadline) {
        clear_wait(ctl, flag);
        return false;
      }
      pollfd p[2] = {{fd, POLLIN, 0}, {closer_.get(), POLLIN, 0}};
      const int rc = poll_until(p, 2, deadline, kPollCap);
      const int e = errno;
      clear_wait(ctl, flag);
      if (closed_.closed()) lost("link closed");
      if (rc < 0 && e != EINTR) sys_fail(peer_ + ": poll", e);
      if (rc > 0 && p[0].revents && !drain(fd)) {
        if (cond()) return true;
        lost("the connection closed (the peer exited or died)");
      }
    }
  }
};

}  // namespace

// ---- listener ----------------------------------------------------------------
ShmListener::ShmListener(const std::string& name) : name_(name) {
  socklen_t len = 0;
  const sockaddr_un a = abstract_addr(name, &len);
  Fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (s.get() < 0) sys_fail("shm listener " + name + ": socket", errno);
  if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0) {
    if (errno == EADDRINUSE)
      throw Error(ErrorCode::System, "shm listener " + name + ": the name is taken (another listener in this "
                                                              "network namespace)");
    sys_fail("shm listener " + name + ": bind", errno);
  }
  if (::listen(s.get(), 64) != 0) sys_fail("shm listener " + name + ": listen", errno);
  fd_ = s.release();
}

ShmListener::~ShmListener() {
  if (fd_ >= 0) ::close(fd_);
}

std::unique_ptr<Link> ShmListener::accept(Clock::time_point deadline) {
  const auto start = Clock::now();
  Fd conn;
  for (;;) {
    const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c >= 0) {
      conn = Fd(c);
      break;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) sys_fail("shm listener " + name_ + ": accept", errno);
    if (poll1(fd_, POLLIN, deadline) == 0) return nullptr;
  }
  const ucred cr = peer_cred(conn.get());
  const std::string peer = "shm pid " + std::to_string(cr.pid);
  auto refuse = [&](const std::string& why) {
    KINET_LOG(Warn, "shm listener %s: refused the connection from pid %d: %s", name_.c_str(),
              static_cast<int>(cr.pid), why.c_str());
    throw Error(ErrorCode::InvalidArgument,
                "shm listener " + name_ + ": connection from pid " + std::to_string(cr.pid) + " refused: " + why);
  };
  if (cr.uid != geteuid())
    refuse("it runs as uid " + std::to_string(cr.uid) + ", this process as uid " + std::to_string(geteuid()));
  if (poll1(conn.get(), POLLIN, deadline) == 0)
    throw Error(ErrorCode::System, "shm listener " + name_ + ": timeout after " +
                                       std::to_string(ms_between(start, deadline)) +
                                       " ms waiting for the handshake of pid " + std::to_string(cr.pid));
  // The hello and its descriptors, in one message.
  uint8_t buf[sizeof(ShmHello) + 1];
  alignas(cmsghdr) uint8_t cbuf[CMSG_SPACE(2 * sizeof(int))];
  iovec iov{buf, sizeof buf};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf;
  msg.msg_controllen = sizeof cbuf;
  ssize_t n;
  do n = ::recvmsg(conn.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  std::vector<Fd> fds;  // every descriptor received is owned (and closed) here
  if (n >= 0 && msg.msg_controllen)
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
          fds.emplace_back(fd);
        }
      }
  if (n < 0) refuse("reading its handshake failed: " + errtext(errno));
  if (n == 0) refuse("it closed the connection before its handshake");
  if ((msg.msg_flags & MSG_TRUNC) || n != static_cast<ssize_t>(sizeof(ShmHello)))
    refuse("a handshake of " + std::string(msg.msg_flags & MSG_TRUNC ? "more than " : "") + std::to_string(n) +
           " bytes (" + std::to_string(sizeof(ShmHello)) + " expected)");
  if (msg.msg_flags & MSG_CTRUNC) refuse("more than 2 descriptors (a memfd and a socket expected)");
  ShmHello h;
  std::memcpy(&h, buf, sizeof h);
  if (h.magic != kShmMagic) refuse("handshake magic " + std::to_string(h.magic) + " is not KNS1");
  if (h.version != kShmVersion) refuse("handshake version " + std::to_string(h.version) + " (this side speaks 1)");
  if (h.reserved) refuse("handshake reserved field " + std::to_string(h.reserved) + " (must be 0)");
  if (!valid_ring(h.ring_bytes))
    refuse("ring size " + std::to_string(h.ring_bytes) + " is not a power of two in [" +
           std::to_string(kShmMinRing) + ", " + std::to_string(kShmMaxRing) + "]");
  if (fds.size() != 2)
    refuse(std::to_string(fds.size()) + " descriptors (2 expected: a memfd and a socket)");
  struct stat st{};
  if (fstat(fds[0].get(), &st) != 0 || !S_ISREG(st.st_mode)) refuse("the first descriptor is not a memory file");
  if (static_cast<uint64_t>(st.st_size) != map_bytes(h.ring_bytes))
    refuse("the memory file has " + std::to_string(st.st_size) + " bytes (" + std::to_string(map_bytes(h.ring_bytes)) +
           " expected for two rings of " + std::to_string(h.ring_bytes) + ")");
  const int seals = fcntl(fds[0].get(), F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK))
    refuse("the memory file is not sealed against shrinking (a memfd with F_SEAL_SHRINK expected)");
  int type = 0, domain = 0;
  socklen_t l1 = sizeof type, l2 = sizeof domain;
  if (getsockopt(fds[1].get(), SOL_SOCKET, SO_TYPE, &type, &l1) != 0 ||
      getsockopt(fds[1].get(), SOL_SOCKET, SO_DOMAIN, &domain, &l2) != 0 || domain != AF_UNIX ||
      type != SOCK_STREAM)
    refuse("the second descriptor is not an AF_UNIX stream socket");
  void* base = mmap(nullptr, map_bytes(h.ring_bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fds[0].get(), 0);
  if (base == MAP_FAILED) refuse("mapping its memory file failed: " + errtext(errno));
  Unmap unmap{base, map_bytes(h.ring_bytes)};
  const uint8_t ok = kShmAccept;
  if (::send(conn.get(), &ok, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1)
    throw Error(ErrorCode::System, peer + ": peer lost: answering its handshake failed: " + errtext(errno));
  auto link = std::make_unique<ShmLink>(std::move(conn), std::move(fds[1]), static_cast<uint8_t*>(base),
                                        h.ring_bytes, true, peer);
  unmap.p = nullptr;
  return link;
}

// ---- connector -----------------------------------------------------------------
std::unique_ptr<Link> shm_connect(const std::string& name, Clock::time_point deadline, size_t ring_bytes) {
  const auto start = Clock::now();
  if (!valid_ring(ring_bytes))
    throw Error(ErrorCode::InvalidArgument, "shm connect to " + name + ": ring size " + std::to_string(ring_bytes) +
                                                " is not a power of two in [" + std::to_string(kShmMinRing) + ", " +
                                                std::to_string(kShmMaxRing) + "]");
  socklen_t alen = 0;
  const sockaddr_un a = abstract_addr(name, &alen);
  auto timeout = [&](const char* what) {
    return Error(ErrorCode::System, "shm connect to " + name + ": timeout after " +
                                        std::to_string(ms_between(start, deadline)) + " ms waiting for " + what);
  };
  Fd s;
  for (;;) {
    s = Fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (s.get() < 0) sys_fail("shm connect to " + name + ": socket", errno);
    if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&a), alen) == 0) break;
    const int e = errno;
    if (e != ECONNREFUSED && e != ENOENT && e != EAGAIN && e != EINTR) sys_fail("shm connect to " + name, e);
    if (Clock::now() >= deadline) throw timeout("a listener");
    // Nobody listens yet (or its backlog is full): try again shortly.
    std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(5), deadline - Clock::now()));
  }
  const std::string peer = "shm pid " + std::to_string(peer_cred(s.get()).pid);

  Fd mem(memfd_create("kinet-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (mem.get() < 0) sys_fail("shm connect to " + name + ": memfd_create", errno);
  if (ftruncate(mem.get(), static_cast<off_t>(map_bytes(ring_bytes))) != 0)
    sys_fail("shm connect to " + name + ": sizing the shared memory", errno);
  if (fcntl(mem.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    sys_fail("shm connect to " + name + ": sealing the shared memory", errno);
  void* base = mmap(nullptr, map_bytes(ring_bytes), PROT_READ | PROT_WRITE, MAP_SHARED, mem.get(), 0);
  if (base == MAP_FAILED) sys_fail("shm connect to " + name + ": mmap", errno);
  Unmap unmap{base, map_bytes(ring_bytes)};
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) sys_fail("shm connect to " + name + ": socketpair", errno);
  Fd mine(sp[0]), theirs(sp[1]);

  ShmHello h{kShmMagic, kShmVersion, 0, ring_bytes};
  iovec iov{&h, sizeof h};
  alignas(cmsghdr) uint8_t cbuf[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf;
  msg.msg_controllen = sizeof cbuf;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(2 * sizeof(int));
  const int pass[2] = {mem.get(), theirs.get()};
  std::memcpy(CMSG_DATA(c), pass, sizeof pass);
  for (;;) {
    if (::sendmsg(s.get(), &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof h)) break;
    const int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) {
      if (poll1(s.get(), POLLOUT, deadline) == 0) throw timeout("room to send the handshake");
      continue;
    }
    if (e == EPIPE || e == ECONNRESET) throw Error(ErrorCode::System, peer + ": peer lost: " + errtext(e));
    sys_fail("shm connect to " + name + ": sending the handshake", e);
  }
  mem.reset();
  theirs.reset();
  if (poll1(s.get(), POLLIN, deadline) == 0) throw timeout("the listener to accept");
  uint8_t ans = 0;
  ssize_t n;
  do n = ::recv(s.get(), &ans, 1, MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n <= 0)
    throw Error(ErrorCode::System, peer + ": peer lost: listener " + name +
                                       " closed the connection (it refused the handshake; its log says why)");
  if (ans != kShmAccept)
    throw Error(ErrorCode::InvalidArgument, peer + ": listener " + name + " answered " + std::to_string(ans) +
                                                " to the handshake (" + std::to_string(kShmAccept) + " expected)");
  auto link = std::make_unique<ShmLink>(std::move(s), std::move(mine), static_cast<uint8_t*>(base), ring_bytes,
                                        false, peer);
  unmap.p = nullptr;
  return link;
}

}  // namespace kinet::fabric
