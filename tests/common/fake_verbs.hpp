// kinet tests — the preamble of the device-verb tests on the fake NIC
// (fake_ring.hpp): one TU each, so the short names live in an anonymous
// namespace of the including file.
#pragma once
#include "fake_ring.hpp"
#include "sharing_modes.hpp"
#include "test_util.hpp"

namespace {

using kinet::Status;
using kinet::dev::Sharing;
using kinet::dev::Ticket;
namespace dev = kinet::dev;
namespace m = kinet::mlx5;
using kinet::test::FakeRing;

// Keys only: the fake NIC never checks them, the tests compare them in WQEs.
[[maybe_unused]] constexpr kinet::Lkey kLkey{0x11223344};
[[maybe_unused]] constexpr kinet::Rkey kRkey{0x55667788};

}  // namespace
