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

}  // namespace kinet::fabric
