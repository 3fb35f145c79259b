// SDK mode's devices against stand-in SDKs (tests/doca_stub) over the
// software NIC's verbs ("mlx5_emu"): (a) a complete SDK makes every
// control-path object and the handle comes from what it reports; (c) an SDK
// call that fails is a kinet::Error naming the call and its doca_error_t,
// with nothing leaked; then DOCA_SDK_LIB_PATH end to end through
// Device::open in child processes: SDK path, and (b)/(d) the fallback to the
// open mlx5 path with exactly one log line.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "test_util.hpp"
#include "providers/doca/device.hpp"
#include "stub.h"
#include "../doca_stub/stub_dir.hpp"

namespace {
using kinet::ErrorCode;
using kinet::QpState;
using kinet::doca::Sdk;

using kinet::test::error_of;
using kinet::test::kStubs;

// The stand-in library's record of what it was asked (stub.h), zeroed.
kinet_stub_stats* stats_of(const std::string& dir, const char* lib) {
  void* h = dlopen((dir + "/" + lib).c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!h) return nullptr;
  auto* s = static_cast<kinet_stub_stats*>(dlsym(h, "kinet_stub_stats"));
  dlclose(h);  // the Sdk still holds it
  return s;
}

struct Stubbed {
  std::string dir;
  std::shared_ptr<const Sdk> sdk;
  kinet_stub_stats* common = nullptr;
  kinet_stub_stats* verbs = nullptr;
  explicit Stubbed(const std::string& scenario) : dir(kStubs + "/" + scenario) {
    Sdk::Loaded l = Sdk::load(dir);
    sdk = l.sdk;
    if (!sdk) return;
    common = stats_of(dir, "libdoca_common.so");
    verbs = stats_of(dir, "libdoca_verbs.so");
    if (common) *common = {};
    if (verbs) *verbs = {};
  }
  bool ok() const { return sdk && common && verbs; }
};


TEST(DocaSdkDevice, CompleteSdkMakesEveryObjectAndTheHandleComesFromIt) {
  Stubbed st("complete");
  ASSERT_TRUE(st.ok());
  {
    auto dev = kinet::doca::open_emu_device(st.sdk, "mlx5_emu");
    EXPECT_EQ(dev->attr().provider, "doca");
    EXPECT_EQ(dev->attr().name.rfind("mlx5_emu", 0), 0u);
    EXPECT_EQ(dev->attr().max_qp_wr, KINET_STUB_MAX_QP_WR);
    EXPECT_EQ(dev->attr().max_qp, 4096u);
    EXPECT_EQ(dev->attr().max_mr, 65536u);
    EXPECT_EQ(dev->attr().max_msg, 1u << 30);
    EXPECT_EQ(st.verbs->ctx_import, 1);
    EXPECT_EQ(st.verbs->query_device, 1);
    auto pd = dev->alloc_pd();
    EXPECT_EQ(st.common->dev_open, 1);
    EXPECT_EQ(st.verbs->pd_import, 1);

    kinet::QpConfig cfg;
    cfg.sq_depth = 64;
    auto a = pd->create_qp(cfg);
    EXPECT_EQ(st.verbs->qp_create, 1);
    EXPECT_EQ(st.verbs->cq_create, 1);
    EXPECT_EQ(st.common->umem_create, 1);
    EXPECT_EQ(st.common->uar_create, 1);
    EXPECT_EQ(st.common->uar_type, 1);  // DOCA_VERBS_UAR_ALLOCATION_TYPE_NONCACHE
    EXPECT_EQ(st.verbs->sq_wr, 64u);
    EXPECT_EQ(st.verbs->rq_wr, 0u);
    EXPECT_EQ(st.verbs->max_sges, 1u);
    EXPECT_EQ(st.verbs->qp_type, 0u);  // RC
    EXPECT_EQ(st.verbs->cq_size, 64u);
    // One UMEM: send ring at 0, CQ at 64*64, CQ record right after the ring, QP record after it.
    EXPECT_EQ(st.common->umem_size, 64u * 64 * 2 + 128);
    EXPECT_EQ(st.verbs->sq_umem_offset, 0u);
    EXPECT_EQ(st.verbs->cq_umem_offset, 64u * 64);
    EXPECT_EQ(st.verbs->dbr_umem_offset, 64u * 64 * 2 + 64);

    const kinet::dev::QpHandle h = a->handle();
    auto* base = static_cast<uint8_t*>(st.common->umem_addr);
    EXPECT_EQ(h.sq, base);
    EXPECT_EQ(reinterpret_cast<uint8_t*>(h.cq.cqes), base + 64 * 64);
    EXPECT_EQ(reinterpret_cast<uint8_t*>(h.cq.dbrec), base + 64 * 64 * 2);
    EXPECT_EQ(reinterpret_cast<uint8_t*>(h.dbrec), base + 64 * 64 * 2 + 64);
    EXPECT_NE(h.db, nullptr);
    EXPECT_EQ(h.log_n, 6u);
    EXPECT_EQ(h.cq.log_n, 6u);
    EXPECT_GE(h.qpn, KINET_STUB_QPN_BASE);
    EXPECT_LT(h.qpn, KINET_STUB_QPN_BASE + 0x1000);
    EXPECT_EQ(h.qpn, a->qpn());
    EXPECT_EQ(h.qpn_be8, __builtin_bswap32(h.qpn << 8));
    EXPECT_GE(h.cq.cqn, KINET_STUB_CQN_BASE);
    EXPECT_EQ(h.cq.cqes[0].op_own, kinet::mlx5::kCqeInitOpOwn);  // CQEs start invalid, owner 1
    EXPECT_EQ(a->state(), QpState::Reset);
    EXPECT_EQ(a->info().provider, 2);  // ConnectX RC on the wire

    auto b = pd->create_qp(cfg);
    // Transitions in the wrong order are refused before the SDK is asked.
    const int modifies = st.verbs->qp_modify;
    std::string m = error_of([&] { a->to_rts(); }, ErrorCode::BadState);
    EXPECT_EQ(m, dev->name() + " QP " + [&] {
      char x[16];
      std::snprintf(x, sizeof x, "0x%x", a->qpn());
      return std::string(x);
    }() + ": to_rts: the QP is in RESET, not RTR");
    EXPECT_EQ(st.verbs->qp_modify, modifies);

    a->to_init(kinet::kAccessAll);
    EXPECT_EQ(st.verbs->next_state, 1);
    EXPECT_EQ(st.verbs->modify_mask, (1 << 5) | (1 << 0) | (1 << 1) | (1 << 15) | (1 << 2) | (1 << 4));
    EXPECT_EQ(st.verbs->allow_write, 1);
    EXPECT_EQ(st.verbs->allow_read, 1);
    EXPECT_EQ(st.verbs->atomic_mode, 3);  // up to 8 bytes
    EXPECT_EQ(st.verbs->port_num, 1);
    const kinet::QpInfo bi = b->info();
    a->to_rtr(bi);
    EXPECT_EQ(st.verbs->next_state, 2);
    EXPECT_EQ(st.verbs->modify_mask, (1 << 5) | (1 << 14) | (1 << 7) | (1 << 10) | (1 << 8) | (1 << 3) | (1 << 17));
    EXPECT_EQ(st.verbs->dest_qpn, b->qpn());
    EXPECT_EQ(st.verbs->rq_psn, 0u);
    EXPECT_EQ(st.verbs->path_mtu, 4);   // 4096 B: DOCA_VERBS_MTU_SIZE_4K_BYTES
    EXPECT_EQ(st.verbs->addr_type, 1);  // RoCE v2 with an IPv6 (not IPv4-mapped) GID
    EXPECT_EQ(std::memcmp(st.verbs->gid, bi.gid, 16), 0);
    EXPECT_EQ(st.verbs->sgid_index, 0);
    EXPECT_EQ(st.verbs->hop_limit, 64);
    EXPECT_EQ(st.verbs->min_rnr_timer, 12);
    EXPECT_EQ(st.verbs->max_dest_rd_atomic, 16);
    a->to_rts();
    EXPECT_EQ(st.verbs->next_state, 3);
    EXPECT_EQ(st.verbs->modify_mask, (1 << 5) | (1 << 9) | (1 << 11) | (1 << 12) | (1 << 13) | (1 << 16));
    EXPECT_EQ(st.verbs->ack_timeout, 14);
    EXPECT_EQ(st.verbs->retry_cnt, 7);
    EXPECT_EQ(st.verbs->rnr_retry, 7);
    EXPECT_EQ(st.verbs->max_rd_atomic, 16);
    EXPECT_EQ(a->state(), QpState::Rts);
    a->to_error();
    EXPECT_EQ(a->state(), QpState::Error);
    a->reset();
    EXPECT_EQ(a->state(), QpState::Reset);
    a->to_init(kinet::kRemoteWrite);  // again after reset, with fewer rights
    EXPECT_EQ(st.verbs->allow_write, 1);
    EXPECT_EQ(st.verbs->allow_read, 0);
    EXPECT_EQ(st.verbs->atomic_mode, 0);
    a->to_rtr(bi);  // a new path object replaces the old one
    a->to_rts();
    EXPECT_EQ(a->state(), QpState::Rts);
    EXPECT_EQ(st.verbs->ah_create, 2);

    // Memory registration goes through the open side's verbs on the SDK-mode PD.
    std::vector<uint8_t> buf(4096);
    auto mr = pd->reg_mr(buf.data(), buf.size(), kinet::kLocalWrite | kinet::kRemoteWrite);
    EXPECT_NE(mr->rkey_value(), 0u);
  }
  // Everything made through the SDK was given back to it.
  EXPECT_EQ(st.common->live, 0);
  EXPECT_EQ(st.verbs->live, 0);
  EXPECT_EQ(st.verbs->qp_destroy, 2);
  EXPECT_EQ(st.verbs->cq_destroy, 2);
  EXPECT_EQ(st.common->umem_destroy, 2);
  EXPECT_EQ(st.common->uar_destroy, 2);
  EXPECT_EQ(st.common->dev_close, 1);
  EXPECT_EQ(st.verbs->pd_destroy, 1);
  EXPECT_EQ(st.verbs->ctx_destroy, 1);
}

TEST(DocaSdkDevice, ConfigIsCheckedAtTheEdges) {
  Stubbed st("complete");
  ASSERT_TRUE(st.ok());
  auto dev = kinet::doca::open_emu_device(st.sdk, "mlx5_emu");
  auto pd = dev->alloc_pd();
  kinet::QpConfig cfg;
  cfg.sq_depth = KINET_STUB_MAX_QP_WR;
  EXPECT_NO_THROW(pd->create_qp(cfg));
  cfg.sq_depth = KINET_STUB_MAX_QP_WR * 2;
  error_of([&] { pd->create_qp(cfg); }, ErrorCode::InvalidArgument);
  cfg.sq_depth = 2;
  EXPECT_NO_THROW(pd->create_qp(cfg));
  cfg.sq_depth = 1;
  error_of([&] { pd->create_qp(cfg); }, ErrorCode::InvalidArgument);
  cfg.sq_depth = 64;
  cfg.posters = kinet::Posters::Gpu;
  const std::string m = error_of([&] { pd->create_qp(cfg); }, ErrorCode::NotSupported);
  EXPECT_NE(m.find("not wired in DOCA SDK mode"), std::string::npos) << m;
  EXPECT_EQ(st.verbs->qp_create, 2);
}

TEST(DocaSdkDevice, FailingCreateIsReportedWithCallAndCodeAndLeaksNothing) {
  Stubbed st("fail_qp_create");
  ASSERT_TRUE(st.ok());
  auto dev = kinet::doca::open_emu_device(st.sdk, "mlx5_emu");
  auto pd = dev->alloc_pd();
  const int live = st.common->live + st.verbs->live;
  const std::string m = error_of([&] { pd->create_qp({}); }, ErrorCode::System);
  EXPECT_EQ(m, dev->name() + ": create_qp: DOCA SDK call doca_verbs_qp_create failed: doca_error_t 21 "
                             "(DOCA_ERROR_DRIVER: DOCA Driver call failure)");
  EXPECT_EQ(st.common->live + st.verbs->live, live);  // the UMEM, UAR and CQ made before it are gone
  EXPECT_EQ(st.verbs->cq_destroy, 1);
  EXPECT_EQ(st.common->umem_destroy, 1);
}

TEST(DocaSdkDevice, FailingDeviceOpenWithoutErrorNames) {
  Stubbed st("fail_open_no_name");
  ASSERT_TRUE(st.ok());
  auto dev = kinet::doca::open_emu_device(st.sdk, "mlx5_emu");
  const std::string m = error_of([&] { dev->alloc_pd(); }, ErrorCode::InvalidArgument);
  const std::string tail = ": DOCA SDK call doca_rdma_bridge_open_dev_from_pd failed: doca_error_t 6 "
                           "(no doca_error_get_name in this SDK)";
  ASSERT_GE(m.size(), tail.size());
  EXPECT_EQ(m.substr(m.size() - tail.size()), tail);
  EXPECT_EQ(m.rfind(dev->name() + " PD ", 0), 0u) << m;
  EXPECT_EQ(st.common->dev_open, 0);
  EXPECT_EQ(st.verbs->pd_import, 0);
  EXPECT_EQ(st.common->live, 0);
  EXPECT_EQ(st.verbs->live, 1);  // only the device's imported context, until the device goes
}

TEST(DocaSdkDevice, FailingModifyLeavesTheState) {
  Stubbed st("fail_modify");
  ASSERT_TRUE(st.ok());
  auto dev = kinet::doca::open_emu_device(st.sdk, "mlx5_emu");
  auto pd = dev->alloc_pd();
  auto qp = pd->create_qp({});
  const std::string m = error_of([&] { qp->to_init(kinet::kAccessAll); }, ErrorCode::BadState);
  EXPECT_NE(m.find("DOCA SDK call doca_verbs_qp_modify failed: doca_error_t 18 (DOCA_ERROR_BAD_STATE)"),
            std::string::npos) << m;
  EXPECT_EQ(qp->state(), QpState::Reset);
}

TEST(DocaSdkDevice, RingTheSdkPutElsewhereIsRefused) {
  Stubbed st("shifted_sq");
  ASSERT_TRUE(st.ok());
  auto dev = kinet::doca::open_emu_device(st.sdk, "mlx5_emu");
  auto pd = dev->alloc_pd();
  kinet::QpConfig cfg;
  cfg.sq_depth = 16;
  const std::string m = error_of([&] { pd->create_qp(cfg); }, ErrorCode::System);
  auto* base = static_cast<uint8_t*>(st.common->umem_addr);
  char want[64];
  std::snprintf(want, sizeof want, "reports the send ring at %p, not at %p", static_cast<void*>(base + 64),
                static_cast<void*>(base));
  EXPECT_NE(m.find(want), std::string::npos) << m << "\nwant: " << want;
  EXPECT_EQ(st.common->live, 1);  // the PD's doca_dev; the QP's UMEM and UAR are gone
  EXPECT_EQ(st.verbs->live, 2);   // the device's context and the PD's import; the QP's CQ and QP are gone
}

TEST(DocaSdkDevice, MaxQpWrAtItsEdges) {
  {
    Stubbed st("max_qp_wr_1");  // below the smallest ring: refused
    ASSERT_TRUE(st.ok());
    const std::string m = error_of([&] { kinet::doca::open_emu_device(st.sdk, "mlx5_emu"); }, ErrorCode::System);
    EXPECT_NE(m.find("doca_verbs_device_attr_get_max_qp_wr reports 1"), std::string::npos) << m;
    EXPECT_EQ(st.verbs->live, 0);  // the imported context went with the failed open
  }
  Stubbed st("max_qp_wr_3");  // 3: rounded down to the power of two 2, the smallest ring
  ASSERT_TRUE(st.ok());
  auto dev = kinet::doca::open_emu_device(st.sdk, "mlx5_emu");
  EXPECT_EQ(dev->attr().max_qp_wr, 2u);
}

TEST(DocaSdkDevice, RealSdkIsNotGivenTheSoftwareNic) {
  Stubbed st("not_standin");
  ASSERT_NE(st.sdk, nullptr);
  EXPECT_FALSE(st.sdk->standin());
  const std::string m = error_of([&] { kinet::doca::open_emu_device(st.sdk, "mlx5_emu"); }, ErrorCode::NotSupported);
  EXPECT_EQ(m, "open mlx5_emu in DOCA SDK mode: the DOCA SDK can't drive the software NIC (only kinet's stand-in "
               "SDK can)");
}

// ---- DOCA_SDK_LIB_PATH end to end, each in a fresh process ----------------------
// The variable is read once per process, so each case runs in a child (gtest's
// threadsafe death-test style re-executes the binary). The child captures its
// own stderr, opens devices, and prints one summary line the parent matches:
// which provider opened "mlx5_emu" (twice), and the kinet lines it logged.
void child(const char* dir) {
  setenv("KINET_LOG_LEVEL", "info", 1);
  if (dir) setenv("DOCA_SDK_LIB_PATH", dir, 1);
  else unsetenv("DOCA_SDK_LIB_PATH");
  std::FILE* cap = std::tmpfile();
  const int saved = dup(2);
  dup2(fileno(cap), 2);
  std::string providers;
  try {
    for (int i = 0; i < 2; ++i) {
      auto d = kinet::Device::open("mlx5_emu");
      auto pd = d->alloc_pd();
      auto qp = pd->create_qp({});
      providers += d->attr().provider + (i ? "" : ",");
    }
  } catch (const std::exception& e) {
    providers += std::string("error: ") + e.what();
  }
  std::fflush(stderr);
  dup2(saved, 2);
  std::rewind(cap);
  std::string lines;
  char buf[4096];
  int n = 0;
  while (std::fgets(buf, sizeof buf, cap))
    if (std::strncmp(buf, "kinet: ", 7) == 0) lines += buf, ++n;
  std::fprintf(stderr, "providers=%s lines=%d\n%s", providers.c_str(), n, lines.c_str());
  std::exit(0);
}

class DocaEnv : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(DocaEnv, UnsetMeansOpenPathAndSilence) {
  EXPECT_EXIT(child(nullptr), ::testing::ExitedWithCode(0), "^providers=mlx5,mlx5 lines=0\n$");
}

TEST_F(DocaEnv, CompleteStandInTakesTheSdkPathWithOneLine) {
  const std::string dir = kStubs + "/complete";
  EXPECT_EXIT(child(dir.c_str()), ::testing::ExitedWithCode(0),
              "^providers=doca,doca lines=1\nkinet: info: DOCA SDK mode: control-path objects \\(device, PD, UMEM, "
              "UAR, CQ, QP\\) through the DOCA SDK in " + dir + "\n$");
}

TEST_F(DocaEnv, MissingSymbolFallsBackWithOneLine) {
  const std::string dir = kStubs + "/no_qp_modify";
  EXPECT_EXIT(child(dir.c_str()), ::testing::ExitedWithCode(0),
              "^providers=mlx5,mlx5 lines=1\nkinet: warn: DOCA_SDK_LIB_PATH=" + dir + ": " + dir +
                  "/libdoca_verbs.so lacks doca_verbs_qp_modify [^\n]*; SDK mode off: kinet's open control path "
                  "is used\n$");
}

TEST_F(DocaEnv, PathPointingNowhereFallsBackWithOneLine) {
  EXPECT_EXIT(child("/nonexistent/doca/lib"), ::testing::ExitedWithCode(0),
              "^providers=mlx5,mlx5 lines=1\nkinet: warn: DOCA_SDK_LIB_PATH=/nonexistent/doca/lib: can't be read "
              "\\(errno 2: No such file or directory\\); SDK mode off: kinet's open control path is used\n$");
}

TEST_F(DocaEnv, PathNamingAFileFallsBackWithOneLine) {
  const std::string file = kStubs + "/complete/libdoca_common.so";
  EXPECT_EXIT(child(file.c_str()), ::testing::ExitedWithCode(0),
              "^providers=mlx5,mlx5 lines=1\nkinet: warn: DOCA_SDK_LIB_PATH=" + file + ": not a directory [^\n]*\n$");
}

TEST_F(DocaEnv, LibraryThatIsNotElfFallsBackWithOneLine) {
  const std::string dir = kStubs + "/verbs_not_elf";
  EXPECT_EXIT(child(dir.c_str()), ::testing::ExitedWithCode(0),
              "^providers=mlx5,mlx5 lines=1\nkinet: warn: DOCA_SDK_LIB_PATH=" + dir + ": " + dir +
                  "/libdoca_verbs.so could not be loaded \\([^\n]*invalid ELF header\\); SDK mode off[^\n]*\n$");
}

TEST_F(DocaEnv, RealSdkLeavesTheSoftwareNicOnTheOpenPath) {
  const std::string dir = kStubs + "/not_standin";
  EXPECT_EXIT(child(dir.c_str()), ::testing::ExitedWithCode(0),
              "^providers=mlx5,mlx5 lines=1\nkinet: info: DOCA SDK mode: [^\n]* in " + dir + "\n$");
}

TEST_F(DocaEnv, SdkErrorIsThrownNotAFallback) {
  const std::string dir = kStubs + "/fail_qp_create";
  EXPECT_EXIT(child(dir.c_str()), ::testing::ExitedWithCode(0),
              "^providers=error: mlx5_emu[0-9]+: create_qp: DOCA SDK call doca_verbs_qp_create failed: "
              "doca_error_t 21 \\(DOCA_ERROR_DRIVER: DOCA Driver call failure\\) lines=1\n"
              "kinet: info: DOCA SDK mode: [^\n]*\n$");
}
}  // namespace
