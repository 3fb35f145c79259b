#include "edge_rig.hpp"

#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace kinet::test::edge {
namespace {
constexpr dev::Sharing X = dev::Sharing::Exclusive;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
uint32_t be32_at(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return detail::bswap32_constexpr(v);
}
}  // namespace

Rig::Rig(const RigOptions& o)
    : p([&] {
        PairOptions po;
        po.cfg_a = test_qp_config(64, kTimeoutMs);
        po.cfg_b = test_qp_config(64, kTimeoutMs);
        po.access_b = o.access_b;
        po.dev_a.emu_max_msg = o.max_msg;
        po.dev_b.emu_max_msg = o.max_msg;
        return po;
      }()) {
  access_b_ = o.access_b;
  scratch_a_ = &a(256);
  scratch_b_ = &b(256);
}

Rig::~Rig() {
  for (auto& g : regs_) g->mr.reset();  // before the PDs and devices of p
}

Guarded& Rig::add(ProtectionDomain& pd, size_t len, uint32_t access, size_t lead) {
  auto g = std::make_unique<Guarded>();
  g->lead = lead;
  g->len = len;
  g->buf = alloc_buffer(g->total());
  g->mr = pd.reg_mr(g->p(), len, access);
  regs_.push_back(std::move(g));
  return *regs_.back();
}
Guarded& Rig::a(size_t len, uint32_t access, size_t lead, ProtectionDomain* pd) {
  return add(pd ? *pd : *p.pa, len, access, lead);
}
Guarded& Rig::b(size_t len, uint32_t access, size_t lead, ProtectionDomain* pd) {
  return add(pd ? *pd : *p.pb, len, access, lead);
}
ProtectionDomain& Rig::new_pd_a() {
  pds_.push_back(p.da->alloc_pd());
  return *pds_.back();
}
ProtectionDomain& Rig::new_pd_b() {
  pds_.push_back(p.db->alloc_pd());
  return *pds_.back();
}
size_t Rig::index(const Guarded& g) const {
  for (size_t i = 0; i < regs_.size(); ++i)
    if (regs_[i].get() == &g) return i;
  ADD_FAILURE() << "region not of this rig";
  return 0;
}

void Rig::run(std::mt19937_64& rng, const Post& post, const Effect& effect, const Expect& want) {
  Image img;
  for (auto& g : regs_) {
    fill_random(rng, g->buf.get(), g->total());
    img.emplace_back(g->buf.get(), g->buf.get() + g->total());
  }
  const bool fails = want.status != Status::Ok;
  if (effect) effect(img);
  const auto h = p.h();
  const uint64_t first = h.state->reserved;
  Ticket t, later_put, later_nop;
  ASSERT_EQ(post(h, &t), Status::Ok) << "posting itself must succeed: the NIC does the checks";
  ASSERT_EQ(t.idx, first + want.wqes) << "WQEs the operation posted";
  // Later WQEs: one that would change bytes if executed (a write, or where
  // the target QP refuses writes a read, else a fetch-add), and a signalled
  // NOP. Fenced: a NIC may start a later WQE before an earlier read or atomic
  // has completed, unless the fence bit says to wait for it (then it is
  // flushed if that one fails).
  uint8_t* sa = at(img, *scratch_a_).data() + scratch_a_->lead;
  uint8_t* sb = at(img, *scratch_b_).data() + scratch_b_->lead;
  if (access_b_ & kRemoteWrite) {
    ASSERT_EQ(dev::put<X>(h, scratch_a_->p(), scratch_a_->lkey(), scratch_b_->addr(), scratch_b_->rkey(), 64,
                          dev::kFence, &later_put),
              Status::Ok);
    if (!fails) std::memcpy(sb, sa, 64);
  } else if (access_b_ & kRemoteRead) {
    ASSERT_EQ(dev::get<X>(h, scratch_a_->p(), scratch_a_->lkey(), scratch_b_->addr(), scratch_b_->rkey(), 64,
                          dev::kFence, &later_put),
              Status::Ok);
    if (!fails) std::memcpy(sa, sb, 64);
  } else {
    ASSERT_EQ(dev::fetch_add<X>(h, scratch_a_->u64(0), scratch_a_->lkey(), scratch_b_->addr(), scratch_b_->rkey(), 1,
                                dev::kFence, &later_put),
              Status::Ok);
    if (!fails) {
      uint64_t v;
      std::memcpy(&v, sb, 8);
      std::memcpy(sa, &v, 8);
      ++v;
      std::memcpy(sb, &v, 8);
    }
  }
  ASSERT_EQ(dev::nop<X>(h, dev::kSignal, &later_nop), Status::Ok);

  EXPECT_EQ(dev::wait<X>(h, t), want.status) << "the operation; last_error: " << p.qa->last_error();
  EXPECT_EQ(dev::test<X>(h, t), want.status);
  const Status later = fails ? Status::WrFlushed : Status::Ok;
  EXPECT_EQ(dev::wait<X>(h, later_put), later) << "a put after the operation";
  EXPECT_EQ(dev::wait<X>(h, later_nop), later) << "a NOP after the operation";
  EXPECT_EQ(p.qa->state(), fails ? QpState::Error : QpState::Rts);
  EXPECT_EQ(p.qb->state(), QpState::Rts) << "a requester's fault leaves the responder QP alone";
  const uint32_t qpn = p.qa->qpn();
  const std::string le = p.qa->last_error();
  if (!fails) {
    EXPECT_EQ(le, "");
    // A WQE that succeeds without asking for a CQE gets none: the operation's
    // earlier WQEs (put_signal's data) and the later put.
    for (uint64_t i = first; i + 1 < t.idx; ++i) EXPECT_EQ(find_cqe(h, i), nullptr) << "CQE for unsignalled WQE " << i;
    EXPECT_EQ(find_cqe(h, later_put.idx - 1), nullptr) << "CQE for the unsignalled later put";
    const uint64_t last = t.idx - 1;
    const mlx5::Cqe64* c = find_cqe(h, last);
    if (c == nullptr) {
      ADD_FAILURE() << "no CQE for the signalled WQE " << last;
    } else {
      EXPECT_EQ(mlx5::cqe_opcode(c->op_own), 0x0) << "REQ";
      EXPECT_EQ(cqe_wqe_counter(*c), static_cast<uint16_t>(last));
      EXPECT_EQ(cqe_byte_count(*c), want.byte_count);
      EXPECT_EQ(cqe_wqe_opcode(*c), want.last_opcode);
      EXPECT_EQ(cqe_qpn(*c), qpn);
    }
  } else {
    const uint64_t bad = first + want.fault_wqe;
    EXPECT_EQ(h.state->error_wqe, bad) << "ring index of the WQE that faulted";
    const mlx5::Cqe64* c = find_cqe(h, bad);
    if (c == nullptr) {
      ADD_FAILURE() << "no error CQE for WQE " << bad << " (a WQE completed in error always has one)";
    } else {
      const auto* e = reinterpret_cast<const mlx5::ErrCqe*>(c);
      EXPECT_EQ(mlx5::cqe_opcode(c->op_own), 0xd) << "REQ_ERR";
      EXPECT_EQ(e->syndrome, syndrome_of(want.status));
      EXPECT_EQ(cqe_wqe_counter(*c), static_cast<uint16_t>(bad));
      EXPECT_EQ(cqe_wqe_opcode(*c), want.fault_opcode);
      EXPECT_EQ(cqe_qpn(*c), qpn);
    }
    // Every later WQE, signalled or not: a flush error CQE of its own.
    for (uint64_t i = bad + 1; i < later_nop.idx; ++i) {
      c = find_cqe(h, i);
      if (c == nullptr) {
        ADD_FAILURE() << "no flush CQE for WQE " << i;
        continue;
      }
      EXPECT_EQ(mlx5::cqe_opcode(c->op_own), 0xd) << "WQE " << i;
      EXPECT_EQ(reinterpret_cast<const mlx5::ErrCqe*>(c)->syndrome, 0x05) << "WQE " << i << ": flushed";
      EXPECT_EQ(cqe_qpn(*c), qpn);
    }
    for (uint64_t v : want.names)
      EXPECT_TRUE(names_hex(le, v)) << "last_error() = \"" << le << "\" names 0x" << std::hex << v;
    for (const std::string& w : want.words)
      EXPECT_NE(lower(le).find(lower(w)), std::string::npos) << "last_error() = \"" << le << "\" says \"" << w << "\"";
  }
  for (size_t i = 0; i < regs_.size(); ++i)
    EXPECT_TRUE(bytes_equal(
        regs_[i]->buf.get(), img[i].data(), regs_[i]->total(),
        "region " + std::to_string(i) + " (byte 0 is " + std::to_string(regs_[i]->lead) + " before its registration)"));
}

const char* op_name(Op op) {
  switch (op) {
    case Op::Write:
      return "Write";
    case Op::Inline:
      return "Inline";
    case Op::Read:
      return "Read";
    case Op::FetchAdd:
      return "FetchAdd";
    case Op::CompareSwap:
      return "CompareSwap";
    case Op::PutSignal:
      return "PutSignal";
  }
  return "?";
}

const char* edge_name(Edge e) {
  switch (e) {
    case Edge::EndsAtLastByte:
      return "EndsAtLastByte";
    case Edge::OnePastEnd:
      return "OnePastEnd";
    case Edge::StartsAtFirstByte:
      return "StartsAtFirstByte";
    case Edge::OneBeforeStart:
      return "OneBeforeStart";
    case Edge::ZeroLengthAtEnd:
      return "ZeroLengthAtEnd";
  }
  return "?";
}

EdgeRange edge_range(Edge e, size_t len, uint32_t n) {
  const auto end = static_cast<int64_t>(len);
  switch (e) {
    case Edge::EndsAtLastByte:
      return {end - n, n, true};
    case Edge::OnePastEnd:
      return {end - n + 1, n, false};
    case Edge::StartsAtFirstByte:
      return {0, n, true};
    case Edge::OneBeforeStart:
      return {-1, n, false};
    case Edge::ZeroLengthAtEnd:
      return {end, 0, true};
  }
  ADD_FAILURE() << "edge_range: unknown edge " << static_cast<int>(e);
  return {};
}

std::string op_edge_name(const ::testing::TestParamInfo<std::tuple<Op, Edge>>& i) {
  return std::string(op_name(std::get<0>(i.param))) + "_" + edge_name(std::get<1>(i.param));
}

OpCase data_op(Rig& r, Op op, std::optional<At> local, std::optional<At> remote, uint32_t n) {
  OpSpec s;
  s.op = op;
  s.local = local ? *local : At{&r.a(8192), 64};
  s.remote = remote ? *remote : At{&r.b(8192), 64};
  s.n = n;
  if (op == Op::PutSignal) {
    s.sig = {&r.b(64), 8};
    s.scratch = {&r.a(64), 16};
  }
  return make_case(r, s);
}

OpCase atomic_op(Rig& r, Op op, std::optional<At> result, std::optional<At> target) {
  OpSpec s;
  s.op = op;
  const At res = result ? *result : At{&r.a(64), 8};
  const At tgt = target ? *target : At{&r.b(64), 8};
  if (op == Op::PutSignal) {
    s.local = {&r.a(256), 0};
    s.remote = {&r.b(256), 0};
    s.n = 200;
    s.sig = tgt;
    s.scratch = res;
  } else {
    s.local = res;
    s.remote = tgt;
  }
  return make_case(r, s);
}

OpCase& OpCase::fail(Status s, uint32_t wqe, std::vector<uint64_t> names, std::vector<std::string> words) {
  want.status = s;
  want.fault_wqe = wqe;
  want.fault_opcode = opcodes.at(wqe);
  want.names = std::move(names);
  want.words = std::move(words);
  effect = wqe > 0 ? first_wqe : Effect{};  // the WQEs before the fault completed
  return *this;
}

namespace {
constexpr uint64_t kAdd = 0x0123456789abcdefull;  // fetch-add operand; swap value of compare-swap
constexpr uint64_t kSwap = 0xfedcba9876543210ull;

uint64_t load_u64(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
}  // namespace

OpCase make_case(Rig& r, const OpSpec& s) {
  OpCase c;
  // Image offsets of a place.
  auto img = [&r](Image& im, const At& a) { return r.at(im, *a.g).data() + a.g->lead + a.off; };
  auto lkey = [](const At& a) { return a.g->lkey(a.flip); };
  auto rkey = [](const At& a) { return a.g->rkey(a.flip); };
  auto copy = [img](const At& to, const At& from, uint32_t n) {
    return [=](Image& im) { std::memmove(img(im, to), img(im, from), n); };
  };
  // fetch-add at `t` with the old value into `res`, on the image.
  auto fadd = [img](const At& t, const At& res, uint64_t add) {
    return [=](Image& im) {
      const uint64_t old = load_u64(img(im, t)), nv = old + add;
      std::memcpy(img(im, res), &old, 8);
      std::memcpy(img(im, t), &nv, 8);
    };
  };
  const uint32_t f = dev::kSignal;
  switch (s.op) {
    case Op::Write:
      c.opcodes = {0x08};
      c.want.byte_count = s.n;
      c.post = [=](const QpHandle& h, Ticket* t) {
        return dev::put<dev::Sharing::Exclusive>(h, s.local.g->p() + s.local.off, lkey(s.local), s.remote.addr(),
                                                 rkey(s.remote), s.n, f, t);
      };
      c.effect = copy(s.remote, s.local, s.n);
      break;
    case Op::Inline:
      c.opcodes = {0x08};
      c.want.byte_count = s.n;
      c.post = [=](const QpHandle& h, Ticket* t) {
        return dev::put_inline<dev::Sharing::Exclusive>(h, s.local.g->p() + s.local.off, s.n, s.remote.addr(),
                                                        rkey(s.remote), f, t);
      };
      c.effect = copy(s.remote, s.local, s.n);
      break;
    case Op::Read:
      c.opcodes = {0x10};
      c.want.byte_count = s.n;
      c.post = [=](const QpHandle& h, Ticket* t) {
        return dev::get<dev::Sharing::Exclusive>(h, s.local.g->p() + s.local.off, lkey(s.local), s.remote.addr(),
                                                 rkey(s.remote), s.n, f, t);
      };
      c.effect = copy(s.local, s.remote, s.n);
      break;
    case Op::FetchAdd:
      c.opcodes = {0x12};
      c.want.byte_count = 8;
      c.post = [=](const QpHandle& h, Ticket* t) {
        return dev::fetch_add<dev::Sharing::Exclusive>(h, s.local.g->u64(s.local.off), lkey(s.local), s.remote.addr(),
                                                       rkey(s.remote), kAdd, f, t);
      };
      c.effect = fadd(s.remote, s.local, kAdd);
      break;
    case Op::CompareSwap:
      c.opcodes = {0x11};
      c.want.byte_count = 8;
      // Compares with the target's current value (read at post time): the swap happens.
      c.post = [=](const QpHandle& h, Ticket* t) {
        const uint64_t cur = load_u64(s.remote.g->p() + s.remote.off);
        return dev::compare_swap<dev::Sharing::Exclusive>(h, s.local.g->u64(s.local.off), lkey(s.local),
                                                          s.remote.addr(), rkey(s.remote), cur, kSwap, f, t);
      };
      c.effect = [=](Image& im) {
        std::memcpy(img(im, s.local), img(im, s.remote), 8);
        std::memcpy(img(im, s.remote), &kSwap, 8);
      };
      break;
    case Op::PutSignal:
      c.opcodes = {0x08, 0x12};
      c.want.byte_count = 8;
      c.post = [=](const QpHandle& h, Ticket* t) {
        return dev::put_signal<dev::Sharing::Exclusive>(h, s.local.g->p() + s.local.off, lkey(s.local), s.remote.addr(),
                                                        rkey(s.remote), s.n, s.sig.addr(), rkey(s.sig), kAdd,
                                                        s.scratch.g->u64(s.scratch.off), lkey(s.scratch), f, t);
      };
      c.first_wqe = copy(s.remote, s.local, s.n);
      c.effect = [w = c.first_wqe, a = fadd(s.sig, s.scratch, kAdd)](Image& im) {
        w(im);
        a(im);
      };
      break;
  }
  c.want.wqes = static_cast<uint32_t>(c.opcodes.size());
  c.want.last_opcode = c.opcodes.back();
  return c;
}

bool names_hex(const std::string& text, uint64_t v) {
  const std::string t = lower(text);
  char b[3][40];
  std::snprintf(b[0], sizeof b[0], "0x%" PRIx64, v);
  std::snprintf(b[1], sizeof b[1], "0x%08" PRIx64, v);
  std::snprintf(b[2], sizeof b[2], "0x%016" PRIx64, v);
  for (auto& s : b) {
    // The whole number: "0x12" must not match inside "0x123".
    for (size_t pos = t.find(s); pos != std::string::npos; pos = t.find(s, pos + 1)) {
      const size_t end = pos + std::strlen(s);
      if (end == t.size() || !std::isxdigit(static_cast<unsigned char>(t[end]))) return true;
    }
  }
  return false;
}

const mlx5::Cqe64* find_cqe(const dev::QpHandle& h, uint64_t idx) {
  const mlx5::Cqe64* found = nullptr;
  const uint32_t n = 1u << h.cq.log_n;
  for (uint32_t i = 0; i < n; ++i) {
    const mlx5::Cqe64& c = h.cq.cqes[i];
    if (mlx5::cqe_opcode(c.op_own) == 0xf || mlx5::cqe_owner(c.op_own) != 0) continue;  // not written (first lap)
    if (cqe_wqe_counter(c) != static_cast<uint16_t>(idx)) continue;
    if (found) ADD_FAILURE() << "two CQEs for WQE " << idx << " (CQ slots " << (found - h.cq.cqes) << ", " << i << ")";
    found = &c;
  }
  return found;
}

uint8_t cqe_wqe_opcode(const mlx5::Cqe64& c) { return static_cast<uint8_t>(be32_at(&c.sop_drop_qpn) >> 24); }
uint32_t cqe_qpn(const mlx5::Cqe64& c) { return be32_at(&c.sop_drop_qpn) & 0xffffffu; }
uint32_t cqe_byte_count(const mlx5::Cqe64& c) { return be32_at(&c.byte_cnt); }
uint16_t cqe_wqe_counter(const mlx5::Cqe64& c) {
  const auto* b = reinterpret_cast<const uint8_t*>(&c.wqe_counter);
  return static_cast<uint16_t>((b[0] << 8) | b[1]);
}

// PRM "CQE error syndrome" values, written here rather than taken from
// wire.hpp so a wrong constant there can't hide on both sides.
uint8_t syndrome_of(Status s) {
  switch (s) {
    case Status::LocalLength:
      return 0x01;
    case Status::LocalQpOp:
      return 0x02;
    case Status::LocalProtection:
      return 0x04;
    case Status::WrFlushed:
      return 0x05;
    case Status::RemoteInvalidRequest:
      return 0x12;
    case Status::RemoteAccess:
      return 0x13;
    case Status::TransportRetryExceeded:
      return 0x15;
    default:
      ADD_FAILURE() << "no syndrome for " << s;
      return 0;
  }
}

}  // namespace kinet::test::edge
