// kinet fabric — encoding and decoding of the wire protocol (wire.hpp).
// decode() is the only reader of peer bytes: every load goes through a
// Reader that checks it against the frame's length first.
#include "fabric/wire.hpp"

#include <cassert>
#include <cstdio>
#include <cstring>

#include "core/text.hpp"

namespace kinet::fabric {
namespace {

// Fixed fields are written in place: one resize per frame, then plain
// little-endian stores (a push_back per byte, with its capacity check, was
// a visible share of a small Request's cost).
class Put {
 public:
  Put(std::vector<uint8_t>& o, size_t n) : o_(o) {
    const size_t at = o.size();
    o.resize(at + n);
    p_ = o.data() + at;
  }
  ~Put() { assert(p_ == o_.data() + o_.size()); }  // every reserved byte written
  void u8(uint8_t v) { *p_++ = v; }
  void u16(uint16_t v) { le(v); }
  void u32(uint32_t v) { le(v); }
  void u64(uint64_t v) { le(v); }
  void zeros(size_t n) {
    std::memset(p_, 0, n);
    p_ += n;
  }
  void bytes(const void* src, size_t n) {
    if (n) std::memcpy(p_, src, n);
    p_ += n;
  }

 private:
  template <class T> void le(T v) {
    for (size_t i = 0; i < sizeof(T); ++i) p_[i] = static_cast<uint8_t>(v >> (8 * i));
    p_ += sizeof(T);
  }
  std::vector<uint8_t>& o_;
  uint8_t* p_;
};
void put_bytes(std::vector<uint8_t>& o, const void* p, size_t n) {
  if (n) o.insert(o.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
}
void put_header(Put& o, FrameType t, uint64_t body_len) {
  assert(body_len <= kMaxFrame - kHeaderBytes);
  o.u32(kMagic);
  o.u8(kVersion);
  o.u8(static_cast<uint8_t>(t));
  o.u16(0);
  o.u32(static_cast<uint32_t>(body_len));
  o.u32(0);
}

uint16_t ld16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
uint32_t ld32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
uint64_t ld64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

using text::hex;
std::string num(uint64_t v) { return std::to_string(v); }

bool fail(std::string* why, std::string msg) {
  *why = std::move(msg);
  return false;
}

bool is_printable(const uint8_t* p, size_t n, size_t* bad) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] < 0x20 || p[i] > 0x7e) {
      *bad = i;
      return false;
    }
  return true;
}

bool decode_hello(const uint8_t* b, uint32_t len, Hello* h, std::string* why) {
  if (len < kHelloFixed)
    return fail(why, "hello: body of " + num(len) + " bytes is shorter than its fixed part (" + num(kHelloFixed) + ")");
  h->process_id = ld64(b);
  h->max_frame = ld32(b + 8);
  const uint16_t name_len = ld16(b + 12);
  if (uint16_t r = ld16(b + 14)) return fail(why, "hello: reserved field " + hex(r) + " (must be 0)");
  if (h->max_frame < kMaxFrame || h->max_frame > kMaxFrameCeiling)
    return fail(why, "hello: max_frame " + num(h->max_frame) + " outside [" + num(kMaxFrame) + ", " +
                         num(kMaxFrameCeiling) + "]");
  if (name_len > kMaxName) return fail(why, "hello: name_len " + num(name_len) + " exceeds " + num(kMaxName));
  if (len != kHelloFixed + name_len)
    return fail(why, "hello: body_len " + num(len) + " does not match name_len " + num(name_len) + " (" +
                         num(kHelloFixed + name_len) + " expected)");
  size_t bad = 0;
  if (!is_printable(b + kHelloFixed, name_len, &bad))
    return fail(why, "hello: name byte " + num(bad) + " (" + hex(b[kHelloFixed + bad]) + ") is not printable");
  h->name.assign(reinterpret_cast<const char*>(b + kHelloFixed), name_len);
  return true;
}

bool decode_request(const uint8_t* b, uint32_t len, Request* r, std::string* why) {
  if (len < kRequestFixed)
    return fail(why, "request: body of " + num(len) + " bytes is shorter than its fixed part (" +
                         num(kRequestFixed) + ")");
  r->seq = ld64(b);
  r->from_node = ld64(b + 8);
  r->to_node = ld64(b + 16);
  r->raddr = ld64(b + 24);
  r->len = ld64(b + 32);
  r->operand = ld64(b + 40);
  r->compare = ld64(b + 48);
  r->from_qpn = ld32(b + 56);
  r->to_qpn = ld32(b + 60);
  r->rkey = ld32(b + 64);
  const uint8_t kind = b[68];
  r->flags = b[69];
  r->payload = nullptr;
  for (int i = 70; i < 72; ++i)
    if (b[i]) return fail(why, "request: reserved byte " + num(i) + " is " + hex(b[i]) + " (must be 0)");
  if (kind < static_cast<uint8_t>(OpKind::Write) || kind > static_cast<uint8_t>(OpKind::Flush))
    return fail(why, "request: kind " + num(kind) + " is unknown (1..5)");
  r->kind = static_cast<OpKind>(kind);
  if (r->flags & ~kAckLater)
    return fail(why, "request: flags " + hex(r->flags) + " has unknown bits (known: ack_later " + hex(kAckLater) + ")");
  if ((r->flags & kAckLater) && r->kind != OpKind::Write)
    return fail(why, std::string("request: ") + op_kind_name(r->kind) + " with ack_later (only a WRITE's answer may wait)");
  if (r->from_qpn > 0xffffff) return fail(why, "request: from_qpn " + hex(r->from_qpn) + " exceeds 24 bits");
  if (r->to_qpn > 0xffffff) return fail(why, "request: to_qpn " + hex(r->to_qpn) + " exceeds 24 bits");
  const std::string what = std::string("request: ") + op_kind_name(r->kind);
  const bool atomic = r->kind == OpKind::FetchAdd || r->kind == OpKind::CompareSwap;
  if (r->kind == OpKind::Flush) {
    if (r->raddr || r->len || r->rkey)
      return fail(why, what + " with raddr " + hex(r->raddr) + ", len " + num(r->len) + ", rkey " + hex(r->rkey) +
                           " (all must be 0)");
  }
  if (atomic) {
    if (r->len != 8) return fail(why, what + " len " + num(r->len) + " (atomics are 8 bytes)");
  } else {
    if (r->len > kMaxChunk) return fail(why, what + " len " + num(r->len) + " exceeds kMaxChunk " + num(kMaxChunk));
    if (r->operand) return fail(why, what + " operand " + hex(r->operand) + " (must be 0)");
  }
  if (r->kind != OpKind::CompareSwap && r->compare) return fail(why, what + " compare " + hex(r->compare) + " (must be 0)");
  const uint64_t want = kRequestFixed + (r->kind == OpKind::Write ? r->len : 0);
  if (len != want)
    return fail(why, what + " of len " + num(r->len) + ": body_len " + num(len) + " (" + num(want) + " expected" +
                         (r->kind == OpKind::Write ? ")" : ", no payload)"));
  if (r->kind == OpKind::Write) r->payload = b + kRequestFixed;
  return true;
}

bool decode_response(const uint8_t* b, uint32_t len, Response* r, std::string* why) {
  if (len < kResponseFixed)
    return fail(why, "response: body of " + num(len) + " bytes is shorter than its fixed part (" +
                         num(kResponseFixed) + ")");
  r->seq = ld64(b);
  r->old_value = ld64(b + 8);
  r->len = ld64(b + 16);
  r->syndrome = b[24];
  r->payload = nullptr;
  if (b[25]) return fail(why, "response: reserved byte 25 is " + hex(b[25]) + " (must be 0)");
  const uint16_t why_len = ld16(b + 26);
  r->covers = ld32(b + 28);
  if (r->covers >= r->seq && r->covers)
    return fail(why, "response: covers " + num(r->covers) + " requests before seq " + num(r->seq) +
                         " (seqs start at 1)");
  if (why_len > kMaxWhy) return fail(why, "response: why_len " + num(why_len) + " exceeds " + num(kMaxWhy));
  if (r->len > kMaxChunk) return fail(why, "response: len " + num(r->len) + " exceeds kMaxChunk " + num(kMaxChunk));
  if (r->syndrome == 0 && why_len)
    return fail(why, "response: syndrome 0 (success) with a reason of " + num(why_len) + " bytes");
  if (r->syndrome != 0 && r->len)
    return fail(why, "response: syndrome " + hex(r->syndrome) + " (error) with " + num(r->len) + " payload bytes");
  const uint64_t want = kResponseFixed + why_len + r->len;
  if (len != want)
    return fail(why, "response: body_len " + num(len) + " does not match why_len " + num(why_len) + " + len " +
                         num(r->len) + " (" + num(want) + " expected)");
  size_t bad = 0;
  if (!is_printable(b + kResponseFixed, why_len, &bad))
    return fail(why, "response: why byte " + num(bad) + " (" + hex(b[kResponseFixed + bad]) + ") is not printable");
  r->why.assign(reinterpret_cast<const char*>(b + kResponseFixed), why_len);
  if (r->len) r->payload = b + kResponseFixed + why_len;
  return true;
}

}  // namespace

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Write: return "WRITE";
    case OpKind::Read: return "READ";
    case OpKind::FetchAdd: return "FETCH_ADD";
    case OpKind::CompareSwap: return "COMPARE_SWAP";
    case OpKind::Flush: return "FLUSH";
  }
  return "?";
}

void encode(const Hello& h, std::vector<uint8_t>& out) {
  assert(h.name.size() <= kMaxName && h.max_frame >= kMaxFrame && h.max_frame <= kMaxFrameCeiling);
  Put o(out, kHeaderBytes + kHelloFixed + h.name.size());
  put_header(o, FrameType::Hello, kHelloFixed + h.name.size());
  o.u64(h.process_id);
  o.u32(h.max_frame);
  o.u16(static_cast<uint16_t>(h.name.size()));
  o.u16(0);
  o.bytes(h.name.data(), h.name.size());
}

void encode(const Request& r, std::vector<uint8_t>& out) {
  encode_head(r, out);
  if (r.kind == OpKind::Write) put_bytes(out, r.payload, r.len);
}

void encode_head(const Request& r, std::vector<uint8_t>& out) {
  const bool write = r.kind == OpKind::Write;
  assert(r.from_qpn <= 0xffffff && r.to_qpn <= 0xffffff);
  assert(r.kind == OpKind::FetchAdd || r.kind == OpKind::CompareSwap ? r.len == 8 : r.len <= kMaxChunk);
  assert(!write || r.len == 0 || r.payload);
  assert((r.flags & ~kAckLater) == 0 && (write || !r.flags));
  assert(r.kind != OpKind::Flush || (r.raddr == 0 && r.len == 0 && r.rkey == 0));
  Put o(out, kHeaderBytes + kRequestFixed);
  put_header(o, FrameType::Request, kRequestFixed + (write ? r.len : 0));
  o.u64(r.seq);
  o.u64(r.from_node);
  o.u64(r.to_node);
  o.u64(r.raddr);
  o.u64(r.len);
  o.u64(r.operand);
  o.u64(r.compare);
  o.u32(r.from_qpn);
  o.u32(r.to_qpn);
  o.u32(r.rkey);
  o.u8(static_cast<uint8_t>(r.kind));
  o.u8(r.flags);
  o.zeros(2);
}

void encode(const Response& r, std::vector<uint8_t>& out) {
  encode_head(r, out);
  put_bytes(out, r.payload, r.len);
}

void encode_head(const Response& r, std::vector<uint8_t>& out) {
  assert(r.why.size() <= kMaxWhy && r.len <= kMaxChunk && (r.len == 0 || r.payload));
  assert(r.syndrome ? r.len == 0 : r.why.empty());
  assert(r.covers < r.seq || r.covers == 0);
  Put o(out, kHeaderBytes + kResponseFixed + r.why.size());
  put_header(o, FrameType::Response, kResponseFixed + r.why.size() + r.len);
  o.u64(r.seq);
  o.u64(r.old_value);
  o.u64(r.len);
  o.u8(r.syndrome);
  o.u8(0);
  o.u16(static_cast<uint16_t>(r.why.size()));
  o.u32(r.covers);
  o.bytes(r.why.data(), r.why.size());
}

bool frame_body_len(const uint8_t* hdr, size_t max_frame, uint32_t* body_len, std::string* why) {
  const uint32_t magic = ld32(hdr);
  if (magic != kMagic) return fail(why, "frame header: magic " + hex(magic) + " is not KNF1 (" + hex(kMagic) + ")");
  if (hdr[4] != kVersion)
    return fail(why, "frame header: version " + num(hdr[4]) + " (this side speaks " + num(kVersion) + ")");
  const uint8_t type = hdr[5];
  if (type < static_cast<uint8_t>(FrameType::Hello) || type > static_cast<uint8_t>(FrameType::Transport))
    return fail(why, "frame header: type " + num(type) + " is unknown (1..4)");
  if (uint16_t f = ld16(hdr + 6)) return fail(why, "frame header: flags " + hex(f) + " (must be 0)");
  if (uint32_t r = ld32(hdr + 12)) return fail(why, "frame header: reserved word " + hex(r) + " (must be 0)");
  const uint32_t len = ld32(hdr + 8);
  const uint64_t limit = max_frame > kHeaderBytes ? max_frame - kHeaderBytes : 0;
  if (len > limit)
    return fail(why, "frame header: body_len " + num(len) + " exceeds the largest body accepted (" + num(limit) +
                         " = max_frame " + num(max_frame) + " - " + num(kHeaderBytes) + ")");
  *body_len = len;
  why->clear();
  return true;
}

bool decode(const uint8_t* p, size_t n, Frame* out, std::string* why) {
  if (n < kHeaderBytes)
    return fail(why, "frame: " + num(n) + " bytes, shorter than a header (" + num(kHeaderBytes) + ")");
  uint32_t len = 0;
  if (!frame_body_len(p, kMaxFrame, &len, why)) return false;
  if (n != kHeaderBytes + static_cast<uint64_t>(len))
    return fail(why, "frame: " + num(n) + " bytes but the header announces " + num(kHeaderBytes) + " + body_len " +
                         num(len) + (n < kHeaderBytes + static_cast<uint64_t>(len) ? " (truncated)" : " (trailing bytes)"));
  out->type = static_cast<FrameType>(p[5]);
  const uint8_t* b = p + kHeaderBytes;
  switch (out->type) {
    case FrameType::Hello: return decode_hello(b, len, &out->hello, why);
    case FrameType::Request: return decode_request(b, len, &out->request, why);
    case FrameType::Response: return decode_response(b, len, &out->response, why);
    case FrameType::Transport: return fail(why, "frame: type 4 is a transport message, not a software-NIC frame");
  }
  return fail(why, "frame header: type unknown");  // unreachable: frame_body_len checked it
}

bool decode_write_head(const uint8_t* p, size_t n, Frame* out, std::string* why) {
  if (n != kHeaderBytes + kRequestFixed)
    return fail(why, "write head: " + num(n) + " bytes (" + num(kHeaderBytes + kRequestFixed) + " expected)");
  uint32_t len = 0;
  if (!frame_body_len(p, kMaxFrame, &len, why)) return false;
  if (static_cast<FrameType>(p[5]) != FrameType::Request)
    return fail(why, "write head: a frame of type " + num(p[5]) + ", not a Request");
  out->type = FrameType::Request;
  // decode_request reads the fixed part only: the payload's place is checked
  // against body_len, not read.
  if (!decode_request(p + kHeaderBytes, len, &out->request, why)) return false;
  if (out->request.kind != OpKind::Write)
    return fail(why, "write head: a " + std::string(op_kind_name(out->request.kind)) + " Request, not a Write");
  out->request.payload = nullptr;
  return true;
}

std::string printable(std::string_view s, size_t max) {
  std::string r(s.substr(0, max));
  for (char& c : r)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  return r;
}

}  // namespace kinet::fabric
