// kinet NCCL plugin tests — playing NCCL's part: load libnccl-net-kinet.so
// with dlopen, resolve its two tables, capture what it logs through NCCL's
// logger, and run ranks as forked processes that swap their listen handles
// through shared memory (NCCL's allgather of handles).
#pragma once
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../multiproc/netns.hpp"
#include "nccl_abi.hpp"

// Under TSan: a forked rank _exit()s while bootstrap roots it started (every
// GIN listen starts one; only rank 0's serves, the others end at process
// exit by the bootstrap's contract) are still unjoined: no leak to report.
// And the parent has such threads when it forks the ranks (earlier tests'
// listens), so the children must be allowed to start threads. Races are
// still reported. (One test source per binary includes this header.)
extern "C" __attribute__((used)) const char* __tsan_default_options() {
  return "report_thread_leaks=0:die_after_fork=0";
}

namespace kinet::nccl::test {
using namespace std::chrono_literals;

struct Plugin {
  void* dl = nullptr;
  NetV11* net = nullptr;
  GinV11* gin = nullptr;
  std::string error;
  // Loaded once per process, as NCCL does (RTLD_NOW: every symbol resolves now).
  static Plugin& get() {
    static Plugin p = [] {
      Plugin q;
      q.dl = dlopen(KINET_NCCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
      if (!q.dl) {
        q.error = dlerror();
        return q;
      }
      q.net = static_cast<NetV11*>(dlsym(q.dl, "ncclNetPlugin_v11"));
      q.gin = static_cast<GinV11*>(dlsym(q.dl, "ncclGinPlugin_v11"));
      return q;
    }();
    return p;
  }
};

// NCCL's logger, recording every line.
struct Log {
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::pair<int, std::string>>& lines() {
    static std::vector<std::pair<int, std::string>> l;
    return l;
  }
  static void logger(LogLevel lv, unsigned long, const char*, int, const char* fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::lock_guard lk(mu());
    lines().emplace_back(lv, buf);
  }
  static void clear() {
    std::lock_guard lk(mu());
    lines().clear();
  }
  // Whether a line at `level` contains `s`.
  static bool logged(int level, const std::string& s) {
    std::lock_guard lk(mu());
    for (auto& [lv, t] : lines())
      if (lv == level && t.find(s) != std::string::npos) return true;
    return false;
  }
  static bool warned(const std::string& s) { return logged(kLogWarn, s); }
  static std::string all() {
    std::lock_guard lk(mu());
    std::string out;
    for (auto& [lv, t] : lines()) out += std::to_string(lv) + ": " + t + "\n";
    return out;
  }
};

// Shared between forked ranks: listen handles and a few counters.
struct Shared {
  static constexpr int kMaxRanks = 8;
  std::atomic<uint32_t> ready;     // ranks that published their handle
  std::atomic<uint32_t> finished;  // ranks done sending (they keep progressing until all are)
  std::atomic<uint32_t> phase;
  uint8_t handles[kMaxRanks][kHandleMaxSize];
  static Shared* make() {
    void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : new (p) Shared{};
  }
};

// Waits for `pred` up to `bound`, calling `spin` in between; false at the bound.
template <class P, class S>
bool wait_for(P&& pred, S&& spin, std::chrono::milliseconds bound = 20s) {
  auto d = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > d) return false;
    spin();
  }
  return true;
}

// Exit codes of a rank: 0 passed, kSkip (can't run here, e.g. no network
// namespace), else failed (the reason is on stderr).
constexpr int kSkip = 77;
#define RANK_CHECK(rank, cond)                                                                       \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      std::fprintf(stderr, "rank %d: %s:%d: check failed: %s\nplugin log:\n%s", rank, __FILE__,      \
                   __LINE__, #cond, ::kinet::nccl::test::Log::all().c_str());                        \
      std::fflush(stderr);                                                                           \
      _exit(1);                                                                                      \
    }                                                                                                \
  } while (0)

// Forks `n` ranks running body(rank) (its return is the exit code) and
// reaps them within `bound`, killing what is left. `before(rank)` runs first
// in the child (enter a namespace, set the environment). Returns exit codes
// (128 + signal when killed; -1 when it timed out).
inline std::vector<int> run_ranks(int n, const std::function<int(int)>& body, std::chrono::milliseconds bound,
                                  const std::function<bool(int)>& before = {}) {
  std::vector<pid_t> pids(n, -1);
  std::vector<int> codes(n, -1);
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      if (before && !before(r)) _exit(kSkip);
      int rc = body(r);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(rc);
    }
    pids[r] = pid;
  }
  auto d = std::chrono::steady_clock::now() + bound;
  int left = n;
  while (left > 0 && std::chrono::steady_clock::now() < d) {
    for (int r = 0; r < n; ++r) {
      int st;
      if (pids[r] > 0 && codes[r] == -1 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        --left;
      }
    }
    std::this_thread::sleep_for(5ms);  // polling the children's exit, not synchronising
  }
  for (int r = 0; r < n; ++r)
    if (pids[r] > 0 && codes[r] == -1) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], nullptr, 0);
    }
  return codes;
}

// Two network namespaces joined by a veth pair (10.214.<k>.1 and .2), made at
// construction. ok() false: can't (no root / ip).
class NetnsPair : public kinet::test::NetnsPair {
 public:
  explicit NetnsPair(int k)
      : kinet::test::NetnsPair("nc", "n" + std::to_string(k), "10.214." + std::to_string(k)), ok_(create()) {}
  bool ok() const { return ok_; }
  // In a forked child: joins side `i` and selects its interface for kinet's sockets.
  bool enter(int i) const {
    int fd = open(("/var/run/netns/" + ns[i]).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) return false;
    close(fd);
    return setenv("KINET_SOCKET_IFNAME", ("=" + ifname[i]).c_str(), 1) == 0;
  }

 private:
  bool ok_ = false;
};

}  // namespace kinet::nccl::test
