// kinet — environment variables kinet reads. Every one is listed here and in
// docs/ENVIRONMENT.md.
//   KINET_TIMEOUT_MS  bound of every wait in device verbs and tools (default 10000; 0 or malformed:
//                     a warning and the default)
//   KINET_LOG_LEVEL   error | warn (default) | info | debug
#pragma once
#include <cstdint>
#include <string>

namespace kinet::env {
// Parses an unsigned integer variable (decimal, 0x hex or 0 octal);
// `fallback` when unset; a warning and `fallback` when malformed: trailing
// characters, a value >= 2^64, or a sign ("-1" is not 2^64-1).
uint64_t get_u64(const char* name, uint64_t fallback);
std::string get_str(const char* name, const std::string& fallback);
}  // namespace kinet::env
