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

static_assert(sizeof(void*) == sizeof(uint64_t), "handles are pointer-sized 64-bit values");

namespace {
struct Live {
  std::shared_mutex mu;
  struct Entry {
    Kind kind;
    void* obj;
  };
  std::unordered_map<uint64_t, Entry> objs;  // by handle
};
Live& live_objects() {
  static Live* l = new Live;  // never destroyed: NCCL may call in during exit
  return *l;
}
}  // namespace

uint64_t new_handle() {
  // From 2^60: no user-space address is that high. 2^63 is out of reach
  // (3 * 2^60 handles: over a century at a billion a second).
  static std::atomic<uint64_t> next{uint64_t(1) << 60};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void* live_add(void* obj, Kind k) {
  const uint64_t h = new_handle();
  Live& l = live_objects();
  std::unique_lock lk(l.mu);
  l.objs.emplace(h, Live::Entry{k, obj});
  return as_ptr(h);
}

void live_remove(const void* h) {
  Live& l = live_objects();
  std::unique_lock lk(l.mu);
  l.objs.erase(as_handle(h));
}

void* live_find(const void* h, Kind k) {
  if (!h) return nullptr;
  Live& l = live_objects();
  std::shared_lock lk(l.mu);
  auto it = l.objs.find(as_handle(h));
  return it != l.objs.end() && it->second.kind == k ? it->second.obj : nullptr;
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
