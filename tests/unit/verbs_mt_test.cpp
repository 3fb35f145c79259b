// Device verbs posted by many host threads into one ring (Sharing::Cta and
// Sharing::Gpu) and by one thread per ring (Sharing::Exclusive), with a test
// thread playing the NIC: it reads the doorbell record with acquire, decodes
// every announced WQE and writes CQEs where asked. Checks the multi-producer
// protocol (reserve -> prepare -> publish in order -> doorbell) without the
// library: every WQE seen exactly once, each thread's WQEs in its own order,
// nothing announced before it was written, every ticket completes.
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fake_verbs.hpp"

namespace {

// The tag of a WQE: which thread posted it and its sequence number, carried
// in the remote address; the byte count is a checksum of both.
uint64_t tag(uint32_t thread, uint64_t seq) { return (uint64_t{thread} << 40) | seq; }
uint32_t tag_len(uint64_t t) { return static_cast<uint32_t>((t * 0x9e3779b97f4a7c15ull) >> 44) + 1; }

// Plays the NIC for a set of rings.
class NicThread {
 public:
  NicThread(std::vector<FakeRing*> rings, uint32_t threads_per_ring)
      : rings_(std::move(rings)), seen_(rings_.size(), 0),
        next_seq_(rings_.size(), std::vector<uint64_t>(threads_per_ring, 0)) {
    th_ = std::thread([this] { run(); });
  }
  ~NicThread() { stop(); }
  void stop() {
    stop_.store(true);
    if (th_.joinable()) th_.join();
  }
  std::vector<std::string> errors() {
    std::lock_guard<std::mutex> g(mu_);
    return errors_;
  }
  uint64_t seq_of(size_t ring, uint32_t thread) const { return next_seq_[ring][thread]; }
  uint64_t seen(size_t ring) const { return seen_[ring]; }

 private:
  void fail(std::string s) {
    std::lock_guard<std::mutex> g(mu_);
    if (errors_.size() < 20) errors_.push_back(std::move(s));
  }
  void run() {
    while (!stop_.load()) {
      bool any = false;
      for (size_t k = 0; k < rings_.size(); ++k) any |= step(k);
      if (!any) std::this_thread::yield();
    }
    for (size_t k = 0; k < rings_.size(); ++k) step(k);
  }
  bool step(size_t k) {
    FakeRing& r = *rings_[k];
    const uint16_t pi = static_cast<uint16_t>(
        be32toh(std::atomic_ref<uint32_t>(r.dbrec[m::kSendDbrIndex]).load(std::memory_order_acquire)));
    bool any = false;
    while (static_cast<uint16_t>(seen_[k]) != pi) {
      const uint64_t idx = seen_[k];
      uint8_t bb[64];
      std::memcpy(bb, r.slot(idx), 64);
      m::CtrlSeg c;
      std::memcpy(&c, bb, 16);
      const uint32_t oi = be32toh(c.opmod_idx_opcode);
      const uint8_t op = oi & 0xff;
      if (((oi >> 8) & 0xffff) != (idx & 0xffff)) fail("ring " + std::to_string(k) + " WQE " + std::to_string(idx) +
                                                     ": index field " + std::to_string((oi >> 8) & 0xffff));
      if (op == m::kOpRdmaWrite) {
        m::RaddrSeg ra;
        m::DataSeg d;
        std::memcpy(&ra, bb + 16, 16);
        std::memcpy(&d, bb + 32, 16);
        const uint64_t t = be64toh(ra.raddr);
        const uint32_t th = static_cast<uint32_t>(t >> 40);
        const uint64_t seq = t & ((uint64_t{1} << 40) - 1);
        if (be32toh(d.byte_count) != tag_len(t)) {
          fail("ring " + std::to_string(k) + " WQE " + std::to_string(idx) + ": torn or stale WQE (tag " +
               std::to_string(t) + ")");
        } else if (th >= next_seq_[k].size()) {
          fail("ring " + std::to_string(k) + " WQE " + std::to_string(idx) + ": bad thread " + std::to_string(th));
        } else if (uint64_t payload; std::memcpy(&payload, reinterpret_cast<const void*>(be64toh(d.addr)), 8),
                   payload != t) {
          // The NIC "DMA-reads" the source buffer the poster wrote before posting:
          // the doorbell record must order that write before this read.
          fail("ring " + std::to_string(k) + " WQE " + std::to_string(idx) + ": source buffer holds " +
               std::to_string(payload) + ", expected the tag " + std::to_string(t));
          ++next_seq_[k][th];
        } else if (seq != next_seq_[k][th]) {
          fail("ring " + std::to_string(k) + " thread " + std::to_string(th) + ": got seq " + std::to_string(seq) +
               ", expected " + std::to_string(next_seq_[k][th]) + " (lost, duplicated or reordered WQE)");
          next_seq_[k][th] = seq + 1;
        } else {
          ++next_seq_[k][th];
        }
      } else if (op != m::kOpNop) {
        fail("ring " + std::to_string(k) + " WQE " + std::to_string(idx) + ": unexpected opcode " + std::to_string(op));
      }
      if (c.fm_ce_se & m::kCtrlCqUpdate) r.complete(idx);
      ++seen_[k];
      any = true;
    }
    return any;
  }

  std::vector<FakeRing*> rings_;
  std::vector<uint64_t> seen_;
  std::vector<std::vector<uint64_t>> next_seq_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::string> errors_;
  std::thread th_;
};

// One poster: n tagged writes with a mix of flags; waits now and then. The
// source of write seq is word seq of `src`, which holds the tag (written by
// the poster right before posting, read by the NIC thread).
template <Sharing S>
std::string post_tagged(FakeRing& r, uint32_t thread, uint64_t n, uint64_t seed, uint64_t* src_words) {
  std::mt19937_64 rng(seed);
  for (uint64_t seq = 0; seq < n; ++seq) {
    const uint64_t t = tag(thread, seq);
    uint64_t* src = src_words + seq;
    *src = t;
    const uint32_t roll = static_cast<uint32_t>(rng() % 16);
    uint32_t flags = 0;
    if (roll < 3) flags |= dev::kSignal;
    if (roll >= 3 && roll < 8) flags |= dev::kNoDoorbell;
    Ticket tk;
    Status st;
    if (roll == 15) {
      // The low-level steps, by hand.
      uint64_t first;
      st = dev::reserve<S>(r.h, 1, &first);
      if (st == Status::Ok) {
        dev::prepare_write<S>(r.h, first, src, kinet::Lkey{1}, t, kinet::Rkey{2}, tag_len(t), dev::kSignal);
        st = dev::publish<S>(r.h, first, 1);
        if (st == Status::Ok) st = dev::ring_doorbell<S>(r.h, first + 1);
        tk.idx = first + 1;
      }
    } else {
      // put() with max_msg >= tag_len: exactly one WQE.
      st = dev::put<S>(r.h, src, kinet::Lkey{1}, t, kinet::Rkey{2}, tag_len(t), flags, &tk);
    }
    if (st != Status::Ok) return "thread " + std::to_string(thread) + " seq " + std::to_string(seq) + ": post " +
                                 kinet::status_string(st);
    if (roll == 1 || roll == 15 || seq + 1 == n) {
      st = dev::wait<S>(r.h, tk);
      if (st != Status::Ok)
        return "thread " + std::to_string(thread) + " seq " + std::to_string(seq) + ": wait " + kinet::status_string(st);
    }
  }
  return {};
}

template <Sharing S> void run_shared_ring(uint32_t threads) {
  KINET_TEST_RNG(rng);
  const uint64_t n = kinet::test::scaled(300, 40);  // per thread; the ring has 32 slots
  FakeRing r(5, 5, 8, /*timeout_ns=*/20'000'000'000ull);
  NicThread nic({&r}, threads);
  std::vector<std::string> errs(threads);
  std::vector<std::thread> ths;
  std::vector<uint64_t> seeds;
  for (uint32_t t = 0; t < threads; ++t) seeds.push_back(rng());
  std::vector<std::vector<uint64_t>> words(threads, std::vector<uint64_t>(n));
  for (uint32_t t = 0; t < threads; ++t)
    ths.emplace_back([&, t] { errs[t] = post_tagged<S>(r, t, n, seeds[t], words[t].data()); });
  for (auto& th : ths) th.join();
  EXPECT_EQ(dev::quiet<S>(r.h), Status::Ok);
  nic.stop();
  for (auto& e : errs) EXPECT_EQ(e, "");
  for (auto& e : nic.errors()) ADD_FAILURE() << e;
  for (uint32_t t = 0; t < threads; ++t) EXPECT_EQ(nic.seq_of(0, t), n) << "thread " << t;
  EXPECT_EQ(r.state.ready, r.state.reserved);
  EXPECT_EQ(nic.seen(0), r.state.reserved);
  EXPECT_GT(r.state.reserved, 32u * 8) << "the test must lap the ring many times";
}

TEST(VerbsMultiThread, CtaModeEightThreadsOneRing) { run_shared_ring<Sharing::Cta>(kinet::test::test_threads(8)); }
TEST(VerbsMultiThread, GpuModeEightThreadsOneRing) { run_shared_ring<Sharing::Gpu>(kinet::test::test_threads(8)); }

TEST(VerbsMultiThread, ExclusiveModeOneThreadPerRing) {
  KINET_TEST_RNG(rng);
  const uint64_t n = kinet::test::scaled(1000, 100);
  constexpr int kRings = 4;
  std::vector<std::unique_ptr<FakeRing>> rings;
  std::vector<FakeRing*> ptrs;
  for (int k = 0; k < kRings; ++k) {
    rings.push_back(std::make_unique<FakeRing>(4, 4, 4, 20'000'000'000ull));
    ptrs.push_back(rings.back().get());
  }
  NicThread nic(ptrs, 1);
  std::vector<std::string> errs(kRings);
  std::vector<std::thread> ths;
  std::vector<uint64_t> seeds;
  for (int k = 0; k < kRings; ++k) seeds.push_back(rng());
  std::vector<std::vector<uint64_t>> words(kRings, std::vector<uint64_t>(n));
  for (int k = 0; k < kRings; ++k)
    ths.emplace_back(
        [&, k] { errs[k] = post_tagged<Sharing::Exclusive>(*rings[k], 0, n, seeds[k], words[k].data()); });
  for (auto& th : ths) th.join();
  nic.stop();
  for (auto& e : errs) EXPECT_EQ(e, "");
  for (auto& e : nic.errors()) ADD_FAILURE() << e;
  for (int k = 0; k < kRings; ++k) EXPECT_EQ(nic.seq_of(k, 0), n) << "ring " << k;
}

}  // namespace
