// kinet — host control path: devices, protection domains, memory regions,
// RC queue pairs and their connection. Every failure throws kinet::Error
// whose message says what failed and why, e.g.
//   "emu0: rkey 0x1234 is not registered".
//
// The data path runs through the trivially copyable handle of a queue pair
// (QueuePair::handle()) and the device verbs in <kinet/device/qp.cuh>.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kinet/device/qp.cuh"
#include "kinet/status.hpp"

namespace kinet {

enum class ErrorCode {
  InvalidArgument,  // a value out of range, a null pointer, a bad blob
  NotFound,         // no such device / QP
  NotSupported,     // the provider or this machine can't do it (e.g. GPU memory without a GPU)
  BadState,         // e.g. to_rtr() on a QP that is not in INIT
  ResourceExhausted,
  System,           // an OS or CUDA call failed
};
const char* error_code_name(ErrorCode c);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// Access rights of a memory region and of a QP (remote operations it accepts).
// Values are those of ibv_access_flags.
enum Access : uint32_t {
  kLocalWrite = 1u << 0,
  kRemoteWrite = 1u << 1,
  kRemoteRead = 1u << 2,
  kRemoteAtomic = 1u << 3,
  kAccessAll = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic,
};

enum class MemoryKind : uint8_t { Host, Gpu };

// Where a QP's send ring, doorbell record and CQ live.
enum class RingPlacement : uint8_t {
  Host,  // pinned host memory: host threads and kernels can post (default)
  Gpu,   // GPU memory, as on real hardware for kernels; host threads can't post
};

enum class Posters : uint8_t { Host, Gpu };

enum class QpState : uint8_t { Reset, Init, Rtr, Rts, Error };
const char* qp_state_name(QpState s);

struct DeviceAttr {
  std::string name;       // "emu0"
  std::string provider;   // "emu", "mlx5"
  uint32_t max_qp_wr;     // largest send ring
  uint32_t max_msg;       // largest message one WQE carries
  bool gpu_memory;        // can register and move GPU memory
};

class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;  // deregisters
  virtual void* addr() const = 0;
  virtual size_t length() const = 0;
  virtual uint32_t access() const = 0;
  virtual MemoryKind kind() const = 0;
  virtual uint32_t lkey_value() const = 0;  // host order, for printing and exchange
  virtual uint32_t rkey_value() const = 0;
  // Keys as the device verbs take them (big-endian).
  Lkey lkey() const { return Lkey{detail::bswap32_constexpr(lkey_value())}; }
  Rkey rkey() const { return Rkey{detail::bswap32_constexpr(rkey_value())}; }
  uint64_t addr_u64() const { return reinterpret_cast<uint64_t>(addr()); }
};

// What a peer needs to connect to a QP: exchanged out of band as 64 bytes.
struct QpInfo {
  static constexpr uint32_t kMagic = 0x504e4b31;  // "1KNP"
  uint32_t magic;
  uint16_t version;
  uint16_t provider;   // 1 = emu, 2 = mlx5
  uint64_t node;       // emu: fabric address of the device; mlx5: subnet prefix
  uint8_t gid[16];     // mlx5: GID of the port; emu: unused
  uint32_t qpn;
  uint32_t psn;
  uint16_t lid;
  uint8_t mtu;         // IB MTU enum (1..5)
  uint8_t port;
  uint32_t reserved[5];
  std::vector<uint8_t> serialize() const;
  static QpInfo deserialize(const void* data, size_t len);  // throws on a bad blob
};
static_assert(sizeof(QpInfo) == 64);

struct QpConfig {
  uint32_t sq_depth = 256;         // power of two, 2 .. DeviceAttr::max_qp_wr
  uint32_t signal_period = 0;      // power of two <= sq_depth/2; 0 = sq_depth/4
  uint32_t max_msg = 0;            // split transfers above this; 0 = the device's max
  RingPlacement rings = RingPlacement::Host;
  // Who posts: with Gpu, the posting bookkeeping (dev::SqState: indices and
  // locks that every posting thread hits with atomics) lives in GPU memory,
  // not across PCIe; host threads then can't post to this QP.
  // RingPlacement::Gpu implies it. GPU memory is taken on the current CUDA
  // device: create the QP with the posting kernels' device current.
  Posters posters = Posters::Host;
  uint64_t timeout_ms = 0;         // bound of device-verb waits; 0 = $KINET_TIMEOUT_MS or 10000
};

class QueuePair {
 public:
  virtual ~QueuePair() = default;
  virtual uint32_t qpn() const = 0;
  virtual QpState state() const = 0;
  virtual QpInfo info() const = 0;
  // The transitions the hardware needs, checked in order.
  // to_init: RESET -> INIT; `remote_access` = the remote operations this QP accepts.
  virtual void to_init(uint32_t remote_access) = 0;
  virtual void to_rtr(const QpInfo& remote) = 0;  // INIT -> RTR, bound to the peer
  virtual void to_rts() = 0;                      // RTR -> RTS
  virtual void to_error() = 0;                    // any -> ERROR (outstanding WQEs are flushed)
  // RESET -> INIT -> RTR -> RTS in one call.
  void connect(const QpInfo& remote, uint32_t remote_access = kAccessAll) {
    to_init(remote_access);
    to_rtr(remote);
    to_rts();
  }
  // Device handle for kernels and host threads. Valid while this object lives.
  virtual dev::QpHandle handle() const = 0;
  // Human-readable description of the first error CQE (empty if none), e.g.
  // "WQE 17 RDMA_WRITE 4096 B: rkey 0x1234 is not registered on emu1".
  virtual std::string last_error() const = 0;
};

class ProtectionDomain {
 public:
  virtual ~ProtectionDomain() = default;
  // Registers [addr, addr+len) (host or GPU memory). Throws on a null or
  // empty range, or GPU memory on a device that can't reach it.
  virtual std::unique_ptr<MemoryRegion> reg_mr(void* addr, size_t len, uint32_t access) = 0;
  virtual std::unique_ptr<QueuePair> create_qp(const QpConfig& cfg = {}) = 0;
};

struct DeviceOptions {
  uint32_t emu_max_msg = 1u << 30;  // emu: largest message per WQE (as a NIC's max_msg_sz)
};

class Device {
 public:
  virtual ~Device() = default;
  // Opens a device by name: "emu" (a new software NIC, named emuN), "emuN",
  // or an RDMA device name (mlx5 provider, when built). Throws NotFound.
  static std::unique_ptr<Device> open(std::string_view name = "emu", const DeviceOptions& opt = {});
  virtual const DeviceAttr& attr() const = 0;
  const std::string& name() const { return attr().name; }
  virtual std::unique_ptr<ProtectionDomain> alloc_pd() = 0;
};

// Wall-clock bound of waits, from $KINET_TIMEOUT_MS (default 10000 ms).
uint64_t default_timeout_ms();

// "MAJOR.MINOR.PATCH" of the library linked in (KINET_VERSION_STRING in
// <kinet/version.hpp> is the version compiled against).
const char* version();

}  // namespace kinet
