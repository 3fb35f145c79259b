// The hw suite's device choice (tests/hw/hw_device.hpp) on fabricated
// rdma-core answers: the device it drives, or the exact reason every hw test
// is skipped. And this machine's own answer, whatever it is, is one of the two.
#include <gtest/gtest.h>

#include "hw_device.hpp"

namespace {
using kinet::test::hw::choose_device;
using kinet::test::hw::Probe;

Probe listing(std::vector<Probe::Listed> devs) {
  Probe p;
  p.rdma_core = p.listed = true;
  p.devices = std::move(devs);
  return p;
}

TEST(HwDeviceChoice, NoRdmaCoreSaysWhichFile) {
  Probe p;
  p.rdma_core_why = "libibverbs.so.1 could not be loaded (libibverbs.so.1: cannot open shared object file)";
  auto c = choose_device("", p);
  EXPECT_EQ(c.device, "");
  EXPECT_EQ(c.skip, "no libibverbs/libmlx5: " + p.rdma_core_why);
  c = choose_device("mlx5_0", p);
  EXPECT_EQ(c.skip, "no libibverbs/libmlx5 (KINET_HW_DEVICE=mlx5_0): " + p.rdma_core_why);
}

TEST(HwDeviceChoice, ListFailureAndEmptyListAreNoDevice) {
  Probe p;
  p.rdma_core = true;
  p.list_errno = ENOSYS;
  EXPECT_EQ(choose_device("", p).skip, std::string("no RDMA device: ibv_get_device_list failed (errno 38: ") +
                                           std::strerror(ENOSYS) + "; the kernel has no RDMA support loaded)");
  p.list_errno = EACCES;
  EXPECT_EQ(choose_device("", p).skip,
            std::string("no RDMA device: ibv_get_device_list failed (errno 13: ") + std::strerror(EACCES) + ")");
  p.listed = true;
  EXPECT_EQ(choose_device("", p).skip, "no RDMA device: rdma-core lists none");
  EXPECT_EQ(choose_device("mlx5_1", p).skip, "no RDMA device (KINET_HW_DEVICE=mlx5_1): rdma-core lists none");
}

TEST(HwDeviceChoice, DefaultIsTheFirstMlx5Device) {
  auto c = choose_device("", listing({{"rxe0", false}, {"mlx5_3", true}, {"mlx5_0", true}}));
  EXPECT_EQ(c.device, "mlx5_3");
  EXPECT_EQ(c.skip, "");
  c = choose_device("", listing({{"rxe0", false}, {"siw0", false}}));
  EXPECT_EQ(c.device, "");
  EXPECT_EQ(c.skip,
            "device not mlx5: none of the RDMA devices rdma-core lists (rxe0, siw0) is supported by mlx5dv; kinet's "
            "mlx5 provider drives ConnectX only");
}

TEST(HwDeviceChoice, NamedDeviceMustBeListedAndMlx5) {
  const Probe p = listing({{"rxe0", false}, {"mlx5_0", true}, {"mlx5_1", true}});
  EXPECT_EQ(choose_device("mlx5_1", p).device, "mlx5_1");
  auto c = choose_device("mlx5_2", p);
  EXPECT_EQ(c.device, "");
  EXPECT_EQ(c.skip,
            "no RDMA device named mlx5_2 (KINET_HW_DEVICE; rdma-core lists rxe0, mlx5_0 (mlx5), mlx5_1 (mlx5))");
  c = choose_device("rxe0", p);
  EXPECT_EQ(c.device, "");
  EXPECT_EQ(c.skip,
            "device not mlx5: rxe0 (KINET_HW_DEVICE) is not supported by mlx5dv; kinet's mlx5 provider drives "
            "ConnectX only");
  // A prefix of a listed name is not that name.
  EXPECT_EQ(choose_device("mlx5_", p).device, "");
}

TEST(HwDeviceChoice, Mlx5EmuNeedsNoRdmaCore) {
  const auto c = choose_device("mlx5_emu", Probe{});
  EXPECT_EQ(c.device, "mlx5_emu");
  EXPECT_EQ(c.skip, "");
  // Only that exact name: an mlx5_emuN is looked up like any other.
  EXPECT_EQ(choose_device("mlx5_emu0", Probe{}).device, "");
}

TEST(HwDeviceChoice, ThisMachineGetsADeviceOrAReason) {
  const auto& c = kinet::test::hw::chosen();
  EXPECT_NE(c.device.empty(), c.skip.empty()) << "device '" << c.device << "', skip '" << c.skip << "'";
  std::printf("hw suite here: %s\n", c.skip.empty() ? ("device " + c.device).c_str() : ("skipped: " + c.skip).c_str());
}
}  // namespace
