// One process of a cross-process software NIC test (fabric_multiproc_test,
// fabric_netns_test). Rank 0 is the requester, rank 1 the responder; they
// meet through kinet::Bootstrap (rank 0 writes the unique id to --id-file),
// open an emu device on the --fabric (tcp, shm, auto), exchange QP infos and
// remote keys (RemoteKey blobs), connect
// kQps QP pairs and run --scenario:
//   ops     every operation (WRITE large/small/inline/gather, READ large/
//           scatter, FETCH_ADD, COMPARE_SWAP, NOP), more WQEs than ring slots,
//           transfers over fabric::kMaxChunk; both sides verify byte for byte.
//   errors  remote-side faults and an unreadable source, one per QP: prints "CASE <name> <status number> | <last_error>".
//   kill    a batch completes, then the responder dies (SIGKILL); the
//           requester's next operations must fail: prints "LOST <status number> <ms> | <last_error>",
//           "STATE <qp state>", "TEARDOWN <ms to destroy QPs and device>".
//   cut     as kill, but the responder takes its interface (--cut-if) down
//           and stays silent: the requester's operations time out.
//   stall   as kill, but the responder stops (SIGSTOP): connected and silent,
//           the requester's operations time out; the requester then kills it.
// Last line: "OK" (exit 0), "FAIL <what>" (exit 4), "ERROR <code> <message>" (exit 3).
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kinet/bootstrap.hpp"
#include "kinet/kinet.hpp"
#include "../common/idle_backoff.hpp"

namespace {
namespace dev = kinet::dev;
using kinet::Status;
using Clock = std::chrono::steady_clock;
constexpr auto X = dev::Sharing::Exclusive;
constexpr int kQps = 5;
constexpr uint32_t kDepth = 16;                   // ring slots: the small-write loop posts many more
constexpr size_t kBuf = 6u << 20;                 // each side's main buffer
constexpr size_t kBig = (5u << 19) + 123;         // 2.5 MiB + 123: over kMaxChunk, not a multiple of it
constexpr size_t kAtomicOff = kBuf - 64;          // the atomic word in the responder's buffer
constexpr uint64_t kAtomicInit = 0x1000;
constexpr size_t kAcksBytes = 64 * 1024;          // what the "acks" scenario writes

[[noreturn]] void fail(const std::string& what) {
  std::printf("FAIL %s\n", what.c_str());
  std::fflush(stdout);
  std::_Exit(4);
}
void line(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}
uint8_t pat(int who, size_t i) { return static_cast<uint8_t>((i * 131 + (i >> 9) * 7 + who * 59 + 1) & 0xff); }

// What each side publishes: its pid, its regions' remote keys and its QPs'
// info, as blobs (RemoteKey, QpInfo), each preceded by its u32 length.
struct Card {
  int32_t pid = 0;
  kinet::RemoteKey key, ro_key, pre_key;  // pre: where kill/cut/stall's first batch lands
  std::vector<std::vector<uint8_t>> qps;
  std::vector<uint8_t> pack() const {
    std::vector<uint8_t> b(4);
    std::memcpy(b.data(), &pid, 4);
    auto add = [&](const std::vector<uint8_t>& blob) {
      const uint32_t n = static_cast<uint32_t>(blob.size());
      b.insert(b.end(), reinterpret_cast<const uint8_t*>(&n), reinterpret_cast<const uint8_t*>(&n) + 4);
      b.insert(b.end(), blob.begin(), blob.end());
    };
    add(key.serialize());
    add(ro_key.serialize());
    add(pre_key.serialize());
    for (auto& q : qps) add(q);
    return b;
  }
  static Card unpack(const std::vector<uint8_t>& b) {
    Card c;
    if (b.size() < 4) fail("short card");
    std::memcpy(&c.pid, b.data(), 4);
    std::vector<std::vector<uint8_t>> blobs;
    size_t off = 4;
    while (off + 4 <= b.size()) {
      uint32_t n;
      std::memcpy(&n, b.data() + off, 4);
      off += 4;
      if (n > b.size() - off) fail("bad card");
      blobs.emplace_back(b.begin() + off, b.begin() + off + n);
      off += n;
    }
    if (off != b.size() || blobs.size() < 3) fail("bad card");
    c.key = kinet::RemoteKey::deserialize(blobs[0].data(), blobs[0].size());
    c.ro_key = kinet::RemoteKey::deserialize(blobs[1].data(), blobs[1].size());
    c.pre_key = kinet::RemoteKey::deserialize(blobs[2].data(), blobs[2].size());
    c.qps.assign(blobs.begin() + 3, blobs.end());
    return c;
  }
};

struct Side {
  std::unique_ptr<kinet::Device> dev;
  std::unique_ptr<kinet::ProtectionDomain> pd;
  std::vector<uint8_t> buf, ro, pre;
  std::unique_ptr<kinet::MemoryRegion> mr, ro_mr, pre_mr;
  std::vector<std::unique_ptr<kinet::QueuePair>> qps;
  Card peer;
};

// A WRITE or READ of two SGEs (gather / scatter), built from a one-SGE WQE
// by appending a second data segment (DS 3 -> 4).
Status post_two_sge(const dev::QpHandle& h, bool read, uint8_t* a, uint32_t la, uint8_t* b, uint32_t lb,
                    kinet::Lkey lkey, uint64_t raddr, kinet::Rkey rkey) {
  uint64_t idx;
  if (Status s = dev::reserve<X>(h, 1, &idx); s != Status::Ok) return s;
  if (read) dev::prepare_read<X>(h, idx, a, lkey, raddr, rkey, la, dev::kSignal);
  else dev::prepare_write<X>(h, idx, a, lkey, raddr, rkey, la, dev::kSignal);
  uint8_t* w = h.sq + (idx & (h.size() - 1)) * 64;
  w[7] = 4;  // DS
  auto put32 = [](uint8_t* p, uint32_t v) { p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = uint8_t(v); };
  put32(w + 48, lb);
  std::memcpy(w + 52, &lkey, 4);  // already big-endian
  const uint64_t addr = reinterpret_cast<uint64_t>(b);
  put32(w + 56, static_cast<uint32_t>(addr >> 32));
  put32(w + 60, static_cast<uint32_t>(addr));
  if (Status s = dev::publish<X>(h, idx, 1); s != Status::Ok) return s;
  return dev::ring_doorbell<X>(h, idx + 1);
}

void expect_ok(Status s, const std::string& what, const kinet::QueuePair& q) {
  if (s != Status::Ok) fail(what + ": " + kinet::status_string(s) + " | " + q.last_error());
}

void requester_ops(Side& s) {
  auto& q = *s.qps[0];
  const auto h = q.handle();
  uint8_t* L = s.buf.data();
  const auto lk = s.mr->lkey();
  const uint64_t R = s.peer.key.addr;
  const auto rk = s.peer.key.key();
  // Large WRITE: L[0, kBig) -> R[0, kBig).
  expect_ok(dev::put<X>(h, L, lk, R, rk, kBig, dev::kSignal), "large put", q);
  // 300 small WRITEs of 64 B (ring of 16 slots), R[kBig + 64 i].
  for (int i = 0; i < 300; ++i)
    expect_ok(dev::put<X>(h, L + kBig + 64 * i, lk, R + kBig + 64 * i, rk, 64, 0), "small put", q);
  size_t off = kBig + 64 * 300;
  // Inline WRITE of the most one basic block holds.
  uint8_t inl[kinet::mlx5::kMaxInlineOneBB];
  for (size_t i = 0; i < sizeof inl; ++i) inl[i] = pat(0, off + i);
  expect_ok(dev::put_inline<X>(h, inl, sizeof inl, R + off, rk, 0), "inline put", q);
  off += sizeof inl;
  // Gather WRITE: two local pieces -> one remote range.
  expect_ok(post_two_sge(h, false, L + off, 1000, L + off + 1000, 3000, lk, R + off, rk), "gather put", q);
  off += 4000;
  expect_ok(dev::quiet<X>(h), "quiet after writes", q);
  // READ large: R[kBuf/2 .. +1.5 MiB) (the responder's own pattern) -> L same offsets.
  const size_t roff = kBuf / 2, rlen = (3u << 19) + 7;
  std::memset(L + roff, 0, rlen);
  expect_ok(dev::get<X>(h, L + roff, lk, R + roff, rk, rlen, dev::kSignal), "large get", q);
  // Scatter READ: R[roff + rlen, +5000) -> two local pieces.
  const size_t soff = roff + rlen;
  std::memset(L + soff, 0, 5000);
  expect_ok(post_two_sge(h, true, L + soff + 3000, 2000, L + soff, 3000, lk, R + soff, rk), "scatter get", q);
  // Atomics on the responder's word (initially kAtomicInit), results in L's tail.
  uint64_t* res = reinterpret_cast<uint64_t*>(L + kBuf - 256);
  res[0] = res[1] = res[2] = ~0ull;
  expect_ok(dev::fetch_add<X>(h, &res[0], lk, R + kAtomicOff, rk, 5, 0), "fetch_add", q);
  expect_ok(dev::compare_swap<X>(h, &res[1], lk, R + kAtomicOff, rk, kAtomicInit + 5, 77, 0), "cas hit", q);
  expect_ok(dev::compare_swap<X>(h, &res[2], lk, R + kAtomicOff, rk, 1, 99, 0), "cas miss", q);
  dev::Ticket t;
  expect_ok(dev::nop<X>(h, dev::kSignal, &t), "nop", q);
  expect_ok(dev::wait<X>(h, t), "wait nop", q);
  expect_ok(dev::quiet<X>(h), "quiet", q);
  for (size_t i = 0; i < rlen; ++i)
    if (L[roff + i] != pat(1, roff + i)) fail("large READ byte " + std::to_string(i) + " differs");
  for (size_t i = 0; i < 3000; ++i)
    if (L[soff + i] != pat(1, soff + 2000 + i)) fail("scatter READ (second SGE) byte " + std::to_string(i));
  for (size_t i = 0; i < 2000; ++i)
    if (L[soff + 3000 + i] != pat(1, soff + i)) fail("scatter READ (first SGE) byte " + std::to_string(i));
  if (res[0] != kAtomicInit) fail("fetch_add old value " + std::to_string(res[0]));
  if (res[1] != kAtomicInit + 5) fail("compare_swap (hit) old value " + std::to_string(res[1]));
  if (res[2] != 77) fail("compare_swap (miss) old value " + std::to_string(res[2]));
}

// Held answers (KINET_EMU_ACK_DELAY_US, set to 1 s by the test): what waits
// for completions must not wait for the delay. Prints the milliseconds each
// wait took; the responder checks the bytes of all of them.
void requester_acks(Side& s) {
  kinet::QueuePair& q = *s.qps[0];
  const dev::QpHandle h = q.handle();
  uint8_t* L = s.buf.data();
  const uint64_t R = s.peer.key.addr;
  const auto lk = s.mr->lkey();
  const auto rk = s.peer.key.key();
  for (size_t i = 0; i < kAcksBytes; ++i) L[i] = pat(0, i);
  size_t off = 0;
  auto unsignalled = [&](int n) {
    for (int i = 0; i < n; ++i, off += 64) expect_ok(dev::put<X>(h, L + off, lk, R + off, rk, 64, 0), "unsignalled put", q);
  };
  auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  };
  // Three: fewer than the ring's signal period (a periodic CQE request would
  // make the third WRITE signalled, and its answer would go at once).
  auto t0 = Clock::now();
  unsignalled(3);
  expect_ok(dev::quiet<X>(h), "quiet after unsignalled puts", q);  // a signalled NOP: sends a Flush
  line("QUIET_MS " + std::to_string(ms_since(t0)));
  t0 = Clock::now();
  unsignalled(3);
  dev::Ticket t;
  expect_ok(dev::put<X>(h, L + off, lk, R + off, rk, 64, dev::kSignal, &t), "signalled put", q);
  off += 64;
  expect_ok(dev::wait<X>(h, t), "wait for the signalled put", q);
  line("SIGNALLED_MS " + std::to_string(ms_since(t0)));
  t0 = Clock::now();
  unsignalled(static_cast<int>((kAcksBytes - off) / 64));  // many times the ring: reuses slots
  expect_ok(dev::quiet<X>(h), "quiet after the stream", q);
  line("STREAM_MS " + std::to_string(ms_since(t0)));
}

// Three unsignalled WRITEs whose answers the responder holds (delay 1 s),
// then nothing for 1.3 s (past the 400 ms peer timeout), then a quiet.
void requester_held(Side& s) {
  kinet::QueuePair& q = *s.qps[0];
  const dev::QpHandle h = q.handle();
  for (size_t i = 0; i < 3 * 64; ++i) s.buf[i] = pat(0, i);
  for (int i = 0; i < 3; ++i)
    expect_ok(dev::put<X>(h, s.buf.data() + 64 * i, s.mr->lkey(), s.peer.key.addr + 64 * i, s.peer.key.key(), 64, 0),
              "unsignalled put", q);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  expect_ok(dev::quiet<X>(h), "quiet after answers held past the peer timeout", q);
}

void responder_verify(Side& s) {
  const uint8_t* R = s.buf.data();
  const size_t end = kBig + 64 * 300 + kinet::mlx5::kMaxInlineOneBB + 4000;
  for (size_t i = 0; i < end; ++i)
    if (R[i] != pat(0, i)) fail("WRITE byte " + std::to_string(i) + " differs: " + std::to_string(R[i]));
  for (size_t i = end; i < kBuf / 2; ++i)
    if (R[i] != pat(1, i)) fail("byte " + std::to_string(i) + " past the WRITEs changed");
  uint64_t v;
  std::memcpy(&v, R + kAtomicOff, 8);
  if (v != 77) fail("atomic word is " + std::to_string(v) + ", expected 77");
}

void requester_errors(Side& s) {
  const uint64_t R = s.peer.key.addr;
  const auto lk = s.mr->lkey();
  uint8_t* L = s.buf.data();
  const auto rk = s.peer.key.key();
  auto run = [&](int qi, const char* name, auto post) {
    auto& q = *s.qps[qi];
    dev::Ticket t;
    Status st = post(q.handle(), &t);
    if (st == Status::Ok) st = dev::wait<X>(q.handle(), t);
    line(std::string("CASE ") + name + " " + std::to_string(static_cast<int>(st)) + " | " + q.last_error());
  };
  run(1, "bad_rkey", [&](const dev::QpHandle& h, dev::Ticket* t) {
    return dev::put<X>(h, L, lk, R, kinet::Rkey{kinet::detail::bswap32_constexpr(s.peer.key.rkey ^ 0x01)}, 64, 0, t);  // same index, another generation
  });
  run(2, "out_of_bounds", [&](const dev::QpHandle& h, dev::Ticket* t) {
    return dev::put<X>(h, L, lk, R + kBuf - 4, rk, 8, 0, t);  // 4 bytes past the end
  });
  run(3, "no_write_access", [&](const dev::QpHandle& h, dev::Ticket* t) {
    return dev::put<X>(h, L, lk, s.peer.ro_key.addr, s.peer.ro_key.key(), 16, 0, t);
  });
  run(4, "misaligned_atomic", [&](const dev::QpHandle& h, dev::Ticket* t) {
    return dev::fetch_add<X>(h, reinterpret_cast<uint64_t*>(L), lk, R + kAtomicOff + 4, rk, 1, 0, t);
  });
#if !defined(__SANITIZE_THREAD__)  // fault recovery inside TSan's memcpy interceptor is not supported
  // A source that lost its access under its registration (a misuse): a
  // local protection error, never a crash. 32 KiB: over tcp such a WRITE
  // leaves from the region itself (RemotePeer::payload_in_place).
  const size_t n = 64 * 1024;
  auto* m = static_cast<uint8_t*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (m == MAP_FAILED) fail("mmap");
  auto mr = s.pd->reg_mr(m, n, kinet::kAccessAll);
  if (mprotect(m + n / 2, n / 2, PROT_NONE) != 0) fail("mprotect");
  run(0, "unreadable_source", [&](const dev::QpHandle& h, dev::Ticket* t) {
    return dev::put<X>(h, m + n / 2, mr->lkey(), R, rk, 32 * 1024, 0, t);
  });
  mr.reset();
  munmap(m, n);
#endif
  // The last good byte still passes (on a fresh QP pair? all are in ERROR): checked by "ops".
}

// dev::wait's result, but the waiting done with dev::test and a back-off
// (tests/common/idle_backoff.hpp): the loss of the peer takes up to the peer
// timeout to notice, and dev::wait spins through it. Bounded by the QP's own
// timeout; dev::wait then decides.
Status wait_backing_off(kinet::QueuePair& q, dev::Ticket t) {
  const auto end = Clock::now() + std::chrono::nanoseconds(q.handle().timeout_ns);
  kinet::test::IdleBackoff idle;
  while (dev::test<X>(q.handle(), t) == Status::Pending && Clock::now() < end) idle();
  return dev::wait<X>(q.handle(), t);
}

// kill / cut: a batch completes; `go` tells the responder to die; then
// WRITEs until one fails.
void requester_lose_peer(Side& s, kinet::Bootstrap& bs) {
  auto& q = *s.qps[0];
  const auto h = q.handle();
  const auto lk = s.mr->lkey();
  const auto rk = s.peer.key.key();
  for (int i = 0; i < 40; ++i)
    expect_ok(dev::put<X>(h, s.buf.data() + 4096 * i, lk, s.peer.pre_key.addr + 4096 * i, s.peer.pre_key.key(), 4096,
                          0),
              "put before", q);
  expect_ok(dev::quiet<X>(h), "quiet before the fault", q);
  bs.barrier();  // the responder verifies the batch, then fails
  bs.barrier();
  const auto t0 = Clock::now();
  Status st = Status::Ok;
  for (int i = 0; i < 100000 && st == Status::Ok; ++i) {
    dev::Ticket t;
    st = dev::put<X>(h, s.buf.data(), lk, s.peer.key.addr, rk, 4096, dev::kSignal, &t);
    if (st == Status::Ok) st = wait_backing_off(q, t);
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  line("LOST " + std::to_string(static_cast<int>(st)) + " " + std::to_string(ms) + " | " + q.last_error());
  line(std::string("STATE ") + kinet::qp_state_name(q.state()));
  // Survivors tear down promptly.
  const auto t1 = Clock::now();
  s.qps.clear();
  s.dev.reset();
  const auto td = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t1).count();
  line("TEARDOWN " + std::to_string(td));
}
}  // namespace

int main(int argc, char** argv) {
  std::string id_file, scenario = "ops", cut_if, fabric = "tcp";
  int rank = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--id-file") id_file = v;
    else if (k == "--rank") rank = std::atoi(v.c_str());
    else if (k == "--scenario") scenario = v;
    else if (k == "--cut-if") cut_if = v;
    else if (k == "--fabric") fabric = v;
    else fail("unknown option " + k);
  }
  if (rank != 0 && rank != 1) fail("--rank 0|1");
  std::unique_ptr<kinet::Bootstrap> bs;
  try {
    kinet::UniqueId id{};
    if (rank == 0) {
      id = kinet::UniqueId::create();
      {
        std::ofstream f(id_file + ".tmp");
        f << id.to_string() << "\n";
      }
      std::rename((id_file + ".tmp").c_str(), id_file.c_str());
    } else {
      std::string hex;
      const auto deadline = Clock::now() + std::chrono::seconds(20);
      while (hex.size() != 256 && Clock::now() < deadline) {
        std::ifstream f(id_file);
        std::getline(f, hex);
        if (hex.size() != 256) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      id = kinet::UniqueId::from_string(hex);
    }
    bs = kinet::Bootstrap::init(id, rank, 2, std::chrono::seconds(20));
    Side s;
    kinet::DeviceOptions opt;
    using F = kinet::DeviceOptions::Fabric;
    if (fabric == "tcp") opt.emu_fabric = F::Tcp;
    else if (fabric == "shm") opt.emu_fabric = F::Shm;
    else if (fabric == "auto") opt.emu_fabric = F::Auto;
    else fail("--fabric tcp|shm|auto");
    s.dev = kinet::Device::open("emu", opt);
    s.pd = s.dev->alloc_pd();
    s.buf.resize(kBuf);
    for (size_t i = 0; i < kBuf; ++i) s.buf[i] = pat(rank, i);
    if (rank == 1) {
      const uint64_t init = kAtomicInit;
      std::memcpy(s.buf.data() + kAtomicOff, &init, 8);
    }
    s.ro.assign(4096, 0xee);
    s.mr = s.pd->reg_mr(s.buf.data(), kBuf, kinet::kAccessAll);
    s.ro_mr = s.pd->reg_mr(s.ro.data(), s.ro.size(), kinet::kLocalWrite | kinet::kRemoteRead);
    s.pre.assign(40 * 4096, 0);
    s.pre_mr = s.pd->reg_mr(s.pre.data(), s.pre.size(), kinet::kAccessAll);
    Card mine;
    mine.key = s.mr->remote_key();
    mine.ro_key = s.ro_mr->remote_key();
    mine.pre_key = s.pre_mr->remote_key();
    mine.pid = static_cast<int32_t>(getpid());
    for (int i = 0; i < kQps; ++i) {
      kinet::QpConfig c;
      c.sq_depth = kDepth;
      s.qps.push_back(s.pd->create_qp(c));
      mine.qps.push_back(s.qps.back()->info().serialize());
    }
    const auto packed = mine.pack();
    const auto all = bs->allgather(packed.data(), packed.size());
    s.peer = Card::unpack(all[1 - rank]);
    if (static_cast<int>(s.peer.qps.size()) != kQps) fail("peer card has " + std::to_string(s.peer.qps.size()) + " QPs");
    for (int i = 0; i < kQps; ++i) {
      const auto& b = s.peer.qps[i];
      const kinet::QpInfo pi = kinet::QpInfo::deserialize(b.data(), b.size());
      const bool tcp = pi.endpoint.rfind("tcp ", 0) == 0, shm = pi.endpoint.find("shm ") != std::string::npos;
      if ((fabric == "tcp" && (!tcp || shm)) || (fabric == "shm" && (tcp || !shm)) || (fabric == "auto" && !(tcp && shm)))
        fail("peer QP info has endpoint \"" + pi.endpoint + "\" on the " + fabric + " fabric");
      if (pi.node != s.peer.key.node) fail("peer's remote key names node " + std::to_string(s.peer.key.node));
      s.qps[i]->connect(pi);
    }
    bs->barrier();  // both connected
    if (scenario == "ops") {
      if (rank == 0) requester_ops(s);
      bs->barrier();
      // Deregistering waits out every access to the region (the MemoryRegion
      // contract): the fabric's threads' writes happen-before the checks, in
      // this process's own terms (ThreadSanitizer can't see the order that
      // runs through the other process).
      if (rank == 1) {
        s.mr.reset();
        responder_verify(s);
      }
      bs->barrier();
      s.qps.clear();  // clean teardown on both sides at once (sanitizers check it)
      s.dev.reset();
    } else if (scenario == "acks" || scenario == "held") {
      if (rank == 0) scenario == "acks" ? requester_acks(s) : requester_held(s);
      bs->barrier();
      if (rank == 1) {
        s.mr.reset();  // as in "ops": the writes are done once this returns
        for (size_t i = 0; i < (scenario == "acks" ? kAcksBytes : 3 * 64); ++i)
          if (s.buf[i] != pat(0, i)) fail("acks: byte " + std::to_string(i) + " differs");
      }
      bs->barrier();
      s.qps.clear();
      s.dev.reset();
    } else if (scenario == "errors") {
      if (rank == 0) requester_errors(s);
      bs->barrier();
      if (rank == 1)
        for (uint8_t b : s.ro)
          if (b != 0xee) fail("the region without remote write access was written");
      bs->barrier();
      s.qps.clear();
      s.dev.reset();
    } else if (scenario == "kill" || scenario == "cut" || scenario == "stall") {
      if (rank == 0) {
        requester_lose_peer(s, *bs);
        if (scenario == "stall") ::kill(s.peer.pid, SIGKILL);  // it can't leave by itself
      } else {
        bs->barrier();
        s.pre_mr.reset();  // as in "ops": the writes are done once this returns
        for (size_t i = 0; i < 40 * 4096; ++i)
          if (s.pre[i] != pat(0, i)) fail("WRITE before the fault: byte " + std::to_string(i));
        bs->barrier();  // the requester now writes until an operation fails
        if (scenario == "kill") ::kill(::getpid(), SIGKILL);
        if (scenario == "stall") ::raise(SIGSTOP);  // alive, connected, silent
        // Cut: no RST, no FIN can cross a link that is down; this process may leave.
        if (std::system(("ip link set " + cut_if + " down").c_str()) != 0) fail("ip link set " + cut_if + " down");
      }
    } else {
      fail("unknown scenario " + scenario);
    }
    line("OK");
    if (scenario == "ops" || scenario == "errors" || scenario == "acks" || scenario == "held") {
      bs.reset();
      return 0;
    }
  } catch (const kinet::Error& e) {
    std::printf("ERROR %s %s\n", kinet::error_code_name(e.code()), e.what());
    std::fflush(stdout);
    return 3;
  }
  std::fflush(stdout);
  std::_Exit(0);  // the peer may be gone: don't wait for bootstrap teardown handshakes
}
