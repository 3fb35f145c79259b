// The doorbell-mode decision (core/doorbell.hpp: a pure function of the
// requested mode, $KINET_DOORBELL_MODE, the provider's capabilities and
// whether the UAR maps for the posters) over every combination of its
// inputs, its exact messages, and the CPU-assisted doorbell thread alone.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "core/doorbell.hpp"
#include "kinet/mlx5/wire.hpp"

namespace {
using kinet::Doorbell;
using kinet::Error;
using kinet::ErrorCode;
using kinet::dev::DoorbellMode;
namespace db = kinet::doorbell;

bool has(const std::string& t, const std::string& p) { return t.find(p) != std::string::npos; }

struct Outcome {
  std::optional<DoorbellMode> mode;  // empty: threw
  ErrorCode code = ErrorCode::System;
  std::string text;                  // note or error message
};
Outcome run(Doorbell req, const char* env, db::Caps caps, db::UarReach reach) {
  try {
    db::Decision d = db::decide("dev0: create_qp", req, env, caps, reach);
    return {d.mode, ErrorCode::System, d.note};
  } catch (const Error& e) {
    return {std::nullopt, e.code(), e.what()};
  }
}

// The rules, restated independently of the implementation.
Outcome spec(Doorbell req, const char* env, db::Caps caps, db::UarReach reach) {
  std::optional<Doorbell> from_env;
  const std::string e = env ? env : "";
  if (e.empty() || e == "auto") from_env = Doorbell::Auto;
  else if (e == "uar") from_env = Doorbell::Uar;
  else if (e == "bf") from_env = Doorbell::BlueFlame;
  else if (e == "cpu") from_env = Doorbell::CpuAssisted;
  if (!from_env) return {std::nullopt, ErrorCode::InvalidArgument, {}};
  const Doorbell want = req != Doorbell::Auto ? req : *from_env;
  const bool reach_ok = !reach.gpu_posters || reach.gpu_mappable;
  switch (want) {
    case Doorbell::Uar:
      if (caps.uar && reach_ok) return {DoorbellMode::Uar, ErrorCode::System, {}};
      return {std::nullopt, ErrorCode::NotSupported, {}};
    case Doorbell::BlueFlame:
      if (caps.blueflame && reach_ok) return {DoorbellMode::BlueFlame, ErrorCode::System, {}};
      return {std::nullopt, ErrorCode::NotSupported, {}};
    case Doorbell::CpuAssisted:
      if (caps.cpu_assisted) return {DoorbellMode::CpuAssisted, ErrorCode::System, {}};
      return {std::nullopt, ErrorCode::NotSupported, {}};
    case Doorbell::Auto:
      if (caps.uar && reach_ok) return {DoorbellMode::Uar, ErrorCode::System, {}};
      if (caps.cpu_assisted) return {DoorbellMode::CpuAssisted, ErrorCode::System, "note"};
      return {std::nullopt, ErrorCode::NotSupported, {}};
  }
  return {std::nullopt, ErrorCode::System, {}};
}

TEST(DoorbellDecide, EveryCombination) {
  const Doorbell reqs[] = {Doorbell::Auto, Doorbell::Uar, Doorbell::BlueFlame, Doorbell::CpuAssisted};
  const char* envs[] = {nullptr, "", "auto", "uar", "bf", "cpu", "CPU", "gpu", "uar "};
  int n = 0;
  for (Doorbell r : reqs)
    for (const char* e : envs)
      for (int c = 0; c < 8; ++c)
        for (int m = 0; m < 3; ++m) {
          const db::Caps caps{(c & 1) != 0, (c & 2) != 0, (c & 4) != 0};
          db::UarReach reach;
          reach.gpu_posters = m != 0;
          reach.gpu_mappable = m != 2;
          reach.why_not = m == 2 ? "cudaHostRegister failed" : "";
          const Outcome got = run(r, e, caps, reach), want = spec(r, e, caps, reach);
          SCOPED_TRACE(::testing::Message() << "req " << int(r) << " env " << (e ? e : "(null)") << " caps " << c
                                            << " reach " << m << ": " << got.text);
          ASSERT_EQ(got.mode.has_value(), want.mode.has_value());
          if (want.mode) {
            EXPECT_EQ(*got.mode, *want.mode);
            EXPECT_EQ(got.text.empty(), want.text.empty()) << "a note exactly when Auto fell back to cpu";
          } else {
            EXPECT_EQ(got.code, want.code);
          }
          ++n;
        }
  EXPECT_EQ(n, 4 * 9 * 8 * 3);
}

const db::Caps kAll{true, true, true};
db::UarReach unmapped() {
  db::UarReach r;
  r.gpu_posters = true;
  r.gpu_mappable = false;
  r.why_not = "cudaHostRegister(IoMemory) failed: error 800";
  return r;
}

TEST(DoorbellDecide, AutoFallsBackToCpuWithOneNoteSayingWhy) {
  const Outcome o = run(Doorbell::Auto, nullptr, kAll, unmapped());
  ASSERT_TRUE(o.mode);
  EXPECT_EQ(*o.mode, DoorbellMode::CpuAssisted);
  EXPECT_EQ(o.text, "dev0: create_qp: doorbell mode cpu (CPU-assisted: a CPU thread rings for the GPU; slower than "
                    "uar) because the doorbell page (UAR) can't be mapped into the GPU: cudaHostRegister(IoMemory) "
                    "failed: error 800");
  EXPECT_EQ(o.text.find('\n'), std::string::npos) << "one line";
}

TEST(DoorbellDecide, HostPostersNeedNoMapping) {
  db::UarReach r = unmapped();
  r.gpu_posters = false;
  const Outcome o = run(Doorbell::Auto, nullptr, kAll, r);
  ASSERT_TRUE(o.mode);
  EXPECT_EQ(*o.mode, DoorbellMode::Uar);
  EXPECT_EQ(o.text, "");
}

TEST(DoorbellDecide, ExplicitUarThatCantMapNamesWhoAskedAndWhy) {
  Outcome o = run(Doorbell::Uar, nullptr, kAll, unmapped());
  EXPECT_EQ(o.code, ErrorCode::NotSupported);
  EXPECT_EQ(o.text, "dev0: create_qp: doorbell mode uar (QpConfig::doorbell = uar): the doorbell page (UAR) can't be "
                    "mapped into the GPU: cudaHostRegister(IoMemory) failed: error 800; use cpu "
                    "(KINET_DOORBELL_MODE=cpu) or fix the mapping");
  o = run(Doorbell::Auto, "bf", kAll, unmapped());
  EXPECT_EQ(o.code, ErrorCode::NotSupported);
  EXPECT_TRUE(has(o.text, "doorbell mode bf (KINET_DOORBELL_MODE=bf): the doorbell page (UAR) can't be mapped"))
      << o.text;
}

TEST(DoorbellDecide, MissingCapabilitiesAreNamed) {
  EXPECT_TRUE(has(run(Doorbell::BlueFlame, nullptr, {true, false, true}, {}).text,
                  "doorbell mode bf (QpConfig::doorbell = bf): the provider has no BlueFlame window"));
  EXPECT_TRUE(has(run(Doorbell::Auto, "cpu", {true, true, false}, {}).text,
                  "doorbell mode cpu (KINET_DOORBELL_MODE=cpu): the provider has no CPU doorbell thread"));
  EXPECT_TRUE(has(run(Doorbell::Auto, nullptr, {true, true, false}, unmapped()).text,
                  "no doorbell mode works for this QP: the doorbell page (UAR) can't be mapped into the GPU"));
}

TEST(DoorbellDecide, ConfigWinsButABadEnvironmentIsStillAnError) {
  Outcome o = run(Doorbell::Uar, "cpu", kAll, {});
  ASSERT_TRUE(o.mode);
  EXPECT_EQ(*o.mode, DoorbellMode::Uar);
  o = run(Doorbell::Uar, "blueflame", kAll, {});
  EXPECT_EQ(o.code, ErrorCode::InvalidArgument);
  EXPECT_EQ(o.text, "KINET_DOORBELL_MODE=blueflame is not one of auto, uar, bf, cpu");
}

TEST(DoorbellDecide, Names) {
  EXPECT_STREQ(db::mode_name(DoorbellMode::Uar), "uar");
  EXPECT_STREQ(db::mode_name(DoorbellMode::BlueFlame), "bf");
  EXPECT_STREQ(db::mode_name(DoorbellMode::CpuAssisted), "cpu");
  EXPECT_EQ(db::parse_env("cpu"), Doorbell::CpuAssisted);
  EXPECT_EQ(db::parse_env(nullptr), Doorbell::Auto);
}

TEST(LocalErrorText, PlainAndAbi) {
  EXPECT_EQ(db::local_error_text(0, 0), "");
  EXPECT_EQ(db::local_error_text(uint8_t(kinet::Status::TimeoutCompletion), 0),
            "device verbs: timed out waiting for a completion (status 12)");
  EXPECT_TRUE(has(db::local_error_text(uint8_t(kinet::Status::InvalidArgument), 0x10058),
                  "the QpHandle's ABI word is 0x10058 (version 1, 88 bytes)"));
}

// ---- the CPU doorbell thread alone -------------------------------------------------

bool eventually(const std::function<bool()>& p) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    if (p()) return true;
    std::this_thread::yield();
  }
  return p();
}
uint64_t load(const uint64_t* p) { return std::atomic_ref<const uint64_t>(*p).load(std::memory_order_acquire); }
void set_record(uint32_t* rec, uint32_t pi) {
  std::atomic_ref<uint32_t>(rec[kinet::mlx5::kSendDbrIndex]).store(__builtin_bswap32(pi), std::memory_order_release);
}

TEST(CpuDoorbell, RingsWhatTheRecordSaysAndStopsOnRemove) {
  db::CpuDoorbell t("dev0");
  alignas(8) uint32_t rec[2] = {0, 0};
  alignas(8) uint64_t word = 0;
  const uint32_t qpn_be8 = __builtin_bswap32(0x1234u << 8);
  set_record(rec, 3);  // before add(): counts as rung already
  const uint64_t id = t.add(rec, &word, qpn_be8);
  EXPECT_EQ(t.rings(), 0u);
  set_record(rec, 5);
  ASSERT_TRUE(eventually([&] { return load(&word) == kinet::mlx5::doorbell_word(5, qpn_be8); }));
  EXPECT_EQ(t.rings(), 1u);
  set_record(rec, 70000 & 0xffff);  // the record's 16 bits
  ASSERT_TRUE(eventually([&] { return load(&word) == kinet::mlx5::doorbell_word(70000, qpn_be8); }));
  t.remove(id);
  const uint64_t n = t.rings();
  std::atomic_ref<uint64_t>(word).store(0);
  set_record(rec, 9);
  // No ring can come after remove() returned: rings() and the word stay.
  for (int i = 0; i < 1000; ++i) std::this_thread::yield();
  EXPECT_EQ(t.rings(), n);
  EXPECT_EQ(load(&word), 0u);
  t.remove(id);  // unknown now: ignored
}

TEST(CpuDoorbell, ManyQueues) {
  db::CpuDoorbell t("dev0");
  constexpr int kQ = 8;
  alignas(8) uint32_t rec[kQ][2] = {};
  alignas(8) uint64_t word[kQ] = {};
  uint64_t ids[kQ];
  for (int i = 0; i < kQ; ++i) ids[i] = t.add(rec[i], &word[i], __builtin_bswap32(uint32_t(i + 1) << 8));
  for (uint32_t round = 1; round <= 50; ++round)
    for (int i = 0; i < kQ; ++i) set_record(rec[i], round * (i + 1));
  for (int i = 0; i < kQ; ++i)
    EXPECT_TRUE(eventually([&] {
      return load(&word[i]) == kinet::mlx5::doorbell_word(50 * (i + 1), __builtin_bswap32(uint32_t(i + 1) << 8));
    })) << i;
  for (int i = 0; i < kQ; ++i) t.remove(ids[i]);
}

}  // namespace
