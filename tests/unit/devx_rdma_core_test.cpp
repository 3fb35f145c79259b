// kinet_mlx5 links against rdma-core and fills every DevX entry point. (The
// calls themselves need a ConnectX device: the hw suite runs them.)
#include <gtest/gtest.h>

#include <infiniband/verbs.h>

#include "providers/mlx5/devx.hpp"
#include "providers/mlx5/rdma_core.hpp"

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

TEST(DevxRdmaCore, EveryVerbsEntryPointIsSet) {
  const kinet::mlx5::VerbsOps& v = kinet::mlx5::rdma_core_verbs();
  EXPECT_NE(v.close, nullptr);
  EXPECT_NE(v.alloc_pd, nullptr);
  EXPECT_NE(v.dealloc_pd, nullptr);
  EXPECT_NE(v.reg_mr, nullptr);
  EXPECT_NE(v.dereg_mr, nullptr);
  EXPECT_NE(v.query_port, nullptr);
}

// Without an RDMA device, "auto" and a named device are NotFound, saying so.
TEST(DevxRdmaCore, NoDeviceIsNotFound) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list) ibv_free_device_list(list);
  if (n > 0) GTEST_SKIP() << n << " RDMA devices present: the hw suite opens them";
  for (const char* name : {"auto", "mlx5_0"}) {
    try {
      kinet::mlx5::open_rdma_core_device(name);
      ADD_FAILURE() << name << " opened with no RDMA device present";
    } catch (const kinet::Error& e) {
      EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(kinet::ErrorCode::NotFound)) << e.what();
      EXPECT_NE(std::string(e.what()).find("no such RDMA device"), std::string::npos) << e.what();
    }
  }
}
