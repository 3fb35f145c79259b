// kinet GPU tests: device verbs posted by CUDA kernels, executed by the
// software NIC, data in GPU memory (GPU 0 -> GPU 1 when there are two).
// Every byte is verified; every wait is bounded (QpConfig::timeout_ms).
#include <kinet/device/coop.cuh>
#include <kinet/kinet.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>

#include "gpu_harness.hpp"

using namespace kinet;
using namespace kinet::dev;

namespace {
constexpr uint64_t kTimeoutMs = 20000;

std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}
std::vector<uint8_t> random_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng()() | 1);  // never zero
  return v;
}

int gpu_count() {
  int n = 0;
  cudaGetDeviceCount(&n);
  return n;
}

// A device buffer on GPU `dev`, registered on a PD.
struct GpuBuf {
  void* p = nullptr;
  size_t n = 0;
  int dev = 0;
  std::unique_ptr<MemoryRegion> mr;
  GpuBuf(ProtectionDomain& pd, int d, size_t bytes, uint32_t access = kAccessAll) : n(bytes), dev(d) {
    cudaSetDevice(d);
    if (cudaMalloc(&p, bytes) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
    cudaMemset(p, 0x5a, bytes);  // poison
    cudaSetDevice(0);
    mr = pd.reg_mr(p, bytes, access);
  }
  ~GpuBuf() {
    mr.reset();
    cudaFree(p);
  }
  uint8_t* u8() const { return static_cast<uint8_t*>(p); }
  void upload(const std::vector<uint8_t>& v) { cudaMemcpy(p, v.data(), v.size(), cudaMemcpyHostToDevice); }
  std::vector<uint8_t> download(size_t bytes = 0) const {
    std::vector<uint8_t> v(bytes ? bytes : n);
    cudaMemcpy(v.data(), p, v.size(), cudaMemcpyDeviceToHost);
    return v;
  }
};

// Two emulated NICs, a PD on each, and `nqp` connected QP pairs.
struct Pair {
  std::unique_ptr<Device> da, db;
  std::unique_ptr<ProtectionDomain> pa, pb;
  std::vector<std::unique_ptr<QueuePair>> qa, qb;
  int dst_gpu = gpu_count() > 1 ? 1 : 0;
  explicit Pair(int nqp = 1, QpConfig cfg = {}, DeviceOptions opt = {}) {
    da = Device::open("emu", opt);
    db = Device::open("emu", opt);
    pa = da->alloc_pd();
    pb = db->alloc_pd();
    cfg.timeout_ms = kTimeoutMs;
    cfg.posters = Posters::Gpu;  // kernels post: queue bookkeeping in GPU memory
    for (int i = 0; i < nqp; ++i) {
      qa.push_back(pa->create_qp(cfg));
      qb.push_back(pb->create_qp(cfg));
      qa.back()->connect(qb.back()->info());
      qb.back()->connect(qa.back()->info());
    }
  }
  // Device handles of the initiator side, in GPU memory.
  QpHandle* handles() {
    std::vector<QpHandle> h;
    for (auto& q : qa) h.push_back(q->handle());
    QpHandle* d = nullptr;
    cudaMalloc(&d, h.size() * sizeof(QpHandle));
    cudaMemcpy(d, h.data(), h.size() * sizeof(QpHandle), cudaMemcpyHostToDevice);
    owned.push_back(d);
    return d;
  }
  ~Pair() {
    for (void* p : owned) cudaFree(p);
  }
  std::vector<void*> owned;
};

struct Statuses {  // one int per thread, in GPU memory
  int* d = nullptr;
  size_t n;
  explicit Statuses(size_t count) : n(count) {
    cudaMalloc(&d, n * sizeof(int));
    cudaMemset(d, 0xff, n * sizeof(int));  // -1 = never written
  }
  ~Statuses() { cudaFree(d); }
  // Returns the first non-Ok status and its index, or -1.
  long first_bad(int* st) const {
    std::vector<int> h(n);
    cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; ++i)
      if (h[i] != 0) {
        *st = h[i];
        return static_cast<long>(i);
      }
    return -1;
  }
};

const char* sname(int s) { return s == -1 ? "never written" : status_string(static_cast<Status>(s)); }

#define CHECK_STATUSES(S)                                                                        \
  do {                                                                                          \
    int st_ = 0;                                                                                \
    long i_ = (S).first_bad(&st_);                                                              \
    CHECK(i_ < 0, "thread %ld returned %s", i_, sname(st_));                                    \
  } while (0)

// ---- kernels ----
template <Sharing S>
__global__ void k_put_get(QpHandle q, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk, uint8_t* back, Lkey bk,
                          size_t bytes, int* out) {
  Ticket t;
  Status s = put<S>(q, src, lk, raddr, rk, bytes, 0, &t);
  if (s == Status::Ok) s = wait<S>(q, t);  // unsignalled: wait posts a signalled NOP
  out[0] = static_cast<int>(s);
  s = get<S>(q, back, bk, raddr, rk, bytes, kSignal, &t);
  if (s == Status::Ok) s = wait<S>(q, t);
  out[1] = static_cast<int>(s);
}

__global__ void k_atomics(QpHandle q, uint64_t* res, Lkey lk, uint64_t raddr, Rkey rk, int* out) {
  Ticket t;
  Status s = fetch_add<Sharing::Exclusive>(q, &res[0], lk, raddr, rk, 5, kSignal, &t);
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(q, t);
  out[0] = static_cast<int>(s);
  s = compare_swap<Sharing::Exclusive>(q, &res[1], lk, raddr, rk, /*compare*/ 12345, /*swap*/ 7, 0, &t);  // fails
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(q, t);
  out[1] = static_cast<int>(s);
  const uint64_t cur = res[0] + 5;
  s = compare_swap<Sharing::Exclusive>(q, &res[2], lk, raddr, rk, cur, 99, 0, &t);  // succeeds
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(q, t);
  out[2] = static_cast<int>(s);
}

__global__ void k_inline(QpHandle q, uint64_t raddr, Rkey rk, int* out) {
  __shared__ uint8_t payload[32];
  for (int i = 0; i < 28; ++i) payload[i] = static_cast<uint8_t>(0xA0 + i);
  Ticket t;
  Status s = put_inline<Sharing::Exclusive>(q, payload, 28, raddr, rk, kSignal, &t);
  for (int i = 0; i < 28; ++i) payload[i] = 0;  // inline: source reusable at once
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(q, t);
  out[0] = static_cast<int>(s);
  out[1] = static_cast<int>(put_inline<Sharing::Exclusive>(q, payload, 29, raddr, rk, 0, &t));  // too big
  out[2] = static_cast<int>(nop<Sharing::Exclusive>(q, kSignal, &t));
  if (out[2] == 0) out[2] = static_cast<int>(wait<Sharing::Exclusive>(q, t));
}

// Target side of put_signal: waits (bounded) for the signal, then checks the payload.
__global__ void k_wait_signal(const uint64_t* sig, uint64_t expect, const uint8_t* data, const uint8_t* ref,
                              size_t bytes, int* out) {
  const uint64_t t0 = now_ns();
  while (load_acquire<Scope::System>(const_cast<uint64_t*>(sig)) < expect) {
    if (now_ns() - t0 > kTimeoutMs * 1000000ull) {
      out[0] = static_cast<int>(Status::TimeoutCompletion);
      return;
    }
    __nanosleep(100);
  }
  size_t bad = 0;
  for (size_t i = 0; i < bytes; ++i) bad += data[i] != ref[i];
  out[0] = bad ? -2 : 0;
}

__global__ void k_put_signal(QpHandle q, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk, size_t bytes,
                             uint64_t sig, Rkey sk, uint64_t* scratch, Lkey sck, int* out) {
  Ticket t;
  Status s = put_signal<Sharing::Exclusive>(q, src, lk, raddr, rk, bytes, sig, sk, 1, scratch, sck, 0, &t);
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(q, t);
  out[0] = static_cast<int>(s);
}

// Every thread writes `rounds` 64-byte chunks of its own region; QP chosen by mode.
enum class Layout { OneQp, QpPerCta, QpPerThread };
template <Sharing S, Layout L>
__global__ void k_many(const QpHandle* qs, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk, int rounds,
                       int* out) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  const QpHandle& q = L == Layout::OneQp ? qs[0] : L == Layout::QpPerCta ? qs[blockIdx.x] : qs[tid];
  Status s = Status::Ok;
  Ticket t;
  for (int r = 0; r < rounds && s == Status::Ok; ++r) {
    const size_t off = (static_cast<size_t>(tid) * rounds + r) * 64;
    s = put<S>(q, src + off, lk, raddr + off, rk, 64, 0, &t);
  }
  if (s == Status::Ok) s = wait<S>(q, t);
  out[tid] = static_cast<int>(s);
}

// Warp-cooperative posting: every lane one 64-byte chunk per round; QP per CTA shared by its warps.
__global__ void k_warp_coop(const QpHandle* qs, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk, int rounds,
                            int* out) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  const QpHandle& q = qs[blockIdx.x];
  Status s = Status::Ok;
  Ticket t;
  for (int r = 0; r < rounds && s == Status::Ok; ++r) {
    const size_t off = (static_cast<size_t>(r) * gridDim.x * blockDim.x + tid) * 64;
    s = warp_put<Sharing::Cta>(q, src + off, lk, raddr + off, rk, 64, r == rounds - 1 ? kSignal : 0, &t);
  }
  if (s == Status::Ok) s = wait<Sharing::Cta>(q, t);
  out[tid] = static_cast<int>(s);
}

// CTA-cooperative posting: one reservation per CTA per round; QP per CTA.
__global__ void k_cta_coop(const QpHandle* qs, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk, int rounds,
                           int* out) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  const QpHandle& q = qs[blockIdx.x];
  Status s = Status::Ok;
  Ticket t;
  for (int r = 0; r < rounds; ++r) {
    const size_t off = (static_cast<size_t>(r) * gridDim.x * blockDim.x + tid) * 64;
    Status sr = cta_put<Sharing::Exclusive>(q, src + off, lk, raddr + off, rk, 64, 0, &t);
    if (s == Status::Ok) s = sr;
  }
  if (threadIdx.x == 0 && s == Status::Ok) s = wait<Sharing::Exclusive>(q, t);
  out[tid] = static_cast<int>(s);
}

// Shared QPs posted with the per-thread steps from every lane (reserve,
// prepare, publish, ring_doorbell): the warp-aggregated paths. Lane l uses
// QP l % nq, so one warp holds lanes of several QPs; odd lanes reserve 2 slots
// at once, even lanes 1 slot twice, so lanes ask different n and their ranges
// are adjacent or not. Every thread writes `chunks` (even) 64-byte chunks.
template <Sharing S>
__global__ void k_lanes(const QpHandle* qs, int nq, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk, int chunks,
                        int* out) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  const QpHandle& q = qs[(threadIdx.x & 31u) % nq];
  const uint32_t n = (threadIdx.x & 1u) ? 2 : 1;
  Status s = Status::Ok;
  Ticket t;
  for (int c = 0; c < chunks && s == Status::Ok; c += static_cast<int>(n)) {
    uint64_t first;
    s = reserve<S>(q, n, &first);
    if (s != Status::Ok) break;
    for (uint32_t k = 0; k < n; ++k) {
      const size_t off = (static_cast<size_t>(tid) * chunks + c + k) * 64;
      prepare_write<S>(q, first + k, src + off, lk, raddr + off, rk, 64, 0);
    }
    s = publish<S>(q, first, n);
    if (s == Status::Ok) s = ring_doorbell<S>(q, first + n);
    t = Ticket{first + n, first};
  }
  if (s == Status::Ok) s = wait<S>(q, t);
  out[tid] = static_cast<int>(s);
}

// reserve()'s contract on shared QPs: lanes that reserve together return
// together, also after waiting for ring space (the test's small ring makes
// nearly every reservation wait). Each round starts converged (__syncwarp;
// no lane leaves the loop early); a warp found split right after reserve
// counts in *split. Every thread writes `chunks` 64-byte chunks.
template <Sharing S>
__global__ void k_reserve_together(const QpHandle* qs, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk,
                                   int chunks, int* out, unsigned* split) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  const QpHandle& q = qs[0];
  Status s = Status::Ok;
  Ticket t;
  for (int c = 0; c < chunks; ++c) {
    __syncwarp();
    if (s != Status::Ok) continue;
    uint64_t first;
    s = reserve<S>(q, 1, &first);
    if (__activemask() != 0xffffffffu) atomicAdd(split, 1u);
    if (s != Status::Ok) continue;
    const size_t off = (static_cast<size_t>(tid) * chunks + c) * 64;
    prepare_write<S>(q, first, src + off, lk, raddr + off, rk, 64, 0);
    s = publish<S>(q, first, 1);
    if (s == Status::Ok) s = ring_doorbell<S>(q, first + 1);
    t = Ticket{first + 1, first};
  }
  if (s == Status::Ok) s = wait<S>(q, t);
  out[tid] = static_cast<int>(s);
}

// One Exclusive QP per thread; all of a thread's chunks through one post_loop
// call (doorbell every 4 ring indices), so a small ring wraps inside the call.
__global__ void k_post_loop(const QpHandle* qs, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk, int rounds,
                            int* out) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  const QpHandle& q = qs[tid];
  Ticket t;
  int c = 0;
  Status s = post_loop(q, static_cast<uint64_t>(rounds), 4, kSignal, &t, [&](uint64_t idx, uint32_t f) {
    const size_t off = (static_cast<size_t>(tid) * rounds + c++) * 64;
    prepare_write<Sharing::Exclusive>(q, idx, src + off, lk, raddr + off, rk, 64, f);
  });
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(q, t);
  out[tid] = static_cast<int>(s);
}

// The same through the cursor steps, one call per step (doorbell every 4 ring
// indices): the ring wraps while the cursor is open, so reserve's
// write-back, wait and reload run many times per thread.
__global__ void k_cursor(const QpHandle* qs, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk, int rounds,
                         int* out) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  const QpHandle& q = qs[tid];
  SqCursor c;
  Status s = open_cursor(q, &c);
  const uint64_t first = c.reserved;
  for (int k = 0; k < rounds && s == Status::Ok; ++k) {
    uint64_t idx;
    s = reserve(q, c, 1, &idx);
    if (s != Status::Ok) break;
    const size_t off = (static_cast<size_t>(tid) * rounds + k) * 64;
    prepare_write<Sharing::Exclusive>(q, idx, src + off, lk, raddr + off, rk, 64, k + 1 == rounds ? kSignal : 0u);
    publish(q, c, idx, 1);
    if ((idx + 1) % 4 == 0 || k + 1 == rounds) ring_doorbell(q, c, idx + 1);
  }
  close_cursor(q, c);
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(q, Ticket{c.ready, first});
  out[tid] = static_cast<int>(s);
}

__global__ void k_fetch_add_all(QpHandle q, uint64_t* olds, Lkey lk, uint64_t raddr, Rkey rk, int* out) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  Ticket t;
  Status s = fetch_add<Sharing::Gpu>(q, &olds[tid], lk, raddr, rk, 1, kSignal, &t);
  if (s == Status::Ok) s = wait<Sharing::Gpu>(q, t);
  out[tid] = static_cast<int>(s);
}

__global__ void k_fault(QpHandle q, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk, int* out) {
  Ticket t;
  Status s = put<Sharing::Exclusive>(q, src, lk, raddr, Rkey{0x34120000u}, 64, kSignal, &t);  // rkey 0x1234
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(q, t);
  out[0] = static_cast<int>(s);
  s = put<Sharing::Exclusive>(q, src, lk, raddr, rk, 64, kSignal, &t);  // valid, but the QP is in error
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(q, t);
  out[1] = static_cast<int>(s);
}

template <class K, class... A> void launch1(K k, A... a) { k<<<1, 1>>>(a...); }

// Every thread of ctas x threads writes `rounds` 64-byte chunks with `launch`
// (a kernel over (handles, src, lkey, raddr, rkey, rounds, statuses)); checks
// every thread's status and every byte.
template <class Launch>
void chunks_test(int nqp, QpConfig cfg, int ctas, int threads, int rounds, Launch launch) {
  const int nthreads = ctas * threads;
  Pair p(nqp, cfg);
  const size_t bytes = static_cast<size_t>(nthreads) * rounds * 64;
  GpuBuf src(*p.pa, 0, bytes), dst(*p.pb, p.dst_gpu, bytes);
  auto ref = random_bytes(bytes);
  src.upload(ref);
  Statuses st(nthreads);
  launch(p.handles(), src.u8(), src.mr->lkey(), dst.mr->addr_u64(), dst.mr->rkey(), rounds, st.d);
  CUDA_OK(cudaDeviceSynchronize());  // before any early return: the kernel uses the QPs
  CUDA_OK(cudaGetLastError());
  CHECK_STATUSES(st);
  CHECK(dst.download() == ref, "data mismatch after %d x %d threads x %d rounds", ctas, threads, rounds);
}

template <Sharing S, Layout L>
void many_threads(int ctas, int threads, int rounds, int sq_depth) {
  const int nqp = L == Layout::OneQp ? 1 : L == Layout::QpPerCta ? ctas : ctas * threads;
  QpConfig cfg;
  cfg.sq_depth = sq_depth;
  chunks_test(nqp, cfg, ctas, threads, rounds, [&](auto... a) { k_many<S, L><<<ctas, threads>>>(a...); });
}
}  // namespace

KGT_TEST(put_get_every_size) {
  Pair p;
  const size_t max = 1 << 20;
  GpuBuf src(*p.pa, 0, max), back(*p.pa, 0, max), dst(*p.pb, p.dst_gpu, max);
  auto h = p.qa[0]->handle();
  int* out;
  CUDA_OK(cudaMallocManaged(&out, 2 * sizeof(int)));
  for (size_t bytes : {size_t(1), size_t(8), size_t(63), size_t(4096), size_t(65536 + 3), max}) {
    auto ref = random_bytes(bytes);
    src.upload(ref);
    launch1(k_put_get<Sharing::Exclusive>, h, src.u8(), src.mr->lkey(), dst.mr->addr_u64(), dst.mr->rkey(), back.u8(),
            back.mr->lkey(), bytes, out);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(out[0] == 0 && out[1] == 0, "%zu B: put %s, get %s", bytes, sname(out[0]), sname(out[1]));
    CHECK(dst.download(bytes) == ref, "%zu B: remote bytes differ", bytes);
    CHECK(back.download(bytes) == ref, "%zu B: bytes read back differ", bytes);
  }
  cudaFree(out);
}

KGT_TEST(split_above_max_msg) {
  DeviceOptions opt;
  opt.emu_max_msg = 4096;
  Pair p(1, {}, opt);
  const size_t bytes = 100 * 1024 + 5;
  GpuBuf src(*p.pa, 0, bytes), back(*p.pa, 0, bytes), dst(*p.pb, p.dst_gpu, bytes);
  auto ref = random_bytes(bytes);
  src.upload(ref);
  int* out;
  CUDA_OK(cudaMallocManaged(&out, 2 * sizeof(int)));
  launch1(k_put_get<Sharing::Gpu>, p.qa[0]->handle(), src.u8(), src.mr->lkey(), dst.mr->addr_u64(), dst.mr->rkey(),
          back.u8(), back.mr->lkey(), bytes, out);
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(out[0] == 0 && out[1] == 0, "put %s, get %s", sname(out[0]), sname(out[1]));
  CHECK(dst.download() == ref, "remote bytes differ");
  CHECK(back.download() == ref, "read-back bytes differ");
  cudaFree(out);
}

KGT_TEST(atomics_on_gpu_memory) {
  Pair p;
  GpuBuf word(*p.pb, p.dst_gpu, 8), res(*p.pa, 0, 24);
  const uint64_t init = rng()() >> 8;
  cudaMemcpy(word.p, &init, 8, cudaMemcpyHostToDevice);
  int* out;
  CUDA_OK(cudaMallocManaged(&out, 3 * sizeof(int)));
  launch1(k_atomics, p.qa[0]->handle(), reinterpret_cast<uint64_t*>(res.p), res.mr->lkey(), word.mr->addr_u64(),
          word.mr->rkey(), out);
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(out[0] == 0 && out[1] == 0 && out[2] == 0, "fa %s cs %s cs %s", sname(out[0]), sname(out[1]), sname(out[2]));
  uint64_t r[3], w;
  cudaMemcpy(r, res.p, 24, cudaMemcpyDeviceToHost);
  cudaMemcpy(&w, word.p, 8, cudaMemcpyDeviceToHost);
  CHECK(r[0] == init, "fetch_add returned %llu, expected %llu", (unsigned long long)r[0], (unsigned long long)init);
  CHECK(r[1] == init + 5, "failed CAS returned %llu", (unsigned long long)r[1]);
  CHECK(r[2] == init + 5 && w == 99, "CAS returned %llu, word %llu", (unsigned long long)r[2], (unsigned long long)w);
  cudaFree(out);
}

KGT_TEST(inline_and_nop) {
  Pair p;
  GpuBuf dst(*p.pb, p.dst_gpu, 64);
  int* out;
  CUDA_OK(cudaMallocManaged(&out, 3 * sizeof(int)));
  launch1(k_inline, p.qa[0]->handle(), dst.mr->addr_u64(), dst.mr->rkey(), out);
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(out[0] == 0, "put_inline: %s", sname(out[0]));
  CHECK(out[1] == static_cast<int>(Status::InvalidArgument), "29-byte inline: %s", sname(out[1]));
  CHECK(out[2] == 0, "nop: %s", sname(out[2]));
  auto got = dst.download(28);
  for (int i = 0; i < 28; ++i) CHECK(got[i] == 0xA0 + i, "inline byte %d is %#x", i, got[i]);
  cudaFree(out);
}

KGT_TEST(put_signal_orders_data_before_signal) {
  Pair p;
  const size_t bytes = 256 * 1024;
  GpuBuf src(*p.pa, 0, bytes), dst(*p.pb, p.dst_gpu, bytes), ref(*p.pb, p.dst_gpu, bytes), sig(*p.pb, p.dst_gpu, 8),
      scratch(*p.pa, 0, 8);
  sig.upload(std::vector<uint8_t>(8, 0));  // (cudaMemset would need GPU 1 current)
  auto data = random_bytes(bytes);
  src.upload(data);
  ref.upload(data);
  int *out_t, *out_s;
  CUDA_OK(cudaMallocManaged(&out_t, sizeof(int)));
  CUDA_OK(cudaMallocManaged(&out_s, sizeof(int)));
  // The target spins until the signal lands: k_put_signal must be loaded
  // before it starts (lazy loading would wait for the spinner; see preload).
  CHECK(kgt::preload(k_wait_signal, k_put_signal), "could not load the kernels");
  cudaStream_t st_t;
  CUDA_OK(cudaSetDevice(p.dst_gpu));
  CUDA_OK(cudaStreamCreateWithFlags(&st_t, cudaStreamNonBlocking));
  k_wait_signal<<<1, 1, 0, st_t>>>(reinterpret_cast<uint64_t*>(sig.p), 1, dst.u8(), ref.u8(), bytes, out_t);
  CUDA_OK(cudaSetDevice(0));
  launch1(k_put_signal, p.qa[0]->handle(), src.u8(), src.mr->lkey(), dst.mr->addr_u64(), dst.mr->rkey(), bytes,
          sig.mr->addr_u64(), sig.mr->rkey(), reinterpret_cast<uint64_t*>(scratch.p), scratch.mr->lkey(), out_s);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaStreamSynchronize(st_t));
  cudaStreamDestroy(st_t);
  CHECK(*out_s == 0, "put_signal: %s", sname(*out_s));
  CHECK(*out_t == 0, "target saw the signal but %s", *out_t == -2 ? "the payload was incomplete" : sname(*out_t));
  cudaFree(out_t);
  cudaFree(out_s);
}

KGT_TEST(gpu_shared_qp_4096_threads) { many_threads<Sharing::Gpu, Layout::OneQp>(16, 256, 4, 256); }
KGT_TEST(cta_shared_qp_per_cta) { many_threads<Sharing::Cta, Layout::QpPerCta>(16, 256, 4, 128); }
KGT_TEST(exclusive_qp_per_thread) { many_threads<Sharing::Exclusive, Layout::QpPerThread>(2, 32, 64, 16); }
KGT_TEST(wraparound_200x_ring) { many_threads<Sharing::Exclusive, Layout::QpPerThread>(1, 1, 3200, 16); }

KGT_TEST(warp_cooperative_posting) {
  chunks_test(8, QpConfig{.sq_depth = 256}, 8, 256, 8, [](auto... a) { k_warp_coop<<<8, 256>>>(a...); });
}

KGT_TEST(cta_cooperative_posting) {
  chunks_test(4, QpConfig{.sq_depth = 256}, 4, 128, 16, [](auto... a) { k_cta_coop<<<4, 128>>>(a...); });
}

// Warp-aggregated reserve/publish/ring on shared QPs, every lane posting alone.
KGT_TEST(cta_shared_lanes_post_singly) {
  chunks_test(2, QpConfig{.sq_depth = 128}, 1, 256, 16, [](const QpHandle* h, auto... a) {
    k_lanes<Sharing::Cta><<<1, 256>>>(h, 2, a...);
  });
}
KGT_TEST(gpu_shared_lanes_post_singly) {
  // k_lanes takes (handles, nq, ...): bind nq = 3 (lanes of 3 QPs per warp).
  chunks_test(3, QpConfig{.sq_depth = 128}, 4, 256, 8, [](const QpHandle* h, auto... a) {
    k_lanes<Sharing::Gpu><<<4, 256>>>(h, 3, a...);
  });
}

// A warp that had to wait for ring space leaves reserve() as one: lanes left
// behind would split its later publishes and doorbells into small groups for
// the rest of the kernel (10x slower in kinet-post-rate, PERFORMANCE.md §1).
// A ring smaller than the warp's 32 slots cannot hold the group's span: its
// lanes go alone, and must not wait for each other's slots (no timeout).
template <Sharing S> void reserve_together(int ctas, uint32_t depth) {
  unsigned* split = nullptr;
  CUDA_OK(cudaMallocManaged(&split, sizeof(unsigned)));
  *split = 0;
  chunks_test(1, QpConfig{.sq_depth = depth}, ctas, 256, 16, [&](auto... a) {
    k_reserve_together<S><<<ctas, 256>>>(a..., split);
  });
  const unsigned n = *split;
  cudaFree(split);
  if (depth >= 32) CHECK(n == 0, "%u of %d lane-reservations returned with their warp split", n, ctas * 256 * 16);
}
KGT_TEST(cta_shared_lanes_leave_reserve_together) { reserve_together<Sharing::Cta>(1, 32); }
KGT_TEST(gpu_shared_lanes_leave_reserve_together) { reserve_together<Sharing::Gpu>(4, 64); }
KGT_TEST(shared_lanes_on_a_ring_smaller_than_the_warp) { reserve_together<Sharing::Cta>(1, 16); }

KGT_TEST(post_loop_wraps_a_small_ring) {
  chunks_test(64, QpConfig{.sq_depth = 16}, 2, 32, 100, [](auto... a) { k_post_loop<<<2, 32>>>(a...); });
}

KGT_TEST(cursor_steps_wrap_a_small_ring) {
  chunks_test(64, QpConfig{.sq_depth = 16}, 2, 32, 100, [](auto... a) { k_cursor<<<2, 32>>>(a...); });
}

KGT_TEST(fetch_add_from_2048_threads) {
  const int n = 2048;
  Pair p(1, QpConfig{.sq_depth = 1024});
  GpuBuf word(*p.pb, p.dst_gpu, 8), olds(*p.pa, 0, n * 8);
  word.upload(std::vector<uint8_t>(8, 0));
  Statuses st(n);
  k_fetch_add_all<<<n / 256, 256>>>(p.qa[0]->handle(), reinterpret_cast<uint64_t*>(olds.p), olds.mr->lkey(),
                                     word.mr->addr_u64(), word.mr->rkey(), st.d);
  CUDA_OK(cudaDeviceSynchronize());
  CHECK_STATUSES(st);
  std::vector<uint64_t> o(n);
  uint64_t w;
  cudaMemcpy(o.data(), olds.p, n * 8, cudaMemcpyDeviceToHost);
  cudaMemcpy(&w, word.p, 8, cudaMemcpyDeviceToHost);
  CHECK(w == uint64_t(n), "final counter %llu", (unsigned long long)w);
  std::sort(o.begin(), o.end());
  for (int i = 0; i < n; ++i) CHECK(o[i] == uint64_t(i), "old values are not a permutation of 0..%d (at %d: %llu)", n - 1, i, (unsigned long long)o[i]);
}

KGT_TEST(error_cqe_reaches_the_kernel) {
  Pair p;
  GpuBuf src(*p.pa, 0, 64), dst(*p.pb, p.dst_gpu, 64);
  src.upload(random_bytes(64));
  const auto before = dst.download();
  int* out;
  CUDA_OK(cudaMallocManaged(&out, 2 * sizeof(int)));
  launch1(k_fault, p.qa[0]->handle(), src.u8(), src.mr->lkey(), dst.mr->addr_u64(), dst.mr->rkey(), out);
  CUDA_OK(cudaDeviceSynchronize());
  std::printf("  kernel saw: %s; then: %s\n  host: %s (QP %s)\n", sname(out[0]), sname(out[1]),
              p.qa[0]->last_error().c_str(), qp_state_name(p.qa[0]->state()));
  CHECK(out[0] == static_cast<int>(Status::RemoteAccess), "bad rkey gave %s", sname(out[0]));
  CHECK(out[1] == static_cast<int>(Status::WrFlushed), "op after the fault gave %s", sname(out[1]));
  CHECK(p.qa[0]->state() == QpState::Error, "QP state %s", qp_state_name(p.qa[0]->state()));
  CHECK(p.qa[0]->last_error().find("rkey 0x1234") != std::string::npos, "last_error: %s", p.qa[0]->last_error().c_str());
  CHECK(dst.download() == before, "a flushed or faulted write changed the target");
  cudaFree(out);
}

KGT_TEST(rings_in_gpu_memory) {
  QpConfig cfg;
  cfg.rings = RingPlacement::Gpu;
  cfg.sq_depth = 64;
  chunks_test(4, cfg, 4, 64, 4, [](auto... a) { k_many<Sharing::Cta, Layout::QpPerCta><<<4, 64>>>(a...); });
}

int main(int argc, char** argv) { return kgt::run_all(argc, argv); }
