// The mlx5 provider end to end on the software NIC ("mlx5_emu"): its DevX
// entry point alone (CREATE_CQ / CREATE_QP into UMEM rings, the QP state
// machine, rejected commands), then the provider's object creation, state
// transitions, UMEM rings, doorbell records and UAR doorbell driven by the
// unchanged device verbs, with data checked byte for byte.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "test_util.hpp"
#include "emu_fixture.hpp"
#include "kinet/kinet.hpp"
#include "providers/emu/devx_nic.hpp"
#include "providers/mlx5/devx.hpp"
#include "providers/mlx5/provider.hpp"

namespace {
using kinet::Error;
using kinet::ErrorCode;
using kinet::QpState;
using kinet::Status;
using kinet::dev::Sharing;
using kinet::dev::Ticket;
namespace dev = kinet::dev;
namespace cmd = kinet::mlx5::cmd;
using kinet::mlx5::Devx;
using namespace kinet::test;

constexpr Sharing S = Sharing::Exclusive;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- the DevX entry point alone ------------------------------------------------------

class DevxNic : public ::testing::Test {
 protected:
  kinet::emu::DevxNicHandle h = kinet::emu::open_devx_nic("emu");
  const kinet::mlx5::VerbsOps& verbs = kinet::emu::devx_nic_verbs();
  std::unique_ptr<Devx> dx = std::make_unique<Devx>(h.ctx, "mlx5_" + h.name, kinet::emu::devx_nic_ops());
  Buffer block = alloc_buffer(2 * 16 * 64 + 128);
  ibv_pd* pd = nullptr;
  uint32_t pdn = 0;

  void SetUp() override { pd = verbs.alloc_pd(h.ctx, &pdn); ASSERT_NE(pd, nullptr); }
  void TearDown() override {
    dx.reset();
    EXPECT_EQ(verbs.dealloc_pd(pd), 0);
    verbs.close(h.ctx);
  }
  cmd::CreateCq cq_params(const Devx::Umem& u, const Devx::Uar& uar, uint8_t log) {
    cmd::CreateCq p;
    p.log_cq_size = log, p.uar_page = uar.page_id, p.cq_umem_valid = p.dbr_umem_valid = true;
    p.cq_umem_id = p.dbr_umem_id = u.id, p.cq_umem_offset = 16 * 64, p.dbr_addr = 2 * 16 * 64 + 64;
    return p;
  }
  cmd::CreateQp qp_params(const Devx::Umem& u, const Devx::Uar& uar, uint32_t cqn, uint8_t log) {
    cmd::CreateQp p;
    p.pd = pdn, p.log_msg_max = 30, p.log_sq_size = log, p.uar_page = uar.page_id, p.cqn_snd = p.cqn_rcv = cqn;
    p.dbr_umem_valid = p.wq_umem_valid = true, p.dbr_umem_id = p.wq_umem_id = u.id, p.dbr_addr = 2 * 16 * 64;
    return p;
  }
};

TEST_F(DevxNic, CapsSayWhatTheEngineRuns) {
  const cmd::HcaCaps c = dx->query_general_caps();
  EXPECT_EQ(c.log_max_qp_sz, 15);
  EXPECT_EQ(c.log_max_msg, 30);
  EXPECT_EQ(c.port_type, 1);  // Ethernet: RoCE v2
  EXPECT_TRUE(c.atomic);
  const cmd::AtomicCaps a = dx->query_atomic_caps();
  EXPECT_EQ(a.atomic_operations & 3, 3);
  EXPECT_EQ(a.atomic_size_qp, 1u << 3);
}

TEST_F(DevxNic, CreatesIntoUmemAndWalksTheStates) {
  Devx::Umem u = dx->register_umem(block.get(), 2 * 16 * 64 + 128, kinet::kLocalWrite);
  Devx::Uar uar = dx->alloc_uar(1);
  ASSERT_NE(uar.reg_addr, nullptr);
  Devx::Object cq = dx->create_cq(cq_params(u, uar, 4));
  Devx::Object qp = dx->create_qp(qp_params(u, uar, cq.id(), 4));
  EXPECT_NE(qp.id(), 0u);
  cmd::QpQuery q = dx->query_qp(qp);
  EXPECT_EQ(q.state, uint8_t(cmd::QpState::Rst));
  EXPECT_EQ(q.pd, pdn);
  EXPECT_EQ(q.cqn_snd, cq.id());
  EXPECT_EQ(q.log_sq_size, 4);

  // RTR2RTS from RESET: the NIC's status, and the state stays.
  std::string m = error_of([&] { dx->rtr2rts(qp, {}); }, ErrorCode::BadState);
  EXPECT_TRUE(has(m, "RTR2RTS_QP failed: status 0x10 (bad QP state), syndrome 0x0")) << m;
  EXPECT_EQ(dx->query_qp(qp).state, uint8_t(cmd::QpState::Rst));

  cmd::Rst2InitQp init;
  init.rwe = init.rre = true;
  dx->rst2init(qp, init);
  EXPECT_EQ(dx->query_qp(qp).state, uint8_t(cmd::QpState::Init));
  cmd::Init2RtrQp rtr;
  rtr.mtu = 5, rtr.remote_qpn = 0x123, rtr.path.grh = true, rtr.path.vhca_port_num = 1;
  dx->init2rtr(qp, rtr);
  dx->rtr2rts(qp, {});
  q = dx->query_qp(qp);
  EXPECT_EQ(q.state, uint8_t(cmd::QpState::Rts));
  EXPECT_EQ(q.remote_qpn, 0x123u);
  EXPECT_EQ(q.mtu, 5);
  dx->to_err(qp);
  EXPECT_EQ(dx->query_qp(qp).state, uint8_t(cmd::QpState::Err));
  dx->to_rst(qp);
  EXPECT_EQ(dx->query_qp(qp).state, uint8_t(cmd::QpState::Rst));
  // The UMEM holds live rings: the NIC refuses to let it go.
  EXPECT_EQ(kinet::emu::devx_nic_ops().umem_dereg(u.umem), EBUSY);
}

TEST_F(DevxNic, RejectsWhatItCannotRun) {
  Devx::Umem u = dx->register_umem(block.get(), 2 * 16 * 64 + 128, kinet::kLocalWrite);
  Devx::Uar uar = dx->alloc_uar(1);
  cmd::CreateCq bad_umem = cq_params(u, uar, 4);
  bad_umem.cq_umem_id = u.id + 100;
  std::string m = error_of([&] { dx->create_cq(bad_umem); }, ErrorCode::InvalidArgument);
  EXPECT_TRUE(has(m, "CREATE_CQ failed: status 0x5 (bad resource)")) << m;
  cmd::CreateCq too_big = cq_params(u, uar, 5);  // 32 CQEs at offset 1024 pass the block's end
  m = error_of([&] { dx->create_cq(too_big); }, ErrorCode::InvalidArgument);
  EXPECT_TRUE(has(m, "CREATE_CQ failed: status 0x3 (bad parameter)")) << m;

  Devx::Object cq = dx->create_cq(cq_params(u, uar, 4));
  m = error_of([&] { dx->create_qp(qp_params(u, uar, cq.id(), 3)); }, ErrorCode::InvalidArgument);
  EXPECT_TRUE(has(m, "CREATE_QP failed: status 0x3 (bad parameter), syndrome 0x3")) << m;  // CQ size != SQ size
  cmd::CreateQp no_pd = qp_params(u, uar, cq.id(), 4);
  no_pd.pd = pdn + 1000;
  m = error_of([&] { dx->create_qp(no_pd); }, ErrorCode::InvalidArgument);
  EXPECT_TRUE(has(m, "CREATE_QP failed: status 0x5 (bad resource)")) << m;
  Devx::Object qp = dx->create_qp(qp_params(u, uar, cq.id(), 4));
  // One QP per CQ and per UAR on the software NIC.
  m = error_of([&] { dx->create_qp(qp_params(u, uar, cq.id(), 4)); }, ErrorCode::ResourceExhausted);
  EXPECT_TRUE(has(m, "status 0x6 (resource busy)")) << m;
  // A CQ still serving a QP can't be destroyed.
  EXPECT_EQ(kinet::emu::devx_nic_ops().obj_destroy(cq.get()), EBUSY);
}

// ---- the provider on the software NIC -------------------------------------------------

struct Mlx5Pair {
  explicit Mlx5Pair(uint32_t depth = 16, const kinet::mlx5::DevxOps* ops_a = nullptr) {
    da = ops_a ? kinet::mlx5::open_emu_device("mlx5_emu", {}, ops_a) : kinet::Device::open("mlx5_emu");
    db = kinet::Device::open("mlx5_emu");
    pa = da->alloc_pd();
    pb = db->alloc_pd();
    qa = pa->create_qp(test_qp_config(depth));
    qb = pb->create_qp(test_qp_config(depth));
  }
  void connect() {
    const std::vector<uint8_t> ia = qa->info().serialize(), ib = qb->info().serialize();
    qa->connect(kinet::QpInfo::deserialize(ib.data(), ib.size()));
    qb->connect(kinet::QpInfo::deserialize(ia.data(), ia.size()));
  }
  ~Mlx5Pair() {
    ra.clear(), rb.clear();
    qa.reset(), qb.reset(), pa.reset(), pb.reset(), da.reset(), db.reset();
  }
  Region& reg(bool a, size_t len, uint32_t access = kinet::kAccessAll) {
    auto& v = a ? ra : rb;
    v.push_back(std::make_unique<Region>(make_region(a ? *pa : *pb, len, access)));
    return *v.back();
  }
  std::unique_ptr<kinet::Device> da, db;
  std::unique_ptr<kinet::ProtectionDomain> pa, pb;
  std::unique_ptr<kinet::QueuePair> qa, qb;
  std::vector<std::unique_ptr<Region>> ra, rb;
};

TEST(Mlx5Emu, OpensThroughDeviceOpen) {
  auto d = kinet::Device::open("mlx5_emu");
  EXPECT_EQ(d->attr().provider, "mlx5");
  EXPECT_TRUE(has(d->name(), "mlx5_emu")) << d->name();
  EXPECT_EQ(d->attr().max_qp_wr, 1u << 15);  // 2^log_max_qp_sz
  EXPECT_EQ(d->attr().max_msg, 1u << 30);    // 2^log_max_msg
  const std::string m = error_of([] { kinet::Device::open("mlx5_emux"); }, ErrorCode::NotFound);
  EXPECT_TRUE(has(m, "mlx5_emux")) << m;
}

// max_msg comes from QUERY_HCA_CAP's log_max_msg, and the verbs split a put
// above it into several WQEs that all land.
TEST(Mlx5Emu, MaxMsgFollowsTheCapsAndSplitsTransfers) {
  KINET_TEST_RNG(rng);
  kinet::DeviceOptions o;
  o.emu_max_msg = 4096;
  std::unique_ptr<kinet::Device> d = kinet::Device::open("mlx5_emu", o);
  EXPECT_EQ(d->attr().max_msg, 4096u);
  o.emu_max_msg = 4097;
  std::string m = error_of([&] { kinet::Device::open("mlx5_emu", o); }, ErrorCode::InvalidArgument);
  EXPECT_TRUE(has(m, "emu_max_msg 4097 must be a power of two")) << m;
  o.emu_max_msg = 1u << 30;
  o.emu_max_qp = 0;
  error_of([&] { kinet::Device::open("mlx5_emu", o); }, ErrorCode::InvalidArgument);

  auto pd = d->alloc_pd();
  kinet::QpConfig c = test_qp_config(16);
  c.max_msg = 4097;
  m = error_of([&] { pd->create_qp(c); }, ErrorCode::InvalidArgument);
  EXPECT_TRUE(has(m, "exceeds the device's max_msg 4096")) << m;
  auto db = kinet::Device::open("mlx5_emu");
  auto pdb = db->alloc_pd();
  auto qa = pd->create_qp(test_qp_config(16));
  auto qb = pdb->create_qp(test_qp_config(16));
  EXPECT_EQ(qa->handle().max_msg, 4096u);
  const std::vector<uint8_t> ia = qa->info().serialize(), ib = qb->info().serialize();
  qa->connect(kinet::QpInfo::deserialize(ib.data(), ib.size()));
  qb->connect(kinet::QpInfo::deserialize(ia.data(), ia.size()));
  {
    const size_t n = 5 * 4096 + 7;  // 6 WQEs
    Region src = make_region(*pd, n), dst = make_region(*pdb, n);
    fill_random(rng, src.p(), n);
    Ticket t;
    const dev::QpHandle h = qa->handle();
    ASSERT_EQ(dev::put<S>(h, src.p(), src.lkey(), dst.addr(), dst.rkey(), n, dev::kSignal, &t), Status::Ok);
    ASSERT_EQ(dev::wait<S>(h, t), Status::Ok) << qa->last_error();
    EXPECT_TRUE(bytes_equal(dst.p(), src.p(), n, "split put"));
    EXPECT_EQ(dev::quiet<S>(h), Status::Ok);
  }
}

// The NIC out of QP numbers answers CREATE_QP with "no resources"; the
// provider frees what it had set up, and a QP number freed is usable again.
TEST(Mlx5Emu, OutOfQpNumbersIsResourceExhausted) {
  kinet::DeviceOptions o;
  o.emu_max_qp = 2;
  auto d = kinet::Device::open("mlx5_emu", o);
  auto pd = d->alloc_pd();
  auto q1 = pd->create_qp(test_qp_config(16));
  auto q2 = pd->create_qp(test_qp_config(16));
  const std::string m = error_of([&] { pd->create_qp(test_qp_config(16)); }, ErrorCode::ResourceExhausted);
  EXPECT_TRUE(has(m, "CREATE_QP failed: status 0xf (no resources)")) << m;
  q1.reset();
  auto q3 = pd->create_qp(test_qp_config(16));
  EXPECT_NE(q3->qpn(), q2->qpn());
  EXPECT_EQ(q3->state(), QpState::Reset);
}

TEST(Mlx5Emu, ConnectsThroughTheStates) {
  Mlx5Pair p;
  EXPECT_EQ(p.qa->state(), QpState::Reset);
  const kinet::QpInfo i = p.qa->info();
  EXPECT_EQ(i.provider, 2);
  EXPECT_EQ(i.gid[0], 0xfe);
  p.connect();
  EXPECT_EQ(p.qa->state(), QpState::Rts);  // from QUERY_QP
  EXPECT_EQ(p.qb->state(), QpState::Rts);
  const dev::QpHandle h = p.qa->handle();
  EXPECT_EQ(h.qpn, p.qa->qpn());
  EXPECT_EQ(h.size(), 16u);
  EXPECT_NE(h.cq.cqn, 0u);
}

TEST(Mlx5Emu, EveryOperationByteForByteAcrossManyRingLaps) {
  KINET_TEST_RNG(rng);
  Mlx5Pair p(16);
  p.connect();
  constexpr size_t kLen = 64 * 1024;
  Region& src = p.reg(true, kLen);
  Region& back = p.reg(true, kLen);
  Region& res = p.reg(true, 64);
  Region& rem = p.reg(false, kLen);
  Region& sig = p.reg(false, 64);
  fill_random(rng, rem.p(), kLen);
  std::vector<uint8_t> want(rem.p(), rem.p() + kLen);
  uint64_t signal = 0;
  const dev::QpHandle h = p.qa->handle();
  const int n = static_cast<int>(scaled(400, 5 * 16));  // many more operations than the 16 ring slots
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE("operation " + std::to_string(i));
    Ticket t;
    const int kind = i % 5;
    const size_t len = 1 + rng() % 8192, off = rng() % (kLen - 8192 - 8) & ~size_t(7);
    if (kind == 0 || kind == 4) {  // put / put_signal
      fill_distinct(rng, src.p(), want.data() + off, len);
      std::memcpy(want.data() + off, src.p(), len);
      const uint64_t add = 1 + rng() % 1000;
      if (kind == 0) {
        ASSERT_EQ(dev::put<S>(h, src.p(), src.lkey(), rem.addr() + off, rem.rkey(), len, dev::kSignal, &t),
                  Status::Ok);
      } else {
        ASSERT_EQ(dev::put_signal<S>(h, src.p(), src.lkey(), rem.addr() + off, rem.rkey(), len, sig.addr(),
                                     sig.rkey(), add, res.u64(8), res.lkey(), 0, &t),
                  Status::Ok);
      }
      ASSERT_EQ(dev::wait<S>(h, t), Status::Ok) << p.qa->last_error();
      if (kind == 4) {
        EXPECT_EQ(*res.u64(8), signal) << "old signal value";
        signal += add;
        EXPECT_EQ(*sig.u64(), signal);
      }
      ASSERT_TRUE(bytes_equal(rem.p(), want.data(), kLen, "target after put"));
    } else if (kind == 1) {  // get
      fill_distinct(rng, back.p(), rem.p() + off, len);
      ASSERT_EQ(dev::get<S>(h, back.p(), back.lkey(), rem.addr() + off, rem.rkey(), len, dev::kSignal, &t),
                Status::Ok);
      ASSERT_EQ(dev::wait<S>(h, t), Status::Ok) << p.qa->last_error();
      ASSERT_TRUE(bytes_equal(back.p(), rem.p() + off, len, "get result"));
    } else if (kind == 2) {  // fetch_add
      uint64_t old;
      std::memcpy(&old, want.data() + off, 8);
      const uint64_t add = random_u64(rng);
      ASSERT_EQ(dev::fetch_add<S>(h, res.u64(), res.lkey(), rem.addr() + off, rem.rkey(), add, 0, &t), Status::Ok);
      ASSERT_EQ(dev::wait<S>(h, t), Status::Ok) << p.qa->last_error();
      EXPECT_EQ(*res.u64(), old);
      const uint64_t now = old + add;
      std::memcpy(want.data() + off, &now, 8);
      ASSERT_TRUE(bytes_equal(rem.p(), want.data(), kLen, "target after fetch_add"));
    } else {  // compare_swap, alternately matching and not
      uint64_t old;
      std::memcpy(&old, want.data() + off, 8);
      const bool match = (i / 5) % 2 == 0;
      const uint64_t swp = random_u64(rng, old), cmp = match ? old : random_u64(rng, old);
      ASSERT_EQ(dev::compare_swap<S>(h, res.u64(), res.lkey(), rem.addr() + off, rem.rkey(), cmp, swp, dev::kSignal,
                                     &t),
                Status::Ok);
      ASSERT_EQ(dev::wait<S>(h, t), Status::Ok) << p.qa->last_error();
      EXPECT_EQ(*res.u64(), old);
      if (match) std::memcpy(want.data() + off, &swp, 8);
      ASSERT_TRUE(bytes_equal(rem.p(), want.data(), kLen, "target after compare_swap"));
    }
  }
  EXPECT_EQ(dev::quiet<S>(h), Status::Ok);
  EXPECT_EQ(p.qa->state(), QpState::Rts);
  EXPECT_EQ(p.qa->last_error(), "");
}

// Several QPs on the same two devices: each has its own CQ, UAR doorbell and
// records; operations interleaved across them land where each one says.
TEST(Mlx5Emu, QpsOfOneDeviceKeepTheirOwnRingsAndDoorbells) {
  KINET_TEST_RNG(rng);
  Mlx5Pair p(8);
  constexpr int kQps = 4;
  std::vector<std::unique_ptr<kinet::QueuePair>> qa, qb;
  for (int i = 0; i < kQps; ++i) {
    qa.push_back(p.pa->create_qp(test_qp_config(8)));
    qb.push_back(p.pb->create_qp(test_qp_config(8)));
    const std::vector<uint8_t> ia = qa[i]->info().serialize(), ib = qb[i]->info().serialize();
    qa[i]->connect(kinet::QpInfo::deserialize(ib.data(), ib.size()));
    qb[i]->connect(kinet::QpInfo::deserialize(ia.data(), ia.size()));
  }
  constexpr size_t kLen = 4096;
  Region& src = p.reg(true, kQps * kLen);
  Region& dst = p.reg(false, kQps * kLen);
  std::vector<dev::QpHandle> h;
  for (auto& q : qa) h.push_back(q->handle());
  for (int i = 0; i + 1 < kQps; ++i) {
    EXPECT_NE(h[i].db, h[i + 1].db) << "one UAR doorbell per QP";
    EXPECT_NE(h[i].cq.cqn, h[i + 1].cq.cqn);
  }
  std::vector<uint8_t> want(kQps * kLen, 0);
  for (int round = 0; round < 5 * 8; ++round) {  // 5 ring laps on every QP
    for (int i = 0; i < kQps; ++i) {
      const size_t off = i * kLen + rng() % (kLen - 256), len = 1 + rng() % 256;
      fill_distinct(rng, src.p() + off, want.data() + off, len);
      std::memcpy(want.data() + off, src.p() + off, len);
      Ticket t;
      ASSERT_EQ(dev::put<S>(h[i], src.p() + off, src.lkey(), dst.addr() + off, dst.rkey(), len, dev::kSignal, &t),
                Status::Ok);
      ASSERT_EQ(dev::wait<S>(h[i], t), Status::Ok) << qa[i]->last_error();
    }
  }
  ASSERT_TRUE(bytes_equal(dst.p(), want.data(), want.size(), "targets of every QP"));
  qa.clear(), qb.clear();
}

// Host threads sharing one QP (Sharing::Gpu) while the control path answers
// state() and last_error() through QUERY_QP and the posting state.
TEST(Mlx5Emu, HostThreadsShareOneQpWhileTheControlPathQueries) {
  Mlx5Pair p(16);
  p.connect();
  constexpr int kThreads = 4;
  constexpr size_t kSlice = 1024;
  Region& src = p.reg(true, kThreads * kSlice);
  Region& dst = p.reg(false, kThreads * kSlice);
  const dev::QpHandle h = p.qa->handle();
  const int n = static_cast<int>(scaled(100, 20));
  std::vector<Status> got(kThreads, Status::Ok);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      uint8_t* s = src.p() + t * kSlice;
      for (int i = 0; i < n && got[t] == Status::Ok; ++i) {
        std::memset(s, 1 + (t * 31 + i) % 255, kSlice);
        Ticket tk;
        got[t] = dev::put<Sharing::Gpu>(h, s, src.lkey(), dst.addr() + t * kSlice, dst.rkey(), kSlice, dev::kSignal,
                                        &tk);
        if (got[t] == Status::Ok) got[t] = dev::wait<Sharing::Gpu>(h, tk);
      }
    });
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(p.qa->state(), QpState::Rts);
    EXPECT_EQ(p.qa->last_error(), "");
  }
  for (auto& t : ts) t.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(got[t], Status::Ok) << "thread " << t << ": " << p.qa->last_error();
    EXPECT_TRUE(bytes_equal(dst.p() + t * kSlice, src.p() + t * kSlice, kSlice, "slice of thread " + std::to_string(t)));
  }
}

TEST(Mlx5Emu, BadRkeyIsARemoteAccessErrorCqeThroughTheProvidersCq) {
  Mlx5Pair p;
  p.connect();
  Region& src = p.reg(true, 4096);
  Region& rem = p.reg(false, 4096);
  const dev::QpHandle h = p.qa->handle();
  const kinet::Rkey wrong{kinet::detail::bswap32_constexpr(rem.mr->rkey_value() ^ 0x100)};
  Ticket t;
  ASSERT_EQ(dev::put<S>(h, src.p(), src.lkey(), rem.addr(), wrong, 64, dev::kSignal, &t), Status::Ok);
  EXPECT_EQ(dev::wait<S>(h, t), Status::RemoteAccess);
  EXPECT_EQ(p.qa->state(), QpState::Error);  // the NIC moved it, QUERY_QP says so
  const std::string e = p.qa->last_error();
  EXPECT_TRUE(has(e, "remote access error")) << e;
  EXPECT_TRUE(has(e, "syndrome 0x13")) << e;

  // RESET through 2RST_QP, the rings start over, and the QP connects again.
  p.qa->reset();
  EXPECT_EQ(p.qa->state(), QpState::Reset);
  EXPECT_EQ(p.qa->last_error(), "");
  const std::vector<uint8_t> ib = p.qb->info().serialize();
  p.qa->connect(kinet::QpInfo::deserialize(ib.data(), ib.size()));
  const dev::QpHandle h2 = p.qa->handle();
  for (int i = 0; i < 40; ++i) {  // past a ring lap after the reset
    std::memset(src.p(), 0x40 + i, 256);
    ASSERT_EQ(dev::put<S>(h2, src.p(), src.lkey(), rem.addr(), rem.rkey(), 256, dev::kSignal, &t), Status::Ok);
    ASSERT_EQ(dev::wait<S>(h2, t), Status::Ok) << p.qa->last_error();
    ASSERT_TRUE(bytes_equal(rem.p(), src.p(), 256, "target after reconnect"));
  }
}

TEST(Mlx5Emu, BadTransitionCarriesTheNicsStatus) {
  Mlx5Pair p;
  std::string m = error_of([&] { p.qa->to_rts(); }, ErrorCode::BadState);
  EXPECT_TRUE(has(m, "RTR2RTS_QP failed: status 0x10 (bad QP state)")) << m;
  EXPECT_EQ(p.qa->state(), QpState::Reset);
  p.qa->to_init(kinet::kAccessAll);
  m = error_of([&] { p.qa->to_init(kinet::kAccessAll); }, ErrorCode::BadState);
  EXPECT_TRUE(has(m, "RST2INIT_QP failed: status 0x10 (bad QP state), syndrome 0x1")) << m;  // in INIT
  EXPECT_EQ(p.qa->state(), QpState::Init);
  // Another provider's QP info: refused before any command.
  kinet::QpInfo emu_info = p.qb->info();
  emu_info.provider = 1;
  m = error_of([&] { p.qa->to_rtr(emu_info); }, ErrorCode::NotSupported);
  EXPECT_EQ(p.qa->state(), QpState::Init);
}

// A DevX table that sets one reserved bit of every CREATE_QP mailbox on its
// way to the NIC: as a builder that wrote a field at a wrong offset would.
const kinet::mlx5::DevxOps& mutating_ops() {
  static kinet::mlx5::DevxOps ops = [] {
    kinet::mlx5::DevxOps o = kinet::emu::devx_nic_ops();
    o.obj_create = [](ibv_context* ctx, const void* in, size_t inlen, void* out, size_t outlen) {
      std::vector<uint8_t> m(static_cast<const uint8_t*>(in), static_cast<const uint8_t*>(in) + inlen);
      if (m.size() >= 8 && m[0] == 0x05 && m[1] == 0x00) m[4] |= 0x80;  // CREATE_QP: bit 0x20 (reserved)
      return kinet::emu::devx_nic_ops().obj_create(ctx, m.data(), m.size(), out, outlen);
    };
    return o;
  }();
  return ops;
}

TEST(Mlx5Emu, AMisplacedFieldFailsWithTheDecodersStatus) {
  const std::string m = error_of([] { Mlx5Pair p(16, &mutating_ops()); }, ErrorCode::InvalidArgument);
  EXPECT_TRUE(has(m, "CREATE_QP failed: status 0x3 (bad parameter), syndrome 0x20")) << m;
}

TEST(Mlx5Emu, ObjectsOutliveTheirDevice) {
  auto d = kinet::Device::open("mlx5_emu");
  auto pd = d->alloc_pd();
  auto qp = pd->create_qp(test_qp_config(16));
  d.reset();
  std::string m = error_of([&] { (void)qp->handle(); }, ErrorCode::BadState);
  EXPECT_TRUE(has(m, "was closed")) << m;
  m = error_of([&] { pd->create_qp(test_qp_config(16)); }, ErrorCode::BadState);
  EXPECT_EQ(qp->state(), QpState::Reset);
  qp.reset();  // the DevX objects go, then (with the PD) the NIC
  pd.reset();
}

TEST(Mlx5Emu, ConfigChecks) {
  auto d = kinet::Device::open("mlx5_emu");
  auto pd = d->alloc_pd();
  kinet::QpConfig c = test_qp_config(3);
  error_of([&] { pd->create_qp(c); }, ErrorCode::InvalidArgument);
  c = test_qp_config(1u << 16);  // past 2^log_max_qp_sz
  error_of([&] { pd->create_qp(c); }, ErrorCode::InvalidArgument);
  c = test_qp_config(1u << 15);  // exactly the largest
  EXPECT_EQ(pd->create_qp(c)->handle().size(), 1u << 15);
  c = test_qp_config(16);
  c.rings = kinet::RingPlacement::Gpu;  // the software NIC reads rings from host memory (hardware only)
  std::string g = error_of([&] { pd->create_qp(c); }, ErrorCode::NotSupported);
  EXPECT_TRUE(has(g, "rings in GPU memory: this backend reads rings from host memory only")) << g;
  int x = 0;
  const std::string m = error_of([&] { pd->reg_mr(&x, 0, kinet::kLocalWrite); }, ErrorCode::InvalidArgument);
  EXPECT_TRUE(has(m, "empty range")) << m;
}
}  // namespace
