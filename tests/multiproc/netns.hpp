// kinet tests — two network namespaces joined by a veth pair: two "hosts" on
// one machine (side 0 has <subnet>.1/24, side 1 <subnet>.2/24, both with lo
// up). Needs root and iproute2; callers GTEST_SKIP with kNetnsSkip otherwise.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace kinet::test {

// Runs a shell command quietly; true when it exited 0.
inline bool netns_sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

// The ip binary's path, for argv prefixes ("ip netns exec NS ...").
inline std::string ip_path() { return access("/usr/sbin/ip", X_OK) == 0 ? "/usr/sbin/ip" : "/sbin/ip"; }

inline constexpr const char* kNetnsSkip = "cannot create network namespaces and a veth pair (needs root and ip netns)";

class NetnsPair {
 public:
  // Names only; nothing is made until create(). `ns_stem` gives namespaces
  // "kinet_<ns_stem>_a<pid>" / "_b<pid>"; `if_stem` (at most 3 chars) gives
  // interfaces "k<if_stem>a<pid>" / "k<if_stem>b<pid>" (within IFNAMSIZ);
  // `subnet` is the first three octets, e.g. "10.214.0".
  NetnsPair(const std::string& ns_stem, const std::string& if_stem, std::string subnet) : subnet_(std::move(subnet)) {
    const std::string tag = std::to_string(getpid());
    const std::string t8 = tag.substr(tag.size() > 8 ? tag.size() - 8 : 0);
    ns[0] = "kinet_" + ns_stem + "_a" + tag;
    ns[1] = "kinet_" + ns_stem + "_b" + tag;
    ifname[0] = "k" + if_stem + "a" + t8;
    ifname[1] = "k" + if_stem + "b" + t8;
  }
  NetnsPair(const NetnsPair&) = delete;
  NetnsPair& operator=(const NetnsPair&) = delete;
  // Deletes what create() made (deleting a namespace deletes its veth end too).
  ~NetnsPair() {
    for (int i = 0; i < 2; ++i)
      if (made_[i]) netns_sh("ip netns del " + ns[i]);
  }

  // Makes both namespaces and the veth pair, sets the addresses and brings
  // the veth ends and lo up. False when any step fails (not root, no ip):
  // what was made is still deleted by the destructor.
  bool create() {
    return netns_sh("ip netns add " + ns[0]) && (made_[0] = true) && netns_sh("ip netns add " + ns[1]) &&
           (made_[1] = true) &&
           netns_sh("ip link add " + ifname[0] + " netns " + ns[0] + " type veth peer name " + ifname[1] + " netns " +
                    ns[1]) &&
           netns_sh("ip -n " + ns[0] + " addr add " + addr(0) + "/24 dev " + ifname[0]) &&
           netns_sh("ip -n " + ns[1] + " addr add " + addr(1) + "/24 dev " + ifname[1]) &&
           netns_sh("ip -n " + ns[0] + " link set " + ifname[0] + " up") &&
           netns_sh("ip -n " + ns[1] + " link set " + ifname[1] + " up") &&
           netns_sh("ip -n " + ns[0] + " link set lo up") && netns_sh("ip -n " + ns[1] + " link set lo up");
  }

  // Waits (polling, at most `bound`) until both veth ends have carrier and are
  // operationally up: libfabric's tcp provider and UCX list only running
  // interfaces. False when they are not up by then.
  bool wait_running(std::chrono::milliseconds bound = std::chrono::seconds(10)) const {
    const auto end = std::chrono::steady_clock::now() + bound;
    auto up = [&](int i) {
      return netns_sh("ip -n " + ns[i] + " link show dev " + ifname[i] + " | grep -q 'LOWER_UP.*state UP'");
    };
    for (;;) {
      if (up(0) && up(1)) return true;
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // Side i's address ("<subnet>.1" or ".2").
  std::string addr(int i) const { return subnet_ + (i == 0 ? ".1" : ".2"); }
  // argv prefix running a program in side i's namespace.
  std::vector<std::string> exec_prefix(int i) const { return {ip_path(), "netns", "exec", ns[i]}; }

  std::string ns[2], ifname[2];

 private:
  std::string subnet_;
  bool made_[2] = {false, false};
};

}  // namespace kinet::test
