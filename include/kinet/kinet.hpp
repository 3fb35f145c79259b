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

// How posters ring a QP's doorbell (QpConfig::doorbell); see dev::DoorbellMode.
enum class Doorbell : uint8_t {
  Auto,         // $KINET_DOORBELL_MODE when set, else Uar when the posters reach the UAR, else CpuAssisted
  Uar,          // the 8-byte doorbell register (NotSupported if GPU posters can't map it)
  BlueFlame,    // the WQE copied into the BlueFlame window (NotSupported where there is none)
  CpuAssisted,  // posters write the doorbell record; a CPU thread of the provider rings
};

enum class QpState : uint8_t { Reset, Init, Rtr, Rts, Error };
const char* qp_state_name(QpState s);

struct DeviceAttr {
  std::string name;       // "emu0"
  std::string provider;   // "emu", "mlx5"
  uint32_t max_qp_wr;     // largest send ring
  uint32_t max_msg;       // largest message one WQE carries
  bool gpu_memory;        // can register and move GPU memory
  uint32_t max_mr = 0;    // most memory regions alive at once
  uint32_t max_qp = 0;    // most QPs alive at once
};

// What a peer needs to access a memory region remotely, exchanged out of
// band as a blob (MemoryRegion::remote_key()): serialize() gives a 48-byte
// header, host byte order,
//   0 u32 magic   4 u16 version (1)   6 u16 provider (1 = emu, 2 = mlx5)
//   8 u64 node (emu: the NIC's fabric address; mlx5: 0)
//   16 u64 addr   24 u64 length   32 u32 rkey (host order)   36 u32 access
//   40 u16 packed length   42..47 reserved (0)
// followed by `packed`: a transport's own packed key (e.g. a UCX rkey
// buffer), empty for emu and mlx5.
struct RemoteKey {
  static constexpr uint32_t kMagic = 0x524e4b31;  // "1KNR"
  static constexpr size_t kHeaderBytes = 48;
  static constexpr size_t kMaxPacked = 1024;
  // provider: who issued the key.
  static constexpr uint16_t kEmu = 1, kMlx5 = 2, kTransport = 3;  // kTransport: kinet/transport.hpp
  uint16_t version = 1;
  uint16_t provider = 0;
  uint64_t node = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t rkey = 0;
  uint32_t access = 0;  // Access bits the region was registered with
  std::vector<uint8_t> packed;
  // The key as the device verbs take it (big-endian).
  Rkey key() const { return Rkey{detail::bswap32_constexpr(rkey)}; }
  // Whether [a, a + n) lies inside the region (n = 0: a inside or at its end).
  bool covers(uint64_t a, uint64_t n) const { return a >= addr && a - addr <= length && n <= length - (a - addr); }
  std::vector<uint8_t> serialize() const;
  // Throws InvalidArgument ("remote key: ...") naming the bad field: version
  // (1), provider (1 or 2), length (0, or addr + length past 2^64), access
  // (bits beyond kAccessAll), packed (over kMaxPacked bytes).
  void validate() const;
  // Checks every byte: at least the header, the magic and version before
  // any length, exactly header + the packed length it announces (no
  // trailing bytes), reserved bytes zero, then validate(). Throws
  // InvalidArgument saying which.
  static RemoteKey deserialize(const void* data, size_t len);
};

class MemoryRegion {
 public:
  // Deregisters. WQEs already executing against the region finish first; once
  // the destructor returns no byte moves into or out of it, and its keys never
  // match again (a stale key gets a protection / remote-access error).
  virtual ~MemoryRegion() = default;
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
  // The blob a peer needs to reach this region (RemoteKey). The default
  // describes an ibverbs region (provider mlx5, node 0); emu gives its NIC's
  // fabric address.
  virtual RemoteKey remote_key() const;
};

// What a peer needs to connect to a QP, exchanged out of band as a blob:
// serialize() gives a 64-byte header (the fixed fields below, host byte order,
// bytes 44..45 = the endpoint's length) followed by the endpoint's bytes.
struct QpInfo {
  static constexpr uint32_t kMagic = 0x504e4b31;  // "1KNP"
  static constexpr size_t kHeaderBytes = 64;
  static constexpr size_t kMaxEndpoint = 256;
  uint32_t magic;
  uint16_t version;
  uint16_t provider;   // 1 = emu, 2 = mlx5
  uint64_t node;       // emu: fabric address of the device (64 random bits); mlx5: subnet prefix
  uint8_t gid[16];     // mlx5: GID of the port; emu: unused
  uint32_t qpn;
  uint32_t psn;
  uint16_t lid;
  uint8_t mtu;         // IB MTU enum (1..5)
  uint8_t port;
  uint32_t reserved[5];  // zero
  // How another process reaches the QP's device: emu on the cross-process
  // fabric: "tcp 192.0.2.2:41234", "shm NAME host BOOT-ID netns INODE", or
  // both separated by ", " (DeviceOptions::Fabric; printable ASCII, at most
  // kMaxEndpoint bytes); empty when the device is reachable only in its own
  // process.
  std::string endpoint;
  std::vector<uint8_t> serialize() const;
  // Throws InvalidArgument naming the bad field: magic, version, provider
  // (1 or 2), qpn (1 .. 2^24-1), mtu (1..5), port (>= 1), reserved words
  // (0), endpoint (length, printable).
  void validate() const;
  // Checks every byte: at least the header, exactly header + the endpoint
  // length it announces (no trailing bytes), reserved bytes zero, then
  // validate(). Throws InvalidArgument saying which.
  static QpInfo deserialize(const void* data, size_t len);
};

struct QpConfig {
  uint32_t sq_depth = 256;         // power of two, 2 .. DeviceAttr::max_qp_wr
  uint32_t signal_period = 0;      // power of two <= sq_depth/2; 0 = sq_depth/4
  uint32_t max_msg = 0;            // split transfers above this; 0 = the device's max; larger: InvalidArgument
  RingPlacement rings = RingPlacement::Host;
  // Who posts: with Gpu, the posting bookkeeping (dev::SqState: indices and
  // locks that every posting thread hits with atomics) lives in GPU memory,
  // not across PCIe; host threads then can't post to this QP.
  // RingPlacement::Gpu implies it. GPU memory is taken on the current CUDA
  // device: create the QP with the posting kernels' device current.
  Posters posters = Posters::Host;
  // Bound of device-verb waits; 0 = $KINET_TIMEOUT_MS or 10000. Values past
  // 2^64 ns saturate (UINT64_MAX = practically unbounded).
  uint64_t timeout_ms = 0;
  // Doorbell mode (dev::QpHandle::db_mode says which one the QP got). Not
  // Auto: that mode or NotSupported; Auto: $KINET_DOORBELL_MODE
  // (auto|uar|bf|cpu), else Uar when the posters reach the doorbell page, else
  // CpuAssisted with one log line why. Any other value of the variable makes
  // create_qp throw InvalidArgument, whatever this field says.
  Doorbell doorbell = Doorbell::Auto;
};

// Every method but qpn(), state() and last_error() throws BadState ("emu0 was
// closed", "... protection domain was destroyed") once the QP's device or PD
// is gone.
class QueuePair {
 public:
  // Destroys the QP (as ibv_destroy_qp): it goes to ERROR, every WQE announced
  // and not yet executed completes with a flush CQE, and once the destructor
  // returns no byte moves on its behalf, on either side. Its rings are freed:
  // stop every thread and kernel using handle() before destroying it (a
  // concurrent wait() reads freed memory).
  virtual ~QueuePair() = default;
  virtual uint32_t qpn() const = 0;
  virtual QpState state() const = 0;
  virtual QpInfo info() const = 0;
  // The transitions the hardware needs, checked in order. Each is atomic: it
  // happens only from the state it needs (else BadState), so a concurrent
  // to_error() (or a fault found by the NIC) is never undone; nothing but
  // reset() leaves ERROR. A transition that throws leaves the state as it was.
  // to_init: RESET -> INIT; `remote_access` = the remote operations this QP accepts.
  virtual void to_init(uint32_t remote_access) = 0;
  virtual void to_rtr(const QpInfo& remote) = 0;  // INIT -> RTR, bound to the peer (remote.validate()d)
  virtual void to_rts() = 0;                      // RTR -> RTS
  virtual void to_error() = 0;                    // any -> ERROR (outstanding WQEs are flushed)
  // Any -> RESET, as IB allows: the QP answers no peer until connected again.
  // Call it with nothing in flight (after quiet() or the waits of what was
  // posted) and no thread using handle(): WQEs still outstanding are
  // discarded, and the rings start over empty: the posting state
  // (dev::SqState: indices from 0, a recorded device-side error) and the
  // error last_error() reports are cleared, so tickets from before the reset
  // mean nothing afterwards.
  virtual void reset() = 0;
  // RESET -> INIT -> RTR -> RTS in one call. If a step after to_init() fails,
  // the QP goes back to RESET (never left half-connected) and the error is
  // rethrown; if to_init() itself fails the state is untouched.
  void connect(const QpInfo& remote, uint32_t remote_access = kAccessAll) {
    to_init(remote_access);
    try {
      to_rtr(remote);
      to_rts();
    } catch (...) {
      try {
        reset();
      } catch (...) {  // the first error is the one to report
      }
      throw;
    }
  }
  // Device handle for kernels and host threads. Valid while this object lives.
  virtual dev::QpHandle handle() const = 0;
  // Human-readable description of the first error CQE, e.g.
  // "WQE 17 RDMA_WRITE 4096 B: rkey 0x1234 is not registered on emu1"; if
  // there is none, the first failure the device verbs recorded
  // (dev::SqState::local_error), e.g. "device verbs: timed out waiting for a
  // completion (status 12)"; else empty.
  virtual std::string last_error() const = 0;
};

class ProtectionDomain {
 public:
  virtual ~ProtectionDomain() = default;
  // Registers [addr, addr+len) (host or GPU memory). Throws InvalidArgument,
  // as ibv_reg_mr fails, on a null or empty range, one that wraps the address
  // space, host memory that is not mapped and readable throughout, or not
  // writable throughout when `access` has kLocalWrite; NotSupported for GPU
  // memory on a device that can't reach it; ResourceExhausted when
  // DeviceAttr::max_mr regions are alive. A freed key is not reused for the
  // next registration at its index (its 8-bit generation changes).
  virtual std::unique_ptr<MemoryRegion> reg_mr(void* addr, size_t len, uint32_t access) = 0;
  // ResourceExhausted when DeviceAttr::max_qp QPs are alive; QP numbers, like
  // keys, carry a generation.
  virtual std::unique_ptr<QueuePair> create_qp(const QpConfig& cfg = {}) = 0;
};
// Objects outlive their parents safely: a PD whose device was closed throws
// BadState ("emu0 was closed") from reg_mr/create_qp. Destroying a PD
// invalidates the keys of its MRs and moves its QPs to ERROR.

struct DeviceOptions {
  // emu: largest message per WQE, in [1, 2^30] (ConnectX's log_max_msg is 30).
  uint32_t emu_max_msg = 1u << 30;
  // emu: most MRs / QPs alive at once, in [1, 2^24-1] / [1, 2^16-1]. Keys
  // and QP numbers are (index << 8 | generation): small limits make indices
  // (and generation wrap) come around quickly, which tests use.
  uint32_t emu_max_mr = (1u << 24) - 1;
  uint32_t emu_max_qp = (1u << 16) - 1;
  // emu: whether the NIC is reachable from other processes. FromEnv reads
  // $KINET_EMU_FABRIC ("local", "tcp", "shm" or "auto"; unset = local).
  // Node addresses are then 64 random bits, QpInfo::endpoint says how the
  // NIC is reached, and a QP of it connects (to_rtr) to a QP of another
  // process given that QP's info. The process runs one listener per
  // transport, serving all its NICs:
  //   Tcp: a TCP listener (interface as the bootstrap picks it,
  //        $KINET_SOCKET_IFNAME); endpoint "tcp ADDRESS:PORT".
  //   Shm: shared-memory links with processes of the same host, i.e. the
  //        same boot id and network namespace (the listener is the abstract
  //        AF_UNIX name "kinet-shm/<process id>", which exists per network
  //        namespace); endpoint "shm NAME host BOOT-ID netns INODE". A peer
  //        elsewhere: to_rtr throws NotFound.
  //   Auto: both listeners; endpoint "tcp ..., shm ..."; connects over shm
  //        to a peer of the same host that offers it, else (or when shm
  //        fails) over TCP.
  // Faults are the same on every transport (peer lost, peer timeout).
  enum class Fabric : uint8_t { FromEnv, Local, Tcp, Shm, Auto };
  Fabric emu_fabric = Fabric::FromEnv;
};

class Device {
 public:
  virtual ~Device() = default;
  // Opens a device by name: "emu" (a new software NIC, named emuN), "emuN",
  // "mlx5_emu" / "mlx5_emuN" (the mlx5 provider, DevX commands and all, over a
  // new software NIC: provider "mlx5"), an RDMA device name such as "mlx5_0"
  // (the mlx5 provider on a real ConnectX; rdma-core is loaded at run time),
  // or "auto": the first ConnectX, else the software NIC (a log line says
  // why). Throws NotFound (no such device: the message names those present),
  // NotSupported (rdma-core missing, a device that is not mlx5 or refuses
  // DevX), InvalidArgument (options), ResourceExhausted (memory, threads).
  static std::unique_ptr<Device> open(std::string_view name = "emu", const DeviceOptions& opt = {});
  virtual const DeviceAttr& attr() const = 0;
  const std::string& name() const { return attr().name; }
  virtual std::unique_ptr<ProtectionDomain> alloc_pd() = 0;
};

// Wall-clock bound of waits, from $KINET_TIMEOUT_MS (default 10000 ms). A
// value that is not an unsigned integer ("-1", "12abc", >= 2^64) or is 0 (a
// bound that expires at once) logs a warning and gives 10000; huge values
// saturate where they are used (QpHandle::timeout_ns).
uint64_t default_timeout_ms();

// "MAJOR.MINOR.PATCH" of the library linked in (KINET_VERSION_STRING in
// <kinet/version.hpp> is the version compiled against).
const char* version();

}  // namespace kinet
