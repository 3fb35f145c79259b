// kinet emu — the engine: executes send WQEs as an mlx5 NIC would.
//
// Per QP, in the engine thread (under EmuQp::exec_mu):
//  doorbell  the engine swaps the QP's doorbell word with prm::kNoDoorbell; a
//            new word announces the WQEs up to the index it carries, checked
//            against the doorbell record. Published but unannounced WQEs
//            never run.
//  issue     each announced WQE is decoded and validated (and, in relaxed
//            mode, its local keys checked and a WRITE source that an
//            outstanding READ/ATOMIC may still overwrite read now).
//  retire    the responder side runs (fabric), READ/ATOMIC results land
//            locally, the CQE is written: remote data becomes visible when
//            the completion is generated, in WQE order.
// In-order mode (default) retires each WQE right after issuing it. Relaxed
// mode (KINET_EMU_RELAXED=1) uses the PRM's freedoms: up to kWindow WQEs
// issued ahead of their completion, so a later WQE reads its source before an
// earlier READ/ATOMIC delivered its result unless it carries the fence bit;
// completions come no earlier than the pass after the one that issued them.
//
// A QP whose peer is in another process (EmuQp::peer) is pipelined instead
// (step_remote): issuing a WQE sends its Requests (a WRITE's payload is read
// from local memory then), up to kRemoteOutBytes per QP unanswered; answers
// are taken as they arrive (READ data and atomic old values land after the
// local key is checked again under memory_guard()), and WQEs retire in order
// once all their answers are in: the CQE comes only then. A WQE that reads a
// local source (a WRITE with SGEs) or carries the fence bit is not issued
// while an earlier READ/ATOMIC is unanswered, in either mode.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "core/cuda_shim.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/thread_name.hpp"
#include "fabric/remote_fabric.hpp"
#include "providers/emu/decode.hpp"
#include "providers/emu/emu.hpp"
#include "providers/emu/engine_runner.hpp"
#include "providers/emu/prm.hpp"
#include "providers/emu/safe_copy.hpp"

namespace kinet::emu {
using engine::QpRunner;
namespace {
// QpHandle::host_kick: QPs by their doorbell word (unique while the QP lives).
// Never destroyed: devices held in globals close after static destructors ran.
struct KickTable {
  std::shared_mutex mu;
  std::unordered_map<const void*, std::weak_ptr<EmuQp>> by_db;
};
KickTable& kicks() {
  static KickTable* t = new KickTable;
  return *t;
}
// Idle passes before an engine whose QPs are all kicked by their posters
// sleeps (KINET_EMU_KICKED_IDLE_US between looks): one. Its posters run the
// QPs; yielding passes here only took turns with them on a busy CPU while a
// woken link thread waited for it (seen with perf sched on a 2-vCPU VM).
constexpr uint32_t kKickedIdlePasses = 1;
}  // namespace

void Nic::add_kick(const std::shared_ptr<EmuQp>& qp) {
  KickTable& k = kicks();
  std::unique_lock<std::shared_mutex> g(k.mu);
  k.by_db[qp->db] = qp;
}

void Nic::remove_kick(const EmuQp& qp) {
  KickTable& k = kicks();
  std::unique_lock<std::shared_mutex> g(k.mu);
  auto it = k.by_db.find(qp.db);
  if (it == k.by_db.end()) return;
  const std::shared_ptr<EmuQp> p = it->second.lock();
  if (!p || p.get() == &qp) k.by_db.erase(it);
}

bool Nic::lookup_mr(uint32_t key, MrEntry* out) {
  std::shared_lock<std::shared_mutex> g(mr_mu);
  auto it = mrs.find(key);
  if (it == mrs.end()) return false;
  *out = it->second;
  return true;
}

std::shared_ptr<EmuQp> Nic::find_qp(uint32_t qpn) {
  std::lock_guard<std::mutex> g(qp_mu);
  auto it = qps.find(qpn);
  return it == qps.end() ? nullptr : it->second;
}

void Nic::quiesce_qp(EmuQp& qp) {
  if (qp.host_kick) remove_kick(qp);
  {
    std::lock_guard<std::mutex> g(qp.exec_mu);  // the engine is not inside this QP
    if (!qp.destroyed.load(std::memory_order_acquire)) {
      QpRunner r(*this, qp);
      if (qp.peer) qp.peer->flush();  // Requests a pass left queued (corked) go as they would have
      try {
        r.flush_all();
      } catch (const std::exception& e) {  // a CQ in GPU memory CUDA can no longer reach
        r.fail_qp(std::string("flush at teardown failed: ") + e.what());
      }
      r.log_repeats();
      qp.window.clear();
      qp.destroyed.store(true, std::memory_order_release);
    }
  }
  // Peers executing against this QP finish; later ones see `destroyed`.
  std::unique_lock<std::shared_mutex> wait_responders(qp.responder_mu);
}

void Nic::reset_qp(EmuQp& qp, const std::function<void()>& reinit) {
  std::lock_guard<std::mutex> g(qp.exec_mu);  // the engine is not inside this QP
  std::unique_lock<std::shared_mutex> r(qp.responder_mu);  // nor is a peer
  if (qp.destroyed.load(std::memory_order_acquire)) return;
  qp.window.clear();
  qp.read_atomic_end = 0;  // indices start again at 0
  if (qp.peer) qp.peer->flush();  // Requests a pass left queued (corked) go as they would have
  qp.peer.reset();  // the QP answers no one until connected again
  qp.remote_out_bytes = 0;
  qp.urgent_seqs.clear();
  qp.sq_ci = 0;
  qp.sq_announced = 0;
  qp.cq_pi = 0;
  qp.doorbell_fault_idx = ~0ull;
  qp.doorbell_fault.clear();
  reinit();
}

void Nic::start_engine() {
  relaxed = env::get_u64("KINET_EMU_RELAXED", 0) != 0;
  engine = named_thread("kinet-emu", [this] { run_engine(); });
}

void Nic::run_engine() {
  const auto kicked_idle_sleep =
      std::chrono::microseconds(std::clamp<uint64_t>(env::get_u64("KINET_EMU_KICKED_IDLE_US", 200), 1, 1000000));
  std::vector<std::shared_ptr<EmuQp>> snapshot;
  uint64_t seen_gen = ~0ull;
  uint32_t idle = 0;
  while (!stop.load(std::memory_order_acquire)) {
    const uint64_t gen = qp_generation.load(std::memory_order_acquire);
    if (gen != seen_gen) {
      std::lock_guard<std::mutex> g(qp_mu);
      snapshot.clear();
      for (auto& [n, qp] : qps) snapshot.push_back(qp);
      seen_gen = gen;
    }
    bool work = false, all_kicked = true;
    for (auto& qp : snapshot) {
      all_kicked &= qp->host_kick;
      std::lock_guard<std::mutex> g(qp->exec_mu);
      if (qp->destroyed.load(std::memory_order_acquire)) continue;
      work |= run_qp(*qp);
    }
    if (work) {
      idle = 0;
    } else if (all_kicked && ++idle >= kKickedIdlePasses) {
      // Every QP's posters run it themselves: looked at now and then, for
      // answers that come while nobody polls.
      std::unique_lock<std::mutex> g(idle_mu);
      idle_cv.wait_for(g, kicked_idle_sleep, [&] {
        return stop.load(std::memory_order_acquire) || qp_generation.load(std::memory_order_acquire) != seen_gen;
      });
    } else if (++idle < 4096) {
      std::this_thread::yield();
    } else {
      // Long idle: sleep briefly so an idle software NIC costs no CPU.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

bool Nic::run_qp(EmuQp& qp) {
  QpRunner r(*this, qp);
  try {
    return qp.peer ? r.step_remote() : r.step();
  } catch (const std::exception& e) {
    // The rings themselves are out of CUDA's reach (e.g. the GPU faulted):
    // the QP can't go on, the engine and the other QPs can.
    const std::string why = std::string("NIC engine failed: CUDA copy failed on the QP's rings: ") + e.what();
    r.fail_qp(why);
    r.log_once(why, why);
    return true;
  }
}
}  // namespace kinet::emu

namespace kinet::dev::detail {
void host_kick(const uint64_t* db) noexcept {
  std::shared_ptr<emu::EmuQp> qp;
  {
    emu::KickTable& k = emu::kicks();
    std::shared_lock<std::shared_mutex> g(k.mu);
    auto it = k.by_db.find(db);
    if (it == k.by_db.end()) return;
    qp = it->second.lock();
  }
  if (!qp) return;
  std::unique_lock<std::mutex> run(qp->exec_mu, std::try_to_lock);
  if (!run.owns_lock() || qp->destroyed.load(std::memory_order_acquire)) return;  // someone runs it now
  try {
    qp->nic->run_qp(*qp);
  } catch (...) {  // run_qp reports its failures on the QP; nothing may escape into a poster
  }
}
}  // namespace kinet::dev::detail
