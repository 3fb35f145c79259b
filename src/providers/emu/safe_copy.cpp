#include "providers/emu/safe_copy.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/cuda_shim.hpp"
#include "core/log.hpp"

namespace kinet::emu {
namespace {

constexpr size_t kBounce = 1u << 20;

// One process_vm_writev moving [src, +n) to [dst, +n) in this process;
// returns the bytes moved before the first fault.
size_t vm_move(void* dst, const void* src, size_t n) {
  size_t done = 0;
  while (done < n) {
    iovec l{const_cast<uint8_t*>(static_cast<const uint8_t*>(src)) + done, n - done};
    iovec r{static_cast<uint8_t*>(dst) + done, n - done};
    const ssize_t k = process_vm_writev(getpid(), &l, 1, &r, 1, 0);
    if (k <= 0) {
      if (k < 0 && errno == EINTR) continue;
      return done;
    }
    done += static_cast<size_t>(k);
  }
  return done;
}

// Whether every byte of [p, +n) can be read (probes in bounce-sized pieces).
bool readable(const void* p, size_t n) {
  static thread_local std::vector<uint8_t> probe(kBounce);
  for (size_t off = 0; off < n; off += kBounce) {
    const size_t k = n - off < kBounce ? n - off : kBounce;
    if (vm_move(probe.data(), static_cast<const uint8_t*>(p) + off, k) != k) return false;
  }
  return true;
}

std::string range(const void* p, size_t n) {
  char b[64];
  std::snprintf(b, sizeof b, "[%p, +%zu)", p, n);
  return b;
}

CopyResult host_fault(void* dst, const void* src, size_t n) {
  CopyResult r;
  if (!readable(src, n)) {
    r.side = CopyResult::Src;
    r.why = "source " + range(src, n) + " is not mapped (unmapped after registration?)";
  } else {
    r.side = CopyResult::Dst;
    r.why = "destination " + range(dst, n) + " is not mapped or not writable (unmapped after registration?)";
  }
  return r;
}

// process_vm_* may be filtered (seccomp); then host copies fall back to
// memcpy, which is fast but not fault-tolerant. Decided once, logged once.
bool vm_usable() {
  static const bool ok = [] {
    uint64_t a = 1, b = 0;
    const bool works = vm_move(&b, &a, sizeof a) == sizeof a && b == 1;
    if (!works)
      KINET_LOG(Warn, "emu: process_vm_writev unavailable (%s): host copies use memcpy and a region unmapped "
                      "after registration will crash the process", std::strerror(errno));
    return works;
  }();
  return ok;
}

CopyResult cuda_fault(bool src_is_gpu, const char* what) {
  CopyResult r;
  r.side = src_is_gpu ? CopyResult::Src : CopyResult::Dst;
  r.cuda = true;
  r.why = std::string("CUDA copy failed: ") + what;
  return r;
}

std::mutex& atomic_mu() {
  static auto* m = new std::mutex;  // immortal: NIC threads may run at exit()
  return *m;
}
}  // namespace

CopyResult safe_copy(void* dst, MemoryKind dk, const void* src, MemoryKind sk, size_t n) {
  if (n == 0) return {};
  if (dk == MemoryKind::Host && sk == MemoryKind::Host) {
    if (!vm_usable()) {
      std::memcpy(dst, src, n);
      return {};
    }
    if (vm_move(dst, src, n) == n) return {};
    return host_fault(dst, src, n);
  }
  // A GPU on one side or both. A host side goes through a bounce buffer with
  // the fault-tolerant copy, so CUDA never touches unmapped host memory.
  static thread_local std::vector<uint8_t> bounce(kBounce);
  try {
    if (dk == MemoryKind::Gpu && sk == MemoryKind::Gpu) {
      cuda::copy(dst, src, n);
      return {};
    }
    for (size_t off = 0; off < n; off += kBounce) {
      const size_t k = n - off < kBounce ? n - off : kBounce;
      uint8_t* d = static_cast<uint8_t*>(dst) + off;
      const uint8_t* s = static_cast<const uint8_t*>(src) + off;
      if (sk == MemoryKind::Host) {
        if (CopyResult r = safe_copy(bounce.data(), MemoryKind::Host, s, MemoryKind::Host, k)) return r;
        try {
          cuda::copy(d, bounce.data(), k);
        } catch (const std::exception& e) {
          return cuda_fault(false, e.what());
        }
      } else {
        try {
          cuda::copy(bounce.data(), s, k);
        } catch (const std::exception& e) {
          return cuda_fault(true, e.what());
        }
        if (CopyResult r = safe_copy(d, MemoryKind::Host, bounce.data(), MemoryKind::Host, k)) {
          r.side = CopyResult::Dst;
          return r;
        }
      }
    }
  } catch (const std::exception& e) {
    return cuda_fault(dk == MemoryKind::Host, e.what());
  }
  return {};
}

CopyResult safe_atomic(uint64_t* target, MemoryKind kind, bool fetch_add, uint64_t operand, uint64_t compare,
                       uint64_t* old) {
  std::lock_guard<std::mutex> g(atomic_mu());
  uint64_t v = 0;
  if (CopyResult r = safe_copy(&v, MemoryKind::Host, target, kind, 8)) return r;
  const uint64_t nv = fetch_add ? v + operand : (v == compare ? operand : v);
  if (nv != v)
    if (CopyResult r = safe_copy(target, kind, &nv, MemoryKind::Host, 8)) return r;
  *old = v;
  return {};
}
}  // namespace kinet::emu
