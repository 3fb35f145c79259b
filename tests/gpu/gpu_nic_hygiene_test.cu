// kinet GPU tests: the software NIC never waits behind a user's kernel.
// Kernels spin (bounded) on the legacy default stream and on a user stream of
// every GPU used, while the host opens NICs, creates QPs of every placement,
// registers memory, moves data (posted by the host and by kernels), tears it
// all down and closes the NICs. Only then are the spinners released: if any
// of that waited for them (cudaFree, cudaFreeHost, cudaMemset or cudaMemcpy on
// the legacy stream, a device synchronisation), the spinners give up first and
// the test fails instead of hanging.
#include <kinet/device/qp.cuh>
#include <kinet/kinet.hpp>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "gpu_harness.hpp"

using namespace kinet;
using namespace kinet::dev;

namespace {
constexpr uint64_t kSpinMs = 15000;  // the spinners' bound; the host work needs well under a second
constexpr uint64_t kQpTimeoutMs = 10000;
constexpr size_t kRegion = 256 * 1024;  // bytes per poster: the host, a GPU-ring QP, a Posters::Gpu QP

// Spins until *go is set or max_ns pass; *out = 0 when released, 1 when it gave up.
__global__ void k_spin(const int* go, uint64_t max_ns, int* out) {
  const uint64_t t0 = now_ns();
  while (load_acquire<Scope::System>(const_cast<int*>(go)) == 0) {
    if (now_ns() - t0 > max_ns) {
      store_release<Scope::System>(out, 1);
      return;
    }
    __nanosleep(1000);
  }
  store_release<Scope::System>(out, 0);
}

// put then get of one region; out[0], out[1] = their statuses, out[2] = 1 when done.
__global__ void k_put_get(QpHandle q, const uint8_t* src, Lkey lk, uint64_t raddr, Rkey rk, uint8_t* back, Lkey bk,
                          size_t bytes, int* out) {
  Ticket t;
  Status s = put<Sharing::Exclusive>(q, src, lk, raddr, rk, bytes, 0, &t);
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(q, t);
  out[0] = static_cast<int>(s);
  s = get<Sharing::Exclusive>(q, back, bk, raddr, rk, bytes, kSignal, &t);
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(q, t);
  out[1] = static_cast<int>(s);
  store_release<Scope::System>(&out[2], 1);
}

// Pinned, mapped host memory the kernels and the host share without any copy
// (a cudaMemcpy would queue behind the legacy-stream spinner).
struct Shared {
  int go;
  int spun[3];      // per spinner: -1 spinning, 0 released, 1 gave up
  int kout[2][3];   // per posting kernel: put, get, done
};

const char* sname(int s) { return s == -1 ? "never written" : status_string(static_cast<Status>(s)); }
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Everything the host does while the spinners run. Returns "" or what failed.
std::string host_work(Shared* sh, uint8_t* src, uint8_t* back, uint8_t* dst, uint64_t* word, uint64_t* res) {
  auto da = Device::open("emu"), db = Device::open("emu");
  auto pa = da->alloc_pd(), pb = db->alloc_pd();
  auto msrc = pa->reg_mr(src, 3 * kRegion, kAccessAll), mback = pa->reg_mr(back, 3 * kRegion, kAccessAll);
  auto mres = pa->reg_mr(res, 8, kAccessAll);
  auto mdst = pb->reg_mr(dst, 3 * kRegion, kAccessAll), mword = pb->reg_mr(word, 8, kAccessAll);
  if (msrc->kind() != MemoryKind::Gpu || mdst->kind() != MemoryKind::Gpu) return "reg_mr did not see GPU memory";

  // Three QP pairs: host rings posted by the host; GPU rings; host rings with
  // the posting state in GPU memory (both posted by kernels).
  QpConfig host_cfg{.timeout_ms = kQpTimeoutMs};
  QpConfig ring_cfg{.rings = RingPlacement::Gpu, .timeout_ms = kQpTimeoutMs};
  QpConfig state_cfg{.posters = Posters::Gpu, .timeout_ms = kQpTimeoutMs};
  std::unique_ptr<QueuePair> qa[3], qb[3];
  const QpConfig* cfgs[3] = {&host_cfg, &ring_cfg, &state_cfg};
  for (int i = 0; i < 3; ++i) {
    qa[i] = pa->create_qp(*cfgs[i]);
    qb[i] = pb->create_qp(*cfgs[i]);
    qa[i]->connect(qb[i]->info());
    qb[i]->connect(qa[i]->info());
  }

  cudaStream_t ks;  // the posting kernels' stream: a user's non-blocking stream
  if (cudaStreamCreateWithFlags(&ks, cudaStreamNonBlocking) != cudaSuccess) return "cudaStreamCreateWithFlags failed";
  for (int k = 0; k < 2; ++k) {
    const size_t off = (k + 1) * kRegion;
    k_put_get<<<1, 1, 0, ks>>>(qa[k + 1]->handle(), src + off, msrc->lkey(), mdst->addr_u64() + off, mdst->rkey(),
                               back + off, mback->lkey(), kRegion, sh->kout[k]);
  }
  if (cudaGetLastError() != cudaSuccess) return "posting kernel launch failed";

  // The host posts on the first QP meanwhile: put, get, and a fetch-add whose
  // target and result are both in GPU memory.
  const QpHandle h = qa[0]->handle();
  Ticket t;
  Status s = put<Sharing::Exclusive>(h, src, msrc->lkey(), mdst->addr_u64(), mdst->rkey(), kRegion, 0, &t);
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(h, t);
  if (s != Status::Ok) return std::string("host put: ") + status_string(s) + " (" + qa[0]->last_error() + ")";
  s = get<Sharing::Exclusive>(h, back, mback->lkey(), mdst->addr_u64(), mdst->rkey(), kRegion, kSignal, &t);
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(h, t);
  if (s != Status::Ok) return std::string("host get: ") + status_string(s) + " (" + qa[0]->last_error() + ")";
  s = fetch_add<Sharing::Exclusive>(h, res, mres->lkey(), mword->addr_u64(), mword->rkey(), 1, kSignal, &t);
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(h, t);
  if (s != Status::Ok) return std::string("host fetch_add: ") + status_string(s) + " (" + qa[0]->last_error() + ")";

  // The posting kernels finish while the spinners still spin (bounded wait).
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < 2; ++k)
    while (load_acquire<Scope::System>(&sh->kout[k][2]) != 1)
      if (ms_since(t0) > 2.0 * kQpTimeoutMs) return "posting kernel " + std::to_string(k) + " did not finish";
  cudaStreamDestroy(ks);
  // Teardown (QPs, MRs, PDs, NICs) happens as the scope ends, spinners still running.
  return "";
}
}  // namespace

KGT_TEST(nic_never_waits_behind_a_spinning_kernel) {
  // Such tools synchronise by themselves: under compute-sanitizer memcheck and
  // racecheck the host work waited the spinners' full bound (15 s; 1 ms
  // without the tool), so what would be measured is the tool.
  if (const char* tool = kgt::cuda_tool()) KGT_SKIP("%s is attached and synchronises by itself", tool);
  CHECK(kgt::preload(k_spin, k_put_get), "could not load the kernels");
  int ngpu = 0;
  CUDA_OK(cudaGetDeviceCount(&ngpu));
  const int dg = ngpu > 1 ? 1 : 0;  // target GPU
  // Everything the test allocates or uploads is done before the spinners start.
  uint8_t *src, *back, *dst;
  uint64_t *word, *res;
  Shared* sh;
  std::vector<uint8_t> ref(3 * kRegion);
  std::mt19937_64 r(std::random_device{}());
  for (auto& b : ref) b = static_cast<uint8_t>(r() | 1);
  const uint64_t init = r() >> 8;
  CUDA_OK(cudaHostAlloc(&sh, sizeof(Shared), cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(sh, 0xff, sizeof(Shared));
  sh->go = 0;
  CUDA_OK(cudaMalloc(&src, ref.size()));
  CUDA_OK(cudaMalloc(&back, ref.size()));
  CUDA_OK(cudaMalloc(&res, 8));
  CUDA_OK(cudaMemcpy(src, ref.data(), ref.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(back, 0, ref.size()));
  CUDA_OK(cudaSetDevice(dg));
  CUDA_OK(cudaMalloc(&dst, ref.size()));
  CUDA_OK(cudaMalloc(&word, 8));
  CUDA_OK(cudaMemset(dst, 0, ref.size()));
  CUDA_OK(cudaMemcpy(word, &init, 8, cudaMemcpyHostToDevice));
  cudaStream_t user;
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));

  const uint64_t spin_ns = kSpinMs * 1000000ull;
  k_spin<<<1, 1>>>(&sh->go, spin_ns, &sh->spun[0]);           // GPU 0, legacy default stream
  k_spin<<<1, 1, 0, user>>>(&sh->go, spin_ns, &sh->spun[1]);  // GPU 0, a user's non-blocking stream
  if (dg != 0) {
    CUDA_OK(cudaSetDevice(dg));
    k_spin<<<1, 1>>>(&sh->go, spin_ns, &sh->spun[2]);  // the target GPU's legacy stream
    CUDA_OK(cudaSetDevice(0));
  } else {
    sh->spun[2] = -1;
  }
  const cudaError_t launch = cudaGetLastError();

  const auto t0 = std::chrono::steady_clock::now();
  std::string err;
  if (launch == cudaSuccess) {
    try {
      err = host_work(sh, src, back, dst, word, res);
    } catch (const std::exception& e) {
      err = std::string("exception: ") + e.what();
    }
  }
  const double host_ms = ms_since(t0);
  int spun[3];
  for (int i = 0; i < 3; ++i) spun[i] = load_acquire<Scope::System>(&sh->spun[i]);
  store_release<Scope::System>(&sh->go, 1);  // release before any CHECK can return
  const cudaError_t sync0 = cudaDeviceSynchronize();
  cudaSetDevice(dg);
  const cudaError_t sync1 = cudaDeviceSynchronize();
  cudaSetDevice(0);
  cudaStreamDestroy(user);

  std::printf("  host work took %.0f ms with the spinners running\n", host_ms);
  CHECK(launch == cudaSuccess && sync0 == cudaSuccess && sync1 == cudaSuccess, "CUDA: %s / %s / %s",
        cudaGetErrorString(launch), cudaGetErrorString(sync0), cudaGetErrorString(sync1));
  CHECK(err.empty(), "host work with kernels spinning: %s", err.c_str());
  for (int i = 0; i < 3; ++i)
    CHECK(spun[i] == -1, "spinner %d %s before the host work ended (%.0f ms): the host waited for it", i,
          spun[i] == 1 ? "gave up" : "ended", host_ms);
  for (int i = 0; i < (dg ? 3 : 2); ++i) CHECK(sh->spun[i] == 0, "spinner %d: %d after release", i, sh->spun[i]);
  for (int k = 0; k < 2; ++k)
    CHECK(sh->kout[k][0] == 0 && sh->kout[k][1] == 0, "posting kernel %d: put %s, get %s", k, sname(sh->kout[k][0]),
          sname(sh->kout[k][1]));
  std::vector<uint8_t> got(ref.size()), got_back(ref.size());
  uint64_t w = 0, old = 0;
  CUDA_OK(cudaMemcpy(got.data(), dst, got.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(got_back.data(), back, got_back.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&w, word, 8, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&old, res, 8, cudaMemcpyDeviceToHost));
  for (void* p : {static_cast<void*>(src), static_cast<void*>(back), static_cast<void*>(dst), static_cast<void*>(word),
                  static_cast<void*>(res)})
    cudaFree(p);
  cudaFreeHost(sh);
  CHECK(got == ref, "remote bytes differ");
  CHECK(got_back == ref, "bytes read back differ");
  CHECK(w == init + 1 && old == init, "fetch_add: word %llu (expected %llu), old %llu (expected %llu)",
        (unsigned long long)w, (unsigned long long)(init + 1), (unsigned long long)old, (unsigned long long)init);
}
