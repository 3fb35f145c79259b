// kinet NCCL plugin — the GPU checks of issue 12 (items 4 and 5): N NCCL
// ranks on ONE GPU, each process claiming its own host (NCCL_HOSTID), so NCCL
// sees N nodes and every byte between ranks goes through the network plugin.
//
//   nvcc -std=c++17 -O2 -arch=sm_90 -o kinet_nccl_check kinet_nccl_check.cu -lnccl
//   LD_LIBRARY_PATH=<kinet build>/plugin/nccl:$LD_LIBRARY_PATH NCCL_NET_PLUGIN=kinet \
//     KINET_TRANSPORT=tcp NCCL_DEBUG=INFO ./kinet_nccl_check <mode> [nranks]
//
// Modes (the parent starts nranks copies of itself and reports their result):
//   gin       device API with GIN (ncclDevCommCreate, ginSignalCount 1): every
//             rank puts a slice to every rank (itself included) with SignalInc,
//             then a data-less signal Add 2 to every rank; each waits for
//             base + 3 * nranks and checks every element.
//   coll      ncclAllReduce (sum of 1 Mi floats) and ncclAlltoAll, checked.
//   a2a-perf  ncclAlltoAll timings, 64 KiB .. 64 MiB per peer (run once with
//             NCCL_NET_PLUGIN=kinet, once with NCCL_NET=Socket for the baseline).
//   gin-rtt   2 ranks: put 8 bytes + SignalInc to the peer, which answers the
//             same way; the mean round trip over 1000 iterations.
// Exit status 0 when every rank passed. Written for NCCL 2.28.9.
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>
#include <spawn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

#define CK_CUDA(x)                                                                                   \
  do {                                                                                               \
    cudaError_t e_ = (x);                                                                            \
    if (e_ != cudaSuccess) {                                                                         \
      std::fprintf(stderr, "rank %d: %s:%d: %s: %s\n", g_rank, __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                                  \
    }                                                                                                \
  } while (0)
#define CK_NCCL(x)                                                                                   \
  do {                                                                                               \
    ncclResult_t r_ = (x);                                                                           \
    if (r_ != ncclSuccess) {                                                                         \
      std::fprintf(stderr, "rank %d: %s:%d: %s: %s\n", g_rank, __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
      std::exit(3);                                                                                  \
    }                                                                                                \
  } while (0)

static int g_rank = -1;

// ---- kernels ------------------------------------------------------------------

// One CTA: thread r puts this rank's slice for r into r's receive window at
// slot `rank`, with SignalInc on signal 0; then a data-less Add 2.
__global__ void gin_all_to_all(ncclWindow_t send, ncclWindow_t recv, size_t bytes, ncclDevComm dc, uint64_t base) {
  ncclGin gin{dc, 0};
  for (int r = threadIdx.x; r < dc.nRanks; r += blockDim.x)
    gin.put(ncclTeamWorld(dc), r, recv, size_t(dc.rank) * bytes, send, size_t(r) * bytes, bytes,
            ncclGin_SignalInc{0});
  __syncthreads();
  for (int r = threadIdx.x; r < dc.nRanks; r += blockDim.x) gin.signal(ncclTeamWorld(dc), r, ncclGin_SignalAdd{0, 2});
  gin.waitSignal(ncclCoopCta(), 0, base + 3ull * dc.nRanks);
  gin.flush(ncclCoopCta());
}

// Ping-pong between ranks 0 and 1 on signal 0, `iters` round trips.
__global__ void gin_ping_pong(ncclWindow_t win, ncclDevComm dc, int iters, uint64_t base) {
  if (threadIdx.x != 0) return;
  ncclGin gin{dc, 0};
  const int peer = 1 - dc.rank;
  for (int i = 0; i < iters; ++i) {
    if (dc.rank == 0) {
      gin.put(ncclTeamWorld(dc), peer, win, 0, win, 8, 8, ncclGin_SignalInc{0});
      gin.waitSignal(ncclCoopThread(), 0, base + i + 1);
    } else {
      gin.waitSignal(ncclCoopThread(), 0, base + i + 1);
      gin.put(ncclTeamWorld(dc), peer, win, 0, win, 8, 8, ncclGin_SignalInc{0});
    }
  }
  gin.flush(ncclCoopThread());
}

// ---- one rank -------------------------------------------------------------------

static ncclComm_t init_comm(int rank, int n, const std::string& idfile) {
  ncclUniqueId id;
  if (rank == 0) {
    CK_NCCL(ncclGetUniqueId(&id));
    std::string tmp = idfile + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<char*>(&id), sizeof id);
    std::rename(tmp.c_str(), idfile.c_str());
  } else {
    auto d = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      std::ifstream f(idfile, std::ios::binary);
      if (f.read(reinterpret_cast<char*>(&id), sizeof id)) break;
      if (std::chrono::steady_clock::now() > d) {
        std::fprintf(stderr, "rank %d: no unique id in %s after 60 s\n", rank, idfile.c_str());
        std::exit(4);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ncclComm_t comm;
  CK_NCCL(ncclCommInitRank(&comm, n, id, rank));
  return comm;
}

static int run_gin(ncclComm_t comm, int rank, int n) {
  const size_t count = 256 * 1024;  // floats per peer (1 MiB)
  const size_t bytes = count * sizeof(float);
  void *dsend, *drecv;
  CK_NCCL(ncclMemAlloc(&dsend, bytes * n));
  CK_NCCL(ncclMemAlloc(&drecv, bytes * n));
  ncclWindow_t wsend, wrecv;
  CK_NCCL(ncclCommWindowRegister(comm, dsend, bytes * n, &wsend, NCCL_WIN_COLL_SYMMETRIC));
  CK_NCCL(ncclCommWindowRegister(comm, drecv, bytes * n, &wrecv, NCCL_WIN_COLL_SYMMETRIC));
  std::vector<float> h(count * n);
  for (int to = 0; to < n; ++to)
    for (size_t i = 0; i < count; ++i) h[to * count + i] = float(rank * 1000003 + to * 7919 + i % 100000);
  CK_CUDA(cudaMemcpy(dsend, h.data(), bytes * n, cudaMemcpyHostToDevice));
  CK_CUDA(cudaMemset(drecv, 0, bytes * n));
  ncclDevCommRequirements reqs;
  std::memset(&reqs, 0, sizeof reqs);
  reqs.ginSignalCount = 1;
  reqs.ginForceEnable = true;
  ncclDevComm dc;
  CK_NCCL(ncclDevCommCreate(comm, &reqs, &dc));
  // Everyone's windows exist before anyone puts.
  float* one;
  CK_CUDA(cudaMalloc(&one, sizeof(float)));
  CK_NCCL(ncclAllReduce(one, one, 1, ncclFloat, ncclSum, comm, 0));
  CK_CUDA(cudaStreamSynchronize(0));
  auto t0 = std::chrono::steady_clock::now();
  gin_all_to_all<<<1, 128>>>(wsend, wrecv, bytes, dc, 0);
  CK_CUDA(cudaGetLastError());
  CK_CUDA(cudaDeviceSynchronize());
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  CK_CUDA(cudaMemcpy(h.data(), drecv, bytes * n, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int from = 0; from < n && !bad; ++from)
    for (size_t i = 0; i < count; ++i)
      if (h[from * count + i] != float(from * 1000003 + rank * 7919 + i % 100000)) {
        std::fprintf(stderr, "rank %d: from rank %d element %zu: %f\n", rank, from, i, h[from * count + i]);
        bad = 1;
        break;
      }
  CK_NCCL(ncclAllReduce(one, one, 1, ncclFloat, ncclSum, comm, 0));  // nobody leaves while others put
  CK_CUDA(cudaStreamSynchronize(0));
  CK_NCCL(ncclDevCommDestroy(comm, &dc));
  CK_NCCL(ncclCommWindowDeregister(comm, wsend));
  CK_NCCL(ncclCommWindowDeregister(comm, wrecv));
  CK_NCCL(ncclMemFree(dsend));
  CK_NCCL(ncclMemFree(drecv));
  std::printf("rank %d: gin all-to-all of %zu bytes per peer, %d ranks (self included), put+SignalInc and signal Add: %s (%.0f us)\n",
              rank, bytes, n, bad ? "FAILED" : "OK", us);
  return bad;
}

static int run_gin_rtt(ncclComm_t comm, int rank, int n) {
  if (n != 2) {
    std::fprintf(stderr, "gin-rtt needs 2 ranks\n");
    return 1;
  }
  void* d;
  CK_NCCL(ncclMemAlloc(&d, 4096));
  ncclWindow_t w;
  CK_NCCL(ncclCommWindowRegister(comm, d, 4096, &w, NCCL_WIN_COLL_SYMMETRIC));
  ncclDevCommRequirements reqs;
  std::memset(&reqs, 0, sizeof reqs);
  reqs.ginSignalCount = 1;
  reqs.ginForceEnable = true;
  ncclDevComm dc;
  CK_NCCL(ncclDevCommCreate(comm, &reqs, &dc));
  float* one;
  CK_CUDA(cudaMalloc(&one, sizeof(float)));
  CK_NCCL(ncclAllReduce(one, one, 1, ncclFloat, ncclSum, comm, 0));
  CK_CUDA(cudaStreamSynchronize(0));
  gin_ping_pong<<<1, 32>>>(w, dc, 100, 0);  // warm-up
  CK_CUDA(cudaDeviceSynchronize());
  const int iters = 1000;
  auto t0 = std::chrono::steady_clock::now();
  gin_ping_pong<<<1, 32>>>(w, dc, iters, 100);
  CK_CUDA(cudaGetLastError());
  CK_CUDA(cudaDeviceSynchronize());
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  CK_NCCL(ncclAllReduce(one, one, 1, ncclFloat, ncclSum, comm, 0));
  CK_CUDA(cudaStreamSynchronize(0));
  if (rank == 0) std::printf("gin-rtt: put 8 B + SignalInc and back: %.2f us per round trip (%d iterations)\n", us / iters, iters);
  CK_NCCL(ncclDevCommDestroy(comm, &dc));
  CK_NCCL(ncclCommWindowDeregister(comm, w));
  CK_NCCL(ncclMemFree(d));
  return 0;
}

static int run_coll(ncclComm_t comm, int rank, int n) {
  const size_t count = 1 << 20;
  float* d;
  CK_CUDA(cudaMalloc(&d, count * n * sizeof(float)));
  float* r;
  CK_CUDA(cudaMalloc(&r, count * n * sizeof(float)));
  std::vector<float> h(count * n);
  for (size_t i = 0; i < count; ++i) h[i] = float(rank + 1) * float(i % 1000);
  CK_CUDA(cudaMemcpy(d, h.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  CK_NCCL(ncclAllReduce(d, d, count, ncclFloat, ncclSum, comm, 0));
  CK_CUDA(cudaStreamSynchronize(0));
  CK_CUDA(cudaMemcpy(h.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0;
  const float k = float(n) * float(n + 1) / 2;
  for (size_t i = 0; i < count && !bad; ++i) bad = h[i] != k * float(i % 1000);
  const size_t per = count;  // floats per peer
  for (int to = 0; to < n; ++to)
    for (size_t i = 0; i < per; ++i) h[to * per + i] = float(rank * 100 + to) + float(i % 97) / 128;
  CK_CUDA(cudaMemcpy(d, h.data(), per * n * sizeof(float), cudaMemcpyHostToDevice));
  CK_NCCL(ncclAlltoAll(d, r, per, ncclFloat, comm, 0));
  CK_CUDA(cudaStreamSynchronize(0));
  CK_CUDA(cudaMemcpy(h.data(), r, per * n * sizeof(float), cudaMemcpyDeviceToHost));
  int bad2 = 0;
  for (int from = 0; from < n && !bad2; ++from)
    for (size_t i = 0; i < per && !bad2; ++i) bad2 = h[from * per + i] != float(from * 100 + rank) + float(i % 97) / 128;
  std::printf("rank %d: all-reduce of %zu floats: %s; all-to-all of %zu floats per peer: %s\n", rank, count,
              bad ? "FAILED" : "OK", per, bad2 ? "FAILED" : "OK");
  return bad || bad2;
}

static int run_a2a_perf(ncclComm_t comm, int rank, int n) {
  const size_t max_per = size_t(64) << 20;
  char *s, *r;
  CK_CUDA(cudaMalloc(&s, max_per * n));
  CK_CUDA(cudaMalloc(&r, max_per * n));
  cudaEvent_t a, b;
  CK_CUDA(cudaEventCreate(&a));
  CK_CUDA(cudaEventCreate(&b));
  if (rank == 0) std::printf("a2a-perf (%s): bytes_per_peer time_us busbw_GBps\n", std::getenv("NCCL_NET_PLUGIN") ? std::getenv("NCCL_NET_PLUGIN") : "default");
  for (size_t per = 64 << 10; per <= max_per; per *= 4) {
    for (int w = 0; w < 3; ++w) CK_NCCL(ncclAlltoAll(s, r, per, ncclChar, comm, 0));
    const int iters = per >= (16 << 20) ? 5 : 20;
    CK_CUDA(cudaEventRecord(a, 0));
    for (int i = 0; i < iters; ++i) CK_NCCL(ncclAlltoAll(s, r, per, ncclChar, comm, 0));
    CK_CUDA(cudaEventRecord(b, 0));
    CK_CUDA(cudaEventSynchronize(b));
    float ms;
    CK_CUDA(cudaEventElapsedTime(&ms, a, b));
    double us = 1000.0 * ms / iters;
    if (rank == 0) std::printf("%zu %.1f %.2f\n", per, us, double(per) * (n - 1) / us / 1e3);
  }
  return 0;
}

static int rank_main(const std::string& mode, int rank, int n, const std::string& idfile) {
  g_rank = rank;
  CK_CUDA(cudaSetDevice(0));
  ncclComm_t comm = init_comm(rank, n, idfile);
  int rc = mode == "gin" ? run_gin(comm, rank, n)
           : mode == "gin-rtt" ? run_gin_rtt(comm, rank, n)
           : mode == "coll" ? run_coll(comm, rank, n)
                            : run_a2a_perf(comm, rank, n);
  CK_NCCL(ncclCommFinalize(comm));
  CK_NCCL(ncclCommDestroy(comm));
  return rc;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s gin|gin-rtt|coll|a2a-perf [nranks]\n", argv[0]);
    return 1;
  }
  const std::string mode = argv[1];
  if (mode != "gin" && mode != "gin-rtt" && mode != "coll" && mode != "a2a-perf") {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 1;
  }
  if (const char* r = std::getenv("KINET_NCCL_CHECK_RANK"))
    return rank_main(mode, std::atoi(r), std::atoi(std::getenv("KINET_NCCL_CHECK_NRANKS")),
                     std::getenv("KINET_NCCL_CHECK_IDFILE"));
  const int n = argc > 2 ? std::atoi(argv[2]) : 2;
  const std::string idfile = "/tmp/kinet_nccl_check_id_" + std::to_string(getpid());
  std::remove(idfile.c_str());
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    env.push_back("KINET_NCCL_CHECK_RANK=" + std::to_string(r));
    env.push_back("KINET_NCCL_CHECK_NRANKS=" + std::to_string(n));
    env.push_back("KINET_NCCL_CHECK_IDFILE=" + idfile);
    env.push_back("NCCL_HOSTID=kinet-fakehost-" + std::to_string(r));  // one "node" per rank
    std::vector<char*> ev;
    for (auto& s : env) ev.push_back(const_cast<char*>(s.c_str()));
    ev.push_back(nullptr);
    pid_t pid;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, ev.data()) != 0) {
      std::perror("posix_spawn");
      return 1;
    }
    pids.push_back(pid);
  }
  // Bounded: a rank still running after 300 s is killed and reported.
  int failed = 0;
  std::vector<int> code(n, -1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  for (int left = n; left > 0;) {
    for (int r = 0; r < n; ++r) {
      int st = 0;
      if (code[r] == -1 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        code[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r)
        if (code[r] == -1) {
          std::fprintf(stderr, "rank %d: still running after 300 s; killed\n", r);
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          code[r] = 128 + SIGKILL;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < n; ++r)
    if (code[r] != 0) {
      std::fprintf(stderr, "rank %d: exit status %d\n", r, code[r]);
      failed = 1;
    }
  std::remove(idfile.c_str());
  std::printf("%s with %d ranks: %s\n", mode.c_str(), n, failed ? "FAILED" : "PASSED");
  return failed;
}
