// kinet_mlx5 links against rdma-core and fills every DevX entry point. (The
// calls themselves need a ConnectX device: the hw suite runs them.)
#include <gtest/gtest.h>

#include "providers/mlx5/devx.hpp"

TEST(DevxRdmaCore, EveryEntryPointIsSet) {
  const kinet::mlx5::DevxOps& o = kinet::mlx5::rdma_core_ops();
  EXPECT_NE(o.obj_create, nullptr);
  EXPECT_NE(o.obj_modify, nullptr);
  EXPECT_NE(o.obj_query, nullptr);
  EXPECT_NE(o.obj_destroy, nullptr);
  EXPECT_NE(o.general_cmd, nullptr);
  EXPECT_NE(o.umem_reg, nullptr);
  EXPECT_NE(o.umem_dereg, nullptr);
  EXPECT_NE(o.alloc_uar, nullptr);
  EXPECT_NE(o.free_uar, nullptr);
}
