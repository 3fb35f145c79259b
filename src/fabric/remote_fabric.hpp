// kinet emu — the cross-process fabric: software NICs of different processes
// (and hosts) reach each other's QPs over TCP links, or over shared-memory
// links (fabric/shm_link.hpp) between processes of one host (endpoint.hpp
// says what "one host" means).
//
// What travels (fabric/wire.hpp): one Request per responder operation or
// chunk of at most kMaxChunk bytes (WRITE carries its payload, read from the
// requester's memory when the request is started; READ asks for bytes;
// atomics carry their operands; a pass's Requests leave in one send:
// RemotePeer::start), one Response per Request, in the order asked
// (syndrome, reason, READ data, the atomic's old value; the answers of
// unsignalled WRITEs may be held back up to ack_delay() and sent together:
// wire.hpp, kAckLater; a signalled NOP behind them sends a Flush to have
// them now). Where results land: READ data and old values are written into
// the requester's memory by its engine when the Response is taken, after
// re-checking the local key.
//
// Links: a process that opened a cross-process NIC runs one listener per
// transport its NICs use (a TCP socket; an abstract AF_UNIX name
// "kinet-shm/<process id in hex>"), started with the first NIC that needs it. A
// requester opens one outbound link per peer process (endpoint) at the first
// to_rtr towards it, shared by all its QPs to that process; Requests go out on
// it and Responses come back on it. Each accepted (inbound) link has a thread
// that executes the peer's Requests in order against this process's NICs
// (the responder checks of the in-process fabric, under memory_guard()) and
// sends the Responses. Splitting the roles by direction means the thread that
// reads Responses never waits to send, so two processes writing to each other
// can't deadlock on full socket buffers.
//
// Faults: EOF or reset on a link, a send that can't complete, or a Response
// not arriving within KINET_EMU_PEER_TIMEOUT_MS loses the peer: every pending
// and later Call on that link completes with kSynTransportRetry and the reason;
// a later to_rtr to that endpoint connects anew. An inbound link that fails is
// closed; the Requests its peer still had in flight are dropped with it.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fabric/endpoint.hpp"
#include "fabric/link.hpp"
#include "fabric/shm_link.hpp"
#include "fabric/wire.hpp"

namespace kinet::emu {

struct Nic;

// One Request in flight, and its answer once `done` (read with acquire).
struct Call {
  std::atomic<bool> done{false};
  uint64_t seq = 0;           // the Request's
  bool lost = false;          // the link failed: `why` is the link's reason
  uint8_t syndrome = 0;
  std::string why;
  uint64_t old_value = 0;
  // The Response frame, READ data at `data`; or, up to
  // RemotePeer::kInlineData, a copy of the data alone.
  std::vector<uint8_t> frame;
  const uint8_t* data = nullptr;
  uint64_t len = 0;
  fabric::Clock::time_point sent;
  bool later = false;  // sent with kAckLater: its answer may come ack_delay() late
};

// An outbound link to one peer process.
class RemotePeer {
 public:
  RemotePeer(std::unique_ptr<fabric::Link> link, std::string endpoint, uint64_t timeout_ms);
  ~RemotePeer();  // closes the link, joins the receiver
  RemotePeer(const RemotePeer&) = delete;
  // How long a WRITE's `rq.payload` stays readable and unchanged.
  enum class Payload {
    UntilReturn,  // until start() returns (a staging buffer the caller reuses)
    // Until the Request leaves: bytes of a registered host region, whose
    // deregistration calls RemoteFabric::send_queued() (or flushes this peer)
    // before it returns. Taken only over a link that kernel_reads_body();
    // any other link treats it as UntilReturn.
    UntilSent,
  };
  // Queues `rq` (its seq is assigned here) and returns its Call. Requests
  // leave in batches, one send(2) for all queued so far: at flush(), when the
  // queue reaches kSendBatchBytes, and with a WRITE whose payload is sent in
  // place (kGatherBytes or more): with Payload::UntilReturn it leaves now,
  // with UntilSent its payload joins the batch where it is (one send(2) for
  // up to kGatherBatchBytes in all).
  // Every caller flush()es before it waits for an answer or lets go of the
  // QP (the engine: at the end of each pass, unless the pass started no
  // Request of a signalled WQE while an answer of the QP is on its way:
  // QpRunner::step_remote; at teardown and reset in any case). Never throws
  // on a link fault: the Call then comes back done and lost (at the next
  // flush() for a queued one). May block up to the peer timeout while the
  // peer does not read.
  std::shared_ptr<Call> start(fabric::Request rq, Payload life = Payload::UntilReturn);
  // Sends what start() queued (nothing: no syscall). Never throws.
  void flush();
  // The newest seq that has left (or was completed lost): a Call with a
  // seq at most this is pending at the peer, or done.
  uint64_t sent_through() const { return sent_through_.load(std::memory_order_acquire); }
  // Whether start() queued Requests that have not left yet.
  bool has_queued() const { return has_queued_.load(std::memory_order_acquire); }
  // A queue this size or larger leaves at once.
  static constexpr size_t kSendBatchBytes = 64 * 1024;
  // WRITE payloads from this size on leave in place (Link::send_parts), with
  // the queue; smaller ones are copied into the queue, a copy that costs less
  // than a send(2) per Request (write_bw at 4 KiB with a doorbell per 32
  // WQEs: docs/PERFORMANCE.md section 4).
  static constexpr uint64_t kGatherBytes = 16 * 1024;
  // A batch with payloads in place leaves once it holds this many bytes
  // (a send of at most kMaxFrame bytes: Link::send).
  static constexpr size_t kGatherBatchBytes = 512 * 1024;
  // Payloads queued in place (Payload::UntilSent) by every peer of this
  // process, not yet sent: a deregistration with none to wait for costs no
  // lock.
  static bool any_in_place() { return in_place_total_.load(std::memory_order_acquire) != 0; }
  const std::string& endpoint() const { return endpoint_; }
  // Whether a WRITE's payload of kGatherBytes or more may come straight from
  // a registered region (Link::kernel_reads_body: the kernel reads it, so a
  // page unmapped under the registration loses the link, never the process);
  // otherwise the caller copies it out first with a guarded copy.
  bool payload_in_place() const { return link_->kernel_reads_body(); }
  bool lost() const { return lost_.load(std::memory_order_acquire); }
  // Loses the peer (if not yet): pending Calls complete lost with `why`.
  void fail(const std::string& why);
  // Hands a taken Call back (done, its answer read): its Response frame
  // buffer is reused by the receiver (no allocation and page faults per READ
  // answer) and the Call by start() (none per Request), when no one else
  // holds it.
  void recycle(std::shared_ptr<Call>&& c);
  // Bytes of frame buffers the spares hold: at most kMaxSpareFrames frames
  // and kInlineData per spare Call, whatever the number of spare Calls.
  size_t spare_frame_bytes();
  static constexpr size_t kMaxSpareFrames = 8;
  // READ data up to this size is copied into the Call's own buffer (kept
  // with the Call); larger data stays in the frame it came in.
  static constexpr size_t kInlineData = 4096;

 private:
  std::unique_ptr<fabric::Link> link_;
  std::string endpoint_;
  uint64_t timeout_ms_;
  std::atomic<bool> lost_{false};
  // The poster's, the receiver's and the shared fields on cache lines of
  // their own: the receiver reads lost_ per frame while the poster takes
  // send_mu_ per Request.
  alignas(64) std::mutex send_mu_;  // one sender at a time; guards seq_, buf_ and queued_
  uint64_t seq_ = 0;
  std::vector<uint8_t> buf_;  // encoded Requests queued by start(), not yet sent
  // Their Calls, in seq order: pending_ takes them when buf_ leaves.
  std::vector<std::shared_ptr<Call>> queued_;
  std::atomic<uint64_t> sent_through_{0};
  std::atomic<bool> has_queued_{false};
  // Payloads queued in place: each goes right after buf_[0, head_end).
  struct InPlace {
    size_t head_end;
    const uint8_t* body;
    size_t len;
  };
  std::vector<InPlace> in_place_;
  size_t in_place_bytes_ = 0;
  std::vector<fabric::Link::Piece> pieces_;  // send_locked's scratch
  static std::atomic<int64_t> in_place_total_;
  // Sends buf_ with the payloads in place between its frames (then `body`,
  // the payload of its last frame, when not null) and empties it; a link
  // fault loses the peer. Caller holds send_mu_.
  void send_locked(const uint8_t* body, size_t n);
  static void complete_lost(Call& c, const std::string& why);
  alignas(64) std::mutex mu_;  // guards pending_ and why_
  // In seq order: a responder answers in the order it was asked (held
  // answers too), so an answer is always for the front.
  std::deque<std::shared_ptr<Call>> pending_;
  std::string why_;
  // Recycled frame buffers and Calls, under a lock of their own: the poster
  // takes and returns a Call per Request, and must not wake the receiver
  // for it.
  alignas(64) std::mutex spare_mu_;
  std::vector<std::vector<uint8_t>> spare_;
  std::vector<std::shared_ptr<Call>> spare_calls_;
  alignas(64) std::atomic<bool> stop_{false};
  std::thread rx_;
  void receive();
};

// This process's side of the cross-process fabric (one per process).
class RemoteFabric {
 public:
  // `nic` joins, reachable through `via`: the listeners `via` needs start
  // with the first NIC that needs them. Throws (NotFound: no interface;
  // System: the shm name is taken, /proc can't identify the host) when it
  // can't listen; the NIC has then not joined.
  void join(const std::shared_ptr<Nic>& nic, fabric::Via via);
  // `nic` leaves (Requests to it then fail as to a NIC that is gone); the
  // last one stops the listener, closes every link and joins their threads.
  void leave(uint64_t node);
  // Where a NIC joined with `via` is reached (endpoint.hpp): "tcp
  // 192.0.2.2:41234", "shm <name> host <boot id> netns <inode>", or both
  // (auto). Empty when no NIC has joined.
  std::string endpoint(fabric::Via via);
  // The outbound link to the process at `endpoint` (a peer QP's
  // QpInfo::endpoint), connected (and greeted) now if there is none or the
  // last one was lost. The transport: with Via::Shm, shm (the peer must be on
  // this host and offer shm, else NotFound); Via::Tcp, tcp (the peer must
  // offer tcp, else NotFound); Via::Auto, shm when the peer offers it and is
  // on this host, else tcp, and tcp too when connecting over shm fails (one
  // deadline for both). Throws System when the peer can't be reached within
  // the peer timeout, InvalidArgument for a malformed endpoint.
  std::shared_ptr<RemotePeer> peer(const std::string& endpoint, fabric::Via via);
  // Sends every peer's queued Requests now, payloads in place among them:
  // a deregistration calls it once no WQE can queue one from its region any
  // more (the key is gone and memory_guard() was drained), so that no byte
  // is read from the region after it returns. No-op when none is queued in place.
  void send_queued();
  // KINET_EMU_PEER_TIMEOUT_MS, read once.
  uint64_t timeout_ms();
  // KINET_EMU_ACK_DELAY_US (default 200, at most 1 s; 0: every answer at
  // once), read once: how long a responder may hold the answers of kAckLater
  // Writes back, waiting for more Requests to send them with.
  static std::chrono::microseconds ack_delay();

 private:
  struct Inbound;
  std::mutex mu_;
  std::map<uint64_t, std::weak_ptr<Nic>> nics_;
  std::atomic<uint64_t> nics_gen_{0};  // bumped (under mu_) when nics_ changes: serve()'s lookup cache
  std::string tcp_endpoint_;          // "tcp A:P" while the TCP listener runs
  std::string shm_endpoint_;          // "shm NAME host ..." while the shm listener runs
  int listen_fd_ = -1;
  std::unique_ptr<fabric::ShmListener> shm_;
  int stop_fd_[2] = {-1, -1};         // readable: the listener threads return
  std::thread listener_, shm_listener_;
  std::vector<std::unique_ptr<Inbound>> inbound_;
  std::map<std::string, std::shared_ptr<RemotePeer>> peers_;
  std::mutex connect_mu_;  // one connect at a time (so two to_rtr share one link)
  void listen_loop(int listen_fd, int stop_fd);  // until stop_fd is readable
  void shm_listen_loop(fabric::ShmListener* l, int stop_fd);
  void start_tcp_locked();
  void start_shm_locked();
  void add_inbound(std::unique_ptr<fabric::Link> link);
  std::unique_ptr<fabric::Link> connect(const std::string& endpoint, fabric::Via via,
                                        fabric::Clock::time_point deadline, std::string* key);
  void serve(Inbound& in);
  void reap_inbound(bool all);
  void shutdown_locked(std::unique_lock<std::mutex>& g);
};
RemoteFabric& remote();

// This process's random id and name ("host:pid") in Hellos.
uint64_t process_id();

}  // namespace kinet::emu
