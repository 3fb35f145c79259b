// kinet — the communicator: ranks, symmetric windows and one device API
// (kinet/device/comm.cuh) that reaches every peer through the best path.
//
//   auto bs = Bootstrap::init(id, rank, nranks);    // or Bootstrap::from_mpi()
//   Comm comm(*bs);                                 // collective
//   CommWindow& w = comm.alloc_symmetric(1 << 20);  // collective
//   kernel<<<...>>>(comm.device_handle(), w.handle());
//   std::puts(comm.report().c_str());               // which path each peer got, and why
//
// Paths, chosen per peer when the Comm is created (dev::CommPath):
//   self   the own rank.
//   p2p    same host, windows in GPU memory, the peer's windows mapped here
//          through CUDA IPC (cudaIpcGetMemHandle / cudaIpcOpenMemHandle, the
//          handles exchanged through the bootstrap).
//   gdaki  one RC QP per peer on the Comm's NIC (CommConfig::device): kernels
//          post WQEs and ring the doorbell themselves (kinet/device/qp.cuh).
//          Every window is registered on the NIC's PD; QP infos and keys
//          travel through the bootstrap.
//   proxy  always possible: a kinet::Proxy thread executes descriptors on a
//          kinet::Transport (CommConfig::transport / KINET_TRANSPORT).
// KINET_COMM_PATH (or CommConfig::path): auto (p2p where possible, else
// gdaki where both ends opened a hardware NIC, else proxy; the software NIC
// only when CommConfig::device names it), proxy (never p2p or gdaki), p2p (p2p
// to every other rank, else the constructor throws NotSupported naming the
// peer and why), gdaki (gdaki to every other rank, on the device
// CommConfig::device names, "auto" = Device::open("auto"): a ConnectX, else
// the software NIC; NotSupported naming the peer and why where a rank has no
// NIC). The Comm's transport is opened in every case: it serves the proxy
// peers and tells the monitor thread when a peer is lost.
//
// Memory: windows live in GPU memory when the Comm uses the GPU
// (CommConfig::memory; Auto: when CUDA sees a GPU), in host memory otherwise;
// then host threads run the device API (the CPU-only configuration and its
// tests). Kernels need the GPU configuration (the proxy's posting counters
// live in GPU memory then, and host threads can't post).
//
// Collective calls (the constructor, alloc_symmetric, register_window,
// barrier) must be made by every rank in the same order; they are bounded by
// the bootstrap's timeout and throw kinet::Error naming the rank at fault.
// A call that fails on some rank before its exchange (a bad argument there,
// an allocation that failed) fails on every rank, and the ranks stay in step
// for the next collective: the failing rank still takes part in the
// exchange. It throws its own error (its code, its text); the other ranks
// throw the first failing rank's code, naming each failing rank (the first
// four) and its reason ("comm rank 0: window 1: rank 1 failed: comm rank 1:
// window 1: 0 bytes (every rank fails this call)").
// Destruction is local: call barrier() first so that no peer still targets
// this rank's windows; a peer that targets them later sees "peer lost".
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kinet/bootstrap.hpp"
#include "kinet/device/comm.cuh"
#include "kinet/kinet.hpp"

namespace kinet {

class Transport;
class Proxy;

struct CommConfig {
  std::string transport;               // Transport provider; empty: KINET_TRANSPORT (transport.hpp)
  std::string path;                    // "auto", "proxy", "p2p", "gdaki"; empty: KINET_COMM_PATH, default auto
  uint32_t slots = 1024;               // descriptor ring per proxy peer (a power of two, 2..2^20)
  std::chrono::milliseconds timeout{0};  // bound of every device-side wait; 0: KINET_TIMEOUT_MS
  enum class Memory : uint8_t { Auto, Host, Gpu } memory = Memory::Auto;
  // How often the monitor thread asks the transport whether a peer was lost.
  std::chrono::milliseconds monitor_period{5};
  // The gdaki path's NIC (Device::open's name): "auto" (empty too) = a
  // ConnectX if there is one; path gdaki then also takes the software NIC,
  // path auto does not. "emu": the software NIC (tests, CI); "mlx5_0": that one.
  std::string device = "auto";
  // The software NIC's fabric between the ranks' processes; FromEnv:
  // $KINET_EMU_FABRIC, and when that is unset Auto (shm on one host, else tcp).
  DeviceOptions::Fabric emu_fabric = DeviceOptions::Fabric::FromEnv;
  // Local-completion counters of every window made without its own count
  // (the `counters` argument of alloc_symmetric / register_window), at most
  // kMaxCounters; kinet/device/comm.cuh "Counters" says what they count.
  // 0: none, and nothing is allocated for them.
  uint32_t counters = 0;
  static constexpr uint32_t kMaxCounters = 1u << 16;
};

// One symmetric window: every rank has a part of bytes() bytes. Owned by
// its Comm, valid until the Comm is destroyed.
class CommWindow {
 public:
  ~CommWindow();
  dev::WindowHandle handle() const { return h_; }
  void* local() const { return h_.local; }
  size_t bytes() const { return h_.bytes; }
  uint32_t id() const { return h_.id; }
  bool gpu() const { return gpu_; }

  // Local-completion counters (kinet/device/comm.cuh "Counters"), in this
  // rank's memory (GPU memory when the Comm uses the GPU).
  uint32_t counters() const { return h_.ncounters; }
  // Counter i as last credited: the device API credits completions when it
  // progresses (read_counter, wait_counter, quiet, ...), so between those
  // this is a lower bound. Throws InvalidArgument for i >= counters().
  uint64_t counter(uint32_t i) const;
  // Sets counter i to value and clears its failure (as dev::reset_counter):
  // operations counted on it that are still in flight add to the new value.
  // Throws InvalidArgument for i >= counters().
  void reset_counter(uint32_t i, uint64_t value = 0);

  struct Impl;

 private:
  friend class Comm;
  CommWindow() = default;
  void publish_peers(int size);  // the per-peer table, copied to GPU memory
  dev::WindowHandle h_{};
  bool gpu_ = false;
  std::unique_ptr<Impl> impl_;
};

class Comm {
 public:
  // Collective over every rank of `bs`, which must outlive the Comm. Throws
  // InvalidArgument (a bad CommConfig field, named), NotSupported (memory Gpu
  // without a GPU; path p2p where a peer can't be mapped, or path gdaki where
  // a rank has no NIC, naming the peer and why; a transport that can't start
  // here), System (a peer unreachable, a bootstrap timeout), and what
  // connecting a gdaki QP threw (NotFound: the peer's NIC unreachable on the
  // software NIC's fabric), prefixed with the peer. What fails on one rank
  // before an exchange (a bad CommConfig field there, ...) fails on every
  // rank, as "Collective calls" above says.
  explicit Comm(Bootstrap& bs, const CommConfig& cfg = {});
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const;
  int size() const;
  bool gpu() const;  // windows in GPU memory, kernels post

  // Collective: a window of `bytes` bytes on every rank (the same on each,
  // else InvalidArgument naming the ranks that differ), zeroed, with
  // `counters` local-completion counters (kFromConfig: CommConfig::counters;
  // local to each rank, they need not match). Throws InvalidArgument (0
  // bytes, counters above CommConfig::kMaxCounters), ResourceExhausted,
  // System (a peer's window could not be mapped on a p2p path, naming the
  // peer). Any of these but the last, on any rank, throws on every rank (see
  // "Collective calls" above), and no window is made.
  static constexpr uint32_t kFromConfig = ~0u;
  CommWindow& alloc_symmetric(size_t bytes, uint32_t counters = kFromConfig);
  // Collective: the caller's memory [ptr, ptr + bytes) as a window (GPU
  // memory when ptr is, else host memory); it must stay valid while the Comm
  // lives. Same errors as alloc_symmetric, and InvalidArgument for a null ptr.
  CommWindow& register_window(void* ptr, size_t bytes, uint32_t counters = kFromConfig);

  // By value to kernels; valid while the Comm lives.
  dev::CommHandle device_handle() const;

  dev::CommPath path(int peer) const;        // throws InvalidArgument for a peer out of range
  std::string path_reason(int peer) const;   // why that path ("same host, GPU memory mapped by CUDA IPC")
  // One line per peer: "rank 0 -> rank 1: proxy over tcp (...): <reason>".
  std::string report() const;

  // Collective control-path barrier (through the bootstrap): every rank
  // reached it. Kernels use dev::barrier for data ordering.
  void barrier();

  // This rank's first device-side failure, spelled out (which operation,
  // peer, window, offset, what was waited for and seen, the channel's and
  // the transport's reason); empty while there is none.
  std::string device_error() const;
  // Why `peer` failed ("peer lost: ..."), empty while it is healthy.
  std::string peer_error(int peer) const;

  Transport& transport() const;
  Proxy& proxy() const;

  struct Impl;

 private:
  CommWindow& add_window(void* ptr, size_t bytes, bool owned, uint32_t counters);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kinet
