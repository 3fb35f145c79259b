// kinet emu edge tests — one bad (or just-good) operation at the exact edge of
// a check, and everything the NIC shows about it: the ticket's status, the
// CQE it wrote (opcode, byte count, WQE counter, syndrome, QPN), the QP
// state, the flush of later WQEs, last_error(), and every byte in and around
// the registered ranges.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "emu_fixture.hpp"

namespace kinet::test::edge {

using dev::QpHandle;
using dev::Ticket;

constexpr uint64_t kTimeoutMs = 2000;
constexpr size_t kGuard = 64;  // unregistered bytes either side of a registration, checked unchanged

// A registration of [p(), p()+len) inside a buffer that has `lead` bytes
// before it and kGuard bytes after it: the bytes just outside the region are
// ours (a NIC that steps over the edge writes there, not into the heap).
struct Guarded {
  Buffer buf;
  size_t lead = kGuard, len = 0;
  std::unique_ptr<MemoryRegion> mr;

  uint8_t* p() const { return buf.get() + lead; }
  uint64_t addr() const { return reinterpret_cast<uint64_t>(p()); }
  size_t total() const { return lead + len + kGuard; }
  uint32_t key() const { return mr->lkey_value(); }
  // Keys with bits flipped (0 = the real key), as the device verbs take them.
  Lkey lkey(uint32_t flip = 0) const { return Lkey{detail::bswap32_constexpr(key() ^ flip)}; }
  Rkey rkey(uint32_t flip = 0) const { return Rkey{detail::bswap32_constexpr(key() ^ flip)}; }
  uint64_t* u64(int64_t off) const { return reinterpret_cast<uint64_t*>(p() + off); }
};

// Expected content of every byte of every Guarded of a rig.
using Image = std::vector<std::vector<uint8_t>>;

// What one operation must produce.
struct Expect {
  Status status = Status::Ok;      // of wait()/test() on the operation's ticket
  uint32_t wqes = 1;               // WQEs the operation posts (put_signal: 2)
  uint32_t fault_wqe = 0;          // error: which of them faults (0 = the first)
  uint8_t fault_opcode = 0;        // error: send opcode of the faulting WQE
  uint8_t last_opcode = 0;         // Ok: send opcode of the last WQE (whose CQE is read)
  uint32_t byte_count = 0;         // Ok: byte count of the last WQE's CQE
  std::vector<uint64_t> names;     // error: values last_error() must name (keys, addresses, QPNs)
  std::vector<std::string> words;  // error: and words it must contain (case-insensitive), e.g. "remote read"
};

// Posts the operation with kSignal, storing its ticket.
using Post = std::function<Status(const QpHandle&, Ticket*)>;
// Applies the operation's effect (when it succeeds) to the expected image.
using Effect = std::function<void(Image&)>;

struct RigOptions {
  uint32_t access_b = kAccessAll;  // remote operations the target QP accepts
  uint32_t max_msg = 1u << 30;     // both devices' emu_max_msg
};

class Rig {
 public:
  explicit Rig(const RigOptions& o = {});
  ~Rig();

  EmuPair p;
  // Regions on device a (initiator) / b (target), in PD pa / pb unless pd is given.
  Guarded& a(size_t len, uint32_t access = kAccessAll, size_t lead = kGuard, ProtectionDomain* pd = nullptr);
  Guarded& b(size_t len, uint32_t access = kAccessAll, size_t lead = kGuard, ProtectionDomain* pd = nullptr);
  // A further PD on device a / b, destroyed after its regions.
  ProtectionDomain& new_pd_a();
  ProtectionDomain& new_pd_b();
  // The image index of a region.
  size_t index(const Guarded& g) const;
  std::vector<uint8_t>& at(Image& img, const Guarded& g) const { return img[index(g)]; }

  // Randomises every byte of every region, posts `post`, then a put that
  // would change bytes if executed and a signalled NOP, waits for all, and
  // checks everything against `want` (see the file comment). `effect` (may
  // be empty) is what the operation changes: all of it when it succeeds, the
  // WQEs before the fault when it fails.
  void run(std::mt19937_64& rng, const Post& post, const Effect& effect, const Expect& want);

 private:
  std::vector<std::unique_ptr<ProtectionDomain>> pds_;
  std::vector<std::unique_ptr<Guarded>> regs_;
  Guarded* scratch_a_ = nullptr;  // source / target of the put after the operation
  Guarded* scratch_b_ = nullptr;
  uint32_t access_b_ = kAccessAll;
  Guarded& add(ProtectionDomain& pd, size_t len, uint32_t access, size_t lead);
};

// ---- one operation, described by where its buffers are
enum class Op { Write, Inline, Read, FetchAdd, CompareSwap, PutSignal };
const char* op_name(Op op);

// A place in a region: p() + off, with the key's bits `flip` flipped.
struct At {
  const Guarded* g = nullptr;
  int64_t off = 0;
  uint32_t flip = 0;
  uint64_t addr() const { return g->addr() + off; }
  uint32_t key() const { return g->key() ^ flip; }
};

struct OpSpec {
  Op op = Op::Write;
  At local;         // write / put_signal: source; read: destination; atomics: result (8 B); inline: the payload
  At remote;        // the target of the data or of the atomic
  uint32_t n = 0;   // data bytes (write, inline, read, put_signal)
  At sig, scratch;  // put_signal: the remote signal word and the local result of its fetch-add
};

// The post, effect and Ok-expectation of an operation; fail() turns the
// expectation into an error at one of its WQEs.
struct OpCase {
  Post post;
  Effect effect;
  Expect want;
  std::vector<uint8_t> opcodes;  // send opcode of each WQE
  Effect first_wqe;              // put_signal: the data WQE's effect alone
  OpCase& fail(Status s, uint32_t wqe, std::vector<uint64_t> names, std::vector<std::string> words = {});
};
OpCase make_case(Rig& r, const OpSpec& s);

// The two shapes most edge tests build, with the place under test given and
// every place not given a good one of its own.
// A data operation (write, inline, read, put_signal) of n bytes; local
// defaults to a(8192) + 64, remote to b(8192) + 64; put_signal's signal word
// is b(64) + 8 and its scratch a(64) + 16.
OpCase data_op(Rig& r, Op op, std::optional<At> local, std::optional<At> remote, uint32_t n);
// An atomic (fetch-add, compare-swap, or put_signal's signal): its 8-byte
// result (put_signal: the scratch) defaults to a(64) + 8, its target (the
// signal word) to b(64) + 8; put_signal's payload is 200 bytes a(256) -> b(256).
OpCase atomic_op(Rig& r, Op op, std::optional<At> result, std::optional<At> target);
// Which of the operation's WQEs is the atomic (put_signal: its second).
inline uint32_t atomic_wqe(Op op) { return op == Op::PutSignal ? 1 : 0; }

// ---- a range at an edge of its region
enum class Edge { EndsAtLastByte, OnePastEnd, StartsAtFirstByte, OneBeforeStart, ZeroLengthAtEnd };
inline constexpr Edge kEdges[] = {Edge::EndsAtLastByte, Edge::OnePastEnd, Edge::StartsAtFirstByte,
                                  Edge::OneBeforeStart, Edge::ZeroLengthAtEnd};
const char* edge_name(Edge e);
// The region of the edge cases (odd: its end is not 8-byte aligned) and the bytes a data operation moves.
inline constexpr size_t kLen = 4093;
inline constexpr uint32_t kN = 100;
// The operations with an 8-byte atomic (put_signal: its signal).
inline constexpr Op kAtomicOps[] = {Op::FetchAdd, Op::CompareSwap, Op::PutSignal};
// An n-byte range placed at edge `e` of a len-byte region: its offset from
// the region's start, its length (ZeroLengthAtEnd: 0), whether it is inside.
struct EdgeRange {
  int64_t off = 0;
  uint32_t n = 0;
  bool inside = true;
};
EdgeRange edge_range(Edge e, size_t len, uint32_t n);
// gtest name "<Op>_<Edge>" of an (Op, Edge) parameter.
std::string op_edge_name(const ::testing::TestParamInfo<std::tuple<Op, Edge>>& i);

// Does `text` name `v` in hex ("0x1a2b", any case, optionally zero-padded)?
bool names_hex(const std::string& text, uint64_t v);

// The one CQE in the ring (first lap) whose WQE counter is `idx`; null if
// there is none, and a test failure if there are several.
const mlx5::Cqe64* find_cqe(const dev::QpHandle& h, uint64_t idx);

// Send opcode and QPN of a CQE's sop_drop_qpn / s_wqe_opcode_qpn word.
uint8_t cqe_wqe_opcode(const mlx5::Cqe64& c);
uint32_t cqe_qpn(const mlx5::Cqe64& c);
uint32_t cqe_byte_count(const mlx5::Cqe64& c);
uint16_t cqe_wqe_counter(const mlx5::Cqe64& c);

// Syndrome an error CQE carries for each error status.
uint8_t syndrome_of(Status s);

}  // namespace kinet::test::edge
