// The two-process GPU tests over a Transport (gpu_proxy_test.cu,
// gpu_cuda_ipc_test.cu): the binary spawns itself as `--role requester|target
// --transport P --id HEX`; the children meet through kinet::Bootstrap. Here:
// the child's opening, the proxy poster run (tests/proxy/poster.hpp) both
// sides check, the parent's spawn-and-report and main's dispatch. Output and
// exit codes are the tests' contract: "ROLE: FAIL what" and 1, "ROLE: SKIP
// why" and 77, "[ OK|SKIPPED|FAILED ] label".
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <kinet/bootstrap.hpp>
#include <kinet/kinet.hpp>
#include <kinet/proxy.hpp>

#include "../proxy/poster.hpp"
#include "gpu_harness.hpp"
#include "spawn_pair.hpp"

namespace kgt::two {

// The bound of the children's transport operations and proxy channels.
constexpr uint64_t kTimeoutMs = 20000;

template <kinet::dev::Sharing S, class H> __global__ void k_poster(H h, kinet::test::PosterArgs a, int* st) {
  *st = static_cast<int>(kinet::test::poster<S>(h, a));
}

// The bytes each side starts with (`who` 0: requester, 1: target).
inline std::vector<uint8_t> pattern(size_t n, int who) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 131 + (i >> 9) * 7 + who * 59 + 1) & 0xff);
  return v;
}

// Prints "ROLE: FAIL what"; returns the failing exit status 1.
inline int fail(const char* role, const std::string& what) {
  std::printf("%s: FAIL %s\n", role, what.c_str());
  std::fflush(stdout);
  return 1;
}

// One child: its role, its bootstrap (requester rank 0, target rank 1) and
// the options to open its transport with.
struct Child {
  bool req = false;
  const char* who = "";
  std::unique_ptr<kinet::Bootstrap> bs;
  kinet::TransportOptions opts;
};

// Checks the role, selects GPU 0 and joins the bootstrap (30 s bound).
// Returns 0, or a FAIL line's 1; the bootstrap's errors are thrown.
inline int join(Child& c, const std::string& role, const std::string& provider, const std::string& id_hex,
                uint64_t timeout_ms) {
  c.req = role == "requester";
  c.who = role.c_str();
  if (!c.req && role != "target") return fail(c.who, "unknown role");
  if (cudaSetDevice(0) != cudaSuccess) return fail(c.who, "cudaSetDevice(0)");
  c.bs = kinet::Bootstrap::init(kinet::UniqueId::from_string(id_hex), c.req ? 0 : 1, 2, std::chrono::seconds(30));
  c.opts.provider = provider;
  c.opts.name = role;
  c.opts.timeout = std::chrono::milliseconds(timeout_ms);
  return 0;
}

// The poster's buffer, kPosterBuf bytes of GPU memory: the requester's source and
// zeroed results, or the target's bytes with the atomic word `word0` and a
// zero signal word.
constexpr size_t kPosterBuf = 1 << 16;
inline void poster_fill(uint8_t* buf, bool req, uint64_t word0) {
  std::vector<uint8_t> h = pattern(kPosterBuf, req ? 0 : 1);
  if (req) std::memset(h.data() + 8192, 0, kinet::test::kPosterLocalBytes - 8192);
  else {
    std::memcpy(h.data() + 8192, &word0, 8);
    std::memset(h.data() + 8200, 0, 8);
  }
  cudaMemcpy(buf, h.data(), kPosterBuf, cudaMemcpyHostToDevice);
}

// Requester: one thread runs the poster through `ch` into the target's buffer
// (`rkey`, imported as `rk`), then checks its status, the get and the atomics'
// results. `what` prefixes the FAIL lines. Returns 0 or 1.
inline int poster_requester(const char* who, kinet::ProxyChannel& ch, uint8_t* buf, kinet::Lkey lk,
                            uint64_t raddr, kinet::Rkey rk, uint64_t word0, const std::string& what) {
  using kinet::dev::Sharing;
  int* st = nullptr;
  if (cudaMalloc(&st, sizeof(int)) != cudaSuccess) return fail(who, "cudaMalloc");
  cudaMemset(st, 0xff, sizeof(int));
  k_poster<Sharing::Exclusive><<<1, 1>>>(
      ch.handle(), kinet::test::PosterArgs{buf, lk, raddr, rk, word0, kinet::test::kPosterMaxMany}, st);
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    cudaFree(st);
    return fail(who, std::string("kernel: ") + cudaGetErrorString(e));
  }
  int s = -1;
  cudaMemcpy(&s, st, sizeof s, cudaMemcpyDeviceToHost);
  cudaFree(st);
  int rc = 0;
  if (s != 0)
    rc = fail(who, what + "poster status " + std::to_string(s) + " (" +
                       kinet::status_string(static_cast<kinet::Status>(s)) + ") | " + ch.last_error());
  std::vector<uint8_t> got(kinet::test::kPosterLocalBytes);
  cudaMemcpy(got.data(), buf, got.size(), cudaMemcpyDeviceToHost);
  const std::vector<uint8_t> theirs = pattern(kPosterBuf, 1);
  if (rc == 0 && std::memcmp(got.data() + 4096, theirs.data() + 4096, 2000) != 0)
    rc = fail(who, what + "get data wrong");
  uint64_t res[3];
  std::memcpy(res, got.data() + 8192, 24);
  if (rc == 0 && (res[0] != word0 || res[1] != word0 + 5 || res[2] != 77))
    rc = fail(who, what + "atomic results " + std::to_string(res[0]) + " " + std::to_string(res[1]) + " " +
                       std::to_string(res[2]) + " (" + std::to_string(word0) + " " + std::to_string(word0 + 5) +
                       " 77)");
  return rc;
}

// Target, after the requester is done: its buffer holds the poster's puts,
// put_signal, small puts, the atomic word 77 and signal 1. Returns 0 or 1.
inline int poster_target(const char* who, const uint8_t* buf, const std::string& what) {
  std::vector<uint8_t> got(kinet::test::kPosterRemoteBytes);
  cudaMemcpy(got.data(), buf, got.size(), cudaMemcpyDeviceToHost);
  const std::vector<uint8_t> src = pattern(kPosterBuf, 0);
  uint64_t w = 0, sig = 0;
  std::memcpy(&w, got.data() + 8192, 8);
  std::memcpy(&sig, got.data() + 8200, 8);
  if (std::memcmp(got.data(), src.data(), 3000) != 0) return fail(who, what + "put data wrong");
  if (std::memcmp(got.data() + 3000, src.data() + 100, 500) != 0) return fail(who, what + "put_signal data wrong");
  if (std::memcmp(got.data() + 3500, src.data(), 8 * kinet::test::kPosterMaxMany) != 0)
    return fail(who, what + "small puts wrong");
  if (w != 77 || sig != 1)
    return fail(who, what + "atomic word " + std::to_string(w) + " (77), signal " + std::to_string(sig) + " (1)");
  return 0;
}

// Parent: spawns this binary as requester and target over `provider` (at most
// 120 s) and prints "[ OK|SKIPPED|FAILED ] label". Returns 0 when both passed,
// 77 when one skipped and none failed, 1 otherwise.
inline int run_pair(const std::string& provider, const std::string& label) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return fail("parent", "readlink /proc/self/exe");
  self[len] = 0;
  const char* roles[2] = {"requester", "target"};
  int rc = 0;
  for (const int code : spawn_pair(self, roles, "--transport", provider)) {
    if (code == 77 && rc == 0) rc = 77;
    else if (code != 0 && code != 77) rc = 1;
  }
  std::printf("[ %s ] %s\n", rc == 0 ? "      OK" : rc == 77 ? " SKIPPED" : "  FAILED", label.c_str());
  std::fflush(stdout);
  return rc;
}

// A child: join(), then body(Child&) gives the exit status. An exception is
// a FAIL line (1); with `skip_unsupported`, ErrorCode::NotSupported is a SKIP
// line (77) instead.
template <class F>
int run_child(const std::string& role, const std::string& provider, const std::string& id_hex,
              bool skip_unsupported, F body) {
  const char* who = role.c_str();
  try {
    Child c;
    if (const int rc = join(c, role, provider, id_hex, kTimeoutMs)) return rc;
    return body(c);
  } catch (const kinet::Error& e) {
    if (skip_unsupported && e.code() == kinet::ErrorCode::NotSupported) {
      std::printf("%s: SKIP %s\n", who, e.what());
      return 77;
    }
    return fail(who, e.what());
  } catch (const std::exception& e) {
    return fail(who, e.what());
  }
}

// main: a child (`--role R --transport P --id HEX`) runs run_child(...,
// skip_unsupported, body); the parent runs the KGT tests (no GPU: exit 77).
template <class F> int main(int argc, char** argv, bool skip_unsupported, F body) {
  if (argc == 7 && std::string(argv[1]) == "--role" && std::string(argv[3]) == "--transport" &&
      std::string(argv[5]) == "--id")
    return run_child(argv[2], argv[4], argv[6], skip_unsupported, body);
  return run_all(argc, argv);
}

}  // namespace kgt::two
