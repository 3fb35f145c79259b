// kinet — the little text helpers of error messages and logs, defined once for
// every source of the library and its tools (a unity build compiles several
// sources as one: a helper copied into each would collide). Internal header.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace kinet::text {

// "0x1f": keys, QP numbers, addresses.
inline std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// "0x000000000000001f": sixteen digits, for values that line up (tags, keys).
inline std::string hex64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

// A pointer as printf's %p writes it.
inline std::string hexp(const void* p) {
  char b[24];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

// "errno 2: No such file or directory".
inline std::string errno_text(int err) { return "errno " + std::to_string(err) + ": " + std::strerror(err); }

}  // namespace kinet::text
