// kinet — fields of the blobs QpInfo and RemoteKey serialize (qp_info.cpp,
// remote_key.cpp): host byte order at a byte offset. Internal header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kinet::blob {

// The T at byte `off` of `p` (the caller checked the length).
template <class T>
T get(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof v);
  return v;
}

// Stores `v` (or the `n` bytes at `v`) at byte `off` of `b`, which is long enough.
template <class T>
void put(std::vector<uint8_t>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof v);
}
inline void put(std::vector<uint8_t>& b, size_t off, const void* v, size_t n) { std::memcpy(b.data() + off, v, n); }

}  // namespace kinet::blob
