// The DevX issuing layer (src/providers/mlx5/devx.hpp) against a stand-in
// device whose DevxOps answer through the software NIC's mailbox decoder: the
// whole object life (caps, UMEM, UAR, CQ, QP, RST->INIT->RTR->RTS, ERR, RST,
// QUERY_QP, destroy) and how each kind of failure is reported (device status
// and syndrome, kernel refusal with errno only, bad transitions, failed
// destroys).
#include <gtest/gtest.h>

#include <cerrno>
#include <map>
#include <set>
#include <vector>

#include "kinet/kinet.hpp"
#include "providers/emu/devx/devx_decode.hpp"
#include "providers/mlx5/commands/builders.hpp"
#include "providers/mlx5/devx.hpp"

namespace {
namespace cmd = kinet::mlx5::cmd;
namespace devx = kinet::emu::devx;
using kinet::ErrorCode;
using kinet::mlx5::Devx;
using Span = std::span<const uint8_t>;

// Status values the stand-in answers with besides the decoder's.
constexpr uint8_t kBadResource = 0x05;
constexpr uint8_t kBadQpState = 0x10;

struct FakeNic;
struct FakeObj {
  FakeNic* nic;
  bool is_qp;
  uint32_t id;
};
struct FakeQp {
  uint8_t state = 0;
  cmd::CreateQp create;
  cmd::Init2RtrQp rtr;
  cmd::Rtr2RtsQp rts;
};
struct FakeNic {
  cmd::HcaCaps caps;
  cmd::AtomicCaps atomic;
  std::set<uint32_t> umems, cqs;
  std::map<uint32_t, FakeQp> qps;
  uint32_t next_id = 0x40;
  int refuse_errno = 0;   // the kernel refuses every command with this errno
  int destroy_errno = 0;  // obj_destroy fails with this
  int uar_word = 0;
};

FakeNic* nic_of(ibv_context* c) { return reinterpret_cast<FakeNic*>(c); }
FakeObj* obj_of(mlx5dv_devx_obj* o) { return reinterpret_cast<FakeObj*>(o); }

// Writes a device failure into out; returns the errno a rejected command gets.
int device_fail(void* out, size_t outlen, uint8_t status, uint32_t syndrome) {
  devx::encode_failure({static_cast<uint8_t*>(out), outlen}, {static_cast<devx::PrmStatus>(status), syndrome, ""});
  return EREMOTEIO;
}
int device_fail(void* out, size_t outlen, const devx::Verdict& v) {
  return device_fail(out, outlen, static_cast<uint8_t>(v.status), v.syndrome);
}

template <class P> devx::Verdict decode_checked(Span in, size_t outlen, P* p) {
  devx::Verdict v = devx::decode(in, outlen, p);
  if (v.ok()) v = devx::check_supported(*p);
  return v;
}

mlx5dv_devx_obj* obj_create(ibv_context* ctx, const void* in, size_t inlen, void* out, size_t outlen) {
  FakeNic* nic = nic_of(ctx);
  if (nic->refuse_errno) return errno = nic->refuse_errno, nullptr;
  const Span s(static_cast<const uint8_t*>(in), inlen);
  uint32_t id = 0;
  bool is_qp = false;
  if (devx::opcode_of(s) == static_cast<uint16_t>(cmd::Op::CreateCq)) {
    cmd::CreateCq p;
    if (devx::Verdict v = decode_checked(s, outlen, &p); !v.ok()) return errno = device_fail(out, outlen, v), nullptr;
    if (!nic->umems.count(p.cq_umem_id) || !nic->umems.count(p.dbr_umem_id))
      return errno = device_fail(out, outlen, kBadResource, 0x2c0), nullptr;
    nic->cqs.insert(id = nic->next_id++);
  } else {
    cmd::CreateQp p;
    if (devx::Verdict v = decode_checked(s, outlen, &p); !v.ok()) return errno = device_fail(out, outlen, v), nullptr;
    if (!nic->cqs.count(p.cqn_snd)) return errno = device_fail(out, outlen, kBadResource, 0x4a8), nullptr;
    id = nic->next_id++;
    nic->qps[id].create = p;
    is_qp = true;
  }
  devx::encode_created({static_cast<uint8_t*>(out), outlen}, id);
  return reinterpret_cast<mlx5dv_devx_obj*>(new FakeObj{nic, is_qp, id});
}

int obj_modify(mlx5dv_devx_obj* o, const void* in, size_t inlen, void* out, size_t outlen) {
  FakeObj* obj = obj_of(o);
  if (obj->nic->refuse_errno) return obj->nic->refuse_errno;
  FakeQp& qp = obj->nic->qps.at(obj->id);
  const Span s(static_cast<const uint8_t*>(in), inlen);
  const auto op = static_cast<cmd::Op>(devx::opcode_of(s));
  auto step = [&](auto* p, uint8_t from, uint8_t to) -> int {
    devx::Verdict v = decode_checked(s, outlen, p);
    if (!v.ok()) return device_fail(out, outlen, v);
    if (p->qpn != obj->id) return device_fail(out, outlen, kBadResource, 0x48);
    if (qp.state != from) return device_fail(out, outlen, kBadQpState, qp.state);
    qp.state = to;
    devx::encode_ok({static_cast<uint8_t*>(out), outlen});
    return 0;
  };
  switch (op) {
    case cmd::Op::Rst2InitQp: { cmd::Rst2InitQp p; return step(&p, 0, 1); }
    case cmd::Op::Init2RtrQp: { int rc = step(&qp.rtr, 1, 2); return rc; }
    case cmd::Op::Rtr2RtsQp: {
      cmd::Rtr2RtsQp p;
      devx::Verdict v = devx::decode(s, outlen, &p);
      if (!v.ok()) return device_fail(out, outlen, v);
      if (qp.state != 2) return device_fail(out, outlen, kBadQpState, qp.state);
      qp.rts = p, qp.state = 3;
      devx::encode_ok({static_cast<uint8_t*>(out), outlen});
      return 0;
    }
    case cmd::Op::ToErrQp:
    case cmd::Op::ToRstQp: {
      cmd::QpRef r;
      if (devx::Verdict v = devx::decode_qp_ref(op, s, outlen, &r); !v.ok()) return device_fail(out, outlen, v);
      qp.state = op == cmd::Op::ToErrQp ? 6 : 0;
      devx::encode_ok({static_cast<uint8_t*>(out), outlen});
      return 0;
    }
    default: return device_fail(out, outlen, 0x02, 0);
  }
}

int obj_query(mlx5dv_devx_obj* o, const void* in, size_t inlen, void* out, size_t outlen) {
  FakeObj* obj = obj_of(o);
  cmd::QpRef r;
  devx::Verdict v = devx::decode_qp_ref(cmd::Op::QueryQp, {static_cast<const uint8_t*>(in), inlen}, outlen, &r);
  if (!v.ok()) return device_fail(out, outlen, v);
  const FakeQp& qp = obj->nic->qps.at(r.qpn);
  cmd::QpQuery q;
  q.state = qp.state, q.pd = qp.create.pd, q.log_sq_size = qp.create.log_sq_size, q.cqn_snd = qp.create.cqn_snd;
  q.mtu = qp.rtr.mtu, q.remote_qpn = qp.rtr.remote_qpn, q.next_rcv_psn = qp.rtr.next_rcv_psn;
  q.next_send_psn = qp.rts.next_send_psn, q.retry_count = qp.rts.retry_count, q.rnr_retry = qp.rts.rnr_retry;
  devx::encode_query_qp({static_cast<uint8_t*>(out), outlen}, q);
  return 0;
}

int obj_destroy(mlx5dv_devx_obj* o) {
  FakeObj* obj = obj_of(o);
  if (obj->nic->destroy_errno) return obj->nic->destroy_errno;
  if (obj->is_qp) obj->nic->qps.erase(obj->id); else obj->nic->cqs.erase(obj->id);
  delete obj;
  return 0;
}

int general_cmd(ibv_context* ctx, const void* in, size_t inlen, void* out, size_t outlen) {
  FakeNic* nic = nic_of(ctx);
  if (nic->refuse_errno) return nic->refuse_errno;
  cmd::QueryHcaCap q;
  devx::Verdict v = decode_checked(Span(static_cast<const uint8_t*>(in), inlen), outlen, &q);
  if (!v.ok()) return device_fail(out, outlen, v);
  std::span<uint8_t> o(static_cast<uint8_t*>(out), outlen);
  if (q.group == cmd::CapGroup::General) devx::encode_hca_caps(o, nic->caps);
  else devx::encode_atomic_caps(o, nic->atomic);
  return 0;
}

mlx5dv_devx_umem* umem_reg(ibv_context* ctx, void*, size_t size, uint32_t, uint32_t* id) {
  if (size == 0) return errno = EINVAL, nullptr;
  nic_of(ctx)->umems.insert(*id = nic_of(ctx)->next_id++);
  return reinterpret_cast<mlx5dv_devx_umem*>(new uint32_t(*id));
}
int umem_dereg(mlx5dv_devx_umem* u) {
  delete reinterpret_cast<uint32_t*>(u);
  return 0;
}
mlx5dv_devx_uar* alloc_uar(ibv_context* ctx, uint32_t flags, uint32_t* page_id, void** reg) {
  if (flags != 0) return errno = EOPNOTSUPP, nullptr;
  *page_id = 7, *reg = &nic_of(ctx)->uar_word;
  return reinterpret_cast<mlx5dv_devx_uar*>(&nic_of(ctx)->uar_word);
}
void free_uar(mlx5dv_devx_uar*) {}

const kinet::mlx5::DevxOps kFakeOps = {obj_create, obj_modify, obj_query, obj_destroy, general_cmd,
                                       umem_reg,   umem_dereg, alloc_uar, free_uar};

class DevxIssue : public ::testing::Test {
 protected:
  FakeNic nic;
  Devx dx{reinterpret_cast<ibv_context*>(&nic), "fake0", kFakeOps};
  std::vector<uint8_t> ring = std::vector<uint8_t>(4096);

  cmd::CreateCq cq_params(const Devx::Umem& u) {
    cmd::CreateCq p;
    p.log_cq_size = 6, p.uar_page = 7, p.cq_umem_valid = p.dbr_umem_valid = true;
    p.cq_umem_id = p.dbr_umem_id = u.id, p.dbr_addr = 0xf00;
    return p;
  }
  cmd::CreateQp qp_params(const Devx::Umem& u, uint32_t cqn) {
    cmd::CreateQp p;
    p.pd = 0x15, p.log_sq_size = 7, p.uar_page = 7, p.cqn_snd = p.cqn_rcv = cqn;
    p.wq_umem_valid = p.dbr_umem_valid = true, p.wq_umem_id = p.dbr_umem_id = u.id, p.dbr_addr = 0xf40;
    return p;
  }
};

template <class F> void expect_error(F f, ErrorCode code, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const kinet::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST_F(DevxIssue, WholeLifeOfAnRcQp) {
  nic.caps.log_max_qp_sz = 15, nic.caps.log_max_msg = 30, nic.caps.roce = true, nic.caps.port_type = 1;
  nic.atomic.atomic_size_qp = 0x8, nic.atomic.req_8b_endianness_mode = 1;
  EXPECT_EQ(dx.query_general_caps(), nic.caps);
  EXPECT_EQ(dx.query_atomic_caps(false), nic.atomic);

  Devx::Uar uar = dx.alloc_uar(0);
  EXPECT_EQ(uar.page_id, 7u);
  EXPECT_EQ(uar.reg_addr, &nic.uar_word);
  {
    Devx::Umem umem = dx.register_umem(ring.data(), ring.size(), 0);
    Devx::Object cq = dx.create_cq(cq_params(umem));
    EXPECT_EQ(nic.cqs.count(cq.id()), 1u);
    Devx::Object qp = dx.create_qp(qp_params(umem, cq.id()));
    ASSERT_EQ(nic.qps.count(qp.id()), 1u);
    EXPECT_EQ(nic.qps[qp.id()].create, qp_params(umem, cq.id()));
    EXPECT_EQ(dx.query_qp(qp).state, static_cast<uint8_t>(cmd::QpState::Rst));

    cmd::Rst2InitQp init;
    init.port = 1, init.rwe = init.rre = init.rae = true, init.atomic_mode = 3;
    init.qpn = 0xdead;  // ignored: the layer uses the QP's own number
    dx.rst2init(qp, init);
    cmd::Init2RtrQp rtr;
    rtr.mtu = 5, rtr.remote_qpn = 0x99, rtr.next_rcv_psn = 0x1234, rtr.path.grh = true, rtr.path.vhca_port_num = 1;
    dx.init2rtr(qp, rtr);
    cmd::Rtr2RtsQp rts;
    rts.next_send_psn = 0x4321, rts.retry_count = 7, rts.rnr_retry = 7, rts.ack_timeout = 14;
    dx.rtr2rts(qp, rts);
    const cmd::QpQuery q = dx.query_qp(qp);
    EXPECT_EQ(q.state, static_cast<uint8_t>(cmd::QpState::Rts));
    EXPECT_EQ(q.pd, 0x15u);
    EXPECT_EQ(q.mtu, 5);
    EXPECT_EQ(q.remote_qpn, 0x99u);
    EXPECT_EQ(q.next_rcv_psn, 0x1234u);
    EXPECT_EQ(q.next_send_psn, 0x4321u);
    EXPECT_EQ(q.cqn_snd, cq.id());
    EXPECT_EQ(q.retry_count, 7);
    EXPECT_EQ(q.rnr_retry, 7);

    dx.to_err(qp);
    EXPECT_EQ(dx.query_qp(qp).state, static_cast<uint8_t>(cmd::QpState::Err));
    dx.to_rst(qp);
    EXPECT_EQ(dx.query_qp(qp).state, static_cast<uint8_t>(cmd::QpState::Rst));
  }
  EXPECT_TRUE(nic.qps.empty());
  EXPECT_TRUE(nic.cqs.empty());
}

TEST_F(DevxIssue, DeviceRejectionNamesCommandStatusAndSyndrome) {
  Devx::Umem umem = dx.register_umem(ring.data(), ring.size(), 0);
  // No CQ 0x999: the stand-in answers "bad resource" with syndrome 0x4a8.
  expect_error([&] { dx.create_qp(qp_params(umem, 0x999)); }, ErrorCode::InvalidArgument,
               {"fake0: CREATE_QP failed: status 0x5 (bad resource), syndrome 0x4a8", "errno 121"});
  // Ring not in a UMEM: the decoder's check_supported rejects with the field's offset (0x860).
  Devx::Object cq = dx.create_cq(cq_params(umem));
  cmd::CreateQp p = qp_params(umem, cq.id());
  p.wq_umem_valid = false;
  expect_error([&] { dx.create_qp(p); }, ErrorCode::InvalidArgument,
               {"CREATE_QP failed: status 0x3 (bad parameter), syndrome 0x860"});
  cmd::CreateCq c = cq_params(umem);
  c.cqe_sz = 1;
  expect_error([&] { dx.create_cq(c); }, ErrorCode::InvalidArgument, {"CREATE_CQ failed: status 0x3", "syndrome 0x88"});
}

TEST_F(DevxIssue, WrongTransitionIsBadState) {
  Devx::Umem umem = dx.register_umem(ring.data(), ring.size(), 0);
  Devx::Object cq = dx.create_cq(cq_params(umem));
  Devx::Object qp = dx.create_qp(qp_params(umem, cq.id()));
  cmd::Init2RtrQp rtr;
  rtr.mtu = 3;
  expect_error([&] { dx.init2rtr(qp, rtr); }, ErrorCode::BadState,
               {"fake0: INIT2RTR_QP failed: status 0x10 (bad QP state)"});
  expect_error([&] { dx.rtr2rts(qp, {}); }, ErrorCode::BadState, {"RTR2RTS_QP failed: status 0x10"});
  cmd::Rst2InitQp init;
  init.port = 0;  // the software NIC numbers ports from 1
  expect_error([&] { dx.rst2init(qp, init); }, ErrorCode::InvalidArgument, {"RST2INIT_QP failed: status 0x3"});
  Devx::Object none;
  expect_error([&] { dx.to_err(none); }, ErrorCode::InvalidArgument, {"fake0: 2ERR_QP on a QP that does not exist"});
  expect_error([&] { dx.query_qp(none); }, ErrorCode::InvalidArgument, {"QUERY_QP on a QP that does not exist"});
}

TEST_F(DevxIssue, KernelRefusalHasErrnoOnly) {
  Devx::Umem umem = dx.register_umem(ring.data(), ring.size(), 0);
  nic.refuse_errno = EPERM;
  expect_error([&] { dx.create_cq(cq_params(umem)); }, ErrorCode::NotSupported,
               {"fake0: CREATE_CQ failed: errno 1", "the reply carries no status"});
  nic.refuse_errno = EOPNOTSUPP;  // returned, errno untouched (as rdma-core does without DevX)
  errno = 0;
  expect_error([&] { dx.query_general_caps(); }, ErrorCode::NotSupported,
               {"QUERY_HCA_CAP failed: errno " + std::to_string(EOPNOTSUPP)});
  nic.refuse_errno = ENOMEM;
  expect_error([&] { dx.query_atomic_caps(); }, ErrorCode::ResourceExhausted, {"QUERY_HCA_CAP failed"});
}

TEST_F(DevxIssue, UmemUarAndContextFailures) {
  expect_error([&] { dx.register_umem(ring.data(), 0, 0); }, ErrorCode::InvalidArgument,
               {"fake0: registering UMEM [0x", ", +0) failed (errno " + std::to_string(EINVAL)});
  expect_error([&] { dx.alloc_uar(1); }, ErrorCode::NotSupported, {"fake0: allocating a UAR (flags 0x1) failed"});
  expect_error([] { Devx(nullptr, "fake1", kFakeOps); }, ErrorCode::InvalidArgument, {"fake1: DevX needs"});
}

TEST_F(DevxIssue, FailedDestroyIsLoggedNotThrown) {
  Devx::Umem umem = dx.register_umem(ring.data(), ring.size(), 0);
  FakeObj* leaked = nullptr;
  {
    Devx::Object cq = dx.create_cq(cq_params(umem));
    leaked = obj_of(cq.get());
    nic.destroy_errno = EBUSY;
  }  // the destructor logs and goes on
  EXPECT_EQ(nic.cqs.size(), 1u);
  delete leaked;
  nic.destroy_errno = 0;
  Devx::Object a = dx.create_cq(cq_params(umem));
  const uint32_t id = a.id();
  Devx::Object b = std::move(a);
  EXPECT_EQ(b.id(), id);
  EXPECT_EQ(a.get(), nullptr);
  b.reset();
  EXPECT_EQ(nic.cqs.count(id), 0u);
}
}  // namespace

// ---- UMEM over a dma-buf (rings in GPU memory on hardware) ----------------------------
namespace {
struct DmabufCall {
  int fd = -1;
  uint64_t offset = 0;
  size_t size = 0;
  uint32_t access = 0;
};
DmabufCall last_dmabuf;
mlx5dv_devx_umem* umem_reg_dmabuf(ibv_context* ctx, int fd, uint64_t offset, size_t size, uint32_t access,
                                  uint32_t* id) {
  last_dmabuf = {fd, offset, size, access};
  if (fd < 0) return errno = EBADF, nullptr;
  return umem_reg(ctx, nullptr, size, access, id);
}
}  // namespace

TEST_F(DevxIssue, DmabufUmemGoesThroughItsEntryPointOrIsNotSupported) {
  EXPECT_FALSE(dx.has_umem_dmabuf());
  expect_error([&] { dx.register_umem_dmabuf(5, 0, 4096, 0); }, ErrorCode::NotSupported,
               {"fake0: registering a dma-buf UMEM: this rdma-core has no mlx5dv_devx_umem_reg_ex"});

  kinet::mlx5::DevxOps ops = kFakeOps;
  ops.umem_reg_dmabuf = umem_reg_dmabuf;
  Devx d2{reinterpret_cast<ibv_context*>(&nic), "fake2", ops};
  EXPECT_TRUE(d2.has_umem_dmabuf());
  {
    Devx::Umem u = d2.register_umem_dmabuf(7, 0x2040, 8192, kinet::kLocalWrite);
    EXPECT_EQ(last_dmabuf.fd, 7);
    EXPECT_EQ(last_dmabuf.offset, 0x2040u);
    EXPECT_EQ(last_dmabuf.size, 8192u);
    EXPECT_EQ(last_dmabuf.access, uint32_t(kinet::kLocalWrite));
    EXPECT_EQ(nic.umems.count(u.id), 1u);
    // The UMEM works like any other: a CQ on it.
    Devx::Object cq = d2.create_cq(cq_params(u));
    EXPECT_EQ(nic.cqs.size(), 1u);
  }
  expect_error([&] { d2.register_umem_dmabuf(-1, 0x1000, 64, 0); }, ErrorCode::System,
               {"fake2: registering UMEM over dma-buf fd -1 [0x1000, +64) failed (errno " + std::to_string(EBADF)});
}
