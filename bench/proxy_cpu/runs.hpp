// kinet-proxy-cpu-bench — the measured runs (runs.cpp; main.cpp does the
// command line and the report).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kpcb {

struct Setup {
  uint32_t slots = 4096;   // ring slots per channel
  uint32_t batch = 32;     // ProxyConfig::batch
  uint32_t posters = 1;    // poster threads, one channel each, one proxy thread for all
  int poster_cpu = -1;     // pin posters here (-1: no pinning)
  int consumer_cpu = -1;   // pin the proxy thread (or the bare consumer) here
  int spin_us = -1;        // ProxyConfig::spin (-1: its default)
};

// Streaming, per round: each poster posts `per_poster` no-op descriptors as
// fast as it can, then waits for its last; ns per descriptor (all posters
// together) from the first post to the last completion. stall_share: share
// of posts that found the ring full (near 1: the consumer set the pace).
struct Stream {
  std::vector<double> ns_per_op;
  double stall_share = 0;
};
Stream stream(const Setup& s, uint64_t per_poster, uint32_t rounds);

// Burst (consumer alone): the poster reserves the whole ring, publishes every
// slot but the first, then the first; the proxy drains the full ring. ns per
// descriptor from that publish to the last completion, per round.
std::vector<double> burst(const Setup& s, uint32_t rounds);
// The same burst drained by a bare consumer thread instead of a proxy: the
// valid-bit checks of both header words, consumed and completed published
// with one release store each per 32 descriptors; the same poster code. The
// floor of what a consumer of this ring costs on this machine.
std::vector<double> bare_burst(const Setup& s, uint32_t rounds);

// Round trips (ns each, per round of `iters`), the poster on poster_cpu:
// bare: it stores a flag, a spinning thread on consumer_cpu stores it back;
// proxy: it posts an 8-byte put_signal (loop transport connected to itself:
// one proxy thread, on consumer_cpu) and spins on the signal word.
std::vector<double> bare_round_trip(const Setup& s, uint32_t iters, uint32_t rounds);
std::vector<double> proxy_round_trip(const Setup& s, uint32_t iters, uint32_t rounds);

}  // namespace kpcb
