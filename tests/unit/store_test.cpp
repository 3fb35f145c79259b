// kinet stores (kinet/store.hpp) and Bootstrap::from_store in one process:
// the store contract on FileStore and MemoryStore (whole values, bounded
// waits, key rules), jobs whose ranks are threads, and what from_store does
// with hostile, stale and failed records; from_nccl's checks that need no GPU.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>
#include <vector>

#include "core/cuda_shim.hpp"
#include "kinet/bootstrap.hpp"
#include "kinet/store.hpp"
#include "test_util.hpp"

namespace {
using namespace std::chrono_literals;
using kinet::ErrorCode;
namespace fs = std::filesystem;

using kinet::test::expect_error;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/kinet-store-XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { fs::remove_all(path); }
};

struct Loopback : ::testing::Test {
  void SetUp() override { setenv("KINET_SOCKET_IFNAME", "lo", 1); }
  void TearDown() override { unsetenv("KINET_SOCKET_IFNAME"); }
};

// ---- the store contract, on both stores -------------------------------------------

struct Contract : ::testing::TestWithParam<std::string> {
  TempDir dir;
  std::unique_ptr<kinet::Store> store;
  void SetUp() override {
    if (GetParam() == "file") store = std::make_unique<kinet::FileStore>(dir.path + "/a/b");
    else store = std::make_unique<kinet::MemoryStore>();
  }
};

TEST_P(Contract, SetGetOverwriteEraseCheck) {
  kinet::Store& s = *store;
  EXPECT_FALSE(s.check({"k"}));
  s.set("k", bytes("one"));
  EXPECT_EQ(s.get("k", 1ms), bytes("one"));
  s.set("k", bytes("second"));
  EXPECT_EQ(s.get("k", 1ms), bytes("second"));
  s.set("empty", {});
  EXPECT_EQ(s.get("empty", 1ms), std::vector<uint8_t>{});
  std::vector<uint8_t> bin(70000);
  for (size_t i = 0; i < bin.size(); ++i) bin[i] = static_cast<uint8_t>(i * 7);
  s.set("bin", bin);  // more than one read() of FileStore's buffer
  EXPECT_EQ(s.get("bin", 1ms), bin);
  EXPECT_TRUE(s.check({"k", "empty", "bin"}));
  EXPECT_FALSE(s.check({"k", "nope"}));
  s.wait({"k", "bin"}, 1ms);
  EXPECT_TRUE(s.erase("k"));
  EXPECT_FALSE(s.erase("k"));
  EXPECT_FALSE(s.check({"k"}));
}

// A get that nobody satisfies ends at its bound, naming the key and the store.
TEST_P(Contract, GetAndWaitTimeOutNamingTheKey) {
  kinet::Store& s = *store;
  const auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { s.get("job7/missing", 200ms); }, ErrorCode::System,
               "store: timeout after 200 ms waiting for key 'job7/missing' in " + s.describe());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 200ms);
  s.set("here", bytes("x"));
  expect_error([&] { s.wait({"here", "gone1", "gone2"}, 50ms); }, ErrorCode::System,
               "timeout after 50 ms waiting for keys 'gone1', 'gone2' in " + s.describe());
  expect_error([&] { s.get("k", 0ms); }, ErrorCode::System, "timeout after 0 ms");
  expect_error([&] { s.get("k", -5ms); }, ErrorCode::System, "timeout after -5 ms");
  s.set("k", bytes("v"));  // an unbounded-looking bound does not overflow the deadline
  EXPECT_EQ(s.get("k", std::chrono::milliseconds::max()), bytes("v"));
  s.wait({"k"}, std::chrono::milliseconds::max());
}

// A get waiting before the set returns the value once it is set.
TEST_P(Contract, GetWaitsForALaterSet) {
  kinet::Store& s = *store;
  std::thread setter([&] {
    while (!s.check({"gate"})) std::this_thread::yield();  // the getter is about to wait
    s.set("late", bytes("value"));
  });
  s.set("gate", {});
  EXPECT_EQ(s.get("late", 20s), bytes("value"));
  setter.join();
}

// Readers see whole values only, while a writer replaces them.
TEST_P(Contract, ReadersNeverSeeAPartialValue) {
  kinet::Store& s = *store;
  s.set("v", std::vector<uint8_t>(10, 1));
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint8_t i = 2; !stop.load(); ++i) s.set("v", std::vector<uint8_t>(i % 2 ? 100000 : 10, i));
  });
  for (int k = 0; k < 200; ++k) {
    const std::vector<uint8_t> v = s.get("v", 5s);
    ASSERT_TRUE(v.size() == 10 || v.size() == 100000) << v.size();
    for (uint8_t b : v) ASSERT_EQ(b, v[0]);
  }
  stop = true;
  writer.join();
}

TEST_P(Contract, KeyRules) {
  kinet::Store& s = *store;
  expect_error([&] { s.set("", {}); }, ErrorCode::InvalidArgument, "empty key");
  expect_error([&] { s.get(std::string("a\0b", 3), 1ms); }, ErrorCode::InvalidArgument, "contains a NUL byte");
  expect_error([&] { s.check({std::string(1025, 'k')}); }, ErrorCode::InvalidArgument, "key of 1025 bytes (at most 1024)");
  // Any other bytes are keys; distinct keys stay distinct.
  const std::vector<std::string> keys = {"a/b", "a%2Fb", ".hidden", "..", "sp ace", "\xff\x01", "a.b-c_D9"};
  for (size_t i = 0; i < keys.size(); ++i) s.set(keys[i], bytes(std::to_string(i)));
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(s.get(keys[i], 1ms), bytes(std::to_string(i))) << i;
}

INSTANTIATE_TEST_SUITE_P(Stores, Contract, ::testing::Values(std::string("file"), std::string("memory")),
                         [](const auto& i) { return i.param; });

// ---- FileStore specifics --------------------------------------------------------------

TEST(FileStore, FilesNamesAndLimits) {
  TempDir d;
  kinet::FileStore s(d.path + "/");
  EXPECT_EQ(s.dir(), d.path);
  EXPECT_EQ(s.path("job/1"), d.path + "/job%2F1");
  EXPECT_EQ(s.path(".x"), d.path + "/%2Ex");
  EXPECT_EQ(s.path("x."), d.path + "/x.");
  EXPECT_EQ(s.path(std::string(255, 'k')), d.path + "/" + std::string(255, 'k'));
  expect_error([&] { s.path(std::string(256, 'k')); }, ErrorCode::InvalidArgument, "file name of 256 bytes (at most 255)");
  expect_error([&] { s.path(std::string(86, '/')); }, ErrorCode::InvalidArgument, "file name of 258 bytes");
  s.set("job/1", bytes("v"));
  // rename leaves no temporary files behind
  EXPECT_EQ(std::distance(fs::directory_iterator(d.path), fs::directory_iterator{}), 1);
  // Another FileStore on the same directory (another rank) sees the key.
  kinet::FileStore other(d.path);
  EXPECT_EQ(other.get("job/1", 1ms), bytes("v"));
  // A value over the limit is refused at get, not read.
  { std::ofstream(s.path("big")); }
  fs::resize_file(s.path("big"), kinet::FileStore::kMaxValue + 1);
  expect_error([&] { s.get("big", 1ms); }, ErrorCode::InvalidArgument, "holds 67108865 bytes, more than a value may");
  fs::resize_file(s.path("big"), kinet::FileStore::kMaxValue);
  EXPECT_EQ(s.get("big", 1ms).size(), kinet::FileStore::kMaxValue);
  fs::create_directory(s.path("dir"));
  expect_error([&] { s.get("dir", 1ms); }, ErrorCode::InvalidArgument, "is not a regular file");
}

// A FIFO at a key's path (a confused or hostile user of the directory) is
// refused at once: get opened it blocking, waiting for a writer past any
// bound (for ever).
TEST(FileStore, GetOnAFifoIsRefusedAtOnce) {
  TempDir d;
  kinet::FileStore s(d.path);
  const std::string p = s.path("job/kinet_unique_id");
  ASSERT_EQ(mkfifo(p.c_str(), 0600), 0);
  auto fut = std::async(std::launch::async, [&] {
    return expect_error([&] { s.get("job/kinet_unique_id", 200ms); }, ErrorCode::InvalidArgument,
                        "FileStore: get 'job/kinet_unique_id': " + p + " is not a regular file");
  });
  const bool done = fut.wait_for(2s) == std::future_status::ready;
  if (!done) {  // let the blocked open return so that the test ends
    const int w = ::open(p.c_str(), O_WRONLY);
    if (w >= 0) ::close(w);
  }
  fut.get();
  EXPECT_TRUE(done) << "get with a 200 ms bound was still blocked after 2 s";
}

TEST(FileStore, BadDirectories) {
  TempDir d;
  expect_error([] { kinet::FileStore s(""); }, ErrorCode::InvalidArgument, "empty directory path");
  { std::ofstream(d.path + "/file"); }
  expect_error([&] { kinet::FileStore s(d.path + "/file"); }, ErrorCode::InvalidArgument, "/file is not a directory");
  expect_error([&] { kinet::FileStore s(d.path + "/file/sub"); }, ErrorCode::System, "/file/sub");
  if (geteuid() != 0) {  // root writes anywhere
    fs::create_directory(d.path + "/ro");
    fs::permissions(d.path + "/ro", fs::perms::owner_read | fs::perms::owner_exec);
    kinet::FileStore ro(d.path + "/ro");
    expect_error([&] { ro.set("k", bytes("v")); }, ErrorCode::System, "FileStore: set 'k': cannot create");
  }
}

// ---- from_store with threads as ranks ------------------------------------------------

// Remembers every value set, and counts gets.
struct SpyStore : kinet::MemoryStore {
  std::mutex mu;
  std::vector<std::vector<uint8_t>> sets;
  std::atomic<int> gets{0};
  void set(const std::string& k, const std::vector<uint8_t>& v) override {
    {
      std::lock_guard<std::mutex> g(mu);
      sets.push_back(v);
    }
    MemoryStore::set(k, v);
  }
  std::vector<uint8_t> get(const std::string& k, std::chrono::milliseconds t) override {
    auto v = MemoryStore::get(k, t);
    ++gets;
    return v;
  }
};

using FromStore = Loopback;

TEST_F(FromStore, ThreadsAsRanksThenTheKeyIsGone) {
  for (int n : {1, 3}) {
    SpyStore store;
    std::vector<std::unique_ptr<kinet::Bootstrap>> bs(n);
    std::vector<std::string> err(n);
    std::vector<std::thread> ts;
    for (int r = n - 1; r >= 0; --r)  // the others wait for rank 0
      ts.emplace_back([&, r] {
        try {
          bs[r] = kinet::Bootstrap::from_store(store, r, n, "job-a", 20s);
        } catch (const std::exception& e) {
          err[r] = e.what();
        }
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(bs[r]) << err[r];
      EXPECT_EQ(bs[r]->rank(), r);
      EXPECT_EQ(bs[r]->size(), n);
    }
    std::vector<std::thread> bar;
    for (int r = 0; r < n; ++r) bar.emplace_back([&, r] { bs[r]->barrier(); });
    for (auto& t : bar) t.join();
    EXPECT_EQ(kinet::Bootstrap::store_key("job-a"), "job-a/kinet_unique_id");
    EXPECT_EQ(kinet::Bootstrap::store_key(""), "kinet_unique_id");
    EXPECT_FALSE(store.check({"job-a/kinet_unique_id"})) << "rank 0 erases the key after init";
    EXPECT_EQ(store.sets.size(), 1u);
    EXPECT_EQ(store.sets[0].size(), 800u);
  }
}

TEST_F(FromStore, ArgumentChecks) {
  kinet::MemoryStore s;
  expect_error([&] { kinet::Bootstrap::from_store(s, 2, 2, "p", 1s); }, ErrorCode::InvalidArgument,
               "bootstrap: from_store rank 2/2: rank or nranks out of range");
  expect_error([&] { kinet::Bootstrap::from_store(s, -1, 2, "p", 1s); }, ErrorCode::InvalidArgument, "out of range");
  expect_error([&] { kinet::Bootstrap::from_store(s, 0, 0, "p", 1s); }, ErrorCode::InvalidArgument, "out of range");
  expect_error([&] { kinet::Bootstrap::from_store(s, 1, 2, "p", 0ms); }, ErrorCode::InvalidArgument, "timeout 0 ms");
  EXPECT_FALSE(s.check({"p/kinet_unique_id"}));
}

// nranks above init's 2^20 is refused before rank 0 starts a rendezvous:
// each such call used to leave a root thread and its descriptors behind
// (init refused nranks after UniqueId::create, and nothing cancelled it).
TEST_F(FromStore, RankZeroWithBadNranksLeavesNothingBehind) {
  auto count = [](const char* dir) {
    return std::distance(fs::directory_iterator(dir), fs::directory_iterator{});
  };
  kinet::MemoryStore s;
  const auto fds0 = count("/proc/self/fd"), threads0 = count("/proc/self/task");
  for (int i = 0; i < 3; ++i)
    expect_error([&] { kinet::Bootstrap::from_store(s, 0, (1 << 20) + 1, "p" + std::to_string(i), 1s); },
                 ErrorCode::InvalidArgument, "bootstrap: from_store rank 0/1048577: rank or nranks out of range");
  // At most: rendezvous threads of earlier tests may end meanwhile.
  EXPECT_LE(count("/proc/self/fd"), fds0);
  EXPECT_LE(count("/proc/self/task"), threads0);
  EXPECT_FALSE(s.check({"p0/kinet_unique_id"}));
}

// Rank 0 never comes: the others end at the bound, naming the key they waited for.
TEST_F(FromStore, MissingRankZeroTimesOutNamingTheKey) {
  TempDir d;
  kinet::FileStore s(d.path);
  const auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { kinet::Bootstrap::from_store(s, 1, 2, "job-b", 300ms); }, ErrorCode::System,
               "bootstrap: from_store rank 1/2: waiting for rank 0's unique id: store: timeout after 300 ms waiting "
               "for key 'job-b/kinet_unique_id' in FileStore " + d.path);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 300ms);
}

// A rank that never comes fails rank 0's init; rank 0 publishes that, and a
// rank that reads the key afterwards fails at once with rank 0's reason.
TEST_F(FromStore, RankZeroFailurePublished) {
  SpyStore s;
  const std::string e0 = expect_error([&] { kinet::Bootstrap::from_store(s, 0, 2, "job-c", 300ms); },
                                      ErrorCode::System, "(unique id published under key 'job-c/kinet_unique_id' in MemoryStore)");
  EXPECT_NE(e0.find("timeout"), std::string::npos) << e0;
  ASSERT_EQ(s.sets.size(), 2u);  // the id, then the failure
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e1 = expect_error([&] { kinet::Bootstrap::from_store(s, 1, 2, "job-c", 20s); }, ErrorCode::System,
                                      "bootstrap: from_store rank 1/2: rank 0 failed (written by process " +
                                          std::to_string(getpid()));
  EXPECT_NE(e1.find("): init: "), std::string::npos) << e1;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

// A store that refuses to set: rank 0 fails with the store's error.
TEST_F(FromStore, RankZeroCannotSet) {
  struct Refusing : kinet::MemoryStore {
    void set(const std::string& k, const std::vector<uint8_t>&) override {
      throw kinet::Error(ErrorCode::System, "refusing store: set '" + k + "': disk full");
    }
  } s;
  expect_error([&] { kinet::Bootstrap::from_store(s, 0, 2, "job-d", 20s); }, ErrorCode::System,
               "refusing store: set 'job-d/kinet_unique_id': disk full");
}

// The record's layout, described here apart from the library's struct (so
// one mistake can't hide on both sides): magic "KINETSID" at 0, version u32
// at 8, status u32 at 12, nranks u32 at 16, pid u64 at 32, the UniqueId at 160.
std::vector<uint8_t> a_record(int nranks) {
  SpyStore s;
  try {
    kinet::Bootstrap::from_store(s, 0, nranks, "rec", 100ms);  // nobody joins: times out
  } catch (const kinet::Error&) {
  }
  EXPECT_GE(s.sets.size(), 1u);
  return s.sets.empty() ? std::vector<uint8_t>{} : s.sets[0];
}

template <class T>
void poke(std::vector<uint8_t>& v, size_t at, T x) {
  std::memcpy(v.data() + at, &x, sizeof x);
}

TEST_F(FromStore, HostileValues) {
  const std::vector<uint8_t> good = a_record(2);
  ASSERT_EQ(good.size(), 800u);
  ASSERT_EQ(std::memcmp(good.data(), "KINETSID", 8), 0);
  uint32_t v32;
  std::memcpy(&v32, good.data() + 16, 4);
  EXPECT_EQ(v32, 2u);
  uint64_t pid;
  std::memcpy(&pid, good.data() + 32, 8);
  EXPECT_EQ(pid, uint64_t(getpid()));
  std::memcpy(&v32, good.data() + 160, 4);
  EXPECT_EQ(v32, kinet::UniqueId::kMagic);

  const std::string not_rec = "key 'h/kinet_unique_id' in MemoryStore holds ";
  const auto from = [](const std::vector<uint8_t>& val, int nranks = 2) {
    kinet::MemoryStore s;
    s.set("h/kinet_unique_id", val);
    kinet::Bootstrap::from_store(s, 1, nranks, "h", 2s);
  };
  expect_error([&] { from({}); }, ErrorCode::InvalidArgument, not_rec + "0 bytes that are not a kinet unique id record (a record has 800 bytes)");
  expect_error([&] { from(bytes("garbage")); }, ErrorCode::InvalidArgument, not_rec + "7 bytes that are not");
  expect_error([&] { from(std::vector<uint8_t>(good.begin(), good.end() - 1)); }, ErrorCode::InvalidArgument, "799 bytes");
  std::vector<uint8_t> big = good;
  big.push_back(0);
  expect_error([&] { from(big); }, ErrorCode::InvalidArgument, "801 bytes");
  std::vector<uint8_t> x = good;
  x[0] ^= 1;
  expect_error([&] { from(x); }, ErrorCode::InvalidArgument, "(wrong magic)");
  x = good;
  poke<uint32_t>(x, 8, 2);
  expect_error([&] { from(x); }, ErrorCode::InvalidArgument, "(version 2: another kinet release?)");
  x = good;
  poke<uint32_t>(x, 12, 7);
  expect_error([&] { from(x); }, ErrorCode::InvalidArgument, "(status 7)");
  x = good;
  poke<uint32_t>(x, 160, 0xdeadbeef);
  expect_error([&] { from(x); }, ErrorCode::InvalidArgument, "(its unique id: ");
  x = good;  // an unterminated failure text ends at the record's end, not past it
  poke<uint32_t>(x, 12, 1);
  std::memset(x.data() + 288, 'A', 512);
  const std::string e = expect_error([&] { from(x); }, ErrorCode::System, "rank 0 failed");
  EXPECT_NE(e.find(std::string(512, 'A')), std::string::npos);
  expect_error([&] { from(good, 3); }, ErrorCode::InvalidArgument,
               "rank 0 published its id for 2 ranks under key 'h/kinet_unique_id' in MemoryStore");
}

// The pid of a process that has ended.
uint64_t dead_pid() {
  const pid_t p = fork();
  if (p == 0) _exit(0);
  int st;
  waitpid(p, &st, 0);
  return uint64_t(p);
}

// An id a dead process of this host left is not taken: alone, it ends in a
// timeout that says so; with a fresh id arriving later, the job works.
TEST_F(FromStore, StaleRecordSkipped) {
  std::vector<uint8_t> stale = a_record(2);
  ASSERT_EQ(stale.size(), 800u);
  poke<uint64_t>(stale, 32, dead_pid());
  {
    kinet::MemoryStore s;
    s.set("st/kinet_unique_id", stale);
    const auto t0 = std::chrono::steady_clock::now();
    expect_error([&] { kinet::Bootstrap::from_store(s, 1, 2, "st", 300ms); }, ErrorCode::System,
                 "timeout after 300 ms: key 'st/kinet_unique_id' in MemoryStore holds only a stale unique id");
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 300ms);
    try {
      kinet::Bootstrap::from_store(s, 1, 2, "st", 50ms);
    } catch (const kinet::Error& e) {
      EXPECT_NE(std::string(e.what()).find("no longer runs"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Prefixes must be unique per job"), std::string::npos) << e.what();
    }
    // An earlier job's failure record, its process gone: not this job's verdict.
    std::vector<uint8_t> failed = stale;
    poke<uint32_t>(failed, 12, 1);
    std::memcpy(failed.data() + 288, "init: earlier", 14);
    s.set("st/kinet_unique_id", failed);
    expect_error([&] { kinet::Bootstrap::from_store(s, 1, 2, "st", 100ms); }, ErrorCode::System,
                 "holds only a stale record of rank 0's failure (written by process ");
    expect_error([&] { kinet::Bootstrap::from_store(s, 1, 2, "st", 100ms); }, ErrorCode::System,
                 "no longer runs; it failed with: init: earlier)");
  }
  SpyStore s;
  s.set("st/kinet_unique_id", stale);
  std::unique_ptr<kinet::Bootstrap> b1;
  std::string e1;
  std::thread t1([&] {
    try {
      b1 = kinet::Bootstrap::from_store(s, 1, 2, "st", 20s);
    } catch (const std::exception& e) {
      e1 = e.what();
    }
  });
  const auto bound = std::chrono::steady_clock::now() + 20s;
  while (s.gets.load() == 0 && std::chrono::steady_clock::now() < bound) std::this_thread::yield();
  ASSERT_GE(s.gets.load(), 1) << "rank 1 never read the stale record";
  auto b0 = kinet::Bootstrap::from_store(s, 0, 2, "st", 20s);
  t1.join();
  ASSERT_TRUE(b1) << e1;
  EXPECT_GE(s.gets.load(), 2) << "rank 1 took the stale record";
  std::thread bar([&] { b1->barrier(); });
  b0->barrier();
  bar.join();
}

// ---- from_nccl without a GPU or NCCL: the checks before any collective -------------

TEST(FromNccl, ChecksBeforeNccl) {
  expect_error([] { kinet::Bootstrap::from_nccl(nullptr); }, ErrorCode::InvalidArgument,
               "bootstrap: from_nccl: null NCCL communicator");
  auto* fake = reinterpret_cast<ncclComm*>(uintptr_t{0x1000});  // never dereferenced: NCCL fails to load first
  expect_error([&] { kinet::Bootstrap::from_nccl(fake, nullptr, 0ms); }, ErrorCode::InvalidArgument, "timeout 0 ms");
  setenv("KINET_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
  expect_error([&] { kinet::Bootstrap::from_nccl(fake); }, ErrorCode::NotSupported,
               "bootstrap: from_nccl: no NCCL: dlopen(/nonexistent/libnccl.so.2) failed");
  setenv("KINET_NCCL_LIB", "libc.so.6", 1);  // loads, but is no NCCL
  expect_error([&] { kinet::Bootstrap::from_nccl(fake); }, ErrorCode::NotSupported,
               "bootstrap: from_nccl: libc.so.6 lacks ncclCommCount (not an NCCL 2 library?)");
  unsetenv("KINET_NCCL_LIB");
}

// Past loading, with a stand-in NCCL (rank 1 of 2): NCCL's failure is named
// with NCCL's reason; without a GPU the answer is NotSupported; with one, the
// stand-in's empty broadcast reads as rank 0's failure.
TEST(FromNccl, AfterLoadingWithAStandInNccl) {
  auto* fake = reinterpret_cast<ncclComm*>(uintptr_t{0x1000});  // the stand-in never dereferences it
  setenv("KINET_NCCL_LIB", KINET_NCCL_STUB, 1);
  setenv("NCCL_STUB_FAIL", "1", 1);
  expect_error([&] { kinet::Bootstrap::from_nccl(fake); }, ErrorCode::System,
               std::string("bootstrap: from_nccl: ncclCommUserRank failed: stub internal error (ncclResult 3, NCCL from ") +
                   KINET_NCCL_STUB + ")");
  unsetenv("NCCL_STUB_FAIL");
  if (!kinet::cuda::available())
    expect_error([&] { kinet::Bootstrap::from_nccl(fake); }, ErrorCode::NotSupported,
                 "bootstrap: from_nccl rank 1/2: no CUDA runtime or no GPU here");
  else
    expect_error([&] { kinet::Bootstrap::from_nccl(fake, nullptr, 5s); }, ErrorCode::System,
                 "bootstrap: from_nccl rank 1/2: rank 0 could not create the unique id");
  unsetenv("KINET_NCCL_LIB");
}

}  // namespace
