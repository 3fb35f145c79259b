// kinet multiproc tests — run a function as N ranks in forked processes
// joined by a Bootstrap, and collect each rank's verdict within a bound.
// Rank 0 creates the UniqueId (so the rendezvous lives in a rank, not in the
// test process) and hands it to the others through a pipe.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kinet/bootstrap.hpp"

namespace kinet::test {

struct RankResult {
  int exit_code = -1;  // 0: fn returned ""; 1: it returned a complaint; 3: it threw; 128+sig: killed
  std::string out;     // the complaint or the exception's text
  bool timed_out = false;
};

// fn returns "" when the rank saw what it expected, else what went wrong.
using RankFn = std::function<std::string(int rank, int nranks, Bootstrap& bs)>;

inline bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    const ssize_t w = ::write(fd, c, n);
    if (w <= 0) return false;
    c += w, n -= static_cast<size_t>(w);
  }
  return true;
}

// In a forked rank: runs fn() (its complaint; "" = passed), writes it to fd
// and exits 0 (passed), 1 (a complaint) or 3 (an exception).
template <class F> [[noreturn]] void rank_exit(int fd, F&& fn) {
  int code = 0;
  std::string msg;
  try {
    msg = fn();
    code = msg.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    msg = e.what();
    code = 3;
  }
  write_all(fd, msg.data(), msg.size());
  _exit(code);
}

// Waits for the forked ranks (pid -1: never started), killing those still
// running at `bound`, and reads what each wrote to its pipe.
inline std::vector<RankResult> collect_ranks(const std::vector<pid_t>& pids, const std::vector<int>& outs,
                                             std::chrono::milliseconds bound) {
  std::vector<RankResult> res(pids.size());
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] < 0) continue;
    int st = 0;
    for (;;) {
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) break;
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &st, 0);
        res[r].timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    res[r].exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char buf[4096];
    ssize_t k;
    while ((k = ::read(outs[r], buf, sizeof buf)) > 0) res[r].out.append(buf, static_cast<size_t>(k));
    close(outs[r]);
  }
  return res;
}

inline std::vector<RankResult> run_ranks(int n, const RankFn& fn, std::chrono::milliseconds bound,
                                         std::chrono::milliseconds bs_timeout = std::chrono::milliseconds(20000)) {
  int idp[2];
  if (pipe(idp) != 0) return {};
  std::vector<pid_t> pids(n, -1);
  std::vector<int> outs(n, -1);
  for (int r = 0; r < n; ++r) {
    int op[2];
    if (pipe(op) != 0) break;
    const pid_t pid = fork();
    if (pid == 0) {
      close(op[0]);
      rank_exit(op[1], [&] {
        std::string id;
        if (r == 0) {
          id = UniqueId::create().to_string();
          for (int k = 1; k < n; ++k) write_all(idp[1], (id + "\n").data(), id.size() + 1);  // < PIPE_BUF: atomic
        } else {
          char buf[257];
          size_t got = 0;
          while (got < sizeof buf) {
            const ssize_t k = ::read(idp[0], buf + got, sizeof buf - got);
            if (k <= 0) _exit(4);
            got += static_cast<size_t>(k);
          }
          id.assign(buf, 256);
        }
        auto bs = Bootstrap::init(UniqueId::from_string(id), r, n, bs_timeout);
        return fn(r, n, *bs);
      });
    }
    close(op[1]);
    pids[r] = pid;
    outs[r] = op[0];
  }
  close(idp[0]);
  close(idp[1]);
  return collect_ranks(pids, outs, bound);
}

}  // namespace kinet::test
