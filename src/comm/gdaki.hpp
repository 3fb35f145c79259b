// kinet — the communicator's gdaki path, host side: the NIC, its PD, one RC
// QP per gdaki peer and the scratch its atomics return values into. Used by
// src/comm/comm.cpp (kinet::Comm), which decides the paths.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kinet/bootstrap.hpp"
#include "kinet/comm.hpp"
#include "kinet/kinet.hpp"

namespace kinet::comm_gdaki {

// The NIC of the gdaki path for a Comm in `mode` (gdaki or auto; other
// modes: null, text empty), or null and *text says why there is none. Auto
// keeps a hardware NIC only (a ConnectX; not the software NIC behind
// mlx5_emu): the software NIC serves when asked (path gdaki, or
// CommConfig::device naming it). On success *text is "NAME (PROVIDER)".
std::unique_ptr<Device> open_nic(const std::string& mode, const CommConfig& cfg, std::string* text);

// One rank's gdaki resources. Teardown: close_qps() before the windows'
// MRs go (a QP's outstanding WQEs are flushed, promptly also with a lost
// peer), the rest (scratch MR and memory, PD, device) in the destructor.
struct Peers {
  std::unique_ptr<Device> device;
  std::unique_ptr<ProtectionDomain> pd;
  std::vector<std::unique_ptr<QueuePair>> qps;  // rank -> QP (gdaki peers only)
  uint8_t* scratch = nullptr;                   // per gdaki peer: atomic slots, then the signals' discard word
  bool scratch_on_gpu = false;
  std::unique_ptr<MemoryRegion> scratch_mr;

  Peers() = default;
  Peers(const Peers&) = delete;
  Peers& operator=(const Peers&) = delete;
  ~Peers();
  void close_qps() { qps.clear(); }
  QueuePair* qp(int r) const { return r >= 0 && static_cast<size_t>(r) < qps.size() ? qps[r].get() : nullptr; }

  // Collective. One RC QP per rank whose path[r] is Gdaki (send ring
  // cfg.slots deep, at most the device's max_qp_wr; rings and posters in GPU
  // memory when `gpu`), QP infos exchanged through `bs` (every rank sends one
  // blob per rank, empty where the path is not gdaki), each QP connected to
  // its peer's with every remote access, then a barrier (no WQE flows before
  // both ends are connected); the scratch registered on the PD; peers[r]'s
  // qp, scratch_lkey, atomic_scratch and put_scratch (the discard word)
  // filled. No gdaki peer: the device is dropped. `exchange` must be the
  // same on every rank (the Comm passes whether any two ranks opened a NIC):
  // false, nothing else happens; true, every rank takes part in both
  // exchanges, also one without gdaki peers or whose own part failed, and a
  // failure on any rank throws on every rank (comm/collective.hpp), so that
  // the bootstrap's collectives stay in step.
  // Throws InvalidArgument for a malformed peer blob (naming the rank), and
  // what connecting threw, prefixed with the peer.
  void connect(Bootstrap& bs, const std::vector<uint32_t>& path, const CommConfig& cfg, bool gpu,
               uint64_t timeout_ns, dev::CommPeer* peers, bool exchange);
};

}  // namespace kinet::comm_gdaki
