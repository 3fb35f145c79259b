#include "fabric/endpoint.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "kinet/kinet.hpp"

namespace kinet::fabric {

const char* via_name(Via v) {
  switch (v) {
    case Via::Tcp: return "tcp";
    case Via::Shm: return "shm";
    case Via::Auto: return "auto";
  }
  return "?";
}

namespace {
bool valid_boot_id(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}
bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 90) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '_' ||
          c == '.'))
      return false;
  return true;
}
}  // namespace

std::string HostId::str() const { return "host " + boot_id + " netns " + std::to_string(netns); }

const HostId& this_host() {
  static const HostId h = [] {
    HostId r;
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::getline(f, r.boot_id);
    if (!valid_boot_id(r.boot_id))
      throw Error(ErrorCode::System, "emu fabric: can't read this host's boot id from "
                                     "/proc/sys/kernel/random/boot_id (got \"" + r.boot_id.substr(0, 40) + "\")");
    struct stat st {};
    if (::stat("/proc/self/ns/net", &st) != 0)
      throw Error(ErrorCode::System,
                  std::string("emu fabric: can't identify this network namespace: stat /proc/self/ns/net: ") +
                      std::strerror(errno));
    r.netns = static_cast<uint64_t>(st.st_ino);
    return r;
  }();
  return h;
}

std::string shm_endpoint(const std::string& name, const HostId& h) { return "shm " + name + " " + h.str(); }

Endpoint parse_endpoint(const std::string& text) {
  auto bad = [&](const std::string& why) -> Endpoint {
    throw Error(ErrorCode::InvalidArgument, "endpoint \"" + text + "\": " + why);
  };
  if (text.empty()) return bad("empty");
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t sep = text.find(", ", at);
    parts.push_back(text.substr(at, sep == std::string::npos ? std::string::npos : sep - at));
    if (sep == std::string::npos) break;
    at = sep + 2;
  }
  if (parts.size() > 2) return bad("more than two alternatives");
  Endpoint e;
  for (const std::string& p : parts) {
    if (p.rfind("tcp ", 0) == 0) {
      if (!e.tcp.empty()) return bad("two tcp alternatives");
      e.tcp = p;  // its address is checked when it is used (parse_tcp_endpoint)
    } else if (p.rfind("shm ", 0) == 0) {
      if (!e.shm_name.empty()) return bad("two shm alternatives");
      std::istringstream in(p.substr(4));
      std::string name, kh, boot, kn, ino, extra;
      in >> name >> kh >> boot >> kn >> ino;
      if (in >> extra) return bad("trailing \"" + extra + "\" after the shm alternative");
      if (!valid_name(name)) return bad("shm listener name \"" + name + "\" is not 1..90 of [0-9A-Za-z._-]");
      if (kh != "host" || !valid_boot_id(boot))
        return bad("the shm alternative lacks \"host <boot id>\" (36 lower-case hex digits and dashes)");
      if (kn != "netns" || ino.empty() || ino.size() > 20 || ino.find_first_not_of("0123456789") != std::string::npos)
        return bad("the shm alternative lacks \"netns <inode>\" (a decimal number)");
      errno = 0;
      const unsigned long long v = std::strtoull(ino.c_str(), nullptr, 10);
      if (errno == ERANGE) return bad("netns inode " + ino + " is out of range");
      if (p != "shm " + name + " host " + boot + " netns " + ino) return bad("extra spaces in the shm alternative");
      e.shm_name = name;
      e.shm_host.boot_id = boot;
      e.shm_host.netns = v;
    } else {
      return bad("alternative \"" + p + "\" is neither \"tcp ADDRESS:PORT\" nor \"shm NAME host BOOT-ID netns INODE\"");
    }
  }
  return e;
}

}  // namespace kinet::fabric
