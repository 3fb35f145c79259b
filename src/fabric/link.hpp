// kinet fabric — a link: a reliable, ordered, bidirectional channel of whole
// frames (wire.hpp) to one peer process. TCP between hosts, shared memory
// between processes of one host; the fabric above does not care which.
//
// Threading: one thread sends and one thread receives at a time (the fabric
// serialises its senders); close() may be called from any thread and wakes
// both.
//
// Failures throw kinet::Error(ErrorCode::System) whose message names the peer
// (peer_name()) and says what happened, in one of two forms a caller may rely
// on: "... peer lost: <why>" (the peer closed, died, the connection reset) and
// "... timeout after N ms waiting for <what>".
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace kinet::fabric {

using Clock = std::chrono::steady_clock;

class Link {
 public:
  virtual ~Link() = default;
  // Sends one whole encoded frame (header included), or several back to back
  // (at most wire.hpp's kMaxFrame bytes in all: a shm link's ring holds that
  // much at least); the receiver takes them one by one. Blocks while the peer
  // does not drain (flow control), until `deadline`, then throws the timeout
  // form. Throws "peer lost" when the link is gone.
  void send(const uint8_t* frame, size_t n, Clock::time_point deadline) { send_parts(frame, n, nullptr, 0, deadline); }
  // send() of the bytes head[0, n1) then body[0, n2) (the last frame's
  // payload), without joining them: a WRITE's payload leaves from where it
  // was read.
  virtual void send_parts(const uint8_t* head, size_t n1, const uint8_t* body, size_t n2,
                          Clock::time_point deadline) = 0;
  // One piece of a gathered send.
  struct Piece {
    const uint8_t* p;
    size_t n;
  };
  // send() of the pieces' bytes in order, without joining them (the first
  // holds at least the first frame's header): several WRITEs' payloads leave
  // from their regions in one send. This default joins them into one buffer
  // first; links that kernel_reads_body() hand them to the kernel as they are.
  virtual void send_gather(std::span<const Piece> pieces, Clock::time_point deadline);
  // True when send_parts() and send_gather() hand their bytes to the kernel
  // without reading them themselves: bytes that can't be read then fail the
  // send (EFAULT: the link is lost) instead of raising SIGSEGV in this process.
  virtual bool kernel_reads_body() const { return false; }
  // Receives the next whole frame into `out` (resized to it). Returns false
  // when none arrived by `deadline` (not an error: the caller polls). Throws
  // "peer lost" on EOF or reset, and InvalidArgument when the peer sends a
  // malformed header or a frame over max_frame (the link is then closed: a
  // byte stream can't resynchronise).
  virtual bool recv(std::vector<uint8_t>& out, Clock::time_point deadline) = 0;
  // True when bytes of a next frame were already read ahead, so recv() with
  // a deadline of now may return it without a syscall. Links that don't read
  // ahead say false (then callers send what they batched at once).
  virtual bool buffered() const { return false; }

  // Cut frames: a large frame's rest read straight to where it goes (a
  // WRITE's payload into the target region), not through a frame buffer.
  // recv_split() is recv(), except that a frame of more than `split_over`
  // bytes (header included) comes back cut after its first `head` bytes
  // (kHeaderBytes < head <= split_over): *rest is then the number of its
  // bytes still to come, which the caller takes, all of them, with
  // rest_buffered() / recv_rest() / wait_rest() before it receives again.
  // *rest is 0 for a whole frame. Links that don't cut return whole frames.
  virtual bool recv_split(std::vector<uint8_t>& out, Clock::time_point deadline, size_t split_over, size_t head,
                          size_t* rest) {
    (void)split_over, (void)head;
    *rest = 0;
    return recv(out, deadline);
  }
  // The cut frame's next bytes that were already read ahead: at most n of
  // them, taken; empty when there are none. Valid until the next call on the
  // link.
  virtual std::span<const uint8_t> rest_buffered(size_t n) {
    (void)n;
    return {};
  }
  // At most n of the cut frame's next bytes, straight from the connection
  // into dst, without blocking (call it when rest_buffered() is empty): how
  // many; 0 when none are there yet, or when the link read them ahead
  // instead (a small rest: rest_buffered() then has them). *bad_dst: dst
  // can't be written (EFAULT; nothing taken): take the rest elsewhere.
  // Throws as recv() does.
  // (The default is never called: a link that doesn't cut has no rest.)
  virtual size_t recv_rest(uint8_t* dst, size_t n, bool* bad_dst) {
    (void)dst, (void)n;
    *bad_dst = false;
    return 0;
  }
  // Waits until the cut frame's next bytes can be taken, or `deadline`
  // (false then). Throws "peer lost" when the link is gone.
  virtual bool wait_rest(Clock::time_point deadline) {
    (void)deadline;
    return true;
  }
  // Closes both directions; blocked and later send/recv throw "peer lost".
  // After a failure closed the link (a malformed frame, a reset), later
  // calls of either direction name that failure, not this close.
  virtual void close() = 0;
  // "tcp 192.0.2.2:41234", "shm pid 1234": for messages.
  virtual const std::string& peer_name() const = 0;
};

// Why a link is closed: the first reason given wins and every later call
// reports it, so a sender that finds the link closed by the receiving
// thread's failure names that failure ("malformed frame header: ..."), not
// "the link was closed", whichever thread reaches the caller first.
class CloseReason {
 public:
  // Records `why` unless a reason is recorded; true for the first caller.
  bool set(const std::string& why) {
    std::lock_guard<std::mutex> g(mu_);
    if (closed_.load(std::memory_order_relaxed)) return false;
    why_ = why;
    closed_.store(true, std::memory_order_release);
    return true;
  }
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  // The recorded reason; `fallback` while none is.
  std::string why(const std::string& fallback) const {
    std::lock_guard<std::mutex> g(mu_);
    return closed_.load(std::memory_order_relaxed) ? why_ : fallback;
  }

 private:
  std::atomic<bool> closed_{false};
  mutable std::mutex mu_;
  std::string why_;
};

inline void Link::send_gather(std::span<const Piece> pieces, Clock::time_point deadline) {
  std::vector<uint8_t> joined;
  for (const Piece& x : pieces) joined.insert(joined.end(), x.p, x.p + x.n);
  send_parts(joined.data(), joined.size(), nullptr, 0, deadline);
}

}  // namespace kinet::fabric
