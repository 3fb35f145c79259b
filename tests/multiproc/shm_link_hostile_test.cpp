// The shared-memory link against a hostile peer played here with raw system
// calls (the layout and handshake documented in shm_link.hpp): malformed
// handshakes are refused with their reason and the listener stays usable;
// garbage indices and headers written into the shared rings are
// InvalidArgument, the link then closed, never a crash or an out-of-bounds read.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fabric/shm_link.hpp"
#include "fabric/wire.hpp"
#include "kinet/kinet.hpp"
#include "shm_link_util.hpp"

namespace {
using namespace kinet;
using namespace kinet::fabric;
using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

using kinet::test::in;
std::string hostile_name(const char* what) {
  static int n = 0;
  return std::string("hostile-") + what + "-" + std::to_string(getpid()) + "-" + std::to_string(++n);
}

struct Opts {
  uint32_t magic = kShmMagic;
  uint16_t version = kShmVersion;
  uint16_t reserved = 0;
  uint64_t ring = kShmMinRing;
  uint64_t file_bytes = 0;  // 0: the right size
  bool seal = true;
  bool seal_write = false;  // F_SEAL_WRITE too: nobody may map it writable
  int nfds = 2;             // 0, 1 (memfd only) or 2
  bool pipe_not_socket = false;
  size_t msg_bytes = sizeof(ShmHello);
};

// A connector written with raw calls: it keeps the mapping to scribble on.
struct Raw {
  int sock = -1, mine = -1, theirs = -1, mem = -1;
  uint8_t* base = nullptr;
  size_t map = 0;
  uint64_t ring = 0;
  ~Raw() {
    for (int fd : {sock, mine, theirs, mem})
      if (fd >= 0) close(fd);
    if (base) munmap(base, map);
  }
  uint64_t& u64(int ring_no, size_t off) { return *reinterpret_cast<uint64_t*>(base + ring_no * kShmCtlStride + off); }
  uint8_t* data(int ring_no) { return base + kShmCtlBytes + ring_no * ring; }
  // True when the other side closed the connection.
  bool sees_eof() {
    pollfd p{sock, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1) return false;
    uint8_t b[8];
    return recv(sock, b, sizeof b, MSG_DONTWAIT) == 0;
  }
};

void raw_connect(Raw& r, const std::string& name, const Opts& o) {
  r.sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string path = "kinet-shm/" + name;
  std::memcpy(a.sun_path + 1, path.data(), path.size());
  ASSERT_EQ(connect(r.sock, reinterpret_cast<sockaddr*>(&a), offsetof(sockaddr_un, sun_path) + 1 + path.size()), 0);
  r.ring = o.ring;
  r.map = o.file_bytes ? o.file_bytes : kShmCtlBytes + 2 * o.ring;
  r.mem = memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(ftruncate(r.mem, static_cast<off_t>(r.map)), 0);
  if (o.seal) {
    ASSERT_EQ(fcntl(r.mem, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  }
  if (o.seal_write) {
    ASSERT_EQ(fcntl(r.mem, F_ADD_SEALS, F_SEAL_WRITE), 0);
  }
  void* b = o.seal_write ? mmap(nullptr, r.map, PROT_READ, MAP_PRIVATE, r.mem, 0)
                         : mmap(nullptr, r.map, PROT_READ | PROT_WRITE, MAP_SHARED, r.mem, 0);
  ASSERT_NE(b, MAP_FAILED);
  r.base = static_cast<uint8_t*>(b);
  int sp[2];
  if (o.pipe_not_socket) {
    ASSERT_EQ(pipe2(sp, O_CLOEXEC), 0);
  } else {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  }
  r.mine = sp[0], r.theirs = sp[1];
  ShmHello h{o.magic, o.version, o.reserved, o.ring};
  uint8_t buf[64] = {};
  std::memcpy(buf, &h, sizeof h);
  iovec iov{buf, o.msg_bytes};
  alignas(cmsghdr) uint8_t cbuf[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (o.nfds) {
    m.msg_control = cbuf;
    m.msg_controllen = CMSG_SPACE(o.nfds * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(o.nfds * sizeof(int));
    const int fds[2] = {r.mem, r.theirs};
    std::memcpy(CMSG_DATA(c), fds, o.nfds * sizeof(int));
  }
  ASSERT_EQ(sendmsg(r.sock, &m, MSG_NOSIGNAL), static_cast<ssize_t>(o.msg_bytes));
}

// The listener refuses `o` with `why`, and still accepts a proper connector afterwards.
void expect_refused(const Opts& o, const std::string& why) {
  ShmListener l(hostile_name("hs"));
  Raw r;
  raw_connect(r, l.name(), o);
  try {
    l.accept(in(10s));
    ADD_FAILURE() << "accepted; expected: " << why;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(std::string(e.what()),
              "shm listener " + l.name() + ": connection from pid " + std::to_string(getpid()) + " refused: " + why);
  }
  EXPECT_TRUE(r.sees_eof());
  std::unique_ptr<Link> good;
  std::thread t([&] { good = shm_connect(l.name(), in(10s)); });
  EXPECT_NE(l.accept(in(10s)), nullptr);
  t.join();
  EXPECT_NE(good, nullptr);
}

TEST(ShmLinkHostile, MalformedHandshakesAreRefusedWithTheirReason) {
  Opts o;
  o.magic = 0x12345678;
  expect_refused(o, "handshake magic 305419896 is not KNS1");
  o = {};
  o.version = 2;
  expect_refused(o, "handshake version 2 (this side speaks 1)");
  o = {};
  o.reserved = 1;
  expect_refused(o, "handshake reserved field 1 (must be 0)");
  o = {};
  o.ring = kShmMinRing + 4096;
  o.file_bytes = kShmCtlBytes + 2 * kShmMinRing;
  expect_refused(o, "ring size 2101248 is not a power of two in [2097152, 1073741824]");
  o = {};
  o.ring = kShmMinRing / 2;
  o.file_bytes = kShmCtlBytes + 2 * kShmMinRing;
  expect_refused(o, "ring size 1048576 is not a power of two in [2097152, 1073741824]");
  o = {};
  o.file_bytes = kShmCtlBytes + 2 * kShmMinRing - 1;
  expect_refused(o, "the memory file has 4198399 bytes (4198400 expected for two rings of 2097152)");
  o = {};
  o.seal = false;
  expect_refused(o, "the memory file is not sealed against shrinking (a memfd with F_SEAL_SHRINK expected)");
  o = {};
  o.seal_write = true;
  expect_refused(o, "mapping its memory file failed: Operation not permitted");
  o = {};
  o.nfds = 1;
  expect_refused(o, "1 descriptors (2 expected: a memfd and a socket)");
  o = {};
  o.nfds = 0;
  expect_refused(o, "0 descriptors (2 expected: a memfd and a socket)");
  o = {};
  o.pipe_not_socket = true;
  expect_refused(o, "the second descriptor is not an AF_UNIX stream socket");
  o = {};
  o.msg_bytes = 15;
  expect_refused(o, "a handshake of 15 bytes (16 expected)");
  o = {};
  o.msg_bytes = 17;
  expect_refused(o, "a handshake of 17 bytes (16 expected)");
  o = {};
  o.msg_bytes = 64;
  expect_refused(o, "a handshake of more than 17 bytes (16 expected)");
}

// A listener side linked to a raw peer that will scribble on ring 0 (its
// receive ring) and ring 1's head (its send ring).
struct Hostile {
  ShmListener l{hostile_name("rings")};
  Raw r;
  std::unique_ptr<Link> link;
  Hostile() {
    raw_connect(r, l.name(), Opts{});
    link = l.accept(in(10s));
  }
  // Publishes `bytes` at the ring's current tail (the raw peer's write index `at`).
  void put(uint64_t at, const Bytes& bytes) {
    for (size_t i = 0; i < bytes.size(); ++i) r.data(0)[(at + i) & (r.ring - 1)] = bytes[i];
  }
  std::string recv_error() {
    Bytes f;
    try {
      link->recv(f, in(10s));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      // The link is closed now, and both directions name the violation.
      const std::string prefix = link->peer_name() + ": ";
      const std::string what = e.what();
      const std::string lost = prefix + "peer lost: " + what.substr(std::min(what.size(), prefix.size()));
      try {
        link->recv(f, in(1s));
        ADD_FAILURE() << "recv after the violation did not throw";
      } catch (const Error& e2) {
        EXPECT_EQ(std::string(e2.what()), lost);
      }
      try {
        const Bytes frame(16, 0);  // a frame-sized buffer: the send must fail before it is read
        link->send(frame.data(), frame.size(), in(1s));
        ADD_FAILURE() << "send after the violation did not throw";
      } catch (const Error& e2) {
        EXPECT_EQ(std::string(e2.what()), lost);
      }
      return what;
    }
    ADD_FAILURE() << "no error";
    return "";
  }
};

Bytes header(uint32_t body_len, uint32_t magic = kMagic) {
  Bytes h(16, 0);
  std::memcpy(h.data(), &magic, 4);
  h[4] = kVersion, h[5] = 2;
  std::memcpy(h.data() + 8, &body_len, 4);
  return h;
}

TEST(ShmLinkHostile, WriteIndexBeyondTheRing) {
  for (uint64_t tail : {uint64_t{kShmMinRing} + 1, uint64_t{1} << 63, ~uint64_t{0}}) {
    Hostile h;
    ASSERT_TRUE(h.link);
    h.r.u64(0, kShmTail) = tail;
    EXPECT_EQ(h.recv_error(), h.link->peer_name() + ": the peer's write index " + std::to_string(tail) +
                                  " is outside [0, 2097152] (from what it had published to a full ring)");
  }
}

TEST(ShmLinkHostile, WriteIndexMovedBack) {
  Hostile h;
  const Bytes f = header(16);
  h.put(0, f);
  h.put(16, Bytes(16, 7));
  h.r.u64(0, kShmTail) = 32;
  Bytes got;
  ASSERT_TRUE(h.link->recv(got, in(5s)));
  EXPECT_EQ(got.size(), 32u);
  h.r.u64(0, kShmTail) = 16;
  EXPECT_EQ(h.recv_error(), h.link->peer_name() +
                                ": the peer's write index 16 is outside [32, 2097184] (from what it had published "
                                "to a full ring)");
}

TEST(ShmLinkHostile, GarbageHeaderInTheRing) {
  Hostile h;
  h.put(0, header(0, 0xdeadbeef));
  h.r.u64(0, kShmTail) = 16;
  EXPECT_EQ(h.recv_error(),
            h.link->peer_name() + ": malformed frame: frame header: magic 0xdeadbeef is not KNF1 (0x31464e4b)");
}

TEST(ShmLinkHostile, HeaderLargerThanAnyFrame) {
  Hostile h;
  h.put(0, header(static_cast<uint32_t>(kMaxFrame - 15)));
  h.r.u64(0, kShmTail) = kShmMinRing;  // "published" a whole ring
  EXPECT_EQ(h.recv_error(), h.link->peer_name() +
                                ": malformed frame: frame header: body_len 1052657 exceeds the largest body accepted "
                                "(1052656 = max_frame 1052672 - 16)");
}

TEST(ShmLinkHostile, FrameLongerThanWhatWasPublished) {
  Hostile h;
  h.put(0, header(1000));
  h.r.u64(0, kShmTail) = 16;
  EXPECT_EQ(h.recv_error(),
            h.link->peer_name() + ": a frame of 1016 bytes but only 16 published (frames are published whole)");
}

TEST(ShmLinkHostile, ReadIndexAheadOfOurWrites) {
  for (uint64_t head : {uint64_t{5}, ~uint64_t{0}}) {
    Hostile h;
    h.r.u64(1, kShmHead) = head;
    const Bytes f = header(0);
    try {
      h.link->send(f.data(), f.size(), in(5s));
      ADD_FAILURE() << "send did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_EQ(std::string(e.what()), h.link->peer_name() + ": the peer's read index " + std::to_string(head) +
                                           " is outside [0, 0] (from what it had read to what we wrote)");
    }
  }
}

TEST(ShmLinkHostile, ReadIndexMovedBack) {
  Hostile h;
  Bytes f = header(48);
  f.resize(64);
  h.link->send(f.data(), f.size(), in(5s));
  h.r.u64(1, kShmHead) = 64;  // the raw peer read it
  h.link->send(f.data(), f.size(), in(5s));
  h.r.u64(1, kShmHead) = 63;
  try {
    h.link->send(f.data(), f.size(), in(5s));
    ADD_FAILURE() << "send did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(std::string(e.what()), h.link->peer_name() + ": the peer's read index 63 is outside [64, 128] (from "
                                                           "what it had read to what we wrote)");
  }
}

TEST(ShmLinkHostile, AFloodOfWakeUpsIsHarmless) {
  Hostile h;
  const uint8_t b = 1;
  int sent = 0;
  while (sent < 100000 && send(h.r.sock, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1) ++sent;
  ASSERT_GT(sent, 0);
  Bytes f;
  const auto t0 = Clock::now();
  EXPECT_FALSE(h.link->recv(f, t0 + 200ms));  // nothing published: false at the deadline
  EXPECT_LT(Clock::now() - t0, 5s);
  // A real frame still arrives after the flood.
  h.put(0, header(0));
  h.r.u64(0, kShmTail) = 16;
  EXPECT_TRUE(h.link->recv(f, in(5s)));
}

// A listener written with raw calls: the connector's side of the handshake.
struct RawListener {
  int fd = -1;
  explicit RawListener(const std::string& name) {
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string path = "kinet-shm/" + name;
    std::memcpy(a.sun_path + 1, path.data(), path.size());
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), offsetof(sockaddr_un, sun_path) + 1 + path.size()), 0);
    EXPECT_EQ(listen(fd, 4), 0);
  }
  ~RawListener() { close(fd); }
};

// Runs shm_connect against a raw listener that answers `answer` (or, when
// negative, closes without answering); returns the connector's error.
std::string connect_to_raw(int answer, ErrorCode want) {
  const std::string name = hostile_name("rawl");
  RawListener rl(name);
  std::string msg = "no error";
  std::thread t([&] {
    try {
      shm_connect(name, in(10s));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), want) << e.what();
      msg = e.what();
    }
  });
  const int c = accept4(rl.fd, nullptr, nullptr, SOCK_CLOEXEC);
  EXPECT_GE(c, 0);
  uint8_t buf[64];
  alignas(cmsghdr) uint8_t cbuf[CMSG_SPACE(4 * sizeof(int))];
  iovec iov{buf, sizeof buf};
  msghdr m{};
  m.msg_iov = &iov, m.msg_iovlen = 1, m.msg_control = cbuf, m.msg_controllen = sizeof cbuf;
  EXPECT_EQ(recvmsg(c, &m, MSG_CMSG_CLOEXEC), static_cast<ssize_t>(sizeof(ShmHello)));
  for (cmsghdr* h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))  // the connector's memfd and socket
    for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
      close(fd);
    }
  if (answer >= 0) {
    const uint8_t b = static_cast<uint8_t>(answer);
    EXPECT_EQ(send(c, &b, 1, MSG_NOSIGNAL), 1);
  }
  close(c);
  t.join();
  return msg;
}

TEST(ShmLinkHostile, ConnectorRefusesAWrongAnswerAndSeesARefusal) {
  const std::string pid = "shm pid " + std::to_string(getpid());
  std::string m = connect_to_raw('X', ErrorCode::InvalidArgument);
  EXPECT_NE(m.find(pid + ": listener hostile-rawl-"), std::string::npos) << m;
  EXPECT_NE(m.find(" answered 88 to the handshake (75 expected)"), std::string::npos) << m;
  m = connect_to_raw(-1, ErrorCode::System);
  EXPECT_NE(m.find(pid + ": peer lost: listener hostile-rawl-"), std::string::npos) << m;
  EXPECT_NE(m.find(" closed the connection (it refused the handshake; its log says why)"), std::string::npos) << m;
}

}  // namespace
