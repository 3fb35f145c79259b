// kinet NCCL plugin — logging through NCCL and result codes.
#include "common.hpp"

#include <atomic>
#include <cstdio>

#include "core/log.hpp"

namespace kinet::nccl {
namespace {
std::atomic<Logger> g_logger{nullptr};

void vlog(LogLevel lv, const char* fmt, va_list ap) {
  char buf[1024];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  if (Logger l = g_logger.load(std::memory_order_acquire)) {
    l(lv, kSubsysNet | kSubsysInit, __FILE__, __LINE__, "NET/kinet : %s", buf);
  } else if (lv == kLogWarn) {
    KINET_LOG(Warn, "nccl plugin: %s", buf);
  } else {
    KINET_LOG(Info, "nccl plugin: %s", buf);
  }
}
}  // namespace

void set_logger(Logger log) {
  if (log) g_logger.store(log, std::memory_order_release);
}

void warn(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(kLogWarn, fmt, ap);
  va_end(ap);
}

void info(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(kLogInfo, fmt, ap);
  va_end(ap);
}

Result fail(Result r, const std::string& what) {
  warn("%s", what.c_str());
  return r;
}

Result result_of(const Error& e) {
  switch (e.code()) {
    case ErrorCode::InvalidArgument: return kInvalidArgument;
    case ErrorCode::System: return kSystemError;
    default: return kInternalError;
  }
}

}  // namespace kinet::nccl
