// Read this first: kinet's communicator in one page. Four processes ("ranks")
// sum their vectors with a ring all-reduce written with the device API
// (kinet/device/comm.cuh): put_signal to the right neighbour, wait_signal
// for the left one. The same calls run in a CUDA kernel; here, on a machine
// without a GPU, the host thread of each rank plays the kernel and every peer
// is served by the proxy path.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "kinet/comm.hpp"

using namespace kinet;
constexpr int kRanks = 4;
constexpr uint64_t kCount = 1024;  // uint64 values per rank, a multiple of kRanks

// Window layout: data[kCount] | incoming[kCount] | two signal words.
constexpr uint64_t kData = 0, kIn = kCount * 8, kSigRs = 2 * kCount * 8, kSigAg = kSigRs + 8, kBytes = kSigAg + 8;

// The "kernel": reduce-scatter, then all-gather, chunk by chunk around the ring.
Status ring_allreduce(const dev::CommHandle& c, const dev::WindowHandle& w) {
  const int n = c.size, right = (c.rank + 1) % n;
  const uint64_t chunk = kCount / n, cb = chunk * 8;
  auto at = [&](uint64_t off) { return reinterpret_cast<uint64_t*>(w.local + off); };
  auto mod = [n](int i) { return uint64_t((i % n + n) % n); };
  for (int s = 0; s < n - 1; ++s) {  // reduce-scatter: after it, chunk rank+1 is complete here
    const uint64_t out = mod(c.rank - s), in = mod(c.rank - s - 1);
    Status st = dev::put_signal(c, right, w, kIn + out * cb, w, kData + out * cb, cb, w, kSigRs, dev::SigOp::Add, 1);
    if (st != Status::Ok) return st;
    if ((st = dev::wait_signal(c, w, kSigRs, dev::Cmp::Ge, s + 1, mod(c.rank - 1))) != Status::Ok) return st;
    for (uint64_t i = 0; i < chunk; ++i) at(kData + in * cb)[i] += at(kIn + in * cb)[i];
  }
  // Every rank's sends have been read before complete chunks overwrite data.
  if (Status st = dev::barrier(c); st != Status::Ok) return st;
  for (int s = 0; s < n - 1; ++s) {  // all-gather: pass the complete chunks on
    const uint64_t out = mod(c.rank + 1 - s);
    Status st = dev::put_signal(c, right, w, kData + out * cb, w, kData + out * cb, cb, w, kSigAg, dev::SigOp::Add, 1);
    if (st != Status::Ok) return st;
    if ((st = dev::wait_signal(c, w, kSigAg, dev::Cmp::Ge, s + 1, mod(c.rank - 1))) != Status::Ok) return st;
  }
  return dev::barrier(c);  // nobody still writes into anyone's window
}

int run_rank(const std::string& id, int rank) {
  auto bs = Bootstrap::init(UniqueId::from_string(id), rank, kRanks);
  CommConfig cfg;
  cfg.memory = CommConfig::Memory::Host;  // host threads play the kernel (a GPU build: Gpu, and a kernel)
  Comm comm(*bs, cfg);                    // collective: transport, proxy, a path per peer
  if (rank == 0) std::fputs(comm.report().c_str(), stdout);
  CommWindow& win = comm.alloc_symmetric(kBytes);  // collective, zeroed
  uint64_t* data = static_cast<uint64_t*>(win.local());
  for (uint64_t i = 0; i < kCount; ++i) data[i] = rank * 1000 + i;
  comm.barrier();  // every rank's data is in place before anyone sends
  const Status st = ring_allreduce(comm.device_handle(), win.handle());
  if (st != Status::Ok) return std::fprintf(stderr, "rank %d: %s\n", rank, comm.device_error().c_str()), 1;
  for (uint64_t i = 0; i < kCount; ++i)
    if (data[i] != 1000 * kRanks * (kRanks - 1) / 2 + kRanks * i)
      return std::fprintf(stderr, "rank %d: element %lu is %lu\n", rank, i, data[i]), 1;
  std::printf("rank %d: all-reduce of %lu values correct\n", rank, kCount);
  std::fflush(stdout);  // children leave through _exit
  comm.barrier();
  return 0;
}

int main() {
  int fds[2];
  if (pipe(fds) != 0) return 1;
  for (int r = 1; r < kRanks; ++r) {  // ranks 1..3: child processes, started before any thread exists
    if (fork() == 0) {
      char id[256];
      size_t got = 0;
      for (ssize_t k; got < sizeof id && (k = read(fds[0], id + got, sizeof id - got)) > 0;) got += size_t(k);
      try {
        _exit(got == sizeof id ? run_rank(std::string(id, sizeof id), r) : 2);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        _exit(3);
      }
    }
  }
  const std::string id = UniqueId::create().to_string();  // rank 0 hosts the rendezvous
  for (int r = 1; r < kRanks; ++r)
    if (write(fds[1], id.data(), id.size()) != ssize_t(id.size())) return 1;
  int rc = 0;
  try {
    rc = run_rank(id, 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank 0: %s\n", e.what());
    rc = 3;
  }
  for (int r = 1, st = 0; r < kRanks; ++r) rc |= wait(&st) > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  return rc;
}
