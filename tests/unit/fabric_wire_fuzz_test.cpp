// A deterministic fuzzer of the fabric's wire decoder (src/fabric/wire.hpp).
// Seeds: valid frames of every type and shape. Mutations: bit flips, byte
// sets, truncation, extension, splices of other seeds, and every length
// field set to its edges (with the header's body_len sometimes made to agree
// with the new size, so the body checks are reached). Each input is decoded
// from an exact-size heap copy and must satisfy fabric_wire_oracle.hpp: no
// read past n, a reason under a known prefix, accepted frames canonical.
// Fixed seed: the same inputs every run (ASan in CI's asan stage).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fabric/wire.hpp"
#include "fabric_wire_oracle.hpp"
#include "test_util.hpp"

namespace {
using namespace kinet::fabric;
using Bytes = std::vector<uint8_t>;
constexpr size_t H = kHeaderBytes;

Bytes pattern(size_t n, uint8_t salt) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 37 + salt);
  return b;
}

struct Seed {
  Bytes bytes;
  std::vector<std::pair<size_t, int>> len_fields;  // (offset, width) of its length fields
};

std::vector<Seed> seeds() {
  static const Bytes p1 = pattern(1, 1), p100 = pattern(100, 2), p300 = pattern(300, 3);
  std::vector<Seed> s;
  auto add = [&](auto v, std::vector<std::pair<size_t, int>> fields) {
    Bytes b;
    encode(v, b);
    fields.insert(fields.begin(), {8, 4});  // header body_len
    s.push_back({std::move(b), std::move(fields)});
  };
  for (std::string name : {std::string(), std::string("a"), std::string("host-17:4242"), std::string(kMaxName, 'n')}) {
    Hello h;
    h.process_id = 0x1234;
    h.max_frame = kMaxFrame;
    h.name = name;
    add(h, {{H + 12, 2}, {H + 8, 4}});
  }
  for (OpKind k : {OpKind::Write, OpKind::Read, OpKind::FetchAdd, OpKind::CompareSwap}) {
    for (const Bytes* p : {static_cast<const Bytes*>(nullptr), &p1, &p100, &p300}) {
      if (k != OpKind::Write && p) continue;
      Request r;
      r.seq = 9, r.from_node = 1, r.from_qpn = 2, r.to_node = 3, r.to_qpn = 0xffffff, r.kind = k;
      r.raddr = 0x1000, r.rkey = 0x107;
      r.len = k == OpKind::Write ? (p ? p->size() : 0) : k == OpKind::Read ? 64 : 8;
      r.payload = p ? p->data() : nullptr;
      if (k == OpKind::FetchAdd || k == OpKind::CompareSwap) r.operand = 5;
      if (k == OpKind::CompareSwap) r.compare = 6;
      add(r, {{H + 32, 8}});
      if (k == OpKind::Write && p) {  // the same with its answer allowed to wait
        r.flags = kAckLater;
        add(r, {{H + 32, 8}, {H + 69, 1}});
      }
    }
  }
  {
    Request r;
    r.seq = 13, r.from_node = 1, r.from_qpn = 2, r.to_node = 3, r.to_qpn = 4, r.kind = OpKind::Flush;
    add(r, {{H + 32, 8}, {H + 69, 1}});
  }
  for (const Bytes* p : {static_cast<const Bytes*>(nullptr), &p1, &p300}) {
    Response r;
    r.seq = 10, r.old_value = 11, r.len = p ? p->size() : 0, r.payload = p ? p->data() : nullptr;
    add(r, {{H + 16, 8}, {H + 26, 2}});
  }
  for (std::string why : {std::string("x"), std::string(kMaxWhy, 'w')}) {
    Response r;
    r.seq = 12, r.syndrome = 0x13, r.why = why;
    add(r, {{H + 16, 8}, {H + 26, 2}});
  }
  {  // held answers riding along with one (covers)
    Response r;
    r.seq = 12, r.covers = 11;
    add(r, {{H + 16, 8}, {H + 26, 2}, {H + 28, 4}, {H, 8}});
  }
  return s;
}

void set_le(Bytes& b, size_t off, uint64_t v, int width) {
  for (int i = 0; i < width && off + i < b.size(); ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t edge_value(std::mt19937_64& rng, const Bytes& b, int width) {
  const uint64_t n = b.size() >= H ? b.size() - H : 0;
  const uint64_t edges[] = {0, 1, 7, 8, 9, n - 1, n, n + 1, kMaxName, kMaxName + 1, kMaxWhy, kMaxWhy + 1,
                            kMaxChunk, kMaxChunk + 1, kMaxFrame - H, kMaxFrame - H + 1, 0x7fffffff, ~0ull};
  uint64_t v = edges[rng() % std::size(edges)];
  if (width < 8) v &= (1ull << (8 * width)) - 1;
  return v;
}

void mutate(std::mt19937_64& rng, Bytes& b, const Seed& seed, const std::vector<Seed>& all) {
  const int rounds = 1 + static_cast<int>(rng() % 4);
  for (int r = 0; r < rounds; ++r) {
    switch (rng() % 8) {
      case 0:  // bit flip
        if (!b.empty()) b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1: {  // byte set, often to an edge
        if (b.empty()) break;
        static const uint8_t e[] = {0, 1, 0x7f, 0x80, 0xff};
        b[rng() % b.size()] = rng() % 2 ? e[rng() % 5] : static_cast<uint8_t>(rng());
        break;
      }
      case 2:  // truncation
        b.resize(b.empty() ? 0 : rng() % b.size());
        break;
      case 3: {  // extension
        const size_t k = 1 + rng() % 64;
        for (size_t i = 0; i < k; ++i) b.push_back(static_cast<uint8_t>(rng()));
        break;
      }
      case 4:
      case 5: {  // a length field at an edge
        const auto& [off, width] = seed.len_fields[rng() % seed.len_fields.size()];
        set_le(b, off, edge_value(rng, b, width), width);
        break;
      }
      case 6: {  // splice a slice of another seed over this one
        const Bytes& o = all[rng() % all.size()].bytes;
        if (b.empty() || o.empty()) break;
        const size_t at = rng() % b.size(), from = rng() % o.size();
        const size_t k = std::min({b.size() - at, o.size() - from, size_t{1} + rng() % 32});
        std::memcpy(b.data() + at, o.data() + from, k);
        break;
      }
      default:  // make the header's body_len agree with the size (reach the body checks)
        if (b.size() >= H) set_le(b, 8, b.size() - H, 4);
    }
  }
  if (rng() % 2 && b.size() >= H) set_le(b, 8, b.size() - H, 4);
}

TEST(FabricWireFuzz, EverySeedDecodes) {
  for (const Seed& s : seeds()) {
    bool accepted = false;
    EXPECT_EQ(kinet::fabric::test::check_decode(s.bytes.data(), s.bytes.size(), &accepted), "");
    EXPECT_TRUE(accepted);
  }
}

TEST(FabricWireFuzz, MutatedFramesNeverBreakTheDecoder) {
  const std::vector<Seed> all = seeds();
  std::mt19937_64 rng(0x6b6e6574'66757a7aull);  // fixed: the same inputs every run
  const uint64_t iterations = kinet::test::scaled(300000, 30000);
  uint64_t accepted_n = 0;
  std::map<std::string, uint64_t> refused_by;  // reason prefix -> count
  for (uint64_t i = 0; i < iterations; ++i) {
    const Seed& s = all[rng() % all.size()];
    Bytes b = s.bytes;
    mutate(rng, b, s, all);
    std::unique_ptr<uint8_t[]> copy(new uint8_t[b.size() ? b.size() : 1]);
    if (!b.empty()) std::memcpy(copy.get(), b.data(), b.size());
    bool accepted = false;
    const std::string bad = kinet::fabric::test::check_decode(copy.get(), b.size(), &accepted);
    ASSERT_EQ(bad, "") << "iteration " << i;
    if (accepted) {
      ++accepted_n;
    } else {
      Frame f;
      std::string why;
      decode(copy.get(), b.size(), &f, &why);
      ++refused_by[why.substr(0, why.find(':'))];
    }
  }
  // The mutations reach every layer: some survive (payload and value bytes),
  // and refusals come from the frame, the header and each body type.
  EXPECT_GT(accepted_n, iterations / 100);
  for (const char* p : {"frame", "frame header", "hello", "request", "response"})
    EXPECT_GT(refused_by[p], iterations / 1000) << p;
  std::string summary;
  for (auto& [k, v] : refused_by) summary += k + "=" + std::to_string(v) + " ";
  std::printf("fuzz: %llu inputs, %llu accepted; refused by %s\n", static_cast<unsigned long long>(iterations),
              static_cast<unsigned long long>(accepted_n), summary.c_str());
}

}  // namespace
