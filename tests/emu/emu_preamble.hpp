// kinet tests — the short names every emu test file uses (one TU each, so
// they live in an anonymous namespace of the including file).
#pragma once
#include "emu_fixture.hpp"

namespace {

using kinet::Error;
using kinet::ErrorCode;
using kinet::QpState;
using kinet::Status;
using kinet::dev::QpHandle;
using kinet::dev::Sharing;
using kinet::dev::Ticket;
namespace dev = kinet::dev;
using namespace kinet::test;
[[maybe_unused]] constexpr Sharing X = Sharing::Exclusive;

}  // namespace
