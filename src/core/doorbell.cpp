// kinet — doorbell mode decision and the CPU-assisted doorbell thread.
#include "core/doorbell.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "core/log.hpp"
#include "core/thread_name.hpp"
#include "kinet/mlx5/wire.hpp"

namespace kinet::doorbell {
namespace {
using dev::DoorbellMode;

const char* request_name(Doorbell d) {
  switch (d) {
    case Doorbell::Auto: return "auto";
    case Doorbell::Uar: return "uar";
    case Doorbell::BlueFlame: return "bf";
    case Doorbell::CpuAssisted: return "cpu";
  }
  return "?";
}
}  // namespace

const char* mode_name(DoorbellMode m) {
  switch (m) {
    case DoorbellMode::Uar: return "uar";
    case DoorbellMode::BlueFlame: return "bf";
    case DoorbellMode::CpuAssisted: return "cpu";
  }
  return "?";
}

Doorbell parse_env(const char* v) {
  if (!v || !*v) return Doorbell::Auto;
  for (Doorbell d : {Doorbell::Auto, Doorbell::Uar, Doorbell::BlueFlame, Doorbell::CpuAssisted})
    if (std::strcmp(v, request_name(d)) == 0) return d;
  throw Error(ErrorCode::InvalidArgument,
              std::string("KINET_DOORBELL_MODE=") + v + " is not one of auto, uar, bf, cpu");
}

Decision decide(const std::string& who, Doorbell requested, const char* env, const Caps& caps, const UarReach& uar) {
  const Doorbell from_env = parse_env(env);  // a bad value is an error even when the config overrides it
  const Doorbell want = requested != Doorbell::Auto ? requested : from_env;
  const std::string asked = requested != Doorbell::Auto ? std::string("QpConfig::doorbell = ") + request_name(want)
                                                        : std::string("KINET_DOORBELL_MODE=") + request_name(want);
  const bool reach = !uar.gpu_posters || uar.gpu_mappable;
  const std::string unmapped = "the doorbell page (UAR) can't be mapped into the GPU: " + uar.why_not;
  auto refuse = [&](const std::string& why) -> Error {
    return Error(ErrorCode::NotSupported, who + ": doorbell mode " + request_name(want) + " (" + asked + "): " + why);
  };
  switch (want) {
    case Doorbell::Uar:
      if (!caps.uar) throw refuse("the provider has no doorbell register posters can store to");
      if (!reach) throw refuse(unmapped + "; use cpu (KINET_DOORBELL_MODE=cpu) or fix the mapping");
      return {DoorbellMode::Uar, {}};
    case Doorbell::BlueFlame:
      if (!caps.blueflame) throw refuse("the provider has no BlueFlame window");
      if (!reach) throw refuse(unmapped + "; use cpu (KINET_DOORBELL_MODE=cpu) or fix the mapping");
      return {DoorbellMode::BlueFlame, {}};
    case Doorbell::CpuAssisted:
      if (!caps.cpu_assisted) throw refuse("the provider has no CPU doorbell thread");
      return {DoorbellMode::CpuAssisted, {}};
    case Doorbell::Auto:
      break;
  }
  if (caps.uar && reach) return {DoorbellMode::Uar, {}};
  const std::string why = !caps.uar ? "the provider has no doorbell register posters can store to" : unmapped;
  if (!caps.cpu_assisted)
    throw Error(ErrorCode::NotSupported, who + ": no doorbell mode works for this QP: " + why +
                                             ", and the provider has no CPU doorbell thread");
  return {DoorbellMode::CpuAssisted,
          who + ": doorbell mode cpu (CPU-assisted: a CPU thread rings for the GPU; slower than uar) because " + why};
}

std::string local_error_text(uint8_t local, uint32_t bad_abi) {
  if (local == 0) return {};
  std::string s = std::string("device verbs: ") + status_string(static_cast<Status>(local)) + " (status " +
                  std::to_string(local) + ")";
  if (static_cast<Status>(local) == Status::InvalidArgument) {
    char b[200];
    std::snprintf(b, sizeof b,
                  ": the QpHandle's ABI word is 0x%x (version %u, %u bytes), these verbs were compiled for 0x%x "
                  "(version %u, %u bytes): build the handle with QueuePair::handle() of the same kinet",
                  bad_abi, bad_abi >> 16, bad_abi & 0xffffu, dev::kQpHandleAbi, dev::kQpHandleAbi >> 16,
                  dev::kQpHandleAbi & 0xffffu);
    s += b;
  }
  return s;
}

// ---- CpuDoorbell ----------------------------------------------------------------

CpuDoorbell::~CpuDoorbell() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t CpuDoorbell::add(uint32_t* dbrec, uint64_t* db, uint32_t qpn_be8) {
  std::lock_guard<std::mutex> g(mu_);
  if (!thread_.joinable()) {
    try {
      thread_ = named_thread("kinet-doorbell", [this] { run(); });
    } catch (const std::system_error& e) {
      throw Error(ErrorCode::ResourceExhausted, name_ + ": can't start the CPU doorbell thread: " + e.what());
    }
  }
  const uint32_t now = load_acquire<Scope::System>(&dbrec[mlx5::kSendDbrIndex]);
  targets_.push_back({next_id_, dbrec, db, qpn_be8, now});
  cv_.notify_all();
  return next_id_++;
}

void CpuDoorbell::remove(uint64_t id) {
  std::lock_guard<std::mutex> g(mu_);  // the thread holds it for a whole pass
  for (size_t i = 0; i < targets_.size(); ++i)
    if (targets_[i].id == id) {
      targets_.erase(targets_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
}

uint64_t CpuDoorbell::rings() const {
  std::lock_guard<std::mutex> g(mu_);
  return rings_;
}

void CpuDoorbell::run() {
  uint32_t idle = 0;
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    if (targets_.empty()) {
      cv_.wait(lk, [&] { return stop_ || !targets_.empty(); });
      continue;
    }
    bool work = false;
    for (Target& t : targets_) {
      // Acquire: the WQEs the posters released before the record are visible
      // (to this thread, and through the barriers below to the NIC's DMA).
      const uint32_t rec = load_acquire<Scope::System>(&t.dbrec[mlx5::kSendDbrIndex]);
      if (rec == t.last_be) continue;
      const uint32_t pi = kinet::detail::bswap32(rec) & 0xffffu;
      host_dma_barrier();
      host_wc_barrier();  // nothing earlier is combined with or overtaken by the doorbell
      store_release<Scope::System>(t.db, mlx5::doorbell_word(pi, t.qpn_be8));
      host_wc_barrier();  // flushed to the device now
      t.last_be = rec;
      ++rings_;
      work = true;
    }
    lk.unlock();
    if (work) {
      idle = 0;
      std::this_thread::yield();
    } else if (++idle < 2048) {
      std::this_thread::yield();
    } else {
      // Long idle: a short sleep so a quiet device costs no CPU (a doorbell
      // then waits at most this long).
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    lk.lock();
  }
}

}  // namespace kinet::doorbell
