// kinet-post-rate — device resources and one row's measurement. Every kernel
// of the benchmark is instantiated in this translation unit.
//
// Per row and per kind (kinet, bare): fresh queues; the retire kernel (NIC
// stand-in) launched FIRST on its own stream and waited for until every CTA is
// resident (bounded handshake through pinned memory), so posting CTAs never
// starve it; posting CTAs <= SMs - retire CTAs. Calibration runs (the first is
// the warm-up) size W so one timed run lasts about --target-ms; CUDA events
// time the posting kernel. The retire kernel stops when the host raises a flag
// in device memory (a copy on a third stream): idle warps polling pinned host
// memory flood PCIe and slow every system-scope fence of the posters tenfold.
// Every host wait is bounded; on a hang the queue state is dumped and Fatal thrown.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "bare_kernels.cuh"
#include "check.hpp"
#include "kinet_kernels.cuh"
#include "nic_standin.cuh"
#include "runner.hpp"
#include "sweep.hpp"

namespace kinet::bench {
namespace {

constexpr uint32_t kStartedOffset = 64;
constexpr uint32_t kMaxConsCtas = 256;

std::string cuda_msg(cudaError_t e, const char* what, const char* file, int line) {
  char b[512];
  std::snprintf(b, sizeof b, "%s failed at %s:%d: %s (%s)", what, file, line, cudaGetErrorName(e),
                cudaGetErrorString(e));
  return b;
}
#define CK(call)                                                                     \
  do {                                                                               \
    const cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) throw Fatal{2, cuda_msg(e_, #call, __FILE__, __LINE__)}; \
  } while (0)

void host_store(uint32_t* p, uint32_t v) { std::atomic_ref<uint32_t>(*p).store(v, std::memory_order_seq_cst); }
uint32_t host_load(uint32_t* p) { return std::atomic_ref<uint32_t>(*p).load(std::memory_order_acquire); }

// Bounded wait for an event or a stream: false on timeout; a CUDA error throws.
bool wait_done(cudaEvent_t ev, cudaStream_t st, double timeout_s, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t r = ev ? cudaEventQuery(ev) : cudaStreamQuery(st);
    if (r == cudaSuccess) return true;
    if (r != cudaErrorNotReady) throw Fatal{2, cuda_msg(r, what, __FILE__, __LINE__)};
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}


uint32_t round_w(double w, const Config& c) {
  const double cap = std::min(static_cast<double>(1u << 30), 4.0e9 / c.units);
  w = std::clamp(w, static_cast<double>(c.gran), std::max(cap, static_cast<double>(c.gran)));
  uint64_t r = static_cast<uint64_t>(w / c.gran + 0.5) * c.gran;
  if (r < c.gran) r = c.gran;
  return static_cast<uint32_t>(r);
}

// The posting kernel of a row: through kinet's verbs, or bare.
const void* post_kernel(const Config& c, bool bare, bool inject) {
  const bool excl = c.sharing == Sharing::Exclusive, cta = c.sharing == Sharing::Cta;
  if (bare) {
    switch (c.kind) {
      case Kind::ThreadLoop:
      case Kind::ThreadCursor: return reinterpret_cast<const void*>(&b_thread<false>);
      case Kind::Thread:
        if (excl) return inject ? reinterpret_cast<const void*>(&b_thread<true>)
                                : reinterpret_cast<const void*>(&b_thread<false>);
        return cta ? reinterpret_cast<const void*>(&b_shared<Sharing::Cta, false>)
                   : reinterpret_cast<const void*>(&b_shared<Sharing::Gpu, false>);
      case Kind::Warp:
      case Kind::WarpLib:
        if (excl) return reinterpret_cast<const void*>(&b_warp);
        return cta ? reinterpret_cast<const void*>(&b_shared<Sharing::Cta, true>)
                   : reinterpret_cast<const void*>(&b_shared<Sharing::Gpu, true>);
      case Kind::Cta:
      case Kind::CtaLib: return reinterpret_cast<const void*>(&b_cta);
    }
    return nullptr;
  }
  switch (c.kind) {
    case Kind::Thread:
      if (excl && inject) return reinterpret_cast<const void*>(&k_thread<Sharing::Exclusive, true>);
      if (excl) return reinterpret_cast<const void*>(&k_thread<Sharing::Exclusive>);
      if (cta) return reinterpret_cast<const void*>(&k_thread<Sharing::Cta>);
      return reinterpret_cast<const void*>(&k_thread<Sharing::Gpu>);
    case Kind::ThreadLoop: return reinterpret_cast<const void*>(&k_thread_loop);
    case Kind::ThreadCursor: return reinterpret_cast<const void*>(&k_thread_cursor);
    case Kind::Warp:
      if (excl) return reinterpret_cast<const void*>(&k_warp<Sharing::Exclusive, false>);
      if (cta) return reinterpret_cast<const void*>(&k_warp<Sharing::Cta, false>);
      return reinterpret_cast<const void*>(&k_warp<Sharing::Gpu, false>);
    case Kind::WarpLib:
      if (excl) return reinterpret_cast<const void*>(&k_warp<Sharing::Exclusive, true>);
      if (cta) return reinterpret_cast<const void*>(&k_warp<Sharing::Cta, true>);
      return reinterpret_cast<const void*>(&k_warp<Sharing::Gpu, true>);
    case Kind::Cta: return reinterpret_cast<const void*>(&k_cta<false>);
    case Kind::CtaLib: return reinterpret_cast<const void*>(&k_cta<true>);
  }
  return nullptr;
}

}  // namespace

struct Bench::Dev {
  uint32_t qmax = 0, log_n = 0, depth = 0;
  uint8_t* sq = nullptr;
  mlx5::Cqe64* cq = nullptr;
  uint8_t* states = nullptr;
  uint8_t* dbrec = nullptr;
  uint8_t* cqdbrec = nullptr;
  kd::QpHandle* handles = nullptr;
  ConsStats* stats = nullptr;
  uint32_t* err_count = nullptr;
  size_t err_slots = 0;
  unsigned long long* posted = nullptr;
  int* first_err = nullptr;
  // pinned, mapped host memory
  uint8_t* h_db = nullptr;  // doorbell registers
  uint8_t* d_db = nullptr;
  uint32_t* h_flags = nullptr;  // [kStartedOffset..] started per retire CTA; [0] staging word for the stop copy
  uint32_t* d_flags = nullptr;
  uint32_t* d_stop = nullptr;  // device memory: polling host memory from idle retire warps floods PCIe
  int* h_first_err = nullptr;  // pinned staging for quick checks
  cudaStream_t s_cons = nullptr, s_post = nullptr, s_diag = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;

  uint32_t* h_started() { return h_flags + kStartedOffset; }

  // Raises the retire kernel's stop flag: a copy into device memory on its
  // own stream, which runs next to the kernels. False if it did not land.
  bool set_stop() {
    h_flags[0] = 1;
    if (cudaMemcpyAsync(d_stop, h_flags, sizeof(uint32_t), cudaMemcpyHostToDevice, s_diag) != cudaSuccess)
      return false;
    const auto t0 = std::chrono::steady_clock::now();
    cudaError_t r;
    while ((r = cudaStreamQuery(s_diag)) == cudaErrorNotReady &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    return r == cudaSuccess;
  }

  // Host-side view of the queues after a hang: copied on a third stream while the kernels run.
  void dump_state(const Config& c, const char* why) {
    std::fprintf(stderr, "HANG: %s (config %s ctas=%u tpc=%u qps=%u). Queue state:\n", why, c.mode.c_str(), c.ctas,
                 c.tpc, c.qps);
    std::vector<uint8_t> st(static_cast<size_t>(c.qps) * kStateStride);
    std::vector<ConsStats> cs(c.qps);
    int fe = 0;
    unsigned long long np = 0;
    bool ok = cudaMemcpyAsync(st.data(), states, st.size(), cudaMemcpyDeviceToHost, s_diag) == cudaSuccess &&
              cudaMemcpyAsync(cs.data(), stats, cs.size() * sizeof(ConsStats), cudaMemcpyDeviceToHost, s_diag) ==
                  cudaSuccess &&
              cudaMemcpyAsync(&fe, first_err, sizeof fe, cudaMemcpyDeviceToHost, s_diag) == cudaSuccess &&
              cudaMemcpyAsync(&np, posted, sizeof np, cudaMemcpyDeviceToHost, s_diag) == cudaSuccess;
    if (ok) ok = wait_done(nullptr, s_diag, 3.0, "state dump");
    if (!ok) {
      std::fprintf(stderr, "  (could not read device state back)\n");
      return;
    }
    std::fprintf(stderr, "  first posting error: %s; WQEs posted so far (finished units): %llu\n",
                 decode_err(fe).c_str(), np);
    for (uint32_t i = 0; i < c.qps; ++i) {
      SqStateT s;
      std::memcpy(&s, st.data() + static_cast<size_t>(i) * kStateStride, sizeof s);
      const bool odd = s.reserved != s.ready || s.ready != s.rung || s.completed != s.reserved || s.broken ||
                       s.error_status != 0 || cs[i].done != s.rung;
      if (i < 4 || odd)
        std::fprintf(stderr,
                     "  qp %3u: reserved %llu ready %llu rung %llu completed %llu signaled %llu cq_ci %u broken %u "
                     "err %d | retire: done %llu bad %llu\n",
                     i, (unsigned long long)s.reserved, (unsigned long long)s.ready, (unsigned long long)s.rung,
                     (unsigned long long)s.completed, (unsigned long long)s.signaled, s.cq_ci, s.broken,
                     s.error_status, cs[i].done, cs[i].bad);
    }
  }

  double timed_post(const Options& o, const Config& c, bool bare, uint32_t W, uint64_t& expected, int& first_err);
  Measure measure(const Options& o, const Config& c, bool bare);
  Measure measure_ncu(const Options& o, const Config& c, bool bare);
  void reset_queues(const Config& c);

  [[noreturn]] void hang(const Config& c, const std::string& why) {
    dump_state(c, why.c_str());
    set_stop();
    throw Fatal{3, why};
  }
};

Bench::Bench(const Options& o) : o_(o), d_(std::make_unique<Dev>()) {}
Bench::~Bench() = default;  // device memory goes with the process

void Bench::open(RunInfo& info) {
  // cudaDeviceMapHost must be set before the context exists.
  const cudaError_t fl = cudaSetDeviceFlags(cudaDeviceMapHost);
  if (fl != cudaSuccess && fl != cudaErrorSetOnActiveProcess)
    throw Fatal{2, cuda_msg(fl, "cudaSetDeviceFlags", __FILE__, __LINE__)};
  int ndev = 0;
  const cudaError_t de = cudaGetDeviceCount(&ndev);
  if (de != cudaSuccess || ndev == 0)
    throw Fatal{2, std::string("no CUDA device (") + cudaGetErrorString(de) + ")"};
  CK(cudaSetDevice(o_.device));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, o_.device));
  info.device = prop.name;
  sms_ = prop.multiProcessorCount;
  if (o_.sms_override > 0 && o_.sms_override < sms_) sms_ = o_.sms_override;
  info.sms = sms_;
  int can_map = 0, concurrent = 0, clock_khz = 0;
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, o_.device));
  CK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, o_.device));
  CK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentKernels, o_.device));
  std::printf("kinet-post-rate on %s (sm_%d%d, %d SMs, %.0f MHz), ring depth %u, signal period %u, timeout %llu ms\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount, clock_khz / 1000.0, 1u << o_.log_depth,
              o_.signal_period, (unsigned long long)o_.timeout_ms);
  if (!can_map || !concurrent)
    throw Fatal{2, "device cannot map host memory (" + std::to_string(can_map) + ") or run kernels concurrently (" +
                       std::to_string(concurrent) + ")"};
  if (prop.major < 7) throw Fatal{2, "needs sm_70 or newer (independent thread scheduling, st.mmio)"};
}

void Bench::allocate(const std::vector<Config>& sweep) {
  Dev& g = *d_;
  uint32_t qmax = 1;
  size_t max_threads = 32;
  for (const auto& c : sweep) {
    qmax = std::max(qmax, c.qps);
    max_threads = std::max(max_threads, static_cast<size_t>(c.ctas) * c.tpc);
  }
  g.qmax = qmax;
  g.log_n = o_.log_depth;
  g.depth = 1u << g.log_n;
  const size_t ring_bytes = static_cast<size_t>(qmax) * g.depth * mlx5::kSendWqeBB;
  CK(cudaMalloc(&g.sq, ring_bytes));
  CK(cudaMalloc(&g.cq, static_cast<size_t>(qmax) * g.depth * sizeof(mlx5::Cqe64)));
  CK(cudaMalloc(&g.states, static_cast<size_t>(qmax) * kStateStride));
  CK(cudaMalloc(&g.dbrec, static_cast<size_t>(qmax) * kDbrecStride));
  CK(cudaMalloc(&g.cqdbrec, static_cast<size_t>(qmax) * kDbrecStride));
  CK(cudaMalloc(&g.handles, static_cast<size_t>(qmax) * sizeof(kd::QpHandle)));
  CK(cudaMalloc(&g.stats, static_cast<size_t>(qmax) * sizeof(ConsStats)));
  g.err_slots = max_threads;
  CK(cudaMalloc(&g.err_count, max_threads * sizeof(uint32_t)));
  CK(cudaMalloc(&g.posted, sizeof(unsigned long long)));
  CK(cudaMalloc(&g.first_err, sizeof(int)));
  CK(cudaMalloc(&g.d_stop, sizeof(uint32_t)));
  CK(cudaHostAlloc(&g.h_db, static_cast<size_t>(qmax) * kDbrecStride, cudaHostAllocMapped | cudaHostAllocPortable));
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&g.d_db), g.h_db, 0));
  std::memset(g.h_db, 0, static_cast<size_t>(qmax) * kDbrecStride);
  CK(cudaHostAlloc(&g.h_flags, (kStartedOffset + kMaxConsCtas) * sizeof(uint32_t),
                   cudaHostAllocMapped | cudaHostAllocPortable));
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&g.d_flags), g.h_flags, 0));
  std::memset(g.h_flags, 0, (kStartedOffset + kMaxConsCtas) * sizeof(uint32_t));
  CK(cudaHostAlloc(&g.h_first_err, sizeof(int), cudaHostAllocDefault));
  CK(cudaStreamCreateWithFlags(&g.s_cons, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&g.s_post, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&g.s_diag, cudaStreamNonBlocking));
  CK(cudaEventCreate(&g.e0));
  CK(cudaEventCreate(&g.e1));

  std::vector<kd::QpHandle> hs(qmax);
  for (uint32_t i = 0; i < qmax; ++i) {
    kd::QpHandle h{};
    h.sq = g.sq + static_cast<size_t>(i) * g.depth * mlx5::kSendWqeBB;
    h.dbrec = reinterpret_cast<uint32_t*>(g.dbrec + static_cast<size_t>(i) * kDbrecStride);
    h.db = reinterpret_cast<uint64_t*>(g.d_db + static_cast<size_t>(i) * kDbrecStride);
    h.state = reinterpret_cast<SqStateT*>(g.states + static_cast<size_t>(i) * kStateStride);
    h.cq.cqes = g.cq + static_cast<size_t>(i) * g.depth;
    h.cq.dbrec = reinterpret_cast<uint32_t*>(g.cqdbrec + static_cast<size_t>(i) * kDbrecStride);
    h.cq.log_n = g.log_n;
    h.cq.cqn = 0x400 + i;
    h.timeout_ns = o_.timeout_ms * 1000000ull;
    h.log_n = g.log_n;
    h.qpn = 0x1000 + i;
    h.qpn_be8 = bswap32(h.qpn << 8);
    h.max_msg = 1u << 30;
    h.signal_period = o_.signal_period;
    h.rings_in_gpu_memory = 1;
    hs[i] = h;
  }
  CK(cudaMemcpy(g.handles, hs.data(), qmax * sizeof(kd::QpHandle), cudaMemcpyHostToDevice));

  // Registers and spills: a posting kernel that spills measures the spill.
  struct K {
    const char* name;
    const void* fn;
  } ks[] = {
      {"k_thread<Exclusive>", reinterpret_cast<const void*>(&k_thread<Sharing::Exclusive>)},
      {"k_thread_loop", reinterpret_cast<const void*>(&k_thread_loop)},
      {"k_thread<Cta>", reinterpret_cast<const void*>(&k_thread<Sharing::Cta>)},
      {"k_thread<Gpu>", reinterpret_cast<const void*>(&k_thread<Sharing::Gpu>)},
      {"k_warp<Exclusive>", reinterpret_cast<const void*>(&k_warp<Sharing::Exclusive, false>)},
      {"k_warp<Cta>", reinterpret_cast<const void*>(&k_warp<Sharing::Cta, false>)},
      {"k_warp<Exclusive,lib>", reinterpret_cast<const void*>(&k_warp<Sharing::Exclusive, true>)},
      {"k_cta", reinterpret_cast<const void*>(&k_cta<false>)},
      {"b_thread", reinterpret_cast<const void*>(&b_thread<false>)},
      {"b_warp", reinterpret_cast<const void*>(&b_warp)},
      {"b_cta", reinterpret_cast<const void*>(&b_cta)},
      {"b_shared<Cta>", reinterpret_cast<const void*>(&b_shared<Sharing::Cta, false>)},
      {"k_consumer", reinterpret_cast<const void*>(&k_consumer)},
  };
  std::printf("kernels (registers / local bytes):");
  for (const K& k : ks) {
    cudaFuncAttributes a{};
    CK(cudaFuncGetAttributes(&a, k.fn));
    std::printf(" %s %d/%zu", k.name, a.numRegs, a.localSizeBytes);
  }
  std::printf("\n%zu configurations; QPs allocated: %u (%.1f MiB of rings + CQs)\n", sweep.size(), qmax,
              2.0 * qmax * g.depth * 64 / 1048576.0);
}

// One posting kernel with a bounded wait; returns its seconds (events).
double Bench::Dev::timed_post(const Options& o, const Config& c, bool bare, uint32_t W, uint64_t& expected,
                              int& fe) {
  PostParams p{};
  p.qps = handles;
  p.nqp = c.qps;
  p.per_unit = W;
  p.db_batch = c.db_batch;
  p.map = c.map;
  p.warps_per_qp = c.warps_per_qp;
  p.posted = posted;
  p.err_count = err_count;
  p.first_err = first_err;
  p.inject_idx = o.inject_idx >= 0 ? static_cast<unsigned long long>(o.inject_idx) : ~0ull;
  p.bare_dbrec_release = o.bare_dbrec_release ? 1u : 0u;
  void* args[] = {&p};
  CK(cudaEventRecord(e0, s_post));
  CK(cudaLaunchKernel(post_kernel(c, bare, o.inject_idx >= 0), dim3(c.ctas), dim3(c.tpc), args, 0, s_post));
  CK(cudaEventRecord(e1, s_post));
  expected += static_cast<uint64_t>(c.units) * W;
  const double host_timeout = 3.0 * o.timeout_ms / 1000.0 + 30.0;
  if (!wait_done(e1, nullptr, host_timeout, "posting kernel")) {
    char why[160];
    std::snprintf(why, sizeof why, "%s posting kernel still running after %.0f s (W=%u)", bare ? "bare" : "kinet",
                  host_timeout, W);
    hang(c, why);
  }
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaMemcpyAsync(h_first_err, first_err, sizeof(int), cudaMemcpyDeviceToHost, s_post));
  if (!wait_done(nullptr, s_post, 10.0, "error readback")) throw Fatal{3, "error readback did not finish in 10 s"};
  fe = *h_first_err;
  return ms / 1000.0;
}

void Bench::Dev::reset_queues(const Config& c) {
  const size_t nq = c.qps;
  CK(cudaMemsetAsync(states, 0, nq * kStateStride, s_cons));
  CK(cudaMemsetAsync(dbrec, 0, nq * kDbrecStride, s_cons));
  CK(cudaMemsetAsync(cqdbrec, 0, nq * kDbrecStride, s_cons));
  CK(cudaMemsetAsync(sq, 0, nq * depth * mlx5::kSendWqeBB, s_cons));
  CK(cudaMemsetAsync(stats, 0, nq * sizeof(ConsStats), s_cons));
  CK(cudaMemsetAsync(err_count, 0, static_cast<size_t>(c.ctas) * c.tpc * sizeof(uint32_t), s_cons));
  CK(cudaMemsetAsync(posted, 0, sizeof(unsigned long long), s_cons));
  CK(cudaMemsetAsync(first_err, 0, sizeof(int), s_cons));
  CK(cudaMemsetAsync(d_stop, 0, sizeof(uint32_t), s_cons));
  k_init_cq<<<256, 256, 0, s_cons>>>(cq, nq * depth);
  CK(cudaGetLastError());
  if (!wait_done(nullptr, s_cons, 10.0, "queue reset")) throw Fatal{3, "queue reset did not finish in 10 s"};
}

// --ncu: one launch against pre-written CQEs; checks errors, counts and state.
Measure Bench::Dev::measure_ncu(const Options& o, const Config& c, bool bare) {
  Measure r;
  reset_queues(c);
  k_prefill_cq<<<c.qps, 256, 0, s_cons>>>(handles, c.qps, o.ncu_wqes);
  CK(cudaGetLastError());
  if (!wait_done(nullptr, s_cons, 10.0, "CQ prefill")) throw Fatal{3, "CQ prefill did not finish in 10 s"};
  const uint32_t W = static_cast<uint32_t>(static_cast<uint64_t>(o.ncu_wqes) * c.qps / c.units);
  uint64_t expected = 0;
  int fe = 0;
  const double t = timed_post(o, c, bare, W, expected, fe);
  std::vector<uint8_t> st(c.qps * kStateStride);
  unsigned long long np = 0;
  CK(cudaMemcpyAsync(st.data(), states, st.size(), cudaMemcpyDeviceToHost, s_cons));
  CK(cudaMemcpyAsync(&np, posted, sizeof np, cudaMemcpyDeviceToHost, s_cons));
  if (!wait_done(nullptr, s_cons, 10.0, "result readback")) throw Fatal{3, "result readback did not finish in 10 s"};
  std::string why;
  if (fe) why = "first error: " + decode_err(fe);
  if (np != expected) why += " posted " + std::to_string(np) + ", expected " + std::to_string(expected) + ";";
  for (uint32_t i = 0; i < c.qps; ++i) {
    SqStateT s;
    std::memcpy(&s, st.data() + static_cast<size_t>(i) * kStateStride, sizeof s);
    if (s.reserved != o.ncu_wqes || s.completed != s.reserved || s.rung != s.reserved) {
      why += " qp " + std::to_string(i) + ": reserved " + std::to_string(s.reserved) + " rung " +
             std::to_string(s.rung) + " completed " + std::to_string(s.completed) + ";";
      break;
    }
  }
  r.ran = true;
  r.verified = why.empty();
  r.note = why;
  r.wqes_per_unit = W;
  r.wqes = expected;
  r.reps = 1;
  r.seconds = t;
  r.mwqe = r.mwqe_min = r.mwqe_max = expected / t / 1e6;
  return r;
}

Measure Bench::Dev::measure(const Options& o, const Config& c, bool bare) {
  Measure r;
  const size_t nq = c.qps;
  reset_queues(c);
  for (uint32_t i = 0; i < c.cons_ctas; ++i) host_store(h_started() + i, 0);
  // ---- the NIC stand-in first ----
  ConsParams cp{};
  cp.qps = handles;
  cp.nqp = c.qps;
  cp.stop = d_stop;
  cp.started = d_flags + kStartedOffset;
  cp.stats = stats;
  cp.max_ns = 300ull * 1000000000ull;  // never reached in a healthy run; the host stops it
  cp.cqe_release_gpu = o.cqe_release_gpu ? 1u : 0u;
  k_consumer<<<c.cons_ctas, c.cons_tpb, 0, s_cons>>>(cp);
  CK(cudaGetLastError());
  {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      uint32_t n = 0;
      for (uint32_t i = 0; i < c.cons_ctas; ++i) n += host_load(h_started() + i) != 0;
      if (n == c.cons_ctas) break;
      const cudaError_t q = cudaStreamQuery(s_cons);
      if (q != cudaErrorNotReady && q != cudaSuccess) throw Fatal{2, cuda_msg(q, "retire kernel start", __FILE__, __LINE__)};
      if (q == cudaSuccess)
        throw Fatal{3, "retire kernel exited before all " + std::to_string(c.cons_ctas) + " CTAs reported (" +
                           std::to_string(n) + " did)"};
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
        set_stop();
        throw Fatal{3, "only " + std::to_string(n) + " of " + std::to_string(c.cons_ctas) +
                           " retire CTAs resident after 10 s"};
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  // ---- calibrate (first run = warm-up), then timed runs ----
  uint64_t expected = 0;
  int fe = 0;
  const double target = o.target_ms / 1000.0;
  uint32_t W = round_w(std::max<double>(c.gran, 16384.0 / c.units), c);
  double t = timed_post(o, c, bare, W, expected, fe);
  for (int i = 0; i < 6 && fe == 0 && t < 0.4 * target; ++i) {
    const uint32_t W2 = round_w(W * std::min(64.0, target / std::max(t, 2e-5)), c);
    if (W2 <= W) break;
    W = W2;
    t = timed_post(o, c, bare, W, expected, fe);
  }
  std::vector<double> times;
  if (fe == 0) {
    W = round_w(W * target / std::max(t, 1e-6), c);
    for (int i = 0; i < o.reps && fe == 0; ++i) times.push_back(timed_post(o, c, bare, W, expected, fe));
  }
  if (!set_stop()) hang(c, "could not set the stop flag");
  if (!wait_done(nullptr, s_cons, 10.0, "retire kernel"))
    hang(c, "the retire kernel did not exit within 10 s of the stop flag");
  // ---- verify ----
  std::vector<uint8_t> st(nq * kStateStride);
  std::vector<ConsStats> cs(nq);
  std::vector<uint32_t> errs(static_cast<size_t>(c.ctas) * c.tpc);
  unsigned long long np = 0;
  CK(cudaMemcpyAsync(st.data(), states, st.size(), cudaMemcpyDeviceToHost, s_cons));
  CK(cudaMemcpyAsync(cs.data(), stats, nq * sizeof(ConsStats), cudaMemcpyDeviceToHost, s_cons));
  CK(cudaMemcpyAsync(errs.data(), err_count, errs.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost, s_cons));
  CK(cudaMemcpyAsync(&np, posted, sizeof np, cudaMemcpyDeviceToHost, s_cons));
  CK(cudaMemcpyAsync(&fe, first_err, sizeof fe, cudaMemcpyDeviceToHost, s_cons));
  if (!wait_done(nullptr, s_cons, 10.0, "result readback")) throw Fatal{3, "result readback did not finish in 10 s"};
  Readback rb{std::move(st), std::move(cs), std::move(errs), np, fe, expected, W};
  check_run(c, rb, times, r);
  return r;
}

Result Bench::run(const Config& c) {
  Dev& g = *d_;
  Result r;
  r.cfg = c;
  char buf[512];
  // ---- can it run at all? ----
  if ((c.kind == Kind::Cta || c.kind == Kind::CtaLib) && 2 * c.tpc > g.depth) {
    std::snprintf(buf, sizeof buf, "ring depth %u < 2 x %u threads", g.depth, c.tpc);
    r.skipped = true;
    r.skip_note = buf;
    return r;
  }
  if (c.ctas == 0 || c.ctas + c.cons_ctas > static_cast<uint32_t>(sms_) || c.cons_ctas > kMaxConsCtas) {
    std::snprintf(buf, sizeof buf, "%u posting CTAs + %u retire CTAs > %d SMs", c.ctas, c.cons_ctas, sms_);
    r.skipped = true;
    r.skip_note = buf;
    return r;
  }
  if (static_cast<size_t>(c.ctas) * c.tpc > g.err_slots || c.qps > g.qmax) {
    r.skipped = true;
    r.skip_note = "internal: sweep larger than allocation";
    return r;
  }
  if (o_.ncu_wqes) {
    const uint64_t w = static_cast<uint64_t>(o_.ncu_wqes) * c.qps;
    if (c.sharing != Sharing::Exclusive || w % c.units || (w / c.units) % c.gran) {
      r.skipped = true;
      r.skip_note = "--ncu: exclusive rows whose units split N WQEs per QP into whole batches only";
      return r;
    }
  }
  const bool with_bare = !o_.no_bare && (!c.table || o_.bare_table);
  for (int b = 0; b < (with_bare ? 2 : 1); ++b) {
    int occ_post = 0, occ_cons = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_post, post_kernel(c, b == 1, o_.inject_idx >= 0),
                                                     static_cast<int>(c.tpc), 0));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_cons, reinterpret_cast<const void*>(&k_consumer),
                                                     static_cast<int>(c.cons_tpb), 0));
    if (occ_post < 1 || occ_cons < 1) {
      std::snprintf(buf, sizeof buf, "occupancy (%s): posting %d CTA/SM at %u threads, retire %d CTA/SM at %u threads",
                    b ? "bare" : "kinet", occ_post, c.tpc, occ_cons, c.cons_tpb);
      r.skipped = true;
      r.skip_note = buf;
      return r;
    }
  }
  if (o_.ncu_wqes) {
    r.kinet = g.measure_ncu(o_, c, false);
    if (with_bare) r.bare = g.measure_ncu(o_, c, true);
    return r;
  }
  r.kinet = g.measure(o_, c, false);
  if (with_bare) r.bare = g.measure(o_, c, true);
  return r;
}

}  // namespace kinet::bench
