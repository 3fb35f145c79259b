// kinet-perf-gpu — end-to-end write latency and bandwidth, GPU to GPU,
// through kinet's software NIC: kernels post mlx5 WQEs, the emulator moves
// the bytes between GPU memories (GPU 0 -> GPU 1 when there are two).
//
//   kinet-perf-gpu [--iters N] [--max-size BYTES] [--json FILE]
//
// write_lat: ping-pong between a kernel on each GPU, each polling the last
//   byte of its receive buffer (perftest's ib_write_lat scheme); half the
//   round trip is reported.
// write_bw: one thread posts writes with up to --tx-depth in flight,
//   signalling every 16th, and waits for all; bytes / time.
#include <kinet/kinet.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace kinet;
using namespace kinet::dev;

#define CUDA_CHECK(x)                                                                                    \
  do {                                                                                                   \
    cudaError_t e_ = (x);                                                                                \
    if (e_ != cudaSuccess) {                                                                             \
      std::fprintf(stderr, "kinet-perf-gpu: %s failed: %s\n", #x, cudaGetErrorString(e_));               \
      std::exit(1);                                                                                      \
    }                                                                                                    \
  } while (0)

namespace {
constexpr uint64_t kPollTimeoutNs = 10ull * 1000 * 1000 * 1000;

// One side of the ping-pong. Initiator (first=1) sends first.
__global__ void k_pingpong(QpHandle q, uint8_t* sbuf, Lkey lk, volatile uint8_t* rbuf, uint64_t raddr, Rkey rk,
                           uint32_t bytes, int iters, int first, int* status, unsigned long long* ns) {
  const uint64_t t0 = now_ns();
  for (int i = 0; i < iters; ++i) {
    const uint8_t tag = static_cast<uint8_t>((i % 250) + 1);
    if (!first || i > 0) {  // wait for the peer's message i (or i-1 for the initiator)
      const uint8_t want = first ? static_cast<uint8_t>(((i - 1) % 250) + 1) : tag;
      const uint64_t ts = now_ns();
      while (rbuf[bytes - 1] != want) {
        if (now_ns() - ts > kPollTimeoutNs) {
          *status = static_cast<int>(Status::TimeoutCompletion);
          return;
        }
      }
    }
    sbuf[bytes - 1] = tag;
    fence_release<Scope::System>();  // the tag is in memory before the WQE that carries it
    Ticket t;
    Status s = put<Sharing::Exclusive>(q, sbuf, lk, raddr, rk, bytes, 0, &t);
    if (s != Status::Ok) {
      *status = static_cast<int>(s);
      return;
    }
  }
  if (first) {  // the last reply
    const uint8_t want = static_cast<uint8_t>(((iters - 1) % 250) + 1);
    const uint64_t ts = now_ns();
    while (rbuf[bytes - 1] != want)
      if (now_ns() - ts > kPollTimeoutNs) {
        *status = static_cast<int>(Status::TimeoutCompletion);
        return;
      }
  }
  *status = static_cast<int>(quiet<Sharing::Exclusive>(q));
  *ns = now_ns() - t0;
}

__global__ void k_bw(QpHandle q, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk, uint32_t bytes, int iters,
                     int* status, unsigned long long* ns) {
  const uint64_t t0 = now_ns();
  Status s = Status::Ok;
  for (int i = 0; i < iters && s == Status::Ok; ++i)
    s = put<Sharing::Exclusive>(q, src, lk, raddr, rk, bytes, (i % 16 == 15) ? kSignal : 0, nullptr);
  if (s == Status::Ok) s = quiet<Sharing::Exclusive>(q);
  *ns = now_ns() - t0;
  *status = static_cast<int>(s);
}

struct Side {
  int gpu;
  std::unique_ptr<Device> dev;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<QueuePair> qp;
  uint8_t *sbuf = nullptr, *rbuf = nullptr;
  std::unique_ptr<MemoryRegion> smr, rmr;
};
}  // namespace

int main(int argc, char** argv) {
  int iters = 200;
  size_t max_size = 1 << 20;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (a == "--max-size" && i + 1 < argc) max_size = std::strtoull(argv[++i], nullptr, 0);
    else if (a == "--json" && i + 1 < argc) json = argv[++i];
    else {
      std::printf("usage: kinet-perf-gpu [--iters N] [--max-size BYTES] [--json FILE]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) {
    std::printf("SKIPPED: kinet-perf-gpu needs a CUDA GPU\n");
    return 77;
  }
  Side a{0}, b{ngpu > 1 ? 1 : 0};
  QpConfig cfg;
  cfg.sq_depth = 512;
  cfg.posters = Posters::Gpu;
  for (Side* s : {&a, &b}) {
    s->dev = Device::open("emu");
    s->pd = s->dev->alloc_pd();
    CUDA_CHECK(cudaSetDevice(s->gpu));
    s->qp = s->pd->create_qp(cfg);  // its posting state lands on this side's GPU
    CUDA_CHECK(cudaMalloc(&s->sbuf, max_size));
    CUDA_CHECK(cudaMalloc(&s->rbuf, max_size));
    CUDA_CHECK(cudaMemset(s->sbuf, 0x3c, max_size));
    CUDA_CHECK(cudaMemset(s->rbuf, 0, max_size));
    s->smr = s->pd->reg_mr(s->sbuf, max_size, kAccessAll);
    s->rmr = s->pd->reg_mr(s->rbuf, max_size, kAccessAll);
  }
  a.qp->connect(b.qp->info());
  b.qp->connect(a.qp->info());
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("kinet-perf-gpu: %s, GPU %d -> GPU %d, software NIC (emu), %d iterations\n", prop.name, a.gpu, b.gpu,
              iters);
  int *st;
  unsigned long long* ns;
  CUDA_CHECK(cudaMallocManaged(&st, 4 * sizeof(int)));
  CUDA_CHECK(cudaMallocManaged(&ns, 4 * sizeof(unsigned long long)));
  std::string js = "{\"tool\":\"kinet-perf-gpu\",\"gpu\":\"" + std::string(prop.name) + "\",\"ngpu\":" +
                   std::to_string(ngpu) + ",\"results\":[";
  bool firstrow = true;
  std::printf("\n write_lat (GPU kernel ping-pong)\n %10s %12s\n", "bytes", "t_avg[usec]");
  for (size_t bytes = 8; bytes <= std::min<size_t>(max_size, 65536); bytes *= 8) {
    for (int rep = 0; rep < 2; ++rep) {  // rep 0 warms up
      cudaStream_t sa, sb;
      CUDA_CHECK(cudaSetDevice(b.gpu));
      CUDA_CHECK(cudaMemset(b.rbuf, 0, bytes));
      CUDA_CHECK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
      k_pingpong<<<1, 1, 0, sb>>>(b.qp->handle(), b.sbuf, b.smr->lkey(), b.rbuf, a.rmr->addr_u64(), a.rmr->rkey(),
                                  bytes, iters, 0, &st[1], &ns[1]);
      CUDA_CHECK(cudaSetDevice(a.gpu));
      CUDA_CHECK(cudaMemset(a.rbuf, 0, bytes));
      CUDA_CHECK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
      k_pingpong<<<1, 1, 0, sa>>>(a.qp->handle(), a.sbuf, a.smr->lkey(), a.rbuf, b.rmr->addr_u64(), b.rmr->rkey(),
                                  bytes, iters, 1, &st[0], &ns[0]);
      CUDA_CHECK(cudaStreamSynchronize(sa));
      CUDA_CHECK(cudaSetDevice(b.gpu));
      CUDA_CHECK(cudaStreamSynchronize(sb));
      CUDA_CHECK(cudaSetDevice(0));
      cudaStreamDestroy(sa);
      cudaStreamDestroy(sb);
      if (st[0] || st[1]) {
        std::fprintf(stderr, "write_lat %zu B failed: %s / %s\n", bytes, status_string(Status(st[0])),
                     status_string(Status(st[1])));
        return 1;
      }
    }
    const double us = ns[0] / 1e3 / iters / 2;
    std::printf(" %10zu %12.2f\n", bytes, us);
    js += std::string(firstrow ? "" : ",") + "{\"test\":\"write_lat\",\"bytes\":" + std::to_string(bytes) +
          ",\"iters\":" + std::to_string(iters) + ",\"t_avg_us\":" + std::to_string(us) + "}";
    firstrow = false;
  }
  std::printf("\n write_bw (one GPU thread, CQE every 16 WQEs)\n %10s %10s %12s %12s\n", "bytes", "iters", "BW[MB/s]",
              "Mmsg/s");
  for (size_t bytes = 64; bytes <= max_size; bytes *= 4) {
    const int n = bytes >= (1 << 18) ? std::max(16, iters / 4) : iters * 4;
    for (int rep = 0; rep < 2; ++rep) {
      k_bw<<<1, 1>>>(a.qp->handle(), a.sbuf, a.smr->lkey(), b.rmr->addr_u64(), b.rmr->rkey(), bytes, n, &st[0],
                     &ns[0]);
      CUDA_CHECK(cudaDeviceSynchronize());
      if (st[0]) {
        std::fprintf(stderr, "write_bw %zu B failed: %s\n", bytes, status_string(Status(st[0])));
        return 1;
      }
    }
    const double sec = ns[0] / 1e9;
    const double mbs = bytes * double(n) / sec / 1e6, mmsg = n / sec / 1e6;
    std::printf(" %10zu %10d %12.1f %12.4f\n", bytes, n, mbs, mmsg);
    js += ",{\"test\":\"write_bw\",\"bytes\":" + std::to_string(bytes) + ",\"iters\":" + std::to_string(n) +
          ",\"mb_per_s\":" + std::to_string(mbs) + ",\"mmsg_per_s\":" + std::to_string(mmsg) + "}";
  }
  // The last message must have landed intact.
  std::vector<uint8_t> got(64), want(64);
  CUDA_CHECK(cudaMemcpy(got.data(), b.rbuf, 64, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(want.data(), a.sbuf, 64, cudaMemcpyDeviceToHost));
  if (got != want) {
    std::fprintf(stderr, "kinet-perf-gpu: data check failed at the target\n");
    return 1;
  }
  js += "]}\n";
  if (json) {
    FILE* f = std::fopen(json, "w");
    if (!f || std::fputs(js.c_str(), f) < 0) {
      std::fprintf(stderr, "kinet-perf-gpu: cannot write %s\n", json);
      return 1;
    }
    std::fclose(f);
  }
  return 0;
}
