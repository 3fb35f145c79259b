// kinet — bootstrap: processes ("ranks") find each other from a unique ID and
// exchange small control-path blobs (QP info, memory keys) over TCP.
//
//   root process:   UniqueId id = UniqueId::create();   // starts the rendezvous
//                   ship id.to_string() to every rank (env var, file, MPI_Bcast)
//   every rank:     auto bs = Bootstrap::init(id, rank, nranks);
//                   auto all = bs->allgather(&mine, sizeof mine);
//
// Or let kinet ship the id: Bootstrap::from_mpi() (under mpirun),
// from_store(store, rank, nranks, prefix) (a key-value store every rank
// shares: kinet/store.hpp, e.g. a torch process group's store), or
// from_nccl(comm) (an existing NCCL communicator: its rank, size and an
// ncclBroadcast of the id).
//
// Environment (read by the process that calls create()/init()):
//   KINET_SOCKET_IFNAME         interfaces to listen on: comma-separated name
//                               prefixes, "=name" an exact name, a leading "^"
//                               excludes the list. Unset: the first up,
//                               non-loopback interface (IPv4 before IPv6),
//                               loopback as the last resort.
//   KINET_SOCKET_FAMILY         AF_INET or AF_INET6: only that family (unset: both)
//   KINET_BOOTSTRAP_PORT        port of the root's listener (unset/0: ephemeral)
//   KINET_BOOTSTRAP_TIMEOUT_MS  default bound of init and of each operation
//                               (30000; above 30 days: 30 days)
//   KINET_BOOTSTRAP_MAX_FRAME   largest blob a peer may send, bytes (1 GiB).
//                               Messages from one peer not yet received here
//                               may hold at most 4 times this (at least
//                               64 MiB); past it that peer counts as lost.
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

// NCCL's and CUDA's handle types, declared so that ncclComm_t and
// cudaStream_t convert without NCCL's or CUDA's headers.
struct ncclComm;
struct CUstream_st;

namespace kinet {

class Store;

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
  // KINET_BOOTSTRAP_TIMEOUT_MS, default 30000; above 30 days (2^64-1
  // included) it is 30 days, with a warning.
  static std::chrono::milliseconds default_timeout();
  // KINET_BOOTSTRAP_MAX_FRAME, default 1 GiB.
  static uint64_t max_frame();

  // Registers with the root of `id`, receives every rank's address and
  // connects the full mesh (rank i connects to every j < i and accepts every
  // j > i). `timeout` bounds the whole of init and, afterwards, each call
  // below; above 30 days it counts as 30 days (no deadline overflows). Collective: every rank 0..nranks-1 must call it with the same id
  // and nranks. Throws InvalidArgument (bad id, rank or nranks; refused by
  // the root) or System (timeout naming the missing ranks, peer lost).
  static std::unique_ptr<Bootstrap> init(const UniqueId& id, int rank, int nranks,
                                         std::chrono::milliseconds timeout = default_timeout());
  // Under mpirun (defined in the optional kinet_mpi library; link it): rank 0
  // of MPI_COMM_WORLD creates the UniqueId, MPI_Bcast sends it, then init().
  // MPI must be initialised. Throws BadState when it is not.
  static std::unique_ptr<Bootstrap> from_mpi(std::chrono::milliseconds timeout = default_timeout());

  // From a key-value store every rank shares (kinet/store.hpp), with ranks
  // and size known from elsewhere (a torch process group, a launcher's
  // environment). Rank 0 creates the UniqueId and sets it under
  // store_key(prefix), with where and when it was made; every other rank
  // gets it, waiting at most `timeout`; then init() (bounded by `timeout`
  // again). Once rank 0's init returned (every rank has read the key) rank 0
  // erases the key. When rank 0 fails (create or init) it sets a record of
  // its error instead, so the others fail at once with rank 0's reason.
  // Prefixes are per job: never reuse one an earlier job used with this
  // store. A stale id a dead process on this host left (same boot id and PID
  // namespace, that process gone) is skipped and the rank keeps waiting for
  // a fresh one; a stale id from another host can't be told apart, and then
  // init fails (root unreachable), the error naming the key and who wrote it.
  // Throws InvalidArgument (rank/nranks out of range, nranks 1..2^20 as for
  // init, checked before anything starts; the key holds no
  // record of this version; rank 0 published for another nranks), System
  // (timeout naming the key and the store; rank 0's failure; a stale id
  // only), and what the store and init() throw, prefixed with this rank.
  static std::unique_ptr<Bootstrap> from_store(Store& store, int rank, int nranks, const std::string& prefix,
                                               std::chrono::milliseconds timeout = default_timeout());
  // The key from_store uses: prefix + "/kinet_unique_id" ("kinet_unique_id"
  // for an empty prefix).
  static std::string store_key(const std::string& prefix);

  // From an NCCL communicator the caller already has (ncclComm_t; a blocking
  // or non-blocking one, initialised): rank and size are
  // ncclCommUserRank / ncclCommCount; rank 0 creates the UniqueId and an
  // ncclBroadcast over `comm` carries it (136 bytes through a buffer on the
  // comm's GPU, on `stream`; null: a stream of kinet's own); then init().
  // Collective over `comm`, like any NCCL collective: every rank calls it,
  // and no other collective may run on `comm` at the same time. The wait for
  // the broadcast is bounded by `timeout` (polling ncclCommGetAsyncError
  // too); past it the broadcast may still be pending, so its small GPU and
  // pinned buffers are left allocated (abort the comm to end it).
  // NCCL is loaded at run time, never linked: $KINET_NCCL_LIB when set, else
  // the NCCL already loaded in this process (symbols found through
  // RTLD_DEFAULT), else libnccl.so.2. It must be the library that created
  // `comm`. The CUDA runtime is loaded with dlopen too.
  // Throws InvalidArgument (null comm), NotSupported (no NCCL, a symbol
  // missing, no CUDA runtime or GPU), System (an NCCL or CUDA call failed,
  // naming it and NCCL's reason; the timeout; rank 0 could not create the
  // id), and what init() throws.
  static std::unique_ptr<Bootstrap> from_nccl(::ncclComm* comm, ::CUstream_st* stream = nullptr,
                                              std::chrono::milliseconds timeout = default_timeout());

  ~Bootstrap();  // closes every connection; peers see "peer lost" on later calls
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const;
  int size() const;
  std::chrono::milliseconds timeout() const;

  // Calls below are collective where stated, bounded by timeout(), and must
  // not be made from two threads at once: the bound holds even while other
  // peers keep sending. After a failure the connections to peers that were
  // lost stay failed; those to other peers stay usable. A send (or
  // allgather) that times out after part of its frame went out closes that
  // connection: the stream can't be resumed, so the peer counts as lost
  // ("timeout in the middle of a frame") on both sides.

  // Collective: every rank contributes `bytes` bytes (may differ per rank,
  // 0 allowed); returns every rank's blob, indexed by rank (its own included).
  // Throws InvalidArgument, before anything is sent, for more bytes than
  // KINET_BOOTSTRAP_MAX_FRAME (as send does).
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
