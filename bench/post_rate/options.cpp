// kinet-post-rate — command line (CLI11).
#include "options.hpp"

#include <CLI/CLI.hpp>
#include <string>

namespace kinet::bench {

int parse_options(int argc, char** argv, Options& o) {
  CLI::App app{
      "kinet-post-rate: mlx5 WQEs per second built and published by CUDA kernels with kinet's device verbs, and by "
      "a bare kernel doing the same with nothing but stores and fences (rings in GPU memory, doorbells to pinned "
      "host memory, a retire kernel playing the NIC; no NIC needed)"};
  app.add_flag("--quick", o.quick, "small sweep (about 20 configurations, 2 x 20 ms per row)");
  app.add_option("--json", o.json, "all rows as JSON (plot: bench/plot_post_rate.py FILE)");
  std::string csv;
  auto* csv_opt = app.add_option("--csv", csv, "all rows as CSV: --csv (stdout) or --csv=FILE")->expected(0, 1);
  app.add_option("--only", o.only,
                 "only these rows: comma-separated words, each matching part of a row's mode or group (thread-excl, "
                 "warp-coop, cta-coop, thread-cta, thread-gpu, table, whole-gpu, single, ...), or g:GROUP matching "
                 "the group exactly (g:single, g:warp, g:cta, g:gpu-shared, g:whole-gpu, g:table)");
  app.add_flag("--no-bare", o.no_bare, "skip the bare-kernel baseline (no ratio column)");
  app.add_flag("--bare-table", o.bare_table, "also run the bare kernel for the CTA x QP table rows");
  app.add_option("--target-ms", o.target_ms, "length of one timed run")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--reps", o.reps, "timed runs per row, median reported")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--log-depth", o.log_depth, "send ring / CQ depth 2^N (the retire kernel's 16-bit index arithmetic)")
      ->check(CLI::Range(9u, 15u))
      ->capture_default_str();
  app.add_option("--signal-period", o.signal_period, "CQE every N WQEs, power of two, 8..depth/2")->capture_default_str();
  app.add_option("--warps-per-cta", o.warps_per_cta, "warps per CTA in the CTA x QP table")
      ->check(CLI::Range(1u, 32u))
      ->capture_default_str();
  app.add_option("--timeout-ms", o.timeout_ms, "bound of every device-side wait (QpHandle::timeout_ns)")
      ->check(CLI::Range(uint64_t{10}, uint64_t{600000}))
      ->capture_default_str();
  app.add_option("--max-seconds", o.max_seconds, "skip the remaining rows after S seconds")->capture_default_str();
  app.add_option("--device", o.device, "CUDA device")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_flag("--dry-run", o.dry_run, "list the sweep without touching a GPU");
  app.add_flag("--fake", o.fake, "with --dry-run: also print made-up results (tests the output path)");
  app.add_option("--sms", o.sms_override, "with --dry-run: SMs to plan for; on a GPU: use at most N SMs");
  app.add_option("--inject-bad", o.inject_idx,
                 "self-test: thread-excl rows corrupt QP 0's WQE at ring index IDX; they must FAIL");
  app.add_flag("--cqe-release-gpu", o.cqe_release_gpu,
               "diagnostic: the retire kernel releases CQEs at GPU scope (default: system)");
  app.add_flag("--bare-dbrec-release", o.bare_dbrec_release,
               "experiment: the bare kernel writes the doorbell record with st.release.gpu instead of "
               "fence.acq_rel.gpu + store (bench/OPTIMIZE.md item 4)");
  app.add_option("--ncu", o.ncu_wqes,
                 "profiling mode (ncu serialises kernels): no retire kernel, the CQEs of N WQEs per QP written "
                 "beforehand, one launch per row and kind; exclusive rows only; N a multiple of the signal period "
                 "and of the row's batch, below the ring depth");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (csv_opt->count() > 0) {
    o.csv = csv.empty();
    o.csv_file = csv;
  }
  const uint32_t depth = 1u << o.log_depth;
  if (o.signal_period < 8 || (o.signal_period & (o.signal_period - 1)) || o.signal_period > depth / 2) {
    std::fprintf(stderr, "--signal-period: %u is not a power of two in 8..%u (ring depth / 2)\n", o.signal_period,
                 depth / 2);
    return 2;
  }
  if (o.ncu_wqes && (o.ncu_wqes % o.signal_period || o.ncu_wqes >= depth)) {
    std::fprintf(stderr, "--ncu: %u is not a multiple of the signal period %u below the ring depth %u\n", o.ncu_wqes,
                 o.signal_period, depth);
    return 2;
  }
  if (o.quick) {  // shorter runs unless asked otherwise
    if (app.count("--reps") == 0) o.reps = 2;
    if (app.count("--target-ms") == 0) o.target_ms = 20;
  }
  return -1;
}

}  // namespace kinet::bench
