// kinet-perf — perftest-style latency and bandwidth between two kinet
// endpoints (ib_write_lat / ib_write_bw / ib_read_bw / ib_atomic_lat).
//
// main: options -> testbed (two devices, buffers, connected QPs) -> runner
// (host threads, or CUDA kernels with --gpu: gpu_runner.cu) -> tables on
// stdout and an optional JSON report.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <random>
#include <thread>

#include "affinity.hpp"
#include "core/env.hpp"
#include "gpu_runner.hpp"
#include "kinet/kinet.hpp"
#include "options.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "testbed.hpp"
#include "xproc.hpp"

#ifndef KINET_PERF_VERSION
#define KINET_PERF_VERSION "unknown"
#endif

namespace kp = kinet::perf;

namespace {

constexpr size_t kDefaultLatSize = 2;
constexpr size_t kDefaultBwSize = 65536;

std::vector<size_t> sizes_for(const kp::Options& o, kp::TestKind k) {
  if (kp::has_fixed_size(k)) return {8};
  if (!o.sizes.empty()) return o.sizes;
  return {kp::is_latency(k) ? kDefaultLatSize : kDefaultBwSize};
}

// Default iterations: 1000 (latency) / 5000 (bandwidth), fewer for large
// messages so that one size moves at most ~256 MiB (latency) / 2 GiB (bw).
// A cross-process client's bandwidth tests stream at least 32 MiB per size
// (up to 200,000 messages): the TCP baseline's stream of small messages
// runs several times faster while it still fits in the socket buffers
// (5,000 x 64 B does), which says nothing about a steady stream.
uint64_t iters_for(const kp::Options& o, kp::TestKind k, size_t size) {
  if (o.iters) return o.iters;
  if (k == kp::TestKind::AtomicLat) return 1000;
  const bool lat = kp::is_latency(k);
  uint64_t base = lat ? 1000 : 5000;
  if (!lat && !o.client_of.empty())
    base = std::clamp<uint64_t>((uint64_t(32) << 20) / std::max<size_t>(size, 1), base, 200000);
  const uint64_t cap = (lat ? (uint64_t(256) << 20) : (uint64_t(2) << 30)) / std::max<size_t>(size, 1);
  return std::max<uint64_t>(lat ? 100 : 200, std::min(base, cap));
}

uint64_t warmup_for(const kp::Options& o, const kp::TestCase& tc) {
  if (o.warmup >= 0) return static_cast<uint64_t>(o.warmup);
  if (kp::is_latency(tc.kind)) return std::min<uint64_t>(100, tc.iters / 10);
  // Bandwidth: enough to fill every queue twice.
  return std::min<uint64_t>(tc.iters, std::max<uint64_t>(tc.iters / 10, 2ull * tc.tx_depth * tc.qps));
}

// Every case of the run, in order, as the options choose them.
std::vector<kp::TestCase> plan_cases(const kp::Options& opt, kp::LatMode lat_mode) {
  std::vector<kp::TestCase> cases;
  for (kp::TestKind k : opt.tests) {
    for (size_t size : sizes_for(opt, k)) {
      kp::TestCase tc;
      tc.kind = k;
      tc.size = size;
      tc.iters = iters_for(opt, k, size);
      tc.qps = kp::is_latency(k) ? 1 : opt.qps;
      tc.tx_depth = kp::is_latency(k) ? 1 : opt.tx_depth;
      tc.signal_every = kp::is_latency(k) ? 1 : (opt.signal_every ? opt.signal_every : std::max(1u, opt.tx_depth / 4));
      tc.post_list = kp::is_latency(k) ? 1 : opt.post_list;
      tc.warmup = warmup_for(opt, tc);
      tc.use_inline = k == kp::TestKind::WriteLat && opt.inline_small && size <= kinet::mlx5::kMaxInlineOneBB;
      tc.lat_mode = lat_mode;
      cases.push_back(tc);
    }
  }
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  const kp::Options opt = kp::parse_options(argc, argv);
  if (opt.server) return kp::run_server(opt);
  if (!opt.client_of.empty()) {
    kp::Progress progress(opt.progress || isatty(STDERR_FILENO));
    const uint64_t seed = opt.seed ? opt.seed : (uint64_t(std::random_device{}()) | 1);
    return kp::run_client(opt, plan_cases(opt, kp::LatMode::TwoThreads), seed, kp::machine_info(), progress);
  }
  kp::GpuSetup gpu;
  if (opt.gpu) {
    if (const int rc = kp::gpu_prepare(&gpu); rc != 0) return rc;  // 77: no CUDA GPU; 2: no GPU runner built
    gpu.rings_in_gpu = opt.gpu_rings;
  }
  const auto t_start = std::chrono::steady_clock::now();
  kp::Progress progress(opt.progress || isatty(STDERR_FILENO));
  const kp::MachineInfo machine = kp::machine_info();
  const unsigned ncpu = static_cast<unsigned>(std::max<size_t>(1, kp::allowed_cpus().size()));
  const kp::LatMode lat_mode =
      opt.gpu ? kp::LatMode::Kernels
      : opt.lat_mode != kp::LatMode::Auto ? opt.lat_mode
                                          : (ncpu >= 4 ? kp::LatMode::TwoThreads : kp::LatMode::OneThread);
  // Busy threads: the posting threads, and one engine per device on emu when
  // it polls: for host posters the verbs run the engine themselves
  // (QpHandle::host_kick) and the engine threads sleep, unless
  // KINET_EMU_HOST_KICK=0; kernels' QPs are always the engine's.
  const bool engines_poll = opt.gpu || kinet::env::get_u64("KINET_EMU_HOST_KICK", 1) == 0;  // as the provider reads it
  const bool two_posters = lat_mode == kp::LatMode::TwoThreads &&
                           std::find(opt.tests.begin(), opt.tests.end(), kp::TestKind::WriteLat) != opt.tests.end();
  const unsigned posters = two_posters ? 2 : 1;
  const unsigned engines = opt.device.rfind("emu", 0) == 0 && engines_poll ? 2 : 0;
  const kp::CpuPlan cpu_plan = kp::plan_cpus(opt.pin, posters, engines);
  const uint64_t seed = opt.seed ? opt.seed : (uint64_t(std::random_device{}()) | 1);  // fits a JSON double

  kp::RunInfo info;
  info.version = KINET_PERF_VERSION;
  info.command_line = opt.command_line;
  info.lat_mode = kp::lat_mode_name(lat_mode);
  info.seed = seed;
  info.pinning = cpu_plan.note;

  std::vector<kp::Result> results;
  std::string error;
  try {
    kp::TestbedConfig tcfg;
    tcfg.device = opt.device;
    // --gpu-threads: a batch of one WQE per thread takes at most half the ring.
    tcfg.tx_depth = opt.gpu ? std::max(opt.tx_depth, 2 * opt.gpu_threads) : opt.tx_depth;
    tcfg.timeout_ms = opt.timeout_ms;
    tcfg.max_size = 8;
    bool any_bw = false;
    for (kp::TestKind k : opt.tests) {
      for (size_t s : sizes_for(opt, k)) tcfg.max_size = std::max(tcfg.max_size, s);
      any_bw |= !kp::is_latency(k);
    }
    tcfg.qps = any_bw ? opt.qps : 1;
    // The emu engine threads start in Device::open and inherit this thread's affinity.
    if (cpu_plan.pinned) kp::pin_this_thread(cpu_plan.engines);
    kp::Testbed tb(tcfg, opt.gpu ? kp::make_gpu_memory(gpu) : kp::make_host_memory());
    if (cpu_plan.pinned) kp::pin_this_thread({cpu_plan.posters[0]});
    // Runner selection: host threads, or with --gpu CUDA kernels (gpu_runner.cu,
    // built when KINET_HAVE_CUDA; its MemoryOps put the buffers in GPU memory).
    kp::HostRunnerConfig rcfg;
    rcfg.seed = seed;
    rcfg.poster_cpus = cpu_plan.posters;
    // Oversubscribed and not pinned: yield soon, so a spinning poster doesn't
    // keep the NIC engine it waits for off the CPU.
    rcfg.spins_before_yield = (!cpu_plan.pinned && ncpu < posters + engines) ? 16 : 4096;
    std::unique_ptr<kp::Runner> runner = opt.gpu ? kp::make_gpu_runner(tb, gpu, {seed, opt.gpu_threads})
                                                 : kp::make_host_runner(tb, rcfg);

    const kinet::DeviceAttr& ca = tb.client_attr();
    info.client_device = ca.name;
    info.server_device = tb.server_attr().name;
    if (opt.gpu) {
      info.client_device += kp::gpu_label(gpu, 0);
      info.server_device += kp::gpu_label(gpu, 1);
    }
    info.provider = ca.provider;
    info.max_qp_wr = ca.max_qp_wr;
    info.max_msg = ca.max_msg;
    info.gpu_memory = ca.gpu_memory;
    info.sq_depth = tb.sq_depth();
    info.runner = runner->name();
    info.timeout_ms = tb.timeout_ns() / 1000000;

    const std::vector<kp::TestCase> cases = plan_cases(opt, lat_mode);
    for (size_t i = 0; i < cases.size(); ++i) {
      const kp::TestCase& tc = cases[i];
      if (i == 0 || cases[i - 1].kind != tc.kind) {
        if (i) kp::print_footer();
        kp::TestCase shown = tc;
        shown.use_inline = tc.kind == kp::TestKind::WriteLat && opt.inline_small;
        kp::print_header(info, shown, runner->describe(tc));
      }
      kp::Result r = runner->run(tc, progress);
      progress.clear();
      kp::print_row(r);
      results.push_back(std::move(r));
    }
    if (!cases.empty()) kp::print_footer();
  } catch (const kinet::Error& e) {
    error = std::string(e.what()) + " (" + kinet::error_code_name(e.code()) + ")";
  } catch (const kp::PerfError& e) {
    error = e.what();
  } catch (const std::exception& e) {
    error = std::string("unexpected error: ") + e.what();
  }
  progress.clear();
  if (!error.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr, "kinet-perf: FAILED: %s\n", error.c_str());
  }
  if (!opt.json_path.empty()) {
    if (!kp::write_json(opt.json_path, info, machine, results, error)) {
      std::fprintf(stderr, "kinet-perf: cannot write %s\n", opt.json_path.c_str());
      return 1;
    }
  }
  if (!error.empty()) return 1;
  if (opt.demo) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::printf("Demo done in %.1f s: every message verified. Next: %s --sweep --json results.json\n", s,
                argc > 0 ? argv[0] : "kinet-perf");
  }
  return 0;
}
