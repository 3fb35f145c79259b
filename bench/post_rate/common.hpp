// kinet-post-rate — types shared by the kernels (device) and the host side:
// launch parameters, the NIC stand-in's statistics, one row's configuration
// and result, the command-line options. No state lives here.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "kinet/device/qp.cuh"
#include "kinet/mlx5/wire.hpp"

namespace kinet::bench {

namespace kd = kinet::dev;
using kd::Sharing;
// The posting-state type (dev::SqState today) as the handle names it.
using SqStateT = std::remove_pointer_t<decltype(kd::QpHandle::state)>;

constexpr uint32_t kFull = 0xffffffffu;
constexpr uint32_t kChunk = 256;  // WQEs a retire warp examines per pass (8 per lane)
constexpr uint32_t kChunkWords = kChunk / 32;
constexpr uint32_t kStateStride = 256;  // bytes between two QPs' SqState (own L2 lines)
constexpr uint32_t kDbrecStride = 64;   // bytes between two doorbell records / two doorbell registers
constexpr uint64_t kStopPollNs = 2000;  // idle retire warps read the stop flag (device memory) this often
constexpr uint64_t kLaddr = 0x7f0000000000ull;  // dummy local / remote addresses: nothing moves
constexpr uint64_t kRaddr = 0x7e0000000000ull;
constexpr uint32_t kBytes = 8;
constexpr uint32_t kLkeyBe = kinet::detail::bswap32_constexpr(0x00c0ffeeu);
constexpr uint32_t kRkeyBe = kinet::detail::bswap32_constexpr(0x00beef01u);
constexpr uint8_t kBadVendorSyndrome = 0x6b;  // marks the retire kernel's error CQEs

// Where a posting thread saw its first error (PostParams::first_err >> 16).
enum Where : int { kWhereReserve = 1, kWherePublish = 2, kWhereRing = 3, kWhereQuiet = 4, kWherePost = 5, kWherePoll = 6 };
// Per-thread and bare shared modes: which QP a thread uses.
//   kMapThread: QP = global thread; kMapCta: QP = CTA % nqp; kMapWarp: QP = global warp % nqp;
//   kMapWarpGroup: QP = global warp / warps_per_qp (warp-coop rows whose warps share a QP).
enum Map : uint32_t { kMapThread = 0, kMapCta = 1, kMapWarp = 2, kMapWarpGroup = 3 };

struct PostParams {
  const kd::QpHandle* qps;
  uint32_t nqp;
  uint32_t per_unit;      // WQEs per unit (thread / warp / CTA)
  uint32_t db_batch;      // ring when (idx+1) % db_batch == 0 (1 = every WQE)
  uint32_t map;           // Map: which QP a thread uses
  uint32_t warps_per_qp;  // warp modes with shared QPs
  unsigned long long* posted;  // WQEs published (writes only, not quiet()'s NOPs)
  uint32_t* err_count;         // per thread: non-Ok statuses seen (accumulates over launches)
  int* first_err;              // (where << 16) | status of the first error, 0 = none
  unsigned long long inject_idx;  // self-test (--inject-bad): QP 0's WQE at this ring index gets a bad opcode
  uint32_t bare_dbrec_release;    // bare kernel: doorbell record as st.release.gpu (--bare-dbrec-release)
};

struct ConsStats {  // one per QP, written by its retire warp
  unsigned long long writes, nops, bad, cqes, err_cqes;
  unsigned long long done;           // progress: WQEs retired so far (updated every pass)
  unsigned long long first_bad_idx;   // ring index of the first malformed WQE
  unsigned long long last_write_end;  // 1 + ring index of the last RDMA write retired
  uint32_t first_bad_w0, first_bad_w1;  // its first two control words, host order
  uint32_t has_bad, timed_out, cq_timeout, finished;
  // Is the stand-in NIC keeping up? Passes over the ring, passes that found
  // a full chunk waiting, and the largest backlog (announced - retired) seen.
  uint32_t passes, full_passes, max_backlog;
  uint32_t pad[7];
};
static_assert(sizeof(ConsStats) == 128);

struct ConsParams {
  const kd::QpHandle* qps;
  uint32_t nqp;
  uint32_t* stop;     // device memory: set by the host (a copy) after the last posting kernel
  uint32_t* started;  // pinned host: one word per retire CTA
  ConsStats* stats;   // device, one per QP
  uint64_t max_ns;    // hard bound of the retire kernel's run time
  uint32_t cqe_release_gpu;  // diagnostic: release the CQE's last word at GPU instead of system scope
};

// ---- host side -------------------------------------------------------------
// ThreadLoop: thread-excl posting through one dev::post_loop call per unit;
// ThreadCursor: the per-step calls on a dev::SqCursor.
enum class Kind { Thread, ThreadLoop, ThreadCursor, Warp, WarpLib, Cta, CtaLib };

struct Config {
  std::string mode;   // row label: thread-excl, warp-coop, ...
  std::string group;  // single, warp, cta, gpu-shared, whole-gpu, table
  Kind kind = Kind::Thread;
  Sharing sharing = Sharing::Exclusive;
  uint32_t map = kMapThread;
  uint32_t ctas = 1, tpc = 1, qps = 1, db_batch = 1;
  // derived
  uint32_t units = 1;  // threads / warps / CTAs that each post W
  uint32_t gran = 1;   // W is a multiple of this
  uint32_t qps_used = 1, warps_per_qp = 1;
  uint32_t cons_ctas = 1, cons_tpb = 32;
  bool table = false;
};

// One timed measurement (kinet's verbs or the bare kernel) of one row.
struct Measure {
  bool ran = false, verified = false;
  std::string note;  // why not verified
  std::string warn;  // verified, but something worth reporting
  uint32_t wqes_per_unit = 0;
  uint64_t wqes = 0;  // per timed run
  double seconds = 0, mwqe = 0, mwqe_min = 0, mwqe_max = 0;
  int reps = 0;
  uint64_t nops = 0;
  double retire_full_pct = 0;  // % of retire passes that found a full chunk waiting (high = NIC stand-in bound)
  uint32_t retire_max_backlog = 0;
};

struct Result {
  Config cfg;
  bool skipped = false;
  std::string skip_note;
  Measure kinet;  // through kinet's device verbs
  Measure bare;   // the bare kernel (ran = false when not measured)
  bool ran() const { return kinet.ran || bare.ran; }
  bool failed() const { return (kinet.ran && !kinet.verified) || (bare.ran && !bare.verified); }
  // kinet / bare in the same run; 0 when either is missing.
  double ratio() const {
    return kinet.verified && bare.verified && bare.mwqe > 0 ? kinet.mwqe / bare.mwqe : 0.0;
  }
};

struct Options {
  bool quick = false, dry_run = false, fake = false, csv = false, no_bare = false, bare_table = false;
  std::string json, csv_file, only;
  double target_ms = 40, max_seconds = 170;
  int reps = 3, device = 0, sms_override = 0;
  uint32_t log_depth = 11, signal_period = 64, warps_per_cta = 8;
  uint64_t timeout_ms = 5000;
  long long inject_idx = -1;  // self-test of the failure path
  bool cqe_release_gpu = false;
  // --ncu N: profiling mode. No retire kernel: the CQEs for N WQEs per QP are
  // written before one launch per kind (a NIC that has already finished), so
  // the posting kernel runs alone, as a profiler that serialises kernels needs.
  uint32_t ncu_wqes = 0;
  bool bare_dbrec_release = false;  // experiment: see PostParams::bare_dbrec_release
};

inline const char* sharing_name(Sharing s) {
  return s == Sharing::Exclusive ? "exclusive" : (s == Sharing::Cta ? "cta" : "gpu");
}

}  // namespace kinet::bench
