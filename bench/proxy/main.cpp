// kinet-proxy-bench — the proxy backend on one GPU, side by side in one run:
//   1. round trip of a kernel-issued 8-byte put_signal through the proxy
//      (loop transport, this process; the kernel waits for the signal) vs the
//      bare GPU->CPU->GPU flag round trip measured by the same program
//      (goal: at most 2x);
//   2. proxy throughput from many CTAs of posters: nops (ring + proxy
//      threads alone) and 8-byte puts through the loop transport (goal for
//      the ring: at least 50 M descriptors/s).
// Table on stdout; --json FILE for the figures and the configuration.
//   ./build-cuda/bench/kinet-proxy-bench [--quick] [--json out.json]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kernels.hpp"
#include "kinet/proxy.hpp"

using namespace kinet;

namespace {
struct Opts {
  uint32_t iters = 20000;
  uint32_t ctas = 264;
  uint32_t threads = 256;
  uint32_t per_thread = 64;
  uint32_t channels = 16;
  uint32_t proxy_threads = 4;
  uint32_t slots = 4096;
  int spin_us = -1;  // ProxyConfig::spin (-1: the library's default)
  std::string json;
  bool quick = false;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "kinet-proxy-bench: %s\n", what.c_str());
  std::exit(1);
}

std::unique_ptr<Transport> open_loop(const std::string& name) {
  TransportOptions o;
  o.provider = "loop";
  o.name = name;
  return Transport::open(o);
}

// Proxy threads never sleep when idle (they poll flat out for
// ProxyConfig::spin, then yield), so a descriptor or a message is never
// waiting out a back-off sleep.
ProxyConfig busy(int spin_us) {
  ProxyConfig c;
  c.max_sleep = std::chrono::microseconds(0);
  if (spin_us >= 0) c.spin = std::chrono::microseconds(spin_us);
  return c;
}

ProxyChannelConfig gpu_channel(uint32_t slots) {
  ProxyChannelConfig c;
  c.slots = slots;
  c.posters = Posters::Gpu;
  c.timeout = std::chrono::milliseconds(60000);  // a poster's last ticket waits for the whole run
  return c;
}
}  // namespace

int main(int argc, char** argv) {
  Opts o;
  CLI::App app{"kinet-proxy-bench: the proxy backend's round trip and throughput on one GPU"};
  app.add_option("--iters", o.iters, "round trips per measurement")->check(CLI::Range(1u, 100000000u));
  app.add_option("--ctas", o.ctas, "CTAs of posters (throughput)")->check(CLI::Range(1u, 65535u));
  app.add_option("--threads", o.threads, "threads per CTA")->check(CLI::Range(1u, 1024u));
  app.add_option("--per-thread", o.per_thread, "descriptors per thread")->check(CLI::Range(1u, 1000000u));
  app.add_option("--channels", o.channels, "channels the CTAs share (round robin)")->check(CLI::Range(1u, 1000u));
  app.add_option("--proxy-threads", o.proxy_threads, "proxy threads (one loop transport each) for the nop run")
      ->check(CLI::Range(1u, 64u));
  app.add_option("--slots", o.slots, "ring slots per channel (power of two)");
  app.add_option("--spin-us", o.spin_us, "ProxyConfig::spin of the proxy threads, microseconds (default: the library's)")
      ->check(CLI::Range(0, 10000000));
  app.add_option("--json", o.json, "write the figures as JSON to this file");
  app.add_flag("--quick", o.quick, "fewer iterations (a smoke run)");
  CLI11_PARSE(app, argc, argv);
  if (o.quick) {
    o.iters = std::min(o.iters, 2000u);
    o.per_thread = std::min(o.per_thread, 8u);
  }
  std::string err;
  nlohmann::json j;
  j["gpu"] = kpb::gpu_name();
  j["config"] = {{"iters", o.iters},     {"ctas", o.ctas},         {"threads", o.threads},
                 {"per_thread", o.per_thread}, {"channels", o.channels}, {"proxy_threads", o.proxy_threads},
                 {"slots", o.slots}, {"spin_us", o.spin_us}};
  try {
    // 1. round trips
    const double bare = kpb::bare_round_trip_ns(o.iters, &err);
    if (bare < 0) die("bare round trip: " + err);
    auto a = open_loop("bench gpu side"), b = open_loop("bench target side");
    const PeerId ab = a->connect(b->address(), "bench target side");
    b->connect(a->address(), "bench gpu side");
    Proxy proxy(std::vector<Transport*>{a.get(), b.get()}, busy(o.spin_us));
    const size_t posters = size_t{o.ctas} * o.threads;
    uint8_t* src = static_cast<uint8_t*>(kpb::alloc_mapped(4096));
    uint8_t* dst = static_cast<uint8_t*>(kpb::alloc_mapped(posters * 8 + 128));
    if (!src || !dst) die("cudaHostAlloc failed");
    auto lr = proxy.register_memory(src, 4096, kAccessAll, MemoryKind::Host, 0);
    auto rr = proxy.register_memory(dst, posters * 8 + 128, kAccessAll, MemoryKind::Host, 1);
    ProxyChannel& ch = proxy.channel(ab, gpu_channel(1024));
    const Rkey rk = ch.import_key(rr->remote_key());
    const uint64_t sig_addr = reinterpret_cast<uint64_t>(dst + posters * 8 + 64);
    const double rtt = kpb::proxy_round_trip_ns(ch.handle(), src, lr->lkey(), reinterpret_cast<uint64_t>(dst), rk,
                                                sig_addr, reinterpret_cast<const uint64_t*>(sig_addr), o.iters, &err);
    if (rtt < 0) die(err + " | " + ch.last_error());
    j["round_trip"] = {{"bare_ns", bare}, {"proxy_put_signal_ns", rtt}, {"ratio", rtt / bare}, {"goal_ratio", 2.0}};

    // 2a. throughput of the ring and the proxy threads alone (nops)
    std::vector<std::unique_ptr<Transport>> ts;
    std::vector<Transport*> tp;
    for (uint32_t i = 0; i < o.proxy_threads; ++i) {
      ts.push_back(open_loop("bench nop " + std::to_string(i)));
      tp.push_back(ts.back().get());
    }
    Proxy nop_proxy(tp, busy(o.spin_us));
    std::vector<dev::ProxyHandle> hs;
    for (uint32_t c = 0; c < o.channels; ++c) {
      ProxyChannelConfig cc = gpu_channel(o.slots);
      cc.transport = c % o.proxy_threads;
      hs.push_back(nop_proxy.channel(0, cc).handle());
    }
    const double nops = kpb::proxy_throughput(hs, o.ctas, o.threads, o.per_thread, false, nullptr, Lkey{0}, 0,
                                              Rkey{0}, &err);
    if (nops < 0) die("nop throughput: " + err);
    // 2b. 8-byte puts through the loop transport (one proxy thread posts, one serves the target)
    std::vector<dev::ProxyHandle> ph;
    for (uint32_t c = 0; c < o.channels; ++c) {
      ProxyChannel& pc = proxy.channel(ab, gpu_channel(o.slots));
      pc.import_key(rr->remote_key());
      ph.push_back(pc.handle());
    }
    // The message engine moves far fewer operations per second than the ring: fewer per thread.
    const uint32_t put_per_thread = std::max(1u, o.per_thread / 16);
    j["config"]["put_per_thread"] = put_per_thread;
    const double puts = kpb::proxy_throughput(ph, o.ctas, o.threads, put_per_thread, true, src, lr->lkey(),
                                              reinterpret_cast<uint64_t>(dst), rk, &err);
    if (puts < 0) die("put throughput: " + err);
    j["throughput"] = {{"nop_ops_per_s", nops}, {"put_loop_ops_per_s", puts}, {"goal_ops_per_s", 50e6}};

    std::printf("kinet-proxy-bench on %s\n", j["gpu"].get<std::string>().c_str());
    std::printf("%-52s %12s\n", "measurement", "value");
    std::printf("%-52s %10.2f us\n", "bare GPU->CPU->GPU flag round trip", bare / 1e3);
    std::printf("%-52s %10.2f us\n", "proxy put_signal round trip (8 B, loop)", rtt / 1e3);
    std::printf("%-52s %10.2f x   (goal <= 2)\n", "ratio", rtt / bare);
    std::printf("%-52s %10.2f M/s (goal >= 50)\n",
                ("ring + proxy, nops (" + std::to_string(o.proxy_threads) + " proxy threads)").c_str(), nops / 1e6);
    std::printf("%-52s %10.2f M/s\n", "8-byte puts through the loop transport", puts / 1e6);
    rr.reset();
    lr.reset();
    kpb::free_mapped(src);
    kpb::free_mapped(dst);
  } catch (const Error& e) {
    die(e.what());
  }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << j.dump(2) << "\n";
    if (!f) die("can't write " + o.json);
  }
  return 0;
}
