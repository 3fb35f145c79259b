// kinet-comm-perf: the communicator's device API between two processes,
// each beside its baseline in the same run:
//   put bandwidth (quiet at the end of each window)  vs  memcpy of the same bytes
//   put_signal ping-pong latency (half a round trip)  vs  a bare shared-memory flag ping-pong
//   barrier latency
// Host threads post (the CPU-only configuration). GPU kernel figures (put
// bandwidth vs cudaMemcpy device-to-device) come from the GPU version later.
//   kinet-comm-perf [--transport tcp|shm] [--path auto|proxy] [--iters N] [--max-bytes B] [--json FILE]
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kinet/comm.hpp"

using namespace kinet;
using Clock = std::chrono::steady_clock;

namespace {
struct Opts {
  std::string transport = "tcp", path = "auto", json;
  int iters = 200;
  uint64_t max_bytes = 1 << 20;
};

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

void must(Status s, const Comm& c, const char* what) {
  if (s != Status::Ok) throw Error(ErrorCode::System, std::string(what) + ": " + status_string(s) + " " + c.device_error());
}

// Rank 0 measures; rank 1 answers ping-pongs and joins barriers.
nlohmann::json run(int rank, const std::string& id, const Opts& o, std::atomic<uint64_t>* flags) {
  auto bs = Bootstrap::init(UniqueId::from_string(id), rank, 2);
  CommConfig cfg;
  cfg.transport = o.transport;
  cfg.path = o.path;
  cfg.memory = CommConfig::Memory::Host;  // host threads post
  Comm comm(*bs, cfg);
  const uint64_t sig = 2 * o.max_bytes, pong = sig + 8;
  CommWindow& w = comm.alloc_symmetric(2 * o.max_bytes + 64);
  const dev::CommHandle c = comm.device_handle();
  const dev::WindowHandle h = w.handle();
  const int peer = 1 - rank;
  nlohmann::json out = {{"transport", o.transport}, {"report", comm.report()}, {"put_bw", nlohmann::json::array()},
                        {"pingpong", nlohmann::json::array()}};
  std::vector<uint8_t> a(o.max_bytes), b(o.max_bytes, 1);
  uint64_t round = 0;
  for (uint64_t n = 8; n <= o.max_bytes; n *= 4) {
    comm.barrier();
    if (rank == 0) {  // bandwidth: iters puts, one quiet
      auto t0 = Clock::now();
      for (int i = 0; i < o.iters; ++i) must(dev::put(c, peer, h, o.max_bytes, h, 0, n), comm, "put");
      must(dev::quiet(c), comm, "quiet");
      const double t = us_since(t0);
      t0 = Clock::now();
      for (int i = 0; i < o.iters; ++i) std::memcpy(a.data(), b.data() + (i & 1), n - (i & 1));
      const double tb = us_since(t0);
      out["put_bw"].push_back({{"bytes", n}, {"MBps", n * o.iters / t}, {"memcpy_MBps", n * o.iters / tb}});
    }
    // Ping-pong: put_signal there, wait for the answer.
    comm.barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < o.iters; ++i) {
      ++round;
      if (rank == 0) {
        must(dev::put_signal(c, peer, h, o.max_bytes, h, 0, n, h, sig, dev::SigOp::Set, round), comm, "ping");
        must(dev::wait_signal(c, h, pong, dev::Cmp::Ge, round, peer), comm, "wait pong");
      } else {
        must(dev::wait_signal(c, h, sig, dev::Cmp::Ge, round, peer), comm, "wait ping");
        must(dev::put_signal(c, peer, h, o.max_bytes, h, 0, n, h, pong, dev::SigOp::Set, round), comm, "pong");
      }
    }
    if (rank == 0) out["pingpong"].push_back({{"bytes", n}, {"half_rtt_us", us_since(t0) / o.iters / 2}});
  }
  comm.barrier();
  auto t0 = Clock::now();
  for (int i = 0; i < o.iters; ++i) must(dev::barrier(c), comm, "barrier");
  out["barrier_us"] = us_since(t0) / o.iters;
  // Baseline for the ping-pong: two processes bouncing a flag in shared memory.
  comm.barrier();
  t0 = Clock::now();
  for (uint64_t i = 1; i <= uint64_t(o.iters); ++i) {
    if (rank == 0) {
      flags[0].store(i, std::memory_order_release);
      while (flags[1].load(std::memory_order_acquire) < i) {}
    } else {
      while (flags[0].load(std::memory_order_acquire) < i) {}
      flags[1].store(i, std::memory_order_release);
    }
  }
  out["shm_flag_half_rtt_us"] = us_since(t0) / o.iters / 2;
  comm.barrier();
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  Opts o;
  CLI::App app{"kinet-comm-perf: communicator put bandwidth, put_signal ping-pong, barrier latency (2 processes)"};
  app.add_option("--transport", o.transport, "tcp, shm, ucx, ofi");
  app.add_option("--path", o.path, "auto or proxy");
  app.add_option("--iters", o.iters, "iterations per point")->check(CLI::Range(1, 1000000));
  app.add_option("--max-bytes", o.max_bytes, "largest message")->check(CLI::Range(8, 1 << 28));
  app.add_option("--json", o.json, "write the results here (default: stdout)");
  CLI11_PARSE(app, argc, argv);
  auto* flags = static_cast<std::atomic<uint64_t>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  int fds[2];
  if (flags == MAP_FAILED || pipe(fds) != 0) return 1;
  if (fork() == 0) {  // rank 1, before any thread exists
    char id[256];
    size_t got = 0;
    for (ssize_t k; got < sizeof id && (k = read(fds[0], id + got, sizeof id - got)) > 0;) got += size_t(k);
    try {
      run(1, std::string(id, sizeof id), o, flags);
      _exit(0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank 1: %s\n", e.what());
      _exit(1);
    }
  }
  const std::string id = UniqueId::create().to_string();
  if (write(fds[1], id.data(), id.size()) != ssize_t(id.size())) return 1;
  int rc = 0;
  try {
    const auto j = run(0, id, o, flags);
    if (o.json.empty()) std::printf("%s\n", j.dump(2).c_str());
    else std::ofstream(o.json) << j.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank 0: %s\n", e.what());
    rc = 1;
  }
  int st = 0;
  wait(&st);
  return rc | (WIFEXITED(st) ? WEXITSTATUS(st) : 1);
}
