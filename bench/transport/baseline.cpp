// The provider's own benchmark, run as a separate pair of processes on
// loopback with the same transport settings (the environment is inherited).
// To add a provider: a function like ucx_perftest() below, and a line in
// run_baseline(). libfabric: fi_pingpong -p tcp (server, then client to
// 127.0.0.1) reports latency and bandwidth per size.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "perf.hpp"

extern char** environ;

namespace kinet::bench {
namespace {

// Runs argv with stdout captured; waits at most `bound`. Returns the exit code
// (-1: could not start or timed out) and the output.
int run_capture(const std::vector<std::string>& argv, std::string* out, std::chrono::seconds bound) {
  int p[2];
  if (pipe(p) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_adddup2(&fa, p[1], 2);
  posix_spawn_file_actions_addclose(&fa, p[0]);
  std::vector<char*> av;
  for (auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, av[0], &fa, nullptr, av.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  if (rc != 0) {
    close(p[0]);
    return -1;
  }
  const auto deadline = std::chrono::steady_clock::now() + bound;
  fcntl(p[0], F_SETFL, O_NONBLOCK);
  char buf[4096];
  int st = 0;
  for (;;) {
    ssize_t n;
    while ((n = read(p[0], buf, sizeof buf)) > 0) out->append(buf, static_cast<size_t>(n));
    if (waitpid(pid, &st, WNOHANG) == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      close(p[0]);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) out->append(buf, static_cast<size_t>(n));
  close(p[0]);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& a : v) s += (s.empty() ? "" : " ") + a;
  return s;
}

// ucx_perftest's -f -v output ends with a CSV line:
// iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
void ucx_perftest(const Options& o, bool latency, Row& row, int port) {
  const uint64_t iters = latency ? o.lat_iters : std::max<uint64_t>(8, o.bw_bytes / row.size);
  const uint64_t warm = latency ? o.lat_warmup : std::max<uint64_t>(2, iters / 10);
  std::vector<std::string> srv{"ucx_perftest", "-p", std::to_string(port)};
  std::vector<std::string> cli{"ucx_perftest", "127.0.0.1", "-p", std::to_string(port), "-t",
                               latency ? "ucp_am_lat" : "ucp_am_bw", "-s", std::to_string(row.size),
                               "-n", std::to_string(iters), "-w", std::to_string(warm), "-f", "-v"};
  // kinet's endpoints use peer error handling where the transport has it (tcp): so does the baseline.
  if (o.tls.find("tcp") != std::string::npos) srv.push_back("-e"), cli.push_back("-e");
  row.base_cmd = join(srv) + " & " + join(cli);
  std::string srv_out;
  std::thread server([&] { run_capture(srv, &srv_out, std::chrono::seconds(120)); });
  std::string out;
  int rc = -1;
  // The server may not listen yet: retry the client for a while (bounded).
  for (int attempt = 0; attempt < 100 && rc != 0; ++attempt) {
    out.clear();
    rc = run_capture(cli, &out, std::chrono::seconds(120));
    if (rc != 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  server.join();
  if (rc != 0) {
    row.base_note = "ucx_perftest failed (is ucx-utils installed?): " + out.substr(0, 200);
    return;
  }
  std::istringstream in(out);
  std::string line, last;
  while (std::getline(in, line)) {
    line.erase(0, line.find_first_not_of(' '));
    if (!line.empty() && line[0] >= '0' && line[0] <= '9' && line.find(',') != std::string::npos) last = line;
  }
  std::vector<double> f;
  std::istringstream ls(last);
  for (std::string cell; std::getline(ls, cell, ',');) f.push_back(std::atof(cell.c_str()));
  if (f.size() < 6) {
    row.base_note = "no CSV result in ucx_perftest's output";
    return;
  }
  row.base = latency ? f[1] : f[5];  // median latency (us, half round trip); overall bandwidth (MiB/s)
}

}  // namespace

void run_baseline(const Options& o, bool latency, Row& row, int port) {
  if (o.provider == "ucx") return ucx_perftest(o, latency, row, port);
  row.base_note = "no baseline for provider " + o.provider + " yet (add one in bench/transport/baseline.cpp)";
}

}  // namespace kinet::bench
