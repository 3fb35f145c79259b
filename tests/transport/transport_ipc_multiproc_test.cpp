// Provider cuda_ipc between two processes on a machine without a GPU: the
// real cuda_ipc channel (shm links, the process token in the address) and the
// engine's IPC data path, with CUDA IPC replaced by shared memory: an
// "allocation" is a memfd, its "handle" names /proc/<pid>/fd/<fd> of the
// exporting process, and opening it maps the file (its real size from fstat,
// as the CUDA path takes it from the driver). The parent is the target (it
// opens the child's files: a parent may, under YAMA's ptrace scope 1); the
// forked child posts put, get and put_signal by reference, then exits, and
// the target closes its mapping when it sees the peer gone.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include <cstring>
#include <map>

#include "transport_rig.hpp"
#include "transports/ipc_path.hpp"
#include "transports/msg_wire.hpp"

namespace kinet::test {
namespace {
using namespace std::chrono_literals;
namespace wire = transport::wire;

constexpr size_t kAlloc = 2 << 20, kPut = 1 << 20, kGet = 512 << 10, kPs = 4096;

std::vector<uint8_t> pattern(size_t n, int who) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 131 + (i >> 9) * 7 + who * 59 + 1) & 0xff);
  return v;
}

struct ShmIpc final : transport::IpcMemory {
  struct A {
    uint8_t* p;
    uint64_t size;
    int fd;
  };
  std::vector<A> mine;                   // exported allocations of this process
  std::map<void*, uint64_t> mapped;      // opened here: base -> size
  int opens = 0, closes = 0;
  uint8_t* alloc(uint64_t n) {
    const int fd = memfd_create("kinet-fake-gpu", 0);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(n)) != 0) return nullptr;
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return nullptr;
    mine.push_back({static_cast<uint8_t*>(p), n, fd});
    return static_cast<uint8_t*>(p);
  }
  bool exports(MemoryKind) const override { return true; }
  bool export_alloc(const void* p, Alloc* out, std::string* why) override {
    for (const A& a : mine)
      if (p >= a.p && p < a.p + a.size) {
        out->base = reinterpret_cast<uint64_t>(a.p), out->size = a.size;
        std::snprintf(reinterpret_cast<char*>(out->handle), wire::kIpcHandleBytes, "/proc/%d/fd/%d", getpid(), a.fd);
        return true;
      }
    *why = "not a memfd allocation";
    return false;
  }
  void* open(const uint8_t h[wire::kIpcHandleBytes], uint64_t* size, std::string* why) override {
    char path[wire::kIpcHandleBytes + 1] = {};
    std::memcpy(path, h, wire::kIpcHandleBytes);
    if (std::strncmp(path, "/proc/", 6) != 0) return *why = "not a /proc path", nullptr;
    const int fd = ::open(path, O_RDWR | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0) {
      *why = std::string("can't open ") + path + ": " + std::strerror(errno);
      if (fd >= 0) ::close(fd);
      return nullptr;
    }
    void* p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return *why = "mmap failed", nullptr;
    mapped[p] = static_cast<uint64_t>(st.st_size);
    ++opens;
    *size = static_cast<uint64_t>(st.st_size);
    return p;
  }
  void close(void* base) override {
    munmap(base, mapped[base]);
    mapped.erase(base);
    ++closes;
  }
  MemoryKind mapped_kind() const override { return MemoryKind::Host; }
  emu::CopyResult copy(void* d, MemoryKind dk, const void* s, MemoryKind sk, uint64_t n) override {
    return emu::safe_copy(d, dk, s, sk, n);
  }
};

std::unique_ptr<MsgTransport> ipc_transport(const std::string& name, std::shared_ptr<ShmIpc> mem) {
  return make_transport("cuda_ipc", name, 1024, 20s, std::move(mem));
}

// Length-prefixed messages over a pipe, each read bounded.
bool send_blob(int fd, const std::vector<uint8_t>& b) {
  const uint32_t n = static_cast<uint32_t>(b.size());
  return write(fd, &n, 4) == 4 && (n == 0 || write(fd, b.data(), n) == static_cast<ssize_t>(n));
}
bool read_full(int fd, void* p, size_t n, std::chrono::milliseconds bound) {
  auto* c = static_cast<uint8_t*>(p);
  const auto end = std::chrono::steady_clock::now() + bound;
  while (n) {
    pollfd pf{fd, POLLIN, 0};
    if (std::chrono::steady_clock::now() > end || ::poll(&pf, 1, 100) < 0) return false;
    if (!(pf.revents & (POLLIN | POLLHUP))) continue;
    const ssize_t k = read(fd, c, n);
    if (k <= 0) return false;
    c += k, n -= static_cast<size_t>(k);
  }
  return true;
}
bool recv_blob(int fd, std::vector<uint8_t>* b) {
  uint32_t n = 0;
  if (!read_full(fd, &n, 4, 30s) || n > (1u << 20)) return false;
  b->resize(n);
  return n == 0 || read_full(fd, b->data(), n, 30s);
}

// The child: requester. Exit code 0, or the step that failed (stderr says why).
int requester(int rd, int wr) {
  auto mem = std::make_shared<ShmIpc>();
  uint8_t* a = mem->alloc(kAlloc);
  if (!a) return 10;
  const std::vector<uint8_t> pa = pattern(kAlloc, 1);
  std::memcpy(a, pa.data(), kAlloc);
  auto t = ipc_transport("requester", mem);
  auto reg = t->register_memory(a, kAlloc, kAccessAll);
  std::vector<uint8_t> addr, key;
  if (!send_blob(wr, t->address()) || !recv_blob(rd, &addr) || !recv_blob(rd, &key)) return 11;
  const PeerId p = t->connect(addr, "target");
  const RemoteKey rk = RemoteKey::deserialize(key.data(), key.size());
  const uint32_t k = t->import_key(p, rk);
  if (t->put(p, a + 100, kPut, k, rk.addr, 1) != Status::Ok ||
      t->get(p, a + kPut + 4096, kGet, k, rk.addr + kPut + 8192, 2) != Status::Ok ||
      t->put_signal(p, a + 7, kPs, k, rk.addr + kPut, k, rk.addr + kAlloc - 8, SignalOp::Set, 77, 3) != Status::Ok)
    return 12;
  std::vector<Completion> done;
  Completion c[4];
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (done.size() < 3 && std::chrono::steady_clock::now() < end) {
    const size_t n = t->poll(c, 4);
    done.insert(done.end(), c, c + n);
  }
  if (done.size() != 3) return std::fprintf(stderr, "requester: %zu of 3 completions (%s)\n", done.size(),
                                            t->peer_error(p).c_str()), 13;
  for (const Completion& d : done)
    if (d.status != Status::Ok)
      return std::fprintf(stderr, "requester: operation %llu: %s\n", (unsigned long long)d.cookie,
                          status_string(d.status)), 14;
  const std::vector<uint8_t> theirs = pattern(kAlloc, 2);
  if (std::memcmp(a + kPut + 4096, theirs.data() + kPut + 8192, kGet) != 0) return 15;
  const transport::IpcStats s = t->ipc_path()->stats();
  if (s.refs != 3 || s.fallbacks != 0)
    return std::fprintf(stderr, "requester: %llu references, %llu fallbacks\n", (unsigned long long)s.refs,
                        (unsigned long long)s.fallbacks), 16;
  const uint8_t ok = 1;
  if (write(wr, &ok, 1) != 1) return 17;
  uint8_t bye = 0;
  read_full(rd, &bye, 1, 30s);  // the target verified: then go (the transport closes the link)
  return 0;
}

TEST(CudaIpcMultiproc, ByReferenceBetweenTwoProcessesThenThePeerGoes) {
  int p2c[2], c2p[2];
  ASSERT_EQ(pipe(p2c), 0);
  ASSERT_EQ(pipe(c2p), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(p2c[1]);
    ::close(c2p[0]);
    int rc = 99;
    try {
      rc = requester(p2c[0], c2p[1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "requester: %s\n", e.what());
    }
    _exit(rc);
  }
  ::close(p2c[0]);
  ::close(c2p[1]);
  auto mem = std::make_shared<ShmIpc>();
  std::vector<uint8_t> region = pattern(kAlloc, 2);
  std::memset(region.data(), 0, kPut + 4096);  // put and put_signal destinations
  std::memset(region.data() + kAlloc - 8, 0, 8);
  auto t = ipc_transport("target", mem);
  auto reg = t->register_memory(region.data(), kAlloc, kAccessAll);
  std::vector<uint8_t> addr;
  ASSERT_TRUE(recv_blob(c2p[0], &addr));
  ASSERT_TRUE(send_blob(p2c[1], t->address()));
  ASSERT_TRUE(send_blob(p2c[1], reg->remote_key().serialize()));
  const PeerId p = t->connect(addr, "requester");
  // Serve until the requester says it is done (bounded).
  Completion c[4];
  bool done = false;
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (!done && std::chrono::steady_clock::now() < end) {
    t->poll(c, 4);
    pollfd pf{c2p[0], POLLIN, 0};
    if (::poll(&pf, 1, 0) > 0) {
      uint8_t b = 0;
      done = read(c2p[0], &b, 1) == 1 && b == 1;
      if (!done) break;  // the child died before it was done
    }
  }
  EXPECT_TRUE(done) << "the requester did not finish: " << t->peer_error(p);
  const std::vector<uint8_t> pa = pattern(kAlloc, 1);
  EXPECT_EQ(0, std::memcmp(region.data(), pa.data() + 100, kPut)) << "put data";
  EXPECT_EQ(0, std::memcmp(region.data() + kPut, pa.data() + 7, kPs)) << "put_signal data";
  uint64_t w = 0;
  std::memcpy(&w, region.data() + kAlloc - 8, 8);
  EXPECT_EQ(w, 77u);
  const transport::IpcStats s = t->ipc_path()->stats();
  EXPECT_EQ(s.pulls, 2u);
  EXPECT_EQ(s.pushes, 1u);
  EXPECT_EQ(mem->opens, 1) << "one allocation, mapped once";
  EXPECT_EQ(t->ipc_path()->mappings(p), 1u);
  const uint8_t bye = 1;
  EXPECT_EQ(write(p2c[1], &bye, 1), 1);
  int status = -1;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "requester exit status " << status;
  // The requester is gone: the target sees it lost and closes its mapping.
  const auto end2 = std::chrono::steady_clock::now() + 20s;
  while (t->peer_error(p).empty() && std::chrono::steady_clock::now() < end2) t->poll(c, 4);
  EXPECT_NE(t->peer_error(p), "");
  EXPECT_EQ(t->ipc_path()->mappings(p), 0u);
  EXPECT_EQ(mem->closes, mem->opens);
  ::close(p2c[1]);
  ::close(c2p[0]);
}

}  // namespace
}  // namespace kinet::test
