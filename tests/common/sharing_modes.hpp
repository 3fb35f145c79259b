// kinet tests — the three device-verb sharing modes as gtest type parameters:
// TYPED_TEST_SUITE(Suite, kinet::test::SharingModes, kinet::test::SharingModeNames)
// runs each test once per mode, named Suite/Exclusive, Suite/Cta, Suite/Gpu;
// inside a test, TypeParam::value is the mode.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "kinet/device/qp.cuh"

namespace kinet::test {

template <dev::Sharing S> struct SharingMode {
  static constexpr dev::Sharing value = S;
};
using SharingModes = ::testing::Types<SharingMode<dev::Sharing::Exclusive>, SharingMode<dev::Sharing::Cta>,
                                      SharingMode<dev::Sharing::Gpu>>;
struct SharingModeNames {
  template <class T> static std::string GetName(int) {
    return T::value == dev::Sharing::Exclusive ? "Exclusive" : T::value == dev::Sharing::Cta ? "Cta" : "Gpu";
  }
};

}  // namespace kinet::test
