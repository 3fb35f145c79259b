// kinet bootstrap — internal: addresses, interface choice, bounded socket I/O,
// the handshake and the frame format shared by the root and the ranks.
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace kinet::bs {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
// Milliseconds until `d` for poll(): 0 when passed, capped at INT_MAX.
int ms_left(Deadline d);

// A socket address and its printable form ("192.0.2.2:41234", "[::1]:5").
struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  std::string str() const;
  uint16_t port() const;
};

// An address as it travels (fixed 32 bytes, host order; family 0 = none).
struct WireAddr {
  uint16_t family;
  uint16_t port;
  uint32_t scope_id;
  uint8_t addr[16];
  uint8_t reserved[8];
};
static_assert(sizeof(WireAddr) == 32);
WireAddr to_wire(const SockAddr& a);
// Throws InvalidArgument when the family is neither AF_INET nor AF_INET6.
SockAddr from_wire(const WireAddr& w, const char* what);

// True when interface `name` is selected by a KINET_SOCKET_IFNAME value:
// comma-separated prefixes, "=name" exact, a leading "^" excludes the list.
bool ifname_selected(const std::string& spec, const std::string& name);
struct Interface {
  std::string name;
  SockAddr addr;  // port 0
};
// The interface to listen on (see bootstrap.hpp). Throws NotFound naming the
// variable and the interfaces seen when nothing matches.
Interface pick_interface();

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { int f = fd_; fd_ = -1; return f; }
  void reset();
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Binds a non-blocking listener to `a`'s address and `port` (0: ephemeral).
Fd listen_on(const SockAddr& a, uint16_t port, SockAddr* bound);
// Connects to `to`, retrying refused or unreachable attempts until `d`.
// Returns a blocking socket with TCP_NODELAY. Throws System naming `what`.
Fd connect_to(const SockAddr& to, Deadline d, const std::string& what);
void set_nonblocking(int fd);
// Writes all of `buf` (MSG_NOSIGNAL, EINTR and EAGAIN handled), bounded by
// `d`. Throws System ("timeout ... <what>" or "<what>: <errno text>").
void write_all(int fd, const void* buf, size_t n, Deadline d, const std::string& what);
// Reads exactly n bytes bounded by `d`. Returns false on end of stream before
// n bytes (nothing consumed is reported); throws System on timeout or error.
bool read_all(int fd, void* buf, size_t n, Deadline d, const std::string& what);

// ---- handshake ------------------------------------------------------------
enum class HelloKind : uint16_t { ToRoot = 1, ToPeer = 2, RootReply = 3 };
// Root's answer (Hello::status of a RootReply).
enum class RootStatus : uint32_t {
  Ok = 0,
  WrongSecret = 1,
  RankOutOfRange = 2,
  NranksMismatch = 3,
  DuplicateRank = 4,
  Timeout = 5,  // followed by the table; missing ranks have family 0
};
const char* root_status_name(RootStatus s);

struct Hello {
  static constexpr uint32_t kMagic = 0x4f4c4548;  // "HELO"
  static constexpr uint16_t kVersion = 1;
  uint32_t magic;
  uint16_t version;
  uint16_t kind;        // HelloKind
  uint32_t rank;
  uint32_t nranks;
  uint32_t timeout_ms;  // ToRoot: the rank's bound; the root gives up within it
  uint32_t status;      // RootReply: RootStatus
  uint8_t secret[16];
  WireAddr addr;        // ToRoot: the rank's listener
};
static_assert(sizeof(Hello) == 72);

// Accepts connections on non-blocking `lfd` and reads one Hello from each
// without letting a slow or silent one hold up the others; calls
// on_hello(fd, peer address, hello) for each complete one (the callback keeps
// the fd by moving it out; an fd left in place is closed). Garbage (wrong
// magic or version) and connections that close early are dropped with a
// warning naming `who` and the peer. Accepted sockets get TCP_NODELAY (as
// connect_to's). `d` is re-read on every wake-up (the
// callback may move it). Returns true once done() holds, false
// when `d` passes or `stop_fd` (if >= 0) becomes readable.
bool accept_hellos(int lfd, const Deadline& d, int stop_fd, const std::string& who,
                   const std::function<void(Fd&, const SockAddr&, const Hello&)>& on_hello,
                   const std::function<bool()>& done);

// ---- frames after the handshake --------------------------------------------
enum class FrameKind : uint16_t { User = 1, Collective = 2 };
struct FrameHeader {
  uint16_t kind;   // FrameKind
  uint16_t flags;  // 0
  uint32_t tag;
  uint64_t len;    // payload bytes that follow
};
static_assert(sizeof(FrameHeader) == 16);

struct Msg {
  FrameKind kind;
  uint32_t tag;
  std::vector<uint8_t> data;
};

// Reassembles frames from a byte stream. Memory grows with the bytes that
// actually arrived, never with what a header claims, and a header claiming
// more than `max` bytes is refused.
class FrameReader {
 public:
  explicit FrameReader(uint64_t max) : max_(max) {}
  // Appends every completed frame to `out`. False with `why` set on a
  // malformed header (the stream is then unusable).
  bool feed(const uint8_t* p, size_t n, std::deque<Msg>& out, std::string& why);
  bool mid_frame() const { return hdr_got_ > 0; }

  enum class Pump { WouldBlock, Eof, Malformed, Error };
  // Reads what non-blocking `fd` holds now, at most 1 MiB a call, and feeds
  // it (WouldBlock also when the budget ran out: poll reports the rest).
  Pump pump(int fd, std::deque<Msg>& out, std::string& why);

 private:
  uint64_t max_;
  uint8_t hdr_[sizeof(FrameHeader)]{};
  size_t hdr_got_ = 0;  // 0 .. 16; 16 = reading the body
  FrameHeader h_{};
  std::vector<uint8_t> body_;
};

}  // namespace kinet::bs
