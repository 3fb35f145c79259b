// kinet — internal logging. Level from $KINET_LOG_LEVEL (see the table in core/env.cpp):
// error, warn (default), info, debug.
#pragma once
#include <cstdarg>

namespace kinet::log {
enum class Level { Error = 0, Warn = 1, Info = 2, Debug = 3 };
Level level();
void write(Level lv, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
}  // namespace kinet::log

#define KINET_LOG(lv, ...)                                                     \
  do {                                                                         \
    if (static_cast<int>(::kinet::log::Level::lv) <= static_cast<int>(::kinet::log::level())) \
      ::kinet::log::write(::kinet::log::Level::lv, __VA_ARGS__);               \
  } while (0)
