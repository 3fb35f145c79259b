#include <cstdio>
#include <cstring>
#include <string>

#include "core/blob.hpp"
#include "core/text.hpp"
#include "kinet/kinet.hpp"

namespace kinet {
namespace {
[[noreturn]] void bad(const std::string& why) { throw Error(ErrorCode::InvalidArgument, "QP info: " + why); }
using text::hex;

// Header offsets (host byte order, as the 64-byte blob of version 1 always was).
constexpr size_t kOffEndpointLen = 44;  // u16; the first reserved word's low half
using blob::get;
using blob::put;
}  // namespace

std::vector<uint8_t> QpInfo::serialize() const {
  std::vector<uint8_t> out(kHeaderBytes + endpoint.size(), 0);
  put(out, 0, &magic, 4);
  put(out, 4, &version, 2);
  put(out, 6, &provider, 2);
  put(out, 8, &node, 8);
  put(out, 16, gid, 16);
  put(out, 32, &qpn, 4);
  put(out, 36, &psn, 4);
  put(out, 40, &lid, 2);
  out[42] = mtu;
  out[43] = port;
  const uint32_t r0 = reserved[0] + static_cast<uint32_t>(endpoint.size());  // reserved[0] is 0 when valid
  put(out, kOffEndpointLen, &r0, 4);
  put(out, 48, &reserved[1], 16);
  if (!endpoint.empty()) std::memcpy(out.data() + kHeaderBytes, endpoint.data(), endpoint.size());
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
  for (int i = 0; i < 5; ++i)
    if (reserved[i] != 0) bad("reserved word " + std::to_string(i) + " is " + hex(reserved[i]) + ", must be 0");
  if (endpoint.size() > kMaxEndpoint)
    bad("endpoint of " + std::to_string(endpoint.size()) + " bytes is longer than " + std::to_string(kMaxEndpoint));
  for (size_t i = 0; i < endpoint.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(endpoint[i]);
    if (c < 0x20 || c > 0x7e) bad("endpoint byte " + std::to_string(i) + " is " + hex(c) + ", not printable ASCII");
  }
}

QpInfo QpInfo::deserialize(const void* data, size_t len) {
  if (!data) throw Error(ErrorCode::InvalidArgument, "QP info blob is a null pointer");
  if (len < kHeaderBytes)
    throw Error(ErrorCode::InvalidArgument, "QP info blob has " + std::to_string(len) +
                                                " bytes, shorter than its " + std::to_string(kHeaderBytes) +
                                                "-byte header");
  const uint8_t* p = static_cast<const uint8_t*>(data);
  // What the blob is before what its lengths say: garbage is named as such.
  if (const uint32_t m = get<uint32_t>(p, 0); m != kMagic)
    bad("bad magic " + hex(m) + ", expected " + hex(kMagic) + " (not a kinet QP info blob)");
  if (const uint16_t v = get<uint16_t>(p, 4); v != 1)
    bad("version " + std::to_string(v) + " is not supported (expected 1)");
  const uint16_t ep_len = get<uint16_t>(p, kOffEndpointLen);
  if (len != kHeaderBytes + ep_len)
    throw Error(ErrorCode::InvalidArgument, "QP info blob has " + std::to_string(len) + " bytes, expected " +
                                                std::to_string(kHeaderBytes + ep_len) + " (" +
                                                std::to_string(kHeaderBytes) + "-byte header + a " +
                                                std::to_string(ep_len) + "-byte endpoint)");
  QpInfo q{};
  q.magic = get<uint32_t>(p, 0);
  q.version = get<uint16_t>(p, 4);
  q.provider = get<uint16_t>(p, 6);
  q.node = get<uint64_t>(p, 8);
  std::memcpy(q.gid, p + 16, 16);
  q.qpn = get<uint32_t>(p, 32);
  q.psn = get<uint32_t>(p, 36);
  q.lid = get<uint16_t>(p, 40);
  q.mtu = p[42];
  q.port = p[43];
  q.reserved[0] = get<uint16_t>(p, kOffEndpointLen + 2);  // the endpoint length's upper half: must be 0
  std::memcpy(&q.reserved[1], p + 48, 16);
  q.endpoint.assign(reinterpret_cast<const char*>(p + kHeaderBytes), ep_len);
  q.validate();
  return q;
}
}  // namespace kinet
