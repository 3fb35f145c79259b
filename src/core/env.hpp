// kinet — environment variables kinet reads. Every one is listed here and in
// docs/ENVIRONMENT.md.
//   KINET_TIMEOUT_MS  bound of every wait in device verbs and tools (default 10000)
//   KINET_LOG_LEVEL   error | warn (default) | info | debug
//   KINET_GID_INDEX   mlx5 on RoCE: the GID table entry QPs use (default: first RoCE v2, IPv4-mapped first)
#pragma once
#include <cstdint>
#include <string>

namespace kinet::env {
// Parses an unsigned integer variable; `fallback` when unset; a warning and
// `fallback` when malformed.
uint64_t get_u64(const char* name, uint64_t fallback);
std::string get_str(const char* name, const std::string& fallback);
}  // namespace kinet::env
