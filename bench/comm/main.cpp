// kinet-comm-perf: the communicator's device API between two processes,
// each beside its baseline in the same run. Two modes:
//
// gpu (built with CUDA; the default where CUDA sees a GPU): two processes on
// ONE GPU, kernels post, windows in GPU memory (gpu_bench.hpp):
//   put bandwidth, cta_put from a full GPU of CTAs  vs  cudaMemcpyAsync D2D
//   put_signal ping-pong latency, one thread / warp / CTA
//   dev::barrier latency
//   kinet-comm-perf [--mode gpu] [--path p2p|proxy] [--json FILE] [--quick]
//
// cpu: host threads post (the CPU-only configuration):
//   put bandwidth (quiet at the end of each window)  vs  memcpy of the same bytes
//   put_signal ping-pong latency (half a round trip)  vs  a bare shared-memory flag ping-pong
//   barrier latency
//   kinet-comm-perf --mode cpu [--transport tcp|shm] [--path auto|proxy] [--iters N] [--max-bytes B] [--json FILE]
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
#if KINET_COMM_PERF_GPU
#include "gpu_bench.hpp"
#endif

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
  std::string mode = "auto";
  CLI::App app{"kinet-comm-perf: communicator put bandwidth, put_signal ping-pong, barrier latency (2 processes)"};
  app.add_option("--mode", mode, "gpu (kernels, 2 processes on one GPU), cpu (host threads), auto: gpu where CUDA "
                                 "sees a GPU and this build has CUDA, else cpu")
      ->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  app.add_option("--transport", o.transport, "tcp, shm, ucx, ofi (cpu mode; gpu mode: the proxy path's)");
  app.add_option("--path", o.path, "cpu mode: auto or proxy (default auto); gpu mode: p2p or proxy (default p2p)");
  app.add_option("--iters", o.iters, "cpu mode: iterations per point")->check(CLI::Range(1, 1000000));
  app.add_option("--max-bytes", o.max_bytes, "cpu mode: largest message")->check(CLI::Range(8, 1 << 28));
  app.add_option("--json", o.json, "write the results here (cpu mode default: stdout)");
#if KINET_COMM_PERF_GPU
  kcp::GpuOpts g;
  bool quick = false;
  app.add_option("--bw-min-bytes", g.bw_min, "gpu: smallest put_bw size (a power of two)")
      ->check(CLI::Range(uint64_t{1} << 12, uint64_t{1} << 32));
  app.add_option("--bw-max-bytes", g.bw_max, "gpu: largest put_bw size (a power of two; windows hold 2x)")
      ->check(CLI::Range(uint64_t{1} << 12, uint64_t{1} << 32));
  app.add_option("--bw-factor", g.bw_factor, "gpu: put_bw sizes grow by this factor")->check(CLI::IsMember({2, 4}));
  app.add_option("--ctas-per-sm", g.ctas_per_sm, "gpu: put_bw grid = SMs x this (default 8; 0: as many as fit at once)")
      ->check(CLI::Range(0u, 64u));
  app.add_option("--bw-bytes-per-thread", g.bw_bytes_per_thread,
                 "gpu: a put of B bytes runs on B / (threads x this) CTAs while one wave holds them, else on half as many (0: always the whole grid)")
      ->check(CLI::Range(0u, 1u << 20));
  app.add_option("--bw-launch", g.bw_launch,
                 "gpu: put_bw kernel launches: pdl (programmatic dependent launch), plain (stream order), both")
      ->check(CLI::IsMember({"pdl", "plain", "both"}));
  app.add_flag("--bw-self", g.bw_self, "gpu: rank 0 puts into its own window (path self): the copy without the peer mapping");
  app.add_option("--bw-chunk", g.bw_chunk, "gpu: bytes per cta_put, chunks round-robin over the CTAs (0: a slice each)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 32));
  app.add_option("--bw-threads", g.bw_threads, "gpu: threads per put_bw CTA")->check(CLI::IsMember({128, 256, 512, 1024}));
  app.add_option("--trials", g.trials, "gpu: timed trials per put_bw size (median)")->check(CLI::Range(1, 100));
  app.add_option("--trial-ms", g.trial_ms, "gpu: aim of one trial (sets #iterations)")->check(CLI::Range(0.1, 10000.0));
  app.add_option("--lat-max-bytes", g.lat_max, "gpu: largest ping-pong size (8, 64, ... x8)")
      ->check(CLI::IsMember({8, 64, 512, 4096, 32768, 262144, 2097152}));
  app.add_option("--lat-cta-threads", g.lat_cta_threads, "gpu: threads of the ping-pong CTA")
      ->check(CLI::IsMember({64, 128, 256, 512, 1024}));
  app.add_option("--launches", g.launches, "gpu: ping-pong / barrier samples (median)")->check(CLI::Range(1, 1000));
  app.add_option("--launch-ms", g.launch_ms, "gpu: aim of one sample launch (sets #round trips)")
      ->check(CLI::Range(0.1, 10000.0));
  app.add_option("--only", g.only, "gpu: comma-separated parts to run: bw, lat, barrier");
  app.add_option("--timeout-ms", g.timeout_ms, "gpu: bound of every device-side wait")->check(CLI::Range(100u, 600000u));
  app.add_option("--deadline-s", g.deadline_s, "gpu: bound of the whole run")->check(CLI::Range(10u, 86400u));
  app.add_flag("--progress", g.progress, "gpu: progress line on stderr even when it is no terminal");
  app.add_flag("--quick", quick, "gpu: a smoke run (1 trial, 2 launches, 4 ms aims, put_bw up to 16 MiB)");
#endif
  CLI11_PARSE(app, argc, argv);
#if KINET_COMM_PERF_GPU
  if (mode == "gpu" || (mode == "auto" && kcp::gpu_visible())) {
    if (!app.count("--path")) o.path = "p2p";
    if (o.path != "p2p" && o.path != "proxy") {
      std::fprintf(stderr, "kinet-comm-perf: gpu mode: --path p2p or proxy, not %s\n", o.path.c_str());
      return 2;
    }
    if (quick) {
      g.trials = 1, g.launches = 2, g.trial_ms = g.launch_ms = 4;
      if (!app.count("--bw-max-bytes")) g.bw_max = std::min<uint64_t>(g.bw_max, 16 << 20);
    }
    if (g.bw_min > g.bw_max || (g.bw_min & (g.bw_min - 1)) || (g.bw_max & (g.bw_max - 1))) {
      std::fprintf(stderr, "kinet-comm-perf: --bw-min-bytes and --bw-max-bytes: powers of two, min <= max\n");
      return 2;
    }
    g.path = o.path;
    g.transport = o.transport;
    g.json = o.json;
    for (int i = 0; i < argc; ++i) g.command_line += (i ? " " : "") + std::string(argv[i]);
    return kcp::run_gpu(g);
  }
#else
  if (mode == "gpu") {
    std::fprintf(stderr, "kinet-comm-perf: gpu mode: this build has no CUDA (configure with -DKINET_CUDA=ON)\n");
    return 2;
  }
#endif
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
