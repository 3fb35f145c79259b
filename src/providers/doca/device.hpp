// kinet — SDK mode's devices: Device / ProtectionDomain / MemoryRegion /
// QueuePair whose control-path objects are made by the DOCA SDK.
//
// Split of the work, as DOCA's own GPUNetIO workflow does it (README of
// github NVIDIA-DOCA/gpunetio: ibv_open_device, ibv_alloc_pd, ibv_reg_mr, then
// doca_* for the rest): the device context, PDs and data MRs come from the
// open side's VerbsOps (rdma-core on hardware); the SDK then takes them over
// through its bridge calls and makes everything else:
//   device     doca_verbs_bridge_verbs_context_import(ctx); attributes by
//              doca_verbs_bridge_verbs_query_device
//   per PD     ibv PD -> doca_rdma_bridge_open_dev_from_pd (the doca_dev that
//              owns UMEMs and UARs) and doca_verbs_bridge_verbs_pd_import
//   per QP     one block of pinned host memory (send ring, CQ, CQ and QP
//              doorbell records, as the mlx5 provider lays it out) registered
//              with doca_umem_create; a non-cached UAR (doca_uar_create); the
//              CQ and the RC QP created on that external UMEM and UAR
//              (doca_verbs_cq_create, doca_verbs_qp_create);
//              RST->INIT->RTR->RTS with doca_verbs_qp_modify.
//   handle     dev::QpHandle filled from what the SDK reports (qpn, where it
//              put the send ring, both doorbell records and the doorbell
//              register), each checked against the block kinet gave it.
// The handle is the one every provider hands the device verbs, so kernels
// don't change. QpInfo says provider 2 (mlx5): the wire is ConnectX RC either
// way, so an SDK-mode QP connects to an open-mode one.
//
// Every SDK error is a kinet::Error naming the call and its doca_error_t
// (Sdk::check); nothing falls back once a device is open in SDK mode.
// Not yet: rings in GPU memory and GPU posters (doca_gpu_create and the
// GPU-side UAR export): create_qp says NotSupported.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "kinet/kinet.hpp"
#include "providers/doca/sdk.hpp"
#include "providers/mlx5/verbs_ops.hpp"

namespace kinet::doca {

struct Backend {
  ibv_context* ctx = nullptr;  // owned from here on: closed with verbs->close
  std::string name;            // "mlx5_0": prefixes every error
  const mlx5::VerbsOps* verbs = nullptr;
};

// Opens `b` in SDK mode. Takes ownership of b.ctx (closed when the Device and
// everything made from it are gone, or at once when this throws). Throws the
// SDK's errors (Sdk::check), System when port 1 can't be queried.
std::unique_ptr<Device> open_device(std::shared_ptr<const Sdk> sdk, const Backend& b);

// "mlx5_emu" / "mlx5_emuN" in SDK mode: a new software NIC's verbs under the
// SDK `sdk`. Only a stand-in SDK can drive it (the real one can't take the
// software NIC's objects): NotSupported unless sdk->standin().
std::unique_ptr<Device> open_emu_device(std::shared_ptr<const Sdk> sdk, std::string_view name,
                                        const DeviceOptions& opt = {});
}  // namespace kinet::doca
