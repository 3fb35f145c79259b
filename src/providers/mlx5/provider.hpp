// kinet — the mlx5 provider: Device / ProtectionDomain / MemoryRegion /
// QueuePair of a ConnectX, over two tables of entry points: DevxOps (command
// mailboxes, UMEM, UAR: devx.hpp) and VerbsOps (PD, MR, port: verbs_ops.hpp).
// rdma-core supplies both on hardware; the software NIC supplies both for
// "mlx5_emu", so CI runs this very code end to end.
//
// What it does with them: reads QUERY_HCA_CAP (max_qp_wr = 2^log_max_qp_sz,
// at most 2^15; max_msg = 2^log_max_msg, at most 2^30) and the port; per QP
// puts the send ring, CQ and both doorbell records in one block of pinned host
// memory registered as one UMEM (RingPlacement::Host), or with
// RingPlacement::Gpu in GPU memory (on hardware only: Backend::gpu_rings) as a
// UMEM over its dma-buf (mlx5dv_devx_umem_reg_ex) when the CUDA driver exports
// one and rdma-core takes it, else the plain registration (nvidia-peermem);
// GPU rings need a doorbell the GPU rings itself (Uar or BlueFlame: the
// CPU-assisted thread can't watch a record in GPU memory). Untested on
// hardware so far (no ConnectX+GPU machine yet). It allocates a UAR whose doorbell register becomes dev::QpHandle::db,
// creates the CQ then the QP with the builders, and moves RST->INIT->RTR->RTS
// with them (RoCE v2: the peer's GID from QpInfo; InfiniBand: its LID). The
// handle is the one the device verbs take on every provider.
// Doorbell modes (QpConfig::doorbell, core/doorbell.hpp): Uar and CpuAssisted
// use a non-cached UAR (the device's CPU doorbell thread rings CpuAssisted
// QPs from their doorbell record), BlueFlame a BlueFlame-type UAR whose
// register is the 64-byte window.
//
// Differences from the "emu" provider's contracts (kinet.hpp): a PD lives
// until its last MR and QP are gone (the device refuses to free a PD in use),
// so destroying the ProtectionDomain object neither invalidates keys nor
// moves QPs to ERROR. last_error() reports what the device verbs recorded
// (dev::SqState: the first error CQE or local failure); the NIC gives no text.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "kinet/kinet.hpp"
#include "providers/mlx5/devx.hpp"
#include "providers/mlx5/verbs_ops.hpp"

namespace kinet::mlx5 {

// An open device and the tables that reach it.
struct Backend {
  ibv_context* ctx = nullptr;
  std::string name;  // "mlx5_0", "mlx5_emu0": prefixes every error
  const DevxOps* devx = nullptr;
  const VerbsOps* verbs = nullptr;
  // Whether kernels can reach a UAR's doorbell register (false: uar_gpu_why
  // says why). The software NIC's is pinned host memory; a ConnectX's is PCIe
  // I/O memory (uar_is_io_memory) that each GPU-posted QP maps into the GPU
  // (cuda::map_io_memory); when that fails, Auto falls back to CpuAssisted
  // with a log line and an explicit mode is NotSupported (core/doorbell.hpp).
  bool uar_gpu_mappable = false;
  std::string uar_gpu_why = "this backend's UAR can't be mapped into the GPU";
  bool uar_is_io_memory = false;
  // Whether the NIC reads rings from GPU memory (RingPlacement::Gpu: a UMEM
  // over GPU memory); false: gpu_rings_why says why create_qp refuses them.
  bool gpu_rings = false;
  std::string gpu_rings_why = "this backend reads rings from host memory only";
};

// Takes ownership of b.ctx: it is closed (verbs->close) once the Device and
// every object made from it are gone, or at once when this throws. Throws the
// Devx layer's errors for the capability queries, NotSupported when the device
// lacks RoCE/InfiniBand RC essentials (atomics, 64-byte CQEs).
std::unique_ptr<Device> open_device(const Backend& b);

// "mlx5_emu" (a new software NIC, named mlx5_emuN) or "mlx5_emuN": this
// provider over the software NIC's DevX entry point (devx_nic.hpp), which
// takes opt's emu_* limits (emu_max_msg: a power of two). `devx` replaces
// the NIC's DevX table when not null (tests wrap it to mutate mailboxes on
// their way to the NIC).
std::unique_ptr<Device> open_emu_device(std::string_view name, const DeviceOptions& opt = {},
                                        const DevxOps* devx = nullptr);
}  // namespace kinet::mlx5
