// Provider cuda_ipc (src/transports/ipc_path.*) on a machine without a GPU:
//   - Transport::open("cuda_ipc") is NotSupported with the reason (skipped
//     where CUDA IPC works: tests/gpu/gpu_cuda_ipc_test.cu covers that);
//   - the cuda_ipc channel (shm plus a process token in the address);
//   - the IPC data path end to end and the target's checks at each exact
//     edge, with a fake IpcMemory whose "allocations" are host buffers with
//     guard bytes (what CUDA does is replaced; the engine's logic is not):
//     crafted references (bad handle, out of the allocation, truncated, to a
//     target that is not cuda_ipc) rejected with their exact status, touching
//     nothing; mappings cached per peer, capped, closed when the peer goes.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "transport_rig.hpp"
#include "transports/ipc_path.hpp"
#include "transports/msg_wire.hpp"

namespace kinet::test {
namespace {
using namespace std::chrono_literals;
using transport::IpcMemory;
using transport::wire::MsgType;
namespace wire = transport::wire;

std::vector<uint8_t> pattern(size_t n, int who) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 131 + (i >> 9) * 7 + who * 59 + 1) & 0xff);
  return v;
}

// CUDA IPC replaced by a table of host "allocations": a handle is "fake" and
// the allocation's number, zero-padded to 64 bytes.
struct FakeIpc final : IpcMemory {
  struct A {
    uint8_t* p;
    uint64_t size;
  };
  std::mutex mu;  // registrations export from other threads
  std::map<std::string, A> allocs;
  int opens = 0, closes = 0, exported = 0;
  std::string add(uint8_t* p, uint64_t n) {
    std::lock_guard lk(mu);
    std::string h(wire::kIpcHandleBytes, '\0');
    std::snprintf(h.data(), h.size(), "fake %zu", allocs.size());
    allocs[h] = {p, n};
    return h;
  }
  bool exports(MemoryKind) const override { return true; }  // host buffers stand in for GPU memory
  bool export_alloc(const void* p, Alloc* out, std::string* why) override {
    std::lock_guard lk(mu);
    ++exported;
    for (auto& [h, a] : allocs)
      if (p >= a.p && p < a.p + a.size) {
        out->base = reinterpret_cast<uint64_t>(a.p), out->size = a.size;
        std::memcpy(out->handle, h.data(), wire::kIpcHandleBytes);
        return true;
      }
    *why = "not a fake allocation";
    return false;
  }
  void* open(const uint8_t h[wire::kIpcHandleBytes], uint64_t* size, std::string* why) override {
    std::lock_guard lk(mu);
    auto it = allocs.find(std::string(reinterpret_cast<const char*>(h), wire::kIpcHandleBytes));
    if (it == allocs.end()) {
      *why = "no such fake allocation";
      return nullptr;
    }
    ++opens;
    *size = it->second.size;
    return it->second.p;
  }
  void close(void*) override {
    std::lock_guard lk(mu);
    ++closes;
  }
  MemoryKind mapped_kind() const override { return MemoryKind::Host; }
  emu::CopyResult copy(void* d, MemoryKind dk, const void* s, MemoryKind sk, uint64_t n) override {
    return emu::safe_copy(d, dk, s, sk, n);
  }
};

std::unique_ptr<MsgTransport> ipc_transport(const std::string& name, std::shared_ptr<FakeIpc> fake,
                                            size_t depth = 1024, const std::string& channel = "loop") {
  return make_transport(channel, name, depth, 20s, std::move(fake));
}

// ---- Transport::open --------------------------------------------------------

TEST(CudaIpcOpen, WithoutAGpuIsNotSupportedWithTheReason) {
  auto names = Transport::providers();
  EXPECT_NE(std::find(names.begin(), names.end(), "cuda_ipc"), names.end());
  for (bool by_env : {false, true}) {
    SCOPED_TRACE(by_env ? "KINET_TRANSPORT=cuda_ipc" : "provider cuda_ipc");
    if (by_env) setenv("KINET_TRANSPORT", "cuda_ipc", 1);
    try {
      auto t = Transport::open({.provider = by_env ? "" : "cuda_ipc", .name = "x"});
      unsetenv("KINET_TRANSPORT");
      EXPECT_STREQ(t->provider(), "cuda_ipc");
      EXPECT_EQ(t->describe().rfind("cuda_ipc over shm", 0), 0u) << t->describe();
      GTEST_SKIP() << "CUDA IPC works here (" << t->describe() << "): the GPU test covers it";
    } catch (const Error& e) {
      unsetenv("KINET_TRANSPORT");
      EXPECT_EQ(e.code(), ErrorCode::NotSupported) << e.what();
      const std::string w = e.what();
      const std::string lead = "transport cuda_ipc: ";
      EXPECT_EQ(w.rfind(lead, 0), 0u) << w;
      // The reason names what is missing: a CUDA runtime, a GPU, the driver, or the shim's headers.
      EXPECT_TRUE(w.find("CUDA") != std::string::npos || w.find("GPU") != std::string::npos ||
                  w.find("libcuda") != std::string::npos)
          << w;
    }
  }
}

// ---- the channel: shm with a process token ---------------------------------

TEST(CudaIpcChannel, DescribesItselfAndRefusesOtherProviders) {
  auto fake = std::make_shared<FakeIpc>();
  auto a = ipc_transport("rank A", fake, 1024, "cuda_ipc");
  auto b = ipc_transport("rank B", fake, 1024, "cuda_ipc");
  EXPECT_STREQ(a->provider(), "cuda_ipc");
  EXPECT_EQ(a->describe().rfind("cuda_ipc over shm links", 0), 0u) << a->describe();
  auto plain = make_transport("shm", "plain shm");
  try {
    a->connect(plain->address(), "plain shm");
    FAIL() << "a shm address accepted by cuda_ipc";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("the address of plain shm is not a cuda_ipc address"), std::string::npos)
        << e.what();
  }
  // Two cuda_ipc transports of one process: connected over shm; data goes
  // staged (CUDA can't open a handle in the process that exported it).
  const PeerId ab = a->connect(b->address(), "rank B");
  b->connect(a->address(), "rank A");
  Guarded src(4096, 0), dst(4096);
  const std::vector<uint8_t> pat = pattern(4096, 1);
  std::memcpy(src.mem(), pat.data(), pat.size());
  fake->add(src.mem(), src.n);
  auto rs = a->register_memory(src.mem(), src.n, kAccessAll);
  auto rd = b->register_memory(dst.mem(), dst.n, kAccessAll);
  const uint32_t k = a->import_key(ab, rd->remote_key());
  ASSERT_EQ(a->put(ab, src.mem(), 4096, k, dst.base(), 1), Status::Ok);
  std::vector<Completion> c;
  ASSERT_EQ(wait_completions(*a, 1, c, {b.get()}), 1u);
  EXPECT_EQ(c[0].status, Status::Ok);
  EXPECT_EQ(0, std::memcmp(dst.mem(), pat.data(), 4096));
  EXPECT_EQ(a->ipc_path()->stats().refs, 0u) << "a peer in this process gets no references";
  EXPECT_EQ(fake->exported, 2) << "each region exported once, when registered";
}

// ---- the data path end to end (loop channel, fake IPC on both sides) -------

// The rig's LoopPair whose transports share one FakeIpc.
struct IpcPair : LoopPair {
  std::shared_ptr<FakeIpc> fake;
  explicit IpcPair(size_t depth = 1024) : IpcPair(std::make_shared<FakeIpc>(), depth) {}
  IpcPair(std::shared_ptr<FakeIpc> f, size_t depth)
      : LoopPair(ipc_transport("rank A", f, depth), ipc_transport("rank B", f, depth)), fake(std::move(f)) {}
  // a's `mine` filled with pattern(mine.n, seed), made a fake allocation and
  // registered; b's `theirs` registered and imported at a as `k`.
  struct Regions {
    std::vector<uint8_t> pm;
    std::unique_ptr<TransportRegion> rm, rt;
    uint32_t k;
  };
  Regions regions(Guarded& mine, Guarded& theirs, int seed) {
    Regions r{pattern(mine.n, seed), nullptr, nullptr, 0};
    std::memcpy(mine.mem(), r.pm.data(), r.pm.size());
    fake->add(mine.mem(), mine.n);
    r.rm = a->register_memory(mine.mem(), mine.n, kAccessAll);
    r.rt = b->register_memory(theirs.mem(), theirs.n, kAccessAll);
    r.k = a->import_key(ab, r.rt->remote_key());
    return r;
  }
};

TEST(CudaIpcPath, PutGetPutSignalByReference) {
  IpcPair P;
  constexpr size_t kBig = 3 << 20;  // 3 pieces' worth on the loop channel: one message by reference
  Guarded mine(kBig + 4096), theirs(kBig + 4096);
  const auto [pm, rm, rt, k] = P.regions(mine, theirs, 1);
  const std::vector<uint8_t> pt = pattern(theirs.n, 2);
  std::memcpy(theirs.mem(), pt.data(), pt.size());
  // put: pulled by the target
  ASSERT_EQ(P.a->put(P.ab, mine.mem() + 100, kBig, k, theirs.base() + 8, 1), Status::Ok);
  EXPECT_EQ(P.one().status, Status::Ok);
  EXPECT_EQ(0, std::memcmp(theirs.mem() + 8, pm.data() + 100, kBig));
  auto sa = P.a->ipc_path()->stats(), sb = P.b->ipc_path()->stats();
  EXPECT_EQ(sa.refs, 1u) << "one request, by reference";
  EXPECT_EQ(sb.pulls, 1u);
  EXPECT_EQ(sb.bytes, kBig);
  // get: pushed by the target into the requester's allocation
  ASSERT_EQ(P.a->get(P.ab, mine.mem() + 4096, 1 << 20, k, theirs.base() + 3, 2), Status::Ok);
  EXPECT_EQ(P.one().status, Status::Ok);
  EXPECT_EQ(0, std::memcmp(mine.mem() + 4096, theirs.mem() + 3, 1 << 20));
  EXPECT_EQ(P.b->ipc_path()->stats().pushes, 1u);
  // put_signal: data by reference, then the word
  uint64_t* word = reinterpret_cast<uint64_t*>(theirs.mem() + kBig + 8);
  *word = 10;
  ASSERT_EQ(P.a->put_signal(P.ab, mine.mem(), 5000, k, theirs.base() + 16, k, theirs.base() + kBig + 8, SignalOp::Add,
                            5, 3),
            Status::Ok);
  EXPECT_EQ(P.one().status, Status::Ok);
  EXPECT_EQ(*word, 15u);
  EXPECT_EQ(0, std::memcmp(theirs.mem() + 16, mine.mem(), 5000));
  // atomics and signals: unchanged (no reference)
  uint64_t old = 0;
  ASSERT_EQ(P.a->fetch_add(P.ab, &old, k, theirs.base() + kBig + 8, 1, 4), Status::Ok);
  EXPECT_EQ(P.one().status, Status::Ok);
  EXPECT_EQ(old, 15u);
  EXPECT_EQ(P.a->ipc_path()->stats().refs, 3u);
  EXPECT_EQ(P.fake->exported, 2) << "exported when registered (both regions), then cached";
  EXPECT_EQ(P.fake->opens, 1) << "the mapping is cached per peer and handle";
  EXPECT_EQ(P.b->ipc_path()->mappings(P.ba), 1u);
  EXPECT_TRUE(mine.guards_intact());
  EXPECT_TRUE(theirs.guards_intact());
}

TEST(CudaIpcPath, MemoryThatDoesNotExportIsStaged) {
  IpcPair P;
  Guarded loose(8192), theirs(8192);
  const std::vector<uint8_t> pm = pattern(loose.n, 3);
  std::memcpy(loose.mem(), pm.data(), pm.size());
  auto rl = P.a->register_memory(loose.mem(), loose.n, kAccessAll);  // not a fake allocation
  auto rt = P.b->register_memory(theirs.mem(), theirs.n, kAccessAll);
  const uint32_t k = P.a->import_key(P.ab, rt->remote_key());
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(P.a->put(P.ab, loose.mem() + i, 4096, k, theirs.base() + i, 1), Status::Ok);
    EXPECT_EQ(P.one().status, Status::Ok);
    EXPECT_EQ(0, std::memcmp(theirs.mem() + i, pm.data() + i, 4096));
  }
  EXPECT_EQ(P.a->ipc_path()->stats().refs, 0u);
  EXPECT_EQ(P.a->ipc_path()->stats().fallbacks, 1u);
  EXPECT_EQ(P.fake->exported, 2) << "tried when registered (both regions), not again";
  // A source spanning two allocations is staged too.
  Guarded two(8192);
  std::memcpy(two.mem(), pattern(8192, 5).data(), 8192);
  P.fake->add(two.mem(), 4096);
  P.fake->add(two.mem() + 4096, 4096);
  auto r2 = P.a->register_memory(two.mem(), two.n, kAccessAll);
  ASSERT_EQ(P.a->put(P.ab, two.mem() + 4000, 200, k, theirs.base(), 2), Status::Ok);
  EXPECT_EQ(P.one().status, Status::Ok);
  EXPECT_EQ(0, std::memcmp(theirs.mem(), two.mem() + 4000, 200));
  EXPECT_EQ(P.a->ipc_path()->stats().fallbacks, 2u);
  EXPECT_EQ(P.a->ipc_path()->stats().refs, 0u);
  // ... but only that operation: one inside either allocation goes by reference.
  ASSERT_EQ(P.a->put(P.ab, two.mem() + 4096, 200, k, theirs.base(), 3), Status::Ok);
  EXPECT_EQ(P.one().status, Status::Ok);
  EXPECT_EQ(0, std::memcmp(theirs.mem(), two.mem() + 4096, 200));
  EXPECT_EQ(P.a->ipc_path()->stats().refs, 1u);
}

TEST(CudaIpcPath, MoreOperationsThanDepthThenASignal) {
  IpcPair P(16);
  constexpr int kOps = 200;
  constexpr size_t kChunk = 512;
  Guarded mine(kOps * kChunk), theirs(kOps * kChunk + 8);
  const auto [pm, rm, rt, k] = P.regions(mine, theirs, 4);
  std::vector<Completion> done;
  Completion c[16];
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  int posted = 0;
  while ((posted <= kOps || done.size() < kOps + 1) && std::chrono::steady_clock::now() < deadline) {
    if (posted < kOps) {
      const Status s = P.a->put(P.ab, mine.mem() + posted * kChunk, kChunk, k, theirs.base() + posted * kChunk,
                                static_cast<uint64_t>(posted));
      if (s == Status::Ok) ++posted;
      else ASSERT_EQ(s, Status::NoSpace);
    } else if (posted == kOps) {
      if (P.a->signal(P.ab, k, theirs.base() + kOps * kChunk, SignalOp::Set, 1, kOps) == Status::Ok) ++posted;
    }
    P.b->poll(c, 0);
    const size_t n = P.a->poll(c, 16);
    done.insert(done.end(), c, c + n);
  }
  ASSERT_EQ(done.size(), size_t{kOps} + 1);
  for (const Completion& d : done) EXPECT_EQ(d.status, Status::Ok) << d.cookie;
  EXPECT_EQ(0, std::memcmp(theirs.mem(), pm.data(), kOps * kChunk));
  EXPECT_EQ(P.a->ipc_path()->stats().refs, uint64_t{kOps});
  EXPECT_EQ(P.b->ipc_path()->stats().pulls, uint64_t{kOps});
}

// Regions registered (and exported) and deregistered on another thread while
// puts go by reference: the export cache is shared under the registry's lock.
TEST(CudaIpcPath, RegistrationDuringTrafficByReference) {
  IpcPair P;
  constexpr int kOps = 300;
  Guarded mine(kOps * 64), theirs(kOps * 64);
  const auto [pm, rm, rt, k] = P.regions(mine, theirs, 7);
  std::atomic<bool> stop{false};
  std::atomic<int> churned{0};
  std::thread churn([&] {
    std::deque<Guarded> bufs;
    while (!stop.load()) {
      bufs.emplace_back(256);
      P.fake->add(bufs.back().mem(), 256);
      auto r = P.a->register_memory(bufs.back().mem(), 256, kAccessAll);
      r.reset();
      if (bufs.size() > 64) bufs.pop_front();  // the fake's table keeps stale entries: never used again
      ++churned;
    }
  });
  // At least kOps puts, and on until the other thread registered 50 regions (bounded).
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  uint64_t ops = 0;
  for (; ops < kOps || (churned.load() < 50 && std::chrono::steady_clock::now() < deadline); ++ops) {
    const size_t i = ops % kOps;
    ASSERT_EQ(P.a->put(P.ab, mine.mem() + i * 64, 64, k, theirs.base() + i * 64, ops), Status::Ok);
    ASSERT_EQ(P.one().status, Status::Ok);
  }
  stop = true;
  churn.join();
  EXPECT_GE(churned.load(), 50);
  EXPECT_EQ(0, std::memcmp(theirs.mem(), pm.data(), theirs.n));
  EXPECT_EQ(P.a->ipc_path()->stats().refs, ops);
}

// ---- the target against crafted references ----------------------------------

// A raw peer: crafted requests through its own loop channel.
struct Raw {
  std::unique_ptr<transport::Channel> ch = transport::make_loop_channel();
  uint64_t node = transport::random_node_id();
  uint64_t seq = 0;
  Collector got;
  PeerId join(MsgTransport& t) {
    uint64_t tn;
    std::vector<uint8_t> ca;
    transport::parse_engine_address(t.address(), "target", &tn, &ca);
    ch->add_peer(ca, "target");
    return t.connect(transport::engine_address(node, ch->address()), "raw");
  }
  // Sends r (by reference unless `ref_bytes` says otherwise) and returns the
  // answer's status, Ok when the target acknowledged instead.
  Status send(wire::Request r, MsgTransport& t, size_t ref_bytes = wire::kIpcRefBytes) {
    r.node = node, r.seq = ++seq, r.op_id = seq;
    std::vector<uint8_t> m(wire::kRequestBytes + wire::kIpcRefBytes);
    wire::encode_header(r, m.data());
    wire::encode(r.ipc, m.data() + wire::kRequestBytes);
    m.resize(wire::kRequestBytes + ref_bytes);
    iovec iov{m.data(), m.size()};
    EXPECT_TRUE(ch->send(0, &iov, 1, 0));
    Completion c[4];
    t.poll(c, 0);
    t.poll(c, 0);  // an owed ack goes from the next poll
    ch->progress(got);
    Status st = Status::Pending;
    for (auto& msg : got.msgs) {
      MsgType ty{};
      if (!wire::peek_type(msg.data(), msg.size(), &ty)) continue;
      if (ty == MsgType::Ack) {
        st = Status::Ok;
      } else {
        wire::Answer a;
        EXPECT_EQ(wire::decode(msg.data(), msg.size(), &a), "");
        EXPECT_EQ(a.length, 0u) << "a get by reference carries no data";
        st = a.status;
      }
    }
    got.msgs.clear();
    return st;
  }
};

wire::Request by_ref(MsgType t, uint32_t key, uint64_t raddr, uint64_t len, const std::string& handle,
                     uint64_t offset) {
  wire::Request r;
  r.type = t, r.key = key, r.raddr = raddr, r.length = len, r.flags = wire::kFlagIpc;
  std::memcpy(r.ipc.handle, handle.data(), wire::kIpcHandleBytes);
  r.ipc.offset = offset;
  return r;
}

TEST(CudaIpcTarget, EachCheckAtItsExactEdge) {
  auto fake = std::make_shared<FakeIpc>();
  auto t = ipc_transport("target", fake);
  Guarded region(128);
  auto reg = t->register_memory(region.mem(), region.n, kAccessAll);
  const uint32_t key = reg->remote_key().rkey;
  Guarded alloc(256);
  const std::vector<uint8_t> pa = pattern(alloc.n, 5);
  std::memcpy(alloc.mem(), pa.data(), pa.size());
  const std::string h = fake->add(alloc.mem(), alloc.n);
  Raw raw;
  const PeerId rp = raw.join(*t);
  // Pull: the last 64 bytes of the allocation, exactly to its end: lands.
  EXPECT_EQ(raw.send(by_ref(MsgType::Put, key, region.base(), 64, h, 256 - 64), *t), Status::Ok);
  EXPECT_EQ(0, std::memcmp(region.mem(), pa.data() + 192, 64));
  std::memset(region.mem(), 0, region.n);
  // One byte past the allocation's end: RemoteAccess, nothing moves.
  EXPECT_EQ(raw.send(by_ref(MsgType::Put, key, region.base(), 64, h, 256 - 63), *t), Status::RemoteAccess);
  EXPECT_EQ(raw.send(by_ref(MsgType::Put, key, region.base(), 1, h, 256), *t), Status::RemoteAccess);
  EXPECT_EQ(t->rejected("ipc out of bounds"), 2u);
  EXPECT_TRUE(region.all(0));
  // A handle that does not open.
  std::string bogus(wire::kIpcHandleBytes, '\x5a');
  EXPECT_EQ(raw.send(by_ref(MsgType::Put, key, region.base(), 8, bogus, 0), *t), Status::RemoteAccess);
  EXPECT_EQ(t->rejected("ipc open"), 1u);
  EXPECT_TRUE(region.all(0));
  // The target's own range is checked first: a fresh handle is not even opened.
  Guarded other(64);
  const std::string h2 = fake->add(other.mem(), other.n);
  const int opens = fake->opens;
  EXPECT_EQ(raw.send(by_ref(MsgType::Put, key, region.base() + 128 - 7, 8, h2, 0), *t), Status::RemoteAccess);
  EXPECT_EQ(t->rejected("out of bounds"), 1u);
  EXPECT_EQ(fake->opens, opens);
  // Push (get): the target's bytes into the allocation, exactly to its end.
  std::memcpy(region.mem(), pattern(128, 6).data(), 128);
  EXPECT_EQ(raw.send(by_ref(MsgType::Get, key, region.base(), 100, h, 156), *t), Status::Ok);
  EXPECT_EQ(0, std::memcmp(alloc.mem() + 156, region.mem(), 100));
  EXPECT_EQ(0, std::memcmp(alloc.mem(), pa.data(), 156)) << "bytes before the range untouched";
  std::memcpy(alloc.mem(), pa.data(), pa.size());
  EXPECT_EQ(raw.send(by_ref(MsgType::Get, key, region.base(), 100, h, 157), *t), Status::RemoteAccess);
  EXPECT_EQ(0, std::memcmp(alloc.mem(), pa.data(), alloc.n)) << "a rejected push wrote nothing";
  EXPECT_TRUE(alloc.guards_intact());
  // put_signal: the signal does not fire when the data was rejected.
  uint64_t* word = reinterpret_cast<uint64_t*>(region.mem() + 120);
  *word = 0;
  wire::Request ps = by_ref(MsgType::PutSignal, key, region.base(), 8, h, 256 - 7);
  ps.sig_key = key, ps.sig_raddr = region.base() + 120, ps.sig_op = 2, ps.operand = 9;
  EXPECT_EQ(raw.send(ps, *t), Status::RemoteAccess);
  EXPECT_EQ(*word, 0u);
  ps.ipc.offset = 256 - 8;
  EXPECT_EQ(raw.send(ps, *t), Status::Ok);
  EXPECT_EQ(*word, 9u);
  // A truncated reference: malformed, RemoteInvalidRequest, nothing opened or moved.
  std::memset(region.mem(), 0, region.n);
  const int opens2 = fake->opens;
  EXPECT_EQ(raw.send(by_ref(MsgType::Put, key, region.base(), 8, h2, 0), *t, wire::kIpcRefBytes - 1),
            Status::RemoteInvalidRequest);
  EXPECT_EQ(t->rejected("malformed"), 1u);
  EXPECT_EQ(fake->opens, opens2);
  EXPECT_TRUE(region.all(0));
  EXPECT_TRUE(region.guards_intact());
  EXPECT_TRUE(alloc.guards_intact());
  EXPECT_EQ(t->ipc_path()->mappings(rp), 1u);
}

TEST(CudaIpcTarget, ATargetThatIsNotCudaIpcRejectsReferences) {
  auto t = loop_transport("plain target");
  Guarded region(64);
  auto reg = t->register_memory(region.mem(), region.n, kAccessAll);
  Guarded alloc(64, 0x77);
  std::string h(wire::kIpcHandleBytes, '\x01');
  Raw raw;
  raw.join(*t);
  EXPECT_EQ(raw.send(by_ref(MsgType::Put, reg->remote_key().rkey, region.base(), 8, h, 0), *t),
            Status::RemoteInvalidRequest);
  EXPECT_EQ(raw.send(by_ref(MsgType::Get, reg->remote_key().rkey, region.base(), 8, h, 0), *t),
            Status::RemoteInvalidRequest);
  EXPECT_EQ(t->rejected("ipc unsupported"), 2u);
  EXPECT_TRUE(region.all(0));
  EXPECT_TRUE(alloc.all(0x77));
}

TEST(CudaIpcTarget, MappingsAreCappedAndClosedWhenThePeerGoes) {
  auto fake = std::make_shared<FakeIpc>();
  auto t = ipc_transport("target", fake);
  Guarded region(64);
  auto reg = t->register_memory(region.mem(), region.n, kAccessAll);
  const size_t kAllocs = transport::IpcPath::kMaxMappings + 1;
  std::vector<Guarded> allocs;
  allocs.reserve(kAllocs);
  std::vector<std::string> handles;
  for (size_t i = 0; i < kAllocs; ++i) {
    allocs.emplace_back(16, static_cast<uint8_t>(i));
    handles.push_back(fake->add(allocs.back().mem(), 16));
  }
  PeerId rp;
  {
    Raw raw;
    rp = raw.join(*t);
    for (size_t i = 0; i < kAllocs; ++i) {
      ASSERT_EQ(raw.send(by_ref(MsgType::Put, reg->remote_key().rkey, region.base(), 16, handles[i], 0), *t),
                Status::Ok);
      EXPECT_EQ(region.mem()[0], static_cast<uint8_t>(i));
    }
    EXPECT_EQ(fake->opens, static_cast<int>(kAllocs));
    EXPECT_EQ(fake->closes, 1) << "the least recently used mapping closed at the cap";
    EXPECT_EQ(t->ipc_path()->mappings(rp), transport::IpcPath::kMaxMappings);
    // The last handle again: cached, not reopened.
    ASSERT_EQ(raw.send(by_ref(MsgType::Put, reg->remote_key().rkey, region.base(), 16, handles.back(), 0), *t),
              Status::Ok);
    EXPECT_EQ(fake->opens, static_cast<int>(kAllocs));
  }  // the raw peer's channel is destroyed: the target sees the peer lost
  Completion c[4];
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (t->peer_error(rp).empty() && std::chrono::steady_clock::now() < deadline) t->poll(c, 4);
  EXPECT_NE(t->peer_error(rp), "");
  EXPECT_EQ(t->ipc_path()->mappings(rp), 0u);
  EXPECT_EQ(fake->closes, fake->opens) << "every mapping closed";
}

TEST(CudaIpcTarget, DestroyingTheTransportClosesEveryMapping) {
  auto fake = std::make_shared<FakeIpc>();
  Guarded region(64), alloc(64, 3);
  const std::string h = fake->add(alloc.mem(), alloc.n);
  Raw raw;
  {
    auto t = ipc_transport("target", fake);
    auto reg = t->register_memory(region.mem(), region.n, kAccessAll);
    raw.join(*t);
    ASSERT_EQ(raw.send(by_ref(MsgType::Put, reg->remote_key().rkey, region.base(), 8, h, 0), *t), Status::Ok);
    EXPECT_EQ(fake->opens, 1);
    EXPECT_EQ(fake->closes, 0);
  }
  EXPECT_EQ(fake->closes, 1);
}

}  // namespace
}  // namespace kinet::test
