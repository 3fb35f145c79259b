// kinet-perf — what the host runners (in-process and cross-process) share:
// the check of a verb's status, write_lat's marker byte, and bounded waits
// that spin, then yield, since posting threads and NIC engine threads may
// share few CPUs and a pure spin would keep the thread that must make
// progress off its core for a whole scheduler slice.
#pragma once
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <thread>

#include "kinet/kinet.hpp"
#include "runner.hpp"  // PerfError

namespace kinet::perf {

// The host runners post to each QP from one thread.
inline constexpr dev::Sharing kX = dev::Sharing::Exclusive;

// Iteration-dependent marker byte of write_lat: never 0 (the initial value of
// receive buffers) and different from the previous iteration's.
inline uint8_t marker(uint64_t i) { return static_cast<uint8_t>(1 + i % 255); }

// Throws PerfError "what: <status> [<the QP's last error>]" unless st is Ok.
inline void check(Status st, const QueuePair& qp, const std::string& what) {
  if (st == Status::Ok) return;
  std::string m = what + ": " + status_string(st);
  const std::string le = qp.last_error();
  if (!le.empty()) m += " [" + le + "]";
  throw PerfError(m);
}

class Waiter {
 public:
  // timeout_ns bounds marker(); ticket() and quiet() use the QP's own bound.
  Waiter(uint64_t timeout_ns, uint64_t spins_before_yield)
      : timeout_ns_(timeout_ns), spins_(spins_before_yield) {}

  // Until the marker byte at p equals v; throws PerfError at the bound (naming
  // `who` and iteration `iter`). false when *abort was raised (the other
  // thread gave up; its error is the one reported).
  bool marker(const uint8_t* p, uint8_t v, uint64_t iter, const char* who,
              const std::atomic<bool>* abort = nullptr) const {
    std::atomic_ref<const uint8_t> ref(*p);
    const uint64_t deadline = now_ns() + timeout_ns_;
    for (uint64_t k = 1; ref.load(std::memory_order_acquire) != v; ++k) {
      if ((k & 0xff) == 0) {
        if (abort && abort->load(std::memory_order_relaxed)) return false;
        if (now_ns() > deadline) {
          char m[200];
          std::snprintf(m, sizeof m,
                        "write_lat: %s timed out after %" PRIu64 " ms waiting for the write of iteration %" PRIu64
                        " (marker 0x%02x expected, 0x%02x found)",
                        who, timeout_ns_ / 1000000, iter, v, ref.load(std::memory_order_relaxed));
          throw PerfError(m);
        }
      }
      backoff(k);
    }
    return true;
  }
  // dev::wait() for a signalled ticket, with backoff. Bounded like it. Like
  // wait(), it first rings what was posted with kNoDoorbell (--post-list).
  Status ticket(const dev::QpHandle& h, dev::Ticket t) const {
    if (const Status st = dev::ring_doorbell<dev::Sharing::Exclusive>(h, t.idx + 1); st != Status::Ok) return st;
    const uint64_t deadline = now_ns() + h.timeout_ns;
    for (uint64_t k = 1;; ++k) {
      const Status st = dev::test<dev::Sharing::Exclusive>(h, t);
      if (st != Status::Pending) return st;
      if ((k & 0x3f) == 0 && now_ns() > deadline) return Status::TimeoutCompletion;
      backoff(k);
    }
  }
  // dev::quiet() with backoff: a signalled NOP completes after everything before it.
  Status quiet(const dev::QpHandle& h) const {
    dev::Ticket t;
    const Status st = dev::nop<dev::Sharing::Exclusive>(h, dev::kSignal, &t);
    return st == Status::Ok ? ticket(h, t) : st;
  }

 private:
  void backoff(uint64_t k) const {
    if (k > spins_) std::this_thread::yield();
    else spin_pause();
  }
  uint64_t timeout_ns_;
  uint64_t spins_;
};

}  // namespace kinet::perf
