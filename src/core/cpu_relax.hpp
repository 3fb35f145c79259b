// kinet — cpu_relax(): the CPU's spin-wait hint, for host loops that poll a
// word another thread writes. Internal header (the library and its benches).
#pragma once
#include <atomic>

namespace kinet {

// One pass of a busy wait: tells the core it spins (x86 pause, aarch64
// yield), which frees pipeline resources for a sibling hyper-thread and
// saves power; elsewhere only a compiler barrier. Never gives the CPU away
// (std::this_thread::yield() does that).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

}  // namespace kinet
