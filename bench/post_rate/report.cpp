// kinet-post-rate — table, JSON and CSV output.
#include "report.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace kinet::bench {
namespace {

const char* check_word(const Measure& m) {
  if (!m.ran) return "-";
  if (!m.verified) return "FAIL";
  return m.warn.empty() ? "ok" : "ok*";
}

std::string fmt_ratio(const Result& r) {
  const double x = r.ratio();
  if (x <= 0) return "-";
  char b[16];
  std::snprintf(b, sizeof b, "%.2f", x);
  return b;
}

nlohmann::ordered_json measure_json(const Measure& m) {
  return {{"ran", m.ran},
          {"verified", m.verified},
          {"wqes_per_unit", m.wqes_per_unit},
          {"wqes", m.wqes},
          {"seconds", m.seconds},
          {"mwqe_per_s", m.mwqe},
          {"mwqe_per_s_min", m.mwqe_min},
          {"mwqe_per_s_max", m.mwqe_max},
          {"reps", m.reps},
          {"quiet_nops", m.nops},
          {"retire_full_pass_pct", m.retire_full_pct},
          {"retire_max_backlog", m.retire_max_backlog},
          {"note", m.note},
          {"warning", m.warn}};
}

}  // namespace

std::string fmt_rate(double m) {
  char b[32];
  if (m <= 0) return "-";
  if (m >= 1000) std::snprintf(b, sizeof b, "%.0f", m);
  else if (m >= 10) std::snprintf(b, sizeof b, "%.1f", m);
  else std::snprintf(b, sizeof b, "%.2f", m);
  return b;
}

void print_row_line(size_t i, size_t n, const Result& r) {
  const Config& c = r.cfg;
  char cfg[128];
  std::snprintf(cfg, sizeof cfg, "%-12s %-9s ctas=%-3u thr=%-4u qps=%-3u db=%-4u", c.mode.c_str(),
                sharing_name(c.sharing), c.ctas, c.tpc, c.qps, c.db_batch);
  if (r.skipped) {
    std::printf("[%3zu/%zu] %s SKIP: %s\n", i + 1, n, cfg, r.skip_note.c_str());
  } else {
    const Measure& k = r.kinet;
    std::printf("[%3zu/%zu] %s W=%-8u %8.3f ms kinet %9s bare %9s ratio %5s MWQE/s ret %3.0f%% %s%s%s%s%s%s%s\n",
                i + 1, n, cfg, k.wqes_per_unit, k.seconds * 1e3, fmt_rate(k.mwqe).c_str(),
                fmt_rate(r.bare.mwqe).c_str(), fmt_ratio(r).c_str(), k.retire_full_pct, check_word(k),
                k.verified ? "" : ": ", k.verified ? "" : k.note.c_str(),
                r.bare.ran && !r.bare.verified ? " bare FAIL: " : "",
                r.bare.ran && !r.bare.verified ? r.bare.note.c_str() : "", k.warn.empty() ? "" : " WARNING: ",
                k.warn.c_str());
  }
  std::fflush(stdout);
}

int print_summary(const std::vector<Result>& rows, const RunInfo& info, const Options& o) {
  std::printf("\n==================== kinet-post-rate summary ====================\n");
  std::printf("device: %s, %d SMs; ring depth %u, signal period %u, timed runs %d x ~%.0f ms (median); %s\n",
              info.device.c_str(), info.sms, 1u << o.log_depth, o.signal_period, o.reps, o.target_ms,
              info.date_utc.c_str());
  std::printf("bare = the same WQEs, rings, NIC stand-in, doorbells and launch shape without kinet's verbs\n"
              "(bench/post_rate/bare_kernels.cuh); ratio = kinet / bare of this run.\n"
              "ret%% = share of the retire kernel's passes that found >= %u WQEs waiting (kinet run): near 100\n"
              "means the NIC stand-in, not the posting code, set the pace of that row.\n",
              kChunk);
  std::printf("\n%-12s %-10s %-9s %5s %5s %4s %5s %12s %10s %10s %6s %5s  %s\n", "mode", "group", "sharing", "ctas",
              "thr", "qps", "db", "WQEs/run", "kinet", "bare", "ratio", "ret%", "check");
  int fails = 0, ran = 0;
  for (const Result& r : rows) {
    if (r.failed()) ++fails;
    if (r.ran()) ++ran;
    if (r.cfg.table) continue;
    const Config& c = r.cfg;
    std::string chk = r.skipped ? "skip" : check_word(r.kinet);
    if (r.bare.ran) chk += std::string("/") + check_word(r.bare);
    std::printf("%-12s %-10s %-9s %5u %5u %4u %5u %12llu %10s %10s %6s %5.0f  %s\n", c.mode.c_str(),
                c.group.c_str(), sharing_name(c.sharing), c.ctas, c.tpc, c.qps, c.db_batch,
                static_cast<unsigned long long>(r.kinet.wqes), fmt_rate(r.kinet.mwqe).c_str(),
                fmt_rate(r.bare.mwqe).c_str(), fmt_ratio(r).c_str(), r.kinet.retire_full_pct, chk.c_str());
  }
  // CTA x QP table (kinet)
  std::vector<uint32_t> trows, cols;
  for (const Result& r : rows)
    if (r.cfg.table) {
      if (std::find(trows.begin(), trows.end(), r.cfg.ctas) == trows.end()) trows.push_back(r.cfg.ctas);
      if (std::find(cols.begin(), cols.end(), r.cfg.qps) == cols.end()) cols.push_back(r.cfg.qps);
    }
  if (!trows.empty()) {
    std::sort(trows.begin(), trows.end());
    std::sort(cols.begin(), cols.end());
    std::printf("\nwarp-coop scaling (kinet), M WQE/s (rows: CTAs of %u warps; columns: QPs; suffix: e exclusive, "
                "c CTA-shared, g GPU-shared; ! = not verified)\n",
                o.warps_per_cta);
    std::printf("%6s", "CTAs");
    for (uint32_t q : cols) std::printf(" %8u", q);
    std::printf("\n");
    for (uint32_t ct : trows) {
      std::printf("%6u", ct);
      for (uint32_t q : cols) {
        const Result* f = nullptr;
        for (const Result& r : rows)
          if (r.cfg.table && r.cfg.ctas == ct && r.cfg.qps == q) f = &r;
        if (!f || !f->kinet.ran) {
          std::printf(" %8s", f && f->skipped ? "skip" : "-");
          continue;
        }
        const char suf = f->cfg.sharing == Sharing::Exclusive ? 'e' : (f->cfg.sharing == Sharing::Cta ? 'c' : 'g');
        std::string s = fmt_rate(f->kinet.mwqe) + suf + (f->kinet.verified ? "" : "!");
        std::printf(" %8s", s.c_str());
      }
      std::printf("\n");
    }
  }
  const Result* best = nullptr;
  for (const Result& r : rows)
    if (r.kinet.verified && (!best || r.kinet.mwqe > best->kinet.mwqe)) best = &r;
  std::printf("\n");
  for (const Result& r : rows)
    if (r.cfg.group == "single" && r.cfg.units == 1 && r.kinet.ran)
      std::printf("single thread, doorbell every %u WQE%s: kinet %s, bare %s M WQE/s, ratio %s%s\n", r.cfg.db_batch,
                  r.cfg.db_batch > 1 ? "s" : "", fmt_rate(r.kinet.mwqe).c_str(), fmt_rate(r.bare.mwqe).c_str(),
                  fmt_ratio(r).c_str(), r.kinet.verified ? "" : " (NOT verified)");
  if (best) {
    std::printf("best whole-GPU rate: %s M WQE/s = %s (%s, %u CTAs x %u threads, %u QPs, doorbell every %u)\n",
                fmt_rate(best->kinet.mwqe).c_str(), best->cfg.mode.c_str(), sharing_name(best->cfg.sharing),
                best->cfg.ctas, best->cfg.tpc, best->cfg.qps, best->cfg.db_batch);
  }
  std::printf("verification: %d of %zu configurations ran, %d FAILED%s  (elapsed %.1f s)\n", ran, rows.size(), fails,
              fails ? "" : (ran ? " -> PASS" : " -> NOTHING RAN"), info.elapsed_s);
  for (const Result& r : rows)
    if (!r.kinet.warn.empty())
      std::printf("  WARNING (ok*) %s ctas=%u thr=%u qps=%u: %s\n", r.cfg.mode.c_str(), r.cfg.ctas, r.cfg.tpc,
                  r.cfg.qps, r.kinet.warn.c_str());
  if (fails) {
    std::printf("FAIL\n");
    for (const Result& r : rows) {
      if (r.kinet.ran && !r.kinet.verified)
        std::printf("  FAIL %s ctas=%u thr=%u qps=%u: %s\n", r.cfg.mode.c_str(), r.cfg.ctas, r.cfg.tpc, r.cfg.qps,
                    r.kinet.note.c_str());
      if (r.bare.ran && !r.bare.verified)
        std::printf("  FAIL (bare) %s ctas=%u thr=%u qps=%u: %s\n", r.cfg.mode.c_str(), r.cfg.ctas, r.cfg.tpc,
                    r.cfg.qps, r.bare.note.c_str());
    }
  }
  return fails;
}

bool write_json(const std::string& path, const std::vector<Result>& rows, const RunInfo& info, const Options& o) {
  nlohmann::ordered_json doc;
  doc["tool"] = "kinet-post-rate";
  doc["device"] = info.device;
  doc["sms"] = info.sms;
  doc["date_utc"] = info.date_utc;
  doc["params"] = {{"ring_depth", 1u << o.log_depth}, {"signal_period", o.signal_period},
                   {"timeout_ms", o.timeout_ms},      {"target_ms", o.target_ms},
                   {"reps", o.reps},                  {"warps_per_cta_table", o.warps_per_cta},
                   {"quick", o.quick},                {"bare", !o.no_bare},
                   {"ncu_wqes", o.ncu_wqes},          {"bare_dbrec_release", o.bare_dbrec_release}};
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const Result& r : rows) {
    const Config& c = r.cfg;
    // Top-level rate fields are kinet's (what older plots read); the bare
    // kernel's measurement is under "bare", the same-run ratio under "ratio".
    nlohmann::ordered_json j = measure_json(r.kinet);
    j.update({{"mode", c.mode},
              {"group", c.group},
              {"table", c.table},
              {"sharing", sharing_name(c.sharing)},
              {"ctas", c.ctas},
              {"threads_per_cta", c.tpc},
              {"qps", c.qps},
              {"qps_used", c.qps_used},
              {"units", c.units},
              {"doorbell_batch", c.db_batch},
              {"skipped", r.skipped},
              {"skip_note", r.skip_note},
              {"ratio", r.ratio() > 0 ? nlohmann::ordered_json(r.ratio()) : nlohmann::ordered_json(nullptr)}});
    if (r.bare.ran) j["bare"] = measure_json(r.bare);
    arr.push_back(std::move(j));
  }
  doc["rows"] = std::move(arr);
  std::ofstream f(path);
  if (!f) {
    std::fprintf(stderr, "cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  f << doc.dump(1) << '\n';
  if (!f) {
    std::fprintf(stderr, "writing %s failed\n", path.c_str());
    return false;
  }
  std::printf("wrote %s (%zu rows)\n", path.c_str(), rows.size());
  return true;
}

bool write_csv(const std::string& path, const std::vector<Result>& rows) {
  FILE* f = stdout;
  if (!path.empty()) {
    f = std::fopen(path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s: %s\n", path.c_str(), std::strerror(errno));
      return false;
    }
  }
  std::fprintf(f,
               "mode,group,sharing,ctas,threads_per_cta,qps,qps_used,wqes,seconds,mwqe_per_s,bare_mwqe_per_s,ratio,"
               "doorbell_batch,verified\n");
  for (const Result& r : rows) {
    const Config& c = r.cfg;
    std::fprintf(f, "%s,%s,%s,%u,%u,%u,%u,%llu,%.9f,%.3f,%.3f,%.4f,%u,%s\n", c.mode.c_str(), c.group.c_str(),
                 sharing_name(c.sharing), c.ctas, c.tpc, c.qps, c.qps_used,
                 static_cast<unsigned long long>(r.kinet.wqes), r.kinet.seconds, r.kinet.mwqe, r.bare.mwqe,
                 r.ratio(), c.db_batch, r.skipped ? "skipped" : (r.failed() ? "NO" : "yes"));
  }
  if (f != stdout) {
    std::fclose(f);
    std::printf("wrote %s\n", path.c_str());
  }
  return true;
}

}  // namespace kinet::bench
