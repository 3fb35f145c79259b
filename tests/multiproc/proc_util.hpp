// kinet multiproc tests — starting helper processes and collecting their
// result line within a bound (a process still running at the bound is killed
// and reported as timed out, never waited for forever).
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kinet::test {

struct Proc {
  pid_t pid = -1;
  int out_fd = -1;      // read end of the child's stdout
  std::string out;      // what it printed
  int exit_code = -1;   // -1 until reaped; 128+sig when killed by a signal
  bool timed_out = false;
};

// Starts argv[0] with the current environment plus `extra_env` ("K=V") and
// stdout piped back. Returns a Proc with pid -1 when posix_spawn fails.
inline Proc spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {}) {
  Proc p;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return p;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  for (const auto& kv : extra_env) {
    std::string key = kv.substr(0, kv.find('=') + 1);
    std::erase_if(env, [&](const std::string& s) { return s.compare(0, key.size(), key) == 0; });
    env.push_back(kv);
  }
  std::vector<char*> av, ev;
  for (auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  for (auto& e : env) ev.push_back(const_cast<char*>(e.c_str()));
  ev.push_back(nullptr);
  int rc = posix_spawn(&p.pid, av[0], &fa, nullptr, av.data(), ev.data());
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    p.pid = -1;
    return p;
  }
  p.out_fd = fds[0];
  fcntl(p.out_fd, F_SETFL, O_NONBLOCK);
  return p;
}

// Collects output and exit status of every process until all have exited or
// `bound` passes; then kills the rest (timed_out = true).
inline void wait_all(std::vector<Proc>& ps, std::chrono::milliseconds bound) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    bool running = false;
    for (auto& p : ps) {
      if (p.pid < 0 || p.exit_code >= 0) continue;
      char buf[4096];
      ssize_t n;
      while ((n = read(p.out_fd, buf, sizeof buf)) > 0) p.out.append(buf, static_cast<size_t>(n));
      int st = 0;
      if (waitpid(p.pid, &st, WNOHANG) == p.pid) {
        while ((n = read(p.out_fd, buf, sizeof buf)) > 0) p.out.append(buf, static_cast<size_t>(n));
        close(p.out_fd);
        p.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      } else {
        running = true;
      }
    }
    if (!running) return;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& p : ps) {
    if (p.pid < 0 || p.exit_code >= 0) continue;
    kill(p.pid, SIGKILL);
    int st = 0;
    waitpid(p.pid, &st, 0);
    close(p.out_fd);
    p.timed_out = true;
    p.exit_code = 128 + SIGKILL;
  }
}

}  // namespace kinet::test
