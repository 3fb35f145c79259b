// The two-process GPU tests: this binary spawned in two roles that meet
// through a fresh UniqueId, then waited for with a bound.
#pragma once
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <kinet/bootstrap.hpp>

extern char** environ;

namespace kgt {

// Spawns `self` as roles[0] and roles[1], each with `--role ROLE <flag>
// <value> --id <hex>`, and waits for both, at most 120 s (a child still
// running then is killed). Returns each child's exit status, or -1 when it
// could not be spawned, died of a signal or was killed at the bound; a FAIL
// line says which.
inline std::array<int, 2> spawn_pair(const std::string& self, const char* const roles[2], const char* flag,
                                     const std::string& value) {
  const std::string id = kinet::UniqueId::create().to_string();
  pid_t pids[2] = {-1, -1};
  std::array<int, 2> out = {-1, -1};
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> a = {self, "--role", roles[r], flag, value, "--id", id};
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pids[r], self.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
      std::printf("FAIL: can't spawn %s\n", self.c_str());
      pids[r] = -1;
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (int r = 0; r < 2; ++r) {
    if (pids[r] <= 0) continue;
    int status = 0;
    for (;;) {
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) break;
      if (std::chrono::steady_clock::now() > deadline) {
        std::printf("FAIL: %s over %s did not finish within 120 s: killed\n", roles[r], value.c_str());
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &status, 0);
        status = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a child, not synchronising
    }
    if (status != -1 && WIFEXITED(status)) out[r] = WEXITSTATUS(status);
  }
  return out;
}

}  // namespace kgt
