// RemoteKey: the blob form of a memory region's remote access (kinet.hpp).
#include <cstdio>
#include <cstring>
#include <string>

#include "core/blob.hpp"
#include "core/text.hpp"
#include "kinet/kinet.hpp"

namespace kinet {
namespace {
[[noreturn]] void bad_key(const std::string& why) { throw Error(ErrorCode::InvalidArgument, "remote key: " + why); }
using text::hex;
using blob::get;
using blob::put;
constexpr size_t kOffPackedLen = 40;
}  // namespace

RemoteKey MemoryRegion::remote_key() const {
  RemoteKey k;
  k.provider = 2;
  k.addr = addr_u64();
  k.length = length();
  k.rkey = rkey_value();
  k.access = access();
  return k;
}

std::vector<uint8_t> RemoteKey::serialize() const {
  validate();  // a blob that would not parse is never produced
  std::vector<uint8_t> out(kHeaderBytes + packed.size(), 0);
  put(out, 0, kMagic);
  put(out, 4, version);
  put(out, 6, provider);
  put(out, 8, node);
  put(out, 16, addr);
  put(out, 24, length);
  put(out, 32, rkey);
  put(out, 36, access);
  put(out, kOffPackedLen, static_cast<uint16_t>(packed.size()));
  if (!packed.empty()) std::memcpy(out.data() + kHeaderBytes, packed.data(), packed.size());
  return out;
}

void RemoteKey::validate() const {
  if (version != 1) bad_key("version " + std::to_string(version) + " is not supported (expected 1)");
  if (provider != kEmu && provider != kMlx5 && provider != kTransport)
    bad_key("unknown provider " + std::to_string(provider) + " (1 = emu, 2 = mlx5, 3 = transport)");
  if (length == 0) bad_key("length is 0 (a region has at least one byte)");
  if (addr + length < addr)
    bad_key("region [" + hex(addr) + ", +" + hex(length) + ") wraps past the end of the address space");
  if (access & ~uint32_t(kAccessAll)) bad_key("unknown access bits " + hex(access & ~uint32_t(kAccessAll)));
  if (packed.size() > kMaxPacked)
    bad_key("packed key of " + std::to_string(packed.size()) + " bytes is longer than " + std::to_string(kMaxPacked));
}

RemoteKey RemoteKey::deserialize(const void* data, size_t len) {
  if (!data) bad_key("blob is a null pointer");
  if (len < kHeaderBytes)
    bad_key("blob has " + std::to_string(len) + " bytes, shorter than its " + std::to_string(kHeaderBytes) +
        "-byte header");
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (const uint32_t m = get<uint32_t>(p, 0); m != kMagic)
    bad_key("bad magic " + hex(m) + ", expected " + hex(kMagic) + " (not a kinet remote key blob)");
  if (const uint16_t v = get<uint16_t>(p, 4); v != 1)
    bad_key("version " + std::to_string(v) + " is not supported (expected 1)");
  const uint16_t n = get<uint16_t>(p, kOffPackedLen);
  if (len != kHeaderBytes + n)
    bad_key("blob has " + std::to_string(len) + " bytes, expected " + std::to_string(kHeaderBytes + n) + " (" +
        std::to_string(kHeaderBytes) + "-byte header + a " + std::to_string(n) + "-byte packed key)");
  for (size_t i = kOffPackedLen + 2; i < kHeaderBytes; ++i)
    if (p[i] != 0) bad_key("reserved byte " + std::to_string(i) + " is " + hex(p[i]) + ", must be 0");
  RemoteKey k;
  k.version = get<uint16_t>(p, 4);
  k.provider = get<uint16_t>(p, 6);
  k.node = get<uint64_t>(p, 8);
  k.addr = get<uint64_t>(p, 16);
  k.length = get<uint64_t>(p, 24);
  k.rkey = get<uint32_t>(p, 32);
  k.access = get<uint32_t>(p, 36);
  k.packed.assign(p + kHeaderBytes, p + kHeaderBytes + n);
  k.validate();
  return k;
}
}  // namespace kinet
