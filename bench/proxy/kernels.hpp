// kinet-proxy-bench — the GPU side: kernels and their timing, behind plain
// C++ functions (main.cpp, compiled by the host compiler, does the rest).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kinet/device/proxy.cuh"

namespace kpb {

// Bare GPU->CPU->GPU flag round trip: the kernel release-stores i to a flag
// in pinned host memory, a CPU thread spinning on it stores i back to a
// second flag, the kernel acquires it. ns per round trip (kernel timer), or a
// negative value and *err on failure.
double bare_round_trip_ns(uint32_t iters, std::string* err);

// The kernel issues put_signal (8 bytes, +1 on *sig) through the proxy and
// spins until *sig (pinned host memory, system-scope acquire) reaches the
// count: ns per round trip (kernel timer). A status != Ok: negative, *err.
double proxy_round_trip_ns(const kinet::dev::ProxyHandle& h, const void* src, kinet::Lkey lkey, uint64_t raddr,
                           kinet::Rkey rkey, uint64_t sig_raddr, const uint64_t* sig, uint32_t iters,
                           std::string* err);

// ctas x threads posters, each `per_thread` descriptors on channel
// (cta % handles.size()): nops (put == false; the proxy completes them
// without the transport) or 8-byte puts to raddr + 8 * (global thread id).
// Every poster waits for its last ticket. Returns descriptors per second
// (CUDA events around the kernel), or negative and *err.
double proxy_throughput(const std::vector<kinet::dev::ProxyHandle>& handles, uint32_t ctas, uint32_t threads,
                        uint32_t per_thread, bool put, const void* src, kinet::Lkey lkey, uint64_t raddr,
                        kinet::Rkey rkey, std::string* err);

std::string gpu_name();
// Zeroed pinned host memory mapped into the GPU (null on failure); free_mapped gives it back.
void* alloc_mapped(size_t bytes);
void free_mapped(void* p);

}  // namespace kpb
