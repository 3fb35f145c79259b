#include "core/env.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/log.hpp"
#include "kinet/kinet.hpp"

namespace kinet::env {
uint64_t get_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v, &end, 0);
  // strtoull takes "-1" as 2^64-1: a sign is not an unsigned integer.
  if (errno || *end || std::strchr(v, '-')) {
    KINET_LOG(Warn, "%s=%s is not an unsigned integer; using %llu", name, v, (unsigned long long)fallback);
    return fallback;
  }
  return x;
}
std::string get_str(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}
}  // namespace kinet::env

namespace kinet {
uint64_t default_timeout_ms() {
  // 0 would make every wait expire at once: not a bound, so the default.
  static const uint64_t t = [] {
    const uint64_t v = env::get_u64("KINET_TIMEOUT_MS", 10000);
    if (v != 0) return v;
    KINET_LOG(Warn, "KINET_TIMEOUT_MS=0 would end every wait at once; using 10000");
    return uint64_t{10000};
  }();
  return t;
}
}  // namespace kinet
