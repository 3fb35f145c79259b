// kinet NCCL plugin — logging through NCCL and result codes.
#include "common.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "core/cuda_shim.hpp"
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

namespace {
struct Live {
  std::shared_mutex mu;
  std::unordered_map<const void*, Kind> objs;
};
Live& live_objects() {
  static Live* l = new Live;  // never destroyed: NCCL may call in during exit
  return *l;
}
}  // namespace

void live_add(const void* p, Kind k) {
  Live& l = live_objects();
  std::unique_lock lk(l.mu);
  l.objs[p] = k;
}

void live_remove(const void* p) {
  Live& l = live_objects();
  std::unique_lock lk(l.mu);
  l.objs.erase(p);
}

bool live_is(const void* p, Kind k) {
  if (!p) return false;
  Live& l = live_objects();
  std::shared_lock lk(l.mu);
  auto it = l.objs.find(p);
  return it != l.objs.end() && it->second == k;
}

bool net_takes_cuda() {
  static const bool on = [] {
    const char* e = std::getenv("KINET_NCCL_NET_CUDA");
    if (!e || std::strcmp(e, "1") != 0) return false;
    if (cuda::available()) return true;
    warn("KINET_NCCL_NET_CUDA=1 but CUDA sees no GPU: the net takes host memory only");
    return false;
  }();
  return on;
}

}  // namespace kinet::nccl
