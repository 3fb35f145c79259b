// SDK mode's loader: the fallback decision as a pure function (every branch,
// exact line), then load() against stand-in SDK directories built by the
// test suite (tests/doca_stub), and the error text of an SDK failure.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "providers/doca/sdk.hpp"
#include "../doca_stub/stub_dir.hpp"

namespace {
using kinet::ErrorCode;
using kinet::doca::Decision;
using kinet::doca::decide;
using kinet::doca::Mode;
using kinet::doca::Probe;
using kinet::doca::Sdk;

using kinet::test::kStubs;
const std::string kOff = "; SDK mode off: kinet's open control path is used";

TEST(DocaDecide, UnsetMeansOpenAndSilent) {
  const Decision d = decide(Probe{});
  EXPECT_EQ(d.mode, Mode::Open);
  EXPECT_FALSE(d.warn);
  EXPECT_EQ(d.line, "");
}

TEST(DocaDecide, UnreadablePathNamesErrno) {
  Probe p;
  p.dir = "/opt/doca";
  p.dir_errno = EACCES;
  const Decision d = decide(p);
  EXPECT_EQ(d.mode, Mode::Open);
  EXPECT_TRUE(d.warn);
  EXPECT_EQ(d.line, "DOCA_SDK_LIB_PATH=/opt/doca: can't be read (errno 13: Permission denied)" + kOff);
}

TEST(DocaDecide, NotADirectory) {
  Probe p;
  p.dir = "/opt/doca/libdoca_common.so";
  p.is_dir = false;
  const Decision d = decide(p);
  EXPECT_EQ(d.mode, Mode::Open);
  EXPECT_TRUE(d.warn);
  EXPECT_EQ(d.line, "DOCA_SDK_LIB_PATH=/opt/doca/libdoca_common.so: not a directory (it must name the directory "
                    "holding libdoca_common.so, libdoca_verbs.so and libdoca_gpunetio.so)" + kOff);
}

TEST(DocaDecide, LibraryThatDoesNotLoadIsNamedWithDlerror) {
  Probe p;
  p.dir = "/d";
  p.failed_lib = 2;
  p.dl_error = "boom";
  Decision d = decide(p);
  EXPECT_EQ(d.mode, Mode::Open);
  EXPECT_EQ(d.line, "DOCA_SDK_LIB_PATH=/d: /d/libdoca_gpunetio.so could not be loaded (boom)" + kOff);
  p.failed_lib = 0;
  p.dl_error.clear();
  d = decide(p);
  EXPECT_EQ(d.line, "DOCA_SDK_LIB_PATH=/d: /d/libdoca_common.so could not be loaded (no reason given)" + kOff);
}

TEST(DocaDecide, MissingSymbolIsNamedWithItsLibrary) {
  Probe p;
  p.dir = "/d";
  p.missing_symbol = "doca_verbs_qp_create";
  p.missing_in = 1;
  const Decision d = decide(p);
  EXPECT_EQ(d.mode, Mode::Open);
  EXPECT_TRUE(d.warn);
  EXPECT_EQ(d.line, "DOCA_SDK_LIB_PATH=/d: /d/libdoca_verbs.so lacks doca_verbs_qp_create (an SDK older or newer "
                    "than kinet knows?)" + kOff);
}

TEST(DocaDecide, EverythingFoundMeansSdkMode) {
  Probe p;
  p.dir = "/d";
  const Decision d = decide(p);
  EXPECT_EQ(d.mode, Mode::Sdk);
  EXPECT_FALSE(d.warn);
  EXPECT_EQ(d.line, "DOCA SDK mode: control-path objects (device, PD, UMEM, UAR, CQ, QP) through the DOCA SDK in /d");
}

// ---- load() against the stand-in directories ----------------------------------

TEST(DocaLoad, CompleteStandInLoads) {
  const Sdk::Loaded l = Sdk::load(kStubs + "/complete");
  ASSERT_NE(l.sdk, nullptr) << l.decision.line;
  EXPECT_EQ(l.decision.mode, Mode::Sdk);
  EXPECT_TRUE(l.sdk->standin());
  EXPECT_NE(l.sdk->fn().qp_modify, nullptr);
  EXPECT_NE(l.sdk->fn().error_get_name, nullptr);
  EXPECT_EQ(l.sdk->dir(), kStubs + "/complete");
}

// The SDK's libraries name their dependencies (libdoca_verbs.so needs
// libdoca_common.so.N); loaded RTLD_LOCAL in dependency order from the
// directory, they resolve without LD_LIBRARY_PATH or RUNPATH.
TEST(DocaLoad, LibrariesThatNameTheirDependencyLoadInOrder) {
  const std::string dir = kStubs + "/linked";
  {
    // Alone, libdoca_verbs.so can't find its dependency: the order is what makes it load.
    void* h = dlopen((dir + "/libdoca_verbs.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    const char* e = h ? nullptr : dlerror();
    if (h) dlclose(h);
    ASSERT_EQ(h, nullptr) << "libdoca_common.so.2 is reachable without the loader's help (LD_LIBRARY_PATH?)";
    EXPECT_NE(std::string(e).find("libdoca_common.so.2"), std::string::npos) << e;
  }
  const Sdk::Loaded l = Sdk::load(dir);
  ASSERT_NE(l.sdk, nullptr) << l.decision.line;
  // A call that crosses from libdoca_verbs into libdoca_common works.
  int ctx = 0;
  void* vctx = nullptr;
  EXPECT_EQ(l.sdk->fn().verbs_context_import(reinterpret_cast<ibv_context*>(&ctx), 0, &vctx), 0);
  ASSERT_NE(vctx, nullptr);
  EXPECT_EQ(l.sdk->fn().verbs_context_destroy(vctx), 0);
}

TEST(DocaLoad, MissingSymbolFallsBackNamingIt) {
  const std::string dir = kStubs + "/no_qp_modify";
  const Sdk::Loaded l = Sdk::load(dir);
  EXPECT_EQ(l.sdk, nullptr);
  EXPECT_EQ(l.decision.mode, Mode::Open);
  EXPECT_EQ(l.decision.line, "DOCA_SDK_LIB_PATH=" + dir + ": " + dir +
                                 "/libdoca_verbs.so lacks doca_verbs_qp_modify (an SDK older or newer than kinet "
                                 "knows?)" + kOff);
}

TEST(DocaLoad, OptionalSymbolsMayBeMissing) {
  // No doca_error_get_name / _descr: still SDK mode (errors then show the number only).
  const Sdk::Loaded l = Sdk::load(kStubs + "/fail_open_no_name");
  ASSERT_NE(l.sdk, nullptr) << l.decision.line;
  EXPECT_EQ(l.sdk->fn().error_get_name, nullptr);
  EXPECT_EQ(l.sdk->fn().error_get_descr, nullptr);
}

TEST(DocaLoad, MissingLibraryFallsBackNamingTheFile) {
  const std::string dir = kStubs + "/no_gpunetio";
  const Sdk::Loaded l = Sdk::load(dir);
  EXPECT_EQ(l.sdk, nullptr);
  const std::string lead = "DOCA_SDK_LIB_PATH=" + dir + ": " + dir + "/libdoca_gpunetio.so could not be loaded (";
  EXPECT_EQ(l.decision.line.substr(0, lead.size()), lead) << l.decision.line;
  EXPECT_NE(l.decision.line.find("No such file or directory)" + kOff), std::string::npos) << l.decision.line;
}

TEST(DocaLoad, LibraryThatIsNotElfFallsBack) {
  const std::string dir = kStubs + "/verbs_not_elf";
  const Sdk::Loaded l = Sdk::load(dir);
  EXPECT_EQ(l.sdk, nullptr);
  const std::string lead = "DOCA_SDK_LIB_PATH=" + dir + ": " + dir + "/libdoca_verbs.so could not be loaded (";
  EXPECT_EQ(l.decision.line.substr(0, lead.size()), lead) << l.decision.line;
  EXPECT_NE(l.decision.line.find("invalid ELF header"), std::string::npos) << l.decision.line;
}

TEST(DocaLoad, PathPointingNowhere) {
  const std::string dir = kStubs + "/no_such_directory";
  const Sdk::Loaded l = Sdk::load(dir);
  EXPECT_EQ(l.sdk, nullptr);
  EXPECT_EQ(l.decision.line,
            "DOCA_SDK_LIB_PATH=" + dir + ": can't be read (errno 2: No such file or directory)" + kOff);
}

TEST(DocaLoad, PathNamingAFile) {
  const std::string file = kStubs + "/complete/libdoca_common.so";
  const Sdk::Loaded l = Sdk::load(file);
  EXPECT_EQ(l.sdk, nullptr);
  EXPECT_EQ(l.decision.line, "DOCA_SDK_LIB_PATH=" + file +
                                 ": not a directory (it must name the directory holding libdoca_common.so, "
                                 "libdoca_verbs.so and libdoca_gpunetio.so)" + kOff);
}

TEST(DocaLoad, EmptyPathIsUnset) {
  const Sdk::Loaded l = Sdk::load("");
  EXPECT_EQ(l.sdk, nullptr);
  EXPECT_EQ(l.decision.mode, Mode::Open);
  EXPECT_EQ(l.decision.line, "");
}

// ---- the error text of an SDK failure -------------------------------------------

TEST(DocaErrors, CodesMapToKinetErrorCodes) {
  using kinet::doca::error_code_of;
  EXPECT_EQ(error_code_of(6), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of(4), ErrorCode::NotSupported);
  EXPECT_EQ(error_code_of(2), ErrorCode::NotSupported);
  EXPECT_EQ(error_code_of(7), ErrorCode::ResourceExhausted);
  EXPECT_EQ(error_code_of(24), ErrorCode::ResourceExhausted);
  EXPECT_EQ(error_code_of(18), ErrorCode::BadState);
  EXPECT_EQ(error_code_of(21), ErrorCode::System);
  EXPECT_EQ(error_code_of(1), ErrorCode::System);
  EXPECT_EQ(error_code_of(-1), ErrorCode::System);
}

TEST(DocaErrors, CheckNamesCallCodeAndName) {
  const Sdk::Loaded l = Sdk::load(kStubs + "/complete");
  ASSERT_NE(l.sdk, nullptr);
  EXPECT_NO_THROW(l.sdk->check(0, "doca_verbs_qp_create", "dev"));
  try {
    l.sdk->check(21, "doca_verbs_qp_create", "mlx5_0", " (depth 64)");
    FAIL() << "no throw";
  } catch (const kinet::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::System);
    EXPECT_STREQ(e.what(), "mlx5_0: DOCA SDK call doca_verbs_qp_create failed: doca_error_t 21 (DOCA_ERROR_DRIVER: "
                           "DOCA Driver call failure) (depth 64)");
  }
  // A value the SDK has no name for, and one without a description.
  EXPECT_EQ(l.sdk->describe(99, "doca_uar_create"),
            "DOCA SDK call doca_uar_create failed: doca_error_t 99 (no name for this value)");
  EXPECT_EQ(l.sdk->describe(6, "doca_uar_create"),
            "DOCA SDK call doca_uar_create failed: doca_error_t 6 (DOCA_ERROR_INVALID_VALUE)");
}

TEST(DocaErrors, WithoutErrorNameTheNumberStands) {
  const Sdk::Loaded l = Sdk::load(kStubs + "/fail_open_no_name");
  ASSERT_NE(l.sdk, nullptr);
  EXPECT_EQ(l.sdk->describe(6, "doca_dev_close"),
            "DOCA SDK call doca_dev_close failed: doca_error_t 6 (no doca_error_get_name in this SDK)");
}
}  // namespace
