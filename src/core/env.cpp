#include "core/env.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/log.hpp"
#include "kinet/kinet.hpp"

namespace kinet::env {
namespace {
constexpr Variable kVariables[] = {
    {"KINET_TIMEOUT_MS", "10000",
     "bound in ms of every wait in the device verbs (QpConfig::timeout_ms = 0 takes it) and tools. "
     "0, negative or not a decimal integer: an error is logged and 10000 is used; above 86400000 (one day): "
     "saturated to 86400000 with a warning",
     "library", false},
    {"KINET_LOG_LEVEL", "warn", "error, warn, info (every error CQE with its reason) or debug; anything else: "
                                "a warning and warn",
     "library", false},
    {"KINET_EMU_RELAXED", "0",
     "1 = the software NIC uses the reordering freedoms the PRM gives a NIC: later WQEs overtake unfenced "
     "reads/atomics, delayed CQEs, remote data visible only at completion. On in the test suite",
     "emu provider", false},
    {"KINET_GID_INDEX", "first RoCE v2 entry",
     "mlx5 on RoCE: the GID table index QPs use (default: the first RoCE v2 entry, IPv4-mapped first)",
     "mlx5 provider", false},
    {"KINET_IBVERBS_LIB", "libibverbs.so.1",
     "mlx5 on hardware: the libibverbs file to dlopen (rdma-core is loaded at run time, never linked)",
     "mlx5 provider", false},
    {"KINET_MLX5_LIB", "libmlx5.so.1", "mlx5 on hardware: the libmlx5 (mlx5dv, DevX) file to dlopen",
     "mlx5 provider", false},
    {"KINET_SOCKET_IFNAME", "first up non-loopback",
     "network interfaces the bootstrap listens and connects on: comma-separated name prefixes, `=name` for an "
     "exact name, a leading `^` excludes; loopback is the last resort",
     "bootstrap", false},
    {"KINET_SOCKET_FAMILY", "any", "AF_INET or AF_INET6: the address family of the bootstrap's interface",
     "bootstrap", false},
    {"KINET_BOOTSTRAP_PORT", "0", "TCP port of the bootstrap root (0: ephemeral)", "bootstrap", false},
    {"KINET_BOOTSTRAP_TIMEOUT_MS", "30000",
     "bound in ms of Bootstrap::init and of each bootstrap call; a rank that does not answer within it is named "
     "in the error; also bounds the NCCL plugin's net connect and GIN posting; above 30 days: 30 days, with a warning",
     "bootstrap", false},
    {"KINET_BOOTSTRAP_MAX_FRAME", "1073741824",
     "largest bootstrap message in bytes; a peer announcing more is treated as lost, and so is one that sent "
     "more than 4 times it (at least 64 MiB) of messages not received yet",
     "bootstrap", false},
    {"KINET_EMU_FABRIC", "local",
     "`tcp`: every software NIC this process opens joins the cross-process fabric (one TCP listener per process "
     "on the interface KINET_SOCKET_IFNAME picks; QpInfo then carries its endpoint); `shm`: the same over shared "
     "memory, with processes of the same boot id and network namespace only (abstract AF_UNIX listener "
     "kinet-shm/<process id>); `auto`: both, shm where the peer is on the same host, else tcp; `local` (or "
     "unset): NICs reach only NICs of their own process. DeviceOptions::emu_fabric overrides it",
     "emu provider", false},
    {"KINET_EMU_PEER_TIMEOUT_MS", "10000",
     "cross-process software NIC: bound in ms of a peer's answer (a response, a connection, a send); past it the "
     "peer counts as lost and its operations complete with error CQEs (syndrome 0x15). Parsed as "
     "KINET_TIMEOUT_MS",
     "emu provider", false},
    {"KINET_TRANSPORT", "auto",
     "provider of Transport::open() when TransportOptions::provider is empty: ucx, ofi, tcp, shm, cuda_ipc, loop, "
     "or auto (the first of ucx, ofi, tcp that is built in and starts here)",
     "transports", false},
    {"KINET_TRANSPORT_TIMEOUT_MS", "10000",
     "transports: bound in ms of each operation's answer when TransportOptions::timeout is 0; past it the peer "
     "counts as lost (\"timeout after N ms waiting for <op> to <peer>\") and its operations complete with "
     "TransportRetryExceeded. Parsed as KINET_TIMEOUT_MS",
     "transports", false},
    {"KINET_EMU_ACK_DELAY_US", "200",
     "cross-process software NIC: how long (0 to 1000000 microseconds) a responder may hold the answers of WRITEs of "
     "unsignalled WQEs back to send them with later ones (at most 64); 0 answers every WRITE at once; more than 1 s "
     "is taken as 1 s, with a warning. A signalled "
     "WQE, a READ, an atomic, an error or a quiet behind them is answered at once and takes the held answers "
     "along. Read once per process",
     "emu provider", false},
    {"KINET_TCP_SPIN_US", "50 (0 below 4 CPUs)",
     "TCP links (the cross-process software NIC's fabric, transport \"tcp\"): how long (0 to 10000 "
     "microseconds) a receiving thread keeps polling its socket after it ran dry before it sleeps: back-to-back "
     "frames then need no wake-up. Default 50 where this process may use 4 or more CPUs, 0 (sleep at once) on "
     "fewer, where the spin would take a CPU from the posters; over 10000 is taken as 10000, with a warning. "
     "Read once per process",
     "emu provider, transports", false},
    {"KINET_EMU_HOST_KICK", "1",
     "software NIC: 1: host threads that post to a QP (QpConfig::posters Host, rings in host memory) run its engine "
     "themselves at each doorbell and CQ poll (no busy NIC thread needed); 0: only the engine thread executes, "
     "as a hardware NIC would, so work stays in flight after the post returns. Read when a QP is created",
     "emu provider", false},
    {"KINET_EMU_KICKED_IDLE_US", "200",
     "software NIC: when every QP of a device is posted by host threads (QpConfig::posters Host, rings in host "
     "memory), those threads run its engine themselves at each doorbell and CQ poll, and the engine thread, once "
     "idle, looks at the QPs only every this many microseconds (1 to 1000000) instead of busy-polling",
     "emu provider", false},
    {"KINET_UCX_MAX_HELD_BYTES", "268435456",
     "transport \"ucx\": bytes of one peer's messages held in memory while they wait for an earlier one "
     "(out of order, or not yet delivered by poll()); past it the peer is lost (\"held N bytes ... more than "
     "KINET_UCX_MAX_HELD_BYTES\"). At least 1048704 (one message of max_message()); a smaller or malformed value "
     "is an error at open",
     "transports", false},
    {"KINET_TEST_SEED", "random", "seed of the tests' random data; every test binary prints the one it used",
     "tests", true},
    {"KINET_TEST_SCALE", "100", "percent applied to stress-loop sizes (the sanitizer builds set it lower)", "tests",
     true},
    {"KINET_TEST_THREADS", "8", "posting threads of the shared-queue tests", "tests", true},
    {"KINET_COMM_TEST_ONLY", "unset", "p2p or proxy: kinet-gpu-comm runs that path alone (both when unset)", "tests",
     true},
    {"KINET_HW_DEVICE", "first mlx5 device",
     "device of the hw suite (label hw): an RDMA device name rdma-core lists (\"mlx5_0\"), or mlx5_emu (the mlx5 "
     "provider over the software NIC). Unset: the first device mlx5dv supports. No libibverbs, no device, or a "
     "device that is not mlx5: every hw test is skipped, naming which",
     "tests", true},
    {"DOCA_SDK_LIB_PATH", "unset",
     "SDK mode: the directory holding the DOCA SDK's libdoca_common.so, libdoca_verbs.so and libdoca_gpunetio.so "
     "(e.g. /opt/mellanox/doca/lib/x86_64-linux-gnu); loaded with dlopen, they make the control-path objects. "
     "Unset or empty: kinet's open control path. A missing library or symbol: one warning naming it and the open "
     "path; an error the SDK returns is thrown, naming the call and its doca_error_t",
     "doca provider", false},
    {"KINET_GDRCOPY", "1",
     "0 = don't use GDRCopy (libgdrapi.so.2, loaded with dlopen when present) for CPU reads of GPU-memory words; "
     "they then use CUDA copies, as when the library or its gdrdrv module is absent (one debug line says why)",
     "library", false},
    {"KINET_DOORBELL_MODE", "auto",
     "doorbell mode of QPs created with QpConfig::doorbell = Auto: auto (uar when the posters reach the doorbell "
     "page, else cpu with one log line saying why), uar (store to the doorbell register), bf (BlueFlame: copy the "
     "WQE into the BlueFlame window), cpu (posters write the doorbell record, a CPU thread rings). Another value: "
     "create_qp throws InvalidArgument; a mode the QP can't have: NotSupported",
     "emu and mlx5 providers", false},
    {"KINET_PROXY_CPUS", "unset",
     "comma-separated CPU numbers: proxy thread i (one per transport of a kinet::Proxy) is pinned to the i-th; "
     "threads beyond the list are not pinned. ProxyConfig::cpus overrides it. Not a list of numbers: the Proxy "
     "constructor throws InvalidArgument",
     "proxy", false},
    {"KINET_NCCL_NET_CUDA", "0",
     "1 = the NCCL plugin's net half takes CUDA memory (NCCL_PTR_CUDA), staged through host buffers with kinet's "
     "bounded CUDA copies; otherwise host memory only and NCCL stages GPU data itself",
     "nccl plugin", false},
    {"KINET_COMM_PATH", "auto",
     "path a kinet::Comm gives its peers when CommConfig::path is empty: auto (p2p through CUDA IPC where the "
     "peer's GPU memory can be mapped, else gdaki where both ranks opened a hardware NIC or CommConfig::device "
     "names one, else proxy), proxy (always the proxy), p2p (p2p to every other rank, else the Comm constructor "
     "throws NotSupported naming the peer), gdaki (RC QPs to every other rank on CommConfig::device, `auto` "
     "taking the software NIC where there is no ConnectX; NotSupported naming the peer where a rank has no NIC). "
     "Another value: InvalidArgument",
     "communicator", false},
    {"KINET_NCCL_LIB", "unset",
     "Bootstrap::from_nccl: the NCCL library to dlopen (it must be the one that created the communicator). "
     "Unset: the NCCL already loaded in the process, else libnccl.so.2",
     "bootstrap", false},
};

std::string row(const Variable& v) {
  return std::string("| `") + v.name + "` | `" + v.default_value + "` | " + v.reader + " | " + v.meaning + " |\n";
}
}  // namespace

std::span<const Variable> variables() { return kVariables; }

std::string markdown() {
  std::string s =
      "# Environment variables\n\n"
      "Generated by `kinet-info --env --markdown` from the table in `src/core/env.cpp`;\n"
      "the test `kinet_core_test` (Env.DocumentMatchesTheTable) fails when this file and that table differ.\n\n"
      "## Library, providers and tools\n\n"
      "| variable | default | read by | meaning |\n|---|---|---|---|\n";
  for (const Variable& v : kVariables)
    if (!v.test_only) s += row(v);
  s += "\n## Test suite only\n\n| variable | default | read by | meaning |\n|---|---|---|---|\n";
  for (const Variable& v : kVariables)
    if (v.test_only) s += row(v);
  return s;
}

uint64_t get_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v, &end, 0);
  // strtoull takes "-1" as 2^64-1: a sign is not an unsigned integer.
  if (errno || *end || std::strchr(v, '-')) {
    KINET_LOG(Warn, "%s=%s is not an unsigned integer; using %llu", name, v, (unsigned long long)fallback);
    return fallback;
  }
  return x;
}
uint64_t get_u64_at_most(const char* name, uint64_t fallback, uint64_t max) {
  const uint64_t x = get_u64(name, fallback);
  if (x <= max) return x;
  KINET_LOG(Warn, "%s=%llu is over %llu; using %llu", name, (unsigned long long)x, (unsigned long long)max,
            (unsigned long long)max);
  return max;
}
std::string get_str(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

uint64_t parse_timeout_ms(const char* value, std::string* problem, const char* name) {
  problem->clear();
  if (!value || !*value) return kDefaultTimeoutMs;
  const std::string shown = std::string(name) + "=" + value;
  const size_t n = std::strlen(value);
  if (std::strspn(value, "0123456789") != n) {  // strtoull would accept "-1", " 5", "0x10"
    *problem = shown + " is not a decimal integer of milliseconds; using the default " +
               std::to_string(kDefaultTimeoutMs);
    return kDefaultTimeoutMs;
  }
  errno = 0;
  const unsigned long long x = std::strtoull(value, nullptr, 10);
  if (errno == 0 && x == 0) {
    *problem = shown + " would make every wait expire at once; using the default " + std::to_string(kDefaultTimeoutMs);
    return kDefaultTimeoutMs;
  }
  if (errno == ERANGE || x > kMaxTimeoutMs) {
    *problem = shown + " is above the largest bound " + std::to_string(kMaxTimeoutMs) + " ms (one day); using " +
               std::to_string(kMaxTimeoutMs);
    return kMaxTimeoutMs;
  }
  return x;
}
}  // namespace kinet::env

namespace kinet {
uint64_t default_timeout_ms() {
  static const uint64_t t = [] {
    std::string problem;
    const uint64_t ms = env::parse_timeout_ms(std::getenv("KINET_TIMEOUT_MS"), &problem);
    if (!problem.empty()) {
      if (ms == env::kMaxTimeoutMs) KINET_LOG(Warn, "%s", problem.c_str());
      else KINET_LOG(Error, "%s", problem.c_str());
    }
    return ms;
  }();
  return t;
}
}  // namespace kinet
