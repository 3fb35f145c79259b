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
// decode_write_head on the first kHeaderBytes + kRequestFixed bytes of a
// frame: refused for a known reason, or a WRITE whose header announces
// exactly its payload after the fixed part, the same Request that decode()
// finds in the whole frame (when that decodes).
inline std::string check_write_head(const uint8_t* p, size_t n, const Frame* whole) {
  constexpr size_t kHead = kHeaderBytes + kRequestFixed;
  if (n < kHead) return "";
  Frame h;
  std::string why = "untouched";
  if (!decode_write_head(p, kHead, &h, &why)) {
    if (whole && whole->type == FrameType::Request && whole->request.kind == OpKind::Write)
      return "write head refused a WRITE that decode() accepted: '" + why + "'";
    for (const char* prefix : {"write head: ", "frame header: ", "request: "})
      if (why.rfind(prefix, 0) == 0) return "";
    return "write head refused with an unexpected reason: '" + why + "'";
  }
  if (h.type != FrameType::Request || h.request.kind != OpKind::Write || h.request.payload != nullptr)
    return "write head accepted something other than a WRITE Request without its payload";
  uint32_t body = 0;
  std::string w;
  if (!frame_body_len(p, kMaxFrame, &body, &w) || body != kRequestFixed + h.request.len)
    return "write head accepted, but the header's body_len is not the fixed part + len";
  if (whole) {
    const Request& a = h.request;
    const Request& b = whole->request;
    if (whole->type != FrameType::Request || a.seq != b.seq || a.from_node != b.from_node || a.to_node != b.to_node ||
        a.raddr != b.raddr || a.len != b.len || a.from_qpn != b.from_qpn || a.to_qpn != b.to_qpn ||
        a.rkey != b.rkey || a.kind != b.kind || a.flags != b.flags)
      return "write head and decode() read different Requests from one frame";
  }
  return "";
}

inline std::string check_decode(const uint8_t* p, size_t n, bool* accepted) {
  Frame f;
  std::string why = "untouched";
  *accepted = decode(p, n, &f, &why);
  if (std::string bad = check_write_head(p, n, *accepted ? &f : nullptr); !bad.empty()) return bad;
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
