#include "transports/msg_wire.hpp"

#include <bit>
#include <cstdio>
#include <cstring>

namespace kinet::transport::wire {
namespace {
// Little-endian fields: one memcpy on little-endian hosts (the loop cost 7 %
// of a loop-transport round trip), byte by byte elsewhere.
template <class T>
void put(uint8_t* p, size_t off, T v) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p + off, &v, sizeof(T));
  } else {
    for (size_t i = 0; i < sizeof(T); ++i) p[off + i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
  }
}
template <class T>
T get(const uint8_t* p, size_t off) {
  if constexpr (std::endian::native == std::endian::little) {
    T v;
    std::memcpy(&v, p + off, sizeof(T));
    return v;
  } else {
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(p[off + i]) << (8 * i);
    return static_cast<T>(v);
  }
}
std::string num(uint64_t v) { return std::to_string(v); }

bool is_request(uint8_t t) { return t >= 1 && t <= 6; }
bool is_atomic(MsgType t) { return t == MsgType::FetchAdd || t == MsgType::CompareSwap; }
bool has_payload(MsgType t) { return t == MsgType::Put || t == MsgType::PutSignal; }
}  // namespace

const char* type_name(MsgType t) {
  switch (t) {
    case MsgType::Put: return "put";
    case MsgType::Get: return "get";
    case MsgType::FetchAdd: return "fetch_add";
    case MsgType::CompareSwap: return "compare_swap";
    case MsgType::Signal: return "signal";
    case MsgType::PutSignal: return "put_signal";
    case MsgType::Answer: return "answer";
    case MsgType::Ack: return "ack";
  }
  return "unknown";
}

void encode_header(const Request& r, uint8_t* o) {
  std::memset(o, 0, kRequestBytes);
  put<uint32_t>(o, 0, kMagic);
  o[4] = kVersion;
  o[5] = static_cast<uint8_t>(r.type);
  o[6] = r.sig_op;
  o[7] = r.flags;
  put(o, 8, r.node);
  put(o, 16, r.seq);
  put(o, 24, r.op_id);
  put(o, 32, r.key);
  put(o, 36, r.sig_key);
  put(o, 40, r.raddr);
  put(o, 48, r.length);
  put(o, 56, r.operand);
  put(o, 64, r.compare);
  put(o, 72, r.sig_raddr);
  put(o, kAckOffset, r.ack);
}

void encode(const Ack& a, uint8_t* o) {
  std::memset(o, 0, kAckBytes);
  put<uint32_t>(o, 0, kMagic);
  o[4] = kVersion;
  o[5] = static_cast<uint8_t>(MsgType::Ack);
  put(o, 8, a.node);
  put(o, 16, a.ack);
}

void encode(const IpcRef& r, uint8_t* o) {
  std::memcpy(o, r.handle, kIpcHandleBytes);
  put(o, kIpcHandleBytes, r.offset);
}

void encode_header(const Answer& a, uint8_t* o) {
  std::memset(o, 0, kAnswerBytes);
  put<uint32_t>(o, 0, kMagic);
  o[4] = kVersion;
  o[5] = static_cast<uint8_t>(MsgType::Answer);
  put(o, 8, a.node);
  put(o, 16, a.seq);
  put(o, 24, a.op_id);
  put<uint32_t>(o, 32, static_cast<uint32_t>(static_cast<int32_t>(a.status)));
  put(o, 40, a.old_value);
  put(o, 48, a.length);
}

bool peek_type(const uint8_t* m, size_t n, MsgType* t) {
  if (n < 8 || get<uint32_t>(m, 0) != kMagic || m[4] != kVersion) return false;
  *t = static_cast<MsgType>(m[5]);
  return true;
}

static std::string check_prefix(const uint8_t* m, size_t n, size_t header) {
  if (n < 8) return "short message: " + num(n) + " bytes, less than the 8-byte prefix";
  if (get<uint32_t>(m, 0) != kMagic) return "bad magic 0x" + [&] {
    char b[16];
    std::snprintf(b, sizeof b, "%08x", get<uint32_t>(m, 0));
    return std::string(b);
  }();
  if (m[4] != kVersion) return "unsupported version " + num(m[4]) + " (this side speaks " + num(kVersion) + ")";
  if (n < header) return "short message: " + num(n) + " bytes, less than the " + num(header) + "-byte header";
  return {};
}

std::string decode(const uint8_t* m, size_t n, Request* out) { return decode(m, n, nullptr, 0, out); }

std::string decode(const uint8_t* m, size_t n, const uint8_t* b, size_t bn, Request* out) {
  if (std::string e = check_prefix(m, n, kRequestBytes); !e.empty()) return e;
  if (bn && n != kRequestBytes) return "split message: a first part of " + num(n) + " bytes, not the header's " +
                                       num(kRequestBytes);
  if (!is_request(m[5])) return "bad type " + num(m[5]) + " for a request";
  Request r;
  r.type = static_cast<MsgType>(m[5]);
  r.sig_op = m[6];
  r.flags = m[7];
  if (r.flags & ~(kFlagIpc | kFlagAfterPieces))
    return "reserved flag bits " + num(r.flags & ~(kFlagIpc | kFlagAfterPieces)) + " set";
  r.node = get<uint64_t>(m, 8);
  r.seq = get<uint64_t>(m, 16);
  r.op_id = get<uint64_t>(m, 24);
  r.key = get<uint32_t>(m, 32);
  r.sig_key = get<uint32_t>(m, 36);
  r.raddr = get<uint64_t>(m, 40);
  r.length = get<uint64_t>(m, 48);
  r.operand = get<uint64_t>(m, 56);
  r.compare = get<uint64_t>(m, 64);
  r.sig_raddr = get<uint64_t>(m, 72);
  r.ack = get<uint64_t>(m, kAckOffset);
  const char* tn = type_name(r.type);
  const bool sig = r.type == MsgType::Signal || r.type == MsgType::PutSignal;
  if (sig ? (r.sig_op != 1 && r.sig_op != 2) : r.sig_op != 0)
    return std::string(tn) + ": bad signal op " + num(r.sig_op);
  if (r.op_id == 0) return std::string(tn) + ": op id 0";
  if (r.key == 0) return std::string(tn) + ": key 0";
  if (r.type == MsgType::PutSignal ? r.sig_key == 0 : r.sig_key != 0)
    return std::string(tn) + ": bad signal key " + num(r.sig_key);
  if (r.type != MsgType::PutSignal && r.sig_raddr != 0) return std::string(tn) + ": signal address set";
  const bool uses_operand = is_atomic(r.type) || sig;
  if (!uses_operand && r.operand != 0) return std::string(tn) + ": operand set";
  const bool after = r.flags & kFlagAfterPieces;
  if (after && (r.type != MsgType::PutSignal || (r.flags & kFlagIpc)))
    return std::string(tn) + ": after-pieces flag on " + (r.flags & kFlagIpc ? "an ipc reference" : "this type");
  if (after && (r.compare == 0 || r.compare >= r.seq))
    return std::string(tn) + ": after " + num(r.compare) + " pieces at sequence number " + num(r.seq);
  if (r.type != MsgType::CompareSwap && !after && r.compare != 0) return std::string(tn) + ": compare value set";
  if ((is_atomic(r.type) || r.type == MsgType::Signal) && r.length != 8)
    return std::string(tn) + ": length " + num(r.length) + ", not 8";
  const size_t body = bn ? bn : n - kRequestBytes;
  if (r.flags & kFlagIpc) {
    if (!has_payload(r.type) && r.type != MsgType::Get)
      return std::string(tn) + ": an ipc reference on an operation without data";
    if (body != kIpcRefBytes)
      return std::string(tn) + ": ipc reference of " + num(body) + " bytes, not " + num(kIpcRefBytes);
    if (r.length == 0 || r.length > kMaxIpcBytes)
      return std::string(tn) + ": ipc length " + num(r.length) + ", not 1 .. " + num(kMaxIpcBytes);
    const uint8_t* ref = bn ? b : m + kRequestBytes;
    std::memcpy(r.ipc.handle, ref, kIpcHandleBytes);
    r.ipc.offset = get<uint64_t>(ref, kIpcHandleBytes);
    if (r.ipc.offset + r.length < r.ipc.offset)
      return std::string(tn) + ": ipc offset " + num(r.ipc.offset) + " + length " + num(r.length) + " wraps";
  } else if (has_payload(r.type)) {
    if (r.length != body)
      return std::string(tn) + ": length " + num(r.length) + " but " + num(body) + " payload bytes";
    r.payload = body ? (bn ? b : m + kRequestBytes) : nullptr;
  } else if (body != 0) {
    return std::string(tn) + ": " + num(body) + " payload bytes, expected none";
  }
  *out = r;
  return {};
}

std::string decode(const uint8_t* m, size_t n, Answer* out) { return decode(m, n, nullptr, 0, out); }

std::string decode(const uint8_t* m, size_t n, const uint8_t* b, size_t bn, Answer* out) {
  if (std::string e = check_prefix(m, n, kAnswerBytes); !e.empty()) return e;
  if (bn && n != kAnswerBytes) return "split message: a first part of " + num(n) + " bytes, not the header's " +
                                      num(kAnswerBytes);
  if (m[5] != static_cast<uint8_t>(MsgType::Answer)) return "bad type " + num(m[5]) + " for an answer";
  if (m[6] != 0 || m[7] != 0 || get<uint32_t>(m, 36) != 0) return "answer: reserved bytes not 0";
  Answer a;
  a.node = get<uint64_t>(m, 8);
  a.seq = get<uint64_t>(m, 16);
  a.op_id = get<uint64_t>(m, 24);
  const int32_t st = static_cast<int32_t>(get<uint32_t>(m, 32));
  a.status = static_cast<Status>(st);
  a.old_value = get<uint64_t>(m, 40);
  a.length = get<uint64_t>(m, 48);
  if (a.op_id == 0) return "answer: op id 0";
  if (a.status != Status::Ok && a.status != Status::RemoteAccess && a.status != Status::RemoteInvalidRequest &&
      a.status != Status::RemoteOperation)
    return "answer: bad status " + std::to_string(st);
  const size_t body = bn ? bn : n - kAnswerBytes;
  if (a.status != Status::Ok && (a.length != 0 || a.old_value != 0))
    return "answer: a failure with length " + num(a.length) + " / old value set";
  if (a.length != body) return "answer: length " + num(a.length) + " but " + num(body) + " payload bytes";
  a.payload = body ? (bn ? b : m + kAnswerBytes) : nullptr;
  *out = a;
  return {};
}

std::string decode(const uint8_t* m, size_t n, Ack* out) {
  if (std::string e = check_prefix(m, n, kAckBytes); !e.empty()) return e;
  if (m[5] != static_cast<uint8_t>(MsgType::Ack)) return "bad type " + num(m[5]) + " for an ack";
  if (m[6] != 0 || m[7] != 0) return "ack: reserved bytes not 0";
  if (n != kAckBytes) return "ack: " + num(n) + " bytes, not " + num(kAckBytes);
  Ack a;
  a.node = get<uint64_t>(m, 8);
  a.ack = get<uint64_t>(m, 16);
  if (a.ack == 0) return "ack: ack 0";
  *out = a;
  return {};
}

}  // namespace kinet::transport::wire
