// kinet-perf — endpoint setup.
#include "testbed.hpp"

#include <cstdio>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#include "runner.hpp"

namespace kinet::perf {

namespace {

class HostMemory final : public MemoryOps {
 public:
  MemoryKind kind() const override { return MemoryKind::Host; }
  RingPlacement rings() const override { return RingPlacement::Host; }
  void* alloc(size_t bytes) override {
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(4096, rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void free(void* p) noexcept override { std::free(p); }
  void copy_to(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void copy_from(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void fill(void* dst, uint8_t byte, size_t n) override { std::memset(dst, byte, n); }
};

uint32_t next_pow2(uint64_t x) {
  uint64_t p = 1;
  while (p < x) p <<= 1;
  return static_cast<uint32_t>(p);
}

std::vector<void*>& abandoned_buffers() {
  static auto* v = new std::vector<void*>;
  return *v;
}

}  // namespace

std::unique_ptr<MemoryOps> make_host_memory() { return std::make_unique<HostMemory>(); }

Testbed::Testbed(const TestbedConfig& cfg, std::unique_ptr<MemoryOps> mem) : cfg_(cfg), mem_(std::move(mem)) {
  constexpr size_t kWordsBytes = 64;
  for (Endpoint& e : ep_) {
    e.dev = Device::open(cfg_.device);
    e.pd = e.dev->alloc_pd();
  }
  // A message larger than the device's max_msg is split into several WQEs;
  // size the ring so that tx_depth messages fit.
  const uint32_t max_msg = std::min(ep_[0].dev->attr().max_msg, ep_[1].dev->attr().max_msg);
  const uint64_t wqes_per_msg = max_msg ? (cfg_.max_size + max_msg - 1) / max_msg : 1;
  const uint32_t max_wr = std::min(ep_[0].dev->attr().max_qp_wr, ep_[1].dev->attr().max_qp_wr);
  sq_depth_ = next_pow2(std::max<uint64_t>(16, uint64_t(cfg_.tx_depth) * std::max<uint64_t>(1, wqes_per_msg)));
  if (max_wr && sq_depth_ > max_wr) sq_depth_ = max_wr;  // the verbs then hold back posts until slots free up

  for (int side = 0; side < 2; ++side) {
    Endpoint& e = ep_[side];
    mem_->enter_side(side);
    e.nqp = cfg_.qps;
    e.slot = (std::max<size_t>(cfg_.max_size, 8) + 63) / 64 * 64;
    e.bytes = 2 * size_t(e.nqp) * e.slot + kWordsBytes;
    e.base = static_cast<uint8_t*>(mem_->alloc(e.bytes));
    mem_->fill(e.base, 0, e.bytes);
    e.mr = e.pd->reg_mr(e.base, e.bytes, kAccessAll);
    QpConfig qc;
    qc.sq_depth = sq_depth_;
    qc.rings = mem_->rings();
    qc.posters = mem_->posters();
    qc.timeout_ms = cfg_.timeout_ms;
    for (uint32_t q = 0; q < e.nqp; ++q) e.qps.push_back(e.pd->create_qp(qc));
  }
  // Exchange connection info as bytes, as separate processes would.
  for (uint32_t q = 0; q < cfg_.qps; ++q) {
    const std::vector<uint8_t> blob_c = ep_[0].qps[q]->info().serialize();
    const std::vector<uint8_t> blob_s = ep_[1].qps[q]->info().serialize();
    ep_[0].qps[q]->connect(QpInfo::deserialize(blob_s.data(), blob_s.size()));
    ep_[1].qps[q]->connect(QpInfo::deserialize(blob_c.data(), blob_c.size()));
  }
}

Testbed::~Testbed() {
  // Unwinding after a failure (timeout, error CQE): a WQE may still be
  // executing. The emu engine copies outside any lock, and destroying a QP or
  // deregistering an MR does not wait for a copy in flight, so freeing the
  // buffers now could let the engine write into freed memory. Leak them: the
  // process is about to exit with an error anyway.
  const bool unwinding = std::uncaught_exceptions() > 0;
  for (Endpoint& e : ep_) {
    e.qps.clear();
    e.mr.reset();
    if (e.base && !unwinding) mem_->free(e.base);
    else if (e.base) abandoned_buffers().push_back(e.base);  // still reachable: not reported as a leak
    e.base = nullptr;
    e.pd.reset();
    e.dev.reset();
  }
}

uint64_t Testbed::timeout_ns() const {
  const uint64_t ms = cfg_.timeout_ms ? cfg_.timeout_ms : default_timeout_ms();
  return ms * 1000000ull;
}

void fill_random(MemoryOps& mem, std::mt19937_64& rng, std::vector<uint8_t>& stage, uint8_t* dst, size_t n) {
  stage.resize(n);
  size_t i = 0;
  while (i < n) {
    uint64_t r = rng();
    for (int k = 0; k < 8 && i < n; ++k, r >>= 8) stage[i++] = static_cast<uint8_t>(1 + (r & 0xff) % 255);
  }
  mem.copy_to(dst, stage.data(), n);
}

void verify_bytes(MemoryOps& mem, const uint8_t* want, const uint8_t* got, size_t n, const std::string& what) {
  std::vector<uint8_t> a(n), b(n);
  mem.copy_from(a.data(), want, n);
  mem.copy_from(b.data(), got, n);
  if (std::memcmp(a.data(), b.data(), n) == 0) return;
  size_t off = 0;
  while (a[off] == b[off]) ++off;
  size_t bad = 0;
  for (size_t k = off; k < n; ++k) bad += a[k] != b[k];
  char m[160];
  std::snprintf(m, sizeof m, ": data mismatch at offset %zu of %zu (expected 0x%02x, found 0x%02x; %zu bytes differ)",
                off, n, a[off], b[off], bad);
  throw PerfError(what + m);
}

}  // namespace kinet::perf
