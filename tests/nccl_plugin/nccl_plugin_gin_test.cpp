// The kinet NCCL plugin's GIN table (PROXY) as NCCL 2.28 drives it: init
// twice, properties, listen handles, connect across ranks (itself included),
// regMrSym, iput / iputSignal / test with data and signal order checked byte
// for byte, every bad handle / offset / size rejected with its reason, and a
// killed peer failing test() within a bound. Transports: "loop" in one
// process, kinet's "tcp" across processes (no dependence on UCX).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "harness.hpp"
#include "kinet/bootstrap.hpp"

namespace {
using namespace kinet::nccl;
using namespace kinet::nccl::test;

GinV11& gin() { return *Plugin::get().gin; }

class Gin : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(Plugin::get().dl, nullptr) << Plugin::get().error;
    ASSERT_NE(Plugin::get().gin, nullptr);
    Log::clear();
  }
};

TEST_F(Gin, InitTwiceDevicesAndProxyProperties) {
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(gin().init(&a, 7, Log::logger), kSuccess);
  ASSERT_EQ(gin().init(&b, 7, Log::logger), kSuccess);  // NCCL: comm->ginContext and ginState->ginInstance
  EXPECT_NE(a, b);
  int n = 0;
  ASSERT_EQ(gin().devices(&n), kSuccess);
  EXPECT_EQ(n, 1);
  Properties p{};
  ASSERT_EQ(gin().get_properties(0, &p), kSuccess);
  EXPECT_EQ(p.net_device_type, kDeviceGinProxy);
  EXPECT_EQ(p.ptr_support, kPtrHost | kPtrCuda);
  EXPECT_EQ(p.max_recvs, 1);  // NCCL's proxy queue: 32 descriptors per peer
  EXPECT_STREQ(p.name, "kinet");
  EXPECT_EQ(gin().get_properties(1, &p), kInvalidArgument);
  EXPECT_TRUE(Log::warned("GIN getProperties: device 1 (kinet has 1)")) << Log::all();
  for (auto f : {(void*)gin().listen, (void*)gin().connect, (void*)gin().reg_mr_sym, (void*)gin().reg_mr_sym_dma_buf,
                 (void*)gin().dereg_mr_sym, (void*)gin().close_coll, (void*)gin().close_listen, (void*)gin().iput,
                 (void*)gin().iput_signal, (void*)gin().test, (void*)gin().gin_progress,
                 (void*)gin().query_last_error, (void*)gin().create_context, (void*)gin().destroy_context})
    EXPECT_NE(f, nullptr);
  EXPECT_EQ(gin().finalize(a), kSuccess);
  EXPECT_EQ(gin().finalize(b), kSuccess);
}

TEST_F(Gin, ListenGivesABootstrapIdAsTheHandle) {
  void* ctx;
  ASSERT_EQ(gin().init(&ctx, 1, Log::logger), kSuccess);
  uint8_t handle[kHandleMaxSize];
  std::memset(handle, 0xa5, sizeof handle);
  void* l = nullptr;
  ASSERT_EQ(gin().listen(ctx, 0, handle, &l), kSuccess) << Log::all();
  uint32_t magic;
  std::memcpy(&magic, handle, 4);
  EXPECT_EQ(magic, 0x4942534bu);  // kinet::UniqueId::kMagic
  EXPECT_EQ(gin().listen(ctx, 1, handle, &l), kInvalidArgument);
  EXPECT_TRUE(Log::warned("GIN listen: device 1"));
  int not_a_ctx = 0;
  EXPECT_EQ(gin().listen(&not_a_ctx, 0, handle, &l), kInvalidArgument);
  EXPECT_TRUE(Log::warned("not a kinet GIN context"));
  EXPECT_EQ(gin().close_listen(l), kSuccess);
  EXPECT_EQ(gin().close_listen(l), kInvalidArgument);  // stale: rejected without being read
  EXPECT_TRUE(Log::warned("GIN closeListen: not a kinet GIN listen comm"));
  EXPECT_EQ(gin().finalize(ctx), kSuccess);
  EXPECT_EQ(gin().listen(ctx, 0, handle, &l), kInvalidArgument);  // a finalized context
}

// NCCL calls closeListen without connect when init fails between the two:
// the bootstrap root listen() started must stop with it (its port refuses),
// not keep a thread and a listening socket until exit.
TEST_F(Gin, CloseListenWithoutConnectStopsTheBootstrapRoot) {
  void* ctx;
  ASSERT_EQ(gin().init(&ctx, 1, Log::logger), kSuccess);
  uint8_t handle[kHandleMaxSize];
  void* l = nullptr;
  ASSERT_EQ(gin().listen(ctx, 0, handle, &l), kSuccess) << Log::all();
  kinet::UniqueId id;
  std::memcpy(&id, handle, sizeof id);
  ASSERT_EQ(id.family, AF_INET) << "the test reaches the root over IPv4";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(id.port);
  std::memcpy(&a.sin_addr, id.addr, 4);
  char ip[INET_ADDRSTRLEN];
  ASSERT_NE(inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip), nullptr);
  const std::string root = std::string(ip) + ":" + std::to_string(id.port);
  ASSERT_EQ(gin().close_listen(l), kSuccess);
  EXPECT_TRUE(Log::logged(kLogInfo, "GIN closeListen: stopped bootstrap root " + root)) << Log::all();
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  const int err = errno;
  ::close(fd);
  EXPECT_EQ(rc, -1) << "the root of a closed GIN listen comm still listens on " << root;
  EXPECT_EQ(err, ECONNREFUSED);
  EXPECT_EQ(gin().finalize(ctx), kSuccess);
}

TEST_F(Gin, ConnectRejectsABadHandleOrRank) {
  void* ctx;
  ASSERT_EQ(gin().init(&ctx, 1, Log::logger), kSuccess);
  uint8_t handle[kHandleMaxSize];
  void* l;
  ASSERT_EQ(gin().listen(ctx, 0, handle, &l), kSuccess);
  void* handles[1] = {handle};
  void* comm = nullptr;
  EXPECT_EQ(gin().connect(ctx, handles, 1, 1, l, &comm), kInvalidArgument);  // rank == nranks
  EXPECT_TRUE(Log::warned("GIN connect: rank 1 of 1")) << Log::all();
  EXPECT_EQ(gin().connect(ctx, handles, 0, 0, l, &comm), kInvalidArgument);
  uint8_t bad[kHandleMaxSize];
  std::memcpy(bad, handle, sizeof bad);
  bad[0] ^= 1;  // the magic
  void* bad_handles[1] = {bad};
  EXPECT_EQ(gin().connect(ctx, bad_handles, 1, 0, l, &comm), kInvalidArgument);
  EXPECT_TRUE(Log::warned("magic")) << Log::all();
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(gin().close_listen(l), kSuccess);
  EXPECT_EQ(gin().finalize(ctx), kSuccess);
}

TEST_F(Gin, CallsOnSomethingElseAreRejected) {
  void* ctx;
  ASSERT_EQ(gin().init(&ctx, 1, Log::logger), kSuccess);  // gives the plugin NCCL's logger
  int junk[16] = {};
  void* req = nullptr;
  int done = 0;
  EXPECT_EQ(gin().iput(junk, 0, junk, 8, 0, junk, 0, &req), kInvalidArgument);
  EXPECT_TRUE(Log::warned("GIN iput: not a kinet GIN comm"));
  EXPECT_EQ(gin().iput_signal(nullptr, 0, nullptr, 0, 0, nullptr, 0, 0, junk, 1, kSignalOpInc, &req),
            kInvalidArgument);
  EXPECT_EQ(gin().test(junk, junk, &done), kInvalidArgument);
  EXPECT_EQ(gin().gin_progress(junk), kInvalidArgument);
  EXPECT_EQ(gin().close_coll(junk), kInvalidArgument);
  EXPECT_EQ(gin().create_context(junk, 1, 1, &req, nullptr), kInvalidUsage);
  EXPECT_TRUE(Log::warned("PROXY type"));
  bool err = true;
  EXPECT_EQ(gin().query_last_error(junk, &err), kSuccess);
  EXPECT_FALSE(err);
  EXPECT_EQ(gin().finalize(junk), kInvalidArgument);
  EXPECT_EQ(gin().finalize(ctx), kSuccess);
}

// ---- ranks ------------------------------------------------------------------

constexpr size_t kWin = 1 << 20;         // source window; the slices of the destination
constexpr size_t kDst = kWin + 4096;     // destination window: the edge tests write past the slices
constexpr size_t kChunk = 4096 + 8;      // odd-sized puts
constexpr int kPuts = 24;                // per peer, before the signal

uint8_t pattern(int from, int to, size_t i) { return static_cast<uint8_t>(from * 31 + to * 7 + i * 13 + (i >> 8)); }

struct RankComm {
  void* ctx[2] = {};
  void* comm = nullptr;
};

// NCCL's connect sequence on one rank (init twice, listen, swap handles,
// connect, closeListen); returns connect's result.
Result connect_rank(int rank, int n, Shared* sh, RankComm* rc) {
  GinV11& g = gin();
  RANK_CHECK(rank, g.init(&rc->ctx[0], 9, Log::logger) == kSuccess);
  RANK_CHECK(rank, g.init(&rc->ctx[1], 9, Log::logger) == kSuccess);
  void* l;
  RANK_CHECK(rank, g.listen(rc->ctx[1], 0, sh->handles[rank], &l) == kSuccess);
  sh->ready.fetch_add(1);
  RANK_CHECK(rank, wait_for([&] { return sh->ready.load() == uint32_t(n); }, [] { std::this_thread::sleep_for(1ms); }));
  void* handles[Shared::kMaxRanks];
  for (int r = 0; r < n; ++r) handles[r] = sh->handles[r];
  Result res = g.connect(rc->ctx[0], handles, n, rank, l, &rc->comm);
  RANK_CHECK(rank, g.close_listen(l) == kSuccess);
  return res;
}

// Waits for request `req` (bounded), driving progress as NCCL's thread does.
Result wait_req(void* comm, void* req) {
  int done = 0;
  Result res = kSuccess;
  wait_for([&] { return done || res != kSuccess; }, [&] { res = gin().test(comm, req, &done); });
  return done || res != kSuccess ? res : kInternalError;
}

// Every rank puts kPuts chunks into its own slice of every rank's window
// (itself included), then one put+signal ADD and one data-less signal INC;
// each target, on seeing the first signal, checks every byte from that sender.
int data_rank(int rank, int n, Shared* sh, const char* provider) {
  RankComm rc;
  RANK_CHECK(rank, connect_rank(rank, n, sh, &rc) == kSuccess);
  // NCCL_DEBUG=INFO shows which transport serves each peer.
  for (int r = 0; r < n; ++r)
    RANK_CHECK(rank, Log::logged(kLogInfo, "rank " + std::to_string(r) + " served by kinet transport " + provider));
  GinV11& g = gin();
  void* c = rc.comm;
  std::vector<uint8_t> src(kWin), dst(kDst, 0);
  std::vector<uint64_t> sig(Shared::kMaxRanks, 0);
  void *msrc, *mdst, *msig, *gh;
  RANK_CHECK(rank, g.reg_mr_sym(c, src.data(), src.size(), kPtrHost, 0, &msrc, &gh) == kSuccess && gh == msrc);
  RANK_CHECK(rank, g.reg_mr_sym(c, dst.data(), dst.size(), kPtrHost, 0, &mdst, &gh) == kSuccess);
  RANK_CHECK(rank, g.reg_mr_sym(c, sig.data(), sig.size() * 8, kPtrHost, kMrFlagForceSo, &msig, &gh) == kSuccess);
  const size_t slice = kWin / n;
  for (int to = 0; to < n; ++to)
    for (size_t i = 0; i < slice; ++i) src[to * slice + i] = pattern(rank, to, i);
  std::vector<void*> reqs;
  for (int to = 0; to < n; ++to) {
    const size_t per = (slice - 64) / kPuts;  // the last 64 bytes go with the signal
    for (int k = 0; k < kPuts; ++k) {
      void* req = nullptr;
      size_t off = to * slice + k * per;
      RANK_CHECK(rank, g.iput(c, off, msrc, per, rank * slice + k * per, mdst, to, &req) == kSuccess && req);
      reqs.push_back(req);
    }
    size_t tail = kPuts * per;
    void* req = nullptr;
    RANK_CHECK(rank, g.iput_signal(c, to * slice + tail, msrc, slice - tail, rank * slice + tail, mdst, to,
                                   rank * 8, msig, 5, kSignalOpAdd, &req) == kSuccess);
    reqs.push_back(req);
    RANK_CHECK(rank, g.iput_signal(c, 0, nullptr, 0, 0, nullptr, to, rank * 8, msig, 99, kSignalOpInc, &req) ==
                         kSuccess);
    reqs.push_back(req);
  }
  for (void* req : reqs) RANK_CHECK(rank, wait_req(c, req) == kSuccess);
  // As a target: every sender's signal reaches 5 then 6 (INC adds 1, not its value).
  for (int from = 0; from < n; ++from) {
    RANK_CHECK(rank, wait_for([&] { return __atomic_load_n(&sig[from], __ATOMIC_ACQUIRE) >= 5; },
                              [&] { g.gin_progress(c); }));
    for (size_t i = 0; i < slice; ++i) RANK_CHECK(rank, dst[from * slice + i] == pattern(from, rank, i));
    RANK_CHECK(rank, wait_for([&] { return __atomic_load_n(&sig[from], __ATOMIC_ACQUIRE) >= 6; },
                              [&] { g.gin_progress(c); }));
    RANK_CHECK(rank, sig[from] == 6);
  }
  // Bad inputs, each at its edge: the last byte is fine, one more is not.
  void* req = nullptr;
  const int peer = (rank + 1) % n;
  RANK_CHECK(rank, g.iput(c, kWin - 1, msrc, 1, kDst - 1, mdst, peer, &req) == kSuccess);
  RANK_CHECK(rank, wait_req(c, req) == kSuccess);
  RANK_CHECK(rank, g.iput(c, kWin - 1, msrc, 2, 0, mdst, peer, &req) == kInvalidArgument);
  RANK_CHECK(rank, Log::warned("source [1048575, +2) outside its window of 1048576 bytes"));
  RANK_CHECK(rank, g.iput(c, 0, msrc, 2, kDst - 1, mdst, peer, &req) == kInvalidArgument);
  RANK_CHECK(rank, Log::warned("destination [" + std::to_string(kDst - 1) + ", +2) outside its window of " +
                               std::to_string(kDst) + " bytes"));
  RANK_CHECK(rank, g.iput(c, UINT64_MAX, msrc, 2, 0, mdst, peer, &req) == kInvalidArgument);  // wraps
  int junk = 0;
  RANK_CHECK(rank, g.iput(c, 0, &junk, 8, 0, mdst, peer, &req) == kInvalidArgument);
  RANK_CHECK(rank, Log::warned("unknown source memory handle"));
  RANK_CHECK(rank, g.iput(c, 0, msrc, 8, 0, &junk, peer, &req) == kInvalidArgument);
  RANK_CHECK(rank, Log::warned("unknown destination memory handle"));
  RANK_CHECK(rank, g.iput(c, 0, msrc, 8, 0, mdst, uint32_t(n), &req) == kInvalidArgument);
  RANK_CHECK(rank, Log::warned("rank " + std::to_string(n) + " (comm has " + std::to_string(n) + ")"));
  const uint64_t last = Shared::kMaxRanks * 8 - 8;
  RANK_CHECK(rank, g.iput_signal(c, 0, nullptr, 0, 0, nullptr, peer, last, msig, 0, kSignalOpAdd, &req) == kSuccess);
  RANK_CHECK(rank, wait_req(c, req) == kSuccess);
  RANK_CHECK(rank, g.iput_signal(c, 0, nullptr, 0, 0, nullptr, peer, last + 8, msig, 1, kSignalOpAdd, &req) ==
                       kInvalidArgument);
  RANK_CHECK(rank, Log::warned("signal offset " + std::to_string(last + 8) + " not an aligned 8-byte word"));
  RANK_CHECK(rank, g.iput_signal(c, 0, nullptr, 0, 0, nullptr, peer, 4, msig, 1, kSignalOpAdd, &req) ==
                       kInvalidArgument);
  RANK_CHECK(rank, g.iput_signal(c, 0, nullptr, 0, 0, nullptr, peer, 0, msig, 1, 3, &req) == kInvalidArgument);
  RANK_CHECK(rank, Log::warned("signal op 3"));
  RANK_CHECK(rank, g.iput_signal(c, 0, nullptr, 0, 0, nullptr, peer, 0, &junk, 1, kSignalOpInc, &req) ==
                       kInvalidArgument);
  RANK_CHECK(rank, Log::warned("unknown signal memory handle"));
  RANK_CHECK(rank, g.test(c, &junk, &junk) == kInvalidArgument);
  RANK_CHECK(rank, Log::warned("test: unknown request"));
  bool err = true;
  RANK_CHECK(rank, g.query_last_error(c, &err) == kSuccess && !err);
  // Keep serving the others' operations until every rank is done.
  sh->finished.fetch_add(1);
  RANK_CHECK(rank, wait_for([&] { return sh->finished.load() == uint32_t(n); }, [&] { g.gin_progress(c); }));
  RANK_CHECK(rank, g.dereg_mr_sym(c, msrc) == kSuccess && g.dereg_mr_sym(c, mdst) == kSuccess);
  RANK_CHECK(rank, g.dereg_mr_sym(c, msig) == kSuccess);
  RANK_CHECK(rank, g.dereg_mr_sym(c, msig) == kInvalidArgument);
  RANK_CHECK(rank, g.close_coll(c) == kSuccess);
  RANK_CHECK(rank, g.finalize(rc.ctx[0]) == kSuccess && g.finalize(rc.ctx[1]) == kSuccess);
  return 0;
}

// regMrSym imports one key per rank into the transport, which holds 2^20
// live: deregMrSym gives them back, so more register / deregister cycles
// than that go on (regMrSym failed for good after 2^20 / nranks before).
int cycles_rank(int rank, Shared* sh) {
  RankComm rc;
  RANK_CHECK(rank, connect_rank(rank, 1, sh, &rc) == kSuccess);
  GinV11& g = gin();
  std::vector<uint8_t> win(4096);
  for (long i = 0; i < (1l << 20) + 16; ++i) {
    void *mh, *gh;
    if (g.reg_mr_sym(rc.comm, win.data(), win.size(), kPtrHost, 0, &mh, &gh) != kSuccess) {
      std::fprintf(stderr, "regMrSym failed in cycle %ld\n", i);
      return 1;
    }
    RANK_CHECK(rank, g.dereg_mr_sym(rc.comm, mh) == kSuccess);
  }
  RANK_CHECK(rank, g.close_coll(rc.comm) == kSuccess);
  RANK_CHECK(rank, g.finalize(rc.ctx[0]) == kSuccess && g.finalize(rc.ctx[1]) == kSuccess);
  return 0;
}

// A request test() reported done, or a deregistered memory handle, is
// rejected even where the allocator gave its object's address to a new
// request / window: test() must not answer for (and consume) the new one.
int stale_rank(int rank, Shared* sh) {
  RankComm rc;
  RANK_CHECK(rank, connect_rank(rank, 1, sh, &rc) == kSuccess);
  GinV11& g = gin();
  void* c = rc.comm;
  std::vector<uint8_t> win(4096);
  void *mh, *gh;
  RANK_CHECK(rank, g.reg_mr_sym(c, win.data(), win.size(), kPtrHost, 0, &mh, &gh) == kSuccess && gh == mh);
  RANK_CHECK(rank, reinterpret_cast<uintptr_t>(gh) < (uintptr_t(1) << 63));  // NCCL's 63-bit descriptor field
  std::vector<void*> finished;
  for (int i = 0; i < 8; ++i) {
    void* req = nullptr;
    RANK_CHECK(rank, g.iput(c, 0, mh, 64, 1024, mh, 0, &req) == kSuccess && req);
    RANK_CHECK(rank, wait_req(c, req) == kSuccess);
    finished.push_back(req);
  }
  void* req = nullptr;
  RANK_CHECK(rank, g.iput(c, 0, mh, 64, 1024, mh, 0, &req) == kSuccess && req);
  for (void* f : finished) {
    int done = 7;
    RANK_CHECK(rank, g.test(c, f, &done) == kInvalidArgument && done == 7);
    RANK_CHECK(rank, f != req);
  }
  RANK_CHECK(rank, Log::warned("test: unknown request"));
  RANK_CHECK(rank, wait_req(c, req) == kSuccess);
  RANK_CHECK(rank, g.dereg_mr_sym(c, mh) == kSuccess);
  void* mh2;
  RANK_CHECK(rank, g.reg_mr_sym(c, win.data(), win.size(), kPtrHost, 0, &mh2, &gh) == kSuccess);
  RANK_CHECK(rank, g.iput(c, 0, mh, 64, 1024, mh2, 0, &req) == kInvalidArgument);
  RANK_CHECK(rank, Log::warned("unknown source memory handle"));
  RANK_CHECK(rank, g.dereg_mr_sym(c, mh) == kInvalidArgument);
  RANK_CHECK(rank, Log::warned("deregMrSym: unknown memory handle"));
  RANK_CHECK(rank, mh2 != mh);
  RANK_CHECK(rank, g.dereg_mr_sym(c, mh2) == kSuccess);
  RANK_CHECK(rank, g.close_coll(c) == kSuccess);
  RANK_CHECK(rank, g.close_coll(c) == kInvalidArgument);
  RANK_CHECK(rank, g.finalize(rc.ctx[0]) == kSuccess && g.finalize(rc.ctx[1]) == kSuccess);
  return 0;
}

void expect_ranks(const std::vector<int>& codes) {
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

void run_data(int n, const NetnsPair* ns) {
  Shared* sh = Shared::make();
  ASSERT_NE(sh, nullptr);
  auto codes = run_ranks(n, [&](int r) { return data_rank(r, n, sh, "tcp"); }, 60s, [&](int r) {
    setenv("KINET_TRANSPORT", "tcp", 1);
    setenv("KINET_BOOTSTRAP_TIMEOUT_MS", "20000", 1);
    return !ns || ns->enter(r);
  });
  munmap(sh, sizeof(Shared));
  expect_ranks(codes);
}

TEST(GinRanks, OneRankInProcessOverLoop) {
  Shared* sh = Shared::make();
  ASSERT_NE(sh, nullptr);
  setenv("KINET_TRANSPORT", "loop", 1);
  // In a child, so a failed check can exit without taking the test binary down.
  auto codes = run_ranks(1, [&](int r) { return data_rank(r, 1, sh, "loop"); }, 30s);
  unsetenv("KINET_TRANSPORT");
  munmap(sh, sizeof(Shared));
  expect_ranks(codes);
}
TEST(GinRanks, AStaleRequestOrMemoryHandleIsRejectedNotTakenForANewOne) {
  Shared* sh = Shared::make();
  ASSERT_NE(sh, nullptr);
  setenv("KINET_TRANSPORT", "loop", 1);
  auto codes = run_ranks(1, [&](int r) { return stale_rank(r, sh); }, 30s);
  unsetenv("KINET_TRANSPORT");
  munmap(sh, sizeof(Shared));
  expect_ranks(codes);
}
TEST(GinRanks, RegistrationCyclesGiveTheirKeysBack) {
  Shared* sh = Shared::make();
  ASSERT_NE(sh, nullptr);
  setenv("KINET_TRANSPORT", "loop", 1);
  auto codes = run_ranks(1, [&](int r) { return cycles_rank(r, sh); }, 120s);
  unsetenv("KINET_TRANSPORT");
  munmap(sh, sizeof(Shared));
  expect_ranks(codes);
}
TEST(GinRanks, TwoProcessesOverTcp) { run_data(2, nullptr); }
TEST(GinRanks, ThreeProcessesOverTcp) { run_data(3, nullptr); }
TEST(GinRanks, TwoProcessesAcrossNetworkNamespaces) {
  NetnsPair ns(2);
  if (!ns.ok()) GTEST_SKIP() << kinet::test::kNetnsSkip;
  run_data(2, &ns);
}

// Rank 1 dies (killed: its connections close) or hangs (stopped: silent)
// after registering; rank 0's puts to it must fail in test() within the
// transport's timeout, and later posts to it fail at once.
void peer_failure(bool stop) {
  Shared* sh = Shared::make();
  ASSERT_NE(sh, nullptr);
  static std::atomic<pid_t>* victim = nullptr;
  victim = reinterpret_cast<std::atomic<pid_t>*>(&sh->phase);
  auto body = [&](int rank) -> int {
    RankComm rc;
    RANK_CHECK(rank, connect_rank(rank, 2, sh, &rc) == kSuccess);
    GinV11& g = gin();
    std::vector<uint8_t> buf(1 << 16);
    void *mh, *gh;
    RANK_CHECK(rank, g.reg_mr_sym(rc.comm, buf.data(), buf.size(), kPtrHost, 0, &mh, &gh) == kSuccess);
    if (rank == 1) {
      victim->store(getpid());
      raise(stop ? SIGSTOP : SIGKILL);
    }
    auto t0 = std::chrono::steady_clock::now();
    Result res = kSuccess;
    for (int i = 0; i < 1000 && res == kSuccess; ++i) {
      void* req = nullptr;
      res = g.iput(rc.comm, 0, mh, buf.size(), 0, mh, 1, &req);
      if (res == kSuccess) res = wait_req(rc.comm, req);
    }
    RANK_CHECK(rank, res == kRemoteError);
    RANK_CHECK(rank, std::chrono::steady_clock::now() - t0 < 15s);
    RANK_CHECK(rank, Log::warned("operation to rank 1 failed: "));
    if (stop) {
      RANK_CHECK(rank, Log::warned("timeout"));
      kill(victim->load(), SIGKILL);
    }
    bool err = false;
    RANK_CHECK(rank, g.query_last_error(rc.comm, &err) == kSuccess && err);
    void* req = nullptr;
    RANK_CHECK(rank, g.iput(rc.comm, 0, mh, 8, 0, mh, 1, &req) == kRemoteError);
    RANK_CHECK(rank, Log::warned("an earlier operation to it failed"));
    return 0;
  };
  auto codes = run_ranks(2, body, 40s, [](int) {
    setenv("KINET_TRANSPORT", "tcp", 1);
    setenv("KINET_TRANSPORT_TIMEOUT_MS", "3000", 1);
    return true;
  });
  munmap(sh, sizeof(Shared));
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
}
TEST(GinRanks, AKilledPeerFailsTestWithinABound) { peer_failure(false); }
TEST(GinRanks, AStoppedPeerFailsTestWithinTheTransportTimeout) { peer_failure(true); }

// One rank can't open its transport: every rank's connect fails at once
// naming that rank and why, instead of waiting for it to time out.
TEST(GinRanks, ARankWithoutATransportFailsEveryConnectWithItsReason) {
  Shared* sh = Shared::make();
  ASSERT_NE(sh, nullptr);
  auto body = [&](int rank) -> int {
    RankComm rc;
    auto t0 = std::chrono::steady_clock::now();
    RANK_CHECK(rank, connect_rank(rank, 2, sh, &rc) == kInternalError);
    RANK_CHECK(rank, rc.comm == nullptr);
    RANK_CHECK(rank, Log::warned("rank 1 has no transport: ") && Log::warned("nosuch"));
    RANK_CHECK(rank, std::chrono::steady_clock::now() - t0 < 10s);
    return 0;
  };
  auto codes = run_ranks(2, body, 40s, [](int r) {
    setenv("KINET_TRANSPORT", r == 1 ? "nosuch" : "tcp", 1);
    return true;
  });
  munmap(sh, sizeof(Shared));
  expect_ranks(codes);
}

}  // namespace
