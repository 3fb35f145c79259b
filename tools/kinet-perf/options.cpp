// kinet-perf — command-line parsing and help.
#include "options.hpp"

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

void print_help(const char* argv0) {
  std::printf(
      "Usage: %s [options]\n"
      "perftest-style latency and bandwidth between two kinet endpoints in this\n"
      "process (two software NICs on the built-in emu fabric by default). Host\n"
      "threads post through the device verbs (kinet::dev::put/get/fetch_add), or\n"
      "CUDA kernels with --gpu.\n"
      "\n"
      "Tests:\n"
      "  --test T          write_lat | write_bw | read_bw | atomic_lat | all (default all);\n"
      "                    a comma-separated list works too (write_lat,write_bw)\n"
      "  --demo            quick start: write_lat and write_bw sweeps up to 64 KiB (a few seconds)\n"
      "\n"
      "Sizes (K, M suffixes = KiB, MiB):\n"
      "  --size N          one message size (default: 2 B for latency, 64 KiB for bandwidth tests)\n"
      "  --sweep           all powers of two from 2 B to --max-size\n"
      "  --max-size N      largest size of --sweep (default 1M)\n"
      "  atomic_lat always moves 8 bytes.\n"
      "\n"
      "Iterations and queues:\n"
      "  --iters N         measured iterations per size (default 1000 for latency, 5000 for\n"
      "                    bandwidth tests, scaled down above 64 KiB so each size stays short)\n"
      "  --warmup N        unmeasured iterations before each size (default: latency iters/10,\n"
      "                    at most 100; bandwidth max(iters/10, 2 x tx-depth x qps))\n"
      "  --tx-depth N      bandwidth tests: operations in flight per QP (default 128)\n"
      "  --signal-every N  bandwidth tests: request a completion every N operations\n"
      "                    (default tx-depth/4)\n"
      "  --qps N           bandwidth tests: QPs per side, used round-robin (default 1)\n"
      "  --no-inline       write_lat: never inline payloads (default: inline up to 28 B)\n"
      "  --lat-mode M      threads: one host thread per endpoint; single: one thread drives\n"
      "                    both endpoints; auto (default): threads with >= 4 CPUs\n"
      "  --pin P           on: give each posting thread a CPU of its own and the software\n"
      "                    NIC's engine threads the others; off: leave placement to the OS;\n"
      "                    auto (default): on when busy threads outnumber CPUs\n"
      "\n"
      "GPU runner (built when CUDA is enabled):\n"
      "  --gpu             CUDA kernels post instead of host threads; buffers in GPU memory,\n"
      "                    client on GPU 0, server on GPU 1 (both on GPU 0 with one GPU).\n"
      "                    write_lat: one kernel per endpoint (ping-pong); bandwidth tests and\n"
      "                    atomic_lat: a kernel on the client GPU, the server passive\n"
      "  --gpu-threads N   bandwidth tests with --gpu: N threads of one warp (N <= 32) or one\n"
      "                    CTA post one WQE each per batch (dev::warp_put/cta_put; reads with\n"
      "                    warp_get/cta_get); default 1 thread (dev::put/get); N <= --tx-depth\n"
      "  --rings host|gpu  with --gpu: send rings and CQs in pinned host memory (default) or in\n"
      "                    GPU memory as on real hardware (the emulator then copies each WQE out)\n"
      "\n"
      "Setup and output:\n"
      "  --device NAME     device to open on each side (default emu: a new software NIC)\n"
      "  --timeout-ms N    bound of every wait (default $KINET_TIMEOUT_MS or 10000)\n"
      "  --json FILE       write every result, the machine and the command line as JSON\n"
      "  --progress        progress line on stderr even when stderr is not a terminal\n"
      "  --seed N          seed of the payload bytes (default: random)\n"
      "  -h, --help        this text\n"
      "\n"
      "Latency is reported in microseconds: half the round trip for write_lat (as\n"
      "ib_write_lat), the full round trip for atomic_lat (as ib_atomic_lat).\n"
      "Bandwidth is MB/sec with MB = 2^20 bytes (as perftest), message rate in Mpps.\n"
      "Exit status: 0 on success, 1 when an operation fails, times out or data does not\n"
      "verify, 2 on bad usage (or --gpu in a build without CUDA), 77 when --gpu finds no\n"
      "CUDA GPU (skipped).\n",
      argv0);
}

[[noreturn]] void usage_error(const char* argv0, const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n(try --help)\n", argv0, msg.c_str());
  std::exit(2);
}

uint64_t parse_u64(const char* argv0, std::string_view opt, const std::string& v, bool allow_suffix) {
  if (v.empty()) usage_error(argv0, std::string(opt) + ": empty value");
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || v[0] == '-') usage_error(argv0, std::string(opt) + ": not a number: " + v);
  std::string_view rest(end);
  uint64_t mul = 1;
  if (allow_suffix && !rest.empty()) {
    if (rest == "K" || rest == "k" || rest == "KiB") mul = 1ull << 10;
    else if (rest == "M" || rest == "m" || rest == "MiB") mul = 1ull << 20;
    else if (rest == "G" || rest == "g" || rest == "GiB") mul = 1ull << 30;
    else usage_error(argv0, std::string(opt) + ": bad suffix in " + v);
    rest = {};
  }
  if (!rest.empty()) usage_error(argv0, std::string(opt) + ": not a number: " + v);
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
  std::string tests = "all";
  bool tests_given = false, sweep = false;
  uint64_t size = 0, max_size = kDefaultMaxSize;
  bool max_size_given = false;
  bool lat_mode_given = false, gpu_threads_given = false;

  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string val;
    bool has_inline_val = false;
    if (a.rfind("--", 0) == 0) {
      auto eq = a.find('=');
      if (eq != std::string::npos) {
        val = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_inline_val = true;
      }
    }
    auto value = [&]() -> std::string {
      if (has_inline_val) return val;
      if (i + 1 >= argc) usage_error(argv0, a + " needs a value");
      return argv[++i];
    };
    auto flag = [&]() {
      if (has_inline_val) usage_error(argv0, a + " takes no value");
    };
    if (a == "-h" || a == "--help") {
      print_help(argv0);
      std::exit(0);
    } else if (a == "--test") {
      tests = value();
      tests_given = true;
    } else if (a == "--demo") {
      flag();
      o.demo = true;
    } else if (a == "--size" || a == "-s") {
      size = parse_u64(argv0, a, value(), true);
      if (size == 0) usage_error(argv0, "--size must be > 0");
    } else if (a == "--sweep" || a == "-a") {
      flag();
      sweep = true;
    } else if (a == "--max-size") {
      max_size = parse_u64(argv0, a, value(), true);
      max_size_given = true;
    } else if (a == "--iters" || a == "-n") {
      o.iters = parse_u64(argv0, a, value(), false);
      if (o.iters == 0) usage_error(argv0, "--iters must be > 0");
    } else if (a == "--warmup") {
      o.warmup = static_cast<int64_t>(parse_u64(argv0, a, value(), false));
    } else if (a == "--tx-depth" || a == "-t") {
      uint64_t d = parse_u64(argv0, a, value(), false);
      if (d < 1 || d > 32768) usage_error(argv0, "--tx-depth must be 1..32768");
      o.tx_depth = static_cast<uint32_t>(d);
    } else if (a == "--signal-every") {
      uint64_t d = parse_u64(argv0, a, value(), false);
      if (d < 1 || d > 32768) usage_error(argv0, "--signal-every must be 1..32768");
      o.signal_every = static_cast<uint32_t>(d);
    } else if (a == "--qps" || a == "-q") {
      uint64_t q = parse_u64(argv0, a, value(), false);
      if (q < 1 || q > 256) usage_error(argv0, "--qps must be 1..256");
      o.qps = static_cast<uint32_t>(q);
    } else if (a == "--no-inline") {
      flag();
      o.inline_small = false;
    } else if (a == "--lat-mode") {
      std::string m = value();
      if (m == "auto") o.lat_mode = LatMode::Auto;
      else if (m == "threads") o.lat_mode = LatMode::TwoThreads;
      else if (m == "single") o.lat_mode = LatMode::OneThread;
      else usage_error(argv0, "--lat-mode: expected auto, threads or single, got " + m);
      lat_mode_given = true;
    } else if (a == "--pin") {
      std::string m = value();
      if (m == "auto") o.pin = PinMode::Auto;
      else if (m == "on") o.pin = PinMode::On;
      else if (m == "off") o.pin = PinMode::Off;
      else usage_error(argv0, "--pin: expected auto, on or off, got " + m);
    } else if (a == "--device" || a == "-d") {
      o.device = value();
      if (o.device.empty()) usage_error(argv0, "--device: empty name");
    } else if (a == "--gpu") {
      flag();
      o.gpu = true;
    } else if (a == "--rings") {
      const std::string m = value();
      if (m == "gpu") o.gpu_rings = true;
      else if (m != "host") usage_error(argv0, "--rings: expected host or gpu, got " + m);
    } else if (a == "--gpu-threads") {
      uint64_t t = parse_u64(argv0, a, value(), false);
      if (t < 1 || t > 1024) usage_error(argv0, "--gpu-threads must be 1..1024");
      o.gpu_threads = static_cast<uint32_t>(t);
      gpu_threads_given = true;
    } else if (a == "--json") {
      o.json_path = value();
      if (o.json_path.empty()) usage_error(argv0, "--json: empty file name");
    } else if (a == "--progress") {
      flag();
      o.progress = true;
    } else if (a == "--timeout-ms") {
      o.timeout_ms = parse_u64(argv0, a, value(), false);
      if (o.timeout_ms == 0) usage_error(argv0, "--timeout-ms must be > 0");
    } else if (a == "--seed") {
      o.seed = parse_u64(argv0, a, value(), false);
    } else {
      usage_error(argv0, "unknown option " + a);
    }
  }

  if (o.demo) {
    if (tests_given || size || sweep) usage_error(argv0, "--demo picks its own tests and sizes");
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
  if (o.gpu_rings && !o.gpu) usage_error(argv0, "--rings gpu needs --gpu (host threads post to rings in host memory)");
  if (o.gpu && lat_mode_given)
    usage_error(argv0, "--lat-mode is for host threads (--gpu runs one kernel per endpoint)");
  if (o.gpu && o.gpu_threads > o.tx_depth)
    usage_error(argv0, "--gpu-threads must be <= --tx-depth (a batch of one WQE per thread must fit in flight)");
  return o;
}

}  // namespace kinet::perf
