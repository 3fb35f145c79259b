#include "core/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kinet::log {
namespace {
Level parse_level() {
  const char* v = std::getenv("KINET_LOG_LEVEL");
  if (!v || !*v) return Level::Warn;
  if (!strcasecmp(v, "error")) return Level::Error;
  if (!strcasecmp(v, "warn")) return Level::Warn;
  if (!strcasecmp(v, "info")) return Level::Info;
  if (!strcasecmp(v, "debug")) return Level::Debug;
  std::fprintf(stderr, "kinet: warn: KINET_LOG_LEVEL=%s is not one of error, warn, info, debug; using warn\n", v);
  return Level::Warn;
}
}  // namespace

Level level() {
  static const Level lv = parse_level();
  return lv;
}

void write(Level lv, const char* fmt, ...) {
  static const char* names[] = {"error", "warn", "info", "debug"};
  static std::mutex mu;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> g(mu);
  std::fprintf(stderr, "kinet: %s: %s\n", names[static_cast<int>(lv)], buf);
}
}  // namespace kinet::log
