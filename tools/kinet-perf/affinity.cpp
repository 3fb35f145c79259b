// kinet-perf — CPU placement.
#include "affinity.hpp"

#include <pthread.h>
#include <sched.h>

#include <string>

namespace kinet::perf {

const char* pin_mode_name(PinMode m) {
  switch (m) {
    case PinMode::Auto: return "auto";
    case PinMode::On: return "on";
    case PinMode::Off: return "off";
  }
  return "?";
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

namespace {
std::string list(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}
}  // namespace

CpuPlan plan_cpus(PinMode mode, unsigned posters, unsigned engines) {
  CpuPlan p;
  const std::vector<int> cpus = allowed_cpus();
  const size_t n = cpus.size();
  if (mode == PinMode::Off) {
    p.note = "off";
    return p;
  }
  if (mode == PinMode::Auto && n >= posters + engines) {
    const unsigned busy = posters + engines;
    p.note = "off (" + std::to_string(n) + " CPUs for " + std::to_string(busy) + (busy == 1 ? " busy thread)" : " busy threads)");
    return p;
  }
  if (n < posters + 1) {
    p.note = "off (" + std::to_string(n) + " CPUs: too few to separate posters from the NIC engines)";
    return p;
  }
  p.pinned = true;
  p.posters.assign(cpus.begin(), cpus.begin() + posters);
  p.engines.assign(cpus.begin() + posters, cpus.end());
  p.note = std::string(mode == PinMode::Auto ? "auto: " : "") + "poster" + (posters > 1 ? "s" : "") + " on CPU " +
           list(p.posters) + ", NIC engines on CPU " + list(p.engines);
  return p;
}

bool pin_this_thread(const std::vector<int>& cpus) {
  if (cpus.empty()) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

}  // namespace kinet::perf
