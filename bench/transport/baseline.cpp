// The provider's own benchmark, run as a separate pair of processes on
// loopback with the same transport settings (the environment is inherited).
// To add a provider: a function like ucx_perftest() below, and a line in
// run_baseline().
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

// Runs a benchmark's server and client; the client is retried for a while
// (bounded), as the server may not listen yet. Returns the client's exit
// code and its output.
int run_pair(const std::vector<std::string>& srv, const std::vector<std::string>& cli, std::string* out) {
  std::string srv_out;
  std::thread server([&] { run_capture(srv, &srv_out, std::chrono::seconds(120)); });
  int rc = -1;
  for (int attempt = 0; attempt < 100 && rc != 0; ++attempt) {
    out->clear();
    rc = run_capture(cli, out, std::chrono::seconds(120));
    if (rc != 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  server.join();
  return rc;
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
  std::string out;
  if (run_pair(srv, cli, &out) != 0) {
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

// fi_pingpong (libfabric-bin) over the endpoint type kinet's ofi channel uses
// (RDM; tcp;ofi_rxm here), the provider FI_PROVIDER names (default tcp), with
// the queue sizes kinet's channel asks for (FI_OFI_RXM_TX_SIZE / RX_SIZE 256
// unless set) and the FI_OFI_RXM_BUFFER_SIZE kinet ran with (inherited). Its
// line per size: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec,
// usec/xfer the mean one-way time (two transfers per iteration). Its clock
// includes its start (connection setup, first registrations: ~25 ms for 8 B,
// ~470 ms for 64 KiB here, +-20 ms), so it runs N and 4N iterations and the
// baseline is the marginal time per transfer, (T(4N) - T(N)) / (2 x 3N), the
// median of three such pairs.
void fi_pingpong(const Options& o, bool latency, Row& row, int port) {
  setenv("FI_OFI_RXM_TX_SIZE", "256", 0);
  setenv("FI_OFI_RXM_RX_SIZE", "256", 0);
  const uint64_t n = latency ? o.lat_iters : std::max<uint64_t>(32, 2 * o.bw_bytes / row.size);
  const char* prov = std::getenv("FI_PROVIDER");
  // One fi_pingpong pair of `iters` iterations: *us its total time. The first
  // pair's commands (N, then 4N) are the row's base_cmd.
  auto total_us = [&](uint64_t iters, int p, double* us) {
    std::vector<std::string> common{"fi_pingpong", "-p", prov && *prov ? prov : "tcp", "-e", "rdm",
                                    "-I", std::to_string(iters), "-S", std::to_string(row.size)};
    std::vector<std::string> srv = common, cli = common;
    srv.insert(srv.end(), {"-B", std::to_string(p)});
    cli.insert(cli.end(), {"-P", std::to_string(p), "127.0.0.1"});
    if (p < port + 2000) row.base_cmd += (row.base_cmd.empty() ? "" : " ; ") + join(srv) + " & " + join(cli);
    std::string out;
    if (run_pair(srv, cli, &out) != 0) {
      row.base_note = "fi_pingpong failed (is libfabric-bin installed?): " + out.substr(0, 200);
      return false;
    }
    std::istringstream in(out);
    std::vector<std::string> f;
    for (std::string line; std::getline(in, line);) {
      std::istringstream ls(line);
      std::vector<std::string> cells;
      for (std::string c; ls >> c;) cells.push_back(c);
      if (cells.size() >= 8 && cells[0][0] >= '0' && cells[0][0] <= '9') f = cells;
    }
    if (f.empty()) {
      row.base_note = "no result line in fi_pingpong's output";
      return false;
    }
    *us = std::atof(f[6].c_str()) * 2.0 * static_cast<double>(iters);
    return true;
  };
  std::vector<double> per_xfer;
  for (int k = 0; k < 3; ++k) {
    double t1 = 0, t4 = 0;
    if (!total_us(n, port + 2000 * k, &t1) || !total_us(4 * n, port + 2000 * k + 1000, &t4)) return;
    per_xfer.push_back((t4 - t1) / (2.0 * 3.0 * static_cast<double>(n)));
  }
  std::sort(per_xfer.begin(), per_xfer.end());
  const double us = per_xfer[1];
  if (us <= 0) {
    row.base_note = "fi_pingpong: the longer runs were not slower (its start varied more than the runs took)";
    return;
  }
  if (latency) {
    row.base = us;
    row.base_is_mean = true;
  } else {
    row.base = static_cast<double>(row.size) / us * 1e6 / (1 << 20);
  }
}

}  // namespace

void run_baseline(const Options& o, bool latency, Row& row, int port) {
  if (o.provider == "ucx") return ucx_perftest(o, latency, row, port);
  if (o.provider == "ofi") return fi_pingpong(o, latency, row, port);
  row.base_note = "no baseline for provider " + o.provider + " yet (add one in bench/transport/baseline.cpp)";
}

}  // namespace kinet::bench
