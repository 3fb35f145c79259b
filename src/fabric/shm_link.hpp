// kinet fabric — the shared-memory Link between two processes of one host.
//
// One shared mapping (a sealed memfd: it can't be shrunk under the other
// side) holds two single-producer single-consumer byte rings of whole frames,
// one per direction. The connector creates it and passes it, with one end of
// a socket pair, over an abstract AF_UNIX SOCK_SEQPACKET connection to the
// listener. The two sockets carry only wake-ups and liveness:
//   the connection   "data" wake-ups: a producer that published a frame while
//                    the consumer announced it sleeps sends one byte;
//   the socket pair  "space" wake-ups, the other way round.
// Each side's receiving thread reads only the first, its sending thread only
// the second, so a wake-up is never taken by the wrong thread. When the peer
// dies the kernel closes both: every wait sees EOF at once ("peer lost").
//
// Nothing in the mapping is trusted: indices are checked against the ring
// size on every read (a consumer keeps its own read index, a producer its own
// write index), a frame header is copied out and checked (frame_body_len)
// before its length is used, and a frame is copied out before anyone decodes
// it. A peer that breaks the rules gets InvalidArgument and the link closes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fabric/link.hpp"

namespace kinet::fabric {

// ---- the shared layout (also what a test playing a hostile peer writes) ----
//   [0, 4096)                    control: ring r's at r * kShmCtlStride
//   [4096, 4096 + ring)          ring 0 data: connector -> listener
//   [4096 + ring, 4096 + 2 ring) ring 1 data: listener -> connector
// A ring's control: u64 indices and u32 flags, each on its own cache line.
// Indices are free-running byte counts; the byte at index i is at i % ring.
inline constexpr size_t kShmCtlBytes = 4096;
inline constexpr size_t kShmCtlStride = 256;
inline constexpr size_t kShmTail = 0;            // u64, written by the producer: bytes published
inline constexpr size_t kShmHead = 64;           // u64, written by the consumer: bytes consumed
inline constexpr size_t kShmConsumerWaits = 128; // u32, 1 while the consumer sleeps on "data"
inline constexpr size_t kShmProducerWaits = 192; // u32, 1 while the producer sleeps on "space"
inline constexpr size_t kShmMinRing = size_t{2} << 20;  // a power of two >= kMaxFrame
inline constexpr size_t kShmMaxRing = size_t{1} << 30;
inline constexpr size_t kShmDefaultRing = size_t{4} << 20;

// The connector's first message (16 bytes, little-endian, with SCM_RIGHTS
// [memfd, socket]); the listener answers one byte kShmAccept or closes.
inline constexpr uint32_t kShmMagic = 0x31534e4b;  // "KNS1"
inline constexpr uint16_t kShmVersion = 1;
struct ShmHello {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;    // 0
  uint64_t ring_bytes;  // per direction: a power of two in [kShmMinRing, kShmMaxRing]
};
static_assert(sizeof(ShmHello) == 16);
inline constexpr uint8_t kShmAccept = 'K';

// Listens on the abstract AF_UNIX name "kinet-shm/<name>" (per network
// namespace; gone with the listener). Throws InvalidArgument for a name that
// is empty or longer than 90 bytes, System when the name is taken.
class ShmListener {
 public:
  explicit ShmListener(const std::string& name);
  ~ShmListener();
  ShmListener(const ShmListener&) = delete;
  ShmListener& operator=(const ShmListener&) = delete;

  // Accepts the next connector and completes its handshake by `deadline`.
  // Returns nullptr when nobody connected by then (not an error: the caller
  // polls). A connector of another user, or one whose handshake is malformed
  // (wrong magic, version or ring size, a memfd that is not sealed against
  // shrinking or has the wrong size, missing descriptors) is refused: the
  // connection is closed and InvalidArgument names its pid and the reason;
  // the listener stays usable. A connector silent past `deadline`: System
  // timeout form; one gone before the answer: System "peer lost". Either way
  // the caller may call accept() again.
  std::unique_ptr<Link> accept(Clock::time_point deadline);
  const std::string& name() const { return name_; }
  // The listening socket (non-blocking): readable when a connector waits;
  // for a caller that polls it with other descriptors before accept().
  int fd() const { return fd_; }

 private:
  std::string name_;
  int fd_ = -1;
};

// Connects to listener `name` (retrying while nobody listens yet) and hands
// it a new mapping of two rings of `ring_bytes` each. Throws InvalidArgument
// for a bad ring size or name, System in the timeout form when no listener
// accepted by `deadline`, System "peer lost" when the listener refused.
std::unique_ptr<Link> shm_connect(const std::string& name, Clock::time_point deadline,
                                  size_t ring_bytes = kShmDefaultRing);

}  // namespace kinet::fabric
