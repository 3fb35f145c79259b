// kinet fabric — the endpoint text a cross-process software NIC puts in its
// QpInfo, saying how other processes reach its process, and the choice of a
// transport from it.
//
//   "tcp 192.0.2.2:41234"                                  the TCP listener
//   "shm 9f3c...e1 host <boot-id> netns <inode>"           the shm listener
//   "tcp 192.0.2.2:41234, shm 9f3c...e1 host ... netns ..." both (auto)
//
// "Same host" for shared memory means the same kernel boot (the boot id in
// /proc/sys/kernel/random/boot_id) AND the same network namespace (the inode
// of /proc/self/ns/net): the shm listener is an abstract AF_UNIX name, and
// abstract names exist per network namespace. Two processes in different
// namespaces of one machine are, for this fabric, two hosts (TCP).
#pragma once
#include <cstdint>
#include <string>

namespace kinet::fabric {

// Which transports a NIC listens on and uses (DeviceOptions::emu_fabric).
enum class Via : uint8_t { Tcp = 1, Shm = 2, Auto = 3 };
const char* via_name(Via v);  // "tcp", "shm", "auto"

struct HostId {
  std::string boot_id;  // 36 characters: hex digits and dashes
  uint64_t netns = 0;   // inode of the network namespace
  bool operator==(const HostId&) const = default;
  std::string str() const;  // "host <boot-id> netns <inode>"
};
// This process's host id (read once). Throws System when /proc can't say.
const HostId& this_host();

struct Endpoint {
  std::string tcp;       // "tcp ADDRESS:PORT", or empty
  std::string shm_name;  // the ShmListener name, or empty
  HostId shm_host;       // where shm_name listens (when shm_name is set)
};
// "shm NAME host BOOT netns INO".
std::string shm_endpoint(const std::string& name, const HostId& h);
// Parses the text above: one or two alternatives separated by ", ", at most
// one of each kind. Throws InvalidArgument naming the endpoint and what is
// wrong (unknown transport, a malformed shm part, a repeated kind, empty).
Endpoint parse_endpoint(const std::string& text);

}  // namespace kinet::fabric
