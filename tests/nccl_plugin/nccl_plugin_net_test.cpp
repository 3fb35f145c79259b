// The kinet NCCL plugin's net table as NCCL drives it: loading, properties,
// listen / connect / accept, tagged isend / irecv / test byte for byte, and
// every misuse rejected with its reason — in one process, across forked
// processes, and across two network namespaces.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <numeric>

#include "harness.hpp"

namespace {
using namespace kinet::nccl;
using namespace kinet::nccl::test;

NetV11& net() { return *Plugin::get().net; }

// Connect as NCCL's proxy does: called again with the same handle while it
// returns kSuccess and a NULL comm, until a comm or an error (or `bound`).
// `longest`: the longest single call; `calls`: how many were made.
Result connect_polled(void* ctx, void* handle, void** s, std::chrono::nanoseconds* longest = nullptr,
                      int* calls = nullptr, std::chrono::milliseconds bound = 10s) {
  Result res = kSuccess;
  *s = nullptr;
  auto d = std::chrono::steady_clock::now() + bound;
  for (;;) {
    auto t0 = std::chrono::steady_clock::now();
    res = net().connect(ctx, 0, handle, s, nullptr);
    auto took = std::chrono::steady_clock::now() - t0;
    if (longest) *longest = std::max(*longest, std::chrono::duration_cast<std::chrono::nanoseconds>(took));
    if (calls) ++*calls;
    if (res != kSuccess || *s || std::chrono::steady_clock::now() > d) return res;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Descriptors open in this process.
size_t open_fds() {
  size_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd"); it != std::filesystem::directory_iterator(); ++it) ++n;
  return n;
}

// The port (host order) of the listener a net handle names: magic, reserved,
// then the 32-byte address {family, port, scope_id, addr[16], ...}.
uint16_t handle_port(const char* handle) {
  uint16_t port;
  std::memcpy(&port, handle + 10, sizeof port);
  return port;
}

class Net : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(Plugin::get().dl, nullptr) << Plugin::get().error;
    ASSERT_NE(Plugin::get().net, nullptr);
    ASSERT_EQ(net().init(&ctx_, 1, nullptr, Log::logger, nullptr), kSuccess);
    Log::clear();
  }
  // A connected pair in this process: connect and accept are polled as NCCL
  // does.
  void pair(void** s, void** r, void* handle_override = nullptr) {
    char handle[kHandleMaxSize];
    void* l = nullptr;
    ASSERT_EQ(net().listen(ctx_, 0, handle, &l), kSuccess) << Log::all();
    if (handle_override) std::memcpy(handle, handle_override, kHandleMaxSize);
    ASSERT_EQ(connect_polled(ctx_, handle, s), kSuccess) << Log::all();
    ASSERT_NE(*s, nullptr);
    *r = nullptr;
    wait_for([&] { return *r != nullptr; }, [&] { ASSERT_EQ(net().accept(l, r, nullptr), kSuccess); }, 10s);
    listen_ = l;
  }
  void TearDown() override {
    if (listen_) {
      EXPECT_EQ(net().close_listen(listen_), kSuccess);
    }
  }
  // Tests `req` until done (bounded); returns the last result.
  Result finish(void* req, int* size) {
    int done = 0;
    Result res = kSuccess;
    wait_for([&] { return done || res != kSuccess; }, [&] { res = net().test(req, &done, size); }, 20s);
    return res;
  }
  void* ctx_ = nullptr;
  void* listen_ = nullptr;
};

TEST(NetAbi, BothTablesResolveWithTheirEntries) {
  Plugin& p = Plugin::get();
  ASSERT_NE(p.dl, nullptr) << p.error;
  ASSERT_NE(p.net, nullptr);
  ASSERT_NE(p.gin, nullptr);
  EXPECT_STREQ(p.net->name, "kinet");
  EXPECT_STREQ(p.gin->name, "kinet");
  for (auto f : {(void*)p.net->init, (void*)p.net->devices, (void*)p.net->get_properties, (void*)p.net->listen,
                 (void*)p.net->connect, (void*)p.net->accept, (void*)p.net->reg_mr, (void*)p.net->reg_mr_dma_buf,
                 (void*)p.net->dereg_mr, (void*)p.net->isend, (void*)p.net->irecv, (void*)p.net->iflush,
                 (void*)p.net->test, (void*)p.net->close_send, (void*)p.net->close_recv,
                 (void*)p.net->close_listen, (void*)p.net->finalize})
    EXPECT_NE(f, nullptr);
  // Optional entries NCCL checks for NULL.
  EXPECT_EQ((void*)p.net->make_vdevice, nullptr);
  EXPECT_EQ((void*)p.net->set_net_attr, nullptr);
}

TEST_F(Net, OneHostDeviceWithItsProperties) {
  int n = -1;
  ASSERT_EQ(net().devices(&n), kSuccess);
  EXPECT_EQ(n, 1);
  Properties p{};
  ASSERT_EQ(net().get_properties(0, &p), kSuccess);
  EXPECT_STREQ(p.name, "kinet");
  EXPECT_EQ(p.net_device_type, kDeviceHost);
  EXPECT_EQ(p.ptr_support, kPtrHost);
  EXPECT_EQ(p.max_recvs, 1);
  EXPECT_EQ(p.pci_path, nullptr);
  EXPECT_EQ(p.vprops.ndevs, 1);
  EXPECT_EQ(p.max_p2p_bytes, kMaxNetSize);
  EXPECT_EQ(net().get_properties(1, &p), kInvalidArgument);
  EXPECT_TRUE(Log::warned("device 1 (kinet has 1)")) << Log::all();
  EXPECT_EQ(net().get_properties(-1, &p), kInvalidArgument);
}

TEST_F(Net, TaggedMessagesArriveByteForByteInOrder) {
  void *s, *r;
  pair(&s, &r);
  const std::vector<size_t> sizes = {0, 1, 4093, 1 << 20, 3};
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<void*> mh_s(sizes.size()), mh_r(sizes.size()), rs(sizes.size()), rr(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.emplace_back(sizes[i]);
    for (size_t b = 0; b < sizes[i]; ++b) out[i][b] = static_cast<uint8_t>(b * 7 + i);
    in.emplace_back(sizes[i] + 16, 0xee);  // room beyond what arrives stays untouched
    ASSERT_EQ(net().reg_mr(s, out[i].data(), out[i].size(), kPtrHost, &mh_s[i]), kSuccess);
    ASSERT_EQ(net().reg_mr(r, in[i].data(), in[i].size(), kPtrHost, &mh_r[i]), kSuccess);
  }
  // All receives and sends in flight at once, as NCCL's proxy does.
  for (size_t i = 0; i < sizes.size(); ++i) {
    void* d = in[i].data();
    size_t room = in[i].size();
    int tag = static_cast<int>(100 + i);
    ASSERT_EQ(net().irecv(r, 1, &d, &room, &tag, &mh_r[i], nullptr, &rr[i]), kSuccess);
    ASSERT_NE(rr[i], nullptr);
    ASSERT_EQ(net().isend(s, out[i].data(), sizes[i], tag, mh_s[i], nullptr, &rs[i]), kSuccess);
    ASSERT_NE(rs[i], nullptr);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    int got = -1;
    ASSERT_EQ(finish(rs[i], &got), kSuccess) << Log::all();
    EXPECT_EQ(got, static_cast<int>(sizes[i]));
    ASSERT_EQ(finish(rr[i], &got), kSuccess) << Log::all();
    EXPECT_EQ(got, static_cast<int>(sizes[i]));
    EXPECT_TRUE(std::equal(out[i].begin(), out[i].end(), in[i].begin())) << "message " << i;
    EXPECT_TRUE(std::all_of(in[i].begin() + sizes[i], in[i].end(), [](uint8_t b) { return b == 0xee; }));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(net().dereg_mr(s, mh_s[i]), kSuccess);
    EXPECT_EQ(net().dereg_mr(r, mh_r[i]), kSuccess);
  }
  EXPECT_EQ(net().close_send(s), kSuccess);
  EXPECT_EQ(net().close_recv(r), kSuccess);
}

TEST_F(Net, AFullQueueAnswersNullRequestNotABlock) {
  void *s, *r;
  pair(&s, &r);
  std::vector<uint8_t> big(8 << 20);  // more than the socket buffers: nothing completes without a receiver
  void* mh;
  ASSERT_EQ(net().reg_mr(s, big.data(), big.size(), kPtrHost, &mh), kSuccess);
  for (int i = 0; i < kMaxRequests; ++i) {
    void* req = nullptr;
    ASSERT_EQ(net().isend(s, big.data(), big.size(), 1, mh, nullptr, &req), kSuccess);
    ASSERT_NE(req, nullptr) << "request " << i;
  }
  void* req = reinterpret_cast<void*>(1);
  ASSERT_EQ(net().isend(s, big.data(), big.size(), 1, mh, nullptr, &req), kSuccess);
  EXPECT_EQ(req, nullptr);  // the 33rd: try again later
  EXPECT_EQ(net().dereg_mr(s, mh), kSuccess);
  EXPECT_EQ(net().close_recv(r), kSuccess);
  EXPECT_EQ(net().close_send(s), kSuccess);  // with its requests outstanding
}

TEST_F(Net, AMessageWithAnotherTagOrTooLargeFailsTheReceive) {
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant ? "too large" : "wrong tag");
    Log::clear();
    void *s, *r;
    pair(&s, &r);
    uint8_t out[100] = {}, in[99];
    void *ms, *mr;
    ASSERT_EQ(net().reg_mr(s, out, sizeof out, kPtrHost, &ms), kSuccess);
    ASSERT_EQ(net().reg_mr(r, in, sizeof in, kPtrHost, &mr), kSuccess);
    void* d = in;
    size_t room = sizeof in;
    int tag = 6;
    void *rs, *rr;
    ASSERT_EQ(net().irecv(r, 1, &d, &room, &tag, &mr, nullptr, &rr), kSuccess);
    ASSERT_EQ(net().isend(s, out, variant ? 100 : 99, variant ? 6 : 5, ms, nullptr, &rs), kSuccess);
    int got;
    EXPECT_EQ(finish(rr, &got), kRemoteError);
    EXPECT_TRUE(Log::warned(variant ? "sent 100 bytes to a receive of 99 bytes (tag 6)"
                                    : "sent a message with tag 5 where the posted receive expects tag 6"))
        << Log::all();
    // Later receives on the broken stream fail at once with the same reason.
    void* rr2 = nullptr;
    EXPECT_EQ(net().irecv(r, 1, &d, &room, &tag, &mr, nullptr, &rr2), kRemoteError);
    EXPECT_EQ(rr2, nullptr);
    EXPECT_EQ(finish(rs, &got), kSuccess);
    EXPECT_EQ(net().dereg_mr(s, ms), kSuccess);
    EXPECT_EQ(net().dereg_mr(r, mr), kSuccess);
    EXPECT_EQ(net().close_send(s), kSuccess);
    EXPECT_EQ(net().close_recv(r), kSuccess);
    net().close_listen(listen_);
    listen_ = nullptr;
  }
}

TEST_F(Net, AConnectionWithoutTheSecretIsRefused) {
  char handle[kHandleMaxSize];
  void* l = nullptr;
  ASSERT_EQ(net().listen(ctx_, 0, handle, &l), kSuccess);
  listen_ = l;
  handle[8 + 32] ^= 1;  // one bit of the secret (after magic and the 32-byte address)
  void* s = nullptr;
  ASSERT_EQ(connect_polled(ctx_, handle, &s), kSuccess);
  ASSERT_NE(s, nullptr);
  void* r = nullptr;
  ASSERT_TRUE(wait_for([&] { return Log::warned("wrong handshake or secret"); },
                       [&] { ASSERT_EQ(net().accept(l, &r, nullptr), kSuccess); }, 10s))
      << Log::all();
  EXPECT_EQ(r, nullptr);
  net().close_send(s);
}

TEST_F(Net, MisuseIsRejectedWithItsReason) {
  void *s, *r;
  pair(&s, &r);
  uint8_t buf[64];
  void* mh = nullptr;
  // CUDA memory only when KINET_NCCL_NET_CUDA=1 and a GPU is there (neither here).
  EXPECT_EQ(net().reg_mr(s, buf, sizeof buf, kPtrCuda, &mh), kInvalidArgument);
  EXPECT_TRUE(Log::warned("CUDA memory needs KINET_NCCL_NET_CUDA=1 and a GPU")) << Log::all();
  EXPECT_EQ(net().reg_mr(s, buf, sizeof buf, 0, &mh), kInvalidArgument);
  int not_a_comm = 0;
  EXPECT_EQ(net().reg_mr(&not_a_comm, buf, sizeof buf, kPtrHost, &mh), kInvalidArgument);
  EXPECT_TRUE(Log::warned("not a kinet net comm"));
  ASSERT_EQ(net().reg_mr(r, buf, sizeof buf, kPtrHost, &mh), kSuccess);
  void* d[2] = {buf, buf};
  size_t sz[2] = {8, 8};
  int tags[2] = {1, 2};
  void* mhs[2] = {mh, mh};
  void* req = nullptr;
  EXPECT_EQ(net().irecv(r, 2, d, sz, tags, mhs, nullptr, &req), kInvalidUsage);
  EXPECT_TRUE(Log::warned("2 receives at once (maxRecvs is 1)"));
  EXPECT_EQ(net().irecv(s, 1, d, sz, tags, mhs, nullptr, &req), kInvalidArgument);  // a send comm
  void* bad_mh = &not_a_comm;
  EXPECT_EQ(net().irecv(r, 1, d, sz, tags, &bad_mh, nullptr, &req), kInvalidArgument);
  EXPECT_TRUE(Log::warned("not a kinet memory handle"));
  // Buffers outside the registered memory, by one byte at either end.
  EXPECT_EQ(net().irecv(r, 1, d, sz, tags, mhs, nullptr, &req), kSuccess);  // inside: posted
  void* past[1] = {buf + sizeof buf - 7};
  EXPECT_EQ(net().irecv(r, 1, past, sz, tags, mhs, nullptr, &req), kInvalidArgument);
  EXPECT_TRUE(Log::warned("8 bytes are not inside the registered memory")) << Log::all();
  void* before[1] = {buf - 1};
  EXPECT_EQ(net().irecv(r, 1, before, sz, tags, mhs, nullptr, &req), kInvalidArgument);
  void* smh = nullptr;
  ASSERT_EQ(net().reg_mr(s, buf, 16, kPtrHost, &smh), kSuccess);
  EXPECT_EQ(net().isend(s, buf + 9, 8, 1, smh, nullptr, &req), kInvalidArgument);
  EXPECT_EQ(net().dereg_mr(s, smh), kSuccess);
  int done;
  EXPECT_EQ(net().test(&not_a_comm, &done, nullptr), kInvalidArgument);
  char handle[kHandleMaxSize] = {};
  void* s2 = reinterpret_cast<void*>(1);
  EXPECT_EQ(net().connect(ctx_, 0, handle, &s2, nullptr), kInvalidArgument);
  EXPECT_EQ(s2, nullptr);
  EXPECT_TRUE(Log::warned("not a kinet net handle"));
  EXPECT_EQ(net().dereg_mr(r, mh), kSuccess);
  EXPECT_EQ(net().dereg_mr(r, mh), kInvalidArgument);  // twice: the handle is dead
  net().close_send(s);
  net().close_recv(r);
}

// A handle NCCL passes back after its object is gone (a request test()
// reported done, a closed comm, a deregistered memory handle) is rejected,
// even where the allocator gave that object's address to a new one of the
// same kind: it must not answer for, consume or close the new one.
TEST_F(Net, AStaleHandleIsRejectedNotTakenForANewObject) {
  char handle[kHandleMaxSize];
  ASSERT_EQ(net().listen(ctx_, 0, handle, &listen_), kSuccess) << Log::all();
  void *s = nullptr, *r = nullptr;
  ASSERT_EQ(connect_polled(ctx_, handle, &s), kSuccess) << Log::all();
  ASSERT_NE(s, nullptr);
  wait_for([&] { return r != nullptr; }, [&] { ASSERT_EQ(net().accept(listen_, &r, nullptr), kSuccess); }, 10s);
  ASSERT_NE(r, nullptr);
  int size = -1;
  std::vector<void*> finished;
  for (int i = 0; i < 4; ++i) {
    void* req = nullptr;
    ASSERT_EQ(net().isend(s, nullptr, 0, i, nullptr, nullptr, &req), kSuccess);
    ASSERT_NE(req, nullptr);
    ASSERT_EQ(finish(req, &size), kSuccess);
    finished.push_back(req);
  }
  void* req = nullptr;
  ASSERT_EQ(net().isend(s, nullptr, 0, 9, nullptr, nullptr, &req), kSuccess);
  ASSERT_NE(req, nullptr);
  for (void* f : finished) {
    int done = 7;
    EXPECT_EQ(net().test(f, &done, &size), kInvalidArgument);
    EXPECT_EQ(done, 7);
    EXPECT_NE(f, req);
  }
  EXPECT_TRUE(Log::warned("net test: not a kinet request, or done is NULL")) << Log::all();
  size = -1;
  EXPECT_EQ(finish(req, &size), kSuccess) << Log::all();
  EXPECT_EQ(size, 0);
  // Memory handles.
  uint8_t buf[64];
  void *mh = nullptr, *mh2 = nullptr;
  ASSERT_EQ(net().reg_mr(r, buf, sizeof buf, kPtrHost, &mh), kSuccess);
  ASSERT_EQ(net().dereg_mr(r, mh), kSuccess);
  ASSERT_EQ(net().reg_mr(r, buf, sizeof buf, kPtrHost, &mh2), kSuccess);
  EXPECT_EQ(net().dereg_mr(r, mh), kInvalidArgument);
  EXPECT_TRUE(Log::warned("net deregMr: not a kinet memory handle"));
  EXPECT_EQ(net().dereg_mr(r, mh2), kSuccess);
  // Comms: a second closeSend after NCCL connected again.
  ASSERT_EQ(net().close_send(s), kSuccess);
  void* s2 = nullptr;
  ASSERT_EQ(connect_polled(ctx_, handle, &s2), kSuccess) << Log::all();
  ASSERT_NE(s2, nullptr);
  EXPECT_EQ(net().close_send(s), kInvalidArgument);
  EXPECT_TRUE(Log::warned("net closeSend: not a kinet comm of that kind"));
  EXPECT_NE(s, s2);
  req = nullptr;
  EXPECT_EQ(net().isend(s2, nullptr, 0, 1, nullptr, nullptr, &req), kSuccess) << Log::all();
  EXPECT_NE(req, nullptr);
  EXPECT_EQ(net().close_send(s2), kSuccess);
  EXPECT_EQ(net().close_recv(r), kSuccess);
}

TEST_F(Net, APeerThatClosesFailsTheReceiveAtOnce) {
  void *s, *r;
  pair(&s, &r);
  uint8_t in[16];
  void* mr;
  ASSERT_EQ(net().reg_mr(r, in, sizeof in, kPtrHost, &mr), kSuccess);
  void* d = in;
  size_t room = sizeof in;
  int tag = 1;
  void* rr;
  ASSERT_EQ(net().irecv(r, 1, &d, &room, &tag, &mr, nullptr, &rr), kSuccess);
  ASSERT_EQ(net().close_send(s), kSuccess);
  int got;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(finish(rr, &got), kRemoteError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_TRUE(Log::warned("closed the connection while receiving")) << Log::all();
  EXPECT_EQ(net().dereg_mr(r, mr), kSuccess);
  EXPECT_EQ(net().close_recv(r), kSuccess);
}

// NCCL's contract: connect never blocks. A handle whose listener is gone
// (refused) fails in the first call with the reason and the address, not
// after KINET_BOOTSTRAP_TIMEOUT_MS of retries that park NCCL's proxy thread.
TEST_F(Net, ConnectToAClosedListenerFailsAtOnceSayingRefused) {
  setenv("KINET_BOOTSTRAP_TIMEOUT_MS", "5000", 1);  // a connect that retried would take this long
  char handle[kHandleMaxSize];
  void* l = nullptr;
  ASSERT_EQ(net().listen(ctx_, 0, handle, &l), kSuccess) << Log::all();
  ASSERT_EQ(net().close_listen(l), kSuccess);  // the port now refuses connections
  const size_t fds = open_fds();
  void* s = reinterpret_cast<void*>(1);
  std::chrono::nanoseconds longest{0};
  int calls = 0;
  auto t0 = std::chrono::steady_clock::now();
  Result res = connect_polled(ctx_, handle, &s, &longest, &calls, 10s);
  auto took = std::chrono::steady_clock::now() - t0;
  unsetenv("KINET_BOOTSTRAP_TIMEOUT_MS");
  EXPECT_EQ(res, kSystemError) << Log::all();
  EXPECT_EQ(s, nullptr);
  EXPECT_LT(took, 1s) << "connect to a closed listener took "
                      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
  EXPECT_TRUE(Log::warned("Connection refused")) << Log::all();
  EXPECT_TRUE(Log::warned("the handle's listener is gone")) << Log::all();
  EXPECT_TRUE(Log::warned("kinet net listener at ")) << Log::all();
  EXPECT_TRUE(Log::warned(":" + std::to_string(handle_port(handle)))) << Log::all();
  EXPECT_EQ(open_fds(), fds);  // the attempt's socket is closed
  // Nothing of the failed attempt stays behind for this handle: a second try fails the same way.
  Log::clear();
  s = reinterpret_cast<void*>(1);
  EXPECT_EQ(connect_polled(ctx_, handle, &s, nullptr, nullptr, 1s), kSystemError);
  EXPECT_EQ(s, nullptr);
  EXPECT_TRUE(Log::warned("Connection refused")) << Log::all();
  EXPECT_EQ(open_fds(), fds);
}

// The repeated-call protocol against a live listener: connect and accept are
// both polled from one thread (as NCCL's proxy may), each connect call
// returns at once, and the comms carry data.
TEST_F(Net, ConnectIsPolledUntilItReturnsACommAndEachCallReturnsAtOnce) {
  char handle[kHandleMaxSize];
  ASSERT_EQ(net().listen(ctx_, 0, handle, &listen_), kSuccess) << Log::all();
  void *s = nullptr, *r = nullptr;
  std::chrono::nanoseconds longest{0};
  int calls = 0;
  ASSERT_TRUE(wait_for([&] { return s && r; },
                       [&] {
                         if (!s) {
                           auto t0 = std::chrono::steady_clock::now();
                           ASSERT_EQ(net().connect(ctx_, 0, handle, &s, nullptr), kSuccess) << Log::all();
                           longest = std::max(longest, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                                std::chrono::steady_clock::now() - t0));
                           ++calls;
                         }
                         if (!r) {
                           ASSERT_EQ(net().accept(listen_, &r, nullptr), kSuccess) << Log::all();
                         }
                       },
                       10s))
      << "send comm " << s << ", recv comm " << r << "; " << Log::all();
  EXPECT_GE(calls, 1);
  EXPECT_LT(longest, 100ms) << "the longest connect call took "
                            << std::chrono::duration_cast<std::chrono::milliseconds>(longest).count() << " ms";
  std::vector<uint8_t> out(70000), in(out.size() + 8, 0xee);
  for (size_t b = 0; b < out.size(); ++b) out[b] = static_cast<uint8_t>(b * 13 + 5);
  void *ms, *mr, *rs, *rr;
  ASSERT_EQ(net().reg_mr(s, out.data(), out.size(), kPtrHost, &ms), kSuccess);
  ASSERT_EQ(net().reg_mr(r, in.data(), in.size(), kPtrHost, &mr), kSuccess);
  void* d = in.data();
  size_t room = in.size();
  int tag = 7;
  ASSERT_EQ(net().irecv(r, 1, &d, &room, &tag, &mr, nullptr, &rr), kSuccess);
  ASSERT_NE(rr, nullptr);
  ASSERT_EQ(net().isend(s, out.data(), out.size(), tag, ms, nullptr, &rs), kSuccess);
  ASSERT_NE(rs, nullptr);
  int got = -1;
  ASSERT_EQ(finish(rs, &got), kSuccess) << Log::all();
  EXPECT_EQ(got, static_cast<int>(out.size()));
  ASSERT_EQ(finish(rr, &got), kSuccess) << Log::all();
  EXPECT_EQ(got, static_cast<int>(out.size()));
  EXPECT_TRUE(std::equal(out.begin(), out.end(), in.begin()));
  EXPECT_TRUE(std::all_of(in.begin() + out.size(), in.end(), [](uint8_t b) { return b == 0xee; }));
  EXPECT_EQ(net().dereg_mr(s, ms), kSuccess);
  EXPECT_EQ(net().dereg_mr(r, mr), kSuccess);
  EXPECT_EQ(net().close_send(s), kSuccess);
  EXPECT_EQ(net().close_recv(r), kSuccess);
}

// A plain listener on the address of a kinet net handle (family at 8,
// scope_id at 12, address at 16), backlog 0, its accept queue filled by one
// connection, so its kernel drops new SYNs; the handle is rewritten to its
// port (at 10, host order).
struct FullListener {
  int lfd = -1, filler = -1;
  uint16_t port = 0;
  void make(char* handle) {
    uint16_t family;
    std::memcpy(&family, handle + 8, sizeof family);
    sockaddr_storage ss{};
    socklen_t len;
    if (family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      std::memcpy(&a->sin_addr, handle + 16, 4);
      len = sizeof *a;
    } else {
      ASSERT_EQ(family, AF_INET6);
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      std::memcpy(&a->sin6_scope_id, handle + 12, 4);
      std::memcpy(&a->sin6_addr, handle + 16, 16);
      len = sizeof *a;
    }
    lfd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(lfd, 0);
    ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&ss), len), 0) << std::strerror(errno);
    ASSERT_EQ(::listen(lfd, 0), 0);
    ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&ss), &len), 0);
    filler = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(::connect(filler, reinterpret_cast<sockaddr*>(&ss), len), 0) << std::strerror(errno);
    port = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                   : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    std::memcpy(handle + 10, &port, sizeof port);
  }
  ~FullListener() {
    if (filler >= 0) ::close(filler);
    if (lfd >= 0) ::close(lfd);
  }
};

// A connect whose SYN goes unanswered returns a NULL comm at once on every
// call and fails, naming the address, once KINET_BOOTSTRAP_TIMEOUT_MS passed.
TEST_F(Net, AConnectThatNeverCompletesTimesOutWithoutBlocking) {
  char handle[kHandleMaxSize];
  void* l = nullptr;
  ASSERT_EQ(net().listen(ctx_, 0, handle, &l), kSuccess) << Log::all();
  ASSERT_EQ(net().close_listen(l), kSuccess);
  FullListener full;
  ASSERT_NO_FATAL_FAILURE(full.make(handle));
  setenv("KINET_BOOTSTRAP_TIMEOUT_MS", "400", 1);
  const size_t fds = open_fds();
  void* s = nullptr;
  std::chrono::nanoseconds longest{0};
  int calls = 0;
  auto t0 = std::chrono::steady_clock::now();
  Result res = connect_polled(ctx_, handle, &s, &longest, &calls, 10s);
  auto took = std::chrono::steady_clock::now() - t0;
  unsetenv("KINET_BOOTSTRAP_TIMEOUT_MS");
  EXPECT_EQ(res, kSystemError) << Log::all();
  EXPECT_EQ(s, nullptr);
  EXPECT_GE(took, 400ms);
  EXPECT_LT(took, 5s);
  EXPECT_GT(calls, 2);  // NULL comms while the connect was in progress
  EXPECT_LT(longest, 100ms) << "the longest connect call took "
                            << std::chrono::duration_cast<std::chrono::milliseconds>(longest).count() << " ms";
  EXPECT_TRUE(Log::warned("timeout: the TCP connect did not complete within KINET_BOOTSTRAP_TIMEOUT_MS (400 ms)"))
      << Log::all();
  EXPECT_TRUE(Log::warned("kinet net listener at ")) << Log::all();
  EXPECT_TRUE(Log::warned(":" + std::to_string(full.port))) << Log::all();
  EXPECT_EQ(open_fds(), fds);  // the attempt's socket is closed
}

// A connect still in progress after the first calls completes in a later
// one (same handle, here a copy of it), which sends the hello: magic and the
// handle's secret.
TEST_F(Net, AConnectInProgressCompletesInALaterCallAndSendsTheHello) {
  char handle[kHandleMaxSize];
  void* l = nullptr;
  ASSERT_EQ(net().listen(ctx_, 0, handle, &l), kSuccess) << Log::all();
  ASSERT_EQ(net().close_listen(l), kSuccess);
  FullListener full;
  ASSERT_NO_FATAL_FAILURE(full.make(handle));
  void* s = nullptr;
  std::chrono::nanoseconds longest{0};
  int calls = 0;
  EXPECT_EQ(connect_polled(ctx_, handle, &s, &longest, &calls, 100ms), kSuccess) << Log::all();
  ASSERT_EQ(s, nullptr) << "the SYN was not dropped: the accept queue is not full";
  // Room in the accept queue: the SYN's retransmission (about 1 s) completes the connect.
  int filled = ::accept(full.lfd, nullptr, nullptr);
  ASSERT_GE(filled, 0);
  ::close(filled);
  char copy[kHandleMaxSize];
  std::memcpy(copy, handle, sizeof copy);
  std::memset(handle, 0, sizeof handle);
  EXPECT_EQ(connect_polled(ctx_, copy, &s, &longest, &calls, 10s), kSuccess) << Log::all();
  ASSERT_NE(s, nullptr) << Log::all();
  EXPECT_LT(longest, 100ms) << "the longest connect call took "
                            << std::chrono::duration_cast<std::chrono::milliseconds>(longest).count() << " ms";
  int fd = ::accept(full.lfd, nullptr, nullptr);
  ASSERT_GE(fd, 0);
  uint8_t hello[24];
  size_t got = 0;
  while (got < sizeof hello) {
    ssize_t n = ::recv(fd, hello + got, sizeof hello - got, 0);
    ASSERT_GT(n, 0);
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  EXPECT_EQ(0, std::memcmp(hello, copy, 4));            // magic
  EXPECT_EQ(0, std::memcmp(hello + 8, copy + 40, 16));  // the secret
  EXPECT_EQ(net().close_send(s), kSuccess);
}

// Rank 0 listens and receives, rank 1 connects and sends 4 MiB + a small
// message; each checks every byte. `ns`: each rank in its own namespace.
void two_process_transfer(const NetnsPair* ns, bool kill_sender) {
  Shared* sh = Shared::make();
  ASSERT_NE(sh, nullptr);
  // Killed: more than the socket buffers hold, so the receiver sees the stream end mid-message.
  const size_t kBytes = kill_sender ? (64u << 20) : (4u << 20);
  auto body = [&](int rank) -> int {
    NetV11& n = net();
    void* ctx;
    RANK_CHECK(rank, n.init(&ctx, 1, nullptr, Log::logger, nullptr) == kSuccess);
    std::vector<uint8_t> buf(kBytes);
    if (rank == 0) {
      void* l;
      RANK_CHECK(rank, n.listen(ctx, 0, sh->handles[0], &l) == kSuccess);
      sh->ready.store(1);
      void* r = nullptr;
      RANK_CHECK(rank, wait_for([&] { return r != nullptr; }, [&] { n.accept(l, &r, nullptr); }));
      void* mh;
      RANK_CHECK(rank, n.reg_mr(r, buf.data(), buf.size(), kPtrHost, &mh) == kSuccess);
      void* d = buf.data();
      size_t room = buf.size();
      int tag = 42, done = 0, got = -1;
      void* req;
      // Killed: receive only once the sender is gone, so it could send no
      // more than the socket buffers hold (a reader draining as it writes
      // would let the whole message through before the kill).
      if (kill_sender) RANK_CHECK(rank, wait_for([&] { return sh->phase.load() == 1; }, [] { std::this_thread::yield(); }));
      RANK_CHECK(rank, n.irecv(r, 1, &d, &room, &tag, &mh, nullptr, &req) == kSuccess && req);
      Result res = kSuccess;
      auto t0 = std::chrono::steady_clock::now();
      wait_for([&] { return done || res != kSuccess; }, [&] { res = n.test(req, &done, &got); });
      if (kill_sender) {  // the sender died mid-message: an error, soon
        RANK_CHECK(rank, res == kRemoteError && std::chrono::steady_clock::now() - t0 < 10s);
        RANK_CHECK(rank, Log::warned("closed the connection while receiving"));
        return 0;
      }
      RANK_CHECK(rank, res == kSuccess && done == 1 && got == static_cast<int>(kBytes));
      for (size_t i = 0; i < kBytes; ++i) RANK_CHECK(rank, buf[i] == static_cast<uint8_t>(i * 131 + (i >> 12)));
      n.close_recv(r);
      n.close_listen(l);
      return 0;
    }
    RANK_CHECK(rank, wait_for([&] { return sh->ready.load() == 1; }, [] { std::this_thread::sleep_for(1ms); }));
    void* s;
    RANK_CHECK(rank, connect_polled(ctx, sh->handles[0], &s) == kSuccess && s);
    if (!kill_sender)  // (the killed one's bytes are never checked)
      for (size_t i = 0; i < kBytes; ++i) buf[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
    void* mh;
    RANK_CHECK(rank, n.reg_mr(s, buf.data(), buf.size(), kPtrHost, &mh) == kSuccess);
    void* req;
    // Killed: only the first part of the message goes out.
    RANK_CHECK(rank, n.isend(s, buf.data(), kBytes, 42, mh, nullptr, &req) == kSuccess && req);
    if (kill_sender) {
      sh->phase.store(1);  // the receiver starts reading after this
      raise(SIGKILL);
    }
    int done = 0, got = -1;
    Result res = kSuccess;
    wait_for([&] { return done || res != kSuccess; }, [&] { res = n.test(req, &done, &got); });
    RANK_CHECK(rank, res == kSuccess && done == 1 && got == static_cast<int>(kBytes));
    n.close_send(s);
    return 0;
  };
  auto codes = run_ranks(2, body, 40s, [&](int r) { return !ns || ns->enter(r); });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], kill_sender ? 128 + SIGKILL : 0);
  munmap(sh, sizeof(Shared));
}

TEST(NetProcesses, FourMiBBetweenTwoProcesses) { two_process_transfer(nullptr, false); }
TEST(NetProcesses, ASenderKilledMidMessageFailsTheReceiver) { two_process_transfer(nullptr, true); }
TEST(NetProcesses, FourMiBAcrossTwoNetworkNamespaces) {
  NetnsPair ns(1);
  if (!ns.ok()) GTEST_SKIP() << kinet::test::kNetnsSkip;
  two_process_transfer(&ns, false);
}

}  // namespace
