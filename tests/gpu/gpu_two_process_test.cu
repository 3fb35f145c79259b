// kinet GPU test: two processes on one GPU drive the cross-process software
// NIC (DeviceOptions::Fabric Tcp, then Shm). The parent (no arguments) checks
// for a GPU (none: exit 77), creates a bootstrap UniqueId and spawns this
// binary twice with a role:
//   --role requester|responder --fabric tcp|shm --id <hex>
// Both open an emu device on that fabric, register GPU memory, exchange QP
// info and RemoteKey blobs through kinet::Bootstrap (loopback), and connect.
// A kernel of the requester posts WRITEs (more than the ring's slots), a
// READ and atomics into the responder's GPU memory; the requester checks what
// it read and the atomics' old values, the responder checks its memory byte
// for byte. Every wait is bounded: device verbs by QpConfig::timeout_ms, the
// bootstrap by its timeout, the children by the parent's deadline.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <kinet/bootstrap.hpp>
#include <kinet/kinet.hpp>

#include <cuda_runtime.h>

#include "spawn_pair.hpp"

extern char** environ;

namespace {
using namespace kinet;
using namespace kinet::dev;
constexpr auto X = Sharing::Exclusive;
constexpr uint64_t kTimeoutMs = 20000;
constexpr uint32_t kDepth = 16;          // ring slots; kPuts is more
constexpr int kPuts = 64;
constexpr size_t kChunk = 4096;
constexpr size_t kWritten = kPuts * kChunk;         // [0, kWritten): WRITEs
constexpr size_t kReadOff = kWritten, kReadLen = 100000 + 3;  // READ of the responder's own bytes
constexpr size_t kBuf = 1 << 20;
constexpr size_t kAtomicOff = kBuf - 8;
constexpr uint64_t kAtomicInit = 1000;

uint8_t pat(int who, size_t i) { return static_cast<uint8_t>((i * 131 + (i >> 9) * 7 + who * 59 + 1) & 0xff); }
int fail(const char* role, const std::string& what) {
  std::printf("%s: FAIL %s\n", role, what.c_str());
  std::fflush(stdout);
  return 1;
}

// statuses: [0] the WRITEs, [1] the READ, [2] fetch_add, [3] compare_swap (hit), [4] compare_swap (miss)
__global__ void k_ops(QpHandle q, const uint8_t* src, uint8_t* rd, uint64_t* res, Lkey lk, uint64_t raddr, Rkey rk,
                      int* st) {
  Status s = Status::Ok;
  for (int i = 0; i < kPuts && s == Status::Ok; ++i)
    s = put<X>(q, src + i * kChunk, lk, raddr + i * kChunk, rk, kChunk, 0);
  if (s == Status::Ok) s = quiet<X>(q);
  st[0] = static_cast<int>(s);
  Ticket t;
  s = get<X>(q, rd, lk, raddr + kReadOff, rk, kReadLen, kSignal, &t);
  if (s == Status::Ok) s = wait<X>(q, t);
  st[1] = static_cast<int>(s);
  s = fetch_add<X>(q, &res[0], lk, raddr + kAtomicOff, rk, 5, kSignal, &t);
  if (s == Status::Ok) s = wait<X>(q, t);
  st[2] = static_cast<int>(s);
  s = compare_swap<X>(q, &res[1], lk, raddr + kAtomicOff, rk, kAtomicInit + 5, 77, kSignal, &t);
  if (s == Status::Ok) s = wait<X>(q, t);
  st[3] = static_cast<int>(s);
  s = compare_swap<X>(q, &res[2], lk, raddr + kAtomicOff, rk, 1, 99, kSignal, &t);
  if (s == Status::Ok) s = wait<X>(q, t);
  st[4] = static_cast<int>(s);
}

std::vector<uint8_t> blob_pair(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  std::vector<uint8_t> out(4);
  const uint32_t n = static_cast<uint32_t>(a.size());
  std::memcpy(out.data(), &n, 4);
  out.insert(out.end(), a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

int child(const std::string& role, const std::string& fabric, const std::string& id_hex) {
  const bool req = role == "requester";
  const char* who = role.c_str();
  if (!req && role != "responder") return fail(who, "unknown role");
  try {
    if (cudaSetDevice(0) != cudaSuccess) return fail(who, "cudaSetDevice(0)");
    auto bs = Bootstrap::init(UniqueId::from_string(id_hex), req ? 0 : 1, 2, std::chrono::seconds(30));
    DeviceOptions opt;
    opt.emu_fabric = fabric == "shm" ? DeviceOptions::Fabric::Shm : DeviceOptions::Fabric::Tcp;
    auto dev = Device::open("emu", opt);
    auto pd = dev->alloc_pd();
    uint8_t* buf = nullptr;
    if (cudaMalloc(&buf, kBuf) != cudaSuccess) return fail(who, "cudaMalloc");
    std::vector<uint8_t> h(kBuf);
    for (size_t i = 0; i < kBuf; ++i) h[i] = pat(req ? 0 : 1, i);
    if (!req) std::memcpy(h.data() + kAtomicOff, &kAtomicInit, 8);
    cudaMemcpy(buf, h.data(), kBuf, cudaMemcpyHostToDevice);
    auto mr = pd->reg_mr(buf, kBuf, kAccessAll);
    QpConfig cfg;
    cfg.sq_depth = kDepth;
    cfg.timeout_ms = kTimeoutMs;
    cfg.posters = Posters::Gpu;
    auto qp = pd->create_qp(cfg);
    const auto mine = blob_pair(mr->remote_key().serialize(), qp->info().serialize());
    const auto all = bs->allgather(mine.data(), mine.size());
    const auto& peer = all[req ? 1 : 0];
    uint32_t n = 0;
    if (peer.size() < 4) return fail(who, "short blob from the peer");
    std::memcpy(&n, peer.data(), 4);
    if (n > peer.size() - 4) return fail(who, "bad blob from the peer");
    const RemoteKey rkey = RemoteKey::deserialize(peer.data() + 4, n);
    const QpInfo info = QpInfo::deserialize(peer.data() + 4 + n, peer.size() - 4 - n);
    if (info.endpoint.rfind(fabric + " ", 0) != 0) return fail(who, "peer endpoint \"" + info.endpoint + "\"");
    qp->connect(info);
    bs->barrier();  // both connected
    int rc = 0;
    if (req) {
      int* st = nullptr;
      if (cudaMalloc(&st, 5 * sizeof(int)) != cudaSuccess) return fail(who, "cudaMalloc");
      cudaMemset(st, 0xff, 5 * sizeof(int));  // -1: never written
      // READ data and atomic results land in the registered buffer, away from the WRITEs' source.
      uint8_t* rd = buf + kBuf / 2;
      uint64_t* rs = reinterpret_cast<uint64_t*>(buf + kBuf - 64);
      k_ops<<<1, 1>>>(qp->handle(), buf, rd, rs, mr->lkey(), rkey.addr, rkey.key(), st);
      const cudaError_t e = cudaDeviceSynchronize();
      if (e != cudaSuccess) return fail(who, std::string("kernel: ") + cudaGetErrorString(e));
      int s[5];
      cudaMemcpy(s, st, sizeof s, cudaMemcpyDeviceToHost);
      static const char* what[5] = {"WRITEs", "READ", "fetch_add", "compare_swap hit", "compare_swap miss"};
      for (int i = 0; i < 5; ++i)
        if (s[i] != 0)
          rc = fail(who, std::string(what[i]) + ": status " + std::to_string(s[i]) + " | " + qp->last_error());
      std::vector<uint8_t> got(kReadLen);
      uint64_t old[3];
      cudaMemcpy(got.data(), rd, kReadLen, cudaMemcpyDeviceToHost);
      cudaMemcpy(old, rs, sizeof old, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < kReadLen && rc == 0; ++i)
        if (got[i] != pat(1, kReadOff + i)) rc = fail(who, "READ byte " + std::to_string(i) + " differs");
      if (old[0] != kAtomicInit) rc = fail(who, "fetch_add old value " + std::to_string(old[0]));
      if (old[1] != kAtomicInit + 5) rc = fail(who, "compare_swap (hit) old value " + std::to_string(old[1]));
      if (old[2] != 77) rc = fail(who, "compare_swap (miss) old value " + std::to_string(old[2]));
      cudaFree(st);
    }
    bs->barrier();  // the requester is done
    if (!req) {
      mr.reset();  // deregistering waits out the fabric's accesses to the region
      cudaMemcpy(h.data(), buf, kBuf, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < kBuf && rc == 0; ++i) {
        const uint8_t want = i < kWritten ? pat(0, i) : pat(1, i);
        if (i >= kAtomicOff) break;
        if (h[i] != want) rc = fail(who, "byte " + std::to_string(i) + " is " + std::to_string(h[i]) + ", expected " +
                                             std::to_string(want));
      }
      uint64_t v;
      std::memcpy(&v, h.data() + kAtomicOff, 8);
      if (v != 77) rc = fail(who, "atomic word is " + std::to_string(v) + ", expected 77");
    }
    bs->barrier();  // both verified: tear down together
    qp.reset();
    mr.reset();
    cudaFree(buf);
    if (rc == 0) std::printf("%s over %s: OK\n", who, fabric.c_str());
    return rc;
  } catch (const std::exception& e) {
    return fail(who, e.what());
  }
}

// Spawns both roles over `fabric` and waits for them (at most 120 s).
bool run_pair(const std::string& self, const std::string& fabric) {
  const char* roles[2] = {"requester", "responder"};
  const std::array<int, 2> codes = kgt::spawn_pair(self, roles, "--fabric", fabric);
  const bool ok = codes[0] == 0 && codes[1] == 0;
  std::printf("[ %s ] two processes, one GPU, over %s\n", ok ? "      OK" : "  FAILED", fabric.c_str());
  std::fflush(stdout);
  return ok;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "--role" && std::string(argv[3]) == "--fabric" &&
      std::string(argv[5]) == "--id")
    return child(argv[2], argv[4], argv[6]);
  if (argc != 1) {
    std::printf("usage: %s   (spawns itself with --role ROLE --fabric tcp|shm --id HEX)\n", argv[0]);
    return 2;
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIPPED: no CUDA GPU on this machine\n");
    return 77;
  }
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return fail("parent", "readlink /proc/self/exe");
  self[len] = 0;
  setenv("KINET_SOCKET_IFNAME", "=lo", 1);  // both processes meet on loopback
  bool ok = true;
  for (const char* f : {"tcp", "shm"}) ok = run_pair(self, f) && ok;
  return ok ? 0 : 1;
}
