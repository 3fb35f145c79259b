// kinet — kinet's threads carry names ("kinet-emu", "kinet-fab-rx", ...), so
// `top -H`, `perf sched` and debuggers tell them apart. Internal header.
#pragma once
#include <pthread.h>

#include <thread>
#include <utility>

namespace kinet {

// Names the calling thread. `name`: at most 15 characters (Linux truncates
// nothing: a longer name is refused and the thread keeps its inherited one).
// Best effort, never fails.
inline void name_this_thread(const char* name) { (void)pthread_setname_np(pthread_self(), name); }

// std::thread running `f` under `name` (a string literal: it is read by the
// new thread). Throws std::system_error as std::thread does.
template <class F>
std::thread named_thread(const char* name, F&& f) {
  return std::thread([name, f = std::forward<F>(f)]() mutable {
    name_this_thread(name);
    f();
  });
}

}  // namespace kinet
