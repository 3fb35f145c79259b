// kinet-perf — the tests it knows.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace kinet::perf {

enum class TestKind : uint8_t { WriteLat, WriteBw, ReadBw, AtomicLat };

inline constexpr TestKind kAllTests[] = {TestKind::WriteLat, TestKind::WriteBw, TestKind::ReadBw,
                                         TestKind::AtomicLat};

inline constexpr bool is_latency(TestKind k) { return k == TestKind::WriteLat || k == TestKind::AtomicLat; }
// Tests whose message size is fixed (8-byte atomics): run once, not per size.
inline constexpr bool has_fixed_size(TestKind k) { return k == TestKind::AtomicLat; }

inline constexpr const char* test_name(TestKind k) {
  switch (k) {
    case TestKind::WriteLat: return "write_lat";
    case TestKind::WriteBw: return "write_bw";
    case TestKind::ReadBw: return "read_bw";
    case TestKind::AtomicLat: return "atomic_lat";
  }
  return "?";
}

// Title as perftest prints it.
inline constexpr const char* test_title(TestKind k) {
  switch (k) {
    case TestKind::WriteLat: return "RDMA_Write Latency Test";
    case TestKind::WriteBw: return "RDMA_Write BW Test";
    case TestKind::ReadBw: return "RDMA_Read BW Test";
    case TestKind::AtomicLat: return "Atomic FETCH_AND_ADD Latency Test";
  }
  return "?";
}

inline std::optional<TestKind> test_from_name(std::string_view s) {
  for (TestKind k : kAllTests)
    if (s == test_name(k)) return k;
  return std::nullopt;
}

}  // namespace kinet::perf
