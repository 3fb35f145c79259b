// kinet tests — shared helpers: reproducible randomness, size knobs, bounded
// waits and readable printing of kinet::Status in GoogleTest messages.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>

#include "kinet/kinet.hpp"
#include "kinet/status.hpp"

namespace kinet {
// GoogleTest prints Status values by name ("RemoteAccess (48)") through ADL.
const char* status_enum_name(Status s);
inline std::ostream& operator<<(std::ostream& os, Status s) {
  return os << status_enum_name(s) << " (" << static_cast<int>(s) << ")";
}
inline void PrintTo(Status s, std::ostream* os) { *os << s; }
}  // namespace kinet

namespace kinet::test {

// The run's seed: $KINET_TEST_SEED if set, else from std::random_device.
// Printed at the start of every test binary and in the trace of every failure.
uint64_t run_seed();

// A generator for one test, derived from the run seed and the test's name, so
// one failing test can be rerun alone with the same data.
std::mt19937_64 make_rng();
std::string seed_note();  // "seed=N (rerun with KINET_TEST_SEED=N)"

// Sets an environment variable for its scope; the old value (or its absence)
// comes back at the end. Not for tests that run threads reading it meanwhile.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { had_ ? (void)setenv(name_, old_.c_str(), 1) : (void)unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// Declares `rng` and puts the seed into the trace of every failure in scope.
#define KINET_TEST_RNG(rng)            \
  auto rng = ::kinet::test::make_rng(); \
  SCOPED_TRACE(::kinet::test::seed_note())

// $KINET_TEST_SCALE in percent (default 100): stress loops scale with it, never
// below `min_n` (the minimum the test needs to mean something, e.g. more
// operations than ring slots).
uint64_t scaled(uint64_t n, uint64_t min_n = 1);
// Number of posting threads of the shared-queue tests: $KINET_TEST_THREADS or `def`.
int test_threads(int def);

// Fills dst[0..n) with random bytes that differ from avoid[i] at every i
// (avoid may be null: then the bytes differ from 0), so a byte that was not
// transferred can never pass for one that was.
void fill_distinct(std::mt19937_64& rng, uint8_t* dst, const uint8_t* avoid, size_t n);
// Random bytes, none of them zero.
void fill_random(std::mt19937_64& rng, uint8_t* dst, size_t n);
// A random 64-bit value that is not 0 and differs from `avoid`.
uint64_t random_u64(std::mt19937_64& rng, uint64_t avoid = 0);

// First index where a and b differ, or n if equal; with a message helper.
size_t first_mismatch(const uint8_t* a, const uint8_t* b, size_t n);
::testing::AssertionResult bytes_equal(const uint8_t* got, const uint8_t* want, size_t n, const std::string& what);

// Page-aligned zeroed memory, freed with free().
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t[], FreeDeleter>;
Buffer alloc_buffer(size_t n);

// Polls pred() until true or `timeout` passes (the tests' own waits are
// bounded too). Returns pred()'s last value.
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Case-insensitive: does `text` contain any of `words`?
bool mentions_any(const std::string& text, std::initializer_list<const char*> words);

// Runs f, which must throw kinet::Error with `code` (a failure otherwise);
// returns the message ("" when nothing threw).
template <class F> std::string error_of(F&& f, ErrorCode code) {
  try {
    f();
  } catch (const kinet::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no kinet::Error thrown";
  return "";
}

// Runs f, which must throw kinet::Error with `code` and a message containing
// `part` (a failure otherwise); returns the message ("" when nothing threw).
template <class F> std::string expect_error(F&& f, ErrorCode code, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing \"" << part << "\"";
  } catch (const kinet::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "\"" << part << "\" not in: " << e.what();
    return e.what();
  }
  return "";
}

}  // namespace kinet::test
