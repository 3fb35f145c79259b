// kinet hw suite — which RDMA device the hw tests drive, or exactly why they
// are skipped. $KINET_HW_DEVICE names the device ("mlx5_0"; "mlx5_emu" runs
// the suite on the mlx5 provider over the software NIC); unset, the first
// device rdma-core lists that mlx5dv supports (what kinet's mlx5 provider
// accepts). A device that exists and is mlx5 but fails to open is a failure,
// not a skip: the suite is there to find such problems.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "emu_fixture.hpp"

namespace kinet::test::hw {

// What rdma-core says about this machine (filled by probe()).
struct Probe {
  bool rdma_core = false;     // libibverbs and libmlx5 loaded
  std::string rdma_core_why;  // if not: which file or symbol is missing
  bool listed = false;        // ibv_get_device_list answered
  int list_errno = 0;         // if not: its errno
  struct Listed {
    std::string name;
    bool mlx5 = false;  // mlx5dv_is_supported
  };
  std::vector<Listed> devices;
};

// Exactly one of the two is set.
struct Choice {
  std::string device;  // the name to Device::open
  std::string skip;    // the reason every hw test is skipped
};

// Pure: the device for $KINET_HW_DEVICE = `requested` ("" = unset) on a
// machine that answers `p`. "mlx5_emu" is taken as is (no probe needed).
Choice choose_device(std::string_view requested, const Probe& p);

// This machine, through kinet's own rdma-core loader ($KINET_IBVERBS_LIB,
// $KINET_MLX5_LIB).
Probe probe();

// choose_device($KINET_HW_DEVICE, probe()), computed once per process.
const Choice& chosen();

// The chosen device on both sides of a pair (two contexts of one NIC: QP a
// and QP b loop back through it). Call only when chosen() has a device.
PairOptions devices();

}  // namespace kinet::test::hw

// First statement of every hw test: skips it (GTEST_SKIP) with the exact reason.
#define KINET_HW_DEVICE_OR_SKIP()                                                    \
  do {                                                                               \
    const ::kinet::test::hw::Choice& kinet_hw_choice_ = ::kinet::test::hw::chosen(); \
    if (!kinet_hw_choice_.skip.empty()) GTEST_SKIP() << kinet_hw_choice_.skip;       \
  } while (0)
