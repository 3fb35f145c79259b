// The message engine's requester side, poll() and peer handling; incoming
// messages and answers are msg_incoming.cpp, the target side (regions,
// checks, execution) msg_target.cpp.
#include "transports/msg_engine.hpp"

#include <atomic>

#include <time.h>

#include <cstring>
#include <random>

#include "core/log.hpp"
#include "providers/emu/safe_copy.hpp"
#include "transports/ipc_path.hpp"
#include "transports/msg_registry.hpp"

namespace kinet::transport {
using wire::MsgType;
using Clock = CoarseClock;

namespace {
constexpr uint32_t kAddrMagic = 0x31454e4b;  // "KNE1"
void put_u64(uint8_t* p, uint64_t v) {
  for (int b = 0; b < 8; ++b) p[b] = static_cast<uint8_t>(v >> (8 * b));
}
bool is_atomic(MsgType t) { return t == MsgType::FetchAdd || t == MsgType::CompareSwap; }
}  // namespace

std::vector<uint8_t> engine_address(uint64_t node, const std::vector<uint8_t>& ch) {
  std::vector<uint8_t> a(12 + ch.size());
  std::memcpy(a.data(), &kAddrMagic, 4);
  std::memcpy(a.data() + 4, &node, 8);
  if (!ch.empty()) std::memcpy(a.data() + 12, ch.data(), ch.size());
  return a;
}

void parse_engine_address(const std::vector<uint8_t>& a, const std::string& name, uint64_t* node,
                          std::vector<uint8_t>* ch) {
  uint32_t magic = 0;
  if (a.size() < 12) throw Error(ErrorCode::InvalidArgument, "transport: address of " + name + " is " +
                                                                 std::to_string(a.size()) + " bytes, too short");
  std::memcpy(&magic, a.data(), 4);
  if (magic != kAddrMagic) throw Error(ErrorCode::InvalidArgument, "transport: address of " + name + " has a bad magic");
  std::memcpy(node, a.data() + 4, 8);
  if (*node == 0) throw Error(ErrorCode::InvalidArgument, "transport: address of " + name + " has node 0");
  ch->assign(a.begin() + 12, a.end());
}

CoarseClock::time_point CoarseClock::now() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return time_point(duration(ts.tv_sec * 1000000000LL + ts.tv_nsec));
}

uint64_t random_node_id() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (uint64_t{rd()} << 32) ^ rd();
  return v;
}

MsgTransport::MsgTransport(std::unique_ptr<Channel> ch, uint64_t node, MsgOptions opt)
    : ch_(std::move(ch)), node_(node), opt_(std::move(opt)), reg_(std::make_shared<Registry>()),
      peers_(new std::unique_ptr<Peer[]>[kMaxChunks]), keys_(new std::unique_ptr<KeySlot[]>[kMaxKeyChunks]) {
  const size_t mm = ch_->max_message();
  if (mm < wire::kRequestBytes + 64 || opt_.depth == 0 || opt_.timeout.count() <= 0)
    throw Error(ErrorCode::InvalidArgument, "transport: channel " + std::string(ch_->provider()) +
                                                ": max_message " + std::to_string(mm) +
                                                " too small, or depth / timeout 0");
  piece_ = mm - wire::kRequestBytes;
  ordered_ = ch_->ordered();
  ops_.resize(opt_.depth);
  free_.reserve(opt_.depth);
  for (size_t i = opt_.depth; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
  static_assert(IpcPath::kMaxPeers >= kChunk * kMaxChunks);
  if (opt_.ipc) ipc_ = std::make_unique<IpcPath>(opt_.ipc, opt_.name);
  reg_->timeout = opt_.timeout;
  std::lock_guard dl(reg_->drive_mu);
  reg_->drive = [ch = ch_.get()](bool give_up) { ch->drive_placed(give_up); };
}

MsgTransport::~MsgTransport() {
  {
    // First: the channel may still hold buffers of in_channel_, and fetch
    // into placed bodies; a deregistration waiting for those waits for this.
    std::lock_guard dl(reg_->drive_mu);
    ch_.reset();
    reg_->drive = nullptr;
  }
  std::lock_guard lk(log_mu_);
  for (auto& [k, n] : rejections_)
    if (n > 1) KINET_LOG(Info, "transport %016llx: %s: %llu messages rejected in all", (unsigned long long)node_,
                         k.c_str(), (unsigned long long)n);
}

std::vector<uint8_t> MsgTransport::address() const { return engine_address(node_, ch_->address()); }

MsgTransport::Peer* MsgTransport::peer_at(PeerId p) const {
  if (p >= npeers_.load(std::memory_order_acquire)) return nullptr;
  return &peers_[p / kChunk][p % kChunk];
}

PeerId MsgTransport::connect(const std::vector<uint8_t>& address, const std::string& name) {
  uint64_t node = 0;
  std::vector<uint8_t> cha;
  parse_engine_address(address, name, &node, &cha);
  const uint32_t n = npeers_.load(std::memory_order_relaxed);
  if (n >= kChunk * kMaxChunks)
    throw Error(ErrorCode::ResourceExhausted, "transport: can't connect " + name + ": " + std::to_string(n) + " peers");
  if (!peers_[n / kChunk]) peers_[n / kChunk].reset(new Peer[kChunk]);
  const uint32_t c = ch_->add_peer(cha, name);
  if (c != n)
    throw Error(ErrorCode::BadState, "transport: channel " + std::string(ch_->provider()) + " numbered peer " +
                                         name + " " + std::to_string(c) + ", expected " + std::to_string(n));
  Peer& p = peers_[n / kChunk][n % kChunk];
  p.id = n;
  p.name = name;
  p.node = node;
  if (ipc_) ipc_->add_peer(n, cha);
  npeers_.store(n + 1, std::memory_order_release);
  return n;
}

uint32_t MsgTransport::import_key(PeerId peer, const RemoteKey& key) {
  Peer* p = peer_at(peer);
  if (!p) throw Error(ErrorCode::InvalidArgument, "transport: import_key: no peer " + std::to_string(peer));
  if (key.provider != RemoteKey::kTransport)
    throw Error(ErrorCode::InvalidArgument, "transport: import_key: key of provider " + std::to_string(key.provider) +
                                                " is not a transport key (provider 3), for " + p->name);
  if (key.node != p->node)
    throw Error(ErrorCode::InvalidArgument, "transport: import_key: key of node " + std::to_string(key.node) +
                                                " is not " + p->name + "'s (node " + std::to_string(p->node) + ")");
  if (key.rkey == 0) throw Error(ErrorCode::InvalidArgument, "transport: import_key: key 0 from " + p->name);
  const uint64_t word = uint64_t{peer} << 32 | key.rkey;
  std::lock_guard lk(keys_mu_);
  if (!free_keys_.empty()) {
    const uint32_t n = free_keys_.back();
    free_keys_.pop_back();
    KeySlot& s = keys_[n / kKeyChunk][n % kKeyChunk];
    s.word.store(word, std::memory_order_release);  // its generation moved on at release: no old id matches
    return n | s.gen.load(std::memory_order_relaxed) << kKeyPlaceBits;
  }
  const uint32_t n = nkeys_.load(std::memory_order_relaxed);
  if (n >= kKeyChunk * kMaxKeyChunks)
    throw Error(ErrorCode::ResourceExhausted,
                "transport: import_key: " + std::to_string(n) + " keys imported and not released");
  if (!keys_[n / kKeyChunk]) keys_[n / kKeyChunk].reset(new KeySlot[kKeyChunk]);
  keys_[n / kKeyChunk][n % kKeyChunk].word.store(word, std::memory_order_relaxed);
  nkeys_.store(n + 1, std::memory_order_release);
  return n;
}

void MsgTransport::release_key(uint32_t key_id) {
  const uint32_t n = key_id & ((1u << kKeyPlaceBits) - 1), g = key_id >> kKeyPlaceBits;
  std::lock_guard lk(keys_mu_);
  if (n >= nkeys_.load(std::memory_order_relaxed))
    throw Error(ErrorCode::InvalidArgument, "transport: release_key: key id " + std::to_string(key_id) +
                                                " was never imported");
  KeySlot& s = keys_[n / kKeyChunk][n % kKeyChunk];
  if (s.gen.load(std::memory_order_relaxed) != g)
    throw Error(ErrorCode::InvalidArgument, "transport: release_key: key id " + std::to_string(key_id) +
                                                " was released already");
  s.gen.store(g + 1, std::memory_order_release);
  if (g + 1 <= kKeyGenMax) free_keys_.push_back(n);  // else retired: an id of it would come round again
}

std::string MsgTransport::peer_error(PeerId peer) const {
  Peer* p = peer_at(peer);
  if (!p) return "no peer " + std::to_string(peer);
  std::lock_guard lk(err_mu_);
  return p->error;
}

MsgTransport::Backlog MsgTransport::backlog(PeerId peer) const {
  const Peer* p = peer_at(peer);
  if (!p) return {};
  return {p->q.size(), p->answer_bytes_queued, p->unacked.size()};
}

uint64_t MsgTransport::rejected(const std::string& reason) const {
  std::lock_guard lk(log_mu_);
  uint64_t n = 0;
  for (auto& [k, c] : rejections_) {
    auto at = k.find(": ");
    if (at != std::string::npos && k.compare(at + 2, reason.size(), reason) == 0) n += c;
  }
  return n;
}

bool MsgTransport::local_gpu(const void* ptr, uint64_t n) const {
  if (reg_->gpu.load(std::memory_order_relaxed) == 0) return false;
  auto a = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lk(reg_->mu);
  for (auto& [k, e] : reg_->by_key) {
    auto b = reinterpret_cast<uintptr_t>(e.base);
    if (e.kind == MemoryKind::Gpu && a >= b && a - b <= e.len && n <= e.len - (a - b)) return true;
  }
  return false;
}

Status MsgTransport::check_post(PeerId peer, uint32_t key_id, Key* k) {
  if (!peer_at(peer)) return Status::InvalidArgument;
  const uint32_t n = key_id & ((1u << kKeyPlaceBits) - 1), g = key_id >> kKeyPlaceBits;
  if (n >= nkeys_.load(std::memory_order_acquire)) return Status::InvalidArgument;
  const KeySlot& s = keys_[n / kKeyChunk][n % kKeyChunk];
  // The generation before and after the word: a release (and a reuse of the
  // place) in between shows, and the id no longer posts.
  if (s.gen.load(std::memory_order_acquire) != g) return Status::InvalidArgument;
  const uint64_t w = s.word.load(std::memory_order_acquire);
  if (s.gen.load(std::memory_order_acquire) != g) return Status::InvalidArgument;
  if (static_cast<PeerId>(w >> 32) != peer) return Status::InvalidArgument;
  *k = {peer, static_cast<uint32_t>(w)};
  return Status::Ok;
}

Status MsgTransport::put(PeerId peer, const void* src, uint64_t bytes, uint32_t key_id, uint64_t raddr,
                         uint64_t cookie) {
  Key k;
  if (Status s = check_post(peer, key_id, &k); s != Status::Ok) return s;
  if (bytes && !src) return Status::InvalidArgument;
  return post(MsgType::Put, peer, src, nullptr, nullptr, bytes, k, raddr, {}, 0, 0, 0, 0, cookie);
}

Status MsgTransport::get(PeerId peer, void* dst, uint64_t bytes, uint32_t key_id, uint64_t raddr, uint64_t cookie) {
  Key k;
  if (Status s = check_post(peer, key_id, &k); s != Status::Ok) return s;
  if (bytes && !dst) return Status::InvalidArgument;
  return post(MsgType::Get, peer, nullptr, dst, nullptr, bytes, k, raddr, {}, 0, 0, 0, 0, cookie);
}

Status MsgTransport::fetch_add(PeerId peer, uint64_t* result, uint32_t key_id, uint64_t raddr, uint64_t add,
                               uint64_t cookie) {
  Key k;
  if (Status s = check_post(peer, key_id, &k); s != Status::Ok) return s;
  if (!result) return Status::InvalidArgument;
  return post(MsgType::FetchAdd, peer, nullptr, nullptr, result, 8, k, raddr, {}, 0, 0, add, 0, cookie);
}

Status MsgTransport::compare_swap(PeerId peer, uint64_t* result, uint32_t key_id, uint64_t raddr, uint64_t compare,
                                  uint64_t swap, uint64_t cookie) {
  Key k;
  if (Status s = check_post(peer, key_id, &k); s != Status::Ok) return s;
  if (!result) return Status::InvalidArgument;
  return post(MsgType::CompareSwap, peer, nullptr, nullptr, result, 8, k, raddr, {}, 0, 0, swap, compare, cookie);
}

Status MsgTransport::signal(PeerId peer, uint32_t key_id, uint64_t raddr, SignalOp op, uint64_t value,
                            uint64_t cookie) {
  Key k;
  if (Status s = check_post(peer, key_id, &k); s != Status::Ok) return s;
  if (op != SignalOp::Add && op != SignalOp::Set) return Status::InvalidArgument;
  return post(MsgType::Signal, peer, nullptr, nullptr, nullptr, 8, k, raddr, {}, 0, static_cast<uint8_t>(op), value,
              0, cookie);
}

Status MsgTransport::put_signal(PeerId peer, const void* src, uint64_t bytes, uint32_t key_id, uint64_t raddr,
                                uint32_t sig_key_id, uint64_t sig_raddr, SignalOp op, uint64_t value,
                                uint64_t cookie) {
  Key k, sk;
  if (Status s = check_post(peer, sig_key_id, &sk); s != Status::Ok) return s;
  if (op != SignalOp::Add && op != SignalOp::Set) return Status::InvalidArgument;
  if (bytes == 0)
    return post(MsgType::Signal, peer, nullptr, nullptr, nullptr, 8, sk, sig_raddr, {}, 0, static_cast<uint8_t>(op),
                value, 0, cookie);
  if (Status s = check_post(peer, key_id, &k); s != Status::Ok) return s;
  if (!src) return Status::InvalidArgument;
  return post(MsgType::PutSignal, peer, src, nullptr, nullptr, bytes, k, raddr, sk, sig_raddr,
              static_cast<uint8_t>(op), value, 0, cookie);
}

Status MsgTransport::post(MsgType t, PeerId peer, const void* src, void* dst, uint64_t* result, uint64_t bytes, Key k,
                          uint64_t raddr, Key sk, uint64_t sig_raddr, uint8_t sig_op, uint64_t operand,
                          uint64_t compare, uint64_t cookie) {
  if (outstanding_ >= opt_.depth || free_.empty()) return Status::NoSpace;
  const bool data = t == MsgType::Put || t == MsgType::PutSignal || t == MsgType::Get;
  // Before anything is split or staged: a length near 2^64 would mean billions of pieces.
  if (data && bytes > kMaxOpBytes) return Status::InvalidArgument;
  uint64_t npieces = data && bytes > piece_ ? (bytes + piece_ - 1) / piece_ : 1;
  if (npieces >= kNone) return Status::InvalidArgument;
  if (data && raddr + bytes < raddr) {
    // A wrapping remote range can't be split; one message lets the target reject it.
    npieces = 1;
    if (bytes > piece_) return Status::InvalidArgument;
  }
  // cuda_ipc: GPU data goes by reference, in one piece (ipc_path.hpp).
  wire::IpcRef ref;
  const bool by_ipc = ipc_ && data && bytes && ipc_->reference(*reg_, peer, src ? src : dst, bytes, &ref);
  if (by_ipc) npieces = 1;
  std::vector<uint8_t> staged;
  if (!by_ipc && src && bytes && local_gpu(src, bytes)) {
    staged.resize(bytes);
    if (emu::CopyResult r = emu::safe_copy(staged.data(), MemoryKind::Host, src, MemoryKind::Gpu, bytes)) {
      // Nothing was sent. Logged on the first failure and then at 1000, 10^6.
      static std::atomic<uint64_t> fails{0};
      const uint64_t n = ++fails;
      if (n == 1 || n == 1000 || n == 1000000)
        KINET_LOG(Error, "transport %s: reading %llu bytes of GPU memory at %p to send (failure %llu): %s",
                  opt_.name.c_str(), static_cast<unsigned long long>(bytes), src, static_cast<unsigned long long>(n),
                  r.why.c_str());
      return Status::LocalAccess;
    }
  }
  Peer& p = *peer_at(peer);
  const uint32_t place = free_.back();
  free_.pop_back();
  ++outstanding_;
  Op& op = ops_[place];
  op.busy = true;
  op.type = t;
  op.peer = peer;
  op.cookie = cookie;
  op.dst = static_cast<uint8_t*>(dst);
  op.dst_kind = dst && bytes && local_gpu(dst, bytes) ? MemoryKind::Gpu : MemoryKind::Host;
  op.result = result;
  op.result_kind = result && local_gpu(result, 8) ? MemoryKind::Gpu : MemoryKind::Host;
  op.pieces_left = static_cast<uint32_t>(npieces);
  op.fail_piece = kNone;
  op.status = Status::Ok;
  op.piece_bytes = piece_;
  op.bytes = bytes;
  op.ipc = by_ipc;
  if (p.lost) {
    op.status = Status::WrFlushed;
    complete(place);
    return Status::Ok;
  }
  const uint8_t* s = staged.empty() ? static_cast<const uint8_t*>(src) : staged.data();
  for (uint64_t i = 0; i < npieces; ++i) {
    const uint64_t off = i * piece_;
    const uint64_t len = by_ipc ? bytes : data ? std::min<uint64_t>(piece_, bytes - off) : 8;
    auto o = new_out();
    wire::Request r;
    const bool last = i + 1 == npieces;
    r.type = t == MsgType::PutSignal && !last ? MsgType::Put : t;
    r.node = node_;
    r.op_id = next_id_++;
    r.key = k.rkey;
    r.raddr = raddr + off;
    r.length = len;
    r.operand = operand;
    r.compare = compare;
    if (r.type == MsgType::PutSignal || r.type == MsgType::Signal) r.sig_op = sig_op;
    if (r.type == MsgType::PutSignal) r.sig_key = sk.rkey, r.sig_raddr = sig_raddr;
    if (r.type == MsgType::Put && t == MsgType::PutSignal) r.operand = 0;
    if (r.type == MsgType::PutSignal && npieces > 1) {
      // Right behind its data pieces, executed only if none of them failed
      // (msg_wire.hpp): no round trip between the data and the signal.
      r.flags = wire::kFlagAfterPieces;
      r.compare = npieces - 1;
    }
    if (by_ipc) {
      r.flags = wire::kFlagIpc;
      o->owned.resize(wire::kIpcRefBytes);
      wire::encode(ref, o->owned.data());
      o->payload = o->owned.data();
      o->len = wire::kIpcRefBytes;
    } else if (r.type == MsgType::Put || r.type == MsgType::PutSignal) {
      if (!staged.empty()) {
        o->owned.assign(s + off, s + off + len);
        o->payload = o->owned.data();
      } else {
        o->payload = s + off;
      }
      o->len = len;
    }
    add_piece(r.op_id, place, static_cast<uint32_t>(i));
    // Sequence numbers are assigned when the message is queued: queue order
    // is send order (a split operation's pieces are consecutive).
    o->is_request = true;
    r.seq = ++p.tx_seq;
    wire::encode_header(r, o->hdr);
    o->hdr_len = wire::kRequestBytes;
    if (ordered_ && r.type != MsgType::Get && !is_atomic(r.type)) {
      // Entries answered already (failures: the target acks only what
      // succeeded) leave from the front, so the list stays as long as what
      // is in flight instead of growing with every failed put.
      while (!p.unacked.empty() && !pieces_.count(p.unacked.front().second)) p.unacked.pop_front();
      p.unacked.emplace_back(r.seq, r.op_id);
    }
    enqueue(p, std::move(o));
  }
  deadlines_.push_back({Clock::now() + opt_.timeout, place, op.gen});
  flush(p);
  return Status::Ok;
}

void MsgTransport::enqueue(Peer& p, std::unique_ptr<Out> o) {
  if (o->is_answer) ++p.answers_queued, p.answer_bytes_queued += o->len;
  if (o->is_request) {
    // The ack is what was executed when the request is queued: every answer
    // it covers is queued ahead of it, so the requester sees failures first.
    put_u64(o->hdr + wire::kAckOffset, p.rx_next - 1);
    p.ack_owed = false;
  }
  p.q.push_back(std::move(o));
  if (!p.pending) {
    p.pending = true;
    pending_.push_back(p.id);
  }
}

void MsgTransport::flush(Peer& p) {
  while (!p.q.empty() && !p.lost) {
    Out* o = p.q.front().get();
    iovec iov[2] = {{o->hdr, o->hdr_len}, {const_cast<uint8_t*>(o->payload), o->len}};
    const uint64_t token = next_id_++;
    decltype(in_channel_)::iterator it;
    if (spare_sent_.empty()) {
      it = in_channel_.emplace(token, std::move(p.q.front())).first;
    } else {
      auto nh = std::move(spare_sent_.back());
      spare_sent_.pop_back();
      nh.key() = token;
      nh.mapped() = std::move(p.q.front());
      it = in_channel_.insert(std::move(nh)).position;
    }
    if (!ch_->send(p.id, iov, o->len ? 2 : 1, token)) {
      p.q.front() = std::move(it->second);
      spare_sent_.push_back(in_channel_.extract(it));
      return;
    }
    if (o->is_answer) --p.answers_queued, p.answer_bytes_queued -= o->len;
    p.q.pop_front();
  }
}

void MsgTransport::on_sent(uint64_t token, bool) {
  auto it = in_channel_.find(token);
  if (it == in_channel_.end()) return;
  recycle(std::move(it->second));
  auto nh = in_channel_.extract(it);
  if (spare_sent_.size() < kSpareNodes) spare_sent_.push_back(std::move(nh));
}

std::unique_ptr<MsgTransport::Out> MsgTransport::new_out() {
  if (spare_outs_.empty()) return std::make_unique<Out>();
  std::unique_ptr<Out> o = std::move(spare_outs_.back());
  spare_outs_.pop_back();
  return o;
}

void MsgTransport::recycle(std::unique_ptr<Out> o) {
  if (!o || spare_outs_.size() >= kSpareNodes) return;
  o->hdr_len = 0;
  o->payload = nullptr;
  o->len = 0;
  o->is_answer = o->is_request = o->is_ack = false;
  o->owned.clear();
  if (o->owned.capacity() > kSpareOwnedBytes) o->owned.shrink_to_fit();  // don't sit on a staged 1 MiB piece
  spare_outs_.push_back(std::move(o));
}

void MsgTransport::add_piece(uint64_t op_id, uint32_t place, uint32_t piece) {
  if (spare_pieces_.empty()) {
    pieces_.emplace(op_id, std::make_pair(place, piece));
    return;
  }
  auto nh = std::move(spare_pieces_.back());
  spare_pieces_.pop_back();
  nh.key() = op_id;
  nh.mapped() = {place, piece};
  pieces_.insert(std::move(nh));
}

void MsgTransport::erase_piece(decltype(pieces_)::iterator it) {
  auto nh = pieces_.extract(it);
  if (spare_pieces_.size() < kSpareNodes) spare_pieces_.push_back(std::move(nh));
}

void MsgTransport::on_peer_lost(uint32_t peer, const std::string& why) {
  if (Peer* p = peer_at(peer)) fail_peer(*p, Status::TransportRetryExceeded, "peer lost: " + why);
}

void MsgTransport::complete(uint32_t place) {
  Op& op = ops_[place];
  ready_.push_back({op.cookie, op.peer, op.status});
  op.busy = false;
  ++op.gen;
  free_.push_back(place);
}

void MsgTransport::fail_peer(Peer& p, Status st, const std::string& why) {
  if (p.lost) return;
  p.lost = true;
  {
    std::lock_guard lk(err_mu_);
    p.error = why;
  }
  KINET_LOG(Warn, "transport %s: %s: %s", opt_.name.c_str(), p.name.c_str(), why.c_str());
  for (auto it = pieces_.begin(); it != pieces_.end();)
    it = ops_[it->second.first].peer == p.id ? pieces_.erase(it) : std::next(it);
  for (uint32_t i = 0; i < ops_.size(); ++i)
    if (ops_[i].busy && ops_[i].peer == p.id) {
      ops_[i].status = st;
      complete(i);
    }
  p.q.clear();
  p.answers_queued = 0;
  p.answer_bytes_queued = 0;
  p.held.clear();
  p.unacked.clear();
  p.ack_owed = false;
  if (ipc_) ipc_->forget_peer(p.id);
}

void MsgTransport::finish_piece(uint32_t place, uint32_t piece, Status st) {
  Op& op = ops_[place];
  if (st != Status::Ok && piece < op.fail_piece) op.fail_piece = piece, op.status = st;
  if (--op.pieces_left == 0) complete(place);
}

void MsgTransport::check_deadlines() {
  while (!deadlines_.empty()) {
    const Deadline& d = deadlines_.front();
    const Op& op = ops_[d.place];
    if (!op.busy || op.gen != d.gen) {
      deadlines_.pop_front();
      continue;
    }
    if (Clock::now() < d.at) return;
    Peer& p = *peer_at(op.peer);
    const std::string why = "timeout after " + std::to_string(opt_.timeout.count()) + " ms waiting for " +
                            wire::type_name(op.type) + " to " + p.name;
    deadlines_.pop_front();
    fail_peer(p, Status::TransportRetryExceeded, why);
  }
}

size_t MsgTransport::poll(Completion* out, size_t max) {
  ++polls_;
  // One round: a channel's progress() may cost a syscall (UCX over tcp polls
  // its sockets), and a poll() that found a message should return it to the
  // application at once; the next poll() takes what came meanwhile.
  ch_->progress(*this);
  send_owed_acks();
  if (!pending_.empty()) {
    again_.clear();
    for (uint32_t id : pending_) {
      Peer& p = *peer_at(id);
      flush(p);
      if (!p.q.empty()) again_.push_back(id);
      else p.pending = false;
    }
    pending_.swap(again_);
  }
  // Deadlines are seconds away: every 16th poll reads the clock (a clock
  // read was 10-15 % of a busy-polling ping-pong's poll() on a VM).
  if ((polls_ & 15) == 0) check_deadlines();
  size_t n = 0;
  while (n < max && !ready_.empty()) {
    out[n++] = ready_.front();
    ready_.pop_front();
    --outstanding_;
  }
  return n;
}

}  // namespace kinet::transport
