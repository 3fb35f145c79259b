// kinet — issuing DevX commands: build, call, check the reply, own the object.
#include "providers/mlx5/devx.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/log.hpp"
#include "core/text.hpp"
#include "kinet/kinet.hpp"
#include "providers/mlx5/commands/builders.hpp"

namespace kinet::mlx5 {
namespace c = cmd;

const char* prm_status_name(uint8_t status) {
  switch (status) {
    case 0x00: return "ok";
    case 0x01: return "internal error";
    case 0x02: return "bad operation";
    case 0x03: return "bad parameter";
    case 0x04: return "bad system state";
    case 0x05: return "bad resource";
    case 0x06: return "resource busy";
    case 0x08: return "limits exceeded";
    case 0x09: return "bad resource state";
    case 0x0a: return "bad index";
    case 0x0f: return "no resources";
    case 0x10: return "bad QP state";
    case 0x30: return "bad packet";
    case 0x40: return "bad size of outstanding CQEs";
    case 0x50: return "bad input length";
    case 0x51: return "bad output length";
  }
  return "unknown status";
}

namespace {
// The error code a failed command maps to: the device's status first, errno
// when the device gave none.
ErrorCode code_of(uint8_t status, int err) {
  switch (status) {
    case 0x00: break;
    case 0x09: case 0x10: return ErrorCode::BadState;
    case 0x06: case 0x08: case 0x0f: return ErrorCode::ResourceExhausted;
    case 0x01: case 0x04: return ErrorCode::System;
    default: return ErrorCode::InvalidArgument;
  }
  if (err == ENOMEM || err == ENOSPC) return ErrorCode::ResourceExhausted;
  if (err == EPERM || err == EACCES || err == EOPNOTSUPP) return ErrorCode::NotSupported;
  if (err == EINVAL) return ErrorCode::InvalidArgument;
  return ErrorCode::System;
}

using text::hex;

// rdma-core's int-returning DevX calls return the errno value (some without
// setting errno); a negative return falls back to errno.
int err_of(int rc) { return rc > 0 ? rc : errno; }

using text::errno_text;
}  // namespace

Devx::Devx(ibv_context* ctx, std::string name, const DevxOps& ops) : ctx_(ctx), name_(std::move(name)), ops_(ops) {
  if (!ctx_) throw Error(ErrorCode::InvalidArgument, name_ + ": DevX needs an open device context (got null)");
}

void Devx::fail(c::Op op, int err, const uint8_t* out, size_t out_len) const {
  const c::OutHeader h = out_len >= 8 ? c::parse_out_header({out, out_len}) : c::OutHeader{};
  std::string msg = name_ + ": " + c::op_name(op) + " failed: ";
  if (h.status != 0)
    msg += "status " + hex(h.status) + " (" + prm_status_name(h.status) + "), syndrome " + hex(h.syndrome) + " (" +
           errno_text(err) + ")";
  else
    msg += errno_text(err) + ", the reply carries no status (the kernel refused the command before the device saw it)";
  throw Error(code_of(h.status, err), msg);
}

// ---- owned objects --------------------------------------------------------------

Devx::Object& Devx::Object::operator=(Object&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = std::exchange(o.owner_, nullptr), obj_ = std::exchange(o.obj_, nullptr), id_ = std::exchange(o.id_, 0);
  }
  return *this;
}
void Devx::Object::reset() {
  if (obj_ && owner_)
    if (const int rc = owner_->ops_.obj_destroy(obj_); rc != 0)
      KINET_LOG(Error, "%s: destroying DevX object 0x%x failed (errno %d: %s); it stays allocated",
                owner_->name_.c_str(), id_, err_of(rc), std::strerror(err_of(rc)));
  owner_ = nullptr, obj_ = nullptr, id_ = 0;
}

Devx::Umem& Devx::Umem::operator=(Umem&& o) noexcept {
  if (this != &o) {
    reset();
    owner = std::exchange(o.owner, nullptr), umem = std::exchange(o.umem, nullptr), id = std::exchange(o.id, 0);
  }
  return *this;
}
void Devx::Umem::reset() {
  if (umem && owner)
    if (const int rc = owner->ops_.umem_dereg(umem); rc != 0)
      KINET_LOG(Error, "%s: deregistering UMEM %u failed (errno %d: %s)", owner->name_.c_str(), id, err_of(rc),
                std::strerror(err_of(rc)));
  owner = nullptr, umem = nullptr, id = 0;
}

Devx::Uar& Devx::Uar::operator=(Uar&& o) noexcept {
  if (this != &o) {
    reset();
    owner = std::exchange(o.owner, nullptr), uar = std::exchange(o.uar, nullptr);
    page_id = std::exchange(o.page_id, 0), reg_addr = std::exchange(o.reg_addr, nullptr);
  }
  return *this;
}
void Devx::Uar::reset() {
  if (uar && owner) owner->ops_.free_uar(uar);
  owner = nullptr, uar = nullptr, page_id = 0, reg_addr = nullptr;
}

// ---- commands --------------------------------------------------------------------

c::HcaCaps Devx::query_general_caps(bool current) {
  uint8_t in[c::kQueryHcaCapInBytes];
  std::vector<uint8_t> out(c::build_query_hca_cap({c::CapGroup::General, current}, in));
  if (const int rc = ops_.general_cmd(ctx_, in, sizeof in, out.data(), out.size()); rc != 0)
    fail(c::Op::QueryHcaCap, err_of(rc), out.data(), out.size());
  return c::parse_query_hca_cap_general(out);
}

c::AtomicCaps Devx::query_atomic_caps(bool current) {
  uint8_t in[c::kQueryHcaCapInBytes];
  std::vector<uint8_t> out(c::build_query_hca_cap({c::CapGroup::Atomic, current}, in));
  if (const int rc = ops_.general_cmd(ctx_, in, sizeof in, out.data(), out.size()); rc != 0)
    fail(c::Op::QueryHcaCap, err_of(rc), out.data(), out.size());
  return c::parse_query_hca_cap_atomic(out);
}

Devx::Umem Devx::register_umem(void* addr, size_t size, uint32_t access) {
  Umem u;
  u.umem = ops_.umem_reg(ctx_, addr, size, access, &u.id);
  if (!u.umem) {
    const int err = errno;
    throw Error(code_of(0, err), name_ + ": registering UMEM [" + hex(reinterpret_cast<uintptr_t>(addr)) + ", +" +
                                     std::to_string(size) + ") failed (" + errno_text(err) + ")");
  }
  u.owner = this;
  return u;
}

Devx::Umem Devx::register_umem_dmabuf(int fd, uint64_t offset, size_t size, uint32_t access) {
  if (!ops_.umem_reg_dmabuf)
    throw Error(ErrorCode::NotSupported, name_ + ": registering a dma-buf UMEM: this rdma-core has no "
                                                 "mlx5dv_devx_umem_reg_ex");
  Umem u;
  u.umem = ops_.umem_reg_dmabuf(ctx_, fd, offset, size, access, &u.id);
  if (!u.umem) {
    const int err = errno;
    throw Error(code_of(0, err), name_ + ": registering UMEM over dma-buf fd " + std::to_string(fd) + " [" +
                                     hex(offset) + ", +" + std::to_string(size) + ") failed (" + errno_text(err) + ")");
  }
  u.owner = this;
  return u;
}

Devx::Uar Devx::alloc_uar(uint32_t flags) {
  Uar u;
  u.uar = ops_.alloc_uar(ctx_, flags, &u.page_id, &u.reg_addr);
  if (!u.uar) {
    const int err = errno;
    throw Error(code_of(0, err), name_ + ": allocating a UAR (flags " + hex(flags) + ") failed (" +
                                     errno_text(err) + ")");
  }
  u.owner = this;
  return u;
}

Devx::Object Devx::create_cq(const c::CreateCq& p) {
  uint8_t in[c::kCreateCqInBytes];
  uint8_t out[c::kCreateCqOutBytes] = {};
  const size_t out_len = c::build_create_cq(p, in);
  Object o;
  o.obj_ = ops_.obj_create(ctx_, in, sizeof in, out, out_len);
  if (!o.obj_) fail(c::Op::CreateCq, errno, out, out_len);
  o.owner_ = this;
  o.id_ = c::parse_create_cq_out(out);
  return o;
}

Devx::Object Devx::create_qp(const c::CreateQp& p) {
  uint8_t in[c::kCreateQpInBytes];
  uint8_t out[c::kCreateQpOutBytes] = {};
  const size_t out_len = c::build_create_qp(p, in);
  Object o;
  o.obj_ = ops_.obj_create(ctx_, in, sizeof in, out, out_len);
  if (!o.obj_) fail(c::Op::CreateQp, errno, out, out_len);
  o.owner_ = this;
  o.id_ = c::parse_create_qp_out(out);
  return o;
}

void Devx::modify_qp(Object& qp, c::Op op, const uint8_t* in, size_t in_len, size_t out_len) {
  uint8_t out[c::kModifyQpOutBytes] = {};
  if (out_len > sizeof out)
    throw Error(ErrorCode::InvalidArgument, name_ + ": " + c::op_name(op) + ": reply of " + std::to_string(out_len) +
                                                " bytes is larger than a modify reply");
  if (const int rc = ops_.obj_modify(qp.get(), in, in_len, out, out_len); rc != 0) fail(op, err_of(rc), out, out_len);
}

void Devx::need(const Object& qp, c::Op op) const {
  if (!qp.get())
    throw Error(ErrorCode::InvalidArgument, name_ + ": " + c::op_name(op) + " on a QP that does not exist");
}

void Devx::rst2init(Object& qp, c::Rst2InitQp p) {
  need(qp, c::Op::Rst2InitQp);
  uint8_t in[c::kModifyQpInBytes];
  p.qpn = qp.id();
  modify_qp(qp, c::Op::Rst2InitQp, in, sizeof in, c::build_rst2init_qp(p, in));
}

void Devx::init2rtr(Object& qp, c::Init2RtrQp p) {
  need(qp, c::Op::Init2RtrQp);
  uint8_t in[c::kModifyQpInBytes];
  p.qpn = qp.id();
  modify_qp(qp, c::Op::Init2RtrQp, in, sizeof in, c::build_init2rtr_qp(p, in));
}

void Devx::rtr2rts(Object& qp, c::Rtr2RtsQp p) {
  need(qp, c::Op::Rtr2RtsQp);
  uint8_t in[c::kModifyQpInBytes];
  p.qpn = qp.id();
  modify_qp(qp, c::Op::Rtr2RtsQp, in, sizeof in, c::build_rtr2rts_qp(p, in));
}

void Devx::to_err(Object& qp) {
  need(qp, c::Op::ToErrQp);
  uint8_t in[c::kQpRefInBytes];
  modify_qp(qp, c::Op::ToErrQp, in, sizeof in, c::build_2err_qp({0, qp.id()}, in));
}

void Devx::to_rst(Object& qp) {
  need(qp, c::Op::ToRstQp);
  uint8_t in[c::kQpRefInBytes];
  modify_qp(qp, c::Op::ToRstQp, in, sizeof in, c::build_2rst_qp({0, qp.id()}, in));
}

c::QpQuery Devx::query_qp(Object& qp) {
  need(qp, c::Op::QueryQp);
  uint8_t in[c::kQpRefInBytes], out[c::kQueryQpOutBytes] = {};
  const size_t n = c::build_query_qp({0, qp.id()}, in);
  if (const int rc = ops_.obj_query(qp.get(), in, sizeof in, out, n); rc != 0) fail(c::Op::QueryQp, err_of(rc), out, n);
  return c::parse_query_qp_out({out, n});
}
}  // namespace kinet::mlx5
