// kinet emu tests — two software NICs in one process, a connected RC QP pair
// and registered buffers on either side.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kinet/kinet.hpp"
#include "test_util.hpp"

namespace kinet::test {

// A registered buffer. The buffer outlives its registration.
struct Region {
  Buffer buf;
  size_t len = 0;
  std::unique_ptr<MemoryRegion> mr;

  uint8_t* p() const { return buf.get(); }
  uint64_t addr() const { return reinterpret_cast<uint64_t>(buf.get()); }
  Lkey lkey() const { return mr->lkey(); }
  Rkey rkey() const { return mr->rkey(); }
  uint64_t* u64(size_t byte_off = 0) const { return reinterpret_cast<uint64_t*>(buf.get() + byte_off); }
};

Region make_region(ProtectionDomain& pd, size_t len, uint32_t access = kAccessAll);

struct PairOptions {
  // Device::open names: the software NIC by default; the hw suite names a
  // ConnectX (or "mlx5_emu": the mlx5 provider over the software NIC).
  std::string device_a = "emu", device_b = "emu";
  DeviceOptions dev_a{}, dev_b{};
  QpConfig cfg_a{}, cfg_b{};
  uint32_t access_a = kAccessAll;  // remote operations QP a accepts (to_init)
  uint32_t access_b = kAccessAll;  // remote operations QP b accepts
  bool connect = true;
};

// Device a (initiator) and device b (target), one PD each, QP a <-> QP b.
// (Two opens of one hardware device give two contexts: QP a <-> QP b loop back.)
// Destruction order: regions, QPs, PDs, devices.
class EmuPair {
 public:
  explicit EmuPair(const PairOptions& o = {});
  ~EmuPair();
  EmuPair(const EmuPair&) = delete;

  std::unique_ptr<Device> da, db;
  std::unique_ptr<ProtectionDomain> pa, pb;
  std::unique_ptr<QueuePair> qa, qb;
  std::vector<std::unique_ptr<Region>> ra, rb;

  Region& reg_a(size_t len, uint32_t access = kAccessAll);
  Region& reg_b(size_t len, uint32_t access = kAccessAll);
  dev::QpHandle h() const { return qa->handle(); }

  // Removes the target side: its regions, then QP b, and (if whole_device) its PD and device.
  void destroy_b(bool whole_device);
};

// Default QP config of the tests: bounded waits well under a test's limit.
QpConfig test_qp_config(uint32_t sq_depth = 256, uint64_t timeout_ms = 5000);

}  // namespace kinet::test
