#include <cstdio>
#include <cstring>
#include <string>

#include "kinet/kinet.hpp"

namespace kinet {
namespace {
[[noreturn]] void bad(const std::string& why) { throw Error(ErrorCode::InvalidArgument, "QP info: " + why); }
std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}
}  // namespace

std::vector<uint8_t> QpInfo::serialize() const {
  std::vector<uint8_t> out(sizeof(QpInfo));
  std::memcpy(out.data(), this, sizeof(QpInfo));
  return out;
}

void QpInfo::validate() const {
  if (magic != kMagic) bad("bad magic " + hex(magic) + ", expected " + hex(kMagic) + " (not a kinet QP info blob)");
  if (version != 1) bad("version " + std::to_string(version) + " is not supported (expected 1)");
  if (provider != 1 && provider != 2)
    bad("unknown provider " + std::to_string(provider) + " (1 = emu, 2 = mlx5)");
  if (qpn == 0 || qpn >= (1u << 24)) bad("QP number " + hex(qpn) + " is out of range [1, 2^24)");
  if (mtu < 1 || mtu > 5)
    bad("MTU code " + std::to_string(mtu) + " is not an IB MTU (1..5 = 256..4096 bytes)");
  if (port == 0) bad("port 0 is not a port number (ports count from 1)");
}

QpInfo QpInfo::deserialize(const void* data, size_t len) {
  if (!data) throw Error(ErrorCode::InvalidArgument, "QP info blob is a null pointer");
  if (len != sizeof(QpInfo))
    throw Error(ErrorCode::InvalidArgument,
                "QP info blob has " + std::to_string(len) + " bytes, expected " + std::to_string(sizeof(QpInfo)));
  QpInfo q;
  std::memcpy(&q, data, sizeof q);
  q.validate();
  return q;
}
}  // namespace kinet
