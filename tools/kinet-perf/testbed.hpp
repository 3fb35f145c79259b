// kinet-perf — the two endpoints a test runs between: on each side a device,
// a protection domain, one registered buffer and N RC queue pairs, connected
// to the peer's (QpInfo exchanged as the 64-byte wire blob, as two processes
// would exchange it).
//
// Where buffers live and how the tool reads and writes them goes through
// MemoryOps, so a GPU runner (a separate .cu file) can put them in device
// memory and keep the rest of the tool unchanged.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kinet/kinet.hpp"

namespace kinet::perf {

// Allocation of, and host access to, the test buffers.
class MemoryOps {
 public:
  virtual ~MemoryOps() = default;
  virtual MemoryKind kind() const = 0;
  virtual RingPlacement rings() const = 0;
  virtual void* alloc(size_t bytes) = 0;  // 4 KiB aligned; throws on failure
  virtual void free(void* p) noexcept = 0;
  virtual void copy_to(void* dst, const void* host_src, size_t n) = 0;    // host -> buffer
  virtual void copy_from(void* host_dst, const void* src, size_t n) = 0;  // buffer -> host
  virtual void fill(void* dst, uint8_t byte, size_t n) = 0;
  // Who posts to the QPs. Gpu: kernels; the QPs' posting state then lives in
  // GPU memory of the device current when the QP is created.
  virtual Posters posters() const { return Posters::Host; }
  // Called before the Testbed allocates a side's buffer and creates its QPs
  // (0 = client, 1 = server): a GPU implementation makes that side's GPU
  // current, so buffer and posting state land there.
  virtual void enter_side(int side) { (void)side; }
};
// Page-aligned host memory.
std::unique_ptr<MemoryOps> make_host_memory();

// Fresh payload: n random bytes, never zero, written to dst through `mem`
// (`stage` is a reusable host buffer).
void fill_random(MemoryOps& mem, std::mt19937_64& rng, std::vector<uint8_t>& stage, uint8_t* dst, size_t n);
// Compares n bytes at got against want (both in `mem`'s memory); throws
// PerfError naming `what`, the first differing offset and how many differ.
void verify_bytes(MemoryOps& mem, const uint8_t* want, const uint8_t* got, size_t n, const std::string& what);

struct TestbedConfig {
  std::string device = "emu";
  uint32_t qps = 1;          // per side
  size_t max_size = 2;       // largest message of any test (bytes)
  uint32_t tx_depth = 128;   // operations in flight per QP
  uint64_t timeout_ms = 0;   // 0 = library default
};

// One side. Buffer layout (every region aligned to 64 B):
//   tx(q)  [slot] x qps    source of writes, target of the peer's reads
//   rx(q)  [slot] x qps    target of the peer's writes, destination of reads
//   word(0..7)             8-byte words for atomics (counter, fetched values)
struct Endpoint {
  std::unique_ptr<Device> dev;
  std::unique_ptr<ProtectionDomain> pd;
  uint8_t* base = nullptr;  // registered buffer (freed by the Testbed)
  size_t bytes = 0;
  std::unique_ptr<MemoryRegion> mr;
  std::vector<std::unique_ptr<QueuePair>> qps;

  size_t slot = 0;  // bytes per region
  uint32_t nqp = 0;
  uint8_t* tx(uint32_t q) const { return base + size_t(q) * slot; }
  uint8_t* rx(uint32_t q) const { return base + size_t(nqp + q) * slot; }
  uint64_t* word(uint32_t i) const {
    return reinterpret_cast<uint64_t*>(base + size_t(2 * nqp) * slot) + i;
  }
  Lkey lkey() const { return mr->lkey(); }
  Rkey rkey() const { return mr->rkey(); }
  uint64_t addr(const void* p) const { return reinterpret_cast<uint64_t>(p); }
};

class Testbed {
 public:
  Testbed(const TestbedConfig& cfg, std::unique_ptr<MemoryOps> mem);
  ~Testbed();
  Testbed(const Testbed&) = delete;
  Testbed& operator=(const Testbed&) = delete;

  Endpoint& client() { return ep_[0]; }
  Endpoint& server() { return ep_[1]; }
  MemoryOps& mem() { return *mem_; }
  const TestbedConfig& config() const { return cfg_; }
  const DeviceAttr& client_attr() const { return ep_[0].dev->attr(); }
  const DeviceAttr& server_attr() const { return ep_[1].dev->attr(); }
  uint32_t sq_depth() const { return sq_depth_; }
  uint64_t timeout_ns() const;  // bound of the tool's own waits (same as the QPs')

 private:
  TestbedConfig cfg_;
  std::unique_ptr<MemoryOps> mem_;
  Endpoint ep_[2];
  uint32_t sq_depth_ = 0;
};

}  // namespace kinet::perf
