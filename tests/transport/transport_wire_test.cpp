// The engine's wire format (msg_wire.hpp): round trips, each field rule at
// its edge, and a deterministic fuzzer (fixed seed: the same inputs every
// run; ASan in CI's asan stage) checked by transport_wire_oracle.hpp.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "transport_wire_oracle.hpp"

namespace kinet::transport::test {
namespace {
using wire::MsgType;
using Bytes = std::vector<uint8_t>;

Bytes enc(const wire::Request& r, const Bytes& payload = {}) {
  Bytes m(wire::kRequestBytes);
  wire::encode_header(r, m.data());
  m.insert(m.end(), payload.begin(), payload.end());
  return m;
}
Bytes enc(const wire::Answer& a, const Bytes& payload = {}) {
  Bytes m(wire::kAnswerBytes);
  wire::encode_header(a, m.data());
  m.insert(m.end(), payload.begin(), payload.end());
  return m;
}
// A request by IPC reference: the header, then the encoded reference.
Bytes enc_ipc(const wire::Request& r) {
  Bytes m = enc(r);
  m.resize(m.size() + wire::kIpcRefBytes);
  wire::encode(r.ipc, m.data() + wire::kRequestBytes);
  return m;
}
std::string req_why(const Bytes& m) {
  std::unique_ptr<uint8_t[]> c(new uint8_t[m.size() ? m.size() : 1]);
  if (!m.empty()) std::memcpy(c.get(), m.data(), m.size());
  wire::Request r;
  return wire::decode(c.get(), m.size(), &r);
}

std::vector<Bytes> seeds() {
  std::vector<Bytes> s;
  const Bytes p1(1, 1), p100(100, 2);
  for (MsgType t : {MsgType::Put, MsgType::Get, MsgType::FetchAdd, MsgType::CompareSwap, MsgType::Signal,
                    MsgType::PutSignal}) {
    wire::Request r;
    r.type = t, r.node = 0x1122, r.seq = 3, r.op_id = 4, r.key = 0x55, r.raddr = 0x1000;
    const bool data = t == MsgType::Put || t == MsgType::PutSignal;
    r.length = data ? 100 : t == MsgType::Get ? 4096 : 8;
    if (t == MsgType::FetchAdd || t == MsgType::CompareSwap || t == MsgType::Signal || t == MsgType::PutSignal)
      r.operand = 9;
    if (t == MsgType::CompareSwap) r.compare = 10;
    if (t == MsgType::Signal || t == MsgType::PutSignal) r.sig_op = 1;
    if (t == MsgType::PutSignal) r.sig_key = 0x66, r.sig_raddr = 0x2000;
    if (t == MsgType::Put || t == MsgType::Signal) r.ack = 0x77;  // an ack rides along
    s.push_back(enc(r, data ? p100 : Bytes{}));
  }
  for (MsgType t : {MsgType::Put, MsgType::Get, MsgType::PutSignal}) {  // by IPC reference (cuda_ipc)
    wire::Request r;
    r.type = t, r.node = 0x1122, r.seq = 3, r.op_id = 4, r.key = 0x55, r.raddr = 0x1000, r.length = 1 << 20;
    r.flags = wire::kFlagIpc, r.ipc.offset = 4096;
    r.ipc.handle[0] = 0xab, r.ipc.handle[63] = 0xcd;
    if (t == MsgType::PutSignal) r.operand = 9, r.sig_op = 2, r.sig_key = 0x66, r.sig_raddr = 0x2000;
    s.push_back(enc_ipc(r));
  }
  {  // a split put_signal's last piece, after 2 data pieces
    wire::Request r;
    r.type = MsgType::PutSignal, r.flags = wire::kFlagAfterPieces, r.compare = 2, r.node = 0x1122, r.seq = 3;
    r.op_id = 4, r.key = 0x55, r.raddr = 0x1000, r.length = 100, r.operand = 9, r.sig_op = 2, r.sig_key = 0x66;
    r.sig_raddr = 0x2000;
    s.push_back(enc(r, p100));
  }
  wire::Answer a;
  a.node = 1, a.seq = 2, a.op_id = 3, a.old_value = 4;
  s.push_back(enc(a));
  a.length = 100;
  s.push_back(enc(a, p100));
  a.length = 0, a.old_value = 0, a.status = Status::RemoteAccess;
  s.push_back(enc(a));
  Bytes k(wire::kAckBytes);
  wire::encode(wire::Ack{5, 6}, k.data());
  s.push_back(k);
  return s;
}

TEST(TransportWire, SeedsRoundTrip) {
  for (const Bytes& m : seeds()) {
    int acc = 0;
    EXPECT_EQ(check_wire(m.data(), m.size(), &acc), "");
    EXPECT_EQ(acc, 1);
  }
}

TEST(TransportWire, RequestFieldRules) {
  wire::Request put;
  put.type = MsgType::Put, put.node = 1, put.seq = 1, put.op_id = 7, put.key = 9, put.raddr = 64, put.length = 4;
  const Bytes good = enc(put, Bytes(4, 0));
  EXPECT_EQ(req_why(good), "");
  EXPECT_EQ(req_why(Bytes(good.begin(), good.begin() + 7)), "short message: 7 bytes, less than the 8-byte prefix");
  EXPECT_EQ(req_why(Bytes(good.begin(), good.begin() + 87)), "short message: 87 bytes, less than the 88-byte header");
  Bytes m = good;
  m.pop_back();
  EXPECT_EQ(req_why(m), "put: length 4 but 3 payload bytes");
  m = good;
  m.push_back(0);
  EXPECT_EQ(req_why(m), "put: length 4 but 5 payload bytes");
  m = good, m[4] = 1;
  EXPECT_EQ(req_why(m), "unsupported version 1 (this side speaks 4)");
  m = good, m[4] = 3;  // before kFlagAfterPieces
  EXPECT_EQ(req_why(m), "unsupported version 3 (this side speaks 4)");
  m = good, m[5] = 7;
  EXPECT_EQ(req_why(m), "bad type 7 for a request");
  m = good, m[6] = 1;
  EXPECT_EQ(req_why(m), "put: bad signal op 1");
  m = good, m[7] = 4;
  EXPECT_EQ(req_why(m), "reserved flag bits 4 set");
  m = good, m[7] = wire::kFlagAfterPieces;
  EXPECT_EQ(req_why(m), "put: after-pieces flag on this type");
  m = good, m[7] = 0x81;
  EXPECT_EQ(req_why(m), "reserved flag bits 128 set");
  m = good, m[7] = wire::kFlagIpc;  // the 4 payload bytes are no reference
  EXPECT_EQ(req_why(m), "put: ipc reference of 4 bytes, not 72");
  wire::Request f = put;
  f.type = MsgType::FetchAdd, f.length = 16;
  EXPECT_EQ(req_why(enc(f)), "fetch_add: length 16, not 8");
  f.length = 8, f.compare = 1;
  EXPECT_EQ(req_why(enc(f)), "fetch_add: compare value set");
  wire::Request s = put;
  s.type = MsgType::Signal, s.length = 8, s.sig_op = 3;
  EXPECT_EQ(req_why(enc(s)), "signal: bad signal op 3");
  s.sig_op = 2, s.sig_key = 4;
  EXPECT_EQ(req_why(enc(s)), "signal: bad signal key 4");
  wire::Request ps = put;
  ps.type = MsgType::PutSignal, ps.sig_op = 1;
  EXPECT_EQ(req_why(enc(ps, Bytes(4, 0))), "put_signal: bad signal key 0");
  // A split put_signal's last piece: compare (its data pieces) 1 .. seq - 1.
  ps.sig_key = 5, ps.seq = 4, ps.compare = 3;
  EXPECT_EQ(req_why(enc(ps, Bytes(4, 0))), "put_signal: compare value set");
  ps.flags = wire::kFlagAfterPieces;
  EXPECT_EQ(req_why(enc(ps, Bytes(4, 0))), "");
  ps.compare = 4;
  EXPECT_EQ(req_why(enc(ps, Bytes(4, 0))), "put_signal: after 4 pieces at sequence number 4");
  ps.compare = 0;
  EXPECT_EQ(req_why(enc(ps, Bytes(4, 0))), "put_signal: after 0 pieces at sequence number 4");
  ps.compare = 1, ps.flags = wire::kFlagAfterPieces | wire::kFlagIpc, ps.ipc.offset = 8;
  EXPECT_EQ(req_why(enc_ipc(ps)), "put_signal: after-pieces flag on an ipc reference");
  wire::Request g = put;
  g.type = MsgType::Get;
  EXPECT_EQ(req_why(enc(g, Bytes(4, 0))), "get: 4 payload bytes, expected none");
  g.op_id = 0;
  EXPECT_EQ(req_why(enc(g)), "get: op id 0");
}

// cuda_ipc's reference (flag kFlagIpc): each rule at its edge; what was
// decoded is what was encoded.
TEST(TransportWire, IpcReferenceRules) {
  wire::Request put;
  put.type = MsgType::Put, put.node = 1, put.seq = 1, put.op_id = 7, put.key = 9, put.raddr = 64, put.length = 4096;
  put.flags = wire::kFlagIpc, put.ipc.offset = 512;
  for (size_t i = 0; i < wire::kIpcHandleBytes; ++i) put.ipc.handle[i] = static_cast<uint8_t>(i * 7 + 1);
  const Bytes good = enc_ipc(put);
  ASSERT_EQ(good.size(), wire::kRequestBytes + 72);
  wire::Request r;
  ASSERT_EQ(wire::decode(good.data(), good.size(), &r), "");
  EXPECT_EQ(r.flags, wire::kFlagIpc);
  EXPECT_EQ(r.payload, nullptr) << "the reference is not payload";
  EXPECT_EQ(r.length, 4096u);
  EXPECT_EQ(r.ipc.offset, 512u);
  EXPECT_EQ(0, std::memcmp(r.ipc.handle, put.ipc.handle, 64));
  EXPECT_EQ(0, std::memcmp(good.data() + wire::kRequestBytes + 64, "\x00\x02\0\0\0\0\0\0", 8)) << "offset LE";
  // Split delivery (header, then the reference as the body) decodes the same.
  ASSERT_EQ(wire::decode(good.data(), wire::kRequestBytes, good.data() + wire::kRequestBytes, 72, &r), "");
  EXPECT_EQ(r.ipc.offset, 512u);
  // Truncated or oversized references, at the edge.
  Bytes m(good.begin(), good.end() - 1);
  EXPECT_EQ(req_why(m), "put: ipc reference of 71 bytes, not 72");
  m = good, m.push_back(0);
  EXPECT_EQ(req_why(m), "put: ipc reference of 73 bytes, not 72");
  EXPECT_EQ(req_why(Bytes(good.begin(), good.begin() + wire::kRequestBytes)), "put: ipc reference of 0 bytes, not 72");
  // Length: 1 .. 2^31.
  wire::Request q = put;
  q.length = 0;
  EXPECT_EQ(req_why(enc_ipc(q)), "put: ipc length 0, not 1 .. 2147483648");
  q.length = wire::kMaxIpcBytes + 1;
  EXPECT_EQ(req_why(enc_ipc(q)), "put: ipc length 2147483649, not 1 .. 2147483648");
  q.length = wire::kMaxIpcBytes;
  EXPECT_EQ(req_why(enc_ipc(q)), "");
  q.length = 1;
  EXPECT_EQ(req_why(enc_ipc(q)), "");
  // Offset + length must stay below 2^64 (the target's bounds check rejects
  // what the allocation does not hold).
  q.length = 16, q.ipc.offset = ~uint64_t{0} - 16;
  EXPECT_EQ(req_why(enc_ipc(q)), "");
  q.ipc.offset = ~uint64_t{0} - 15;
  EXPECT_EQ(req_why(enc_ipc(q)), "put: ipc offset 18446744073709551600 + length 16 wraps");
  // Only operations with data carry one.
  for (MsgType t : {MsgType::FetchAdd, MsgType::CompareSwap, MsgType::Signal}) {
    wire::Request a = put;
    a.type = t, a.length = 8, a.ipc.offset = 0;
    if (t == MsgType::Signal) a.sig_op = 1;
    EXPECT_EQ(req_why(enc_ipc(a)), std::string(wire::type_name(t)) + ": an ipc reference on an operation without data");
  }
  wire::Request g = put;
  g.type = MsgType::Get;
  EXPECT_EQ(req_why(enc_ipc(g)), "") << "a get names its destination";
  EXPECT_EQ(req_why(enc(g)), "get: ipc reference of 0 bytes, not 72");
  wire::Request ps = put;
  ps.type = MsgType::PutSignal, ps.sig_op = 1, ps.sig_key = 3, ps.sig_raddr = 8, ps.operand = 1;
  EXPECT_EQ(req_why(enc_ipc(ps)), "");
  // Without the flag, the same bytes are a 72-byte put (length must agree).
  m = good, m[7] = 0;
  EXPECT_EQ(req_why(m), "put: length 4096 but 72 payload bytes");
}

TEST(TransportWire, AnswerFieldRules) {
  auto why = [](const Bytes& m) {
    wire::Answer a;
    return wire::decode(m.data(), m.size(), &a);
  };
  wire::Answer a;
  a.node = 1, a.op_id = 2;
  EXPECT_EQ(why(enc(a)), "");
  a.status = Status::WrFlushed;
  EXPECT_EQ(why(enc(a)), "answer: bad status 43");
  a.status = Status::RemoteAccess, a.length = 1;
  EXPECT_EQ(why(enc(a, Bytes(1))), "answer: a failure with length 1 / old value set");
  a.status = Status::Ok;
  EXPECT_EQ(why(enc(a)), "answer: length 1 but 0 payload bytes");
  a.length = 0, a.op_id = 0;
  EXPECT_EQ(why(enc(a)), "answer: op id 0");
}

TEST(TransportWire, RequestCarriesItsAck) {
  wire::Request put;
  put.type = MsgType::Put, put.node = 1, put.seq = 1, put.op_id = 7, put.key = 9, put.raddr = 64, put.length = 0;
  put.ack = 0x0102030405060708;
  const Bytes m = enc(put);
  EXPECT_EQ(0, std::memcmp(m.data() + wire::kAckOffset, "\x08\x07\x06\x05\x04\x03\x02\x01", 8));
  wire::Request r;
  ASSERT_EQ(wire::decode(m.data(), m.size(), &r), "");
  EXPECT_EQ(r.ack, put.ack);
}

TEST(TransportWire, AckFieldRules) {
  auto why = [](const Bytes& m) {
    wire::Ack a;
    return wire::decode(m.data(), m.size(), &a);
  };
  Bytes good(wire::kAckBytes);
  wire::encode(wire::Ack{0x11, 0x22}, good.data());
  wire::Ack k;
  ASSERT_EQ(wire::decode(good.data(), good.size(), &k), "");
  EXPECT_EQ(k.node, 0x11u);
  EXPECT_EQ(k.ack, 0x22u);
  EXPECT_EQ(why(Bytes(good.begin(), good.begin() + 23)), "short message: 23 bytes, less than the 24-byte header");
  Bytes m = good;
  m.push_back(0);
  EXPECT_EQ(why(m), "ack: 25 bytes, not 24");
  m = good, m[5] = 0x81;
  EXPECT_EQ(why(m), "bad type 129 for an ack");
  m = good, m[7] = 1;
  EXPECT_EQ(why(m), "ack: reserved bytes not 0");
  m = good, std::memset(m.data() + 16, 0, 8);
  EXPECT_EQ(why(m), "ack: ack 0");
}

TEST(TransportWire, Fuzz) {
  std::mt19937_64 rng(20261201);
  const std::vector<Bytes> base = seeds();
  size_t accepted = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    Bytes m = base[rng() % base.size()];
    const int muts = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < muts; ++k) {
      switch (rng() % 6) {
        case 0: if (!m.empty()) m[rng() % m.size()] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 1: if (!m.empty()) m[rng() % m.size()] = static_cast<uint8_t>(rng()); break;
        case 2: m.resize(rng() % (m.size() + 1)); break;
        case 3: m.resize(m.size() + rng() % 16, static_cast<uint8_t>(rng())); break;
        case 4: {  // a length field to an edge, sometimes agreeing with the size
          const bool answer = m.size() > 5 && m[5] == 0x81;
          const size_t off = 48, hdr = answer ? wire::kAnswerBytes : wire::kRequestBytes;
          if (m.size() >= off + 8) {
            const uint64_t edges[] = {0, 1, 8, 7, 9, ~0ull, m.size() > hdr ? m.size() - hdr : 0};
            const uint64_t v = edges[rng() % 7];
            for (int b = 0; b < 8; ++b) m[off + b] = static_cast<uint8_t>(v >> (8 * b));
          }
          break;
        }
        default: {  // splice another seed's tail
          const Bytes& o = base[rng() % base.size()];
          const size_t at = m.empty() ? 0 : rng() % m.size();
          m.resize(at);
          m.insert(m.end(), o.begin() + static_cast<long>(std::min(at, o.size())), o.end());
        }
      }
    }
    std::unique_ptr<uint8_t[]> c(new uint8_t[m.size() ? m.size() : 1]);
    if (!m.empty()) std::memcpy(c.get(), m.data(), m.size());
    int acc = 0;
    const std::string bad = check_wire(c.get(), m.size(), &acc);
    ASSERT_EQ(bad, "") << "iteration " << iter;
    accepted += acc;
  }
  EXPECT_GT(accepted, 1000u) << "the mutations never reached an accepted message";
}

}  // namespace
}  // namespace kinet::transport::test
