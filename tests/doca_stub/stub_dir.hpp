// kinet tests — the folder in which the test suite builds the stand-in SDKs
// (tests/CMakeLists.txt passes it as KINET_DOCA_STUB_DIR).
#pragma once
#include <string>

namespace kinet::test {

inline const std::string kStubs = KINET_DOCA_STUB_DIR;

}  // namespace kinet::test
