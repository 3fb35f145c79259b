// kinet-proxy-cpu-bench — the measured runs (runs.hpp says what each one is).
#include "runs.hpp"

#include <atomic>
#include <chrono>
#include <exception>
#include <cstring>
#include <memory>
#include <pthread.h>
#include <sched.h>
#include <stdexcept>
#include <thread>

#include "core/cpu_relax.hpp"
#include "kinet/proxy.hpp"

namespace kpcb {
using namespace kinet;
using dev::Sharing;
constexpr Sharing X = Sharing::Exclusive;

namespace {
using Clock = std::chrono::steady_clock;
double ns_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

void check(Status st, const char* what, const ProxyChannel& ch) {
  if (st != Status::Ok)
    throw std::runtime_error(std::string(what) + ": " + status_string(st) + " " + ch.last_error());
}

std::unique_ptr<Transport> open_loop(const std::string& name) {
  TransportOptions o;
  o.provider = "loop";
  o.name = name;
  return Transport::open(o);
}

void pin_self(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
    throw std::runtime_error("can't pin a thread to CPU " + std::to_string(cpu));
}

// Runs f on a new thread pinned to `cpu` (the caller's thread stays as it
// is) and hands back its result or its exception.
template <class F> auto on_cpu(int cpu, F f) -> decltype(f()) {
  std::exception_ptr err;
  decltype(f()) out{};
  std::thread th([&] {
    try {
      pin_self(cpu);
      out = f();
    } catch (...) {
      err = std::current_exception();
    }
  });
  th.join();
  if (err) std::rethrow_exception(err);
  return out;
}

// ProxyConfig::spin when this build of kinet has it (the bench also builds
// against older trees, for before/after runs).
template <class C> void set_spin(C& c, int us) {
  if constexpr (requires { c.spin; })
    if (us >= 0) c.spin = std::chrono::microseconds(us);
}

// Proxy threads never sleep when idle (they yield), as in kinet-proxy-bench.
ProxyConfig proxy_config(const Setup& s) {
  ProxyConfig c;
  c.batch = s.batch;
  c.max_sleep = std::chrono::microseconds(0);
  if (s.consumer_cpu >= 0) c.cpus = std::to_string(s.consumer_cpu);
  set_spin(c, s.spin_us);
  return c;
}

ProxyChannelConfig channel_config(uint32_t slots) {
  ProxyChannelConfig c;
  c.slots = slots;
  c.posters = Posters::Host;
  c.timeout = std::chrono::milliseconds(60000);  // 2 loaded cores: generous
  return c;
}
}  // namespace

Stream stream(const Setup& s, uint64_t per_poster, uint32_t rounds) {
  auto t = open_loop("cpu bench nops");
  Proxy proxy(*t, proxy_config(s));
  std::vector<ProxyChannel*> chs;
  for (uint32_t i = 0; i < s.posters; ++i) chs.push_back(&proxy.channel(0, channel_config(s.slots)));
  Stream out;
  uint64_t total_stalls = 0;
  for (uint32_t r = 0; r < rounds; ++r) {
    std::atomic<uint32_t> ready{0};
    std::atomic<bool> go{false};
    std::vector<uint64_t> stalls(s.posters, 0);
    std::vector<Status> result(s.posters, Status::Ok);
    std::vector<std::thread> ts;
    for (uint32_t p = 0; p < s.posters; ++p)
      ts.emplace_back([&, p] {
        const dev::ProxyHandle h = chs[p]->handle();
        try {
          pin_self(s.poster_cpu);
        } catch (...) {
          result[p] = Status::InvalidArgument;
          ready.fetch_add(1);
          return;
        }
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) cpu_relax();
        uint64_t stalled = 0;
        for (uint64_t i = 0; i < per_poster; ++i) {
          uint64_t idx = 0;
          Status st = dev::try_reserve<X>(h, 1, &idx);
          if (st == Status::NoSpace) {
            ++stalled;  // the consumer is behind: wait for it (bounded)
            st = dev::reserve<X>(h, 1, &idx);
          }
          if (st != Status::Ok) {
            result[p] = st;
            return;
          }
          dev::publish<X>(h, idx, dev::make_nop(0));
        }
        stalls[p] = stalled;
        result[p] = dev::quiet<X>(h);
      });
    while (ready.load() != s.posters) std::this_thread::yield();
    const auto t0 = Clock::now();
    go.store(true, std::memory_order_release);
    for (auto& th : ts) th.join();
    const double ns = ns_since(t0);
    for (uint32_t p = 0; p < s.posters; ++p) check(result[p], "stream poster", *chs[p]);
    for (uint64_t v : stalls) total_stalls += v;
    out.ns_per_op.push_back(ns / (double(per_poster) * s.posters));
  }
  out.stall_share = double(total_stalls) / (double(per_poster) * s.posters * rounds);
  return out;
}

std::vector<double> burst(const Setup& s, uint32_t rounds) {
  auto t = open_loop("cpu bench burst");
  Proxy proxy(*t, proxy_config(s));
  ProxyChannel& ch = proxy.channel(0, channel_config(s.slots));
  const dev::ProxyHandle h = ch.handle();
  const uint32_t n = s.slots;
  return on_cpu(s.poster_cpu, [&] {
    std::vector<double> out;
    for (uint32_t r = 0; r < rounds; ++r) {
      uint64_t first = 0;
      check(dev::reserve<X>(h, n, &first), "burst reserve", ch);
      // The proxy waits at the unpublished first slot while the rest fill in.
      for (uint32_t i = 1; i < n; ++i) dev::publish<X>(h, first + i, dev::make_nop(0));
      const auto t0 = Clock::now();
      dev::publish<X>(h, first, dev::make_nop(0));
      check(dev::wait<X>(h, dev::Ticket{first + n, first}), "burst wait", ch);
      out.push_back(ns_since(t0) / n);
    }
    return out;
  });
}

std::vector<double> bare_burst(const Setup& s, uint32_t rounds) {
  uint32_t log_n = 0;
  while ((1u << log_n) < s.slots) ++log_n;
  std::vector<dev::ProxyDesc> ring(size_t{1} << log_n);
  std::memset(static_cast<void*>(ring.data()), 0, ring.size() * sizeof(dev::ProxyDesc));
  dev::ProxyShared shared{};
  dev::ProxyPostState post{};
  dev::ProxyHandle h{};
  h.log_n = log_n;
  h.ring = ring.data();
  h.post = &post;
  h.shared = &shared;
  h.timeout_ns = 60'000'000'000ull;
  std::atomic<bool> stop{false};
  std::thread consumer([&] {
    try {
      pin_self(s.consumer_cpu);
    } catch (...) {
    }
    const uint64_t mask = (uint64_t{1} << log_n) - 1;
    uint64_t head = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      uint32_t taken = 0;
      for (; taken < 32; ++taken, ++head) {
        dev::ProxyDesc* slot = &ring[head & mask];
        const uint64_t v = dev::detail::proxy_valid_bit(log_n, head);
        if ((load_acquire<Scope::System>(&slot->h0) & dev::kProxyValid) != v) break;
        if ((load_relaxed<Scope::System>(&slot->h1) & dev::kProxyValid) != v) break;
      }
      if (taken) {
        store_release<Scope::System>(&shared.consumed, head);
        store_release<Scope::System>(&shared.completed, head);
      } else {
        cpu_relax();
      }
    }
  });
  const uint32_t n = s.slots;
  Status st = Status::Ok;
  std::vector<double> out = on_cpu(s.poster_cpu, [&] {
    std::vector<double> v;
    for (uint32_t r = 0; r < rounds && st == Status::Ok; ++r) {
      uint64_t first = 0;
      st = dev::reserve<X>(h, n, &first);
      if (st != Status::Ok) break;
      for (uint32_t i = 1; i < n; ++i) dev::publish<X>(h, first + i, dev::make_nop(0));
      const auto t0 = Clock::now();
      dev::publish<X>(h, first, dev::make_nop(0));
      st = dev::wait<X>(h, dev::Ticket{first + n, first});
      v.push_back(ns_since(t0) / n);
    }
    return v;
  });
  stop = true;
  consumer.join();
  if (st != Status::Ok) throw std::runtime_error(std::string("bare burst: ") + status_string(st));
  return out;
}

std::vector<double> bare_round_trip(const Setup& s, uint32_t iters, uint32_t rounds) {
  alignas(64) static uint64_t to_b[8], to_a[8];  // own cache lines
  std::atomic_ref<uint64_t> ab(to_b[0]), ba(to_a[0]);
  ab.store(0);
  ba.store(0);
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    try {
      pin_self(s.consumer_cpu);
    } catch (...) {
    }
    uint64_t seen = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t v = ab.load(std::memory_order_acquire);
      if (v != seen) {
        seen = v;
        ba.store(v, std::memory_order_release);
      } else {
        cpu_relax();
      }
    }
  });
  std::vector<double> out;
  try {
    out = on_cpu(s.poster_cpu, [&] {
      std::vector<double> v;
      uint64_t k = 0;
      for (uint32_t r = 0; r < rounds; ++r) {
        const auto t0 = Clock::now();
        for (uint32_t i = 0; i < iters; ++i) {
          ab.store(++k, std::memory_order_release);
          const auto w0 = Clock::now();
          while (ba.load(std::memory_order_acquire) != k) {
            cpu_relax();
            if (Clock::now() - w0 > std::chrono::seconds(10))
              throw std::runtime_error("bare round trip: no echo within 10 s");
          }
        }
        v.push_back(ns_since(t0) / iters);
      }
      return v;
    });
  } catch (...) {
    stop = true;
    echo.join();
    throw;
  }
  stop = true;
  echo.join();
  return out;
}

std::vector<double> proxy_round_trip(const Setup& s, uint32_t iters, uint32_t rounds) {
  auto t = open_loop("cpu bench rtt");
  const PeerId self = t->connect(t->address(), "cpu bench rtt (self)");
  Proxy proxy(*t, proxy_config(s));
  alignas(64) static uint64_t src[8], dst[16];
  auto lr = proxy.register_memory(src, sizeof src, kAccessAll);
  auto rr = proxy.register_memory(dst, sizeof dst, kAccessAll);
  ProxyChannel& ch = proxy.channel(self, channel_config(1024));
  const Rkey rk = ch.import_key(rr->remote_key());
  const dev::ProxyHandle h = ch.handle();
  uint64_t* sig = &dst[8];
  std::atomic_ref<uint64_t> sig_ref(*sig);
  std::vector<double> out = on_cpu(s.poster_cpu, [&] {
    std::vector<double> v;
    uint64_t k = sig_ref.load();
    for (uint32_t r = 0; r < rounds; ++r) {
      const auto t0 = Clock::now();
      for (uint32_t i = 0; i < iters; ++i) {
        check(dev::put_signal<X>(h, src, lr->lkey(), reinterpret_cast<uint64_t>(dst), rk, 8,
                                 reinterpret_cast<uint64_t>(sig), rk, 1, nullptr, Lkey{0}),
              "put_signal", ch);
        ++k;
        const auto w0 = Clock::now();
        while (sig_ref.load(std::memory_order_acquire) < k) {
          cpu_relax();
          if (Clock::now() - w0 > std::chrono::seconds(10))
            throw std::runtime_error("proxy round trip: no signal within 10 s " + ch.last_error());
        }
      }
      v.push_back(ns_since(t0) / iters);
    }
    return v;
  });
  check(dev::quiet<X>(h), "quiet", ch);
  rr.reset();
  lr.reset();
  return out;
}

}  // namespace kpcb
