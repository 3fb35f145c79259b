// kinet — the mlx5 provider on real hardware: rdma-core's entry-point tables
// and device opening (library kinet_mlx5, which links libibverbs and libmlx5).
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "kinet/kinet.hpp"
#include "providers/mlx5/devx.hpp"
#include "providers/mlx5/verbs_ops.hpp"

struct ibv_device;

namespace kinet::mlx5 {
// VerbsOps over libibverbs + mlx5dv. query_port's GID (RoCE): $KINET_GID_INDEX
// when set, else the first RoCE v2 entry, preferring an IPv4-mapped one.
const VerbsOps& rdma_core_verbs();
// Opens RDMA device `name` ("mlx5_0"), or with "auto" the first one mlx5dv
// supports, with DevX, as an mlx5 provider Device. Throws NotFound naming the
// devices present, NotSupported for a device that is not mlx5 or refuses DevX.
std::unique_ptr<Device> open_rdma_core_device(std::string_view name);

// What open_listed_device opened: ctx null with err = its errno when `open` failed.
struct ListedDevice {
  ibv_context* ctx = nullptr;
  std::string name;  // rdma-core's name of the device found
  int err = 0;
};
// Finds RDMA device `name` ("mlx5_0", or "auto": the first one mlx5dv
// supports) in rdma-core's list and opens it with `open` (null with errno set
// on failure) before the list is freed. Errors start with `what`: NotFound
// "<what>: no such RDMA device..." naming the devices present, NotSupported
// "<what>: <device> is not an mlx5 device (<driver> drives ConnectX only)".
// An `open` failure is the caller's to word (ctx null, err set).
ListedDevice open_listed_device(std::string_view name, const std::string& what, const char* driver,
                                ibv_context* (*open)(ibv_device*));
}  // namespace kinet::mlx5
