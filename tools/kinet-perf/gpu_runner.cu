// kinet-perf — the GPU-kernel runner (--gpu): CUDA kernels post through the
// device verbs (kinet::dev::put/put_inline/get/fetch_add, warp_put/cta_put),
// the data buffers live in GPU memory (client on GPU 0, server on GPU 1 when
// there are two GPUs, else both on GPU 0), the rings in pinned host memory,
// the QPs' posting state on the poster's GPU (QpConfig::posters = Gpu).
//
//   write_lat   a kernel per endpoint, one thread each: ping-pong, each side
//               polls the last byte of its receive buffer for an iteration
//               marker, then writes back (perftest's ib_write_lat scheme).
//   write_bw /  a kernel on the client GPU: 1 thread (dev::put/get), one warp
//   read_bw     (warp_put/warp_get) or one CTA (cta_put/cta_get) posting one
//               WQE per thread per batch, up to --tx-depth in flight per QP,
//               a completion requested every --signal-every messages.
//   atomic_lat  a kernel on the client GPU: fetch_add + wait per iteration,
//               every fetched value checked in the kernel, the final remote
//               value by the host.
//
// Times are the GPU's %globaltimer (ns). Every wait in the kernels is bounded
// by the QPs' timeout; the host polls the kernels (cudaStreamQuery) with a
// watchdog on their progress. Kernels run on non-blocking streams: the emu
// engine copies on non-blocking streams of its own, and neither may wait for
// the other through the legacy default stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gpu_runner.hpp"
#include "kinet/device/coop.cuh"
#include "kinet/kinet.hpp"
#include "progress.hpp"

namespace kinet::perf {
namespace {

using dev::Sharing;
constexpr Sharing kX = Sharing::Exclusive;  // one thread (or one group's leader) owns each QP

// ---------------------------------------------------------------------------
// CUDA helpers (host)

std::string cuda_msg(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

void cuda_ok(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear it unless sticky
  throw PerfError("CUDA: " + what + " failed: " + cuda_msg(e));
}

// Makes device d current for a scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(int d) : want_(d) {
    cuda_ok(cudaGetDevice(&prev_), "cudaGetDevice");
    if (prev_ != d) cuda_ok(cudaSetDevice(d), "cudaSetDevice(" + std::to_string(d) + ")");
  }
  ~DeviceGuard() {
    if (prev_ != want_) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0, want_ = 0;
};

std::string hex64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%016" PRIx64, v);
  return b;
}

// ---------------------------------------------------------------------------
// Shared between kernels and host: mapped pinned host memory.

enum Where : int32_t {
  kWhereNone = 0,
  kWherePost = 1,       // posting an operation
  kWhereWaitPeer = 2,   // write_lat: waiting for the peer's write (marker byte)
  kWherePeerAbort = 3,  // stopped because the other kernel (or the host) gave up
  kWhereComplete = 4,   // waiting for the last completions (quiet)
  kWhereMismatch = 5,   // atomic_lat: fetched value differs from the expected one
  kWhereFlow = 6,       // bw: waiting for a completion to keep tx-depth in flight
};
constexpr int32_t kStatusNotVerb = -1;  // failure that is not a verb's Status (see where)

struct alignas(64) KernelCtl {
  uint64_t progress;    // operations done (published now and then)
  uint64_t elapsed_ns;  // bw: the measured phase, first post to last completion
  uint64_t iter;        // failure: iteration (or messages posted)
  uint64_t got, want;   // failure details
  int32_t status;       // 0 = ok, a kinet::Status, or kStatusNotVerb
  int32_t where;        // Where
  uint32_t qp;          // bw failure: QP index
  uint32_t done;        // 1 when the kernel finished its work (set last)
};
struct alignas(64) Shared {
  KernelCtl k[2];   // [0] client kernel, [1] server kernel
  uint32_t abort;   // set by a failing kernel or by the host: the other kernel stops
};

// The kernels' bodies are __host__ __device__: the same code can be driven by
// host threads against host memory (a test harness), not just launched.

KINET_HD bool abort_raised(const uint32_t* abort) {
  return *reinterpret_cast<const volatile uint32_t*>(abort) != 0;
}

__host__ __device__ inline void report_fail(KernelCtl* c, uint32_t* abort, int32_t status, int32_t where,
                                           uint64_t iter, uint64_t got = 0, uint64_t want = 0, uint32_t qp = 0) {
  volatile KernelCtl* v = c;
  v->iter = iter;
  v->got = got;
  v->want = want;
  v->qp = qp;
  v->where = where;
  v->status = status == 0 ? kStatusNotVerb : status;
  fence_release<Scope::System>();
  if (where != kWherePeerAbort) {
    *reinterpret_cast<volatile uint32_t*>(abort) = 1;
    fence_release<Scope::System>();
  }
}

__host__ __device__ inline void report_done(KernelCtl* c) {
  fence_release<Scope::System>();
  reinterpret_cast<volatile KernelCtl*>(c)->done = 1;
  fence_release<Scope::System>();
}

__host__ __device__ inline void publish_progress(KernelCtl* c, uint64_t v) {
  reinterpret_cast<volatile KernelCtl*>(c)->progress = v;
}

constexpr uint64_t kProgressEveryNs = 1000000;  // kernels publish progress about every millisecond

// ---------------------------------------------------------------------------
// write_lat: ping-pong, one thread per endpoint.

__host__ __device__ inline uint8_t marker(uint64_t i) { return static_cast<uint8_t>(1 + i % 255); }

struct LatArgs {
  dev::QpHandle q;
  uint8_t* tx;          // own send buffer (GPU memory, registered)
  Lkey lkey;
  const uint8_t* rx;    // own receive buffer: the peer writes here
  uint64_t raddr;       // the peer's receive buffer
  Rkey rkey;
  uint32_t bytes;
  uint32_t inl;         // payload inside the WQE (put_inline)
  uint32_t client;      // 1: sends first, measures
  uint64_t total;       // warmup + iters
  uint64_t warmup;
  uint64_t timeout_ns;  // bound of the marker wait
  uint64_t* samples;    // client: round trip of each measured iteration, ns (GPU memory)
  KernelCtl* ctl;
  uint32_t* abort;
};

// Spins until *p == want. 0: seen; 1: timed out (*seen = last value); 2: abort raised.
__host__ __device__ inline int wait_byte(const uint8_t* p, uint8_t want, uint64_t timeout_ns, const uint32_t* abort,
                                         uint8_t* seen) {
  const volatile uint8_t* v = p;
  if (*v == want) return 0;
  const uint64_t start = now_ns();
  for (uint32_t spins = 1;; ++spins) {
    if (*v == want) return 0;
    if ((spins & 63) == 0) {
      if (now_ns() - start > timeout_ns) {
        *seen = *v;
        return 1;
      }
      if ((spins & 1023) == 0 && abort_raised(abort)) return 2;
    }
#if !KINET_ON_DEVICE
    spin_pause();  // host threads: leave the CPU to the NIC engine
#endif
  }
}

__host__ __device__ inline void write_lat_body(const LatArgs& a) {
  const uint32_t n = a.bytes;
  uint64_t last_pub = now_ns();
  for (uint64_t i = 0; i < a.total; ++i) {
    const uint8_t m = marker(i);
    uint8_t seen = 0;
    if (!a.client) {  // the server answers ping i
      const int r = wait_byte(a.rx + n - 1, m, a.timeout_ns, a.abort, &seen);
      if (r == 1) return report_fail(a.ctl, a.abort, kStatusNotVerb, kWhereWaitPeer, i, seen, m);
      if (r == 2) return report_fail(a.ctl, a.abort, kStatusNotVerb, kWherePeerAbort, i);
    }
    const uint64_t t0 = now_ns();
    a.tx[n - 1] = m;
    fence_release<Scope::System>();  // the marker is in memory before the WQE that carries it
    const Status st = a.inl ? dev::put_inline<kX>(a.q, a.tx, n, a.raddr, a.rkey)
                            : dev::put<kX>(a.q, a.tx, a.lkey, a.raddr, a.rkey, n);
    if (st != Status::Ok) return report_fail(a.ctl, a.abort, static_cast<int32_t>(st), kWherePost, i);
    if (a.client) {  // the pong of iteration i
      const int r = wait_byte(a.rx + n - 1, m, a.timeout_ns, a.abort, &seen);
      if (r == 1) return report_fail(a.ctl, a.abort, kStatusNotVerb, kWhereWaitPeer, i, seen, m);
      if (r == 2) return report_fail(a.ctl, a.abort, kStatusNotVerb, kWherePeerAbort, i);
      const uint64_t t1 = now_ns();
      if (i >= a.warmup) a.samples[i - a.warmup] = t1 - t0;
      if (t1 - last_pub > kProgressEveryNs) {  // outside the timed part: the fence waits for the host store
        publish_progress(a.ctl, i + 1);
        fence_release<Scope::System>();
        last_pub = now_ns();
      }
    }
  }
  if (a.client) publish_progress(a.ctl, a.total);
  // Every write has completed at its initiator: its payload is in place.
  const Status st = dev::quiet<kX>(a.q);
  if (st != Status::Ok) return report_fail(a.ctl, a.abort, static_cast<int32_t>(st), kWhereComplete, a.total);
  report_done(a.ctl);
}
__global__ void k_write_lat(LatArgs a) { write_lat_body(a); }

// ---------------------------------------------------------------------------
// atomic_lat: fetch_add round trips, one thread.

// The add operand of iteration i (host and device): odd, 32 bits.
__host__ __device__ inline uint64_t atomic_operand(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (z & 0xffffffffu) | 1u;
}

struct AtomicArgs {
  dev::QpHandle q;
  uint64_t* fetched;   // client GPU memory, registered
  Lkey lkey;
  uint64_t raddr;      // the counter on the server
  Rkey rkey;
  uint64_t initial;    // the counter's value before the first add
  uint64_t seed;
  uint64_t total, warmup;
  uint64_t* samples;
  KernelCtl* ctl;
  uint32_t* abort;
};

__host__ __device__ inline void atomic_lat_body(const AtomicArgs& a) {
  uint64_t expected = a.initial;
  uint64_t last_pub = now_ns();
  const volatile uint64_t* fetched = a.fetched;
  for (uint64_t i = 0; i < a.total; ++i) {
    const uint64_t add = atomic_operand(a.seed, i);
    dev::Ticket t;
    const uint64_t t0 = now_ns();
    Status st = dev::fetch_add<kX>(a.q, a.fetched, a.lkey, a.raddr, a.rkey, add, dev::kSignal, &t);
    if (st != Status::Ok) return report_fail(a.ctl, a.abort, static_cast<int32_t>(st), kWherePost, i);
    st = dev::wait<kX>(a.q, t);  // the CQE is read with acquire: the fetched value is in place
    const uint64_t t1 = now_ns();
    if (st != Status::Ok) return report_fail(a.ctl, a.abort, static_cast<int32_t>(st), kWhereComplete, i);
    const uint64_t old = *fetched;
    if (old != expected) return report_fail(a.ctl, a.abort, kStatusNotVerb, kWhereMismatch, i, old, expected);
    expected += add;
    if (i >= a.warmup) a.samples[i - a.warmup] = t1 - t0;
    if (t1 - last_pub > kProgressEveryNs) {
      publish_progress(a.ctl, i + 1);
      fence_release<Scope::System>();
      last_pub = now_ns();
    }
  }
  publish_progress(a.ctl, a.total);
  reinterpret_cast<volatile KernelCtl*>(a.ctl)->want = expected;
  report_done(a.ctl);
}
__global__ void k_atomic_lat(AtomicArgs a) { atomic_lat_body(a); }

// ---------------------------------------------------------------------------
// write_bw / read_bw: one thread, one warp or one CTA posting on the client.

enum Group : int { kOne = 0, kWarp = 1, kCta = 2 };

struct FlowState {  // per QP, touched by the group's leader only
  uint64_t posted;  // messages posted
  uint64_t done;    // messages known complete
  uint64_t head, tail;  // FIFO of signalled batches: (ticket, posted count when it completes)
};

struct BwArgs {
  const dev::QpHandle* qps;  // nqp handles (GPU memory)
  uint32_t nqp;
  uint32_t tx_depth;         // messages in flight per QP
  uint32_t signal_every;
  uint32_t fifo_cap;
  uint8_t* local;            // QP q: local + q * stride (client tx for writes, rx for reads)
  uint64_t remote;           // QP q: remote + q * stride
  uint64_t stride;
  Lkey lkey;
  Rkey rkey;
  uint32_t bytes;
  uint64_t warmup_batches, iter_batches;
  FlowState* flow;           // nqp entries (GPU memory, zeroed)
  uint64_t* fifo;            // nqp * fifo_cap * 2 words (GPU memory)
  KernelCtl* ctl;
  uint32_t* abort;
};

template <int G> KINET_HD uint32_t group_size() {
#if KINET_ON_DEVICE
  return G == kOne ? 1u : blockDim.x;
#else
  return 1;  // host threads run the one-thread variant only
#endif
}
KINET_HD bool is_leader() {
#if KINET_ON_DEVICE
  return threadIdx.x == 0;
#else
  return true;
#endif
}

// Value of the leader (thread 0), for every thread of the group.
template <int G> KINET_HD uint32_t bcast(uint32_t v) {
  if constexpr (G == kOne) {
    return v;
  }
#if KINET_ON_DEVICE
  else if constexpr (G == kWarp) {
    const unsigned mask = blockDim.x >= 32 ? 0xffffffffu : ((1u << blockDim.x) - 1u);
    return __shfl_sync(mask, v, 0);
  } else {
    __shared__ uint32_t s_word;
    __syncthreads();  // every thread has read the previous value
    if (threadIdx.x == 0) s_word = v;
    __syncthreads();
    return s_word;
  }
#else
  return v;
#endif
}

// One batch: a WQE per thread of the group (the ticket covers the batch).
template <int G, bool Read>
KINET_HD Status group_post(const dev::QpHandle& h, const BwArgs& a, uint32_t q, uint32_t flags, dev::Ticket* t) {
  uint8_t* local = a.local + size_t(q) * a.stride;
  const uint64_t remote = a.remote + uint64_t(q) * a.stride;
  if constexpr (G == kOne) {
    return Read ? dev::get<kX>(h, local, a.lkey, remote, a.rkey, a.bytes, flags, t)
                : dev::put<kX>(h, local, a.lkey, remote, a.rkey, a.bytes, flags, t);
  }
#if KINET_ON_DEVICE
  else if constexpr (G == kWarp) {
    __syncwarp(blockDim.x >= 32 ? 0xffffffffu : ((1u << blockDim.x) - 1u));  // all lanes converged: one batch
    return Read ? dev::warp_get<kX>(h, local, a.lkey, remote, a.rkey, a.bytes, flags, t)
                : dev::warp_put<kX>(h, local, a.lkey, remote, a.rkey, a.bytes, flags, t);
  } else {
    return Read ? dev::cta_get<kX>(h, local, a.lkey, remote, a.rkey, a.bytes, flags, t)
                : dev::cta_put<kX>(h, local, a.lkey, remote, a.rkey, a.bytes, flags, t);
  }
#else
  return Status::InvalidArgument;  // groups exist on the GPU only
#endif
}

// Leader: waits until a batch of n more messages fits in tx_depth on QP q.
__host__ __device__ inline Status flow_control(const BwArgs& a, const dev::QpHandle& h, uint32_t q, uint32_t n) {
  FlowState& f = a.flow[q];
  while (f.posted + n - f.done > a.tx_depth) {
    if (f.head == f.tail) {  // nothing signalled in flight: wait for everything
      const Status st = dev::quiet<kX>(h);
      if (st != Status::Ok) return st;
      f.done = f.posted;
      break;
    }
    const uint64_t* e = a.fifo + 2 * (size_t(q) * a.fifo_cap + f.head % a.fifo_cap);
    const Status st = dev::wait<kX>(h, dev::Ticket{e[0]});
    if (st != Status::Ok) return st;
    f.done = e[1];
    ++f.head;
  }
  return Status::Ok;
}

// Leader: waits for everything posted on every QP.
__host__ __device__ inline Status drain(const BwArgs& a, uint32_t* failed_qp) {
  for (uint32_t q = 0; q < a.nqp; ++q) {
    const dev::QpHandle h = a.qps[q];
    const Status st = dev::quiet<kX>(h);
    if (st != Status::Ok) {
      *failed_qp = q;
      return st;
    }
    FlowState& f = a.flow[q];
    f.done = f.posted;
    f.head = f.tail;
  }
  return Status::Ok;
}

template <int G, bool Read>
__host__ __device__ inline void bw_body(const BwArgs& a) {
  const bool leader = is_leader();
  const uint32_t n = group_size<G>();
  uint64_t t0 = 0, last_pub = now_ns(), msgs = 0;
  for (int phase = 0; phase < 2; ++phase) {  // warmup, then measured
    const uint64_t batches = phase ? a.iter_batches : a.warmup_batches;
    if (phase == 1 && leader) t0 = now_ns();
    for (uint64_t b = 0; b < batches; ++b) {
      const uint32_t q = static_cast<uint32_t>(b % a.nqp);
      const dev::QpHandle h = a.qps[q];
      uint32_t word = 0;  // leader -> group: status << 1 | signal
      if (leader) {
        const Status st = flow_control(a, h, q, n);
        const uint64_t p = a.flow[q].posted;
        const bool sig = (p + n) / a.signal_every != p / a.signal_every;  // crosses a multiple of signal_every
        word = (static_cast<uint32_t>(st) << 1) | (sig ? 1u : 0u);
      }
      word = bcast<G>(word);
      if ((word >> 1) != 0) {
        if (leader) report_fail(a.ctl, a.abort, static_cast<int32_t>(word >> 1), kWhereFlow, msgs, q, 0, q);
        return;
      }
      const uint32_t flags = (word & 1u) ? uint32_t(dev::kSignal) : 0u;
      dev::Ticket t{};
      const Status st = group_post<G, Read>(h, a, q, flags, &t);  // same status on every thread of the group
      if (st != Status::Ok) {
        if (leader) report_fail(a.ctl, a.abort, static_cast<int32_t>(st), kWherePost, msgs, q, 0, q);
        return;
      }
      msgs += n;
      if (leader) {
        FlowState& f = a.flow[q];
        f.posted += n;
        if (flags) {
          if (f.tail - f.head >= a.fifo_cap) ++f.head;  // never expected: a later ticket covers the dropped one
          uint64_t* e = a.fifo + 2 * (size_t(q) * a.fifo_cap + f.tail % a.fifo_cap);
          e[0] = t.idx;
          e[1] = f.posted;
          ++f.tail;
        }
        const uint64_t now = now_ns();
        if (now - last_pub > kProgressEveryNs) {
          publish_progress(a.ctl, msgs);
          last_pub = now;
        }
      }
    }
    uint32_t word = 0;
    uint32_t failed_qp = 0;
    if (leader) word = static_cast<uint32_t>(drain(a, &failed_qp));
    word = bcast<G>(word);
    if (word != 0) {
      if (leader)
        report_fail(a.ctl, a.abort, static_cast<int32_t>(word), kWhereComplete, msgs, failed_qp, 0, failed_qp);
      return;
    }
  }
  if (leader) {
    const uint64_t t1 = now_ns();
    reinterpret_cast<volatile KernelCtl*>(a.ctl)->elapsed_ns = t1 - t0;
    publish_progress(a.ctl, msgs);
    report_done(a.ctl);
  }
}
template <int G, bool Read>
__global__ void __launch_bounds__(1024) k_bw(BwArgs a) { bw_body<G, Read>(a); }

// ---------------------------------------------------------------------------
// Every kernel of this file, loaded on each GPU before the first launch: with
// lazy module loading, loading a kernel while another one spins can wait for
// the spinning one (the ping-pong's two kernels would deadlock).
struct KernelRef {
  const char* name;
  const void* fn;
};
const std::vector<KernelRef>& all_kernels() {
  static const std::vector<KernelRef> ks = {
      {"k_write_lat", reinterpret_cast<const void*>(&k_write_lat)},
      {"k_atomic_lat", reinterpret_cast<const void*>(&k_atomic_lat)},
      {"k_bw<one,write>", reinterpret_cast<const void*>(&k_bw<kOne, false>)},
      {"k_bw<one,read>", reinterpret_cast<const void*>(&k_bw<kOne, true>)},
      {"k_bw<warp,write>", reinterpret_cast<const void*>(&k_bw<kWarp, false>)},
      {"k_bw<warp,read>", reinterpret_cast<const void*>(&k_bw<kWarp, true>)},
      {"k_bw<cta,write>", reinterpret_cast<const void*>(&k_bw<kCta, false>)},
      {"k_bw<cta,read>", reinterpret_cast<const void*>(&k_bw<kCta, true>)},
  };
  return ks;
}

// ---------------------------------------------------------------------------
// Buffers in GPU memory.

class GpuMemory final : public MemoryOps {
 public:
  explicit GpuMemory(const GpuSetup& s) : setup_(s), cur_gpu_(s.gpu[0]) {}
  ~GpuMemory() override {
    for (auto& [d, st] : streams_) {
      if (cudaSetDevice(d) == cudaSuccess) cudaStreamDestroy(st);
    }
  }
  MemoryKind kind() const override { return MemoryKind::Gpu; }
  RingPlacement rings() const override { return setup_.rings_in_gpu ? RingPlacement::Gpu : RingPlacement::Host; }
  Posters posters() const override { return Posters::Gpu; }
  void enter_side(int side) override {
    cur_gpu_ = setup_.gpu[side == 0 ? 0 : 1];
    cuda_ok(cudaSetDevice(cur_gpu_), "cudaSetDevice(" + std::to_string(cur_gpu_) + ")");
  }
  void* alloc(size_t bytes) override {
    DeviceGuard g(cur_gpu_);
    void* raw = nullptr;
    cuda_ok(cudaMalloc(&raw, bytes + 4096),
            "cudaMalloc of " + std::to_string(bytes) + " bytes on GPU " + std::to_string(cur_gpu_));
    void* p = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(raw) + 4095) & ~uintptr_t(4095));
    allocs_[p] = {raw, cur_gpu_};
    return p;
  }
  void free(void* p) noexcept override {
    auto it = allocs_.find(p);
    if (it == allocs_.end()) return;
    int prev = 0;
    const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
    if (cudaSetDevice(it->second.gpu) == cudaSuccess) cudaFree(it->second.raw);
    if (have_prev) cudaSetDevice(prev);
    allocs_.erase(it);
  }
  void copy_to(void* dst, const void* src, size_t n) override { copy(dst, src, n, dst); }
  void copy_from(void* dst, const void* src, size_t n) override { copy(dst, src, n, src); }
  void fill(void* dst, uint8_t byte, size_t n) override {
    if (n == 0) return;
    const int d = gpu_of(dst);
    if (d < 0) {
      std::memset(dst, byte, n);
      return;
    }
    DeviceGuard g(d);
    cudaStream_t s = stream(d);
    cuda_ok(cudaMemsetAsync(dst, byte, n, s), "cudaMemsetAsync of " + std::to_string(n) + " bytes");
    cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize after cudaMemsetAsync");
  }

 private:
  struct Alloc {
    void* raw;
    int gpu;
  };
  // GPU of device memory p, or -1 for host memory.
  static int gpu_of(const void* p) {
    cudaPointerAttributes at{};
    const cudaError_t e = cudaPointerGetAttributes(&at, p);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return -1;
    }
    return at.type == cudaMemoryTypeDevice ? at.device : -1;
  }
  // A non-blocking stream per GPU: these copies never wait for (nor hold up)
  // kernels or the emu engine's copies through the legacy default stream.
  cudaStream_t stream(int d) {
    auto it = streams_.find(d);
    if (it != streams_.end()) return it->second;
    DeviceGuard g(d);
    cudaStream_t s = nullptr;
    cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    streams_[d] = s;
    return s;
  }
  void copy(void* dst, const void* src, size_t n, const void* gpu_side) {
    if (n == 0) return;
    const int d = gpu_of(gpu_side);
    if (d < 0) {
      std::memcpy(dst, src, n);
      return;
    }
    DeviceGuard g(d);
    cudaStream_t s = stream(d);
    cuda_ok(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s), "cudaMemcpyAsync of " + std::to_string(n) + " bytes");
    cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize after cudaMemcpyAsync");
  }

  GpuSetup setup_;
  int cur_gpu_;
  std::unordered_map<void*, Alloc> allocs_;
  std::unordered_map<int, cudaStream_t> streams_;
};

// GPU memory for one test case; freed on scope exit.
class DevBuf {
 public:
  DevBuf(int gpu, size_t bytes, const char* what) : gpu_(gpu) {
    DeviceGuard g(gpu);
    cuda_ok(cudaMalloc(&p_, std::max<size_t>(bytes, 8)),
            std::string("cudaMalloc of ") + std::to_string(bytes) + " bytes (" + what + ") on GPU " +
                std::to_string(gpu));
  }
  ~DevBuf() {
    int prev = 0;
    const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
    if (cudaSetDevice(gpu_) == cudaSuccess) cudaFree(p_);
    if (have_prev) cudaSetDevice(prev);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <class T> T* as() const { return static_cast<T*>(p_); }

 private:
  int gpu_;
  void* p_ = nullptr;
};

// ---------------------------------------------------------------------------

class GpuRunner final : public Runner {
 public:
  GpuRunner(Testbed& tb, const GpuSetup& s, const GpuRunnerConfig& cfg)
      : tb_(tb), setup_(s), cfg_(cfg), rng_(cfg.seed) {
    if (tb.mem().kind() != MemoryKind::Gpu || tb.mem().posters() != Posters::Gpu)
      throw PerfError("the GPU runner needs a testbed on GPU memory (make_gpu_memory)");
    if (!tb.client_attr().gpu_memory || !tb.server_attr().gpu_memory)
      throw PerfError("device " + tb.client_attr().name + " cannot move GPU memory (no usable CUDA runtime for it)");
    if (cfg_.threads < 1 || cfg_.threads > 1024) throw PerfError("--gpu-threads must be 1..1024");
    const int gpus[2] = {s.gpu[0], s.gpu[1]};
    for (int side = 0; side < 2; ++side) {
      if (side == 1 && gpus[1] == gpus[0]) continue;
      DeviceGuard g(gpus[side]);
      // The library zeroes the QPs' posting state with cudaMemset on the
      // legacy stream; our kernels run on non-blocking streams: finish it.
      cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize on GPU " + std::to_string(gpus[side]));
      for (const KernelRef& k : all_kernels()) {
        cudaFuncAttributes fa{};
        const cudaError_t e = cudaFuncGetAttributes(&fa, k.fn);
        if (e != cudaSuccess) {
          cudaGetLastError();
          throw PerfError("GPU " + std::to_string(gpus[side]) + " (" + s.name[side] + ") cannot load kernel " +
                          k.name + ": " + cuda_msg(e) +
                          " (is its architecture in KINET_CUDA_ARCHITECTURES of this build?)");
        }
        if (std::strncmp(k.name, "k_bw<cta", 8) == 0 && cfg_.threads > 32 &&
            cfg_.threads > static_cast<uint32_t>(fa.maxThreadsPerBlock))
          throw PerfError("--gpu-threads " + std::to_string(cfg_.threads) + " exceeds " + k.name + "'s limit of " +
                          std::to_string(fa.maxThreadsPerBlock) + " threads per block on GPU " +
                          std::to_string(gpus[side]));
      }
    }
    for (int side = 0; side < 2; ++side) {
      DeviceGuard g(gpus[side]);
      cuda_ok(cudaStreamCreateWithFlags(&stream_[side], cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    }
    {
      DeviceGuard g(gpus[0]);
      void* p = nullptr;
      cuda_ok(cudaHostAlloc(&p, sizeof(Shared), cudaHostAllocMapped | cudaHostAllocPortable),
              "cudaHostAlloc of the kernels' control block");
      shared_ = static_cast<Shared*>(p);
      std::memset(shared_, 0, sizeof(Shared));
    }
    for (int side = 0; side < 2; ++side) {
      DeviceGuard g(gpus[side]);
      void* d = nullptr;
      cuda_ok(cudaHostGetDevicePointer(&d, shared_, 0),
              "cudaHostGetDevicePointer on GPU " + std::to_string(gpus[side]));
      dshared_[side] = static_cast<Shared*>(d);
    }
    // The client's QP handles, for the bw kernel.
    Endpoint& c = tb_.client();
    std::vector<dev::QpHandle> hs;
    for (auto& qp : c.qps) hs.push_back(qp->handle());
    {
      DeviceGuard g(gpus[0]);
      cuda_ok(cudaMalloc(&dqps_, hs.size() * sizeof(dev::QpHandle)), "cudaMalloc of the QP handles");
      cuda_ok(cudaMemcpyAsync(dqps_, hs.data(), hs.size() * sizeof(dev::QpHandle), cudaMemcpyHostToDevice, stream_[0]),
              "cudaMemcpyAsync of the QP handles");
      cuda_ok(cudaStreamSynchronize(stream_[0]), "cudaStreamSynchronize");
    }
  }

  ~GpuRunner() override {
    if (dqps_ && cudaSetDevice(setup_.gpu[0]) == cudaSuccess) cudaFree(dqps_);
    for (int side = 0; side < 2; ++side)
      if (stream_[side] && cudaSetDevice(setup_.gpu[side]) == cudaSuccess) cudaStreamDestroy(stream_[side]);
    if (shared_) cudaFreeHost(shared_);
  }

  std::string name() const override { return "gpu-kernels"; }

  std::string describe(const TestCase& tc) const override {
    const std::string g0 = "GPU " + std::to_string(setup_.gpu[0]), g1 = "GPU " + std::to_string(setup_.gpu[1]);
    switch (tc.kind) {
      case TestKind::WriteLat:
        return "CUDA kernels, 1 thread per endpoint (" + g0 + " <-> " + g1 + "), ping-pong on the last byte";
      case TestKind::AtomicLat:
        return "CUDA kernel, 1 thread on " + g0 + " (fetch_add, wait, check); counter on " + g1;
      default: {
        const bool rd = tc.kind == TestKind::ReadBw;
        const uint32_t n = cfg_.threads;
        const std::string ns = std::to_string(n);
        const std::string who =
            n == 1 ? std::string("1 thread (dev::") + (rd ? "get" : "put") + ")"
            : n <= 32 ? "1 warp of " + ns + " threads (dev::" + (rd ? "warp_get" : "warp_put") + ")"
                      : "1 CTA of " + ns + " threads (dev::" + (rd ? "cta_get" : "cta_put") + ")";
        return "CUDA kernel on " + g0 + ", " + who + "; server passive on " + g1;
      }
    }
  }


 private:
  // One launched kernel, as the host tracks it.
  struct Launch {
    const char* who;  // "client" / "server"
    int side;
    bool launched = false;
    bool running = false;
    cudaError_t error = cudaSuccess;  // launch or execution error
  };

  KernelCtl& ctl(int side) { return shared_->k[side]; }

  template <class T> static T host_load(const T& v) {
    return std::atomic_ref<T>(const_cast<T&>(v)).load(std::memory_order_acquire);
  }
  void raise_abort() { std::atomic_ref<uint32_t>(shared_->abort).store(1, std::memory_order_seq_cst); }

  void reset_shared() {
    std::memset(shared_, 0, sizeof(Shared));
    std::atomic_thread_fence(std::memory_order_seq_cst);  // before the launch that reads it
  }

  // Launches a kernel on side's GPU and stream. Records a launch error in l.
  template <class F> void launch(Launch& l, F&& f) {
    DeviceGuard g(setup_.gpu[l.side]);
    f(stream_[l.side]);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      l.error = e;
    } else {
      l.launched = true;
      l.running = true;
    }
  }

  // Waits for every launched kernel; never returns while one still runs. A
  // kernel that failed raises the abort flag itself; a CUDA error raises it
  // here, so the other kernel stops. If a kernel makes no progress for much
  // longer than its own (bounded) waits allow, the runner cannot stop it and
  // cannot free what it uses: it says so and exits.
  void wait_all(Launch* ls, int n, Progress& pr, const std::string& what) {
    const uint64_t limit = 3 * tb_.timeout_ns() + 10ull * 1000000000ull;
    uint64_t last_change = now_ns();
    uint64_t last_progress = host_load(ctl(0).progress);
    for (uint64_t polls = 0;; ++polls) {
      bool any = false;
      for (int k = 0; k < n; ++k) {
        Launch& l = ls[k];
        if (!l.running) continue;
        DeviceGuard g(setup_.gpu[l.side]);
        const cudaError_t r = cudaStreamQuery(stream_[l.side]);
        if (r == cudaErrorNotReady) {
          any = true;
          continue;
        }
        l.running = false;
        last_change = now_ns();  // the remaining kernels get a full period from here
        if (r != cudaSuccess) {
          l.error = r;
          cudaGetLastError();
          raise_abort();
        } else if (host_load(ctl(l.side).status) != 0) {
          raise_abort();
        }
      }
      if (!any) return;
      const uint64_t p = host_load(ctl(0).progress);
      if (p != last_progress) {
        last_progress = p;
        last_change = now_ns();
      }
      pr.update(p);
      if (now_ns() - last_change > limit) {
        raise_abort();
        pr.clear();
        std::fflush(stdout);
        std::string who;
        for (int k = 0; k < n; ++k)
          if (ls[k].running)
            who += std::string(who.empty() ? "" : ", ") + ls[k].who + " kernel on GPU " +
                   std::to_string(setup_.gpu[ls[k].side]);
        std::fprintf(stderr,
                     "kinet-perf: FATAL: %s: the %s made no progress for %.0f s although every wait in it is "
                     "bounded by %.0f s: a hang in the GPU runner or the software NIC. The kernel cannot be stopped "
                     "and its memory cannot be freed: exiting now (no JSON report).\n",
                     what.c_str(), who.c_str(), double(limit) * 1e-9, double(tb_.timeout_ns()) * 1e-9);
        std::fflush(stderr);
        std::_Exit(1);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(polls < 1000 ? 20 : 200));
    }
  }

  // Throws the first failure of the launched kernels (a kernel that stopped
  // only because the other one failed is reported last).
  void check_kernels(Launch* ls, int n, const std::string& test, const std::vector<QueuePair*>& qps_of_side0,
                     QueuePair* qp_side1) {
    auto who_of = [&](const Launch& l) {
      return std::string(l.who) + " kernel on GPU " + std::to_string(setup_.gpu[l.side]);
    };
    for (int k = 0; k < n; ++k)  // launch and execution errors first: they explain the rest
      if (ls[k].error != cudaSuccess)
        throw PerfError(test + ": " + who_of(ls[k]) + (ls[k].launched ? " failed: CUDA " : " did not launch: CUDA ") +
                        cuda_msg(ls[k].error));
    std::string peer_abort;
    for (int k = 0; k < n; ++k) {
      const Launch& l = ls[k];
      if (!l.launched) throw PerfError(test + ": " + who_of(l) + " was not launched (internal error)");
      const std::string who = who_of(l);
      const KernelCtl& c = ctl(l.side);
      const int32_t st = c.status;
      if (st == 0) {
        if (!c.done) throw PerfError(test + ": " + who + " ended without reporting (internal error)");
        continue;
      }
      const uint32_t qi = c.qp;
      QueuePair* qp = l.side == 0 ? (qi < qps_of_side0.size() ? qps_of_side0[qi] : nullptr) : qp_side1;
      std::string m = test + ": " + who;
      char b[256];
      switch (c.where) {
        case kWhereWaitPeer:
          std::snprintf(b, sizeof b,
                        " timed out after %" PRIu64 " ms waiting for the write of iteration %" PRIu64
                        " (marker 0x%02x expected, 0x%02x found)",
                        tb_.timeout_ns() / 1000000, c.iter, unsigned(c.want), unsigned(c.got));
          m += b;
          break;
        case kWherePeerAbort:
          if (peer_abort.empty())
            peer_abort = m + " stopped at iteration " + std::to_string(c.iter) + " because the other side failed";
          continue;
        case kWhereMismatch:
          m += ": iteration " + std::to_string(c.iter) + " fetched " + hex64(c.got) + ", expected " + hex64(c.want);
          break;
        case kWherePost:
          m += (tc_is_bw_ ? ": posting on QP " + std::to_string(qi) + " after " + std::to_string(c.iter) + " messages"
                          : ": posting the operation of iteration " + std::to_string(c.iter)) +
               ": " + status_string(static_cast<Status>(st));
          break;
        case kWhereFlow:
          m += ": waiting for a completion on QP " + std::to_string(qi) + " after " + std::to_string(c.iter) +
               " messages: " + status_string(static_cast<Status>(st));
          break;
        case kWhereComplete:
          m += (tc_is_bw_ ? ": waiting for the last completions on QP " + std::to_string(qi)
                          : ": waiting for the completion of iteration " + std::to_string(c.iter)) +
               ": " + status_string(static_cast<Status>(st));
          break;
        default:
          m += ": failed (status " + std::to_string(st) + ", where " + std::to_string(c.where) + ")";
      }
      auto add_error = [&](QueuePair* p, const char* label) {
        if (!p) return;
        const std::string le = p->last_error();
        if (!le.empty()) m += std::string(" [") + label + le + "]";
      };
      add_error(qp, "");
      // write_lat: a failed write of the other side shows up here as a timeout.
      QueuePair* other = l.side == 0 ? qp_side1 : (qps_of_side0.empty() ? nullptr : qps_of_side0[0]);
      if (other != qp) add_error(other, l.side == 0 ? "server QP: " : "client QP: ");
      throw PerfError(m);
    }
    if (!peer_abort.empty()) throw PerfError(peer_abort);
  }

  void fill_random(uint8_t* dst, size_t n) { perf::fill_random(tb_.mem(), rng_, stage_, dst, n); }
  void verify(const uint8_t* want, const uint8_t* got, size_t n, const std::string& what) {
    verify_bytes(tb_.mem(), want, got, n, what);
  }

  std::vector<double> samples_us(const DevBuf& buf, uint64_t count, double scale) {
    std::vector<uint64_t> ns(count);
    if (count) tb_.mem().copy_from(ns.data(), buf.as<uint64_t>(), count * sizeof(uint64_t));
    std::vector<double> us;
    us.reserve(count);
    for (uint64_t v : ns) us.push_back(double(v) * 1e-3 * scale);
    return us;
  }

  Result write_lat(const TestCase& tc, Progress& pr) override {
    tc_is_bw_ = false;
    Endpoint& c = tb_.client();
    Endpoint& s = tb_.server();
    const size_t n = tc.size;
    if (n > UINT32_MAX) throw PerfError("write_lat: message too large");
    fill_random(c.tx(0), n);
    fill_random(s.tx(0), n);
    tb_.mem().fill(c.rx(0), 0, n);
    tb_.mem().fill(s.rx(0), 0, n);
    const uint64_t total = tc.warmup + tc.iters;
    DevBuf samples(setup_.gpu[0], tc.iters * sizeof(uint64_t), "latency samples");
    const bool inl = tc.use_inline && n <= mlx5::kMaxInlineOneBB;

    LatArgs ca{};
    ca.q = c.qps[0]->handle();
    ca.tx = c.tx(0);
    ca.lkey = c.lkey();
    ca.rx = c.rx(0);
    ca.raddr = s.addr(s.rx(0));
    ca.rkey = s.rkey();
    ca.bytes = static_cast<uint32_t>(n);
    ca.inl = inl;
    ca.client = 1;
    ca.total = total;
    ca.warmup = tc.warmup;
    ca.timeout_ns = tb_.timeout_ns();
    ca.samples = samples.as<uint64_t>();
    ca.ctl = &dshared_[0]->k[0];
    ca.abort = &dshared_[0]->abort;
    LatArgs sa = ca;
    sa.q = s.qps[0]->handle();
    sa.tx = s.tx(0);
    sa.lkey = s.lkey();
    sa.rx = s.rx(0);
    sa.raddr = c.addr(c.rx(0));
    sa.rkey = c.rkey();
    sa.client = 0;
    sa.samples = nullptr;
    sa.ctl = &dshared_[1]->k[1];
    sa.abort = &dshared_[1]->abort;

    reset_shared();
    pr.begin(std::string("write_lat ") + std::to_string(n) + " B", total);
    Launch ls[2] = {{"client", 0}, {"server", 1}};
    // The server first: it waits for the client's first write.
    launch(ls[1], [&](cudaStream_t st) { k_write_lat<<<1, 1, 0, st>>>(sa); });
    if (ls[1].running) launch(ls[0], [&](cudaStream_t st) { k_write_lat<<<1, 1, 0, st>>>(ca); });
    if (!ls[0].running) raise_abort();  // the server must not wait for a client that never started
    wait_all(ls, 2, pr, "write_lat " + std::to_string(n) + " B");
    check_kernels(ls, 2, "write_lat", {c.qps[0].get()}, s.qps[0].get());

    Result r;
    r.tc = tc;
    r.half_round_trip = true;
    r.lat_us = samples_us(samples, tc.iters, 0.5);
    verify(c.tx(0), s.rx(0), n, "write_lat: client -> server, last message");
    verify(s.tx(0), c.rx(0), n, "write_lat: server -> client, last message");
    r.verified = "last message, both directions (" + std::to_string(n) + " B)";
    return r;
  }

  Result bw(const TestCase& tc, Progress& pr, bool read) override {
    tc_is_bw_ = true;
    Endpoint& c = tb_.client();
    Endpoint& s = tb_.server();
    const size_t n = tc.size;
    const char* tname = read ? "read_bw" : "write_bw";
    if (n > UINT32_MAX) throw PerfError(std::string(tname) + ": message too large");
    const uint32_t g = cfg_.threads;
    if (g > tc.tx_depth)
      throw PerfError(std::string(tname) + ": --gpu-threads " + std::to_string(g) + " exceeds --tx-depth " +
                      std::to_string(tc.tx_depth));
    if (2ull * g > tb_.sq_depth())
      throw PerfError(std::string(tname) + ": a batch of " + std::to_string(g) +
                      " WQEs needs a send queue of at least " + std::to_string(2 * g) + " (it has " +
                      std::to_string(tb_.sq_depth()) + ")");
    for (uint32_t q = 0; q < tc.qps; ++q) {
      fill_random(read ? s.tx(q) : c.tx(q), n);
      tb_.mem().fill(read ? c.rx(q) : s.rx(q), 0, n);
    }
    // Whole batches of g messages.
    const uint64_t warmup_batches = (tc.warmup + g - 1) / g;
    const uint64_t iter_batches = std::max<uint64_t>(1, (tc.iters + g - 1) / g);
    const uint32_t sig_every = tc.signal_every ? tc.signal_every : 1;
    const uint32_t fifo_cap = tc.tx_depth / sig_every + 2;
    DevBuf flow(setup_.gpu[0], size_t(tc.qps) * sizeof(FlowState), "flow state");
    DevBuf fifo(setup_.gpu[0], size_t(tc.qps) * fifo_cap * 2 * sizeof(uint64_t), "ticket FIFO");
    tb_.mem().fill(flow.as<void>(), 0, size_t(tc.qps) * sizeof(FlowState));

    BwArgs a{};
    a.qps = dqps_;
    a.nqp = tc.qps;
    a.tx_depth = tc.tx_depth;
    a.signal_every = sig_every;
    a.fifo_cap = fifo_cap;
    a.local = read ? c.rx(0) : c.tx(0);
    a.remote = read ? s.addr(s.tx(0)) : s.addr(s.rx(0));
    a.stride = c.slot;
    a.lkey = c.lkey();
    a.rkey = s.rkey();
    a.bytes = static_cast<uint32_t>(n);
    a.warmup_batches = warmup_batches;
    a.iter_batches = iter_batches;
    a.flow = flow.as<FlowState>();
    a.fifo = fifo.as<uint64_t>();
    a.ctl = &dshared_[0]->k[0];
    a.abort = &dshared_[0]->abort;
    if (c.slot != s.slot || tc.qps > c.nqp) throw PerfError(std::string(tname) + ": testbed layout (internal error)");

    reset_shared();
    const uint64_t total = (warmup_batches + iter_batches) * g;
    pr.begin(std::string(tname) + " " + std::to_string(n) + " B", total);
    Launch ls[1] = {{"client", 0}};
    launch(ls[0], [&](cudaStream_t st) {
      if (g == 1) {
        if (read) k_bw<kOne, true><<<1, 1, 0, st>>>(a);
        else k_bw<kOne, false><<<1, 1, 0, st>>>(a);
      } else if (g <= 32) {
        if (read) k_bw<kWarp, true><<<1, g, 0, st>>>(a);
        else k_bw<kWarp, false><<<1, g, 0, st>>>(a);
      } else {
        if (read) k_bw<kCta, true><<<1, g, 0, st>>>(a);
        else k_bw<kCta, false><<<1, g, 0, st>>>(a);
      }
    });
    wait_all(ls, 1, pr, std::string(tname) + " " + std::to_string(n) + " B");
    std::vector<QueuePair*> qps;
    for (auto& qp : c.qps) qps.push_back(qp.get());
    check_kernels(ls, 1, tname, qps, nullptr);

    Result r;
    r.tc = tc;
    r.tc.iters = iter_batches * g;
    r.tc.warmup = warmup_batches * g;
    r.seconds = double(ctl(0).elapsed_ns) * 1e-9;
    r.msgs = r.tc.iters;
    r.bytes = r.tc.iters * n;
    const uint32_t used = static_cast<uint32_t>(std::min<uint64_t>(tc.qps, warmup_batches + iter_batches));
    for (uint32_t q = 0; q < used; ++q)
      verify(read ? s.tx(q) : c.tx(q), read ? c.rx(q) : s.rx(q), n,
             std::string(tname) + ": QP " + std::to_string(q) + ", last message");
    r.verified = "last message on each of " + std::to_string(used) + " QP(s) (" + std::to_string(n) + " B)";
    return r;
  }

  Result atomic_lat(const TestCase& tc, Progress& pr) override {
    tc_is_bw_ = false;
    Endpoint& c = tb_.client();
    Endpoint& s = tb_.server();
    uint64_t* counter = s.word(0);
    uint64_t* fetched = c.word(0);
    const uint64_t initial = rng_();
    const uint64_t seed = rng_();
    tb_.mem().copy_to(counter, &initial, sizeof initial);
    tb_.mem().fill(fetched, 0, sizeof(uint64_t));
    const uint64_t total = tc.warmup + tc.iters;
    uint64_t expected = initial;
    for (uint64_t i = 0; i < total; ++i) expected += atomic_operand(seed, i);
    DevBuf samples(setup_.gpu[0], tc.iters * sizeof(uint64_t), "latency samples");

    AtomicArgs a{};
    a.q = c.qps[0]->handle();
    a.fetched = fetched;
    a.lkey = c.lkey();
    a.raddr = s.addr(counter);
    a.rkey = s.rkey();
    a.initial = initial;
    a.seed = seed;
    a.total = total;
    a.warmup = tc.warmup;
    a.samples = samples.as<uint64_t>();
    a.ctl = &dshared_[0]->k[0];
    a.abort = &dshared_[0]->abort;

    reset_shared();
    pr.begin("atomic_lat 8 B", total);
    Launch ls[1] = {{"client", 0}};
    launch(ls[0], [&](cudaStream_t st) { k_atomic_lat<<<1, 1, 0, st>>>(a); });
    wait_all(ls, 1, pr, "atomic_lat");
    check_kernels(ls, 1, "atomic_lat", {c.qps[0].get()}, nullptr);
    if (ctl(0).want != expected)
      throw PerfError("atomic_lat: the kernel's running sum " + hex64(ctl(0).want) + " differs from the host's " +
                      hex64(expected) + " (internal error)");

    Result r;
    r.tc = tc;
    r.half_round_trip = false;
    r.lat_us = samples_us(samples, tc.iters, 1.0);
    uint64_t final_value = 0;
    tb_.mem().copy_from(&final_value, counter, sizeof final_value);
    if (final_value != expected)
      throw PerfError("atomic_lat: remote counter is " + hex64(final_value) + " after " + std::to_string(total) +
                      " fetch_adds from " + hex64(initial) + ", expected " + hex64(expected));
    r.verified = "every fetched value (in the kernel) and the final remote sum (" + std::to_string(total) + " adds)";
    return r;
  }

  Testbed& tb_;
  GpuSetup setup_;
  GpuRunnerConfig cfg_;
  std::mt19937_64 rng_;
  std::vector<uint8_t> stage_;
  cudaStream_t stream_[2] = {nullptr, nullptr};
  Shared* shared_ = nullptr;             // host view
  Shared* dshared_[2] = {nullptr, nullptr};  // device view on each side's GPU
  dev::QpHandle* dqps_ = nullptr;        // client QP handles on the client GPU
  bool tc_is_bw_ = false;
};

}  // namespace

int gpu_prepare(GpuSetup* out) {
  // Load every kernel when CUDA starts (unless the user chose otherwise): a
  // kernel loaded lazily while another one spins may wait for it (the runner
  // also preloads each kernel with cudaFuncGetAttributes).
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    const std::string why = e != cudaSuccess ? cuda_msg(e) : std::string("no device visible");
    cudaGetLastError();
    std::fprintf(stderr, "kinet-perf: SKIPPED: --gpu needs a CUDA GPU and there is no CUDA GPU here (%s)\n",
                 why.c_str());
    return kExitSkipped;
  }
  out->count = n;
  out->gpu[0] = 0;
  out->gpu[1] = n > 1 ? 1 : 0;
  for (int side = 0; side < 2; ++side) {
    cudaDeviceProp p{};
    const cudaError_t pe = cudaGetDeviceProperties(&p, out->gpu[side]);
    if (pe != cudaSuccess) {
      std::fprintf(stderr, "kinet-perf: cudaGetDeviceProperties(%d) failed: %s\n", out->gpu[side],
                   cuda_msg(pe).c_str());
      return 1;
    }
    out->name[side] = p.name;
  }
  if (cudaSetDevice(out->gpu[0]) != cudaSuccess) {
    std::fprintf(stderr, "kinet-perf: cudaSetDevice(%d) failed\n", out->gpu[0]);
    return 1;
  }
  return 0;
}

std::string gpu_label(const GpuSetup& s, int side) {
  const int i = side == 0 ? 0 : 1;
  return " [GPU " + std::to_string(s.gpu[i]) + ": " + s.name[i] + "]";
}

std::unique_ptr<MemoryOps> make_gpu_memory(const GpuSetup& s) { return std::make_unique<GpuMemory>(s); }

std::unique_ptr<Runner> make_gpu_runner(Testbed& tb, const GpuSetup& s, const GpuRunnerConfig& cfg) {
  return std::make_unique<GpuRunner>(tb, s, cfg);
}

}  // namespace kinet::perf
