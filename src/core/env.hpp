// kinet — environment variables. The one list of every variable kinet (the
// library, its providers, tools and tests) reads is variables() below:
// `kinet-info --env` prints it and docs/ENVIRONMENT.md is generated from it
// (`kinet-info --env --markdown`; a test fails when the two differ).
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace kinet::env {

struct Variable {
  const char* name;
  const char* default_value;  // as the reader sees it when unset
  const char* meaning;
  const char* reader;         // who reads it: "library", "emu provider", "tests", ...
  bool test_only;             // read by the test suite only, not by the library or tools
};
std::span<const Variable> variables();

// docs/ENVIRONMENT.md's text, rendered from variables().
std::string markdown();

// Parses an unsigned integer variable (decimal, 0x hex or 0 octal);
// `fallback` when unset; a warning and `fallback` when malformed: trailing
// characters, a value >= 2^64, or a sign ("-1" is not 2^64-1).
uint64_t get_u64(const char* name, uint64_t fallback);
// get_u64, then values over `max` are taken as `max`, with a warning.
uint64_t get_u64_at_most(const char* name, uint64_t fallback, uint64_t max);
std::string get_str(const char* name, const std::string& fallback);

// KINET_TIMEOUT_MS's rules, a pure function so tests can reach every edge.
// `value` null or empty: kDefaultTimeoutMs. A decimal integer in
// [1, kMaxTimeoutMs]: itself. Larger (up to and past 2^64-1): saturated to
// kMaxTimeoutMs, with a warning in *problem. 0, negative, or not a decimal
// integer: kDefaultTimeoutMs, with an error in *problem (a bound of 0 would
// make every wait expire at once). *problem is cleared when the value is used
// as given. `name` is the variable the messages name (same rules for
// KINET_EMU_PEER_TIMEOUT_MS).
inline constexpr uint64_t kDefaultTimeoutMs = 10000;
inline constexpr uint64_t kMaxTimeoutMs = 24ull * 3600 * 1000;  // one day: ms*1e6 stays far from 2^64 ns
uint64_t parse_timeout_ms(const char* value, std::string* problem, const char* name = "KINET_TIMEOUT_MS");

}  // namespace kinet::env
