// kinet ofi channel tests — pieces shared by the test and its helper process:
// hex lines for address blobs, the message pattern both sides check, an
// event recorder, and a child process with both stdin and stdout piped.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "transports/channel.hpp"
#include "../common/idle_backoff.hpp"

extern char** environ;

namespace kinet::test::ofi {

inline std::string to_hex(const std::vector<uint8_t>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) s += d[x >> 4], s += d[x & 15];
  return s;
}
inline std::vector<uint8_t> from_hex(const std::string& s) {
  std::vector<uint8_t> b;
  for (size_t i = 0; i + 1 < s.size(); i += 2) b.push_back(static_cast<uint8_t>(std::stoi(s.substr(i, 2), nullptr, 16)));
  return b;
}

// Message `i` of a stream: its size (0, small, and every fifth one max) and
// bytes (the index in the first 8 bytes, then a pattern of the index).
inline size_t pattern_size(uint64_t i, size_t max) {
  if (i % 5 == 4) return max;
  if (i % 7 == 3) return 0;
  return static_cast<size_t>((i * 2654435761u) % 3000) + 1;
}
inline std::vector<uint8_t> pattern(uint64_t i, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t j = 0; j < n; ++j) v[j] = static_cast<uint8_t>(i * 131 + j * 7 + (j >> 8));
  for (size_t j = 0; j < 8 && j < n; ++j) v[j] = static_cast<uint8_t>(i >> (8 * j));
  return v;
}

struct Recorder : transport::ChannelEvents {
  std::vector<std::pair<uint32_t, std::vector<uint8_t>>> msgs;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> strangers;
  std::map<uint64_t, bool> sent;
  std::vector<std::pair<uint32_t, std::string>> lost;
  void on_message(uint32_t peer, const uint8_t* d, size_t n) override { msgs.push_back({peer, {d, d + n}}); }
  void on_stranger(std::string_view who, const uint8_t* d, size_t n) override {
    strangers.push_back({std::string(who), {d, d + n}});
  }
  void on_sent(uint64_t token, bool ok) override { sent[token] = ok; }
  void on_peer_lost(uint32_t peer, const std::string& why) override { lost.push_back({peer, why}); }
};

// A helper process with stdin and stdout piped (both non-blocking here).
struct Child {
  pid_t pid = -1;
  int in = -1, out = -1;
  std::string buf;
  int status = -1;

  static Child start(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {}) {
    Child c;
    int i[2], o[2];
    if (pipe2(i, O_CLOEXEC) != 0) return c;
    if (pipe2(o, O_CLOEXEC) != 0) {
      close(i[0]), close(i[1]);
      return c;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, i[0], 0);
    posix_spawn_file_actions_adddup2(&fa, o[1], 1);
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    for (const auto& kv : extra_env) env.push_back(kv);
    std::vector<char*> av, ev;
    for (auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    for (auto& e : env) ev.push_back(const_cast<char*>(e.c_str()));
    ev.push_back(nullptr);
    const int rc = posix_spawn(&c.pid, av[0], &fa, nullptr, av.data(), ev.data());
    posix_spawn_file_actions_destroy(&fa);
    close(i[0]);
    close(o[1]);
    if (rc != 0) {
      close(i[1]), close(o[0]);
      c.pid = -1;
      return c;
    }
    c.in = i[1];
    c.out = o[0];
    fcntl(c.out, F_SETFL, O_NONBLOCK);
    return c;
  }
  Child() = default;
  Child(Child&& o) noexcept { *this = std::move(o); }
  Child& operator=(Child&& o) noexcept {
    std::swap(pid, o.pid), std::swap(in, o.in), std::swap(out, o.out), std::swap(buf, o.buf);
    std::swap(status, o.status);
    return *this;
  }
  ~Child() {
    close_in();
    if (pid > 0 && status < 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
    if (out >= 0) close(out);
  }
  void say(const std::string& line) const {
    const std::string s = line + "\n";
    if (in >= 0 && write(in, s.data(), s.size()) != static_cast<ssize_t>(s.size())) {
    }
  }
  void close_in() {
    if (in >= 0) close(in), in = -1;
  }
  // Drains stdout without waiting; returns a whole line if one is there.
  bool line(std::string* l) {
    char b[4096];
    ssize_t n;
    while (out >= 0 && (n = read(out, b, sizeof b)) > 0) buf.append(b, static_cast<size_t>(n));
    const size_t at = buf.find('\n');
    if (at == std::string::npos) return false;
    *l = buf.substr(0, at);
    buf.erase(0, at + 1);
    return true;
  }
  // The next line within `bound` ("" on timeout or EOF), calling `idle`
  // between reads (e.g. to progress a channel).
  template <class F>
  std::string next_line(std::chrono::milliseconds bound, F&& idle) {
    const auto end = std::chrono::steady_clock::now() + bound;
    std::string l;
    while (std::chrono::steady_clock::now() < end) {
      if (line(&l)) return l;
      idle();
      pollfd p{out, POLLIN, 0};
      poll(&p, 1, 1);
    }
    return "";
  }
  std::string next_line(std::chrono::milliseconds bound) {
    return next_line(bound, [] {});
  }
  // Exit code within `bound` (128+signal when killed; -1 on timeout, then killed).
  int wait(std::chrono::milliseconds bound) {
    const auto end = std::chrono::steady_clock::now() + bound;
    while (status < 0) {
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (std::chrono::steady_clock::now() > end) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        status = 128 + SIGKILL;
        return -1;
      }
      usleep(2000);
    }
    return status;
  }
};

}  // namespace kinet::test::ofi
