// kinet — bootstrap: processes ("ranks") find each other from a unique ID and
// exchange small control-path blobs (QP info, memory keys) over TCP.
//
//   root process:   UniqueId id = UniqueId::create();   // starts the rendezvous
//                   ship id.to_string() to every rank (env var, file, MPI_Bcast)
//   every rank:     auto bs = Bootstrap::init(id, rank, nranks);
//                   auto all = bs->allgather(&mine, sizeof mine);
//
// Environment (read by the process that calls create()/init()):
//   KINET_SOCKET_IFNAME         interfaces to listen on: comma-separated name
//                               prefixes, "=name" an exact name, a leading "^"
//                               excludes the list. Unset: the first up,
//                               non-loopback interface (IPv4 before IPv6),
//                               loopback as the last resort.
//   KINET_SOCKET_FAMILY         AF_INET or AF_INET6: only that family (unset: both)
//   KINET_BOOTSTRAP_PORT        port of the root's listener (unset/0: ephemeral)
//   KINET_BOOTSTRAP_TIMEOUT_MS  default bound of init and of each operation (30000)
//   KINET_BOOTSTRAP_MAX_FRAME   largest blob a peer may send, bytes (1 GiB)
//
// Security model: the 16-byte secret authenticates ranks to the root and to
// each other (a connection presenting another secret is refused and logged);
// the traffic is neither encrypted nor integrity-protected.
//
// Errors: every failure throws kinet::Error naming this rank, the peer rank
// (and its address where known) and what was waited for:
//   System           timeouts ("timeout after 2000 ms ..."), a peer that closed
//                    its connection ("peer lost"), a socket call that failed
//   InvalidArgument  a malformed UniqueId, rank/nranks out of range, a peer
//                    index out of range, a malformed frame from a peer, a
//                    rendezvous the root refused (wrong secret, duplicate rank)
//   NotFound         no interface matches KINET_SOCKET_IFNAME
#pragma once
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kinet/kinet.hpp"

namespace kinet {

// Root address and secret of one job. Trivially copyable, fixed size: it can
// be broadcast as raw bytes (MPI_Bcast) or as text (to_string, 256 hex digits).
struct UniqueId {
  static constexpr uint32_t kMagic = 0x4942534b;  // "KSBI"
  static constexpr uint16_t kVersion = 1;
  uint32_t magic;
  uint16_t version;
  uint16_t family;          // AF_INET or AF_INET6 (host order)
  uint16_t port;            // host order
  uint16_t reserved0;
  uint32_t scope_id;        // IPv6 link-local scope; 0 otherwise
  uint8_t addr[16];         // IPv4 in the first 4 bytes, or IPv6
  uint8_t secret[16];       // from getrandom(2)
  uint8_t reserved[80];     // zero

  // Picks the interface (KINET_SOCKET_IFNAME), binds a listener
  // (KINET_BOOTSTRAP_PORT) and starts the rendezvous in a background thread
  // of this process. The rendezvous ends once every rank of the job has
  // registered and received the rank table, or when the first rank's timeout
  // expires (the waiting ranks are then told which ranks are missing); it
  // also ends at process exit. This process must live until init() returned
  // on every rank. Throws NotFound (no interface) or System.
  static UniqueId create();
  // Stops the rendezvous this process started for `id` (create()), when it is
  // certain that no rank will use it: a rank that registers or waits there
  // afterwards fails to init(). Returns false when this process runs no
  // rendezvous for `id` (another process's, an ended one, or cancelled).
  static bool cancel(const UniqueId& id);

  std::string to_string() const;  // 256 lower-case hex digits
  // Throws InvalidArgument: wrong length, a non-hex digit, or validate().
  static UniqueId from_string(std::string_view hex);
  // Throws InvalidArgument naming the bad field: magic, version, family, port.
  void validate() const;
  std::string address_string() const;  // "192.0.2.2:41234", "[fd00::2]:41234"
};
static_assert(sizeof(UniqueId) == 128);

class Bootstrap {
 public:
  // KINET_BOOTSTRAP_TIMEOUT_MS, default 30000.
  static std::chrono::milliseconds default_timeout();
  // KINET_BOOTSTRAP_MAX_FRAME, default 1 GiB.
  static uint64_t max_frame();

  // Registers with the root of `id`, receives every rank's address and
  // connects the full mesh (rank i connects to every j < i and accepts every
  // j > i). `timeout` bounds the whole of init and, afterwards, each call
  // below. Collective: every rank 0..nranks-1 must call it with the same id
  // and nranks. Throws InvalidArgument (bad id, rank or nranks; refused by
  // the root) or System (timeout naming the missing ranks, peer lost).
  static std::unique_ptr<Bootstrap> init(const UniqueId& id, int rank, int nranks,
                                         std::chrono::milliseconds timeout = default_timeout());
  // Under mpirun (defined in the optional kinet_mpi library; link it): rank 0
  // of MPI_COMM_WORLD creates the UniqueId, MPI_Bcast sends it, then init().
  // MPI must be initialised. Throws BadState when it is not.
  static std::unique_ptr<Bootstrap> from_mpi(std::chrono::milliseconds timeout = default_timeout());

  ~Bootstrap();  // closes every connection; peers see "peer lost" on later calls
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const;
  int size() const;
  std::chrono::milliseconds timeout() const;

  // Calls below are collective where stated, bounded by timeout(), and must
  // not be made from two threads at once. After a failure the connections to
  // peers that were lost stay failed; those to other peers stay usable.

  // Collective: every rank contributes `bytes` bytes (may differ per rank,
  // 0 allowed); returns every rank's blob, indexed by rank (its own included).
  std::vector<std::vector<uint8_t>> allgather(const void* mine, size_t bytes);
  // Collective: returns once every rank has entered the barrier.
  void barrier();
  // Point to point. send() returns once the blob is handed to the kernel (it
  // does not wait for recv). Blobs from one peer with one tag arrive in order;
  // different tags may be received in any order. peer != rank().
  void send(int peer, uint32_t tag, const void* data, size_t bytes);
  void send(int peer, uint32_t tag, const std::vector<uint8_t>& blob) {
    send(peer, tag, blob.data(), blob.size());
  }
  std::vector<uint8_t> recv(int peer, uint32_t tag);

  struct Impl;

 private:
  explicit Bootstrap(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kinet
