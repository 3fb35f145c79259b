// kinet tests — what the shared-memory link's tests (shm_link_test.cpp,
// shm_link_hostile_test.cpp) share.
#pragma once
#include <chrono>

#include "fabric/link.hpp"

namespace kinet::test {

// The deadline `d` from now, on the links' clock.
inline fabric::Clock::time_point in(std::chrono::milliseconds d) { return fabric::Clock::now() + d; }

}  // namespace kinet::test
