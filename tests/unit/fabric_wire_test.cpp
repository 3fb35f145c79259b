// The fabric's wire codec (src/fabric/wire.hpp): every frame type round
// trips; every field corrupted alone is refused with the message naming it;
// every truncation and extension is refused. Frames are decoded from heap
// copies of exactly n bytes, so a read past n is an ASan error.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fabric/wire.hpp"

namespace {
using namespace kinet::fabric;
using Bytes = std::vector<uint8_t>;

// Decodes a private exact-size copy (ASan sees any read past n), kept until
// the next call: decoded payload pointers point into it.
bool dec(const Bytes& b, size_t n, Frame* f, std::string* why) {
  static std::unique_ptr<uint8_t[]> copy;
  copy.reset(new uint8_t[n ? n : 1]);
  if (n) std::memcpy(copy.get(), b.data(), n);
  return decode(copy.get(), n, f, why);
}
std::string fail(const Bytes& b) {
  Frame f;
  std::string why;
  EXPECT_FALSE(dec(b, b.size(), &f, &why));
  return why;
}
void set_le(Bytes& b, size_t off, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) b.at(off + i) = static_cast<uint8_t>(v >> (8 * i));
}
// Offsets of body fields in the whole frame.
constexpr size_t H = kHeaderBytes;

Hello hello(std::string name = "host-a:1234") {
  Hello h;
  h.process_id = 0x0123456789abcdefull;
  h.max_frame = kMaxFrame;
  h.name = std::move(name);
  return h;
}
Request request(OpKind k, const Bytes* payload = nullptr) {
  Request r;
  r.seq = 0x1112131415161718ull;
  r.from_node = 0xa1a2a3a4a5a6a7a8ull;
  r.from_qpn = 0x123456;
  r.to_node = 0xb1b2b3b4b5b6b7b8ull;
  r.to_qpn = 0xfedcba;
  r.kind = k;
  r.raddr = 0x7f0012345678ull;
  r.rkey = 0xdeadbe01;
  if (k == OpKind::Write) {
    r.len = payload ? payload->size() : 0;
    r.payload = payload ? payload->data() : nullptr;
  } else if (k == OpKind::Read) {
    r.len = 4096;
  } else if (k == OpKind::Flush) {
    r.raddr = 0;
    r.rkey = 0;
  } else {
    r.len = 8;
    r.operand = 0x0102030405060708ull;
    if (k == OpKind::CompareSwap) r.compare = 0x8877665544332211ull;
  }
  return r;
}
Response response_ok(const Bytes* payload = nullptr) {
  Response r;
  r.seq = 77;
  r.old_value = 0x5555aaaa5555aaaaull;
  r.len = payload ? payload->size() : 0;
  r.payload = payload ? payload->data() : nullptr;
  return r;
}
Response response_err(std::string why = "rkey 0x100 is not registered on emu0") {
  Response r;
  r.seq = 78;
  r.syndrome = 0x13;
  r.why = std::move(why);
  return r;
}
template <class T>
Bytes enc(const T& v) {
  Bytes b;
  encode(v, b);
  return b;
}
Bytes pattern(size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 131 + (i >> 8) * 7 + 1);
  return b;
}

TEST(FabricWire, HelloRoundTrips) {
  for (std::string name : {std::string(), std::string("h:1"), std::string(kMaxName, 'x')}) {
    Bytes b = enc(hello(name));
    ASSERT_EQ(b.size(), H + kHelloFixed + name.size());
    Frame f;
    std::string why;
    ASSERT_TRUE(dec(b, b.size(), &f, &why)) << why;
    EXPECT_EQ(f.type, FrameType::Hello);
    EXPECT_EQ(f.hello.process_id, 0x0123456789abcdefull);
    EXPECT_EQ(f.hello.max_frame, kMaxFrame);
    EXPECT_EQ(f.hello.name, name);
  }
}

TEST(FabricWire, HeaderLayoutIsLittleEndianKnf1) {
  Bytes b = enc(hello("ab"));
  const uint8_t want[16] = {'K', 'N', 'F', '1', 3, 1, 0, 0, 18, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(0, std::memcmp(b.data(), want, 16));
  EXPECT_EQ(b[H + 0], 0xef);  // process_id low byte first
  EXPECT_EQ(b[H + 12], 2);    // name_len
  EXPECT_EQ(b[H + 16], 'a');
}

TEST(FabricWire, RequestOfEveryKindRoundTrips) {
  const Bytes big = pattern(kMaxChunk), one = pattern(1);
  struct Case {
    OpKind k;
    const Bytes* payload;
    uint8_t flags = 0;
  } cases[] = {{OpKind::Write, nullptr},      {OpKind::Write, &one},         {OpKind::Write, &big},
               {OpKind::Write, &one, kAckLater}, {OpKind::Read, nullptr},      {OpKind::FetchAdd, nullptr},
               {OpKind::CompareSwap, nullptr}, {OpKind::Flush, nullptr}};
  for (const Case& c : cases) {
    Request r = request(c.k, c.payload);
    r.flags = c.flags;
    Bytes b = enc(r);
    Frame f;
    std::string why;
    ASSERT_TRUE(dec(b, b.size(), &f, &why)) << why;
    ASSERT_EQ(f.type, FrameType::Request);
    const Request& d = f.request;
    EXPECT_EQ(d.seq, r.seq);
    EXPECT_EQ(d.from_node, r.from_node);
    EXPECT_EQ(d.from_qpn, r.from_qpn);
    EXPECT_EQ(d.to_node, r.to_node);
    EXPECT_EQ(d.to_qpn, r.to_qpn);
    EXPECT_EQ(d.kind, r.kind);
    EXPECT_EQ(d.flags, r.flags);
    EXPECT_EQ(b[H + 69], r.flags);  // the flags byte's place
    EXPECT_EQ(d.raddr, r.raddr);
    EXPECT_EQ(d.rkey, r.rkey);
    EXPECT_EQ(d.len, r.len);
    EXPECT_EQ(d.operand, r.operand);
    EXPECT_EQ(d.compare, r.compare);
    if (c.k == OpKind::Write) {
      ASSERT_EQ(b.size(), H + kRequestFixed + r.len);
      if (r.len) {
        ASSERT_NE(d.payload, nullptr);
        EXPECT_EQ(0, std::memcmp(d.payload, c.payload->data(), r.len));
      }
    } else {
      EXPECT_EQ(b.size(), H + kRequestFixed);
      EXPECT_EQ(d.payload, nullptr);
    }
  }
}

TEST(FabricWire, ResponseRoundTrips) {
  const Bytes big = pattern(kMaxChunk);
  for (const Bytes* p : {static_cast<const Bytes*>(nullptr), &big}) {
    Bytes b = enc(response_ok(p));
    Frame f;
    std::string why;
    ASSERT_TRUE(dec(b, b.size(), &f, &why)) << why;
    ASSERT_EQ(f.type, FrameType::Response);
    EXPECT_EQ(f.response.seq, 77u);
    EXPECT_EQ(f.response.syndrome, 0);
    EXPECT_EQ(f.response.old_value, 0x5555aaaa5555aaaaull);
    EXPECT_EQ(f.response.why, "");
    if (p) {
      ASSERT_EQ(f.response.len, kMaxChunk);
      EXPECT_EQ(0, std::memcmp(f.response.payload, big.data(), kMaxChunk));
    } else {
      EXPECT_EQ(f.response.len, 0u);
      EXPECT_EQ(f.response.payload, nullptr);
    }
  }
  for (std::string w : {std::string("x"), std::string(kMaxWhy, 'w')}) {
    Bytes b = enc(response_err(w));
    Frame f;
    std::string why;
    ASSERT_TRUE(dec(b, b.size(), &f, &why)) << why;
    EXPECT_EQ(f.response.syndrome, 0x13);
    EXPECT_EQ(f.response.why, w);
    EXPECT_EQ(f.response.len, 0u);
  }
  // covers travels as it is, up to seq - 1, with any answer.
  for (uint32_t k : {1u, 77u}) {
    Response r = response_err("x");  // seq 78
    r.covers = k;
    Bytes b = enc(r);
    EXPECT_EQ(b[H + 28], k);
    Frame f;
    std::string why;
    ASSERT_TRUE(dec(b, b.size(), &f, &why)) << why;
    EXPECT_EQ(f.response.covers, k);
    EXPECT_EQ(f.response.seq, 78u);
    EXPECT_EQ(f.response.syndrome, 0x13);
  }
  // The largest frame there is stays within kMaxFrame.
  Response r = response_ok(&big);
  EXPECT_LE(H + kResponseFixed + kMaxWhy + kMaxChunk, kMaxFrame);
  EXPECT_LE(enc(r).size(), kMaxFrame);
}

// ---- header fields -------------------------------------------------------
TEST(FabricWire, HeaderFieldsEachRefused) {
  const Bytes good = enc(request(OpKind::Read));
  struct Case {
    size_t off;
    uint64_t v;
    int width;
    std::string why;
  } cases[] = {
      {0, 0x32464e4b, 4, "frame header: magic 0x32464e4b is not KNF1 (0x31464e4b)"},
      {4, 1, 1, "frame header: version 1 (this side speaks 3)"},  // before Request flags and Flush
      {4, 2, 1, "frame header: version 2 (this side speaks 3)"},  // before Response covers
      {4, 4, 1, "frame header: version 4 (this side speaks 3)"},
      {4, 0, 1, "frame header: version 0 (this side speaks 3)"},
      {5, 0, 1, "frame header: type 0 is unknown (1..4)"},
      {5, 5, 1, "frame header: type 5 is unknown (1..4)"},
      {5, 4, 1, "frame: type 4 is a transport message, not a software-NIC frame"},
      {6, 1, 2, "frame header: flags 0x1 (must be 0)"},
      {6, 0x8000, 2, "frame header: flags 0x8000 (must be 0)"},
      {12, 0x80000000u, 4, "frame header: reserved word 0x80000000 (must be 0)"},
      {8, kMaxFrame - H + 1, 4,
       "frame header: body_len " + std::to_string(kMaxFrame - H + 1) + " exceeds the largest body accepted (" +
           std::to_string(kMaxFrame - H) + " = max_frame " + std::to_string(kMaxFrame) + " - 16)"},
  };
  for (const Case& c : cases) {
    Bytes b = good;
    set_le(b, c.off, c.v, c.width);
    EXPECT_EQ(fail(b), c.why) << "offset " << c.off;
  }
}

TEST(FabricWire, FrameBodyLenAtItsEdge) {
  Bytes b = enc(hello());
  uint32_t len = 0;
  std::string why = "stale";
  set_le(b, 8, 4096 - H, 4);
  ASSERT_TRUE(frame_body_len(b.data(), 4096, &len, &why));
  EXPECT_EQ(len, 4096 - H);
  EXPECT_EQ(why, "");
  set_le(b, 8, 4096 - H + 1, 4);
  EXPECT_FALSE(frame_body_len(b.data(), 4096, &len, &why));
  EXPECT_EQ(why, "frame header: body_len 4081 exceeds the largest body accepted (4080 = max_frame 4096 - 16)");
  set_le(b, 8, 0, 4);  // a max_frame below a header accepts no body at all
  EXPECT_TRUE(frame_body_len(b.data(), 3, &len, &why));
  set_le(b, 8, 1, 4);
  EXPECT_FALSE(frame_body_len(b.data(), 3, &len, &why));
}

// ---- body fields ---------------------------------------------------------
TEST(FabricWire, HelloFieldsEachRefused) {
  const Bytes good = enc(hello("ab"));
  auto with = [&](size_t off, uint64_t v, int w) {
    Bytes b = good;
    set_le(b, H + off, v, w);
    return fail(b);
  };
  EXPECT_EQ(with(14, 1, 2), "hello: reserved field 0x1 (must be 0)");
  EXPECT_EQ(with(8, kMaxFrame - 1, 4), "hello: max_frame 1052671 outside [1052672, 1073741824]");
  EXPECT_EQ(with(8, kMaxFrameCeiling + 1ull, 4), "hello: max_frame 1073741825 outside [1052672, 1073741824]");
  EXPECT_EQ(with(8, 0, 4), "hello: max_frame 0 outside [1052672, 1073741824]");
  EXPECT_EQ(with(12, 3, 2), "hello: body_len 18 does not match name_len 3 (19 expected)");
  EXPECT_EQ(with(12, 1, 2), "hello: body_len 18 does not match name_len 1 (17 expected)");
  EXPECT_EQ(with(12, kMaxName + 1, 2), "hello: name_len 129 exceeds 128");
  EXPECT_EQ(with(16, 0x1b, 1), "hello: name byte 0 (0x1b) is not printable");
  EXPECT_EQ(with(17, 0x80, 1), "hello: name byte 1 (0x80) is not printable");
  // Edges that pass: max_frame at both ends.
  for (uint64_t mf : {uint64_t(kMaxFrame), uint64_t(kMaxFrameCeiling)}) {
    Bytes b = good;
    set_le(b, H + 8, mf, 4);
    Frame f;
    std::string why;
    EXPECT_TRUE(dec(b, b.size(), &f, &why)) << why;
  }
  // A body shorter than the fixed part.
  Bytes b(good.begin(), good.begin() + H + 15);
  set_le(b, 8, 15, 4);
  EXPECT_EQ(fail(b), "hello: body of 15 bytes is shorter than its fixed part (16)");
}

TEST(FabricWire, RequestFieldsEachRefused) {
  auto with = [](OpKind k, size_t off, uint64_t v, int w) {
    Bytes b = enc(request(k));
    set_le(b, H + off, v, w);
    return fail(b);
  };
  EXPECT_EQ(with(OpKind::Read, 68, 0, 1), "request: kind 0 is unknown (1..5)");
  EXPECT_EQ(with(OpKind::Read, 68, 6, 1), "request: kind 6 is unknown (1..5)");
  EXPECT_EQ(with(OpKind::Write, 69, 2, 1), "request: flags 0x2 has unknown bits (known: ack_later 0x1)");
  EXPECT_EQ(with(OpKind::Write, 69, 0x81, 1), "request: flags 0x81 has unknown bits (known: ack_later 0x1)");
  // Only a WRITE's answer may wait: the others carry results or are the ask for them.
  EXPECT_EQ(with(OpKind::Read, 69, 1, 1), "request: READ with ack_later (only a WRITE's answer may wait)");
  EXPECT_EQ(with(OpKind::FetchAdd, 69, 1, 1), "request: FETCH_ADD with ack_later (only a WRITE's answer may wait)");
  EXPECT_EQ(with(OpKind::Flush, 69, 1, 1), "request: FLUSH with ack_later (only a WRITE's answer may wait)");
  EXPECT_EQ(with(OpKind::Read, 70, 1, 1), "request: reserved byte 70 is 0x1 (must be 0)");
  EXPECT_EQ(with(OpKind::Read, 71, 0x80, 1), "request: reserved byte 71 is 0x80 (must be 0)");
  // A Flush names nothing in memory.
  EXPECT_EQ(with(OpKind::Flush, 24, 0x1000, 8), "request: FLUSH with raddr 0x1000, len 0, rkey 0x0 (all must be 0)");
  EXPECT_EQ(with(OpKind::Flush, 64, 7, 4), "request: FLUSH with raddr 0x0, len 0, rkey 0x7 (all must be 0)");
  EXPECT_EQ(with(OpKind::Flush, 32, 8, 8), "request: FLUSH with raddr 0x0, len 8, rkey 0x0 (all must be 0)");
  EXPECT_EQ(with(OpKind::Flush, 40, 1, 8), "request: FLUSH operand 0x1 (must be 0)");
  EXPECT_EQ(with(OpKind::Flush, 48, 1, 8), "request: FLUSH compare 0x1 (must be 0)");
  EXPECT_EQ(with(OpKind::Read, 56, 0x1000000, 4), "request: from_qpn 0x1000000 exceeds 24 bits");
  EXPECT_EQ(with(OpKind::Read, 60, 0xffffffff, 4), "request: to_qpn 0xffffffff exceeds 24 bits");
  EXPECT_EQ(with(OpKind::Read, 32, kMaxChunk + 1, 8), "request: READ len 1048577 exceeds kMaxChunk 1048576");
  EXPECT_EQ(with(OpKind::Read, 32, ~0ull, 8), "request: READ len 18446744073709551615 exceeds kMaxChunk 1048576");
  EXPECT_EQ(with(OpKind::Read, 40, 1, 8), "request: READ operand 0x1 (must be 0)");
  EXPECT_EQ(with(OpKind::Read, 48, 2, 8), "request: READ compare 0x2 (must be 0)");
  EXPECT_EQ(with(OpKind::Write, 40, 1, 8), "request: WRITE operand 0x1 (must be 0)");
  EXPECT_EQ(with(OpKind::FetchAdd, 48, 3, 8), "request: FETCH_ADD compare 0x3 (must be 0)");
  EXPECT_EQ(with(OpKind::FetchAdd, 32, 4, 8), "request: FETCH_ADD len 4 (atomics are 8 bytes)");
  EXPECT_EQ(with(OpKind::CompareSwap, 32, 16, 8), "request: COMPARE_SWAP len 16 (atomics are 8 bytes)");
  // A Write's len must match its payload; others carry none.
  EXPECT_EQ(with(OpKind::Write, 32, 1, 8), "request: WRITE of len 1: body_len 72 (73 expected)");
  Bytes p = pattern(10);
  Bytes b = enc(request(OpKind::Write, &p));
  set_le(b, H + 32, 9, 8);
  EXPECT_EQ(fail(b), "request: WRITE of len 9: body_len 82 (81 expected)");
  // A Read carrying payload bytes (body_len and n grown together).
  b = enc(request(OpKind::Read));
  b.push_back(0);
  set_le(b, 8, kRequestFixed + 1, 4);
  EXPECT_EQ(fail(b), "request: READ of len 4096: body_len 73 (72 expected, no payload)");
  b = enc(request(OpKind::FetchAdd));
  b.insert(b.end(), 8, 0);
  set_le(b, 8, kRequestFixed + 8, 4);
  EXPECT_EQ(fail(b), "request: FETCH_ADD of len 8: body_len 80 (72 expected, no payload)");
  // Short fixed part.
  b = enc(request(OpKind::Read));
  b.resize(H + kRequestFixed - 1);
  set_le(b, 8, kRequestFixed - 1, 4);
  EXPECT_EQ(fail(b), "request: body of 71 bytes is shorter than its fixed part (72)");
}

TEST(FabricWire, RequestEdgesThatPass) {
  auto ok = [](Bytes b) {
    Frame f;
    std::string why;
    EXPECT_TRUE(dec(b, b.size(), &f, &why)) << why;
    return f.request;
  };
  Bytes b = enc(request(OpKind::Read));
  set_le(b, H + 32, kMaxChunk, 8);
  EXPECT_EQ(ok(b).len, kMaxChunk);
  set_le(b, H + 56, 0xffffff, 4);
  set_le(b, H + 60, 0xffffff, 4);
  EXPECT_EQ(ok(b).to_qpn, 0xffffffu);
  // Any raddr, including misaligned for an atomic (the responder's check).
  b = enc(request(OpKind::FetchAdd));
  set_le(b, H + 24, ~0ull, 8);
  EXPECT_EQ(ok(b).raddr, ~0ull);
}

TEST(FabricWire, ResponseFieldsEachRefused) {
  auto with = [](const Response& r, size_t off, uint64_t v, int w) {
    Bytes b = enc(r);
    set_le(b, H + off, v, w);
    return fail(b);
  };
  const Response ok = response_ok(), err = response_err("abc");
  EXPECT_EQ(with(ok, 25, 1, 1), "response: reserved byte 25 is 0x1 (must be 0)");
  // covers reaches back at most to request 1 (response_ok's seq is 77).
  EXPECT_EQ(with(ok, 28, 77, 4), "response: covers 77 requests before seq 77 (seqs start at 1)");
  EXPECT_EQ(with(ok, 28, 0xffffffffu, 4), "response: covers 4294967295 requests before seq 77 (seqs start at 1)");
  EXPECT_EQ(with(ok, 26, kMaxWhy + 1, 2), "response: why_len 513 exceeds 512");
  EXPECT_EQ(with(ok, 16, kMaxChunk + 1, 8), "response: len 1048577 exceeds kMaxChunk 1048576");
  EXPECT_EQ(with(ok, 26, 1, 2), "response: syndrome 0 (success) with a reason of 1 bytes");
  EXPECT_EQ(with(err, 16, 1, 8), "response: syndrome 0x13 (error) with 1 payload bytes");
  EXPECT_EQ(with(err, 26, 2, 2), "response: body_len 35 does not match why_len 2 + len 0 (34 expected)");
  EXPECT_EQ(with(ok, 16, 5, 8), "response: body_len 32 does not match why_len 0 + len 5 (37 expected)");
  EXPECT_EQ(with(err, 32, '\n', 1), "response: why byte 0 (0xa) is not printable");
  EXPECT_EQ(with(err, 34, 0xff, 1), "response: why byte 2 (0xff) is not printable");
  Bytes b = enc(ok);
  b.resize(H + kResponseFixed - 1);
  set_le(b, 8, kResponseFixed - 1, 4);
  EXPECT_EQ(fail(b), "response: body of 31 bytes is shorter than its fixed part (32)");
}

// ---- lengths -------------------------------------------------------------
std::vector<Bytes> every_frame() {
  static const Bytes p = pattern(300);
  return {enc(hello()),          enc(hello("")),           enc(request(OpKind::Write, &p)), enc(request(OpKind::Write)),
          enc(request(OpKind::Read)), enc(request(OpKind::FetchAdd)), enc(request(OpKind::CompareSwap)),
          enc(response_ok(&p)),  enc(response_ok()),       enc(response_err())};
}

TEST(FabricWire, TruncationAtEveryByteCountIsRefused) {
  for (const Bytes& b : every_frame()) {
    for (size_t n = 0; n < b.size(); ++n) {
      Frame f;
      std::string why;
      ASSERT_FALSE(dec(b, n, &f, &why)) << "n=" << n << " of " << b.size();
      if (n < H)
        EXPECT_EQ(why, "frame: " + std::to_string(n) + " bytes, shorter than a header (16)");
      else
        EXPECT_EQ(why, "frame: " + std::to_string(n) + " bytes but the header announces 16 + body_len " +
                           std::to_string(b.size() - H) + " (truncated)");
    }
  }
}

TEST(FabricWire, TrailingBytesAreRefused) {
  for (Bytes b : every_frame()) {
    const size_t body = b.size() - H;
    b.push_back(0);
    EXPECT_EQ(fail(b), "frame: " + std::to_string(b.size()) + " bytes but the header announces 16 + body_len " +
                           std::to_string(body) + " (trailing bytes)");
  }
}

TEST(FabricWire, TruncatedLargestWriteAtItsEdges) {
  const Bytes p = pattern(kMaxChunk);
  const Bytes b = enc(request(OpKind::Write, &p));
  for (size_t n : {size_t(0), H - 1, H, H + kRequestFixed, b.size() - 1}) {
    Frame f;
    std::string why;
    EXPECT_FALSE(dec(b, n, &f, &why)) << n;
  }
}

TEST(FabricWire, PrintableCutsAndReplaces) {
  EXPECT_EQ(printable("ab\ncd\x01\xff", 100), "ab?cd??");
  EXPECT_EQ(printable(std::string(600, 'a'), kMaxWhy).size(), kMaxWhy);
  EXPECT_EQ(printable("", 5), "");
}

}  // namespace
