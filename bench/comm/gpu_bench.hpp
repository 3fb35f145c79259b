// kinet-comm-perf, GPU mode: two ranks as two processes on ONE GPU, kernels
// driving the communicator's device API, each figure beside its baseline:
//   put bandwidth (dev::cta_put from a full GPU of CTAs) vs cudaMemcpyAsync D2D;
//   put_signal ping-pong latency, one thread / one warp / one CTA;
//   dev::barrier latency.
// Built when CUDA is (KINET_COMM_PERF_GPU); gpu_bench.cu holds the kernels.
#pragma once
#include <cstdint>
#include <string>

namespace kcp {

struct GpuOpts {
  std::string path = "p2p";          // p2p | proxy
  std::string transport = "tcp";     // the proxy path's transport
  std::string only = "bw,lat,barrier";
  std::string json;                  // --json FILE
  std::string command_line;
  uint64_t bw_min = uint64_t{1} << 20, bw_max = uint64_t{256} << 20;
  uint32_t bw_factor = 2;            // sizes bw_min * factor^k
  // put_bw grid: at most SMs x this. More CTAs than fit at once queue up, and
  // SMs that finish early take the next ones: on an H200, 8 per SM ran the
  // HBM-bound sizes at 0.93-0.94x cudaMemcpy, one resident wave at 0.89-0.91x
  // (docs/PERFORMANCE.md section 8). 0: as many as fit at once (occupancy).
  uint32_t ctas_per_sm = 8;
  // A put of B bytes runs on B / (bw_threads x this) CTAs while they fit on
  // the GPU at once (one wave), so each thread has one full round of
  // in-flight loads (group_copy: 4 x 16 bytes); past one wave, on half as
  // many (two rounds each, rather than a second wave); never more than the
  // grid. 0: always the whole grid. Smaller puts then leave SMs idle, as a
  // user's kernel sized to its data would. On an H200 with PDL launches, one
  // round beat two by 25 % at 4-8 MiB, and two rounds beat a second wave at
  // 16-64 MiB (docs/PERFORMANCE.md section 8).
  uint32_t bw_bytes_per_thread = 64;
  // How put_bw launches its kernels: "pdl" (programmatic dependent launch:
  // each put's launch overlaps the previous put's end; compute capability
  // 9.0 and later, plain elsewhere), "plain" (stream order), or "both" (PDL
  // as the headline figure, plain beside it).
  std::string bw_launch = "both";
  bool bw_self = false;              // diagnosis: rank 0 puts into its own window (path self), no peer mapping
  uint32_t bw_threads = 512;
  // Each CTA puts chunks of this many bytes round-robin (CTA b: chunks b,
  // b + grid, ...), so the whole grid sweeps the buffer front to back; 0: one
  // contiguous slice per CTA. Never more than a CTA's even share.
  uint64_t bw_chunk = uint64_t{64} << 10;
  int trials = 5;                    // timed trials per size (median)
  double trial_ms = 20;              // aim of one trial; sets #iterations
  uint64_t lat_max = uint64_t{256} << 10;  // ping-pong sizes 8, 64, ..., lat_max (x8)
  uint32_t lat_cta_threads = 256;
  int launches = 5;                  // ping-pong / barrier samples (median)
  double launch_ms = 10;             // aim of one sample launch; sets #round trips
  uint32_t timeout_ms = 20000;       // every device-side wait (CommConfig::timeout)
  uint32_t deadline_s = 600;         // the whole run; ranks still alive then are killed
  bool progress = false;             // progress line on stderr even when it is no terminal
};

// Whether CUDA sees a GPU, asked in a forked child: the ranks must be forked
// before this process makes any CUDA call. Bounded (60 s).
bool gpu_visible();

// Forks the two ranks, runs, prints tables (rank 0) and writes the JSON.
// Returns the exit code: 0, or 1 on a failure or a wrong result.
int run_gpu(const GpuOpts& o);

}  // namespace kcp
