// Bootstrap::from_nccl on a GPU machine: two ranks in forked processes share
// one GPU through NCCL (each sets its own NCCL_HOSTID, so NCCL sees two hosts
// and connects them over its socket transport on loopback), build a
// Bootstrap from the ncclComm_t, then a kinet::Comm (host memory, proxy path
// over tcp) does put + signal both ways, data verified; then a second
// Bootstrap from the same comm on a stream the caller made.
//
// A host program: NCCL and the CUDA runtime are loaded with dlopen (no NCCL
// header or library at build time). Exit 0: passed; 1: failed; 77: skipped
// (no GPU, no NCCL: the reason is printed). Prints one JSON line per rank
// and a summary line.
//   ./build/tests/kinet-gpu-nccl-bootstrap   (KINET_NCCL_LIB=<path> for another NCCL)
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kinet/bootstrap.hpp"
#include "kinet/comm.hpp"

namespace {
using namespace std::chrono_literals;

struct NcclId {
  char internal[128];  // ncclUniqueId
};
struct Nccl {
  int (*getVersion)(int*);
  int (*getUniqueId)(NcclId*);
  int (*commInitRank)(ncclComm**, int, NcclId, int);
  int (*commDestroy)(ncclComm*);
  const char* (*errorString)(int);
};

// Loads NCCL into the global namespace (so from_nccl finds it already loaded);
// empty string on success, else why not.
std::string load_nccl(Nccl& n) {
  const char* env = std::getenv("KINET_NCCL_LIB");
  const char* file = env && *env ? env : "libnccl.so.2";
  void* h = dlopen(file, RTLD_NOW | RTLD_GLOBAL);
  if (!h) return std::string("no NCCL: dlopen(") + file + "): " + dlerror();
  n.getVersion = reinterpret_cast<int (*)(int*)>(dlsym(h, "ncclGetVersion"));
  n.getUniqueId = reinterpret_cast<int (*)(NcclId*)>(dlsym(h, "ncclGetUniqueId"));
  n.commInitRank = reinterpret_cast<int (*)(ncclComm**, int, NcclId, int)>(dlsym(h, "ncclCommInitRank"));
  n.commDestroy = reinterpret_cast<int (*)(ncclComm*)>(dlsym(h, "ncclCommDestroy"));
  n.errorString = reinterpret_cast<const char* (*)(int)>(dlsym(h, "ncclGetErrorString"));
  if (!n.getVersion || !n.getUniqueId || !n.commInitRank || !n.commDestroy || !n.errorString)
    return std::string(file) + " lacks an NCCL symbol";
  return "";
}

// A GPU the CUDA runtime sees (checked in a child: CUDA must not be
// initialised in a process that forks the ranks).
std::string probe_gpu() {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t p = fork();
  if (p == 0) {
    close(fds[0]);
    std::string why;
    void* h = nullptr;
    for (const char* n : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"})
      if ((h = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
    if (!h) {
      why = "no CUDA runtime (libcudart)";
    } else {
      auto count = reinterpret_cast<int (*)(int*)>(dlsym(h, "cudaGetDeviceCount"));
      int n = 0;
      const int rc = count ? count(&n) : -1;
      if (rc != 0 || n < 1) why = "no GPU (cudaGetDeviceCount: error " + std::to_string(rc) + ", " + std::to_string(n) + " GPUs)";
    }
    if (!why.empty() && write(fds[1], why.data(), why.size()) < 0) _exit(2);
    _exit(why.empty() ? 0 : 1);
  }
  close(fds[1]);
  std::string why;
  char buf[512];
  ssize_t k;
  while ((k = read(fds[0], buf, sizeof buf)) > 0) why.append(buf, size_t(k));
  close(fds[0]);
  int st = 0;
  waitpid(p, &st, 0);
  if (!WIFEXITED(st)) return "the GPU probe crashed";
  return WEXITSTATUS(st) == 0 ? "" : why;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) o += ' ';
    else o += c;
  }
  return o + "\"";
}

uint8_t pat(int r, uint64_t i) { return static_cast<uint8_t>((i * 2654435761u >> 11) ^ (r * 37 + 1)); }

// One rank; returns "" or what went wrong. `report` gets rank's Comm report.
std::string rank_main(int r, int id_fd_read, int id_fd_write, std::string* report, double* from_nccl_ms) {
  const std::string host = "kinet-nccl-bootstrap-test-rank" + std::to_string(r);
  setenv("NCCL_HOSTID", host.c_str(), 1);  // two "hosts" on one GPU: NCCL's net transport
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_IB_DISABLE", "1", 0);
  setenv("KINET_SOCKET_IFNAME", "lo", 0);
  Nccl nccl{};
  if (std::string e = load_nccl(nccl); !e.empty()) return e;
  NcclId id{};
  if (r == 0) {
    if (int rc = nccl.getUniqueId(&id)) return std::string("ncclGetUniqueId: ") + nccl.errorString(rc);
    if (write(id_fd_write, &id, sizeof id) != sizeof id) return "handing the NCCL id to rank 1 failed";
  } else {
    size_t got = 0;
    while (got < sizeof id) {
      const ssize_t k = read(id_fd_read, reinterpret_cast<char*>(&id) + got, sizeof id - got);
      if (k <= 0) return "rank 0 ended before handing out the NCCL id";
      got += size_t(k);
    }
  }
  ncclComm* comm = nullptr;
  if (int rc = nccl.commInitRank(&comm, 2, id, r)) return std::string("ncclCommInitRank: ") + nccl.errorString(rc);
  std::string err;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    auto bs = kinet::Bootstrap::from_nccl(comm, nullptr, 30s);
    *from_nccl_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (bs->rank() != r || bs->size() != 2)
      throw std::runtime_error("from_nccl gave rank " + std::to_string(bs->rank()) + "/" + std::to_string(bs->size()));
    {
      kinet::CommConfig cfg;
      cfg.transport = "tcp";
      cfg.path = "proxy";
      cfg.memory = kinet::CommConfig::Memory::Host;  // host threads post (no kernel in this program)
      cfg.timeout = 20s;
      kinet::Comm c(*bs, cfg);
      *report = c.report();
      kinet::CommWindow& w = c.alloc_symmetric(16 << 10);
      auto* mine = static_cast<uint8_t*>(w.local());
      constexpr uint64_t kLen = 4000;
      for (uint64_t i = 0; i < kLen; ++i) mine[i] = pat(r, i);
      const kinet::dev::CommHandle h = c.device_handle();
      using kinet::Status;
      Status s = kinet::dev::barrier(h);
      if (s != Status::Ok) throw std::runtime_error("barrier: " + std::string(kinet::status_string(s)));
      s = kinet::dev::put_signal(h, 1 - r, w.handle(), 8192, w.handle(), 0, kLen, w.handle(), 16376,
                                 kinet::dev::SigOp::Add, 1);
      if (s != Status::Ok) throw std::runtime_error("put_signal: " + std::string(kinet::status_string(s)) + " " + c.device_error());
      s = kinet::dev::wait_signal(h, w.handle(), 16376, kinet::dev::Cmp::Eq, 1, 1 - r);
      if (s != Status::Ok) throw std::runtime_error("wait_signal: " + std::string(kinet::status_string(s)) + " " + c.device_error());
      for (uint64_t i = 0; i < kLen; ++i)
        if (mine[8192 + i] != pat(1 - r, i)) throw std::runtime_error("byte " + std::to_string(i) + " differs");
      c.barrier();
    }
    bs->barrier();
    // Again on a stream of the caller's: a second Bootstrap, checked by an allgather.
    void* rt = nullptr;
    for (const char* n : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"})
      if ((rt = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
    auto create = rt ? reinterpret_cast<int (*)(CUstream_st**, unsigned)>(dlsym(rt, "cudaStreamCreateWithFlags")) : nullptr;
    CUstream_st* stream = nullptr;
    if (!create || create(&stream, 1) != 0) throw std::runtime_error("cudaStreamCreateWithFlags failed");
    auto bs2 = kinet::Bootstrap::from_nccl(comm, stream, 30s);
    const int mine = 1000 + r;
    const auto all = bs2->allgather(&mine, sizeof mine);
    for (int p = 0; p < 2; ++p) {
      int v = 0;
      if (all[p].size() == sizeof v) std::memcpy(&v, all[p].data(), sizeof v);
      if (v != 1000 + p) throw std::runtime_error("second bootstrap: allgather from rank " + std::to_string(p) + " wrong");
    }
    bs2->barrier();
  } catch (const std::exception& e) {
    err = e.what();
  }
  nccl.commDestroy(comm);
  return err;
}
}  // namespace

int main() {
  Nccl probe{};
  if (std::string e = load_nccl(probe); !e.empty()) {
    std::printf("{\"test\":\"nccl_bootstrap\",\"result\":\"skipped\",\"why\":%s}\n", json_str(e).c_str());
    return 77;
  }
  int version = 0;
  probe.getVersion(&version);
  if (std::string e = probe_gpu(); !e.empty()) {
    std::printf("{\"test\":\"nccl_bootstrap\",\"result\":\"skipped\",\"why\":%s}\n", json_str(e).c_str());
    return 77;
  }
  int idp[2];
  if (pipe(idp) != 0) return 1;
  std::vector<pid_t> pids;
  std::vector<int> outs;
  for (int r = 0; r < 2; ++r) {
    int op[2];
    if (pipe(op) != 0) return 1;
    const pid_t p = fork();
    if (p == 0) {
      close(op[0]);
      std::string report;
      double ms = -1;
      std::string err;
      try {
        err = rank_main(r, idp[0], idp[1], &report, &ms);
      } catch (const std::exception& e) {
        err = e.what();
      }
      const std::string line = "{\"rank\":" + std::to_string(r) + ",\"ok\":" + (err.empty() ? "true" : "false") +
                               ",\"from_nccl_ms\":" + std::to_string(ms) + ",\"error\":" + json_str(err) +
                               ",\"comm_report\":" + json_str(report) + "}\n";
      if (write(op[1], line.data(), line.size()) < 0) _exit(2);
      _exit(err.empty() ? 0 : 1);
    }
    close(op[1]);
    pids.push_back(p);
    outs.push_back(op[0]);
  }
  close(idp[0]);
  close(idp[1]);
  bool ok = true;
  const auto deadline = std::chrono::steady_clock::now() + 180s;
  for (int r = 0; r < 2; ++r) {
    int st = 0;
    bool killed = false;
    while (waitpid(pids[r], &st, WNOHANG) != pids[r]) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &st, 0);
        killed = true;
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    std::string out;
    char buf[4096];
    ssize_t k;
    while ((k = read(outs[r], buf, sizeof buf)) > 0) out.append(buf, size_t(k));
    close(outs[r]);
    const bool passed = !killed && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    ok &= passed;
    if (!out.empty()) std::fputs(out.c_str(), stdout);
    else std::printf("{\"rank\":%d,\"ok\":false,\"error\":%s}\n", r,
                     json_str(killed ? "killed after 180 s" : "ended without a report (status " + std::to_string(st) + ")").c_str());
  }
  std::printf("{\"test\":\"nccl_bootstrap\",\"nccl_version\":%d,\"result\":\"%s\"}\n", version, ok ? "passed" : "FAILED");
  return ok ? 0 : 1;
}
