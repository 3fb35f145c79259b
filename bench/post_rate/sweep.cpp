// kinet-post-rate — the configurations of one sweep.
#include "sweep.hpp"

#include <algorithm>
#include <string>

namespace kinet::bench {
namespace {

uint32_t ceil_div(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

// Most CTAs a posting kernel may use next to the retire kernel of qps QPs.
uint32_t max_ctas(int sms, uint32_t qps) {
  const uint32_t c = cons_ctas_for(qps);
  return static_cast<uint32_t>(sms) > c ? static_cast<uint32_t>(sms) - c : 0;
}
// Most CTAs when every CTA has its own QP (qps = ctas).
uint32_t max_ctas_qp_per_cta(int sms) {
  uint32_t best = 0;
  for (uint32_t c = 1; c <= 4096; ++c)
    if (c + cons_ctas_for(c) <= static_cast<uint32_t>(sms)) best = c;
  return best;
}

void finish(Config& c) {
  c.cons_ctas = cons_ctas_for(c.qps);
  c.cons_tpb = std::min<uint32_t>(c.qps, 32) * 32;
}

Config make_thread(const std::string& mode, const std::string& group, Sharing s, uint32_t map, uint32_t ctas,
                   uint32_t tpc, uint32_t qps, uint32_t db) {
  Config c;
  c.mode = mode;
  c.group = group;
  c.kind = Kind::Thread;
  c.sharing = s;
  c.map = map;
  c.ctas = ctas;
  c.tpc = tpc;
  c.qps = qps;
  c.db_batch = db;
  c.units = ctas * tpc;
  c.gran = 1;
  if (map == kMapThread) c.qps_used = std::min(c.units, qps);
  else if (map == kMapCta) c.qps_used = std::min(ctas, qps);
  else c.qps_used = std::min(ceil_div(c.units, 32), qps);
  finish(c);
  return c;
}

Config make_warp(const std::string& group, uint32_t ctas, uint32_t wpc, uint32_t qps, bool lib = false,
                 bool table = false) {
  Config c;
  c.mode = lib ? "warp_put-lib" : "warp-coop";
  c.group = group;
  c.kind = lib ? Kind::WarpLib : Kind::Warp;
  c.ctas = ctas;
  c.tpc = wpc * 32;
  c.qps = qps;
  c.db_batch = 32;
  c.table = table;
  const uint32_t nw = ctas * wpc;
  c.units = nw;
  if (nw <= qps) {
    c.sharing = Sharing::Exclusive;
    c.gran = 32 * ceil_div(qps, nw);
    c.qps_used = qps;
    c.warps_per_qp = 1;
  } else {
    const uint32_t k = ceil_div(nw, qps);
    c.warps_per_qp = k;
    c.qps_used = ceil_div(nw, k);
    c.sharing = (k <= wpc && wpc % k == 0) ? Sharing::Cta : Sharing::Gpu;
    c.map = kMapWarpGroup;  // k_warp derives this itself; the bare kernel reads it
    c.gran = 32;
  }
  finish(c);
  return c;
}

Config make_cta(const std::string& group, uint32_t ctas, uint32_t tpc, bool lib = false) {
  Config c;
  c.mode = lib ? "cta_put-lib" : "cta-coop";
  c.group = group;
  c.kind = lib ? Kind::CtaLib : Kind::Cta;
  c.sharing = Sharing::Exclusive;
  c.ctas = ctas;
  c.tpc = tpc;
  c.qps = ctas;
  c.qps_used = ctas;
  c.db_batch = tpc;
  c.units = ctas;
  c.gran = tpc;
  finish(c);
  return c;
}

}  // namespace

uint32_t cons_ctas_for(uint32_t qps) { return ceil_div(qps, 32); }

std::vector<Config> build_sweep(const Options& o, int sms) {
  std::vector<Config> v;
  const bool q = o.quick;
  const uint32_t wpc = o.warps_per_cta;
  const uint32_t pc = max_ctas_qp_per_cta(sms);  // e.g. 128 on a 132-SM H200
  const uint32_t p128 = max_ctas(sms, 128), p256 = max_ctas(sms, 256);
  // (a) single thread
  v.push_back(make_thread("thread-excl", "single", Sharing::Exclusive, kMapThread, 1, 1, 1, 1));
  v.push_back(make_thread("thread-excl", "single", Sharing::Exclusive, kMapThread, 1, 1, 1, 32));
  for (uint32_t db : {1u, 32u}) {  // the same, through one dev::post_loop call (counters in registers)
    Config c = make_thread("thread-loop", "single", Sharing::Exclusive, kMapThread, 1, 1, 1, db);
    c.kind = Kind::ThreadLoop;
    v.push_back(c);
  }
  for (uint32_t db : {1u, 32u}) {  // one call per step, on a dev::SqCursor (counters in registers)
    Config c = make_thread("thread-cursor", "single", Sharing::Exclusive, kMapThread, 1, 1, 1, db);
    c.kind = Kind::ThreadCursor;
    v.push_back(c);
  }
  if (!q) v.push_back(make_thread("thread-excl", "single", Sharing::Exclusive, kMapThread, 1, 32, 32, 32));
  if (!q) v.push_back(make_thread("thread-excl", "single", Sharing::Exclusive, kMapThread, 4, 32, 128, 32));
  // (b) one warp per QP
  v.push_back(make_warp("warp", 1, 1, 1));
  v.push_back(make_warp("warp", 1, 8, 8));
  if (!q) v.push_back(make_warp("warp", 1, 1, 1, /*lib=*/true));
  // (c) CTA-shared QP
  v.push_back(make_thread("thread-cta", "cta", Sharing::Cta, kMapCta, 1, 256, 1, 32));
  if (!q) v.push_back(make_thread("thread-cta", "cta", Sharing::Cta, kMapCta, 1, 256, 1, 1));
  v.push_back(make_cta("cta", 1, 256));
  if (!q) v.push_back(make_cta("cta", 1, 1024));
  if (!q) v.push_back(make_cta("cta", 1, 256, /*lib=*/true));
  if (!q) v.push_back(make_thread("thread-cta", "cta", Sharing::Cta, kMapCta, pc, 256, pc, 32));
  v.push_back(make_cta("cta", pc, 256));
  if (!q) v.push_back(make_cta("cta", pc, 1024));
  if (!q) v.push_back(make_cta("cta", pc, 256, /*lib=*/true));
  // (d) GPU-shared QPs, every thread posting on its own
  v.push_back(make_thread("thread-gpu", "gpu-shared", Sharing::Gpu, kMapWarp, 1, 256, 1, 32));
  if (!q) v.push_back(make_thread("thread-gpu", "gpu-shared", Sharing::Gpu, kMapWarp, 4, 256, 1, 32));
  if (!q) v.push_back(make_thread("thread-gpu", "gpu-shared", Sharing::Gpu, kMapWarp, 32, 256, 8, 32));
  if (!q) v.push_back(make_thread("thread-gpu", "gpu-shared", Sharing::Gpu, kMapWarp, max_ctas(sms, 32), 256, 32, 32));
  // whole-GPU candidates (the best row overall is reported)
  v.push_back(make_warp("whole-gpu", p128, 4, 128));
  if (!q) v.push_back(make_warp("whole-gpu", p128, 16, 128));
  if (!q) v.push_back(make_warp("whole-gpu", p128, 32, 128));
  v.push_back(make_warp("whole-gpu", p256, 8, 256));
  if (!q) v.push_back(make_warp("whole-gpu", p256, 2, 256));
  if (!q) v.push_back(make_warp("whole-gpu", 4, 32, 128, /*lib=*/true));
  // CTA x QP table, warp-coop
  const std::vector<uint32_t> dims = q ? std::vector<uint32_t>{1, 8, 128}
                                       : std::vector<uint32_t>{1, 2, 4, 8, 16, 32, 64, 128};
  for (uint32_t ctas : dims)
    for (uint32_t qps : dims) v.push_back(make_warp("table", ctas, wpc, qps, false, /*table=*/true));
  if (!o.only.empty()) {
    // Comma-separated terms; "g:NAME" matches the group exactly, any other
    // term a part of the mode or the group.
    auto keep = [&](const Config& c) {
      size_t pos = 0;
      while (pos <= o.only.size()) {
        const size_t end = std::min(o.only.find(',', pos), o.only.size());
        const std::string t = o.only.substr(pos, end - pos);
        pos = end + 1;
        if (t.empty()) continue;
        if (t.rfind("g:", 0) == 0 ? c.group == t.substr(2)
                                  : (c.mode.find(t) != std::string::npos || c.group.find(t) != std::string::npos))
          return true;
      }
      return false;
    };
    std::vector<Config> f;
    for (auto& c : v)
      if (keep(c)) f.push_back(c);
    v.swap(f);
  }
  return v;
}

}  // namespace kinet::bench
