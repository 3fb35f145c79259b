// kinet transport tests — what the engine's wire decoders (msg_wire.hpp) must
// satisfy on any input, shared by the deterministic fuzz test and the
// libFuzzer entry point: no read past n (the caller passes an exact-size heap
// copy; ASan watches), a failure is one non-empty line, and an accepted
// message is canonical: encoding what was decoded gives the same bytes.
#pragma once
#include <cstring>
#include <string>
#include <vector>

#include "transports/msg_wire.hpp"

namespace kinet::transport::test {

// "" when the decoders behaved; else what went wrong.
inline std::string check_wire(const uint8_t* p, size_t n, int* accepted) {
  *accepted = 0;
  wire::Request r;
  std::string why = wire::decode(p, n, &r);
  if (why.empty()) {
    ++*accepted;
    std::vector<uint8_t> again(wire::kRequestBytes);
    wire::encode_header(r, again.data());
    if (r.payload) again.insert(again.end(), r.payload, r.payload + r.length);
    if (r.flags & wire::kFlagIpc) {
      again.resize(again.size() + wire::kIpcRefBytes);
      wire::encode(r.ipc, again.data() + wire::kRequestBytes);
      if (r.payload) return "request with an ipc reference and a payload";
    }
    if (again.size() != n || std::memcmp(again.data(), p, n) != 0) return "request accepted but not canonical";
    if (r.payload && (r.payload < p || r.payload + r.length > p + n)) return "request payload outside the message";
  } else if (why.find('\n') != std::string::npos) {
    return "request reason spans lines: " + why;
  }
  wire::Answer a;
  why = wire::decode(p, n, &a);
  if (why.empty()) {
    ++*accepted;
    std::vector<uint8_t> again(wire::kAnswerBytes);
    wire::encode_header(a, again.data());
    if (a.payload) again.insert(again.end(), a.payload, a.payload + a.length);
    if (again.size() != n || std::memcmp(again.data(), p, n) != 0) return "answer accepted but not canonical";
  } else if (why.find('\n') != std::string::npos) {
    return "answer reason spans lines: " + why;
  }
  wire::Ack k;
  why = wire::decode(p, n, &k);
  if (why.empty()) {
    ++*accepted;
    std::vector<uint8_t> again(wire::kAckBytes);
    wire::encode(k, again.data());
    if (again.size() != n || std::memcmp(again.data(), p, n) != 0) return "ack accepted but not canonical";
  } else if (why.find('\n') != std::string::npos) {
    return "ack reason spans lines: " + why;
  }
  if (*accepted > 1) return "accepted as more than one of request, answer, ack";
  return "";
}

}  // namespace kinet::transport::test
