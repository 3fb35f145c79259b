// kinet — doorbell modes on the host side: which mode a QP gets
// (decide_doorbell, a pure function of its inputs) and the CPU thread that
// rings for CPU-assisted QPs (CpuDoorbell). The modes themselves are
// dev::DoorbellMode (kinet/device/qp.cuh).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kinet/kinet.hpp"

namespace kinet::doorbell {

// "uar", "bf", "cpu": the names $KINET_DOORBELL_MODE uses.
const char* mode_name(dev::DoorbellMode m);

// $KINET_DOORBELL_MODE's value: null or "" = not set (Auto); "auto", "uar",
// "bf", "cpu" (exactly, lower case). Anything else throws InvalidArgument
// naming the variable, the value and the accepted ones.
Doorbell parse_env(const char* value);

// What the provider can do for this QP.
struct Caps {
  bool uar = true;           // posters can store to a doorbell register
  bool blueflame = false;    // a BlueFlame window (BF-type UAR) can be allocated
  bool cpu_assisted = false; // the provider runs a CPU thread that rings from the record
};
// Whether the doorbell page reaches this QP's posters.
struct UarReach {
  bool gpu_posters = false;  // QpConfig::posters == Gpu: kernels must store to the UAR
  bool gpu_mappable = true;  // the result of mapping the UAR into the GPU (meaningful with gpu_posters)
  std::string why_not;       // when !gpu_mappable: what failed, and how to fix it
};
struct Decision {
  dev::DoorbellMode mode = dev::DoorbellMode::Uar;
  // Non-empty when Auto fell back to CpuAssisted: the one line to log, saying why.
  std::string note;
};

// The mode of one QP. `requested` (QpConfig::doorbell) wins when not Auto;
// else $KINET_DOORBELL_MODE (`env`, parsed as parse_env does); Auto = Uar when
// the posters reach the UAR (host posters always do; GPU posters when it maps),
// else CpuAssisted with a note saying why. An explicit mode the provider
// can't give, or a UAR/BlueFlame mode whose page does not map for GPU posters,
// throws NotSupported naming the mode, who asked (QpConfig or the variable)
// and why; a bad `env` throws InvalidArgument. `who` prefixes messages.
Decision decide(const std::string& who, Doorbell requested, const char* env, const Caps& caps, const UarReach& uar);

// Text of a device-side failure recorded in dev::SqState (local_error, and
// bad_abi for the debug builds' handle check), for QueuePair::last_error();
// empty when local_error is 0.
std::string local_error_text(uint8_t local_error, uint32_t bad_abi);

// One CPU thread per device that rings for CPU-assisted QPs: whenever the
// send counter of a watched doorbell record changes, it stores the doorbell
// word for that counter (dev::DoorbellMode::CpuAssisted) to the doorbell
// register, with the barriers a host MMIO doorbell needs. It only ever
// announces what the record says: a WQE whose record was not written is never
// rung. The thread starts with the first add() and sleeps while nothing is
// watched. Thread-safe.
class CpuDoorbell {
 public:
  explicit CpuDoorbell(std::string name) : name_(std::move(name)) {}
  ~CpuDoorbell();  // stops the thread; every add() must have been removed
  CpuDoorbell(const CpuDoorbell&) = delete;
  CpuDoorbell& operator=(const CpuDoorbell&) = delete;

  // Watches dbrec[mlx5::kSendDbrIndex] (host memory the posters write with
  // system scope) and rings db (the QP's doorbell register) with qpn_be8's
  // QP number. The record's value at the call counts as already rung. Returns
  // the id for remove(). Throws ResourceExhausted if the thread can't start.
  uint64_t add(uint32_t* dbrec, uint64_t* db, uint32_t qpn_be8);
  // After it returns the thread reads neither the record nor writes the
  // register of `id` again. Unknown ids are ignored.
  void remove(uint64_t id);
  // Doorbells rung so far (all QPs): tests observe the thread through it.
  uint64_t rings() const;

 private:
  struct Target {
    uint64_t id;
    uint32_t* dbrec;
    uint64_t* db;
    uint32_t qpn_be8;
    uint32_t last_be;  // the record value last rung (big-endian, as stored)
  };
  void run();
  std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Target> targets_;
  uint64_t next_id_ = 1;
  uint64_t rings_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kinet::doorbell
