#include "test_util.hpp"

#include <cctype>
#include <cstdio>
#include <mutex>

namespace kinet {
const char* status_enum_name(Status s) {
  switch (s) {
#define KINET_S(x) \
  case Status::x:  \
    return #x;
    KINET_S(Ok) KINET_S(Pending) KINET_S(NoSpace) KINET_S(TimeoutSqSpace) KINET_S(TimeoutPublishOrder)
    KINET_S(TimeoutCompletion) KINET_S(TimeoutLock) KINET_S(InvalidArgument) KINET_S(QpBroken)
    KINET_S(LocalLength) KINET_S(LocalQpOp) KINET_S(LocalProtection) KINET_S(WrFlushed) KINET_S(MwBind)
    KINET_S(BadResponse) KINET_S(LocalAccess) KINET_S(RemoteInvalidRequest) KINET_S(RemoteAccess)
    KINET_S(RemoteOperation) KINET_S(TransportRetryExceeded) KINET_S(RnrRetryExceeded) KINET_S(RemoteAborted)
    KINET_S(UnknownCqeError)
#undef KINET_S
  }
  return "Status(?)";
}
}  // namespace kinet

namespace kinet::test {
namespace {

uint64_t compute_seed() {
  if (const char* e = std::getenv("KINET_TEST_SEED"); e && *e) return std::strtoull(e, nullptr, 0);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

class SeedEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    std::printf("[ kinet    ] random seed %llu (rerun with KINET_TEST_SEED=%llu)\n",
                static_cast<unsigned long long>(run_seed()), static_cast<unsigned long long>(run_seed()));
    std::fflush(stdout);
  }
};
[[maybe_unused]] ::testing::Environment* const g_seed_env =
    ::testing::AddGlobalTestEnvironment(new SeedEnvironment);

}  // namespace

uint64_t run_seed() {
  static const uint64_t seed = compute_seed();
  return seed;
}

std::mt19937_64 make_rng() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the test's full name
  if (info) {
    for (const char* p : {info->test_suite_name(), ".", info->name()})
      for (; *p; ++p) h = (h ^ static_cast<uint8_t>(*p)) * 1099511628211ull;
  }
  return std::mt19937_64(run_seed() ^ h);
}

std::string seed_note() {
  return "seed=" + std::to_string(run_seed()) + " (rerun with KINET_TEST_SEED=" + std::to_string(run_seed()) + ")";
}

uint64_t scaled(uint64_t n, uint64_t min_n) {
  uint64_t pct = 100;
  if (const char* e = std::getenv("KINET_TEST_SCALE"); e && *e) pct = std::strtoull(e, nullptr, 10);
  return std::max<uint64_t>(min_n, n * pct / 100);
}

int test_threads(int def) {
  if (const char* e = std::getenv("KINET_TEST_THREADS"); e && *e) return std::max(1, std::atoi(e));
  return def;
}

void fill_distinct(std::mt19937_64& rng, uint8_t* dst, const uint8_t* avoid, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint64_t r = rng();
    for (int k = 0; k < 8 && i < n; ++k, ++i) {
      uint8_t b = static_cast<uint8_t>(r >> (8 * k));
      const uint8_t bad = avoid ? avoid[i] : 0;
      if (b == bad) b = static_cast<uint8_t>(b + 1 + (r >> 61));  // +1..+8: still differs
      if (b == bad) b = static_cast<uint8_t>(b ^ 0x5a);
      dst[i] = b;
    }
  }
}

void fill_random(std::mt19937_64& rng, uint8_t* dst, size_t n) { fill_distinct(rng, dst, nullptr, n); }

uint64_t random_u64(std::mt19937_64& rng, uint64_t avoid) {
  for (;;) {
    uint64_t v = rng();
    if (v != 0 && v != avoid) return v;
  }
}

size_t first_mismatch(const uint8_t* a, const uint8_t* b, size_t n) {
  if (std::memcmp(a, b, n) == 0) return n;
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return i;
  return n;
}

::testing::AssertionResult bytes_equal(const uint8_t* got, const uint8_t* want, size_t n, const std::string& what) {
  const size_t i = first_mismatch(got, want, n);
  if (i == n) return ::testing::AssertionSuccess();
  size_t bad = 0;
  for (size_t k = i; k < n; ++k) bad += got[k] != want[k];
  char buf[160];
  std::snprintf(buf, sizeof buf, ": %zu of %zu bytes differ, first at offset %zu (got 0x%02x, want 0x%02x)", bad, n,
                i, got[i], want[i]);
  return ::testing::AssertionFailure() << what << buf;
}

Buffer alloc_buffer(size_t n) {
  const size_t rounded = (std::max<size_t>(n, 1) + 4095) & ~size_t(4095);
  void* p = std::aligned_alloc(4096, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return Buffer(static_cast<uint8_t*>(p));
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() > end) return pred();
    std::this_thread::yield();
  }
}

bool mentions_any(const std::string& text, std::initializer_list<const char*> words) {
  std::string t(text);
  for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* w : words) {
    std::string ww(w);
    for (auto& c : ww) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (t.find(ww) != std::string::npos) return true;
  }
  return false;
}

}  // namespace kinet::test
