// kinet-perf — command-line parsing and help.
#include "options.hpp"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace kinet::perf {

const char* lat_mode_name(LatMode m) {
  switch (m) {
    case LatMode::Auto: return "auto";
    case LatMode::TwoThreads: return "threads";
    case LatMode::OneThread: return "single";
    case LatMode::Kernels: return "kernels";
  }
  return "?";
}

namespace {

constexpr size_t kDefaultMaxSize = size_t(1) << 20;
constexpr size_t kDemoMaxSize = size_t(64) << 10;

// Printed after CLI11's option list by --help.
constexpr const char* kHelpFooter =
    "\nperftest-style latency and bandwidth between two kinet endpoints in this\n"
    "process (two software NICs on the built-in emu fabric by default). Host\n"
    "threads post through the device verbs (kinet::dev::put/get/fetch_add), or\n"
    "CUDA kernels with --gpu.\n"
    "\n"
    "Sizes take K, M, G suffixes (KiB, MiB, GiB). atomic_lat always moves 8 bytes.\n"
    "Latency is reported in microseconds: half the round trip for write_lat (as\n"
    "ib_write_lat), the full round trip for atomic_lat (as ib_atomic_lat).\n"
    "Bandwidth is MB/sec with MB = 2^20 bytes (as perftest), message rate in Mpps.\n"
    "Exit status: 0 on success, 1 when an operation fails, times out or data does not\n"
    "verify, 2 on bad usage (or --gpu in a build without CUDA), 77 when --gpu finds no\n"
    "CUDA GPU (skipped).\n"
    "\n"
    "Between two processes (or hosts, or network namespaces), perftest style:\n"
    "  kinet-perf --server [--port P]              waits (up to 120 s) for one client\n"
    "  kinet-perf --client HOST[:P] [test options] runs the tests against it\n"
    "Each side opens a software NIC on the cross-process fabric (TCP; the\n"
    "interface is chosen by KINET_SOCKET_IFNAME, as for the bootstrap); the\n"
    "client's test options rule both sides. Before each kinet run the same pair\n"
    "of processes runs a plain TCP baseline of the same size over a socket set up\n"
    "as kinet's TCP link sets up its own (ping-pong for write_lat and atomic_lat,\n"
    "a one-way stream for write_bw and read_bw); the table shows kinet / TCP\n"
    "(goal: latency <= 1.3x, bandwidth >= 0.8x). Two network namespaces:\n"
    "  ip netns exec ns1 kinet-perf --server &\n"
    "  ip netns exec ns2 kinet-perf --client 10.99.0.1 --sweep --max-size 1M\n"
    "(bench/xproc/run.sh builds the namespaces and runs both, then loopback).";

[[noreturn]] void usage_error(const char* argv0, const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n(try --help)\n", argv0, msg.c_str());
  std::exit(2);
}

// A byte count with an optional K/M/G (KiB/MiB/GiB) suffix.
uint64_t parse_size(const char* argv0, std::string_view opt, const std::string& v) {
  if (v.empty()) usage_error(argv0, std::string(opt) + ": empty value");
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || v[0] == '-') usage_error(argv0, std::string(opt) + ": not a number: " + v);
  const std::string_view rest(end);
  uint64_t mul = 1;
  if (rest == "K" || rest == "k" || rest == "KiB") mul = 1ull << 10;
  else if (rest == "M" || rest == "m" || rest == "MiB") mul = 1ull << 20;
  else if (rest == "G" || rest == "g" || rest == "GiB") mul = 1ull << 30;
  else if (!rest.empty()) usage_error(argv0, std::string(opt) + ": bad suffix in " + v);
  if (x > UINT64_MAX / mul) usage_error(argv0, std::string(opt) + ": too large: " + v);
  return x * mul;
}

}  // namespace

Options parse_options(int argc, char** argv) {
  const char* argv0 = argc > 0 ? argv[0] : "kinet-perf";
  Options o;
  for (int i = 0; i < argc; ++i) {
    if (i) o.command_line += ' ';
    o.command_line += argv[i];
  }
  std::string tests = "all", size_s, max_size_s, lat_mode = "auto", pin = "auto", rings = "host";
  uint64_t warmup = 0;
  bool sweep = false, no_inline = false;

  CLI::App app{"kinet-perf: perftest-style latency and bandwidth between two kinet endpoints"};
  app.footer(kHelpFooter);
  app.get_formatter()->column_width(30);
  auto* o_test = app.add_option("--test", tests,
                                "write_lat | write_bw | read_bw | atomic_lat | all (default all); a comma-separated "
                                "list works too (write_lat,write_bw)");
  app.add_flag("--demo", o.demo, "quick start: write_lat and write_bw sweeps up to 64 KiB (a few seconds)");
  auto* o_size = app.add_option("-s,--size", size_s,
                                "one message size (default: 2 B for latency, 64 KiB for bandwidth tests)");
  auto* o_sweep = app.add_flag("-a,--sweep", sweep, "all powers of two from 2 B to --max-size");
  auto* o_max = app.add_option("--max-size", max_size_s, "largest size of --sweep (default 1M)");
  app.add_option("-n,--iters", o.iters,
                 "measured iterations per size (default 1000 for latency, 5000 for bandwidth tests, scaled down "
                 "above 64 KiB so each size stays short; a --client's bandwidth tests: at least 32 MiB per size, "
                 "up to 200000 messages, so that the TCP baseline's stream outgrows its socket buffers)")
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  auto* o_warmup = app.add_option("--warmup", warmup,
                                  "unmeasured iterations before each size (default: latency iters/10, at most 100; "
                                  "bandwidth max(iters/10, 2 x tx-depth x qps))")
                       ->check(CLI::Range(uint64_t{0}, uint64_t{INT64_MAX}));
  app.add_option("-t,--tx-depth", o.tx_depth, "bandwidth tests: operations in flight per QP (default 128)")
      ->check(CLI::Range(1u, 32768u));
  app.add_option("--signal-every", o.signal_every,
                 "bandwidth tests: request a completion every N operations (default tx-depth/4)")
      ->check(CLI::Range(1u, 32768u));
  auto* o_post_list =
      app.add_option("-l,--post-list", o.post_list,
                     "bandwidth tests, host posters: ring the doorbell once per N operations, as perftest's "
                     "--post_list posts a list of N (default 1: a doorbell per operation)")
          ->check(CLI::Range(1u, 32768u));
  app.add_option("-q,--qps", o.qps, "bandwidth tests: QPs per side, used round-robin (default 1)")
      ->check(CLI::Range(1u, 256u));
  app.add_flag("--no-inline", no_inline, "write_lat: never inline payloads (default: inline up to 28 B)");
  auto* o_lat = app.add_option("--lat-mode", lat_mode,
                               "threads: one host thread per endpoint; single: one thread drives both endpoints; "
                               "auto (default): threads with >= 4 CPUs")
                    ->check(CLI::IsMember({"auto", "threads", "single"}));
  app.add_option("--pin", pin,
                 "on: give each posting thread a CPU of its own and the software NIC's engine threads the others; "
                 "off: leave placement to the OS; auto (default): on when busy threads outnumber CPUs")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("-d,--device", o.device, "device to open on each side (default emu: a new software NIC)")
      ->check([](const std::string& v) { return v.empty() ? std::string("empty name") : std::string(); });
  app.add_flag("--gpu", o.gpu,
               "CUDA kernels post instead of host threads; buffers in GPU memory, client on GPU 0, server on GPU 1 "
               "(both on GPU 0 with one GPU). write_lat: one kernel per endpoint (ping-pong); bandwidth tests and "
               "atomic_lat: a kernel on the client GPU, the server passive");
  auto* o_gthreads = app.add_option("--gpu-threads", o.gpu_threads,
                                    "bandwidth tests with --gpu: N threads of one warp (N <= 32) or one CTA post one "
                                    "WQE each per batch (dev::warp_put/cta_put; reads with warp_get/cta_get); "
                                    "default 1 thread (dev::put/get); N <= --tx-depth")
                         ->check(CLI::Range(1u, 1024u));
  auto* o_rings = app.add_option("--rings", rings,
                                 "with --gpu: send rings and CQs in pinned host memory (default) or in GPU memory as "
                                 "on real hardware (the emulator then copies each WQE out)")
                      ->check(CLI::IsMember({"host", "gpu"}));
  app.add_option("--timeout-ms", o.timeout_ms, "bound of every wait (default $KINET_TIMEOUT_MS or 10000)")
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  app.add_option("--json", o.json_path, "write every result, the machine and the command line as JSON")
      ->check([](const std::string& v) { return v.empty() ? std::string("empty file name") : std::string(); });
  app.add_flag("--progress", o.progress, "progress line on stderr even when stderr is not a terminal");
  app.add_option("--seed", o.seed, "seed of the payload bytes (default: random)");
  auto* o_server = app.add_flag("--server", o.server,
                                "cross-process: wait for one --client on --port, run its tests, exit");
  auto* o_client = app.add_option("--client", o.client_of,
                                  "cross-process: run the tests against the --server at HOST[:PORT] (numeric "
                                  "IPv4, [IPv6] or a host name)");
  auto* o_port = app.add_option("--port", o.port,
                                "cross-process: the server's control port (default 18515; 0 with --server: any free "
                                "port, printed)")
                     ->check(CLI::Range(0, 65535));
  bool no_baseline = false;
  app.add_flag("--no-baseline", no_baseline, "cross-process: skip the plain TCP baseline runs");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    usage_error(argv0, e.what());
  }
  o.baseline = !no_baseline;
  if (o_server->count() && o_client->count()) usage_error(argv0, "--server and --client exclude each other");
  if (o_client->count() && o.client_of.empty()) usage_error(argv0, "--client: empty address");
  const bool xproc = o.server || !o.client_of.empty();
  if (o_port->count() && !xproc) usage_error(argv0, "--port needs --server or --client");
  if (o.port == 0 && !o.server) usage_error(argv0, "--port 0 (any free port) is for --server");
  if (no_baseline && !xproc) usage_error(argv0, "--no-baseline needs --client");
  if (xproc && o.gpu) usage_error(argv0, "--gpu runs in one process (not with --server/--client)");
  if (o.server && (o_test->count() || o_size->count() || o_sweep->count() || o.demo || no_baseline))
    usage_error(argv0, "--server takes its tests from the client: give test options to --client");
  if (o_warmup->count()) o.warmup = static_cast<int64_t>(warmup);
  o.inline_small = !no_inline;
  if (lat_mode == "threads") o.lat_mode = LatMode::TwoThreads;
  else if (lat_mode == "single") o.lat_mode = LatMode::OneThread;
  if (pin == "on") o.pin = PinMode::On;
  else if (pin == "off") o.pin = PinMode::Off;
  o.gpu_rings = rings == "gpu";
  const bool lat_mode_given = o_lat->count() > 0, gpu_threads_given = o_gthreads->count() > 0;
  uint64_t size = 0, max_size = kDefaultMaxSize;
  if (o_size->count()) {
    size = parse_size(argv0, "--size", size_s);
    if (size == 0) usage_error(argv0, "--size must be > 0");
  }
  const bool max_size_given = o_max->count() > 0;
  if (max_size_given) max_size = parse_size(argv0, "--max-size", max_size_s);

  if (o.demo) {
    if (o_test->count() || size || o_sweep->count()) usage_error(argv0, "--demo picks its own tests and sizes");
    tests = "write_lat,write_bw";
    sweep = true;
    if (!max_size_given) max_size = kDemoMaxSize;
  }

  // Tests.
  if (tests == "all") {
    o.tests.assign(std::begin(kAllTests), std::end(kAllTests));
  } else {
    size_t pos = 0;
    while (pos <= tests.size()) {
      size_t comma = tests.find(',', pos);
      std::string t = tests.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      auto k = test_from_name(t);
      if (!k) usage_error(argv0, "--test: unknown test '" + t + "' (write_lat, write_bw, read_bw, atomic_lat, all)");
      o.tests.push_back(*k);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }

  // Sizes.
  if (sweep && size) usage_error(argv0, "--size and --sweep exclude each other");
  if (max_size_given && !sweep) usage_error(argv0, "--max-size needs --sweep");
  if (sweep) {
    if (max_size < 2) usage_error(argv0, "--max-size must be >= 2");
    for (size_t s = 2; s <= max_size; s *= 2) o.sizes.push_back(s);
  } else if (size) {
    o.sizes.push_back(size);
  }
  for (size_t s : o.sizes)
    if (s > (size_t(1) << 30)) usage_error(argv0, "message sizes above 1 GiB are not supported");

  if (o.signal_every > o.tx_depth) usage_error(argv0, "--signal-every must be <= --tx-depth");
  if (gpu_threads_given && !o.gpu) usage_error(argv0, "--gpu-threads needs --gpu");
  if (o_post_list->count() && o.gpu)
    usage_error(argv0, "--post-list is for host posters (with --gpu, --gpu-threads posts batches)");
  if (o.post_list > o.tx_depth) usage_error(argv0, "--post-list must be <= --tx-depth");
  if (o_rings->count() && o.gpu_rings && !o.gpu) usage_error(argv0, "--rings gpu needs --gpu (host threads post to rings in host memory)");
  if (o.gpu && lat_mode_given)
    usage_error(argv0, "--lat-mode is for host threads (--gpu runs one kernel per endpoint)");
  if (o.gpu && o.gpu_threads > o.tx_depth)
    usage_error(argv0, "--gpu-threads must be <= --tx-depth (a batch of one WQE per thread must fit in flight)");
  return o;
}

}  // namespace kinet::perf
