// Core pieces that need no device: the environment table and its generated
// document, KINET_TIMEOUT_MS's rules at each edge, the provider registry.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/env.hpp"
#include "core/provider.hpp"
#include "kinet/kinet.hpp"

namespace {
using kinet::env::kDefaultTimeoutMs;
using kinet::env::kMaxTimeoutMs;
using kinet::env::parse_timeout_ms;

// First in the file (gtest keeps declaration order) so that it is the first
// use of the registry: every thread must see the built-in providers exactly
// once (TSan checks the registration itself).
TEST(Providers, ConcurrentFirstUseRegistersOnce) {
  std::vector<std::thread> ts;
  std::vector<size_t> seen(8);
  for (size_t i = 0; i < seen.size(); ++i)
    ts.emplace_back([&seen, i] {
      int emu = 0;
      for (const auto& p : kinet::provider::all()) emu += std::strcmp(p.name, "emu") == 0;
      seen[i] = emu;
    });
  for (auto& t : ts) t.join();
  for (size_t n : seen) EXPECT_EQ(n, 1u);
}

// ---- the one table and docs/ENVIRONMENT.md ------------------------------------
TEST(Env, DocumentMatchesTheTable) {
  const std::string path = KINET_SOURCE_DIR "/docs/ENVIRONMENT.md";
  std::ifstream f(path);
  ASSERT_TRUE(f) << "cannot read " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), kinet::env::markdown())
      << path << " differs from the table in src/core/env.cpp: regenerate it with\n"
      << "  ./build/tools/kinet-info --env --markdown > docs/ENVIRONMENT.md";
}

TEST(Env, TableNamesEveryKnownVariableOnceWithItsReader) {
  std::set<std::string> names, test_only;
  for (const auto& v : kinet::env::variables()) {
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " listed twice";
    // DOCA_SDK_LIB_PATH keeps the name DOCA's own GPUNetIO reads, so one setting serves both.
    if (std::strcmp(v.name, "DOCA_SDK_LIB_PATH") != 0) {
      EXPECT_EQ(std::strncmp(v.name, "KINET_", 6), 0) << v.name;
    }
    EXPECT_GT(std::strlen(v.meaning), 10u) << v.name;
    EXPECT_GT(std::strlen(v.reader), 0u) << v.name;
    if (v.test_only) test_only.insert(v.name);
  }
  for (const char* n : {"KINET_TIMEOUT_MS", "KINET_LOG_LEVEL", "KINET_EMU_RELAXED"}) {
    EXPECT_EQ(names.count(n), 1u) << n;
    EXPECT_EQ(test_only.count(n), 0u) << n << " is read by the library, not only by tests";
  }
  EXPECT_EQ(test_only, (std::set<std::string>{"KINET_TEST_SEED", "KINET_TEST_SCALE", "KINET_TEST_THREADS",
                                             "KINET_COMM_TEST_ONLY", "KINET_HW_DEVICE"}));
}

// ---- get_u64_at_most -------------------------------------------------------------
// get_u64_at_most(name, 7, 100) with a variable of the test's own set to v (unset: nullptr).
uint64_t at_most(const char* v) {
  constexpr const char* kName = "KINET_CORE_TEST_U64";
  v ? setenv(kName, v, 1) : unsetenv(kName);
  const uint64_t x = kinet::env::get_u64_at_most(kName, 7, 100);
  unsetenv(kName);
  return x;
}

TEST(EnvU64, AtMostTakesValuesUpToTheLimitAndCapsTheRest) {
  EXPECT_EQ(at_most(nullptr), 7u);
  EXPECT_EQ(at_most("0"), 0u);
  EXPECT_EQ(at_most("100"), 100u);
  EXPECT_EQ(at_most("0x40"), 64u);
  EXPECT_EQ(at_most("101"), 100u);
  EXPECT_EQ(at_most("18446744073709551615"), 100u);
  EXPECT_EQ(at_most("-1"), 7u);  // malformed: the fallback
  EXPECT_EQ(at_most("12us"), 7u);
}

// ---- KINET_TIMEOUT_MS ---------------------------------------------------------------
TEST(EnvTimeout, UnsetOrEmptyIsTheDefaultSilently) {
  std::string problem = "stale";
  EXPECT_EQ(parse_timeout_ms(nullptr, &problem), kDefaultTimeoutMs);
  EXPECT_EQ(problem, "");
  EXPECT_EQ(parse_timeout_ms("", &problem), kDefaultTimeoutMs);
  EXPECT_EQ(problem, "");
}

TEST(EnvTimeout, ValidRangeIsTakenAsGivenAtBothEdges) {
  std::string problem;
  EXPECT_EQ(parse_timeout_ms("1", &problem), 1u);
  EXPECT_EQ(problem, "");
  EXPECT_EQ(parse_timeout_ms("250", &problem), 250u);
  EXPECT_EQ(problem, "");
  EXPECT_EQ(parse_timeout_ms(std::to_string(kMaxTimeoutMs).c_str(), &problem), kMaxTimeoutMs);
  EXPECT_EQ(problem, "");
}

TEST(EnvTimeout, ZeroIsRejectedForTheDefault) {
  for (const char* v : {"0", "000"}) {
    std::string problem;
    EXPECT_EQ(parse_timeout_ms(v, &problem), kDefaultTimeoutMs) << v;
    EXPECT_NE(problem.find(std::string("KINET_TIMEOUT_MS=") + v), std::string::npos) << problem;
    EXPECT_NE(problem.find("expire at once"), std::string::npos) << problem;
    EXPECT_NE(problem.find("default 10000"), std::string::npos) << problem;
  }
}

// The same rules for KINET_EMU_PEER_TIMEOUT_MS: messages name that variable.
TEST(EnvTimeout, MessagesNameTheVariableRead) {
  std::string problem;
  EXPECT_EQ(parse_timeout_ms("0", &problem, "KINET_EMU_PEER_TIMEOUT_MS"), kDefaultTimeoutMs);
  EXPECT_EQ(problem.rfind("KINET_EMU_PEER_TIMEOUT_MS=0 would make every wait expire at once", 0), 0u) << problem;
  EXPECT_EQ(parse_timeout_ms("1", &problem, "KINET_EMU_PEER_TIMEOUT_MS"), 1u);
  EXPECT_EQ(problem, "");
}

TEST(EnvTimeout, NegativeOrMalformedIsRejectedForTheDefault) {
  for (const char* v : {"-1", "-0", "abc", "10ms", " 5", "5 ", "0x10", "+5", "1e3", "1.5"}) {
    std::string problem;
    EXPECT_EQ(parse_timeout_ms(v, &problem), kDefaultTimeoutMs) << v;
    EXPECT_NE(problem.find("not a decimal integer"), std::string::npos) << v << ": " << problem;
  }
}

TEST(EnvTimeout, AboveTheLimitSaturates) {
  for (const std::string& v : {std::to_string(kMaxTimeoutMs + 1), std::string("18446744073709551615"),
                              std::string("18446744073709551616"), std::string("99999999999999999999999")}) {
    std::string problem;
    EXPECT_EQ(parse_timeout_ms(v.c_str(), &problem), kMaxTimeoutMs) << v;
    EXPECT_NE(problem.find("above the largest bound"), std::string::npos) << v << ": " << problem;
  }
}

TEST(EnvTimeout, TheLimitCannotOverflowNanoseconds) {
  EXPECT_LT(kMaxTimeoutMs, UINT64_MAX / 1000000u);  // waits compute deadlines in ns
}

// ---- provider registry ---------------------------------------------------------------
TEST(Providers, EmuIsRegisteredOnceThroughTheGeneratedList) {
  int emu = 0;
  for (const auto& p : kinet::provider::all()) emu += std::strcmp(p.name, "emu") == 0;
  EXPECT_EQ(emu, 1);
  EXPECT_EQ(kinet::provider::all().size(), kinet::provider::all().size());  // idempotent first call
}

TEST(Providers, EmuClaimsExactlyItsNames) {
  const kinet::provider::Provider* emu = nullptr;
  for (const auto& p : kinet::provider::all())
    if (std::strcmp(p.name, "emu") == 0) emu = &p;
  ASSERT_NE(emu, nullptr);
  for (const char* n : {"emu", "emu0", "emu17"}) EXPECT_TRUE(emu->matches(n)) << n;
  for (const char* n : {"", "em", "emux", "emu1x", "emu-1", "mlx5_0", "xemu"}) EXPECT_FALSE(emu->matches(n)) << n;
}

TEST(Providers, RegisteringANameTwiceIsAnError) {
  kinet::provider::all();  // the built-in ones first
  try {
    kinet::provider::add({"emu", "dup", nullptr, nullptr, nullptr});
    FAIL() << "a second 'emu' was accepted";
  } catch (const kinet::Error& e) {
    EXPECT_EQ(e.code(), kinet::ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'emu' registered twice"), std::string::npos) << e.what();
  }
}

TEST(Providers, UnknownDeviceErrorListsTheRegisteredProviders) {
  // A name no provider claims ("mlx5_*" and names rdma-core lists go to mlx5).
  try {
    kinet::Device::open("nic0");
    FAIL() << "opened nic0";
  } catch (const kinet::Error& e) {
    EXPECT_EQ(e.code(), kinet::ErrorCode::NotFound);
    const std::string w = e.what();
    EXPECT_NE(w.find("no RDMA device named 'nic0': no registered provider claims it ("), std::string::npos) << w;
    EXPECT_NE(w.find("emu: software NIC"), std::string::npos) << w;
    EXPECT_NE(w.find("; mlx5: ConnectX provider"), std::string::npos) << w;
  }
}
}  // namespace
