// What must hold for decode() on any input (the fuzz test and the libFuzzer
// entry point both check it): it never reads past n (the caller passes an
// exact-size buffer; ASan watches), a failure says why under a known prefix,
// and an accepted frame is canonical: encoding what was decoded gives back
// exactly the input bytes (so no field, reserved byte or length escaped a check).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fabric/wire.hpp"

namespace kinet::fabric::test {

// "" when the invariants hold, else what broke. *accepted tells whether
// decode() took the input.
inline std::string check_decode(const uint8_t* p, size_t n, bool* accepted) {
  Frame f;
  std::string why = "untouched";
  *accepted = decode(p, n, &f, &why);
  if (!*accepted) {
    for (const char* prefix : {"frame: ", "frame header: ", "hello: ", "request: ", "response: "})
      if (why.rfind(prefix, 0) == 0) return "";
    return "refused with an unexpected reason: '" + why + "'";
  }
  std::vector<uint8_t> again;
  switch (f.type) {
    case FrameType::Hello: encode(f.hello, again); break;
    case FrameType::Request: encode(f.request, again); break;
    case FrameType::Response: encode(f.response, again); break;
    default: return "accepted a frame of unknown type " + std::to_string(static_cast<int>(f.type));
  }
  if (again.size() != n || (n && std::memcmp(again.data(), p, n) != 0))
    return "accepted a non-canonical frame of " + std::to_string(n) + " bytes (re-encoded: " +
           std::to_string(again.size()) + " bytes, different)";
  uint32_t body = 0;
  std::string w;
  if (!frame_body_len(p, kMaxFrame, &body, &w) || body + kHeaderBytes != n)
    return "accepted, but frame_body_len disagrees: " + w;
  return "";
}

}  // namespace kinet::fabric::test
