// Device verbs in kernels against a fake NIC in pinned host memory (the host
// writes the CQEs): the parts of the verbs that only exist in device builds
// or behave differently there. SqState::local_error written with 8-bit
// atomics at each scope, saturated deadlines, the status of a split transfer
// whose 2nd chunk faults, warp tickets, max_msg checks of the warp helpers,
// and (debug builds: compiled without NDEBUG) the trap when several lanes use
// one Exclusive QP. Self-checking program; exit 0 = pass, 77 = no GPU (skip).
//   nvcc -std=c++20 --expt-relaxed-constexpr -arch=sm_90 -Iinclude \
//        tests/gpu/verbs_device_contract.cu -o verbs_device_contract
#include <cuda_runtime.h>
#include <endian.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "kinet/device/coop.cuh"

using namespace kinet;
using namespace kinet::dev;

namespace {

int g_failures = 0;
#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      std::printf("FAIL %s:%d: ", __FILE__, __LINE__);     \
      std::printf(__VA_ARGS__);                            \
      std::printf("\n");                                   \
      ++g_failures;                                        \
    }                                                      \
  } while (0)
#define CUDA_OK(x)                                                                    \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

// Ring, CQ, records and SqState in one pinned, mapped host allocation.
struct Ring {
  alignas(64) uint8_t sq[16 * 64];
  alignas(64) mlx5::Cqe64 cqes[16];
  alignas(8) uint32_t dbrec[2];
  alignas(8) uint32_t cq_dbrec[2];
  alignas(8) uint64_t db;
  SqState state;
  uint32_t nic_ci;
  QpHandle h;
  int out[64];
  Ticket tickets[64];
  alignas(64) uint64_t bf[8];  // BlueFlame window (db_mode BlueFlame)
};

Ring* make_ring(uint64_t timeout_ns, uint32_t max_msg = 1u << 30) {
  Ring* r = nullptr;
  CUDA_OK(cudaMallocHost(&r, sizeof(Ring)));
  std::memset(static_cast<void*>(r), 0, sizeof(Ring));
  r->h.abi = kQpHandleAbi;  // zeroed memory holds no valid handle
  for (auto& c : r->cqes) c.op_own = mlx5::kCqeInitOpOwn;
  r->h.sq = r->sq;
  r->h.dbrec = r->dbrec;
  r->h.db = &r->db;
  r->h.state = &r->state;
  r->h.cq = CqHandle{r->cqes, r->cq_dbrec, 4, 3};
  r->h.timeout_ns = timeout_ns;
  r->h.log_n = 4;
  r->h.qpn = 0x1234;
  r->h.qpn_be8 = htobe32(0x1234u << 8);
  r->h.max_msg = max_msg;
  r->h.signal_period = 8;
  return r;
}

// The host plays the NIC: the next CQE, for WQE wqe_idx, success or error.
void complete(Ring* r, uint64_t wqe_idx, uint8_t syndrome = 0) {
  mlx5::Cqe64& c = r->cqes[r->nic_ci & 15];
  uint8_t b[64] = {};
  auto* e = reinterpret_cast<mlx5::ErrCqe*>(b);
  e->syndrome = syndrome;
  e->wqe_counter = htobe16(static_cast<uint16_t>(wqe_idx));
  const uint8_t op = syndrome ? mlx5::kCqeReqErr : mlx5::kCqeReq;
  e->op_own = static_cast<uint8_t>((op << 4) | mlx5::cqe_sw_owner(r->nic_ci, 4));
  std::memcpy(&c, b, 60);
  uint32_t tail;
  std::memcpy(&tail, b + 60, 4);
  std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(&c) + 60))
      .store(tail, std::memory_order_release);
  ++r->nic_ci;
}

__global__ void k_post_nop(Ring* r) { r->out[0] = static_cast<int>(nop<Sharing::Exclusive>(r->h, kSignal)); }

template <Sharing S> __global__ void k_wait_nothing(Ring* r) {
  Ticket t;
  Status s = nop<S>(r->h, kSignal, &t);
  if (s == Status::Ok) s = wait<S>(r->h, t);
  r->out[0] = static_cast<int>(s);
}

template <Sharing S> void local_error_at_scope(const char* name) {
  Ring* r = make_ring(2'000'000);  // 2 ms, nothing completes
  k_wait_nothing<S><<<1, 1>>>(r);
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(r->out[0] == int(Status::TimeoutCompletion), "%s: wait gave %d", name, r->out[0]);
  CHECK(r->state.local_error == uint8_t(Status::TimeoutCompletion), "%s: local_error %d", name,
        r->state.local_error);
  cudaFreeHost(r);
}

// Many threads of a grid time out on a full ring: one reason is kept.
__global__ void k_fill_and_timeout(Ring* r) {
  Status s = nop<Sharing::Gpu>(r->h, 0, nullptr);
  if (threadIdx.x + blockIdx.x == 0) r->out[0] = static_cast<int>(s);
}

// UINT64_MAX timeout: the wait lasts until the host's CQE comes.
__global__ void k_wait_forever(Ring* r, volatile int* started) {
  Ticket t;
  Status s = nop<Sharing::Exclusive>(r->h, kSignal, &t);
  *started = 1;
  __threadfence_system();
  if (s == Status::Ok) s = wait<Sharing::Exclusive>(r->h, t);
  r->out[0] = static_cast<int>(s);
}

// A split transfer (max_msg 100, 250 bytes: 3 WQEs) and a NOP after it.
__global__ void k_post_split(Ring* r) {
  Status s = nop<Sharing::Exclusive>(r->h, kSignal, &r->tickets[0]);
  if (s == Status::Ok)
    s = put<Sharing::Exclusive>(r->h, reinterpret_cast<const void*>(0x1000), Lkey{1}, 0x2000, Rkey{2}, 250, kSignal,
                                &r->tickets[1]);
  if (s == Status::Ok) s = nop<Sharing::Exclusive>(r->h, kSignal, &r->tickets[2]);
  r->out[0] = static_cast<int>(s);
}
__global__ void k_wait_tickets(Ring* r) {
  for (int i = 0; i < 3; ++i) r->out[i] = static_cast<int>(wait<Sharing::Exclusive>(r->h, r->tickets[i]));
}

// One warp_put per lane; the leader alone tests the ticket.
__global__ void k_warp_put(Ring* r, uint32_t bytes) {
  Ticket t;
  const Status s = warp_put<Sharing::Exclusive>(r->h, reinterpret_cast<const void*>(0x1000), Lkey{1}, 0x2000, Rkey{2},
                                                bytes, kSignal, &t);
  r->out[threadIdx.x] = static_cast<int>(s);
  r->tickets[threadIdx.x] = t;
  if (threadIdx.x == 0 && s == Status::Ok) r->out[32] = static_cast<int>(test<Sharing::Exclusive>(r->h, t));
}

// The misuse the leader rule forbids: every lane waits on the Exclusive QP.
__global__ void k_every_lane_waits(Ring* r) {
  Ticket t;
  const Status s = warp_put<Sharing::Exclusive>(r->h, reinterpret_cast<const void*>(0x1000), Lkey{1}, 0x2000,
                                                Rkey{2}, 8, kSignal, &t);
  if (s == Status::Ok) r->out[threadIdx.x] = static_cast<int>(test<Sharing::Exclusive>(r->h, t));
}

}  // namespace

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIP: no GPU\n");
    return 77;
  }
  local_error_at_scope<Sharing::Exclusive>("Exclusive");
  local_error_at_scope<Sharing::Cta>("Cta");
  local_error_at_scope<Sharing::Gpu>("Gpu");

  {  // 4 CTAs x 32 threads on a 16-slot ring nobody completes
    Ring* r = make_ring(5'000'000);
    k_fill_and_timeout<<<4, 32>>>(r);
    CUDA_OK(cudaDeviceSynchronize());
    const uint8_t le = r->state.local_error;
    CHECK(le == uint8_t(Status::TimeoutSqSpace), "grid timeout: local_error %d", le);
    CHECK(r->state.broken == 1, "grid timeout: QP not broken");
    cudaFreeHost(r);
  }
  {
    Ring* r = make_ring(~uint64_t{0});
    int* started = nullptr;
    CUDA_OK(cudaMallocHost(&started, sizeof(int)));
    *started = 0;
    k_wait_forever<<<1, 1>>>(r, started);
    const auto t0 = std::chrono::steady_clock::now();
    while (!std::atomic_ref<int>(*started).load() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
      std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    complete(r, 0);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(r->out[0] == int(Status::Ok), "UINT64_MAX timeout: wait gave %d", r->out[0]);
    CHECK(r->state.local_error == 0, "UINT64_MAX timeout: local_error %d", r->state.local_error);
    cudaFreeHost(started);
    cudaFreeHost(r);
  }
  {
    Ring* r = make_ring(1'000'000'000, /*max_msg=*/100);
    k_post_split<<<1, 1>>>(r);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(r->out[0] == int(Status::Ok), "split post gave %d", r->out[0]);
    CHECK(r->tickets[1].first == 1 && r->tickets[1].idx == 4, "split ticket [%llu, %llu)",
          (unsigned long long)r->tickets[1].first, (unsigned long long)r->tickets[1].idx);
    complete(r, 0);
    complete(r, 2, mlx5::kSynLocalProt);
    complete(r, 3, mlx5::kSynWrFlush);
    complete(r, 4, mlx5::kSynWrFlush);
    k_wait_tickets<<<1, 1>>>(r);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(r->out[0] == int(Status::Ok), "before: %d", r->out[0]);
    CHECK(r->out[1] == int(Status::LocalProtection), "split with faulting 2nd chunk: %d", r->out[1]);
    CHECK(r->out[2] == int(Status::WrFlushed), "after: %d", r->out[2]);
    cudaFreeHost(r);
  }
  {
    Ring* r = make_ring(1'000'000'000);
    k_warp_put<<<1, 8>>>(r, 8);
    CUDA_OK(cudaDeviceSynchronize());
    for (int i = 0; i < 8; ++i)
      CHECK(r->tickets[i].first == 0 && r->tickets[i].idx == 8, "8 lanes: lane %d ticket [%llu, %llu)", i,
            (unsigned long long)r->tickets[i].first, (unsigned long long)r->tickets[i].idx);
    CHECK(r->out[32] == int(Status::Pending), "leader test: %d", r->out[32]);
    CHECK(r->state.reserved == 8, "reserved %llu", (unsigned long long)r->state.reserved);
    cudaFreeHost(r);
  }
  for (uint32_t bad_max : {0u, (1u << 30) + 1}) {  // a handle with an impossible max_msg
    Ring* r = make_ring(1'000'000'000, bad_max);
    k_warp_put<<<1, 8>>>(r, 8);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(r->out[0] == int(Status::InvalidArgument), "max_msg %u: %d", bad_max, r->out[0]);
    CHECK(r->state.reserved == 0, "max_msg %u: reserved %llu", bad_max, (unsigned long long)r->state.reserved);
    cudaFreeHost(r);
  }
  {  // warp_put with bytes = max_msg + 1 on one lane: nothing posted
    Ring* r = make_ring(1'000'000'000, 100);
    k_warp_put<<<1, 8>>>(r, 101);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(r->out[0] == int(Status::InvalidArgument), "bytes 101 > max_msg 100: %d", r->out[0]);
    CHECK(r->state.reserved == 0, "reserved %llu", (unsigned long long)r->state.reserved);
    cudaFreeHost(r);
  }
  {  // the ABI guard (debug builds): a handle with another abi word is refused and recorded
    Ring* r = make_ring(1'000'000'000);
    r->h.abi = kQpHandleAbi + (1u << 16);
    k_wait_nothing<Sharing::Gpu><<<1, 1>>>(r);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(r->out[0] == int(Status::InvalidArgument), "bad abi: %d", r->out[0]);
    CHECK(r->state.local_error == uint8_t(Status::InvalidArgument), "bad abi: local_error %d", r->state.local_error);
    CHECK(r->state.bad_abi == kQpHandleAbi + (1u << 16), "bad abi recorded as %#x", r->state.bad_abi);
    CHECK(r->state.reserved == 0 && r->dbrec[1] == 0, "bad abi: something was posted");
    cudaFreeHost(r);
  }
  {  // BlueFlame: the doorbell is the last WQE copied into the window
    Ring* r = make_ring(1'000'000'000);
    r->h.db_mode = DoorbellMode::BlueFlame;
    r->h.db = r->bf;
    k_post_nop<<<1, 1>>>(r);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(r->out[0] == int(Status::Ok), "bf nop: %d", r->out[0]);
    CHECK(std::memcmp(r->bf, r->sq, 64) == 0, "BlueFlame window differs from WQE 0");
    CHECK(r->db == 0, "BlueFlame mode stored the 8-byte doorbell");
    CHECK(r->dbrec[1] == htobe32(1), "bf: record %#x", r->dbrec[1]);
    cudaFreeHost(r);
  }
  {  // CpuAssisted: the record only; no doorbell register at all
    Ring* r = make_ring(1'000'000'000);
    r->h.db_mode = DoorbellMode::CpuAssisted;
    r->h.db = nullptr;
    k_post_nop<<<1, 1>>>(r);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(r->out[0] == int(Status::Ok), "cpu nop: %d", r->out[0]);
    CHECK(r->dbrec[1] == htobe32(1), "cpu: record %#x", r->dbrec[1]);
    cudaFreeHost(r);
  }
#ifndef NDEBUG
  {  // last: a device assert ends the context
    Ring* r = make_ring(1'000'000'000);
    k_every_lane_waits<<<1, 8>>>(r);
    const cudaError_t e = cudaDeviceSynchronize();
    CHECK(e == cudaErrorAssert, "several lanes on one Exclusive QP: expected a device assert, got %s",
          cudaGetErrorString(e));
  }
#else
  std::printf("NOTE: NDEBUG build: the Exclusive owner trap is not checked\n");
#endif
  std::printf("%s (%d failures)\n", g_failures ? "FAILED" : "PASSED", g_failures);
  return g_failures ? 1 : 0;
}
