// The message engine's target side: the region registry, the check of every
// incoming request, its execution and the answer (msg_engine.hpp).
#include <algorithm>
#include <cstring>
#include <random>
#include <unordered_set>

#include "core/cuda_shim.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "providers/emu/safe_copy.hpp"
#include "transports/ipc_path.hpp"
#include "transports/msg_engine.hpp"
#include "transports/msg_registry.hpp"

namespace kinet::transport {
using wire::MsgType;

uint32_t unique_key() {
  static std::mutex mu;
  static std::unordered_set<uint32_t>* used = new std::unordered_set<uint32_t>;  // process lifetime
  static std::mt19937 rng{std::random_device{}()};
  std::lock_guard lk(mu);
  for (;;) {
    const uint32_t k = static_cast<uint32_t>(rng());
    if (k != 0 && used->insert(k).second) return k;
  }
}

namespace {
class MsgRegion final : public TransportRegion {
 public:
  MsgRegion(std::shared_ptr<Registry> reg, Registry::Entry e, uint32_t key, uint64_t node)
      : reg_(std::move(reg)), e_(e), key_(key), node_(node) {}
  ~MsgRegion() override {
    {
      std::lock_guard lk(reg_->mu);  // waits for an operation executing on any region
      reg_->by_key.erase(key_);      // no new pins from here on
      if (e_.kind == MemoryKind::Gpu) reg_->gpu.fetch_sub(1);
    }
    if (e_.pins->load(std::memory_order_acquire) != 0) wait_unpinned();
  }
  // Bodies are still being fetched into the region: drive the channel
  // (this thread may be the one that polls) until they land; past the
  // transport's timeout their senders are given up on, which ends the
  // fetches. The memory is the application's again only after that.
  void wait_unpinned() {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    bool gave_up = false;
    while (e_.pins->load(std::memory_order_acquire) != 0) {
      const bool late = Clock::now() - start > reg_->timeout;
      {
        std::lock_guard dl(reg_->drive_mu);
        if (!reg_->drive) break;  // the engine and its channel are gone: every fetch ended
        reg_->drive(late && !gave_up);
      }
      if (late && !gave_up) {
        gave_up = true;
        KINET_LOG(Warn, "transport: deregistering [%p, +%llu): data still arriving after %lld ms; its senders are "
                  "given up on", static_cast<void*>(e_.base), static_cast<unsigned long long>(e_.len),
                  static_cast<long long>(reg_->timeout.count()));
      }
      if (Clock::now() - start > 2 * reg_->timeout + std::chrono::seconds(10)) {
        KINET_LOG(Error, "transport: deregistering [%p, +%llu): %u fetches into it did not end; returning anyway",
                  static_cast<void*>(e_.base), static_cast<unsigned long long>(e_.len), e_.pins->load());
        break;
      }
    }
  }

  void* addr() const override { return e_.base; }
  size_t length() const override { return e_.len; }
  uint32_t access() const override { return e_.access; }
  MemoryKind kind() const override { return e_.kind; }
  RemoteKey remote_key() const override {
    RemoteKey k;
    k.provider = RemoteKey::kTransport;
    k.node = node_;
    k.addr = reinterpret_cast<uint64_t>(e_.base);
    k.length = e_.len;
    k.rkey = key_;
    k.access = e_.access;
    return k;
  }

 private:
  std::shared_ptr<Registry> reg_;
  Registry::Entry e_;
  uint32_t key_;
  uint64_t node_;
};

// kinet::Status of a check's failure, as answered.
Status fault_status(Registry::Fault f) {
  return f == Registry::Fault::Unaligned ? Status::RemoteInvalidRequest : Status::RemoteAccess;
}

uint32_t needed_access(MsgType t) {
  switch (t) {
    case MsgType::Put:
    case MsgType::PutSignal: return kRemoteWrite;
    case MsgType::Get: return kRemoteRead;
    default: return kRemoteAtomic;
  }
}

using text::hex;
}  // namespace

Registry::Fault Registry::check(uint32_t key, uint64_t raddr, uint64_t len, uint32_t need, bool word,
                                const Entry** out) const {
  auto it = by_key.find(key);
  if (it == by_key.end()) return Fault::UnknownKey;
  const Entry& e = *(*out = &it->second);
  const uint64_t b = reinterpret_cast<uint64_t>(e.base);
  if (raddr < b || raddr - b > e.len || len > e.len - (raddr - b)) return Fault::OutOfBounds;
  if ((e.access & need) != need) return Fault::NoAccess;
  if (word && raddr % 8 != 0) return Fault::Unaligned;
  return Fault::None;
}

std::unique_ptr<TransportRegion> MsgTransport::register_memory(void* addr, size_t bytes, uint32_t access,
                                                               MemoryKind kind) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  if (!addr || bytes == 0 || a + bytes < a)
    throw Error(ErrorCode::InvalidArgument, "transport: register_memory: null, empty or wrapping range " +
                                                hex(a) + " + " + std::to_string(bytes));
  if (access & ~uint32_t{kAccessAll})
    throw Error(ErrorCode::InvalidArgument, "transport: register_memory: access " + hex(access) +
                                                " has bits beyond kAccessAll");
  if (kind != MemoryKind::Host && kind != MemoryKind::Gpu)
    throw Error(ErrorCode::InvalidArgument, "transport: register_memory: unknown memory kind");
  if (kind == MemoryKind::Gpu && !cuda::available())
    throw Error(ErrorCode::NotSupported, "transport: register_memory: GPU memory at " + hex(a) +
                                             " but CUDA is not available in this process");
  Registry::Entry e{static_cast<uint8_t*>(addr), bytes, access, kind, std::make_shared<std::atomic<uint32_t>>(0)};
  const uint32_t key = unique_key();
  {
    std::lock_guard lk(reg_->mu);
    reg_->by_key.emplace(key, e);
    if (kind == MemoryKind::Gpu) reg_->gpu.fetch_add(1);
  }
  if (ipc_) ipc_->prepare(*reg_, key, addr, bytes);  // cuda_ipc: export now, not on the data path
  return std::make_unique<MsgRegion>(reg_, e, key, node_);
}

void MsgTransport::reject(const std::string& peer, const std::string& reason, const std::string& detail) {
  uint64_t n;
  {
    std::lock_guard lk(log_mu_);
    n = ++rejections_[peer + ": " + reason];
  }
  if (n == 1)
    KINET_LOG(Warn, "transport %s: rejected a message from %s: %s: %s (logged once per peer and reason)",
              opt_.name.c_str(), peer.c_str(), reason.c_str(), detail.c_str());
  else if (n == 1000 || n == 1000000)
    KINET_LOG(Warn, "transport %s: %llu messages from %s rejected so far: %s", opt_.name.c_str(),
              static_cast<unsigned long long>(n), peer.c_str(), reason.c_str());
}

void MsgTransport::handle_request(Peer& p, const uint8_t* data, size_t bytes, const uint8_t* body, size_t blen) {
  wire::Request r;
  if (std::string e = wire::decode(data, bytes, body, blen, &r); !e.empty()) {
    // A request whose op id can be read is answered, so its requester is not left waiting.
    reject(p.name, "malformed", e);
    if (bytes >= 32) {
      wire::Request q;
      std::memcpy(&q.seq, data + 16, 8);   // little-endian hosts only (kinet's targets)
      std::memcpy(&q.op_id, data + 24, 8);
      if (q.op_id) answer(p, q, Status::RemoteInvalidRequest, 0, {});
    }
    return;
  }
  if (r.node != p.node) {
    reject(p.name, "wrong node", "request claims node " + hex(r.node) + ", the peer is " + hex(p.node));
    return answer(p, r, Status::RemoteInvalidRequest, 0, {});
  }
  if (r.seq == p.rx_next) {
    // The ack first: it completes operations the sender saw executed before
    // it sent this request.
    apply_ack(p, r.ack);
    if (p.lost) return;
    ++p.rx_next;
    execute(p, r);
    // Requests that arrived early run now, in order.
    while (!p.held.empty() && p.held.begin()->first == p.rx_next && !p.lost) {
      std::vector<uint8_t> m = std::move(p.held.begin()->second);
      p.held.erase(p.held.begin());
      wire::Request h;
      if (wire::decode(m.data(), m.size(), &h).empty()) {
        apply_ack(p, h.ack);
        if (p.lost) return;
        ++p.rx_next;
        execute(p, h);
      }
    }
    return;
  }
  if (r.seq > p.rx_next && !ordered_ && !p.held.count(r.seq)) {
    // Dropping it would leave a gap no later request closes: the peer's
    // stream could never run again.
    if (p.held.size() >= opt_.max_held)
      return fail_peer(p, Status::TransportRetryExceeded,
                       "peer lost: " + p.name + "'s requests arrived reordered beyond " +
                           std::to_string(opt_.max_held) + " held (request " + std::to_string(r.seq) +
                           " while expecting " + std::to_string(p.rx_next) + ")");
    std::vector<uint8_t> m(data, data + bytes);
    if (blen) m.insert(m.end(), body, body + blen);
    p.held.emplace(r.seq, std::move(m));
    return;
  }
  reject(p.name, "sequence", "request " + std::to_string(r.seq) + " while expecting " + std::to_string(p.rx_next));
  answer(p, r, Status::RemoteInvalidRequest, 0, {});
}

void MsgTransport::execute(Peer& p, const wire::Request& r) {
  const char* tn = wire::type_name(r.type);
  const bool atomic_word = r.type != MsgType::Put && r.type != MsgType::Get && r.type != MsgType::PutSignal;
  const bool by_ipc = r.flags & wire::kFlagIpc;  // cuda_ipc (ipc_path.hpp)
  if (by_ipc && !ipc_) {
    reject(p.name, "ipc unsupported", std::string(tn) + " by IPC reference to a transport of provider " +
                                          ch_->provider() + ", not cuda_ipc");
    return answer(p, r, Status::RemoteInvalidRequest, 0, {});
  }
  // A get's answer is one message: a longer one (the engine never asks for
  // more than a piece) could not be sent, and the answer would pin it.
  if (r.type == MsgType::Get && !by_ipc && r.length > ch_->max_message() - wire::kAnswerBytes) {
    reject(p.name, "too long", "get of " + std::to_string(r.length) + " bytes, more than one answer carries (" +
                                   std::to_string(ch_->max_message() - wire::kAnswerBytes) + ")");
    return answer(p, r, Status::RemoteInvalidRequest, 0, {});
  }
  // A split put_signal whose data pieces did not all land does not signal.
  if ((r.flags & wire::kFlagAfterPieces) && p.failed_seq >= r.seq - r.compare)
    return answer(p, r, Status::RemoteInvalidRequest, 0, {});
  std::string ipc_reason, ipc_detail;  // an IPC failure's rejection
  std::unique_lock lk(reg_->mu);
  // Every check of both ranges (data and, for put_signal, the signal word) before any byte moves.
  auto check = [&](uint32_t key, uint64_t raddr, uint64_t len, uint32_t need, bool word,
                   const Registry::Entry** out) -> Status {
    using F = Registry::Fault;
    const F f = reg_->check(key, raddr, len, need, word, out);
    if (f == F::None) return Status::Ok;
    if (f == F::UnknownKey) {
      reject(p.name, "unknown key", std::string(tn) + " with key " + hex(key) + " (never issued or deregistered)");
    } else if (f == F::OutOfBounds) {
      reject(p.name, "out of bounds", std::string(tn) + " of [" + hex(raddr) + ", +" + std::to_string(len) +
                                          ") outside key " + hex(key) + "'s [" +
                                          hex(reinterpret_cast<uint64_t>((*out)->base)) + ", +" +
                                          std::to_string((*out)->len) + ")");
    } else if (f == F::NoAccess) {
      reject(p.name, "no access", std::string(tn) + " needs access " + hex(need) + ", key " + hex(key) + " has " +
                                      hex((*out)->access));
    } else {
      reject(p.name, "unaligned", std::string(tn) + " at " + hex(raddr) + " is not 8-byte aligned");
    }
    return fault_status(f);
  };
  static const Registry::Entry kNoWord{};  // s when there is no signal word
  const Registry::Entry *dp = nullptr, *sp = &kNoWord;
  Status st = check(r.key, r.raddr, r.length, needed_access(r.type), atomic_word, &dp);
  if (st == Status::Ok && r.type == MsgType::PutSignal) st = check(r.sig_key, r.sig_raddr, 8, kRemoteAtomic, true, &sp);
  if (st != Status::Ok) {
    lk.unlock();
    return answer(p, r, st, 0, {});
  }
  const Registry::Entry &d = *dp, &s = *sp;  // under lk to the end of the access
  auto fault = [](const emu::CopyResult& c, MemoryKind k) {
    return c ? (k == MemoryKind::Gpu ? Status::RemoteOperation : Status::RemoteAccess) : Status::Ok;
  };
  uint8_t* target = d.base + (r.raddr - reinterpret_cast<uint64_t>(d.base));
  uint64_t old = 0;
  bool sig_faulted = false;  // a put_signal's data landed, its word faulted
  std::vector<uint8_t> out;
  auto signal = [&](uint64_t* w, MemoryKind k, uint8_t op, uint64_t v) -> Status {
    if (k == MemoryKind::Host) {
      // A waiter reads the word with acquire loads: the update is a release
      // atomic, so the data copied before it is visible to whoever sees it
      // (weakly ordered CPUs too); a word unmapped or read-only is an error
      // answer.
      return fault(emu::safe_release_update(w, op == static_cast<uint8_t>(SignalOp::Add), v), k);
    }
    if (op == static_cast<uint8_t>(SignalOp::Add)) return fault(emu::safe_atomic(w, k, true, v, 0, &old), k);
    // Set: compare-and-swap until it lands (safe_atomic serialises the engine's atomics).
    uint64_t cur = 0;
    if (Status e = fault(emu::safe_atomic(w, k, true, 0, 0, &cur), k); e != Status::Ok) return e;
    for (int i = 0; i < 1000; ++i) {
      uint64_t prev = 0;
      if (Status e = fault(emu::safe_atomic(w, k, false, v, cur, &prev), k); e != Status::Ok) return e;
      if (prev == cur) return Status::Ok;
      cur = prev;
    }
    return Status::RemoteOperation;
  };
  switch (r.type) {
    case MsgType::Put:
    case MsgType::PutSignal:
      if (by_ipc) st = ipc_->execute(p.id, r, target, d.kind, &ipc_reason, &ipc_detail);
      // A placed body (place_body) was fetched to its target already.
      else if (r.length && r.payload != target)
        st = fault(emu::safe_copy(target, d.kind, r.payload, MemoryKind::Host, r.length), d.kind);
      if (st == Status::Ok && r.type == MsgType::PutSignal) {
        uint8_t* w = s.base + (r.sig_raddr - reinterpret_cast<uint64_t>(s.base));
        st = signal(reinterpret_cast<uint64_t*>(w), s.kind, r.sig_op, r.operand);
        sig_faulted = st != Status::Ok;
      }
      old = 0;
      break;
    case MsgType::Get:
      if (by_ipc) {  // pushed into the requester's memory: the answer carries no data
        st = ipc_->execute(p.id, r, target, d.kind, &ipc_reason, &ipc_detail);
        break;
      }
      out.resize(r.length);
      if (r.length) st = fault(emu::safe_copy(out.data(), MemoryKind::Host, target, d.kind, r.length), d.kind);
      if (st != Status::Ok) out.clear();
      break;
    case MsgType::FetchAdd:
    case MsgType::CompareSwap:
      st = fault(emu::safe_atomic(reinterpret_cast<uint64_t*>(target), d.kind, r.type == MsgType::FetchAdd,
                                  r.operand, r.compare, &old),
                 d.kind);
      break;
    case MsgType::Signal:
      st = signal(reinterpret_cast<uint64_t*>(target), d.kind, r.sig_op, r.operand);
      old = 0;
      break;
    default: st = Status::RemoteInvalidRequest;
  }
  lk.unlock();
  if (st != Status::Ok) {
    if (!ipc_reason.empty()) reject(p.name, ipc_reason, ipc_detail);
    else if (sig_faulted)
      reject(p.name, "fault", std::string(tn) + "'s signal word at " + hex(r.sig_raddr) + ": the memory behind key " +
                                  hex(r.sig_key) + " faulted (the data was written)");
    else reject(p.name, "fault", std::string(tn) + " at " + hex(r.raddr) + ": the memory behind key " + hex(r.key) +
                                     " faulted");
    old = 0;
  }
  if (ordered_ && st == Status::Ok &&
      (r.type == MsgType::Put || r.type == MsgType::PutSignal || r.type == MsgType::Signal))
    return owe_ack(p);  // acknowledged cumulatively (msg_engine.hpp)
  answer(p, r, st, old, std::move(out));
}

uint8_t* MsgTransport::place_body(uint32_t peer, const uint8_t* head, size_t hlen, size_t blen,
                                  std::shared_ptr<std::atomic<uint32_t>>* pin, uint8_t** word) {
  *word = nullptr;
  Peer* p = peer_at(peer);
  wire::Request r;
  // The same checks as at delivery, for host memory only (a GPU target is
  // copied through the engine); whatever fails them takes the buffered path
  // and is answered, and logged, when it is delivered.
  if (!p || p->lost || !ordered_ || blen == 0 || !wire::decode(head, hlen, head, blen, &r).empty()) return nullptr;
  if ((r.type != MsgType::Put && r.type != MsgType::PutSignal) || (r.flags & wire::kFlagIpc) || r.node != p->node ||
      r.seq < p->rx_next)
    return nullptr;
  std::lock_guard lk(reg_->mu);
  const Registry::Entry *d = nullptr, *s = nullptr;
  if (reg_->check(r.key, r.raddr, r.length, kRemoteWrite, false, &d) != Registry::Fault::None ||
      d->kind != MemoryKind::Host)
    return nullptr;
  // put_signal: both ranges pass before any byte moves, as in execute().
  if (r.type == MsgType::PutSignal &&
      reg_->check(r.sig_key, r.sig_raddr, 8, kRemoteAtomic, true, &s) != Registry::Fault::None)
    return nullptr;
  d->pins->fetch_add(1, std::memory_order_relaxed);
  *pin = d->pins;
  if (s) *word = s->base + (r.sig_raddr - reinterpret_cast<uint64_t>(s->base));
  ++placed_;
  return d->base + (r.raddr - reinterpret_cast<uint64_t>(d->base));
}

void MsgTransport::answer(Peer& p, const wire::Request& r, Status st, uint64_t old, std::vector<uint8_t> data) {
  if (p.answers_queued >= opt_.max_backlog)
    return fail_peer(p, Status::TransportRetryExceeded,
                     "peer lost: " + p.name + " sent requests faster than it took " +
                         std::to_string(opt_.max_backlog) + " answers");
  if (p.answer_bytes_queued + data.size() > opt_.max_backlog_bytes)
    return fail_peer(p, Status::TransportRetryExceeded,
                     "peer lost: " + p.name + " asked for data faster than it took it: " +
                         std::to_string(p.answer_bytes_queued) + " bytes of answers queued, at most " +
                         std::to_string(opt_.max_backlog_bytes));
  if (st != Status::Ok) p.failed_seq = std::max(p.failed_seq, r.seq);
  auto o = new_out();
  wire::Answer a;
  a.node = node_;
  a.seq = r.seq;
  a.op_id = r.op_id;
  a.status = st;
  a.old_value = st == Status::Ok ? old : 0;
  a.length = st == Status::Ok ? data.size() : 0;
  wire::encode_header(a, o->hdr);
  o->hdr_len = wire::kAnswerBytes;
  if (a.length) {
    o->owned = std::move(data);
    o->payload = o->owned.data();
    o->len = o->owned.size();
  }
  o->is_answer = true;
  enqueue(p, std::move(o));
}

}  // namespace kinet::transport
