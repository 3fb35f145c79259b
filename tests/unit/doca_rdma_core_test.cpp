// SDK mode's entry for real ConnectX devices (doca::open_rdma_core_device) on
// a machine without an RDMA device: with DOCA_SDK_LIB_PATH unset the open
// implementation answers, with a (stand-in) SDK loaded SDK mode answers. Each
// case runs in a fresh process: the variable is read once per process.
#include <gtest/gtest.h>

#include <infiniband/verbs.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "providers/doca/rdma_core.hpp"
#include "../doca_stub/stub_dir.hpp"

namespace {
using kinet::test::kStubs;

void child(const char* dir, const char* name) {
  if (dir) setenv("DOCA_SDK_LIB_PATH", dir, 1);
  else unsetenv("DOCA_SDK_LIB_PATH");
  setenv("KINET_LOG_LEVEL", "error", 1);
  try {
    kinet::doca::open_rdma_core_device(name);
    std::fprintf(stderr, "opened\n");
  } catch (const kinet::Error& e) {
    std::fprintf(stderr, "%s: %s\n", kinet::error_code_name(e.code()), e.what());
  }
  std::exit(0);
}

class DocaRdmaCore : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list) ibv_free_device_list(list);
    if (n > 0) GTEST_SKIP() << n << " RDMA devices present: the hw suite opens them";
  }
};

TEST_F(DocaRdmaCore, WithoutTheSdkTheOpenImplementationAnswers) {
  EXPECT_EXIT(child(nullptr, "mlx5_0"), ::testing::ExitedWithCode(0), "^not found: open mlx5_0: no such RDMA device");
}

TEST_F(DocaRdmaCore, WithTheSdkSdkModeAnswers) {
  const std::string dir = kStubs + "/complete";
  EXPECT_EXIT(child(dir.c_str(), "mlx5_0"), ::testing::ExitedWithCode(0),
              "^not found: open mlx5_0 in DOCA SDK mode: no such RDMA device");
  EXPECT_EXIT(child(dir.c_str(), "auto"), ::testing::ExitedWithCode(0),
              "^not found: open auto in DOCA SDK mode: no such RDMA device");
}

TEST_F(DocaRdmaCore, BrokenSdkFallsBackToTheOpenImplementation) {
  const std::string dir = kStubs + "/no_qp_modify";
  EXPECT_EXIT(child(dir.c_str(), "mlx5_0"), ::testing::ExitedWithCode(0),
              "^not found: open mlx5_0: no such RDMA device");
}
}  // namespace
