// kinet-post-rate — the checks of one measured run (host only).
#include "check.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace kinet::bench {

std::string decode_err(int fe) {
  if (fe == 0) return "none";
  static const char* where[] = {"?", "reserve", "publish", "ring_doorbell", "quiet", "warp_put/cta_put", "poll_cq"};
  const int w = fe >> 16, s = fe & 0xffff;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s returned %d (%s)", (w >= 0 && w <= 6) ? where[w] : "?", s,
                kinet::status_string(static_cast<kinet::Status>(s)));
  return buf;
}

void check_run(const Config& c, const Readback& rb, const std::vector<double>& times, Measure& r) {
  char buf[512];
  const std::vector<uint8_t>& st = rb.states;
  const std::vector<ConsStats>& cs = rb.cons;
  const std::vector<uint32_t>& errs = rb.errs;
  const unsigned long long np = rb.posted;
  const int fe = rb.first_err;
  const uint64_t expected = rb.expected;
  const uint32_t W = rb.wqes_per_unit;
  std::string why;
  auto fail = [&](const std::string& s) {
    if (!why.empty()) why += "; ";
    why += s;
  };
  uint64_t err_threads = 0, writes = 0, nops = 0, bad = 0, passes = 0, full_passes = 0;
  uint32_t max_backlog = 0;
  for (uint32_t e : errs) err_threads += e != 0;
  if (fe != 0 || err_threads) {
    std::snprintf(buf, sizeof buf, "%llu threads saw errors, first: %s", (unsigned long long)err_threads,
                  decode_err(fe).c_str());
    fail(buf);
  }
  if (np != expected) {
    std::snprintf(buf, sizeof buf, "posted %llu WQEs, expected %llu", np, (unsigned long long)expected);
    fail(buf);
  }
  int qp_reports = 0;
  uint32_t warn_qps = 0;
  uint64_t warn_nops = 0;
  for (uint32_t i = 0; i < c.qps; ++i) {
    SqStateT s;
    std::memcpy(&s, st.data() + static_cast<size_t>(i) * kStateStride, sizeof s);
    const ConsStats& x = cs[i];
    writes += x.writes;
    nops += x.nops;
    bad += x.bad;
    passes += x.passes;
    full_passes += x.full_passes;
    max_backlog = std::max(max_backlog, x.max_backlog);
    std::string q;
    if (!x.finished) q += " retire warp did not finish;";
    if (x.timed_out) q += " retire warp hit its deadline;";
    if (x.cq_timeout) q += " retire warp found the CQ full;";
    if (x.bad) {
      std::snprintf(buf, sizeof buf,
                    " %llu malformed WQEs, first at index %llu: opcode 0x%02x wqe_index 0x%04x (expected 0x%04llx) "
                    "ds %u qpn 0x%x;",
                    x.bad, x.first_bad_idx, x.first_bad_w0 & 0xff, (x.first_bad_w0 >> 8) & 0xffff,
                    x.first_bad_idx & 0xffff, x.first_bad_w1 & 0x3f, x.first_bad_w1 >> 8);
      q += buf;
    }
    const uint64_t retired = x.writes + x.nops + x.bad;
    if (s.broken || s.error_status) {
      std::snprintf(buf, sizeof buf, " SqState broken=%u error_status=%d;", s.broken, s.error_status);
      q += buf;
    }
    if (s.ready != s.reserved || s.rung != s.reserved || retired != s.reserved) {
      std::snprintf(buf, sizeof buf, " reserved %llu ready %llu rung %llu retired %llu;",
                    (unsigned long long)s.reserved, (unsigned long long)s.ready, (unsigned long long)s.rung,
                    (unsigned long long)retired);
      q += buf;
    }
    // quiet()'s contract: everything reserved before it completed. Every
    // write was reserved before some quiet() on its QP, so the last write
    // must have completed.
    if (s.completed > s.reserved || s.completed < x.last_write_end) {
      std::snprintf(buf, sizeof buf, " completed %llu, last RDMA write ends at %llu, reserved %llu;",
                    (unsigned long long)s.completed, x.last_write_end, (unsigned long long)s.reserved);
      q += buf;
    } else if (c.sharing == Sharing::Exclusive && s.completed != s.reserved) {
      // An exclusive owner's quiet() posts a NOP only when no WQE at or after
      // its ticket asked for a CQE, and then waits for that NOP. A NOP left
      // uncompleted means SqState::signaled was lower than the last signalled
      // WQE: several threads raised it with plain stores and a lower value won.
      ++warn_qps;
      warn_nops += s.reserved - s.completed;
    }
    if (!q.empty() && qp_reports++ < 3) fail("qp " + std::to_string(i) + ":" + q);
  }
  if (warn_qps) {
    std::snprintf(buf, sizeof buf,
                  "on %u QPs quiet() left %llu NOP(s) it posted uncompleted: SqState::signaled under-counted "
                  "(racy plain updates from several threads of a batch)",
                  warn_qps, (unsigned long long)warn_nops);
    r.warn = buf;
  }
  if (qp_reports > 3) fail("(" + std::to_string(qp_reports - 3) + " more QPs with problems)");
  if (writes != np) {
    std::snprintf(buf, sizeof buf, "retire kernel saw %llu RDMA writes, posters published %llu",
                  (unsigned long long)writes, np);
    fail(buf);
  }
  if (bad) {
    std::snprintf(buf, sizeof buf, "%llu malformed WQEs", (unsigned long long)bad);
    fail(buf);
  }
  r.ran = true;
  r.verified = why.empty() && !times.empty();
  if (times.empty() && why.empty()) why = "no timed run";
  r.note = why;
  r.nops = nops;
  r.retire_full_pct = passes ? 100.0 * full_passes / passes : 0;
  r.retire_max_backlog = max_backlog;
  r.wqes_per_unit = W;
  r.wqes = static_cast<uint64_t>(c.units) * W;
  r.reps = static_cast<int>(times.size());
  if (!times.empty()) {
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    r.seconds = sorted[sorted.size() / 2];
    r.mwqe = r.wqes / r.seconds / 1e6;
    r.mwqe_min = r.wqes / sorted.back() / 1e6;
    r.mwqe_max = r.wqes / sorted.front() / 1e6;
  }
}

}  // namespace kinet::bench
