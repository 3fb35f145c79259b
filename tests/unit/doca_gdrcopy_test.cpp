// GDRCopy through dlopen (src/core/gdrcopy.hpp) against stand-in
// libgdrapi.so.2 libraries built by the test suite (tests/doca_stub/gdrapi.c):
// absent, lacking a symbol, complete; the mapping's page arithmetic and its
// teardown; the CUDA-copy fallback of GpuReader; KINET_GDRCOPY=0.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/gdrcopy.hpp"
#include "kinet/kinet.hpp"
#include "../doca_stub/stub_dir.hpp"

namespace {
using kinet::gdr::GpuReader;
using kinet::gdr::Library;
using kinet::gdr::Mapping;

using kinet::test::kStubs;

struct GdrStats {  // tests/doca_stub/gdrapi.c's record
  int open, close, pin, unpin, map, unmap, copy;
  unsigned long pin_addr;
  size_t pin_size, map_size;
  int live;
};
GdrStats* stats_of(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!h) return nullptr;
  auto* s = static_cast<GdrStats*>(dlsym(h, "kinet_gdr_stub_stats"));
  dlclose(h);
  return s;
}

TEST(GdrCopy, AbsentLibraryIsNamed) {
  const std::string path = kStubs + "/no_such_dir/libgdrapi.so.2";
  const Library::Loaded l = Library::load(path.c_str());
  EXPECT_EQ(l.lib, nullptr);
  const std::string lead = path + " could not be loaded (";
  EXPECT_EQ(l.why.substr(0, lead.size()), lead) << l.why;
  EXPECT_NE(l.why.find("No such file or directory"), std::string::npos) << l.why;
}

TEST(GdrCopy, MissingSymbolIsNamed) {
  const std::string path = kStubs + "/gdr_no_copy/libgdrapi.so.2";
  const Library::Loaded l = Library::load(path.c_str());
  EXPECT_EQ(l.lib, nullptr);
  EXPECT_EQ(l.why, path + " lacks gdr_copy_from_mapping");
}

TEST(GdrCopy, MappingPinsWholeGpuPagesAndReadsAtTheOffset) {
  const std::string path = kStubs + "/gdr_complete/libgdrapi.so.2";
  Library::Loaded l = Library::load(path.c_str());
  ASSERT_NE(l.lib, nullptr) << l.why;
  GdrStats* st = stats_of(path);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->open, 1);
  // A range that straddles a 64 KiB boundary: two pages are pinned.
  constexpr size_t kPage = 1 << 16;
  void* raw = std::aligned_alloc(kPage, 4 * kPage);
  ASSERT_NE(raw, nullptr);
  auto* base = static_cast<uint8_t*>(raw);
  for (size_t i = 0; i < 4 * kPage; ++i) base[i] = static_cast<uint8_t>(i * 7 + 3);
  const uint8_t* word = base + kPage + kPage - 4;  // 8 bytes across the second page boundary
  {
    std::string why;
    auto m = Mapping::create(l.lib, word, 8, &why);
    ASSERT_NE(m, nullptr) << why;
    EXPECT_EQ(why, "");
    EXPECT_EQ(st->pin_addr, reinterpret_cast<unsigned long>(base + kPage));
    EXPECT_EQ(st->pin_size, 2 * kPage);
    EXPECT_EQ(st->map_size, 2 * kPage);
    uint8_t got[8] = {};
    m->read(got, 0, 8);
    EXPECT_EQ(std::memcmp(got, word, 8), 0);
    uint8_t two[2] = {};
    m->read(two, 6, 2);  // the last two bytes: the edge
    EXPECT_EQ(std::memcmp(two, word + 6, 2), 0);
    EXPECT_EQ(st->copy, 2);
    // One byte past the mapped range is refused, not read.
    try {
      m->read(two, 7, 2);
      FAIL() << "no throw";
    } catch (const kinet::Error& e) {
      EXPECT_EQ(e.code(), kinet::ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("is outside the 8 mapped bytes"), std::string::npos) << e.what();
    }
    EXPECT_EQ(st->copy, 2);
    EXPECT_EQ(st->live, 1);
  }
  EXPECT_EQ(st->unmap, 1);
  EXPECT_EQ(st->unpin, 1);
  EXPECT_EQ(st->live, 0);
  std::free(raw);
}

TEST(GdrCopy, RefusedPinIsReportedNotThrown) {
  const std::string path = kStubs + "/gdr_complete/libgdrapi.so.2";
  Library::Loaded l = Library::load(path.c_str());
  ASSERT_NE(l.lib, nullptr) << l.why;
  std::string why;
  EXPECT_EQ(Mapping::create(l.lib, nullptr, 8, &why), nullptr);
  EXPECT_NE(why.find("empty or wrapping range"), std::string::npos) << why;
  uint8_t b[8];
  EXPECT_EQ(Mapping::create(l.lib, b, 0, &why), nullptr);
  EXPECT_EQ(Mapping::create(nullptr, b, 8, &why), nullptr);
  EXPECT_EQ(why, "no GDRCopy library");
}

TEST(GdrCopy, ReaderOfHostMemoryUsesPlainCopies) {
  // Host memory (no GPU here) is never mapped through GDRCopy, even with a library.
  const std::string path = kStubs + "/gdr_complete/libgdrapi.so.2";
  Library::Loaded l = Library::load(path.c_str());
  ASSERT_NE(l.lib, nullptr);
  GdrStats* st = stats_of(path);
  const int pins = st->pin;
  uint32_t v = 0x12345678, got = 0;
  GpuReader r(l.lib, &v, sizeof v);
  EXPECT_FALSE(r.via_gdrcopy());
  r.read(&got);
  EXPECT_EQ(got, v);
  EXPECT_EQ(st->pin, pins);
  GpuReader none(nullptr, &v, sizeof v);  // no library at all: the CUDA-copy path
  EXPECT_FALSE(none.via_gdrcopy());
  v = 0xfeedbeef;
  none.read(&got);
  EXPECT_EQ(got, 0xfeedbeefu);
}

TEST(GdrCopy, DisabledByEnvironment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("KINET_GDRCOPY", "0", 1);
        setenv("KINET_LOG_LEVEL", "debug", 1);
        std::fprintf(stderr, "lib=%s\n", Library::process() ? "yes" : "no");
        std::fprintf(stderr, "lib=%s\n", Library::process() ? "yes" : "no");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      "^kinet: debug: GDRCopy disabled by KINET_GDRCOPY=0: CPU reads of GPU memory use CUDA copies\nlib=no\nlib=no\n$");
}

TEST(GdrCopy, AbsentOnThisMachineSaysWhyOnceAtDebugLevel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The real libgdrapi.so.2 is not installed here; where it is, the line differs.
  void* h = dlopen("libgdrapi.so.2", RTLD_NOW | RTLD_LOCAL);
  if (h) {
    dlclose(h);
    GTEST_SKIP() << "libgdrapi.so.2 is installed on this machine";
  }
  EXPECT_EXIT(
      {
        unsetenv("KINET_GDRCOPY");
        setenv("KINET_LOG_LEVEL", "debug", 1);
        std::fprintf(stderr, "lib=%s\n", Library::process() ? "yes" : "no");
        std::fprintf(stderr, "lib=%s\n", Library::process() ? "yes" : "no");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      "^kinet: debug: GDRCopy not used: libgdrapi.so.2 could not be loaded \\([^\n]*\\); CPU reads of GPU memory "
      "use CUDA copies\nlib=no\nlib=no\n$");
}
}  // namespace
