// kinet transports — the message engine: kinet::Transport over any Channel.
//
// Requester: every posted operation takes one of `depth` places (NoSpace when
// all are taken) and travels as one or more request messages (msg_wire.hpp);
// a transfer larger than the channel's max_message() minus the header goes
// as pieces, and the operation completes once every piece is answered, with
// the status of the first (lowest-addressed) failing piece. Each operation has
// a deadline (options.timeout after posting): past it the peer is lost
// ("timeout after N ms waiting for <op> to <peer>"), every operation in flight
// to it completes TransportRetryExceeded, later ones WrFlushed at once. A
// channel's on_peer_lost does the same with "peer lost: <why>".
// Ordering: requests to one peer carry sequence numbers 1, 2, ...; the target
// executes them in that order (held back and reordered when the channel is
// not ordered()), so a signal is applied after every earlier operation of
// this requester to that target.
//
// Target: a region registry (keys: random non-zero 32 bits, unique in the
// process for its lifetime). Every request is checked before memory is
// touched, in this order, each failure answered and logged once per (peer,
// reason) with a count:
//   sender connected (else dropped: no one to answer), message well formed,
//   sequence number the next one                 -> RemoteInvalidRequest
//   key registered here, [raddr, raddr + length) inside it (no wrap), access:
//   put / put_signal data kRemoteWrite, get kRemoteRead, fetch_add /
//   compare_swap / signals kRemoteAtomic          -> RemoteAccess
//   atomics and signal words 8-byte aligned      -> RemoteInvalidRequest
// A fault while copying is RemoteAccess (RemoteOperation for GPU memory).
// Placement (channels that fetch large bodies after their head: UCX
// rendezvous): a put or put_signal to host memory that passes these checks
// when its head arrives is fetched straight into its target (place_body),
// the region pinned until the fetch ends (its deregistration waits, driving
// the channel; past the timeout the sender is lost, which ends the fetch);
// at delivery the checks run again and the copy is skipped. A request that
// then fails them (its region deregistered meanwhile, a hostile sequence
// number) is answered with that failure, its bytes already written where
// its key allowed them.
// Provider cuda_ipc (MsgOptions::ipc): GPU data travels by IPC reference and
// the target copies it through CUDA IPC, with the checks of ipc_path.hpp.
// Answers are applied only when they name an operation in flight to the
// peer they came from; anything else is dropped and logged.
// Acknowledgements (ordered() channels): a put, signal or put_signal that
// succeeded is not answered on its own: the target owes the requester a
// cumulative ack (msg_wire.hpp), which rides in the ack field of its next
// request to that peer or, when none was queued by then, goes as an Ack
// message from the target's next poll() (so a ping-pong costs one message
// per direction, and a stream of puts one ack per target poll). Failures,
// gets and atomics are answered at once, ahead of any later ack. An ack
// beyond what was sent is dropped and logged ("bad ack").
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kinet/transport.hpp"
#include "transports/channel.hpp"
#include "transports/msg_wire.hpp"

namespace kinet::transport {

class IpcMemory;  // ipc_path.hpp
class IpcPath;

struct MsgOptions {
  std::string name;                              // this side's name in messages
  std::chrono::milliseconds timeout{10000};      // per operation (> 0)
  size_t depth = 1024;                           // operations posted and not yet returned by poll()
  size_t max_held = 4096;                        // !ordered(): messages held per peer for reordering
  size_t max_backlog = 65536;                    // answers queued to one peer before it counts as lost
  // Their payload bytes (a get's answer holds up to a piece): past it the
  // peer counts as lost too (it asks for data faster than it reads it).
  size_t max_backlog_bytes = size_t{1} << 30;
  std::shared_ptr<IpcMemory> ipc;                // non-null: provider cuda_ipc's data path (ipc_path.hpp)
};

// Transport::address() of the engine: "KNE1", u64 node (little-endian), then
// the channel's own address. Parse throws InvalidArgument naming `name`.
std::vector<uint8_t> engine_address(uint64_t node, const std::vector<uint8_t>& channel_address);
void parse_engine_address(const std::vector<uint8_t>& a, const std::string& name, uint64_t* node,
                          std::vector<uint8_t>* channel_address);
uint64_t random_node_id();  // non-zero

struct Registry;  // msg_target.cpp

// The clock of operation deadlines: CLOCK_MONOTONIC_COARSE (a few ms of
// resolution, fine for timeouts of 10 s) because poll() reads it on every
// call and the precise clock costs ~90 ns a read on a VM, ~10% of a 1 us
// round trip.
struct CoarseClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<CoarseClock>;
  static constexpr bool is_steady = true;
  static time_point now() noexcept;
};

class MsgTransport final : public Transport, private ChannelEvents {
 public:
  MsgTransport(std::unique_ptr<Channel> ch, uint64_t node, MsgOptions opt);
  ~MsgTransport() override;

  const char* provider() const override { return ch_->provider(); }
  std::string describe() const override { return ch_->describe(); }
  uint64_t node() const override { return node_; }
  std::vector<uint8_t> address() const override;
  PeerId connect(const std::vector<uint8_t>& address, const std::string& name) override;
  std::unique_ptr<TransportRegion> register_memory(void* addr, size_t bytes, uint32_t access,
                                                   MemoryKind kind = MemoryKind::Host) override;
  uint32_t import_key(PeerId peer, const RemoteKey& key) override;
  void release_key(uint32_t key_id) override;
  Status put(PeerId peer, const void* src, uint64_t bytes, uint32_t key_id, uint64_t raddr, uint64_t cookie) override;
  Status get(PeerId peer, void* dst, uint64_t bytes, uint32_t key_id, uint64_t raddr, uint64_t cookie) override;
  Status fetch_add(PeerId peer, uint64_t* result, uint32_t key_id, uint64_t raddr, uint64_t add,
                   uint64_t cookie) override;
  Status compare_swap(PeerId peer, uint64_t* result, uint32_t key_id, uint64_t raddr, uint64_t compare, uint64_t swap,
                      uint64_t cookie) override;
  Status signal(PeerId peer, uint32_t key_id, uint64_t raddr, SignalOp op, uint64_t value, uint64_t cookie) override;
  Status put_signal(PeerId peer, const void* src, uint64_t bytes, uint32_t key_id, uint64_t raddr, uint32_t sig_key_id,
                    uint64_t sig_raddr, SignalOp op, uint64_t value, uint64_t cookie) override;
  size_t poll(Completion* out, size_t max) override;
  size_t outstanding() const override { return outstanding_; }
  std::string peer_error(PeerId peer) const override;

  // For tests and diagnostics: how many messages were rejected or dropped
  // with a reason starting with `reason` ("unknown key", "out of bounds",
  // "no access", "unaligned", "malformed", "stranger", "sequence",
  // "unknown op", "wrong node", "bad ack", "malformed ack", "too long"), all
  // peers together.
  uint64_t rejected(const std::string& reason) const;
  // For tests and diagnostics, from the polling thread: what this side keeps
  // for `peer` (each bounded: MsgOptions and msg_engine.cpp say by what).
  struct Backlog {
    size_t queued = 0;        // messages waiting for the channel
    size_t answer_bytes = 0;  // payload bytes of the answers among them
    size_t unacked = 0;       // requests sent and kept until an ack or answer
  };
  Backlog backlog(PeerId peer) const;
  Channel& channel() { return *ch_; }
  size_t payload_limit() const { return piece_; }  // largest put / get piece
  const IpcPath* ipc_path() const { return ipc_.get(); }  // cuda_ipc only, else null
  // Bodies place_body() gave an address (a put's payload copied once less;
  // the channel may still take a buffer for one that overlaps a fetch in
  // flight), for tests and diagnostics.
  uint64_t placed() const { return placed_; }

 private:
  struct Op;
  struct Out;
  struct Peer;
  struct Key {
    PeerId peer;
    uint32_t rkey;
  };
  // An imported key's place, read by posts without a lock (check_post):
  // `word` is peer << 32 | rkey; `gen` counts its releases, and an id is
  // place | gen << kKeyPlaceBits, so an id of an earlier generation no
  // longer matches. A place whose generation would wrap is not reused.
  struct KeySlot {
    std::atomic<uint64_t> word{0};
    std::atomic<uint32_t> gen{0};
  };
  static constexpr uint32_t kKeyPlaceBits = 20, kKeyGenMax = (1u << (32 - kKeyPlaceBits)) - 1;

  // ChannelEvents
  void on_message(uint32_t peer, const uint8_t* data, size_t bytes) override;
  void on_message_parts(uint32_t peer, const uint8_t* head, size_t hlen, const uint8_t* body, size_t blen) override;
  uint8_t* place_body(uint32_t peer, const uint8_t* head, size_t hlen, size_t blen,
                      std::shared_ptr<std::atomic<uint32_t>>* pin, uint8_t** word) override;
  void on_stranger(std::string_view who, const uint8_t* data, size_t bytes) override;
  void on_sent(uint64_t token, bool ok) override;
  void on_peer_lost(uint32_t peer, const std::string& why) override;

  Peer* peer_at(PeerId p) const;
  Status check_post(PeerId peer, uint32_t key_id, Key* k);
  Status post(wire::MsgType t, PeerId peer, const void* src, void* dst, uint64_t* result, uint64_t bytes, Key k,
              uint64_t raddr, Key sk, uint64_t sig_raddr, uint8_t sig_op, uint64_t operand, uint64_t compare,
              uint64_t cookie);
  void enqueue(Peer& p, std::unique_ptr<Out> o);
  void flush(Peer& p);
  void finish_piece(uint32_t place, uint32_t piece, Status st);
  void complete(uint32_t slot);
  void fail_peer(Peer& p, Status st, const std::string& why);
  void check_deadlines();
  // A message is head ++ body (body empty when it came in one piece).
  void handle_request(Peer& p, const uint8_t* head, size_t hlen, const uint8_t* body, size_t blen);
  void execute(Peer& p, const wire::Request& r);
  void handle_answer(Peer& p, const uint8_t* head, size_t hlen, const uint8_t* body, size_t blen);
  void handle_ack(Peer& p, const uint8_t* data, size_t bytes);
  void apply_ack(Peer& p, uint64_t ack);  // completes p.unacked up to `ack`
  void owe_ack(Peer& p);
  void send_owed_acks();
  void answer(Peer& p, const wire::Request& r, Status st, uint64_t old, std::vector<uint8_t> data);
  void reject(const std::string& peer, const std::string& reason, const std::string& detail);
  bool local_gpu(const void* p, uint64_t n) const;
  // Messages and map nodes are recycled: once warm, an operation's round
  // trip allocates nothing (the proxy's latency is a few of these).
  std::unique_ptr<Out> new_out();
  void recycle(std::unique_ptr<Out> o);
  void add_piece(uint64_t op_id, uint32_t place, uint32_t piece);
  void erase_piece(std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>>::iterator it);

  std::unique_ptr<Channel> ch_;
  uint64_t node_;
  MsgOptions opt_;
  size_t piece_;  // payload bytes per message
  bool ordered_;  // also: puts, signals and put_signals are acknowledged cumulatively
  std::shared_ptr<Registry> reg_;
  std::unique_ptr<IpcPath> ipc_;  // cuda_ipc (ipc_path.hpp)

  // Peers: chunked storage so connect() can grow it while poll() reads.
  static constexpr size_t kChunk = 256, kMaxChunks = 256;
  static constexpr size_t kSpareNodes = 1024;            // recycled messages / map nodes kept
  static constexpr size_t kSpareOwnedBytes = 64 * 1024;  // a recycled message keeps at most this buffer
  std::unique_ptr<std::unique_ptr<Peer[]>[]> peers_;
  std::atomic<uint32_t> npeers_{0};
  mutable std::mutex err_mu_;  // Peer::error

  // Imported keys: chunked like peers_, so a post reads them without a lock
  // while import_key() (under keys_mu_) appends or reuses a released place.
  static constexpr size_t kKeyChunk = 1024, kMaxKeyChunks = 1024;
  static_assert(kKeyChunk * kMaxKeyChunks == size_t{1} << kKeyPlaceBits);
  std::mutex keys_mu_;
  std::unique_ptr<std::unique_ptr<KeySlot[]>[]> keys_;
  std::atomic<uint32_t> nkeys_{0};
  std::vector<uint32_t> free_keys_;  // released places, under keys_mu_

  std::vector<Op> ops_;            // `depth` places
  std::vector<uint32_t> free_;     // free places
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> pieces_;  // wire op id -> (place, piece)
  std::unordered_map<uint64_t, std::unique_ptr<Out>> in_channel_;       // token -> message the channel holds
  std::deque<Completion> ready_;
  std::vector<std::unique_ptr<Out>> spare_outs_;
  std::vector<decltype(pieces_)::node_type> spare_pieces_;
  std::vector<decltype(in_channel_)::node_type> spare_sent_;
  std::vector<uint32_t> again_;  // poll()'s scratch list of peers still pending
  struct Deadline {
    CoarseClock::time_point at;
    uint32_t place, gen;
  };
  std::deque<Deadline> deadlines_;  // in posting order: the front expires first
  std::vector<uint32_t> pending_;   // peers with queued messages
  std::vector<uint32_t> ack_owed_;  // peers that may be owed an ack (Peer::ack_owed says)
  uint64_t polls_ = 0;              // poll() calls so far
  uint64_t placed_ = 0;             // place_body() answers with an address
  size_t outstanding_ = 0;
  uint64_t next_id_ = 1;

  mutable std::mutex log_mu_;
  std::map<std::string, uint64_t> rejections_;  // "<peer>: <reason>" -> count
};

}  // namespace kinet::transport
