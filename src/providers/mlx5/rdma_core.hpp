// kinet — the mlx5 provider on real hardware: rdma-core's entry-point tables
// and device opening (library kinet_mlx5, which links libibverbs and libmlx5).
#pragma once
#include <memory>
#include <string_view>

#include "kinet/kinet.hpp"
#include "providers/mlx5/devx.hpp"
#include "providers/mlx5/verbs_ops.hpp"

namespace kinet::mlx5 {
// VerbsOps over libibverbs + mlx5dv. query_port's GID (RoCE): $KINET_GID_INDEX
// when set, else the first RoCE v2 entry, preferring an IPv4-mapped one.
const VerbsOps& rdma_core_verbs();
// Opens RDMA device `name` ("mlx5_0"), or with "auto" the first one mlx5dv
// supports, with DevX, as an mlx5 provider Device. Throws NotFound naming the
// devices present, NotSupported for a device that is not mlx5 or refuses DevX.
std::unique_ptr<Device> open_rdma_core_device(std::string_view name);
}  // namespace kinet::mlx5
