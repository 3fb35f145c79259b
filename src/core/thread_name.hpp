// kinet — names the calling thread ("kinet-emu", "kinet-fab-rx", ...), so
// `top -H`, `perf sched` and debuggers tell kinet's threads apart. Internal
// header.
#pragma once
#include <pthread.h>

namespace kinet {

// `name`: at most 15 characters (Linux truncates nothing: a longer name is
// refused and the thread keeps its inherited one). Best effort, never fails.
inline void name_this_thread(const char* name) { (void)pthread_setname_np(pthread_self(), name); }

}  // namespace kinet
