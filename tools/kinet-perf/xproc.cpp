// kinet-perf — cross-process mode (see xproc.hpp): control protocol, one
// side's endpoint, and the client's and server's halves of every test.
#include "xproc.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <thread>

#include "bootstrap/socket.hpp"
#include "kinet/kinet.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "tcp_baseline.hpp"
#include "waiter.hpp"
#include "testbed.hpp"
#include "xproc_setup.hpp"
#include "xreport.hpp"

#ifndef KINET_PERF_VERSION
#define KINET_PERF_VERSION "unknown"
#endif

namespace kinet::perf {
namespace {

using dev::Sharing;
using namespace xp;

// Payload of (case, side, QP): both processes can compute the other's.
void fill_payload(Side& s, uint64_t seed, uint32_t ci, int side, uint32_t q, uint8_t* dst, size_t n) {
  std::mt19937_64 rng(seed ^ (uint64_t(ci) << 40) ^ (uint64_t(side) << 32) ^ q);
  std::vector<uint8_t> stage;
  fill_random(*s.mem, rng, stage, dst, n);
}
std::vector<uint8_t> payload(uint64_t seed, uint32_t ci, int side, uint32_t q, size_t n) {
  std::mt19937_64 rng(seed ^ (uint64_t(ci) << 40) ^ (uint64_t(side) << 32) ^ q);
  std::vector<uint8_t> v(n);
  size_t i = 0;
  while (i < n) {
    uint64_t r = rng();
    for (int k = 0; k < 8 && i < n; ++k, r >>= 8) v[i++] = static_cast<uint8_t>(1 + (r & 0xff) % 255);
  }
  return v;
}
uint64_t atomic_initial(uint64_t seed, uint32_t ci) { return std::mt19937_64(seed ^ ci ^ 0xa70)(); }

// How long the server may wait for the client to finish one run: each of its
// operations is bounded by the timeout, so (iterations + 1) x timeout bounds
// the whole (capped at a day).
std::chrono::milliseconds run_bound(const TestCase& tc, uint64_t timeout_ns) {
  const uint64_t ms = std::max<uint64_t>(timeout_ns / 1000000, 1);
  const uint64_t n = tc.warmup + tc.iters + 1;
  return std::chrono::milliseconds(n > 86400000ull / ms ? 86400000ull : n * ms);
}

TestCase to_case(const WireCase& w) {
  TestCase tc;
  tc.kind = static_cast<TestKind>(w.kind);
  tc.size = w.size;
  tc.iters = w.iters;
  tc.warmup = w.warmup;
  tc.tx_depth = w.tx_depth;
  tc.signal_every = w.signal_every;
  tc.qps = w.qps;
  tc.use_inline = w.use_inline;
  tc.lat_mode = LatMode::TwoThreads;
  return tc;
}

// ---- the halves of each test ----

// Posts the write of ping-pong iteration i from `s` to its peer.
void post_ping(Side& s, const TestCase& tc, uint64_t i, const char* who) {
  const size_t n = tc.size;
  const dev::QpHandle h = s.ep.qps[0]->handle();
  s.ep.tx(0)[n - 1] = marker(i);
  const bool inl = tc.use_inline && n <= mlx5::kMaxInlineOneBB;
  const Status st = inl ? dev::put_inline<kX>(h, s.ep.tx(0), static_cast<uint32_t>(n), s.peer.rx(0), s.peer.key())
                        : dev::put<kX>(h, s.ep.tx(0), s.ep.lkey(), s.peer.rx(0), s.peer.key(), n);
  if (st != Status::Ok)
    check(st, *s.ep.qps[0], std::string("write_lat: ") + who + " posting the write of iteration " + std::to_string(i));
}

// What the peer's last ping-pong message looks like: its payload, last byte the final marker.
std::vector<uint8_t> last_ping(uint64_t seed, uint32_t ci, int side, const TestCase& tc) {
  std::vector<uint8_t> v = payload(seed, ci, side, 0, tc.size);
  v[tc.size - 1] = marker(tc.warmup + tc.iters - 1);
  return v;
}

void verify_local(Side& s, const std::vector<uint8_t>& want, const uint8_t* got, const std::string& what) {
  std::vector<uint8_t> tmp(want.size());
  std::memcpy(tmp.data(), want.data(), want.size());
  verify_bytes(*s.mem, tmp.data(), got, want.size(), what);
}

// Spins of a waiting poster before it yields. The busy threads are the two
// processes' posters: host posters run their software NIC themselves
// (QpHandle::host_kick), the engine threads sleep and the link threads block
// in poll(). With a CPU each, spinning is cheaper than sched_yield, which
// cost ~20 us per round trip on a 2-vCPU VM.
unsigned spins_before_yield() { return std::thread::hardware_concurrency() >= 2 ? 4096 : 16; }

// Client: one kinet run of case ci (the server has prepared its side).
Result client_kinet(Side& s, Ctl& ctl, const WirePlan& plan, uint32_t ci, const TestCase& tc, Progress& pr) {
  Waiter w(s.timeout_ns, spins_before_yield());
  const size_t n = tc.size;
  Result r;
  r.tc = tc;
  const uint64_t total = tc.warmup + tc.iters;
  uint64_t expected_final = 0;
  // Prepare this side, then the server.
  if (tc.kind == TestKind::WriteLat) {
    fill_payload(s, plan.seed, ci, 0, 0, s.ep.tx(0), n);
    s.mem->fill(s.ep.rx(0), 0, n);
  } else if (tc.kind == TestKind::WriteBw) {
    for (uint32_t q = 0; q < tc.qps; ++q) fill_payload(s, plan.seed, ci, 0, q, s.ep.tx(q), n);
  } else if (tc.kind == TestKind::ReadBw) {
    for (uint32_t q = 0; q < tc.qps; ++q) s.mem->fill(s.ep.rx(q), 0, n);
  }
  ctl.send(Msg::Prep, &ci, sizeof ci);
  ctl.recv(Msg::Ready);

  if (tc.kind == TestKind::WriteLat) {
    r.half_round_trip = true;
    r.lat_us.reserve(tc.iters);
    pr.begin("write_lat " + std::to_string(n) + " B", total);
    for (uint64_t i = 0; i < total; ++i) {
      const uint64_t t0 = now_ns();
      post_ping(s, tc, i, "client");
      w.marker(s.ep.rx(0) + n - 1, marker(i), i, "client");
      const uint64_t t1 = now_ns();
      if (i >= tc.warmup) r.lat_us.push_back(double(t1 - t0) * 1e-3 / 2);
      pr.update(i + 1);
    }
    check(w.quiet(s.ep.qps[0]->handle()), *s.ep.qps[0], "write_lat: client waiting for its last writes");
    verify_local(s, last_ping(plan.seed, ci, 1, tc), s.ep.rx(0), "write_lat: server -> client, last message");
    r.verified = "last message, both directions (" + std::to_string(n) + " B)";
  } else if (tc.kind == TestKind::AtomicLat) {
    const dev::QpHandle h = s.ep.qps[0]->handle();
    uint64_t* fetched = s.ep.word(0);
    uint64_t expected = atomic_initial(plan.seed, ci);
    std::mt19937_64 rng(plan.seed ^ ci);
    r.lat_us.reserve(tc.iters);
    pr.begin("atomic_lat 8 B", total);
    for (uint64_t i = 0; i < total; ++i) {
      const uint64_t add = (rng() & 0xffffffffu) | 1u;
      dev::Ticket t;
      const uint64_t t0 = now_ns();
      Status st = dev::fetch_add<kX>(h, fetched, s.ep.lkey(), s.peer.word(0), s.peer.key(), add, dev::kSignal, &t);
      if (st == Status::Ok) st = w.ticket(h, t);
      const uint64_t t1 = now_ns();
      if (st != Status::Ok) check(st, *s.ep.qps[0], "atomic_lat: fetch_add of iteration " + std::to_string(i));
      if (*fetched != expected)
        throw PerfError("atomic_lat: iteration " + std::to_string(i) + " fetched " + std::to_string(*fetched) +
                        ", expected " + std::to_string(expected));
      expected += add;
      if (i >= tc.warmup) r.lat_us.push_back(double(t1 - t0) * 1e-3);
      pr.update(i + 1);
    }
    expected_final = expected;
    r.verified = "every fetched value and the final remote sum (" + std::to_string(total) + " adds)";
  } else {
    const bool read = tc.kind == TestKind::ReadBw;
    const char* tname = read ? "read_bw" : "write_bw";
    struct QpRun {
      dev::QpHandle h;
      QueuePair* qp;
      uint64_t posted = 0, done = 0;
      std::deque<std::pair<uint64_t, uint64_t>> signaled;
    };
    std::vector<QpRun> runs(tc.qps);
    for (uint32_t q = 0; q < tc.qps; ++q) runs[q] = {s.ep.qps[q]->handle(), s.ep.qps[q].get(), 0, 0, {}};
    const uint32_t sig = tc.signal_every ? tc.signal_every : 1;
    auto post_one = [&](uint32_t q) {
      QpRun& qr = runs[q];
      if (qr.posted - qr.done >= tc.tx_depth) {
        const auto [tk, count] = qr.signaled.front();
        qr.signaled.pop_front();
        check(w.ticket(qr.h, dev::Ticket{tk}), *qr.qp, std::string(tname) + ": waiting for a completion");
        qr.done = count;
      }
      // The doorbell once per post list (perftest's --post_list); a wait for
      // ring space or a completion rings what the list left unannounced.
      const uint32_t flags = (((qr.posted + 1) % sig == 0) ? dev::kSignal : 0u) |
                             (((qr.posted + 1) % tc.post_list != 0) ? dev::kNoDoorbell : 0u);
      dev::Ticket t;
      const Status st = read ? dev::get<kX>(qr.h, s.ep.rx(q), s.ep.lkey(), s.peer.tx(q), s.peer.key(), n, flags, &t)
                             : dev::put<kX>(qr.h, s.ep.tx(q), s.ep.lkey(), s.peer.rx(q), s.peer.key(), n, flags, &t);
      if (st != Status::Ok) check(st, *qr.qp, std::string(tname) + ": posting on QP " + std::to_string(q));
      ++qr.posted;
      if (flags & dev::kSignal) qr.signaled.emplace_back(t.idx, qr.posted);
    };
    auto drain = [&] {
      for (auto& qr : runs) {
        check(w.quiet(qr.h), *qr.qp, std::string(tname) + ": waiting for the last completions");
        qr.done = qr.posted;
        qr.signaled.clear();
      }
    };
    r.seconds = timed_loop(pr, std::string(tname) + " " + std::to_string(n) + " B", tc.warmup, tc.iters, tc.qps,
                           post_one, drain);
    r.msgs = tc.iters;
    r.bytes = tc.iters * n;
    const uint32_t used = static_cast<uint32_t>(std::min<uint64_t>(tc.qps, total));
    if (read)
      for (uint32_t q = 0; q < used; ++q)
        verify_local(s, payload(plan.seed, ci, 1, q, n), s.ep.rx(q), "read_bw: QP " + std::to_string(q));
    r.verified = "last message on each of " + std::to_string(used) + " QP(s) (" + std::to_string(n) + " B)";
  }
  pr.clear();
  uint64_t v[2] = {ci, expected_final};
  ctl.send(Msg::Verify, v, sizeof v);
  ctl.expect_ok();
  return r;
}

// Server: prepares its side for case ci and, for write_lat, answers the pings.
// Returns the error to report at Verify ("" = none).
std::string server_kinet(Side& s, Ctl& ctl, const WirePlan& plan, uint32_t ci, const TestCase& tc) {
  const size_t n = tc.size;
  if (tc.kind == TestKind::WriteLat) {
    fill_payload(s, plan.seed, ci, 1, 0, s.ep.tx(0), n);
    s.mem->fill(s.ep.rx(0), 0, n);
  } else if (tc.kind == TestKind::WriteBw) {
    for (uint32_t q = 0; q < tc.qps; ++q) s.mem->fill(s.ep.rx(q), 0, n);
  } else if (tc.kind == TestKind::ReadBw) {
    for (uint32_t q = 0; q < tc.qps; ++q) fill_payload(s, plan.seed, ci, 1, q, s.ep.tx(q), n);
  } else {
    const uint64_t init = atomic_initial(plan.seed, ci);
    std::memcpy(s.ep.word(0), &init, 8);
  }
  ctl.send(Msg::Ready, nullptr, 0);
  std::string err;
  if (tc.kind == TestKind::WriteLat) {
    Waiter w(s.timeout_ns, spins_before_yield());
    try {
      for (uint64_t i = 0; i < tc.warmup + tc.iters; ++i) {
        w.marker(s.ep.rx(0) + n - 1, marker(i), i, "server");
        post_ping(s, tc, i, "server");
      }
      check(w.quiet(s.ep.qps[0]->handle()), *s.ep.qps[0], "write_lat: server waiting for its last writes");
    } catch (const PerfError& e) {
      err = e.what();
    }
  }
  const std::vector<uint8_t> b = ctl.recv(Msg::Verify, run_bound(tc, s.timeout_ns));
  uint64_t v[2];
  if (b.size() != sizeof v) throw PerfError("control: malformed Verify");
  std::memcpy(v, b.data(), sizeof v);
  if (!err.empty()) return err;
  try {
    const uint32_t used = static_cast<uint32_t>(std::min<uint64_t>(tc.qps, tc.warmup + tc.iters));
    if (tc.kind == TestKind::WriteLat) {
      verify_local(s, last_ping(plan.seed, ci, 0, tc), s.ep.rx(0), "write_lat: client -> server, last message");
    } else if (tc.kind == TestKind::WriteBw) {
      for (uint32_t q = 0; q < used; ++q)
        verify_local(s, payload(plan.seed, ci, 0, q, n), s.ep.rx(q), "write_bw: QP " + std::to_string(q));
    } else if (tc.kind == TestKind::AtomicLat) {
      uint64_t fin;
      std::memcpy(&fin, s.ep.word(0), 8);
      if (fin != v[1])
        return "atomic_lat: the counter is " + std::to_string(fin) + ", expected " + std::to_string(v[1]);
    }
  } catch (const PerfError& e) {
    return e.what();
  }
  return "";
}

// Baseline halves. Ping-pong for the latency tests, a stream in the
// direction the data moves for the bandwidth tests.
void client_baseline(int data_fd, Ctl& ctl, uint32_t ci, const TestCase& tc, uint64_t timeout_ns, Progress& pr,
                     XResult& x) {
  ctl.send(Msg::Baseline, &ci, sizeof ci);
  ctl.recv(Msg::Ready);
  Result& b = x.base;
  b.tc = tc;
  if (is_latency(tc.kind)) {
    b.lat_us = tcp_pingpong_client(data_fd, tc.size, tc.warmup, tc.iters, timeout_ns, pr);
    b.half_round_trip = tc.kind == TestKind::WriteLat;
    if (!b.half_round_trip)
      for (double& v : b.lat_us) v *= 2;  // atomic_lat reports the full round trip
    b.verified = "last pong byte for byte";
    ctl.expect_ok();
  } else {
    const uint64_t count = tc.warmup + tc.iters;
    double seconds = 0;
    if (tc.kind == TestKind::WriteBw) {
      pr.begin("tcp stream " + std::to_string(tc.size) + " B", count);
      tcp_stream_send(data_fd, tc.size, tc.warmup, timeout_ns, nullptr);
      seconds = tcp_stream_send(data_fd, tc.size, tc.iters, timeout_ns, &pr);
      pr.clear();
      ctl.expect_ok();
    } else {  // read_bw: the server sends
      tcp_stream_recv(data_fd, tc.size, tc.warmup, timeout_ns);
      tcp_stream_recv(data_fd, tc.size, tc.iters, timeout_ns);
      ctl.expect_ok(&seconds);
    }
    b.seconds = seconds;
    b.msgs = tc.iters;
    b.bytes = tc.iters * tc.size;
    b.verified = "first byte of every message";
  }
  x.has_base = true;
}

void server_baseline(int data_fd, Ctl& ctl, const TestCase& tc, uint64_t timeout_ns) {
  ctl.send(Msg::Ready, nullptr, 0);
  try {
    double seconds = 0;
    if (is_latency(tc.kind)) {
      tcp_pingpong_server(data_fd, tc.size, tc.warmup + tc.iters, timeout_ns);
    } else if (tc.kind == TestKind::WriteBw) {
      tcp_stream_recv(data_fd, tc.size, tc.warmup, timeout_ns);
      tcp_stream_recv(data_fd, tc.size, tc.iters, timeout_ns);
    } else {
      tcp_stream_send(data_fd, tc.size, tc.warmup, timeout_ns, nullptr);
      seconds = tcp_stream_send(data_fd, tc.size, tc.iters, timeout_ns, nullptr);
    }
    ctl.verdict(true, "", seconds);
  } catch (const PerfError& e) {
    ctl.verdict(false, e.what());
    throw;
  }
}


RunInfo run_info(const Options& o, const Side& s, uint64_t seed) {
  RunInfo info;
  info.version = KINET_PERF_VERSION;
  info.command_line = o.command_line;
  info.lat_mode = "threads";
  info.seed = seed;
  info.pinning = "off (one process per side; the OS places the threads)";
  const DeviceAttr& a = s.ep.dev->attr();
  info.client_device = a.name;
  info.server_device = "emu (the --server process)";
  info.provider = a.provider;
  info.max_qp_wr = a.max_qp_wr;
  info.max_msg = a.max_msg;
  info.sq_depth = s.sq_depth;
  info.runner = "cross-process: host threads, one process per endpoint, emu fabric over TCP";
  info.timeout_ms = s.timeout_ns / 1000000;
  return info;
}

}  // namespace

int run_server(const Options& o) {
  try {
    bs::SockAddr any;
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&any.ss);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    any.len = sizeof(sockaddr_in6);
    bs::Fd lfd;
    bs::SockAddr bound;
    try {
      lfd = bs::listen_on(any, o.port, &bound);  // [::] takes IPv4 clients too
    } catch (const Error&) {
      bs::SockAddr a4;
      auto* s4 = reinterpret_cast<sockaddr_in*>(&a4.ss);
      s4->sin_family = AF_INET;
      s4->sin_addr.s_addr = htonl(INADDR_ANY);
      a4.len = sizeof(sockaddr_in);
      lfd = bs::listen_on(a4, o.port, &bound);
    }
    std::printf("kinet-perf server: waiting for a client on port %u\n", unsigned(bound.port()));
    std::fflush(stdout);
    const auto d = Clock::now() + kAcceptWait;
    const uint64_t tmo = o.timeout_ms ? o.timeout_ms : default_timeout_ms();
    Ctl ctl(accept_one(lfd.get(), d, "client"), tmo, "the client");
    bs::Fd data = accept_one(lfd.get(), Clock::now() + std::chrono::milliseconds(tmo), "baseline connection");
    lfd.reset();
    tcp_link_options(data.get());
    const std::vector<uint8_t> pb = ctl.recv(Msg::Plan);
    WirePlan plan;
    if (pb.size() < sizeof plan) throw PerfError("control: short plan");
    std::memcpy(&plan, pb.data(), sizeof plan);
    if (plan.magic != kMagic || plan.version != kVersion || plan.case_bytes != sizeof(WireCase) ||
        pb.size() != sizeof plan + plan.ncases * sizeof(WireCase))
      throw PerfError("control: the client's plan is of another kinet-perf version");
    std::vector<TestCase> cases(plan.ncases);
    for (uint32_t i = 0; i < plan.ncases; ++i) {
      WireCase w;
      std::memcpy(&w, pb.data() + sizeof plan + i * sizeof w, sizeof w);
      if (w.kind > uint8_t(TestKind::AtomicLat) || w.size == 0 || w.size > plan.max_size || w.qps > plan.qps ||
          w.qps == 0)
        throw PerfError("control: malformed test case " + std::to_string(i));
      cases[i] = to_case(w);
    }
    Side s(plan);
    ctl.send(Msg::Card, s.card());
    s.connect(ctl.recv(Msg::Card));
    ctl.send(Msg::Ready, nullptr, 0);
    std::printf("kinet-perf server: client connected; %u test cases\n", plan.ncases);
    std::fflush(stdout);
    for (;;) {
      Msg t;
      const std::vector<uint8_t> b = ctl.recv_any(&t, std::chrono::milliseconds(tmo * 4 + 60000));
      if (t == Msg::Bye) break;
      uint32_t ci = 0;
      if ((t != Msg::Prep && t != Msg::Baseline) || b.size() != 4) throw PerfError("control: unexpected message");
      std::memcpy(&ci, b.data(), 4);
      if (ci >= cases.size()) throw PerfError("control: case " + std::to_string(ci) + " out of range");
      if (t == Msg::Baseline) {
        server_baseline(data.get(), ctl, cases[ci], s.timeout_ns);
      } else {
        const std::string err = server_kinet(s, ctl, plan, ci, cases[ci]);
        ctl.verdict(err.empty(), err);
      }
    }
    std::printf("kinet-perf server: done\n");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "kinet-perf server: FAILED: %s (%s)\n", e.what(), error_code_name(e.code()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kinet-perf server: FAILED: %s\n", e.what());
  }
  return 1;
}

int run_client(const Options& o, const std::vector<TestCase>& cases, uint64_t seed, const MachineInfo& m,
               Progress& pr) {
  std::vector<XResult> results;
  std::string error;
  RunInfo info;
  info.version = KINET_PERF_VERSION;
  info.command_line = o.command_line;
  info.seed = seed;
  const std::string peer = o.client_of;
  try {
    const uint64_t tmo = o.timeout_ms ? o.timeout_ms : default_timeout_ms();
    const bs::SockAddr to = resolve(o.client_of, o.port);
    const auto d = Clock::now() + std::chrono::milliseconds(tmo);
    Ctl ctl(bs::connect_to(to, d, "the kinet-perf server"), tmo, "the server at " + to.str());
    bs::Fd data = bs::connect_to(to, d, "the kinet-perf server (baseline connection)");
    tcp_link_options(data.get());
    WirePlan plan{kMagic, kVersion, sizeof(WireCase), static_cast<uint32_t>(cases.size()), seed, o.timeout_ms, 8,
                  1, 1};
    std::vector<uint8_t> pb(sizeof plan + cases.size() * sizeof(WireCase));
    for (size_t i = 0; i < cases.size(); ++i) {
      const TestCase& tc = cases[i];
      WireCase w{static_cast<uint8_t>(tc.kind), tc.use_inline, {0, 0}, tc.tx_depth, tc.signal_every, tc.qps,
                 tc.size, tc.iters, tc.warmup};
      std::memcpy(pb.data() + sizeof plan + i * sizeof w, &w, sizeof w);
      plan.max_size = std::max<uint64_t>(plan.max_size, tc.size);
      plan.qps = std::max(plan.qps, tc.qps);
      plan.tx_depth = std::max(plan.tx_depth, tc.tx_depth);
    }
    std::memcpy(pb.data(), &plan, sizeof plan);
    ctl.send(Msg::Plan, pb);
    Side s(plan);
    s.connect(ctl.recv(Msg::Card));
    ctl.send(Msg::Card, s.card());
    ctl.recv(Msg::Ready);
    info = run_info(o, s, seed);
    for (uint32_t ci = 0; ci < cases.size(); ++ci) {
      const TestCase& tc = cases[ci];
      if (ci == 0 || cases[ci - 1].kind != tc.kind) {
        if (ci) print_footer();
        print_x_header(info, tc, to.str());
      }
      XResult x;
      if (o.baseline) client_baseline(data.get(), ctl, ci, tc, s.timeout_ns, pr, x);
      x.kinet = client_kinet(s, ctl, plan, ci, tc, pr);
      print_x_row(x);
      results.push_back(std::move(x));
    }
    print_footer();
    ctl.send(Msg::Bye, nullptr, 0);
  } catch (const Error& e) {
    error = std::string(e.what()) + " (" + error_code_name(e.code()) + ")";
  } catch (const std::exception& e) {
    error = e.what();
  }
  pr.clear();
  if (!error.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr, "kinet-perf: FAILED: %s\n", error.c_str());
  }
  if (!o.json_path.empty() && !write_x_json(o.json_path, info, m, peer, results, error)) {
    std::fprintf(stderr, "kinet-perf: cannot write %s\n", o.json_path.c_str());
    return 1;
  }
  return error.empty() ? 0 : 1;
}

}  // namespace kinet::perf
