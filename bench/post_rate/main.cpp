// kinet-post-rate — how many mlx5 send WQEs per second CUDA kernels build and
// publish with kinet's device verbs, against a bare kernel doing the same in
// the same run, with no NIC in the machine. See bench/README.md.
//
// Layout: common.hpp (shared types), nic_standin.cuh (the retire kernel that
// plays the NIC), kinet_kernels.cuh / bare_kernels.cuh (posting kernels),
// runner.cu (device resources, one row's measurement and checks), sweep.cpp
// (which rows), report.cpp (table, JSON, CSV), options.cpp (command line).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "options.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "sweep.hpp"

namespace {

using namespace kinet::bench;

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

void write_outputs(const Options& o, const std::vector<Result>& rows, const RunInfo& info) {
  if (!o.json.empty()) write_json(o.json, rows, info, o);
  if (o.csv || !o.csv_file.empty()) write_csv(o.csv_file, rows);
}

// Rows not measured, with the reason.
void skip_rest(const std::vector<Config>& sweep, size_t from, const char* why, std::vector<Result>& rows) {
  for (size_t j = from; j < sweep.size(); ++j) {
    Result r;
    r.cfg = sweep[j];
    r.skipped = true;
    r.skip_note = why;
    rows.push_back(r);
  }
}

int dry_run(const Options& o, RunInfo& info) {
  info.sms = o.sms_override > 0 ? o.sms_override : 132;
  info.device = "dry run (no GPU)";
  const auto sweep = build_sweep(o, info.sms);
  std::printf("dry run: %zu configurations for %d SMs\n", sweep.size(), info.sms);
  std::vector<Result> rows;
  for (size_t i = 0; i < sweep.size(); ++i) {
    Result r;
    r.cfg = sweep[i];
    if (r.cfg.ctas + r.cfg.cons_ctas > static_cast<uint32_t>(info.sms)) {
      r.skipped = true;
      r.skip_note = "too many CTAs";
    } else if (o.fake) {  // made-up numbers: exercise every output path
      for (Measure* m : {&r.kinet, &r.bare}) {
        if (m == &r.bare && (o.no_bare || (r.cfg.table && !o.bare_table))) break;
        m->ran = m->verified = true;
        m->wqes_per_unit = r.cfg.gran * 64;
        m->wqes = static_cast<uint64_t>(r.cfg.units) * m->wqes_per_unit;
        m->mwqe = m->mwqe_min = m->mwqe_max =
            (m == &r.bare ? 2.0 : 1.0) * 0.5 * r.cfg.units * (r.cfg.kind == Kind::Thread || r.cfg.kind == Kind::ThreadLoop || r.cfg.kind == Kind::ThreadCursor ? 1 : 20);
        m->seconds = m->wqes / (m->mwqe * 1e6);
        m->reps = o.reps;
      }
    } else {
      r.skipped = true;
      r.skip_note = "dry run";
    }
    rows.push_back(r);
    print_row_line(i, sweep.size(), r);
  }
  write_outputs(o, rows, info);
  print_summary(rows, info, o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options o;
  if (const int rc = parse_options(argc, argv, o); rc >= 0) return rc;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  RunInfo info;
  info.date_utc = now_utc();
  if (o.dry_run) return dry_run(o, info);

  std::vector<Result> rows;
  try {
    Bench bench(o);
    bench.open(info);
    const auto sweep = build_sweep(o, info.sms);
    bench.allocate(sweep);
    int fails = 0;
    for (size_t i = 0; i < sweep.size(); ++i) {
      if (elapsed() > o.max_seconds) {
        std::printf("time budget of %.0f s used: skipping the remaining %zu configurations\n", o.max_seconds,
                    sweep.size() - i);
        skip_rest(sweep, i, "time budget", rows);
        break;
      }
      if (fails >= 3) {
        std::printf("3 configurations failed verification: skipping the remaining %zu\n", sweep.size() - i);
        skip_rest(sweep, i, "skipped after 3 failures", rows);
        break;
      }
      rows.push_back(bench.run(sweep[i]));
      if (rows.back().failed()) ++fails;
      print_row_line(i, sweep.size(), rows.back());
    }
  } catch (const Fatal& f) {
    std::fprintf(stderr, "FATAL: %s\n", f.what.c_str());
    info.elapsed_s = elapsed();
    std::fflush(stdout);
    write_outputs(o, rows, info);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(f.code);  // a kernel may still be running: no CUDA teardown
  }
  info.elapsed_s = elapsed();
  write_outputs(o, rows, info);  // before the summary: the summary is the last thing printed
  const int nfail = print_summary(rows, info, o);
  std::fflush(stdout);
  const bool any_ran = std::any_of(rows.begin(), rows.end(), [](const Result& r) { return r.ran(); });
  return (nfail || !any_ran) ? 1 : 0;
}
