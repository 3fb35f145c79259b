// kinet-perf — the host-thread runner: CPU threads post through the device
// verbs (kinet::dev::*<Sharing::Exclusive>), one thread per QP.
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <random>
#include <thread>
#include <utility>

#include "affinity.hpp"
#include "core/text.hpp"
#include "kinet/kinet.hpp"
#include "progress.hpp"
#include "runner.hpp"
#include "testbed.hpp"
#include "waiter.hpp"

namespace kinet::perf {
namespace {

using dev::Sharing;
using text::hex64;

class HostRunner final : public Runner {
 public:
  HostRunner(Testbed& tb, const HostRunnerConfig& cfg) : tb_(tb), cfg_(cfg), rng_(cfg.seed) {
    if (tb.mem().kind() != MemoryKind::Host || tb.mem().rings() != RingPlacement::Host)
      throw PerfError("the host-thread runner needs host buffers and host rings");
  }
  std::string name() const override { return "host-threads"; }
  std::string describe(const TestCase& tc) const override {
    switch (tc.kind) {
      case TestKind::WriteLat:
        return tc.lat_mode == LatMode::TwoThreads ? "host threads, one per endpoint (ping-pong)"
                                                  : "one host thread driving both endpoints (ping-pong)";
      case TestKind::AtomicLat: return "one host thread (client), server passive";
      default: return "one host thread posting on the client, server passive";
    }
  }

 private:
  void fill_random(uint8_t* dst, size_t n) { perf::fill_random(tb_.mem(), rng_, stage_, dst, n); }
  void verify(const uint8_t* want, const uint8_t* got, size_t n, const std::string& what) {
    verify_bytes(tb_.mem(), want, got, n, what);
  }

  // Bounded waits, spinning cfg_.spins_before_yield times before yielding.
  Waiter waiter() const { return Waiter(tb_.timeout_ns(), cfg_.spins_before_yield); }
  bool wait_marker(const uint8_t* p, uint8_t v, uint64_t iter, const char* who, const std::atomic<bool>* abort) {
    return waiter().marker(p, v, iter, who, abort);
  }
  Status wait_ticket(const dev::QpHandle& h, dev::Ticket t) { return waiter().ticket(h, t); }
  Status quiet(const dev::QpHandle& h) { return waiter().quiet(h); }

  Result write_lat(const TestCase& tc, Progress& pr) override {
    Endpoint& c = tb_.client();
    Endpoint& s = tb_.server();
    const size_t n = tc.size;
    fill_random(c.tx(0), n);
    fill_random(s.tx(0), n);
    tb_.mem().fill(c.rx(0), 0, n);
    tb_.mem().fill(s.rx(0), 0, n);
    const uint64_t total = tc.warmup + tc.iters;
    const dev::QpHandle hc = c.qps[0]->handle(), hs = s.qps[0]->handle();
    const bool inl = tc.use_inline && n <= mlx5::kMaxInlineOneBB;

    // One ping (or pong) of iteration i from `me` to `peer`.
    auto post = [&](Endpoint& me, Endpoint& peer, const dev::QpHandle& h, uint64_t i, const char* who) {
      me.tx(0)[n - 1] = marker(i);
      const uint64_t raddr = peer.addr(peer.rx(0));
      Status st = inl ? dev::put_inline<kX>(h, me.tx(0), static_cast<uint32_t>(n), raddr, peer.rkey())
                      : dev::put<kX>(h, me.tx(0), me.lkey(), raddr, peer.rkey(), n);
      if (st != Status::Ok) check(st, *me.qps[0], std::string("write_lat: ") + who + " posting the write of iteration " + std::to_string(i));
    };

    Result r;
    r.tc = tc;
    r.half_round_trip = true;
    r.lat_us.reserve(tc.iters);
    pr.begin(std::string("write_lat ") + std::to_string(n) + " B", total);

    if (tc.lat_mode == LatMode::OneThread) {
      for (uint64_t i = 0; i < total; ++i) {
        const uint64_t t0 = now_ns();
        post(c, s, hc, i, "client");
        wait_marker(s.rx(0) + n - 1, marker(i), i, "server", nullptr);
        post(s, c, hs, i, "server");
        wait_marker(c.rx(0) + n - 1, marker(i), i, "client", nullptr);
        const uint64_t t1 = now_ns();
        if (i >= tc.warmup) r.lat_us.push_back(double(t1 - t0) * 1e-3 / 2);
        pr.update(i + 1);
      }
    } else {
      std::atomic<bool> abort{false};
      std::exception_ptr server_error;
      std::thread server([&] {
        if (cfg_.poster_cpus.size() > 1) pin_this_thread({cfg_.poster_cpus[1]});
        try {
          for (uint64_t i = 0; i < total; ++i) {
            if (!wait_marker(s.rx(0) + n - 1, marker(i), i, "server", &abort)) return;
            post(s, c, hs, i, "server");
          }
        } catch (...) {
          server_error = std::current_exception();
          abort.store(true);
        }
      });
      try {
        for (uint64_t i = 0; i < total; ++i) {
          const uint64_t t0 = now_ns();
          post(c, s, hc, i, "client");
          if (!wait_marker(c.rx(0) + n - 1, marker(i), i, "client", &abort)) break;
          const uint64_t t1 = now_ns();
          if (i >= tc.warmup) r.lat_us.push_back(double(t1 - t0) * 1e-3 / 2);
          pr.update(i + 1);
        }
      } catch (...) {
        abort.store(true);
        server.join();
        throw;
      }
      server.join();
      if (server_error) std::rethrow_exception(server_error);
    }
    // Every write has completed at its initiator: the payloads are in place.
    check(quiet(hc), *c.qps[0], "write_lat: client waiting for its last writes");
    check(quiet(hs), *s.qps[0], "write_lat: server waiting for its last writes");
    verify(c.tx(0), s.rx(0), n, "write_lat: client -> server, last message");
    verify(s.tx(0), c.rx(0), n, "write_lat: server -> client, last message");
    r.verified = "last message, both directions (" + std::to_string(n) + " B)";
    return r;
  }

  Result bw(const TestCase& tc, Progress& pr, bool read) override {
    Endpoint& c = tb_.client();
    Endpoint& s = tb_.server();
    const size_t n = tc.size;
    const char* tname = read ? "read_bw" : "write_bw";
    for (uint32_t q = 0; q < tc.qps; ++q) {
      fill_random(read ? s.tx(q) : c.tx(q), n);
      tb_.mem().fill(read ? c.rx(q) : s.rx(q), 0, n);
    }
    struct QpRun {
      dev::QpHandle h;
      QueuePair* qp;
      uint64_t posted = 0, done = 0;
      std::deque<std::pair<uint64_t, uint64_t>> signaled;  // (ticket, posted count it completes)
    };
    std::vector<QpRun> runs(tc.qps);
    for (uint32_t q = 0; q < tc.qps; ++q) {
      runs[q].h = c.qps[q]->handle();
      runs[q].qp = c.qps[q].get();
    }
    const uint32_t sig_every = tc.signal_every ? tc.signal_every : 1;

    auto post_one = [&](uint32_t q) {
      QpRun& qr = runs[q];
      if (qr.posted - qr.done >= tc.tx_depth) {
        const auto [tk, count] = qr.signaled.front();
        qr.signaled.pop_front();
        check(wait_ticket(qr.h, dev::Ticket{tk}), *qr.qp,
              std::string(tname) + ": waiting for a completion on QP " + std::to_string(q));
        qr.done = count;
      }
      // The doorbell once per post list (perftest's --post_list); a wait for
      // ring space or a completion rings what the list left unannounced.
      const uint32_t flags = (((qr.posted + 1) % sig_every == 0) ? dev::kSignal : 0u) |
                             (((qr.posted + 1) % tc.post_list != 0) ? dev::kNoDoorbell : 0u);
      dev::Ticket t;
      const Status st =
          read ? dev::get<kX>(qr.h, c.rx(q), c.lkey(), s.addr(s.tx(q)), s.rkey(), n, flags, &t)
               : dev::put<kX>(qr.h, c.tx(q), c.lkey(), s.addr(s.rx(q)), s.rkey(), n, flags, &t);
      if (st != Status::Ok) check(st, *qr.qp, std::string(tname) + ": posting on QP " + std::to_string(q));
      ++qr.posted;
      if (flags & dev::kSignal) qr.signaled.emplace_back(t.idx, qr.posted);
    };
    auto drain = [&] {
      for (uint32_t q = 0; q < tc.qps; ++q) {
        check(quiet(runs[q].h), *runs[q].qp,
              std::string(tname) + ": waiting for the last completions on QP " + std::to_string(q));
        runs[q].done = runs[q].posted;
        runs[q].signaled.clear();
      }
    };

    const uint64_t total = tc.warmup + tc.iters;
    Result r;
    r.tc = tc;
    r.seconds = timed_loop(pr, std::string(tname) + " " + std::to_string(n) + " B", tc.warmup, tc.iters, tc.qps,
                           post_one, drain);
    r.msgs = tc.iters;
    r.bytes = tc.iters * n;
    const uint32_t used = static_cast<uint32_t>(std::min<uint64_t>(tc.qps, total));
    for (uint32_t q = 0; q < used; ++q)
      verify(read ? s.tx(q) : c.tx(q), read ? c.rx(q) : s.rx(q), n,
             std::string(tname) + ": QP " + std::to_string(q) + ", last message");
    r.verified = "last message on each of " + std::to_string(used) + " QP(s) (" + std::to_string(n) + " B)";
    return r;
  }

  Result atomic_lat(const TestCase& tc, Progress& pr) override {
    Endpoint& c = tb_.client();
    Endpoint& s = tb_.server();
    const dev::QpHandle h = c.qps[0]->handle();
    uint64_t* counter = s.word(0);
    uint64_t* fetched = c.word(0);
    uint64_t expected = rng_();
    tb_.mem().copy_to(counter, &expected, sizeof expected);
    const uint64_t initial = expected;
    const uint64_t total = tc.warmup + tc.iters;

    Result r;
    r.tc = tc;
    r.half_round_trip = false;
    r.lat_us.reserve(tc.iters);
    pr.begin("atomic_lat 8 B", total);
    for (uint64_t i = 0; i < total; ++i) {
      const uint64_t add = (rng_() & 0xffffffffu) | 1u;
      dev::Ticket t;
      const uint64_t t0 = now_ns();
      Status st = dev::fetch_add<kX>(h, fetched, c.lkey(), s.addr(counter), s.rkey(), add, dev::kSignal, &t);
      if (st == Status::Ok) st = wait_ticket(h, t);
      const uint64_t t1 = now_ns();
      if (st != Status::Ok) check(st, *c.qps[0], "atomic_lat: fetch_add of iteration " + std::to_string(i));
      uint64_t old;
      tb_.mem().copy_from(&old, fetched, sizeof old);
      if (old != expected)
        throw PerfError("atomic_lat: iteration " + std::to_string(i) + " fetched " + hex64(old) + ", expected " +
                        hex64(expected));
      expected += add;
      if (i >= tc.warmup) r.lat_us.push_back(double(t1 - t0) * 1e-3);
      pr.update(i + 1);
    }
    uint64_t final_value;
    tb_.mem().copy_from(&final_value, counter, sizeof final_value);
    if (final_value != expected)
      throw PerfError("atomic_lat: remote counter is " + hex64(final_value) + " after " + std::to_string(total) +
                      " fetch_adds from " + hex64(initial) + ", expected " + hex64(expected));
    r.verified = "every fetched value and the final remote sum (" + std::to_string(total) + " adds)";
    return r;
  }

  Testbed& tb_;
  HostRunnerConfig cfg_;
  std::mt19937_64 rng_;
  std::vector<uint8_t> stage_;
};

}  // namespace

std::unique_ptr<Runner> make_host_runner(Testbed& tb, const HostRunnerConfig& cfg) {
  return std::make_unique<HostRunner>(tb, cfg);
}

}  // namespace kinet::perf
