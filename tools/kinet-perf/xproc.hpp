// kinet-perf — cross-process mode: the two endpoints live in two processes
// (hosts, network namespaces) and reach each other through the emu provider's
// cross-process fabric over TCP (DeviceOptions::Fabric::Tcp).
//
// The client drives. It connects twice to the server's --port: a control
// connection (the plan, QP info blobs and keys, one step at a time) and a data
// connection for the plain TCP baseline (tcp_baseline.hpp). Per test case:
// baseline first, then the kinet run, both by the same pair of processes.
// Payloads derive from the seed, so each side verifies what it received.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "options.hpp"
#include "runner.hpp"

namespace kinet::perf {

// One test case of a cross-process run: the kinet result and, when the
// baseline ran, the plain TCP one of the same size (its lat_us or seconds).
struct XResult {
  Result kinet;
  bool has_base = false;
  Result base;
};

class Progress;
struct MachineInfo;

// Both return the process's exit status (0 ok, 1 failed) after printing.
// The server takes its cases from the client; the client runs `cases` (chosen
// as for one process) and writes --json.
int run_server(const Options& o);
int run_client(const Options& o, const std::vector<TestCase>& cases, uint64_t seed, const MachineInfo& m,
               Progress& pr);

}  // namespace kinet::perf
