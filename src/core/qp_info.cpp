#include <cstring>
#include <string>

#include "kinet/kinet.hpp"

namespace kinet {
std::vector<uint8_t> QpInfo::serialize() const {
  std::vector<uint8_t> out(sizeof(QpInfo));
  std::memcpy(out.data(), this, sizeof(QpInfo));
  return out;
}

QpInfo QpInfo::deserialize(const void* data, size_t len) {
  if (!data || len != sizeof(QpInfo))
    throw Error(ErrorCode::InvalidArgument,
                "QP info blob has " + std::to_string(len) + " bytes, expected " + std::to_string(sizeof(QpInfo)));
  QpInfo q;
  std::memcpy(&q, data, sizeof q);
  if (q.magic != kMagic) throw Error(ErrorCode::InvalidArgument, "QP info blob has a bad magic number (not from kinet?)");
  if (q.version != 1)
    throw Error(ErrorCode::InvalidArgument, "QP info blob version " + std::to_string(q.version) + " is not supported (expected 1)");
  if (q.qpn == 0 || q.qpn > 0xffffff) throw Error(ErrorCode::InvalidArgument, "QP info blob has an invalid QP number");
  return q;
}
}  // namespace kinet
