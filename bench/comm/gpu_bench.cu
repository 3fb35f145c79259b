// kinet-comm-perf, GPU mode (gpu_bench.hpp). Rank 0 measures and reports;
// both ranks verify what they received once per size and agree on every
// step through the bootstrap (allgather), so the two processes stay in step.
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../../tests/multiproc/comm_ranks.hpp"
#include "gpu_bench.hpp"
#include "gpu_report.hpp"
#include "kinet/comm.hpp"

namespace kcp {
namespace {
using namespace kinet;
using dev::CommHandle;
using dev::WindowHandle;

enum Group : int { kThread = 0, kWarp = 1, kCta = 2 };
const char* group_name(int g) { return g == kThread ? "thread" : g == kWarp ? "warp" : "cta"; }

// ---- kernels -----------------------------------------------------------------

// 4-byte words of rank `seed`'s data; never 0, so a missing store shows.
__host__ __device__ uint32_t pat(uint32_t seed, uint64_t i) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ (seed * 0x9E3779B9u) ^ static_cast<uint32_t>(i >> 32);
  x ^= x >> 15;
  return x | 1u;
}

__global__ void k_fill(uint32_t* p, uint64_t n, uint32_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    p[i] = pat(seed, i);
}

// bad[0] += mismatching words, bad[1] = min(bad[1], first mismatching word).
__global__ void k_check(const uint32_t* p, uint64_t n, uint32_t seed, unsigned long long* bad) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    if (p[i] != pat(seed, i)) {
      atomicAdd(&bad[0], 1ull);
      atomicMin(&bad[1], static_cast<unsigned long long>(i));
    }
}

__device__ void note(int* err, Status s) {
  if (s != Status::Ok) atomicCAS(err, 0, static_cast<int>(s));
}

// [0, bytes) of my part of w to [dst_off, +bytes) of the peer's part: each
// CTA puts 16-byte-aligned chunks of `chunk` bytes round-robin (0: one slice
// per CTA). Chunks larger than a CTA's even share shrink to it. It takes 64
// registers (2 CTAs of 512 per SM); capped at 32 for a full SM it spills in
// the copy loop and runs at 0.6x.
// pdl: launched with programmatic dependent launch (Rank::launch_put). The
// next put's kernel may then be launched at once, and this one waits for the
// kernel before it (complete, its memory visible) before it puts: the launch
// and the CTAs' start overlap the previous put's last stores instead of
// following them. kinet's put asks nothing of how its kernel was launched.
__global__ void __launch_bounds__(1024) k_put_bw(CommHandle c, int to, WindowHandle w, uint64_t dst_off, uint64_t bytes,
                                                 uint64_t chunk, bool pdl, int* err) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (pdl) {
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();
  }
#endif
  const uint64_t share = ((bytes + gridDim.x - 1) / gridDim.x + 15) & ~uint64_t{15};
  const uint64_t per = chunk ? std::min(share, (chunk + 15) & ~uint64_t{15}) : share;
  Status s = Status::Ok;
  for (uint64_t off = blockIdx.x * per; off < bytes && s == Status::Ok; off += uint64_t(gridDim.x) * per)
    s = dev::cta_put(c, to, w, dst_off + off, w, off, std::min(per, bytes - off));
  if (threadIdx.x == 0) note(err, s);
}

// After the puts of the kernels before it in the stream: they are complete
// (the proxy path's puts return once handed off).
__global__ void k_quiet(CommHandle c, int* err) { note(err, dev::quiet(c)); }

struct LatArgs {
  uint64_t bytes, rtts, base;  // signal values base + 1 .. base + rtts
  uint64_t src_off, dst_off, ping_off, pong_off;
};

// One thread waits; the group learns the outcome (uniform loop exit).
template <int G>
__device__ bool group_wait(const CommHandle& c, const WindowHandle& w, uint64_t off, uint64_t v, int from, int* err) {
  Status s = Status::Ok;
  if (threadIdx.x == 0) {
    s = dev::wait_signal(c, w, off, dev::Cmp::Ge, v, from);
    note(err, s);
  }
  if constexpr (G == kThread) return s == Status::Ok;
  else if constexpr (G == kWarp) return __shfl_sync(0xffffffffu, static_cast<int>(s), 0) == 0;
  else return __syncthreads_or(s != Status::Ok) == 0;
}

template <int G>
__device__ Status group_send(const CommHandle& c, int peer, const WindowHandle& w, const LatArgs& a, uint64_t sig,
                             uint64_t v) {
  if constexpr (G == kThread)
    return dev::put_signal(c, peer, w, a.dst_off, w, a.src_off, a.bytes, w, sig, dev::SigOp::Set, v);
  else if constexpr (G == kWarp)
    return dev::warp_put_signal(c, peer, w, a.dst_off, w, a.src_off, a.bytes, w, sig, dev::SigOp::Set, v);
  else
    return dev::cta_put_signal(c, peer, w, a.dst_off, w, a.src_off, a.bytes, w, sig, dev::SigOp::Set, v);
}

// Ping-pong: rank 0 put_signals the ping word and waits for the pong word,
// rank 1 the other way round. Rank 0 times round trips 2..rtts (the first
// one lines the two kernels up): t[0], t[1] in ns (%globaltimer).
template <int G> __global__ void k_pingpong(CommHandle c, WindowHandle w, LatArgs a, int* err, uint64_t* t) {
  const int peer = 1 - c.rank;
  const bool ping = c.rank == 0;
  const uint64_t mine = ping ? a.pong_off : a.ping_off, theirs = ping ? a.ping_off : a.pong_off;
  uint64_t t0 = 0;
  for (uint64_t i = 1; i <= a.rtts; ++i) {
    const uint64_t v = a.base + i;
    if (!ping && !group_wait<G>(c, w, mine, v, peer, err)) return;
    const Status s = group_send<G>(c, peer, w, a, theirs, v);
    if (s != Status::Ok) {
      if (threadIdx.x == 0) note(err, s);
      return;
    }
    if (ping && !group_wait<G>(c, w, mine, v, peer, err)) return;
    if (i == 1) t0 = now_ns();
  }
  if (ping && threadIdx.x == 0) t[0] = t0, t[1] = now_ns();
}

// n barriers from one thread; barriers 2..n timed (t[0], t[1]).
__global__ void k_barrier(CommHandle c, uint64_t n, int* err, uint64_t* t) {
  uint64_t t0 = 0;
  for (uint64_t i = 1; i <= n; ++i) {
    const Status s = dev::barrier(c);
    if (s != Status::Ok) return note(err, s);
    if (i == 1) t0 = now_ns();
  }
  t[0] = t0, t[1] = now_ns();
}

// ---- host ----------------------------------------------------------------------

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(ErrorCode::System, std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

std::string human(uint64_t n) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) return std::to_string(n >> 20) + " MiB";
  if (n >= 1024 && n % 1024 == 0) return std::to_string(n >> 10) + " KiB";
  return std::to_string(n) + " B";
}

uint64_t clamp_count(double want, uint64_t lo, uint64_t hi) {
  if (!(want > double(lo))) return lo;  // NaN too
  return want >= double(hi) ? hi : static_cast<uint64_t>(want);
}

class Rank {
 public:
  Rank(int r, Bootstrap& bs, const GpuOpts& o, GpuRun& run, int points)
      : r_(r), bs_(bs), o_(o), run_(run), pr_(r == 0 && (o.progress || isatty(STDERR_FILENO)), points) {}
  ~Rank();
  void setup();
  void bandwidth();
  void latency();
  void barrier();
  void finish();  // every rank done with the other's windows

 private:
  uint64_t agree(uint64_t mine, uint64_t* theirs = nullptr);  // rank 0's value; the other's in *theirs
  void check_err(const char* what);
  uint32_t bw_ctas(uint64_t bytes) const;           // of kinet's put kernel at this size
  void launch_put(uint64_t bytes, bool pdl);        // one k_put_bw on s_
  float time_put(uint64_t bytes, uint64_t iters, bool pdl);  // ms
  float time_copy(uint64_t bytes, uint64_t iters);  // ms
  uint64_t mismatches(const uint8_t* p, uint64_t bytes, uint32_t seed, const char* what);
  double launch_pingpong(int g, uint64_t bytes, uint64_t rtts);  // half round trip, us (rank 0)

  int r_;
  Bootstrap& bs_;
  const GpuOpts& o_;
  GpuRun& run_;
  Progress pr_;
  std::unique_ptr<Comm> comm_;
  CommWindow* bw_ = nullptr;
  CommWindow* lat_ = nullptr;
  CommHandle c_{};
  cudaStream_t s_ = nullptr;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
  int* err_ = nullptr;                 // device: first failing Status of a kernel
  unsigned long long* bad_ = nullptr;  // device: k_check's counters
  uint64_t* t_ = nullptr;              // device: kernel timestamps
  uint32_t grid_ = 0;                  // most CTAs of a put_bw kernel (GpuOpts::ctas_per_sm)
  uint32_t wave_ = 0;                  // CTAs of k_put_bw resident at once on the whole GPU
  bool pdl_ = false;                   // put kernels launched with PDL (GpuOpts::bw_launch, compute capability >= 9.0)
  uint64_t seq_ = 0;                   // signal values used so far (the same on both ranks)
};

Rank::~Rank() {
  if (err_) cudaFree(err_);
  if (bad_) cudaFree(bad_);
  if (t_) cudaFree(t_);
  if (e0_) cudaEventDestroy(e0_);
  if (e1_) cudaEventDestroy(e1_);
  if (s_) cudaStreamDestroy(s_);
}

uint64_t Rank::agree(uint64_t mine, uint64_t* theirs) {
  const auto all = bs_.allgather(&mine, sizeof mine);
  uint64_t v[2];
  for (int i = 0; i < 2; ++i) {
    if (all.at(i).size() != sizeof(uint64_t)) throw Error(ErrorCode::System, "allgather: bad size from rank " + std::to_string(i));
    std::memcpy(&v[i], all[i].data(), sizeof(uint64_t));
  }
  if (theirs) *theirs = v[1 - r_];
  return v[0];
}

void Rank::check_err(const char* what) {
  int e = 0;
  ck(cudaGetLastError(), what);
  ck(cudaStreamSynchronize(s_), what);
  ck(cudaMemcpy(&e, err_, sizeof e, cudaMemcpyDeviceToHost), "read kernel status");
  if (e != 0)
    throw Error(ErrorCode::System, std::string(what) + ": " + status_string(Status(e)) + "; " + comm_->device_error() +
                                       " | peer: " + comm_->peer_error(1 - r_));
}

void Rank::setup() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) throw Error(ErrorCode::NotSupported, "no GPU visible to CUDA");
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  CommConfig cfg;
  cfg.transport = o_.transport;
  cfg.path = o_.path;
  cfg.memory = CommConfig::Memory::Gpu;
  cfg.timeout = std::chrono::milliseconds(o_.timeout_ms);
  comm_ = std::make_unique<Comm>(bs_, cfg);
  const auto want = o_.path == "p2p" ? dev::CommPath::P2p : dev::CommPath::Proxy;
  if (comm_->path(1 - r_) != want)
    throw Error(ErrorCode::NotSupported, "path to rank " + std::to_string(1 - r_) + " is not " + o_.path + ": " + comm_->report());
  // Every kernel loaded before any of them waits on the other rank: a
  // lazily loaded kernel's first launch stalls the proxy's GPU copies behind
  // a waiting kernel (docs/COMM.md).
  cudaFuncAttributes fa;
  ck(cudaFuncGetAttributes(&fa, k_fill), "load k_fill");
  ck(cudaFuncGetAttributes(&fa, k_check), "load k_check");
  ck(cudaFuncGetAttributes(&fa, k_put_bw), "load k_put_bw");
  ck(cudaFuncGetAttributes(&fa, k_quiet), "load k_quiet");
  ck(cudaFuncGetAttributes(&fa, k_pingpong<kThread>), "load k_pingpong<thread>");
  ck(cudaFuncGetAttributes(&fa, k_pingpong<kWarp>), "load k_pingpong<warp>");
  ck(cudaFuncGetAttributes(&fa, k_pingpong<kCta>), "load k_pingpong<cta>");
  ck(cudaFuncGetAttributes(&fa, k_barrier), "load k_barrier");
  int per_sm = 0;
  ck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_put_bw, int(o_.bw_threads), 0), "occupancy");
  wave_ = uint32_t(prop.multiProcessorCount) * uint32_t(std::max(per_sm, 1));
  grid_ = o_.ctas_per_sm ? uint32_t(prop.multiProcessorCount) * o_.ctas_per_sm : wave_;
  pdl_ = o_.bw_launch != "plain" && prop.major >= 9;
  run_.bw_launch = pdl_ ? (o_.bw_launch == "both" ? "pdl+plain" : "pdl") : "plain";
  if (o_.bw_launch != "plain" && !pdl_)
    run_.notes.push_back("put_bw: programmatic dependent launch needs compute capability 9.0 (this GPU: " +
                         std::to_string(prop.major) + "." + std::to_string(prop.minor) + "); plain launches only");
  ck(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate");
  ck(cudaEventCreate(&e0_), "cudaEventCreate");
  ck(cudaEventCreate(&e1_), "cudaEventCreate");
  ck(cudaMalloc(&err_, sizeof(int)), "cudaMalloc");
  ck(cudaMalloc(&bad_, 2 * sizeof(unsigned long long)), "cudaMalloc");
  ck(cudaMalloc(&t_, 2 * sizeof(uint64_t)), "cudaMalloc");
  ck(cudaMemsetAsync(err_, 0, sizeof(int), s_), "cudaMemset");
  // Windows: [0, B) my data, [B, 2B) what the peer puts here.
  if (o_.only.find("bw") != std::string::npos) bw_ = &comm_->alloc_symmetric(2 * o_.bw_max);
  lat_ = &comm_->alloc_symmetric(2 * o_.lat_max + 4096);
  if (bw_) k_fill<<<1024, 256, 0, s_>>>(static_cast<uint32_t*>(bw_->local()), o_.bw_max / 4, uint32_t(r_ + 1));
  k_fill<<<256, 256, 0, s_>>>(static_cast<uint32_t*>(lat_->local()), o_.lat_max / 4, uint32_t(r_ + 1));
  check_err("fill");
  c_ = comm_->device_handle();
  run_.gpu = prop.name;
  run_.sms = prop.multiProcessorCount;
  run_.bw_grid = grid_;
  run_.comm_report = comm_->report();
  if (r_ == 0) std::printf("%s\n", run_.comm_report.c_str());
  comm_->barrier();
}

uint32_t Rank::bw_ctas(uint64_t bytes) const {
  const uint64_t per_cta = uint64_t{o_.bw_threads} * o_.bw_bytes_per_thread;
  if (per_cta == 0) return grid_;
  uint64_t n = (bytes + per_cta - 1) / per_cta;
  if (n > wave_) n = (bytes + 2 * per_cta - 1) / (2 * per_cta);  // past one wave: twice the bytes per thread
  return uint32_t(std::clamp<uint64_t>(n, 1, grid_));
}

void Rank::launch_put(uint64_t bytes, bool pdl) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(bw_ctas(bytes));
  cfg.blockDim = dim3(o_.bw_threads);
  cfg.stream = s_;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  if (pdl) cfg.attrs = &attr, cfg.numAttrs = 1;
  ck(cudaLaunchKernelEx(&cfg, k_put_bw, c_, o_.bw_self ? r_ : 1 - r_, bw_->handle(), o_.bw_max, bytes, o_.bw_chunk, pdl,
                        err_),
     "launch k_put_bw");
}

float Rank::time_put(uint64_t bytes, uint64_t iters, bool pdl) {
  ck(cudaEventRecord(e0_, s_), "cudaEventRecord");
  for (uint64_t i = 0; i < iters; ++i) launch_put(bytes, pdl);
  k_quiet<<<1, 1, 0, s_>>>(c_, err_);
  ck(cudaEventRecord(e1_, s_), "cudaEventRecord");
  check_err("k_put_bw");
  float ms = 0;
  ck(cudaEventElapsedTime(&ms, e0_, e1_), "cudaEventElapsedTime");
  return ms;
}

float Rank::time_copy(uint64_t bytes, uint64_t iters) {
  uint8_t* base = static_cast<uint8_t*>(bw_->local());
  ck(cudaEventRecord(e0_, s_), "cudaEventRecord");
  for (uint64_t i = 0; i < iters; ++i)
    ck(cudaMemcpyAsync(base + o_.bw_max, base, bytes, cudaMemcpyDeviceToDevice, s_), "cudaMemcpyAsync");
  ck(cudaEventRecord(e1_, s_), "cudaEventRecord");
  ck(cudaEventSynchronize(e1_), "cudaEventSynchronize");
  float ms = 0;
  ck(cudaEventElapsedTime(&ms, e0_, e1_), "cudaEventElapsedTime");
  return ms;
}

uint64_t Rank::mismatches(const uint8_t* p, uint64_t bytes, uint32_t seed, const char* what) {
  unsigned long long got[2] = {0, 0};
  ck(cudaMemsetAsync(bad_, 0, sizeof got[0], s_), "cudaMemset");
  ck(cudaMemsetAsync(bad_ + 1, 0xff, sizeof got[1], s_), "cudaMemset");
  k_check<<<512, 256, 0, s_>>>(reinterpret_cast<const uint32_t*>(p), bytes / 4, seed, bad_);
  check_err("k_check");
  ck(cudaMemcpy(got, bad_, sizeof got, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (got[0])
    std::fprintf(stderr, "rank %d: %s %s: %llu of %llu words wrong, the first at byte %llu\n", r_, what,
                 human(bytes).c_str(), got[0], static_cast<unsigned long long>(bytes / 4), got[1] * 4);
  return got[0];
}

void Rank::bandwidth() {
  uint8_t* mine = static_cast<uint8_t*>(bw_->local());
  const int receiver = o_.bw_self ? 0 : 1;
  if (r_ == 0) print_bw_header(run_);
  for (uint64_t n = o_.bw_min; n <= o_.bw_max; n *= o_.bw_factor) {
    pr_.step("put bandwidth " + human(n));
    if (r_ == receiver) {
      ck(cudaMemsetAsync(mine + o_.bw_max, 0, n, s_), "cudaMemset");
      check_err("clear");
    }
    agree(0);
    // One pass checked on the receiving side; its time sets #iterations.
    const float one = r_ == 0 ? time_put(n, 1, pdl_) : 0.f;
    agree(0);
    uint64_t bad = r_ == receiver ? mismatches(mine + o_.bw_max, n, 1, "put") : 0;
    uint64_t their_bad = 0;
    agree(bad, &their_bad);
    if (r_ != receiver) bad = their_bad;
    if (r_ == 0) {
      BwRow row;
      row.bytes = n;
      row.verified = bad == 0;
      row.ctas = bw_ctas(n);
      row.iters = uint32_t(clamp_count(o_.trial_ms / std::max(one, 1e-3f), 3, 10000));
      time_copy(n, 1);  // warm-up
      const bool plain_too = pdl_ && o_.bw_launch == "both";
      const auto gbps = [&](float ms) { return double(n) * row.iters / (ms * 1e-3) * 1e-9; };
      std::vector<double> k, kp, b;
      for (int t = 0; t < o_.trials; ++t) {
        k.push_back(gbps(time_put(n, row.iters, pdl_)));
        if (plain_too) kp.push_back(gbps(time_put(n, row.iters, false)));
        b.push_back(gbps(time_copy(n, row.iters)));
      }
      row.kinet_gbps = median(k);
      if (plain_too) row.plain_gbps = median(kp);
      row.base_gbps = median(b);
      run_.bw.push_back(row);
      pr_.clear();
      print_bw_row(row);
    }
    agree(0);
  }
  if (r_ == 0) print_rule();
}

double Rank::launch_pingpong(int g, uint64_t bytes, uint64_t rtts) {
  const uint64_t L = o_.lat_max;
  const LatArgs a{bytes, rtts, seq_, 0, L, 2 * L, 2 * L + 8};
  seq_ += rtts;
  const WindowHandle w = lat_->handle();
  if (g == kThread) k_pingpong<kThread><<<1, 1, 0, s_>>>(c_, w, a, err_, t_);
  else if (g == kWarp) k_pingpong<kWarp><<<1, 32, 0, s_>>>(c_, w, a, err_, t_);
  else k_pingpong<kCta><<<1, o_.lat_cta_threads, 0, s_>>>(c_, w, a, err_, t_);
  check_err("k_pingpong");
  if (r_ != 0) return 0;
  uint64_t t[2];
  ck(cudaMemcpy(t, t_, sizeof t, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return double(t[1] - t[0]) / double(rtts - 1) / 2 / 1000;
}

void Rank::latency() {
  const uint64_t L = o_.lat_max;
  uint8_t* mine = static_cast<uint8_t*>(lat_->local());
  if (r_ == 0) print_lat_header(run_);
  for (int g : {kThread, kWarp, kCta}) {
    for (uint64_t n = 8; n <= L; n *= 8) {
      pr_.step(std::string("ping-pong ") + group_name(g) + " " + human(n));
      ck(cudaMemsetAsync(mine + L, 0, n, s_), "cudaMemset");
      check_err("clear");
      agree(0);
      // 4 round trips: the data checked on both sides; the time sets #round trips.
      const double h = launch_pingpong(g, n, 4);
      uint64_t bad = mismatches(mine + L, n, uint32_t(2 - r_), "put_signal");
      uint64_t peer_bad = 0;
      agree(bad, &peer_bad);
      const uint64_t rtts = agree(clamp_count(o_.launch_ms * 1000 / std::max(2 * h, 1e-3), 4, 100000));
      LatRow row;
      row.group = group_name(g);
      row.threads = g == kThread ? 1 : g == kWarp ? 32 : o_.lat_cta_threads;
      row.bytes = n;
      row.round_trips = rtts - 1;
      row.verified = bad == 0 && peer_bad == 0;
      for (int l = 0; l < o_.launches; ++l) row.half_rtt_us.push_back(launch_pingpong(g, n, rtts));
      agree(0);
      if (r_ == 0) {
        run_.lat.push_back(row);
        pr_.clear();
        print_lat_row(row);
      }
    }
  }
  if (r_ != 0) return;
  print_rule();
  // Without MPS the two processes' kernels take turns on the GPU (time
  // slices of about a millisecond): each round trip then waits for a switch.
  if (!run_.lat.empty() && median(run_.lat.front().half_rtt_us) > 50) {
    run_.notes.push_back("ping-pong half round trips above 50 us: the two processes' kernels most likely take turns "
                         "on the GPU (time slicing, no MPS); run under MPS (nvidia-cuda-mps-control -d) to measure "
                         "the communicator rather than the scheduler");
    std::printf(" note: %s\n", run_.notes.back().c_str());
  }
}

void Rank::barrier() {
  auto launch = [&](uint64_t n) {
    k_barrier<<<1, 1, 0, s_>>>(c_, n, err_, t_);
    check_err("k_barrier");
    uint64_t t[2];
    ck(cudaMemcpy(t, t_, sizeof t, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return double(t[1] - t[0]) / double(n - 1) / 1000;
  };
  pr_.step("barrier");
  agree(0);
  const double one = launch(4);
  const uint64_t n = agree(clamp_count(o_.launch_ms * 1000 / std::max(one, 1e-3), 4, 100000));
  BarrierRow row;
  row.barriers = n - 1;
  for (int l = 0; l < o_.launches; ++l) row.us.push_back(launch(n));
  agree(0);
  if (r_ == 0) {
    run_.barrier.push_back(row);
    pr_.clear();
    print_barrier(run_, row);
    print_rule();
  }
}

void Rank::finish() {
  pr_.clear();
  comm_->barrier();
}

// How many progress steps the run has.
int points(const GpuOpts& o) {
  int n = 0;
  if (o.only.find("bw") != std::string::npos)
    for (uint64_t b = o.bw_min; b <= o.bw_max; b *= o.bw_factor) ++n;
  if (o.only.find("lat") != std::string::npos)
    for (uint64_t b = 8; b <= o.lat_max; b *= 8) n += 3;
  return n + (o.only.find("barrier") != std::string::npos);
}

std::string gpu_rank(int r, Bootstrap& bs, const GpuOpts& o) {
  GpuRun run;
  run.command_line = o.command_line;
  run.path = o.path;
  run.transport = o.transport;
  run.bw_threads = o.bw_threads;
  run.bw_chunk = o.bw_chunk;
  run.bw_bytes_per_thread = o.bw_bytes_per_thread;
  run.lat_cta_threads = o.lat_cta_threads;
  run.trials = o.trials;
  run.launches = o.launches;
  try {
    Rank k(r, bs, o, run, points(o));
    k.setup();
    if (o.only.find("bw") != std::string::npos) k.bandwidth();
    if (o.only.find("lat") != std::string::npos) k.latency();
    if (o.only.find("barrier") != std::string::npos) k.barrier();
    k.finish();
  } catch (const std::exception& e) {
    run.error = e.what();
  }
  std::fflush(stdout);
  if (r == 0 && !o.json.empty() && !write_json(o.json, to_json(run)) && run.error.empty()) run.error = "cannot write " + o.json;
  if (!run.error.empty()) return run.error;
  return run.all_verified() ? "" : "wrong result (rows marked WRONG)";
}

}  // namespace

bool gpu_visible() {
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    int n = 0;
    _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 1);
  }
  int st = 0;
  for (int i = 0; i < 6000; ++i) {  // 60 s
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) && WEXITSTATUS(st) == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return false;
}

int run_gpu(const GpuOpts& o) {
  setenv("KINET_SOCKET_IFNAME", "lo", 0);  // both ranks on this host
  const auto bs_timeout = std::chrono::milliseconds(std::max<uint64_t>(60000, 2ull * o.timeout_ms));
  auto res = kinet::test::run_ranks(
      2, [&](int r, int, Bootstrap& bs) { return gpu_rank(r, bs, o); }, std::chrono::seconds(o.deadline_s),
      bs_timeout);
  int rc = res.size() == 2 ? 0 : 1;
  for (size_t r = 0; r < res.size(); ++r) {
    if (res[r].exit_code == 0 && !res[r].timed_out) continue;
    std::fprintf(stderr, "kinet-comm-perf: rank %zu: exit %d%s: %s\n", r, res[r].exit_code,
                 res[r].timed_out ? " (killed at the deadline)" : "", res[r].out.c_str());
    rc = 1;
  }
  return rc;
}

}  // namespace kcp
