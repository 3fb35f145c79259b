// kinet-perf — cross-process mode, internal: the control connection (its
// messages and their wire structs), one side's endpoint on the TCP fabric, and
// the sockets of the rendezvous. Used by xproc.cpp (the tests' halves and the
// server and client drivers).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/socket.hpp"
#include "kinet/kinet.hpp"
#include "runner.hpp"
#include "testbed.hpp"

namespace kinet::perf::xp {

using Clock = bs::Clock;
inline constexpr auto kAcceptWait = std::chrono::seconds(120);  // --server: how long it waits for a client

// ---- control protocol: [u32 type][u32 len][len bytes], both sides one build ----
enum class Msg : uint32_t { Plan = 1, Card, Prep, Ready, Verify, Verdict, Baseline, Bye };
inline constexpr uint32_t kMagic = 0x50584b4b;  // "KKXP"
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kMaxMsg = 1u << 20;

struct WireCase {
  uint8_t kind, use_inline, pad[2];
  uint32_t tx_depth, signal_every, qps;
  uint64_t size, iters, warmup;
};
struct WirePlan {
  uint32_t magic, version, case_bytes, ncases;
  uint64_t seed, timeout_ms, max_size;
  uint32_t qps, tx_depth;
};
struct WireVerdict {
  uint32_t ok;
  uint32_t pad;
  double seconds;  // baseline stream from the server: its clock
};

class Ctl {
 public:
  Ctl(bs::Fd fd, uint64_t timeout_ms, std::string peer)
      : fd_(std::move(fd)), timeout_(std::chrono::milliseconds(timeout_ms)), peer_(std::move(peer)) {}
  void send(Msg t, const void* p, size_t n) {
    uint32_t h[2] = {static_cast<uint32_t>(t), static_cast<uint32_t>(n)};
    const auto d = Clock::now() + timeout_;
    bs::write_all(fd_.get(), h, sizeof h, d, "the control connection to " + peer_);
    if (n) bs::write_all(fd_.get(), p, n, d, "the control connection to " + peer_);
  }
  void send(Msg t, const std::vector<uint8_t>& b) { send(t, b.data(), b.size()); }
  // Next message, which must be of type `want`. `wait` bounds it (default: the timeout).
  std::vector<uint8_t> recv(Msg want, std::chrono::milliseconds wait = std::chrono::milliseconds(0)) {
    Msg t;
    std::vector<uint8_t> b = recv_any(&t, wait);
    if (t != want)
      throw PerfError("control connection to " + peer_ + ": message " + std::to_string(uint32_t(t)) +
                      " where " + std::to_string(uint32_t(want)) + " was expected (the peer failed or is another version)");
    return b;
  }
  std::vector<uint8_t> recv_any(Msg* type, std::chrono::milliseconds wait = std::chrono::milliseconds(0)) {
    const auto d = Clock::now() + (wait.count() ? wait : timeout_);
    uint32_t h[2];
    const std::string what = "the control connection to " + peer_;
    if (!bs::read_all(fd_.get(), h, sizeof h, d, what)) throw PerfError(peer_ + " closed the control connection");
    if (h[1] > kMaxMsg) throw PerfError(what + ": message of " + std::to_string(h[1]) + " bytes (at most 1 MiB)");
    std::vector<uint8_t> b(h[1]);
    if (h[1] && !bs::read_all(fd_.get(), b.data(), b.size(), d, what))
      throw PerfError(peer_ + " closed the control connection");
    *type = static_cast<Msg>(h[0]);
    return b;
  }
  void verdict(bool ok, const std::string& text, double seconds = 0) {
    std::vector<uint8_t> b(sizeof(WireVerdict));
    WireVerdict v{ok ? 1u : 0u, 0, seconds};
    std::memcpy(b.data(), &v, sizeof v);
    b.insert(b.end(), text.begin(), text.end());
    send(Msg::Verdict, b);
  }
  // Throws PerfError("server: ...") unless the verdict says ok; returns its text.
  std::string expect_ok(double* seconds = nullptr) {
    const std::vector<uint8_t> b = recv(Msg::Verdict);
    if (b.size() < sizeof(WireVerdict)) throw PerfError("control: short verdict");
    WireVerdict v;
    std::memcpy(&v, b.data(), sizeof v);
    std::string text(b.begin() + sizeof v, b.end());
    if (!v.ok) throw PerfError("server: " + text);
    if (seconds) *seconds = v.seconds;
    return text;
  }
  const std::string& peer() const { return peer_; }

 private:
  bs::Fd fd_;
  std::chrono::milliseconds timeout_;
  std::string peer_;
};


// ---- one side: device on the TCP fabric, a buffer, QPs (Testbed's layout) ----
struct PeerCard {
  uint64_t base = 0, slot = 0;
  uint32_t rkey = 0, nqp = 0;
  std::vector<std::vector<uint8_t>> qps;
  uint64_t tx(uint32_t q) const { return base + q * slot; }
  uint64_t rx(uint32_t q) const { return base + (nqp + q) * slot; }
  uint64_t word(uint32_t i) const { return base + 2 * nqp * slot + 8 * i; }
  Rkey key() const { return Rkey{detail::bswap32_constexpr(rkey)}; }
};

inline uint32_t next_pow2(uint64_t x) {
  uint64_t p = 1;
  while (p < x) p <<= 1;
  return static_cast<uint32_t>(p);
}

struct Side {
  std::unique_ptr<MemoryOps> mem = make_host_memory();
  Endpoint ep;
  PeerCard peer;
  uint32_t sq_depth = 0;
  uint64_t timeout_ns = 0;

  Side(const WirePlan& p) {
    DeviceOptions opt;
    opt.emu_fabric = DeviceOptions::Fabric::Tcp;
    ep.dev = Device::open("emu", opt);
    ep.pd = ep.dev->alloc_pd();
    const uint32_t max_msg = ep.dev->attr().max_msg;
    const uint64_t wqes = max_msg ? (p.max_size + max_msg - 1) / max_msg : 1;
    sq_depth = next_pow2(std::max<uint64_t>(16, uint64_t(p.tx_depth) * std::max<uint64_t>(1, wqes)));
    if (ep.dev->attr().max_qp_wr && sq_depth > ep.dev->attr().max_qp_wr) sq_depth = ep.dev->attr().max_qp_wr;
    ep.nqp = p.qps;
    ep.slot = (std::max<uint64_t>(p.max_size, 8) + 63) / 64 * 64;
    ep.bytes = 2 * size_t(ep.nqp) * ep.slot + 64;
    ep.base = static_cast<uint8_t*>(mem->alloc(ep.bytes));
    mem->fill(ep.base, 0, ep.bytes);
    ep.mr = ep.pd->reg_mr(ep.base, ep.bytes, kAccessAll);
    QpConfig qc;
    qc.sq_depth = sq_depth;
    qc.timeout_ms = p.timeout_ms;
    for (uint32_t q = 0; q < ep.nqp; ++q) ep.qps.push_back(ep.pd->create_qp(qc));
    timeout_ns = (p.timeout_ms ? p.timeout_ms : default_timeout_ms()) * 1000000ull;
  }
  ~Side() {
    ep.qps.clear();  // before the buffer: nothing executes into it afterwards
    ep.mr.reset();
    if (std::uncaught_exceptions() == 0) mem->free(ep.base);  // else leaked: a WQE may still run (testbed.cpp)
    ep.pd.reset();
    ep.dev.reset();
  }
  std::vector<uint8_t> card() const {
    std::vector<uint8_t> b(24);
    const uint64_t base = reinterpret_cast<uint64_t>(ep.base), slot = ep.slot;
    const uint32_t rkey = ep.mr->rkey_value(), nqp = ep.nqp;
    std::memcpy(b.data(), &base, 8);
    std::memcpy(b.data() + 8, &slot, 8);
    std::memcpy(b.data() + 16, &rkey, 4);
    std::memcpy(b.data() + 20, &nqp, 4);
    for (auto& q : ep.qps) {
      const std::vector<uint8_t> blob = q->info().serialize();
      const uint32_t n = static_cast<uint32_t>(blob.size());
      b.insert(b.end(), reinterpret_cast<const uint8_t*>(&n), reinterpret_cast<const uint8_t*>(&n) + 4);
      b.insert(b.end(), blob.begin(), blob.end());
    }
    return b;
  }
  // Connects every QP to the peer's (its card), QP info through deserialize().
  void connect(const std::vector<uint8_t>& b) {
    if (b.size() < 24) throw PerfError("control: short card");
    std::memcpy(&peer.base, b.data(), 8);
    std::memcpy(&peer.slot, b.data() + 8, 8);
    std::memcpy(&peer.rkey, b.data() + 16, 4);
    std::memcpy(&peer.nqp, b.data() + 20, 4);
    size_t off = 24;
    while (off + 4 <= b.size()) {
      uint32_t n;
      std::memcpy(&n, b.data() + off, 4);
      off += 4;
      if (n > b.size() - off) throw PerfError("control: malformed card");
      peer.qps.emplace_back(b.begin() + off, b.begin() + off + n);
      off += n;
    }
    if (peer.nqp != ep.nqp || peer.qps.size() != ep.nqp || peer.slot != ep.slot)
      throw PerfError("control: the peer's card has " + std::to_string(peer.qps.size()) + " QPs of " +
                      std::to_string(ep.nqp) + " and slot " + std::to_string(peer.slot));
    for (uint32_t q = 0; q < ep.nqp; ++q)
      ep.qps[q]->connect(QpInfo::deserialize(peer.qps[q].data(), peer.qps[q].size()));
  }
};

// HOST[:PORT] -> address (numeric IPv4, [IPv6], or a name through
// getaddrinfo). Throws PerfError naming the spec.
bs::SockAddr resolve(const std::string& spec, uint16_t default_port);
// Accepts one connection on non-blocking `lfd` by `d`; throws PerfError
// naming `what` it waited for.
bs::Fd accept_one(int lfd, Clock::time_point d, const char* what);

}  // namespace kinet::perf::xp
