// kinet emu — the software NIC's DevX entry point: a ConnectX as the mlx5
// provider sees it through DevX and verbs.
//
// The NIC reads every command mailbox with its own decoder (devx/devx_decode)
// and executes it: CREATE_CQ / CREATE_QP put the CQ, the send ring and both
// doorbell records in UMEM (memory the provider registered, which the NIC
// uses in place), the QP's doorbell word is a UAR the NIC hands out, and the
// QP runs on the same engine as the "emu" provider's QPs (engine.cpp). Modify
// commands move the QP through RST->INIT->RTR->RTS; ERR and RST from any
// state. A command the NIC rejects gets the PRM status and syndrome a device
// would give (devx_decode.hpp's, plus BadResource / ResourceBusy /
// NoResources / BadQpState below), and the reason is logged.
//
// Port: one, RoCE v2 (Ethernet). The GID at index 0 is fe80::/64 with the
// NIC's fabric address in the low 8 bytes; INIT2RTR reaches the peer named by
// the remote GID that way (an unknown GID answers nothing: transport retry
// error CQEs, as on a real network).
//
// Limits of the software NIC (BadParam, logged): one QP per CQ, CQ size equal
// to the SQ size, one QP per UAR, rings in host memory.
#pragma once
#include <string>
#include <string_view>

#include "kinet/kinet.hpp"
#include "providers/mlx5/devx.hpp"
#include "providers/mlx5/verbs_ops.hpp"

namespace kinet::emu {

// The NIC's capabilities as QUERY_HCA_CAP reports them.
inline constexpr uint8_t kDevxLogMaxQpSz = 15;  // the engine's largest ring (emu's kMaxQpWr)
inline constexpr uint8_t kDevxLogMaxMsg = 30;

struct DevxNicHandle {
  ibv_context* ctx = nullptr;  // close with verbs->close
  std::string name;            // "emuN": the NIC's fabric name
};

// Opens a new software NIC attached to this process's fabric: `want` = "emu"
// (first free emuN) or "emuN". From `opt`: emu_max_msg (a power of two in
// [1, 2^30]: QUERY_HCA_CAP reports it as log_max_msg), emu_max_mr and
// emu_max_qp (as for "emu"). Throws InvalidArgument for those, BadState if
// the name is taken, ResourceExhausted if its engine thread can't start.
DevxNicHandle open_devx_nic(std::string_view want, const DeviceOptions& opt = {});
const mlx5::DevxOps& devx_nic_ops();
const mlx5::VerbsOps& devx_nic_verbs();
}  // namespace kinet::emu
