#include "transports/ucx/ucx_channel.hpp"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <exception>
#include <utility>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/env.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "kinet/kinet.hpp"

namespace kinet::transport::ucx {
namespace {

constexpr uint32_t kAddrMagic = 0x5843554b;  // "KUCX" little-endian
constexpr uint32_t kAmMagic = 0x4d41554b;    // "KUAM"
constexpr uint16_t kVersion = 1;    // of the address
constexpr uint16_t kAmVersion = 2;  // of the AM header (2: the message prefix)
constexpr size_t kAddrHeader = 24;
constexpr unsigned kAmId = 0x4b;
// How far ahead of the next expected message a peer's sequence number may
// be: reordering inside UCX is small; more is a broken or hostile sender.
constexpr uint64_t kSeqWindow = 1u << 16;
// Strangers' messages waiting for delivery (a flood beyond it is dropped).
constexpr size_t kMaxStrangers = 1024;

// The AM header of every message (host order: both sides run this code on
// little-endian machines; the address header is explicit), followed in the
// AM header by `prefix` bytes of the message: the first iov entry of a
// two-part send (the engine's header), so the payload travels as one
// contiguous buffer (UCX's zero-copy rendezvous; an iov datatype falls back
// to copied fragments).
struct AmHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t prefix;
  uint64_t node;
  uint64_t seq;
};
static_assert(sizeof(AmHeader) == 24);
constexpr size_t kMaxPrefix = 128;
constexpr size_t kWaitToPlaceRemote = 256 * 1024;  // Peer::wait_to_place unless shared memory only

void put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}
using text::hex64;

class UcxChannel final : public Channel {
 public:
  UcxChannel(std::shared_ptr<const Library> lib, uint64_t node, std::string name);
  ~UcxChannel() override;

  const char* provider() const override { return "ucx"; }
  std::string describe() const override { return describe_; }
  bool ordered() const override { return true; }
  size_t max_message() const override { return kMaxMessage; }
  std::vector<uint8_t> address() const override { return address_; }
  uint32_t add_peer(const std::vector<uint8_t>& address, const std::string& name) override;
  bool send(uint32_t peer, const iovec* iov, int n, uint64_t token) override;
  size_t progress(ChannelEvents& ev) override;
  void drive_placed(bool give_up) override;

 private:
  struct Peer;
  // A received message waiting for its turn (or, rendezvous, for its data).
  struct Inbound {
    UcxChannel* self = nullptr;
    uint8_t head[kMaxPrefix];       // the AM header's message prefix
    size_t head_len = 0;
    std::unique_ptr<uint8_t[]> buf;  // rendezvous data (a pooled buffer of buf_cap bytes)
    size_t buf_cap = 0;
    std::vector<uint8_t> copy;       // eager data UCX did not let us hold
    const uint8_t* data = nullptr;  // what is delivered
    size_t len = 0;
    void* desc = nullptr;           // UCX's eager buffer, released after delivery
    bool ready = false;             // data complete
    bool failed = false;            // rendezvous fetch failed
    Peer* owner = nullptr;          // the sender (null: a stranger's)
    uint64_t seq = 0;               // its sequence number (owner's)
    size_t held = 0;                // bytes counted in owner->held
    // Placed (ChannelEvents::place_body): the rendezvous data is fetched to
    // `placed`, pinned by `pin` until the fetch ends.
    bool asked = false;
    uint8_t* placed = nullptr;
    uint8_t* word = nullptr;  // written at delivery (place_body's *word): later placed data waits for it
    std::shared_ptr<std::atomic<uint32_t>> pin;
  };
  struct Peer {
    UcxChannel* self = nullptr;
    uint32_t index = 0;
    std::string name;
    uint64_t node = 0;
    ucp_ep_h ep = nullptr;
    uint64_t send_seq = 0;
    uint64_t recv_seq = 0;
    bool lost = false;
    std::map<uint64_t, std::unique_ptr<Inbound>> pending;  // by sequence number
    size_t held = 0;  // bytes of pending messages in memory here (eager, or fetched)
    // An overlapped placed body this large waits for the fetch it overlaps
    // (start_fetches). Where the receiver copies the data itself (shared
    // memory: CMA) waiting costs nothing but the overlap, and the copy it
    // saves is half the work: every size. Where each fetch costs a round
    // trip (tcp: the sender pushes after the receiver's reply) serialised
    // fetches of small bodies lose more than the copy: from 256 KiB. Streams
    // of 64 KiB puts to one address, 1 GiB each, against ucx_perftest: sm
    // 0.86x waiting vs 0.68x buffered, tcp 0.70x waiting vs 0.83-0.86x.
    size_t wait_to_place = kWaitToPlaceRemote;
  };
  struct Stranger {
    std::string who;
    std::unique_ptr<Inbound> msg;
  };
  struct SendSlot {
    UcxChannel* self = nullptr;
    alignas(8) uint8_t hdr[sizeof(AmHeader) + kMaxPrefix];
    size_t hdr_len = 0;
    std::vector<ucp_dt_iov_t> iov;
    uint64_t token = 0;
    uint32_t peer = 0;
  };
  struct Event {
    enum Kind { Sent, Lost } kind;
    uint64_t token;
    uint32_t peer;
    bool ok;
    std::string why;
  };

  static ucs_status_t am_cb(void* arg, const void* header, size_t hlen, void* data, size_t len,
                            const ucp_am_recv_param_t* param);
  static void send_cb(void* request, ucs_status_t status, void* user_data);
  static void fetch_cb(void* request, ucs_status_t status, size_t length, void* user_data);
  static void error_cb(void* arg, ucp_ep_h ep, ucs_status_t status);

  ucs_status_t on_am(const void* header, size_t hlen, void* data, size_t len, const ucp_am_recv_param_t* param);
  // Takes the message into `in` (eager: hold or copy; rendezvous: queue the
  // fetch); `head` is the AM header's message prefix.
  ucs_status_t take(Inbound& in, const uint8_t* head, size_t hlen, void* data, size_t len, bool rndv,
                    bool persistent);
  void lose(Peer& p, const std::string& why);
  // Starts queued rendezvous fetches in arrival order, at most kPoolMax at
  // once; `ev` (null: drive_placed) is asked where eligible bodies go. A
  // placed body that must wait (start_fetches) stays queued and the ones
  // behind it go on: one stalled sender holds back only what overlaps it.
  void start_fetches(ChannelEvents* ev);
  // Whether placed body `in` may not start now: it overlaps a running placed
  // fetch, a placed body queued before it that waits (`waiting`), or the word
  // an earlier undelivered message of its sender writes at its delivery.
  bool must_wait(const Inbound& in, const std::vector<const Inbound*>& waiting) const;
  // A placed body not started yet takes a buffer instead (its pin dropped).
  static void unplace(Inbound& in);
  // Whether every message of in.owner before `in` has arrived and is placed.
  bool earlier_all_placed(const Inbound& in) const;
  static void unpin(Inbound& in);  // the fetch into in.placed is over
  void close_lost_eps();
  void release(Inbound& in);
  // Rendezvous buffers, reused (no zeroing; a fresh page costs a fault,
  // which on a VM costs more than copying it): a pooled one that fits, else
  // a new one of the message's size rounded up to 64 KiB. At most kPoolMax
  // kept: as many as rendezvous messages in flight in a stream of the
  // engine's usual window (64); a full pool drops its smallest.
  void take_buffer(Inbound& in, size_t len);
  // Inbound records and the pending maps' nodes are recycled: once warm, an
  // eager message costs no heap allocation (a ping-pong's latency is a few
  // hundred ns; malloc and free were a good part of it).
  std::unique_ptr<Inbound> new_inbound();
  void recycle(std::unique_ptr<Inbound> in);  // after release(*in)
  std::vector<std::unique_ptr<Inbound>> spare_in_;
  std::vector<std::map<uint64_t, std::unique_ptr<Inbound>>::node_type> spare_nodes_;
  static constexpr size_t kSpare = 256, kSpareCopyBytes = 64 * 1024;
  static constexpr size_t kPoolMax = 64;
  std::vector<std::pair<std::unique_ptr<uint8_t[]>, size_t>> pool_;

  std::shared_ptr<const Library> lib_;
  const Fns& f_;
  uint64_t node_;
  std::string name_;
  std::string describe_;
  ucp_context_h ctx_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<uint8_t> address_;
  std::recursive_mutex mu_;
  bool in_progress_ = false;
  // Set while progress() runs UCX: where on_am delivers an in-order eager
  // message at once (null: queue it, as drive_placed does).
  ChannelEvents* ev_ = nullptr;
  bool in_delivery_ = false;   // on_am is inside ev_->on_message_parts
  size_t delivered_now_ = 0;   // messages on_am delivered, for progress()'s count
  std::exception_ptr thrown_;  // by a delivery inside UCX's callback
  std::vector<std::unique_ptr<Peer>> peers_;
  std::unordered_map<uint64_t, uint32_t> by_node_;
  std::deque<Stranger> strangers_;
  // Rendezvous descriptors not fetched yet, in arrival order: at most
  // kPoolMax fetches run at once (each into its own buffer), so a stream of
  // large messages reuses the pool instead of faulting in fresh buffers (a
  // peer that stalls mid-transfer holds its slots until UCX ends the fetch).
  std::deque<std::pair<Inbound*, void*>> to_fetch_;
  size_t fetching_ = 0;
  std::vector<Inbound*> placing_;  // placed fetches running
  std::vector<SendSlot> slots_;
  std::vector<uint32_t> free_slots_;
  std::deque<Event> events_;
  std::vector<void*> closing_;  // ep close requests not yet complete
  bool lost_pending_ = false;   // a peer was lost since close_lost_eps() last ran
  // Bytes of one peer's messages held here while they wait for their turn
  // (KINET_UCX_MAX_HELD_BYTES): a sender that skips a sequence number would
  // otherwise park up to kSeqWindow messages of up to kMaxMessage each.
  size_t max_held_ = kDefaultMaxHeld;
  // Whether `bytes` more of p's message `seq` fit under the cap; when not, p
  // is lost (false).
  bool within_cap(Peer& p, size_t bytes, uint64_t seq);
  void hold(Inbound& in, size_t bytes);  // counts them in in.owner->held
  void unhold(Inbound& in);
  void drop_held(Peer& p);  // a lost peer's messages in memory go (not those UCX is still writing)
};

UcxChannel::UcxChannel(std::shared_ptr<const Library> lib, uint64_t node, std::string name)
    : lib_(std::move(lib)), f_(lib_->fn()), node_(node), name_(std::move(name)) {
  max_held_ = env::get_u64("KINET_UCX_MAX_HELD_BYTES", kDefaultMaxHeld);
  if (max_held_ < kMaxMessage)
    throw Error(ErrorCode::InvalidArgument, "ucx: KINET_UCX_MAX_HELD_BYTES=" + std::to_string(max_held_) +
                                                " is less than one message (" + std::to_string(kMaxMessage) + " bytes)");
  ucp_config_t* cfg = nullptr;
  if (ucs_status_t s = f_.config_read(nullptr, nullptr, &cfg); s != UCS_OK)
    throw Error(ErrorCode::NotSupported, "ucx: ucp_config_read failed: " + lib_->status(s));
  if (!std::getenv("UCX_KEEPALIVE_INTERVAL")) {
    if (ucs_status_t s = f_.config_modify(cfg, "KEEPALIVE_INTERVAL", "1s"); s != UCS_OK)
      KINET_LOG(Warn, "ucx: could not set KEEPALIVE_INTERVAL=1s (%s): a silent dead peer is found later",
                lib_->status(s).c_str());
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM;
  ucs_status_t s = f_.init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, cfg, &ctx_);
  f_.config_release(cfg);
  if (s != UCS_OK) throw Error(ErrorCode::NotSupported, "ucx: ucp_init failed: " + lib_->status(s));
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  if (s = f_.worker_create(ctx_, &wp, &worker_); s != UCS_OK) {
    f_.cleanup(ctx_);
    throw Error(ErrorCode::NotSupported, "ucx: ucp_worker_create failed: " + lib_->status(s));
  }
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kAmId;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA;
  hp.cb = &UcxChannel::am_cb;
  hp.arg = this;
  ucp_address_t* ua = nullptr;
  size_t ulen = 0;
  if (s = f_.worker_set_am_recv_handler(worker_, &hp); s == UCS_OK) s = f_.worker_get_address(worker_, &ua, &ulen);
  if (s != UCS_OK) {
    f_.worker_destroy(worker_);
    f_.cleanup(ctx_);
    throw Error(ErrorCode::NotSupported, "ucx: setting up the worker failed: " + lib_->status(s));
  }
  address_.resize(kAddrHeader + ulen);
  put_le(&address_[0], kAddrMagic, 4);
  put_le(&address_[4], kVersion, 2);
  put_le(&address_[6], kAddrHeader, 2);
  put_le(&address_[8], node_, 8);
  put_le(&address_[16], ulen, 4);
  put_le(&address_[20], 0, 4);
  std::memcpy(&address_[kAddrHeader], ua, ulen);
  f_.worker_release_address(worker_, ua);
  const char* tls = std::getenv("UCX_TLS");
  describe_ = std::string("ucx ") + f_.get_version_string() + " active messages, UCX_TLS=" + (tls ? tls : "all");
  slots_.resize(kSendSlots);
  for (uint32_t i = kSendSlots; i-- > 0;) {
    slots_[i].self = this;
    free_slots_.push_back(i);
  }
}

UcxChannel::~UcxChannel() {
  std::lock_guard<std::recursive_mutex> g(mu_);
  // Force-close every endpoint (sends in flight are cancelled: their
  // callbacks run during the close), bounded.
  for (auto& p : peers_) {
    if (!p->ep) continue;
    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* r = f_.ep_close_nbx(p->ep, &cp);
    p->ep = nullptr;
    if (UCS_PTR_IS_PTR(r)) closing_.push_back(r);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while ((!closing_.empty() || fetching_ > 0) && std::chrono::steady_clock::now() < deadline) {
    f_.worker_progress(worker_);
    close_lost_eps();
  }
  if (!closing_.empty() || fetching_ > 0)
    KINET_LOG(Warn, "ucx channel %s: %zu endpoint closes and %zu fetches still running after 2 s; destroying anyway",
              name_.c_str(), closing_.size(), fetching_);
  for (void* r : closing_) f_.request_free(r);
  for (auto& [in, desc] : to_fetch_) unpin(*in);  // never started: the worker's destruction drops them
  to_fetch_.clear();
  for (auto& p : peers_)
    for (auto& [seq, in] : p->pending) release(*in);
  for (auto& st : strangers_) release(*st.msg);
  f_.worker_destroy(worker_);
  f_.cleanup(ctx_);
  for (Inbound* in : placing_) unpin(*in);  // UCX writes nothing more now
}

uint32_t UcxChannel::add_peer(const std::vector<uint8_t>& a, const std::string& name) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::InvalidArgument, "ucx: the address of " + name + " " + why);
  };
  if (a.size() < kAddrHeader)
    throw bad("is " + std::to_string(a.size()) + " bytes, shorter than the " + std::to_string(kAddrHeader) +
              "-byte kinet UCX header");
  if (get_le(&a[0], 4) != kAddrMagic) throw bad("is not a kinet UCX address (magic " + hex64(get_le(&a[0], 4)) + ")");
  if (get_le(&a[4], 2) != kVersion || get_le(&a[6], 2) != kAddrHeader)
    throw bad("has version " + std::to_string(get_le(&a[4], 2)) + " with a " + std::to_string(get_le(&a[6], 2)) +
              "-byte header; this side speaks version " + std::to_string(kVersion));
  const uint64_t node = get_le(&a[8], 8);
  const uint64_t ulen = get_le(&a[16], 4);
  if (node == 0) throw bad("has node id 0");
  if (ulen == 0 || kAddrHeader + ulen != a.size())
    throw bad("says " + std::to_string(ulen) + " bytes of UCP address but carries " +
              std::to_string(a.size() - kAddrHeader));
  std::lock_guard<std::recursive_mutex> g(mu_);
  if (auto it = by_node_.find(node); it != by_node_.end())
    throw bad("names node " + hex64(node) + ", already peer " + std::to_string(it->second) + " (" +
              peers_[it->second]->name + ")");
  auto p = std::make_unique<Peer>();
  p->self = this;
  p->index = static_cast<uint32_t>(peers_.size());
  p->name = name;
  p->node = node;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(&a[kAddrHeader]);
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxChannel::error_cb;
  ep.err_handler.arg = p.get();
  ucs_status_t s = f_.ep_create(worker_, &ep, &p->ep);
  if (s == UCS_ERR_UNREACHABLE) {
    // UCX 1.13's shared-memory transports have no peer failure handler: with
    // UCX_TLS limited to them, only an endpoint without error handling
    // reaches the peer. A dead peer is then found by the engine's timeout.
    ep.field_mask &= ~uint64_t{UCP_EP_PARAM_FIELD_ERR_HANDLER};
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    s = f_.ep_create(worker_, &ep, &p->ep);
    p->wait_to_place = 0;  // shared memory only: see Peer::wait_to_place
    if (s == UCS_OK)
      KINET_LOG(Info, "ucx channel %s: %s is reachable only without UCX's peer failure detection (shared memory?): "
                "its death is found by the transport timeout", name_.c_str(), name.c_str());
  }
  if (s != UCS_OK)
    throw Error(ErrorCode::System, "ucx: ucp_ep_create to " + name + " (node " + hex64(node) +
                                       ") failed: " + lib_->status(s));
  by_node_[node] = p->index;
  peers_.push_back(std::move(p));
  return peers_.back()->index;
}

bool UcxChannel::send(uint32_t peer, const iovec* iov, int n, uint64_t token) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  if (peer >= peers_.size())
    throw Error(ErrorCode::InvalidArgument, "ucx: send to peer " + std::to_string(peer) + ", but " + name_ +
                                                " has " + std::to_string(peers_.size()) + " peers");
  if (n < 0 || (n > 0 && !iov)) throw Error(ErrorCode::InvalidArgument, "ucx: send with a bad iov list");
  size_t total = 0;
  for (int i = 0; i < n; ++i) total += iov[i].iov_len;
  Peer& p = *peers_[peer];
  if (total > kMaxMessage)
    throw Error(ErrorCode::InvalidArgument, "ucx: a message of " + std::to_string(total) + " bytes to " + p.name +
                                                " exceeds max_message() = " + std::to_string(kMaxMessage));
  if (p.lost) {
    events_.push_back({Event::Sent, token, peer, false, {}});
    return true;
  }
  if (free_slots_.empty() || in_delivery_) return false;  // in_delivery_: not from inside UCX's callback
  const uint32_t si = free_slots_.back();
  SendSlot& sl = slots_[si];
  // Two parts with a small first one: that part rides in the AM header.
  const bool prefixed = n == 2 && iov[0].iov_len > 0 && iov[0].iov_len <= kMaxPrefix && iov[1].iov_len > 0;
  AmHeader h{kAmMagic, kAmVersion, static_cast<uint16_t>(prefixed ? iov[0].iov_len : 0), node_, p.send_seq};
  std::memcpy(sl.hdr, &h, sizeof h);
  sl.hdr_len = sizeof h;
  if (prefixed) {
    std::memcpy(sl.hdr + sizeof h, iov[0].iov_base, iov[0].iov_len);
    sl.hdr_len += iov[0].iov_len;
  }
  sl.iov.clear();
  for (int i = prefixed ? 1 : 0; i < n; ++i)
    if (iov[i].iov_len > 0) sl.iov.push_back({iov[i].iov_base, iov[i].iov_len});
  sl.token = token;
  sl.peer = peer;
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  rp.cb.send = &UcxChannel::send_cb;
  rp.user_data = &sl;
  // One buffer goes contiguous (UCX's fast paths, zero-copy rendezvous); an
  // empty message too (UCX asserts on an empty iov list).
  const void* buf = sl.iov.empty() ? nullptr : sl.iov.data();
  size_t count = sl.iov.size();
  rp.datatype = ucp_dt_make_iov();
  if (count <= 1) {
    rp.datatype = ucp_dt_make_contig(1);
    buf = count ? sl.iov[0].buffer : nullptr;
    count = count ? sl.iov[0].length : 0;
  }
  void* r = f_.am_send_nbx(p.ep, kAmId, sl.hdr, sl.hdr_len, buf, count, &rp);
  ++p.send_seq;
  if (r == nullptr) {
    events_.push_back({Event::Sent, token, peer, true, {}});
  } else if (UCS_PTR_IS_ERR(r)) {
    events_.push_back({Event::Sent, token, peer, false, {}});
    lose(p, "ucp_am_send_nbx failed: " + lib_->status(UCS_PTR_STATUS(r)));
  } else {
    free_slots_.pop_back();  // the slot is UCX's until send_cb
  }
  return true;
}

void UcxChannel::send_cb(void* request, ucs_status_t status, void* user_data) {
  auto* sl = static_cast<SendSlot*>(user_data);
  UcxChannel* self = sl->self;
  self->events_.push_back({Event::Sent, sl->token, sl->peer, status == UCS_OK, {}});
  if (status != UCS_OK && status != UCS_ERR_CANCELED)
    self->lose(*self->peers_[sl->peer], "sending to it failed: " + self->lib_->status(status));
  self->f_.request_free(request);
  self->free_slots_.push_back(static_cast<uint32_t>(sl - self->slots_.data()));
}

void UcxChannel::error_cb(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* p = static_cast<Peer*>(arg);
  p->self->lose(*p, "UCX reported " + p->self->lib_->status(status) + " on the endpoint to " + p->name);
}

void UcxChannel::lose(Peer& p, const std::string& why) {
  if (p.lost) return;
  p.lost = true;
  events_.push_back({Event::Lost, 0, p.index, false, why});
  lost_pending_ = true;
}

ucs_status_t UcxChannel::am_cb(void* arg, const void* header, size_t hlen, void* data, size_t len,
                               const ucp_am_recv_param_t* param) {
  return static_cast<UcxChannel*>(arg)->on_am(header, hlen, data, len, param);
}

ucs_status_t UcxChannel::take(Inbound& in, const uint8_t* head, size_t hlen, void* data, size_t len, bool rndv,
                              bool persistent) {
  in.self = this;
  in.len = len;
  if (hlen) std::memcpy(in.head, head, hlen);
  in.head_len = hlen;
  if (rndv) {
    to_fetch_.emplace_back(&in, data);  // the buffer is taken when the fetch starts
    return UCS_INPROGRESS;
  }
  in.ready = true;
  if (persistent) {
    in.desc = data;
    in.data = static_cast<const uint8_t*>(data);
    return UCS_INPROGRESS;
  }
  in.copy.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + len);
  in.data = in.copy.data();
  return UCS_OK;
}

ucs_status_t UcxChannel::on_am(const void* header, size_t hlen, void* data, size_t len,
                               const ucp_am_recv_param_t* param) {
  const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  const bool persistent = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA;
  AmHeader h{};
  const bool well_formed = hlen >= sizeof h && (std::memcpy(&h, header, sizeof h), h.magic == kAmMagic) &&
                           h.version == kAmVersion && h.prefix <= kMaxPrefix && hlen == sizeof h + h.prefix;
  const uint8_t* head = static_cast<const uint8_t*>(header) + sizeof h;
  auto it = well_formed ? by_node_.find(h.node) : by_node_.end();
  if (it == by_node_.end()) {
    // A stranger: reported with its data (the engine rejects it); an
    // oversized one is dropped here.
    std::string who = well_formed ? "UCX sender node " + hex64(h.node) + " (never added as a peer)"
                                  : "a UCX sender with a malformed " + std::to_string(hlen) + "-byte AM header";
    if (len + h.prefix > kMaxMessage || strangers_.size() >= kMaxStrangers) {
      KINET_LOG(Warn, "ucx channel %s: dropped a %zu-byte message from %s (%zu strangers' messages undelivered)",
                name_.c_str(), len, who.c_str(), strangers_.size());
      return rndv ? UCS_ERR_MESSAGE_TRUNCATED : UCS_OK;
    }
    strangers_.push_back({std::move(who), std::make_unique<Inbound>()});
    return take(*strangers_.back().msg, head, well_formed ? h.prefix : 0, data, len, rndv, persistent);
  }
  Peer& p = *peers_[it->second];
  if (p.lost) return rndv ? UCS_ERR_CANCELED : UCS_OK;
  std::string bad;
  if (len + h.prefix > kMaxMessage)
    bad = "sent a " + std::to_string(len + h.prefix) + "-byte message, more than " + std::to_string(kMaxMessage);
  else if (h.seq < p.recv_seq || h.seq - p.recv_seq >= kSeqWindow || p.pending.count(h.seq))
    bad = "sent message number " + std::to_string(h.seq) + " while " + std::to_string(p.recv_seq) + " was expected";
  if (!bad.empty()) {
    lose(p, p.name + " broke the kinet UCX protocol: it " + bad);
    return rndv ? UCS_ERR_MESSAGE_TRUNCATED : UCS_OK;
  }
  if (!rndv && ev_ && h.seq == p.recv_seq && p.pending.empty()) {
    // In order with nothing held before it: delivered from UCX's buffer now,
    // inside progress() (no record, no copy). The engine's sends meanwhile
    // are refused (send() says no room) and go from its next flush.
    ++p.recv_seq;
    ++delivered_now_;
    in_delivery_ = true;
    try {
      ev_->on_message_parts(p.index, head, h.prefix, static_cast<const uint8_t*>(data), len);
    } catch (...) {  // not through UCX's C frames: progress() rethrows it
      if (!thrown_) thrown_ = std::current_exception();
    }
    in_delivery_ = false;
    return UCS_OK;
  }
  if (!rndv && !within_cap(p, len + h.prefix, h.seq)) return UCS_OK;  // eager data is here now (rendezvous: at its fetch)
  Inbound* in;
  if (spare_nodes_.empty()) {
    in = (p.pending[h.seq] = new_inbound()).get();
  } else {
    auto nh = std::move(spare_nodes_.back());
    spare_nodes_.pop_back();
    nh.key() = h.seq;
    nh.mapped() = new_inbound();
    in = p.pending.insert(std::move(nh)).position->second.get();
  }
  in->owner = &p;
  in->seq = h.seq;
  if (!rndv) hold(*in, len + h.prefix);
  return take(*in, head, h.prefix, data, len, rndv, persistent);
}

bool UcxChannel::within_cap(Peer& p, size_t bytes, uint64_t seq) {
  if (p.held + bytes <= max_held_) return true;
  lose(p, p.name + " sent more than KINET_UCX_MAX_HELD_BYTES (" + std::to_string(max_held_) +
              ") of messages waiting here: " + std::to_string(p.held) + " bytes held while message number " +
              std::to_string(p.recv_seq) + " was expected, then message number " + std::to_string(seq) + " of " +
              std::to_string(bytes) + " bytes");
  return false;
}

void UcxChannel::hold(Inbound& in, size_t bytes) {
  in.owner->held += bytes;
  in.held = bytes;
}

void UcxChannel::unhold(Inbound& in) {
  if (in.owner) in.owner->held -= in.held;
  in.held = 0;
}

void UcxChannel::drop_held(Peer& p) {
  for (auto it = p.pending.begin(); it != p.pending.end();) {
    Inbound& in = *it->second;
    if (!in.ready) {  // a rendezvous fetch running (UCX writes into it) or still in to_fetch_
      ++it;
      continue;
    }
    unhold(in);
    release(in);
    recycle(std::move(it->second));
    it = p.pending.erase(it);
  }
}

std::unique_ptr<UcxChannel::Inbound> UcxChannel::new_inbound() {
  if (spare_in_.empty()) return std::make_unique<Inbound>();
  std::unique_ptr<Inbound> in = std::move(spare_in_.back());
  spare_in_.pop_back();
  return in;
}

void UcxChannel::recycle(std::unique_ptr<Inbound> in) {
  if (spare_in_.size() >= kSpare) return;
  in->head_len = 0;
  in->buf.reset();
  in->buf_cap = 0;
  in->copy.clear();
  if (in->copy.capacity() > kSpareCopyBytes) in->copy.shrink_to_fit();
  in->data = nullptr;
  in->len = 0;
  in->desc = nullptr;
  in->ready = in->failed = false;
  in->owner = nullptr;
  in->seq = 0;
  in->held = 0;
  in->asked = false;
  in->placed = nullptr;
  in->word = nullptr;
  in->pin.reset();
  spare_in_.push_back(std::move(in));
}

void UcxChannel::fetch_cb(void* request, ucs_status_t status, size_t, void* user_data) {
  auto* in = static_cast<Inbound*>(user_data);
  in->ready = true;
  in->failed = status != UCS_OK;
  --in->self->fetching_;
  in->self->f_.request_free(request);
  if (in->placed) {
    std::erase(in->self->placing_, in);
    unpin(*in);
  }
}

void UcxChannel::unpin(Inbound& in) {
  if (!in.pin) return;
  in.pin->fetch_sub(1, std::memory_order_release);
  in.pin.reset();
}

bool UcxChannel::earlier_all_placed(const Inbound& in) const {
  const Peer& p = *in.owner;
  uint64_t n = 0;
  for (const auto& [seq, m] : p.pending) {
    if (seq >= in.seq) break;
    if (!m->placed) return false;
    ++n;
  }
  return n == in.seq - p.recv_seq;  // none missing (not arrived yet)
}

void UcxChannel::unplace(Inbound& in) {
  unpin(in);
  in.placed = nullptr;  // in.word stays: the message still writes it at its delivery
}

bool UcxChannel::must_wait(const Inbound& in, const std::vector<const Inbound*>& waiting) const {
  const uint8_t* a = in.placed;
  auto overlaps = [&](const uint8_t* b, size_t n) { return b && a < b + n && b < a + in.len; };
  if (std::any_of(placing_.begin(), placing_.end(), [&](const Inbound* o) { return overlaps(o->placed, o->len); }))
    return true;
  if (std::any_of(waiting.begin(), waiting.end(), [&](const Inbound* o) { return overlaps(o->placed, o->len); }))
    return true;
  for (const auto& [seq, m] : in.owner->pending) {  // undelivered, in order
    if (seq >= in.seq) break;
    if (overlaps(m->word, 8)) return true;
  }
  return false;
}

void UcxChannel::start_fetches(ChannelEvents* ev) {
  std::vector<const Inbound*> waiting;  // placed bodies left queued in this pass
  for (auto it = to_fetch_.begin(); it != to_fetch_.end() && fetching_ < kPoolMax;) {
    auto [in, desc] = *it;
    if (in->owner && !in->owner->lost && ev && !in->asked && earlier_all_placed(*in)) {
      in->asked = true;
      in->placed = ev->place_body(in->owner->index, in->head, in->head_len, in->len, &in->pin, &in->word);
    }
    if (in->placed && !in->owner->lost && must_wait(*in, waiting)) {
      // Later data must not land under earlier data (or an earlier
      // message's signal word over later data). A body of at least the
      // peer's wait_to_place waits, queued; a smaller one is fetched into a
      // buffer now and copied at its turn.
      if (in->len >= in->owner->wait_to_place) {
        waiting.push_back(in);
        ++it;
        continue;
      }
      unplace(*in);
    }
    it = to_fetch_.erase(it);
    if (in->owner && (in->owner->lost || (!in->placed && !within_cap(*in->owner, in->len + in->head_len, in->seq)))) {
      in->ready = in->failed = true;  // not fetched: UCX drops the data with the worker
      unpin(*in);
      continue;
    }
    if (in->placed) {
      in->data = in->placed;
      placing_.push_back(in);
    } else {
      if (in->owner) hold(*in, in->len + in->head_len);
      take_buffer(*in, in->len);
      in->data = in->buf.get();
    }
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    rp.cb.recv_am = &UcxChannel::fetch_cb;
    rp.user_data = in;
    rp.datatype = ucp_dt_make_contig(1);
    ++fetching_;
    void* r = f_.am_recv_data_nbx(worker_, desc, const_cast<uint8_t*>(in->data), in->len, &rp);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) {
      --fetching_;
      in->ready = true;
      in->failed = r != nullptr;
      if (in->placed) {
        std::erase(placing_, in);
        unpin(*in);
      }
    }
  }
}

void UcxChannel::drive_placed(bool give_up) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  if (in_progress_) return;  // inside our own progress(): it moves them
  if (give_up) {
    for (Inbound* in : placing_)
      if (in->owner)
        lose(*in->owner, "a deregistration waited for its data past the transport timeout: rendezvous data from " +
                             in->owner->name + " stalled");
    // Placed bodies still queued would start once the running ones end, into
    // memory whose deregistration may have returned by then: buffers instead.
    for (auto& [in, desc] : to_fetch_)
      if (in->placed) unplace(*in);
    close_lost_eps();
  }
  f_.worker_progress(worker_);
  start_fetches(nullptr);
}

void UcxChannel::close_lost_eps() {
  lost_pending_ = false;
  for (auto& p : peers_) {
    if (p->lost && !p->pending.empty()) drop_held(*p);  // placed records hold no bytes but are records
    if (!p->lost || !p->ep) continue;
    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* r = f_.ep_close_nbx(p->ep, &cp);
    p->ep = nullptr;
    if (UCS_PTR_IS_PTR(r)) closing_.push_back(r);
  }
  std::erase_if(closing_, [&](void* r) {
    if (f_.request_check_status(r) == UCS_INPROGRESS) return false;
    f_.request_free(r);
    return true;
  });
}

void UcxChannel::release(Inbound& in) {
  if (in.desc) f_.am_data_release(worker_, in.desc);
  in.desc = nullptr;
  if (!in.buf) return;
  if (pool_.size() < kPoolMax) {
    pool_.emplace_back(std::move(in.buf), in.buf_cap);
    return;
  }
  auto small = std::min_element(pool_.begin(), pool_.end(), [](auto& a, auto& b) { return a.second < b.second; });
  if (small->second < in.buf_cap) *small = {std::move(in.buf), in.buf_cap};
}

void UcxChannel::take_buffer(Inbound& in, size_t len) {
  // The smallest pooled buffer that fits.
  auto best = pool_.end();
  for (auto it = pool_.begin(); it != pool_.end(); ++it)
    if (it->second >= len && (best == pool_.end() || it->second < best->second)) best = it;
  if (best != pool_.end()) {
    in.buf = std::move(best->first);
    in.buf_cap = best->second;
    *best = std::move(pool_.back());
    pool_.pop_back();
    return;
  }
  constexpr size_t kRound = 64 * 1024;
  in.buf_cap = std::max<size_t>(kRound, (len + kRound - 1) / kRound * kRound);
  in.buf.reset(new uint8_t[in.buf_cap]);
}

size_t UcxChannel::progress(ChannelEvents& ev) {
  std::lock_guard<std::recursive_mutex> g(mu_);
  if (in_progress_) return 0;  // called from inside one of our own callbacks
  in_progress_ = true;
  struct Reset {
    bool& b;
    ~Reset() { b = false; }
  } reset{in_progress_};
  // One call: on tcp each is an epoll_wait (a syscall); calling again until
  // it returns 0 put two more of them between a message's arrival and its
  // delivery. The engine calls progress() again while events come.
  ev_ = &ev;
  delivered_now_ = 0;
  f_.worker_progress(worker_);
  ev_ = nullptr;
  if (thrown_) std::rethrow_exception(std::exchange(thrown_, nullptr));
  start_fetches(&ev);
  size_t n = delivered_now_;
  for (size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = *peers_[i];
    while (!p.lost && !p.pending.empty() && p.pending.begin()->first == p.recv_seq &&
           p.pending.begin()->second->ready) {
      auto nh = p.pending.extract(p.pending.begin());
      std::unique_ptr<Inbound> in = std::move(nh.mapped());
      if (spare_nodes_.size() < kSpare) spare_nodes_.push_back(std::move(nh));
      ++p.recv_seq;
      unhold(*in);
      if (in->failed) {
        lose(p, "fetching a rendezvous message from " + p.name + " failed");
        break;
      }
      ev.on_message_parts(p.index, in->head, in->head_len, in->data, in->len);
      release(*in);
      recycle(std::move(in));
      ++n;
    }
  }
  while (!strangers_.empty() && strangers_.front().msg->ready) {
    Stranger st = std::move(strangers_.front());
    strangers_.pop_front();
    if (!st.msg->failed) {
      std::vector<uint8_t> m(st.msg->head, st.msg->head + st.msg->head_len);
      if (st.msg->len) m.insert(m.end(), st.msg->data, st.msg->data + st.msg->len);
      ev.on_stranger(st.who, m.data(), m.size());
    }
    release(*st.msg);
    ++n;
  }
  while (!events_.empty()) {
    Event e = std::move(events_.front());
    events_.pop_front();
    if (e.kind == Event::Sent) ev.on_sent(e.token, e.ok);
    else ev.on_peer_lost(e.peer, e.why);
    ++n;
  }
  if (lost_pending_ || !closing_.empty()) close_lost_eps();
  return n;
}

}  // namespace

std::unique_ptr<Channel> make_channel(uint64_t node, const std::string& name, const char* lib) {
  if (node == 0) throw Error(ErrorCode::InvalidArgument, "ucx: channel " + name + " needs a non-zero node id");
#if defined(__SANITIZE_THREAD__)
  // UCX's memory hooks (libucm patching mmap and malloc) crash a
  // ThreadSanitizer process: off in TSan builds, unless the user chose.
  setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 0);
  setenv("UCX_MEM_MALLOC_HOOKS", "no", 0);
#endif
  std::string why;
  auto l = Library::load(lib, &why);
  if (!l) throw Error(ErrorCode::NotSupported, "ucx: " + why);
  return std::make_unique<UcxChannel>(std::move(l), node, name);
}

}  // namespace kinet::transport::ucx
