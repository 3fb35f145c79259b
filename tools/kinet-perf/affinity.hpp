// kinet-perf — CPU placement of the posting threads and of the software NIC.
//
// The emu provider runs one engine thread per device, started by
// Device::open() and inheriting the caller's CPU affinity; it busy-polls the
// QPs kernels post to (host posters run the engine themselves and it sleeps:
// QpHandle::host_kick). On a machine with fewer CPUs than busy threads
// (posting threads + 2 polling engines), the scheduler
// may park an engine behind a spinning poster and latency turns into
// scheduler noise (2 us or 70 us depending on placement). Pinning gives each
// poster a CPU of its own and lets the engines share the rest: open the
// devices while pinned to the engine CPUs, then move to a poster CPU.
#pragma once
#include <string>
#include <vector>

namespace kinet::perf {

enum class PinMode : unsigned char { Auto, On, Off };
const char* pin_mode_name(PinMode m);

struct CpuPlan {
  bool pinned = false;
  std::vector<int> posters;  // CPU of poster thread i (main thread = 0)
  std::vector<int> engines;  // CPUs the NIC engine threads may use
  std::string note;          // one line for the table header and the JSON
};

// CPUs this process may run on (sched_getaffinity; honours taskset/cpusets).
std::vector<int> allowed_cpus();

// Auto pins only when busy threads (posters + engines) outnumber CPUs and
// each poster can still get a CPU of its own with one left for the engines.
CpuPlan plan_cpus(PinMode mode, unsigned posters, unsigned engines);

// Restricts the calling thread to `cpus`. Returns false (and changes nothing) on failure.
bool pin_this_thread(const std::vector<int>& cpus);

}  // namespace kinet::perf
