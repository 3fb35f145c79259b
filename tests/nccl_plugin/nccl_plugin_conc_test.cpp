// The kinet NCCL plugin's GIN under NCCL's threading: one progress thread
// posts and tests while a user thread registers and deregisters windows
// (regMrSym from any thread while the progress thread runs). One rank over
// the "loop" transport, in this process (no fork), so TSan sees both threads.
#include <gtest/gtest.h>

#include "harness.hpp"

namespace {
using namespace kinet::nccl;
using namespace kinet::nccl::test;

TEST(GinThreads, RegistrationWhileTheProgressThreadPuts) {
  ASSERT_NE(Plugin::get().dl, nullptr) << Plugin::get().error;
  GinV11& g = *Plugin::get().gin;
  setenv("KINET_TRANSPORT", "loop", 1);
  void *ctx0, *ctx1, *l, *comm = nullptr;
  ASSERT_EQ(g.init(&ctx0, 3, Log::logger), kSuccess);
  ASSERT_EQ(g.init(&ctx1, 3, Log::logger), kSuccess);
  uint8_t handle[kHandleMaxSize];
  ASSERT_EQ(g.listen(ctx1, 0, handle, &l), kSuccess);
  void* handles[1] = {handle};
  ASSERT_EQ(g.connect(ctx0, handles, 1, 0, l, &comm), kSuccess) << Log::all();
  ASSERT_EQ(g.close_listen(l), kSuccess);

  std::vector<uint8_t> src(1 << 16), dst(1 << 16);
  std::vector<uint64_t> sig(1, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 5);
  void *ms, *md, *mg, *gh;
  ASSERT_EQ(g.reg_mr_sym(comm, src.data(), src.size(), kPtrHost, 0, &ms, &gh), kSuccess);
  ASSERT_EQ(g.reg_mr_sym(comm, dst.data(), dst.size(), kPtrHost, 0, &md, &gh), kSuccess);
  ASSERT_EQ(g.reg_mr_sym(comm, sig.data(), 8, kPtrHost, kMrFlagForceSo, &mg, &gh), kSuccess);

  constexpr int kOps = 400;
  std::atomic<bool> stop{false};
  std::atomic<int> reg_failures{0}, regs{0};
  std::thread user([&] {  // NCCL's user thread: window registrations come and go
    std::vector<uint8_t> w(1 << 12);
    while (!stop.load()) {
      void *mh, *gh2;
      if (g.reg_mr_sym(comm, w.data(), w.size(), kPtrHost, 0, &mh, &gh2) != kSuccess ||
          g.dereg_mr_sym(comm, mh) != kSuccess)
        reg_failures.fetch_add(1);
      regs.fetch_add(1);
    }
  });
  // The progress thread (this one): put + signal, test, progress.
  Result res = kSuccess;
  for (int i = 0; i < kOps && res == kSuccess; ++i) {
    void* req = nullptr;
    size_t off = (i * 997) % (src.size() - 256);
    res = g.iput_signal(comm, off, ms, 256, off, md, 0, 0, mg, 1, kSignalOpAdd, &req);
    int done = 0;
    while (res == kSuccess && !done) res = g.test(comm, req, &done);
    g.gin_progress(comm);
  }
  // Keep going until the user thread has registered a few times alongside.
  wait_for([&] { return regs.load() >= 20; }, [&] { g.gin_progress(comm); }, 20s);
  stop.store(true);
  user.join();
  EXPECT_EQ(res, kSuccess) << Log::all();
  EXPECT_EQ(reg_failures.load(), 0) << Log::all();
  EXPECT_GE(regs.load(), 20);
  EXPECT_TRUE(wait_for([&] { return __atomic_load_n(&sig[0], __ATOMIC_ACQUIRE) == uint64_t(kOps); },
                       [&] { g.gin_progress(comm); }, 10s));
  for (int i = 0; i < kOps; ++i) {
    size_t off = (i * 997) % (src.size() - 256);
    ASSERT_EQ(std::memcmp(src.data() + off, dst.data() + off, 256), 0) << "put " << i;
  }
  EXPECT_EQ(g.dereg_mr_sym(comm, ms), kSuccess);
  EXPECT_EQ(g.dereg_mr_sym(comm, md), kSuccess);
  EXPECT_EQ(g.dereg_mr_sym(comm, mg), kSuccess);
  EXPECT_EQ(g.close_coll(comm), kSuccess);
  EXPECT_EQ(g.finalize(ctx0), kSuccess);
  EXPECT_EQ(g.finalize(ctx1), kSuccess);
  unsetenv("KINET_TRANSPORT");
}

}  // namespace
