// The UCX channel's wire header (src/transports/ucx/ucx_channel.cpp, AM
// header v2: magic, version, prefix length, node, sequence number, then
// `prefix` bytes of the message) against a hostile sender: a bare UCP worker
// that crafts active messages a kinet channel would never send. A truncated
// or malformed AM header, a prefix length that is too long or disagrees with
// the bytes carried: a stranger (rejected, never delivered as the connected
// sender's message, never answered). An engine header that claims more
// payload than arrived: "malformed", answered RemoteInvalidRequest. An
// oversized message or a sequence number out of the window: the sender is
// lost, nobody else. Every case leaves the target's region and its guard
// bytes untouched, and the target serves a well-formed put afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "transport_rig.hpp"
#include "transports/msg_wire.hpp"
#include "transports/ucx/ucx_channel.hpp"
#include "transports/ucx/ucx_lib.hpp"

namespace kinet::test {
namespace {
using namespace std::chrono_literals;
using transport::wire::MsgType;
namespace wire = transport::wire;
namespace ucx = transport::ucx;

// The channel's wire, spelled out here so that a change of it breaks this test.
constexpr uint32_t kAmMagic = 0x4d41554b;  // "KUAM"
constexpr uint16_t kAmVersion = 2;
constexpr size_t kAmHeader = 24;
constexpr size_t kMaxPrefix = 128;
constexpr unsigned kAmId = 0x4b;
constexpr uint64_t kSeqWindow = 1u << 16;

// Nothing written: the region still zero, its guards intact.
bool untouched(const Guarded& g) { return g.zero() && g.guards_intact(); }

std::unique_ptr<MsgTransport> ucx_transport(const std::string& name) {
  const uint64_t node = transport::random_node_id();
  transport::MsgOptions o;
  o.name = name;
  o.timeout = 20s;
  return std::make_unique<MsgTransport>(ucx::make_channel(node, name), node, o);
}

// The channel's AM header.
std::vector<uint8_t> am_header(uint64_t node, uint64_t seq, uint16_t prefix, uint32_t magic = kAmMagic,
                               uint16_t version = kAmVersion) {
  std::vector<uint8_t> h(kAmHeader);
  std::memcpy(&h[0], &magic, 4);
  std::memcpy(&h[4], &version, 2);
  std::memcpy(&h[6], &prefix, 2);
  std::memcpy(&h[8], &node, 8);
  std::memcpy(&h[16], &seq, 8);
  return h;
}

std::vector<uint8_t> cat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A bare UCP worker with kinet's dlopen'd table: sends active messages with
// any header to a kinet UCX channel and keeps what comes back. Single
// threaded, like the test.
class RawUcx {
 public:
  struct Msg {
    std::vector<uint8_t> hdr, data;
  };
  std::deque<Msg> got;
  uint64_t node = transport::random_node_id();

  // Null when UCX can't start here.
  static std::unique_ptr<RawUcx> open() {
    auto r = std::unique_ptr<RawUcx>(new RawUcx);
    std::string why;
    r->lib_ = ucx::Library::load(ucx::kLibucp, &why);
    if (!r->lib_) return nullptr;
    const ucx::Fns& f = r->lib_->fn();
    ucp_config_t* cfg = nullptr;
    if (f.config_read(nullptr, nullptr, &cfg) != UCS_OK) return nullptr;
    ucp_params_t p{};
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_AM;
    const ucs_status_t s = f.init_version(UCP_API_MAJOR, UCP_API_MINOR, &p, cfg, &r->ctx_);
    f.config_release(cfg);
    if (s != UCS_OK) return nullptr;
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (f.worker_create(r->ctx_, &wp, &r->worker_) != UCS_OK) return nullptr;
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = kAmId;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = &RawUcx::on_am;
    hp.arg = r.get();
    if (f.worker_set_am_recv_handler(r->worker_, &hp) != UCS_OK) return nullptr;
    return r;
  }
  ~RawUcx() {
    if (!lib_) return;
    const ucx::Fns& f = lib_->fn();
    if (ep_) {
      ucp_request_param_t cp{};
      cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* r = f.ep_close_nbx(ep_, &cp);
      const auto end = std::chrono::steady_clock::now() + 2s;
      while (UCS_PTR_IS_PTR(r) && f.request_check_status(r) == UCS_INPROGRESS && std::chrono::steady_clock::now() < end)
        f.worker_progress(worker_);
      if (UCS_PTR_IS_PTR(r)) f.request_free(r);
    }
    if (worker_) f.worker_destroy(worker_);
    if (ctx_) f.cleanup(ctx_);
  }

  // This worker as a kinet UCX channel address ("KUCX" header + UCP address).
  std::vector<uint8_t> channel_address() const {
    const ucx::Fns& f = lib_->fn();
    ucp_address_t* ua = nullptr;
    size_t ulen = 0;
    EXPECT_EQ(f.worker_get_address(worker_, &ua, &ulen), UCS_OK);
    std::vector<uint8_t> a(kAmHeader + ulen, 0);
    const uint32_t magic = 0x5843554b, len = static_cast<uint32_t>(ulen);
    const uint16_t version = 1, hsize = kAmHeader;
    std::memcpy(&a[0], &magic, 4);
    std::memcpy(&a[4], &version, 2);
    std::memcpy(&a[6], &hsize, 2);
    std::memcpy(&a[8], &node, 8);
    std::memcpy(&a[16], &len, 4);
    std::memcpy(&a[kAmHeader], ua, ulen);
    f.worker_release_address(worker_, ua);
    return a;
  }
  // An endpoint to the channel inside engine address `target`, with peer
  // error handling as the channel's own (UCX refuses a mismatch); its
  // errors are ignored.
  void connect(const std::vector<uint8_t>& target) {
    uint64_t tn;
    std::vector<uint8_t> ca;
    transport::parse_engine_address(target, "target", &tn, &ca);
    ucp_ep_params_t ep{};
    ep.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = [](void*, ucp_ep_h, ucs_status_t) {};
    ep.address = reinterpret_cast<const ucp_address_t*>(&ca[kAmHeader]);
    ASSERT_EQ(lib_->fn().ep_create(worker_, &ep, &ep_), UCS_OK);
  }
  // One active message: `hdr` as UCX's AM header, `data` as its body. Waits
  // at most `bound` until UCX is done with it, calling `other` (the target's
  // progress) meanwhile; returns the send's status.
  ucs_status_t send(const std::vector<uint8_t>& hdr, const std::vector<uint8_t>& data,
                    const std::function<void()>& other, std::chrono::milliseconds bound = 20s) {
    const ucx::Fns& f = lib_->fn();
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    rp.datatype = ucp_dt_make_contig(1);
    void* r = f.am_send_nbx(ep_, kAmId, hdr.empty() ? nullptr : hdr.data(), hdr.size(),
                            data.empty() ? nullptr : data.data(), data.size(), &rp);
    if (!UCS_PTR_IS_PTR(r)) return UCS_PTR_STATUS(r);
    const auto end = std::chrono::steady_clock::now() + bound;
    ucs_status_t s = UCS_INPROGRESS;
    while ((s = f.request_check_status(r)) == UCS_INPROGRESS && std::chrono::steady_clock::now() < end) {
      f.worker_progress(worker_);
      other();
    }
    f.request_free(r);
    return s;
  }
  void progress() { lib_->fn().worker_progress(worker_); }

 private:
  RawUcx() = default;
  static ucs_status_t on_am(void* arg, const void* header, size_t hlen, void* data, size_t len,
                            const ucp_am_recv_param_t* param) {
    auto* self = static_cast<RawUcx*>(arg);
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) return UCS_OK;  // nothing large is expected
    const auto* h = static_cast<const uint8_t*>(header);
    const auto* d = static_cast<const uint8_t*>(data);
    self->got.push_back({{h, h + hlen}, {d, d + len}});
    return UCS_OK;
  }
  std::shared_ptr<const ucx::Library> lib_;
  ucp_context_h ctx_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
};

// A target transport over UCX with a guarded region, and a raw sender it
// knows as peer "hostile" (connect) or not.
struct Rig {
  std::unique_ptr<MsgTransport> t;
  std::unique_ptr<Guarded> g;
  std::unique_ptr<RawUcx> raw;
  PeerId hostile = 0;
  uint64_t am_seq = 0;   // the channel's sequence number of raw's next message
  uint64_t req_seq = 0;  // the engine's
  Completion c[8];

  // False when UCX can't start here.
  bool open(bool connect) {
    try {
      t = ucx_transport("target");  // first: make_channel sets up UCX's environment (TSan builds)
    } catch (const Error& e) {
      if (e.code() == ErrorCode::NotSupported) return false;
      throw;
    }
    raw = RawUcx::open();
    if (!raw) return false;
    g = std::make_unique<Guarded>(*t, 256, kAccessAll);
    raw->connect(t->address());
    if (connect) hostile = t->connect(transport::engine_address(raw->node, raw->channel_address()), "hostile");
    return true;
  }
  ucs_status_t send(const std::vector<uint8_t>& hdr, const std::vector<uint8_t>& data,
                    std::chrono::milliseconds bound = 20s) {
    return raw->send(hdr, data, [&] { t->poll(c, 0); }, bound);
  }
  // A well-formed AM message from raw: `head` in the AM header (prefix), `body` after it.
  ucs_status_t send_msg(const std::vector<uint8_t>& head, const std::vector<uint8_t>& body) {
    return send(cat(am_header(raw->node, am_seq++, static_cast<uint16_t>(head.size())), head), body);
  }
  wire::Request put(uint64_t off, uint64_t len, uint64_t op_id) {
    wire::Request r;
    r.type = MsgType::Put, r.node = raw->node, r.seq = ++req_seq, r.op_id = op_id;
    r.key = g->region->remote_key().rkey, r.raddr = g->base() + off, r.length = len;
    return r;
  }
  static std::vector<uint8_t> header(const wire::Request& r) {
    std::vector<uint8_t> m(wire::kRequestBytes);
    wire::encode_header(r, m.data());
    return m;
  }
  // Polls both sides until pred() or `bound`.
  bool until(const std::function<bool()>& pred, std::chrono::milliseconds bound = 20s) {
    const auto end = std::chrono::steady_clock::now() + bound;
    while (!pred() && std::chrono::steady_clock::now() < end) {
      t->poll(c, 0);
      raw->progress();
    }
    return pred();
  }
  // The answers raw received (acks skipped), each decoded.
  std::vector<wire::Answer> answers() {
    std::vector<wire::Answer> out;
    for (auto& m : raw->got) {
      EXPECT_GE(m.hdr.size(), kAmHeader);
      std::vector<uint8_t> msg(m.hdr.begin() + std::min(m.hdr.size(), kAmHeader), m.hdr.end());
      msg.insert(msg.end(), m.data.begin(), m.data.end());
      MsgType ty{};
      if (wire::peek_type(msg.data(), msg.size(), &ty) && ty == MsgType::Ack) continue;
      wire::Answer a;
      EXPECT_EQ(wire::decode(msg.data(), msg.size(), &a), "");
      out.push_back(a);
    }
    raw->got.clear();
    return out;
  }
  // A real peer's put lands: the target still serves.
  void expect_serves() {
    auto a = ucx_transport("rank A");
    const PeerId ab = a->connect(t->address(), "target");
    t->connect(a->address(), "rank A");
    const uint32_t k = a->import_key(ab, g->region->remote_key());
    const uint64_t v = 0x0123456789abcdef;
    ASSERT_EQ(a->put(ab, &v, 8, k, g->base() + 64, 77), Status::Ok);
    std::vector<Completion> done;
    ASSERT_EQ(wait_completions(*a, 1, done, {t.get()}), 1u);
    EXPECT_EQ(done[0].status, Status::Ok);
    EXPECT_EQ(done[0].cookie, 77u);
    EXPECT_EQ(0, std::memcmp(g->mem() + 64, &v, 8));
    std::memset(g->mem() + 64, 0, 8);
    EXPECT_TRUE(untouched(*g));
  }
};

#define OPEN_RIG(rig, connect) \
  Rig rig;                     \
  if (!rig.open(connect)) GTEST_SKIP() << "UCX can't start here (libucp.so.0: apt-get install libucx0)"

// Malformed AM headers from a CONNECTED sender: the channel can't tell who
// sent them, so each is a stranger (rejected, unanswered), never the
// sender's message; its sequence numbers are not consumed.
TEST(UcxHostile, MalformedAmHeadersAreStrangers) {
  OPEN_RIG(r, true);
  const std::vector<uint8_t> pay(16, 0xEE);
  const std::vector<uint8_t> req = Rig::header(r.put(0, 16, 1));  // a valid put in every message below
  const std::vector<uint8_t> good = cat(am_header(r.raw->node, 0, wire::kRequestBytes), req);
  uint64_t strangers = 0;
  auto stranger = [&](const std::vector<uint8_t>& hdr, const std::vector<uint8_t>& body, const std::string& what) {
    SCOPED_TRACE(what);
    ASSERT_EQ(r.send(hdr, body), UCS_OK);
    ++strangers;
    EXPECT_TRUE(r.until([&] { return r.t->rejected("stranger") == strangers; })) << r.t->rejected("stranger");
  };
  // Truncated: every length of the AM header short of its 24 bytes (the
  // engine header and payload in the body).
  for (size_t n = 0; n < kAmHeader; ++n)
    stranger(std::vector<uint8_t>(good.begin(), good.begin() + n), cat(req, pay), "AM header of " + std::to_string(n));
  // The prefix length disagrees with the bytes carried: one short, none, one
  // more.
  stranger(std::vector<uint8_t>(good.begin(), good.end() - 1), pay, "prefix 88, 87 carried");
  stranger(am_header(r.raw->node, 0, wire::kRequestBytes), cat(req, pay), "prefix 88, none carried");
  stranger(cat(good, {0}), pay, "prefix 88, 89 carried");
  // Oversized prefix lengths: one past the limit (and carried), the largest.
  stranger(cat(cat(am_header(r.raw->node, 0, kMaxPrefix + 1), req), std::vector<uint8_t>(kMaxPrefix + 1 - 88, 1)), {},
           "prefix 129");
  stranger(am_header(r.raw->node, 0, 0xffff), cat(req, pay), "prefix 65535");
  // Other fields: magic, versions 1 and 3.
  stranger(cat(am_header(r.raw->node, 0, wire::kRequestBytes, kAmMagic ^ 1), req), pay, "magic");
  stranger(cat(am_header(r.raw->node, 0, wire::kRequestBytes, kAmMagic, 1), req), pay, "version 1");
  stranger(cat(am_header(r.raw->node, 0, wire::kRequestBytes, kAmMagic, 3), req), pay, "version 3");
  EXPECT_EQ(r.t->rejected("stranger"), strangers);
  EXPECT_EQ(r.t->rejected("malformed"), 0u);
  EXPECT_TRUE(untouched(*r.g));
  EXPECT_TRUE(r.answers().empty()) << "a stranger is never answered";
  EXPECT_EQ(r.t->peer_error(r.hostile), "");
  // The sender's own well-formed message still comes first in its sequence
  // (number 0: none of the above consumed one), with the largest prefix,
  // 128 bytes: a whole put (its header and 40 bytes of data) in the AM
  // header, no body.
  r.req_seq = 0;
  const std::vector<uint8_t> p40(40, 0x5A);
  ASSERT_EQ(r.send_msg(cat(Rig::header(r.put(0, 40, 2)), p40), {}), UCS_OK);
  EXPECT_TRUE(r.until([&] { return r.g->mem()[39] == 0x5A; }));
  EXPECT_EQ(0, std::memcmp(r.g->mem(), p40.data(), 40));
  std::memset(r.g->mem(), 0, 40);
  EXPECT_EQ(r.t->rejected("malformed"), 0u);
  EXPECT_EQ(r.t->rejected("sequence"), 0u);
  r.expect_serves();
}

// A stranger's message past max_message() is dropped by the channel (and
// logged) before the engine sees it; at max_message() it is reported.
TEST(UcxHostile, OversizedStrangerIsDropped) {
  OPEN_RIG(r, false);
  const std::vector<uint8_t> hdr = am_header(r.raw->node, 0, 0, kAmMagic ^ 1);  // malformed: prefix not counted
  EXPECT_EQ(r.send(hdr, std::vector<uint8_t>(ucx::kMaxMessage, 3)), UCS_OK);
  EXPECT_TRUE(r.until([&] { return r.t->rejected("stranger") == 1; }));
  r.send(hdr, std::vector<uint8_t>(ucx::kMaxMessage + 1,
                                   3));  // refused by the receiver: a status of UCX's choosing
  // A small stranger behind it: once it is counted, the big one was dropped,
  // not counted.
  EXPECT_EQ(r.send(hdr, {1, 2, 3}), UCS_OK);
  EXPECT_TRUE(r.until([&] { return r.t->rejected("stranger") >= 2; }));
  EXPECT_EQ(r.t->rejected("stranger"), 2u);
  EXPECT_TRUE(untouched(*r.g));
  r.expect_serves();
}

// Well-formed AM headers whose engine header claims more payload than
// arrived (or less): malformed, answered RemoteInvalidRequest with the op
// id, nothing written; the next well-formed put of the sender runs.
TEST(UcxHostile, EngineHeaderClaimingMorePayloadThanArrived) {
  OPEN_RIG(r, true);
  const std::vector<uint8_t> pay(16, 0xEE);
  struct Case {
    size_t carried;
    const char* what;
  } cases[] = {{8, "16 claimed, 8 in the body"},
               {0, "16 claimed, none (the header alone)"},
               {15, "16 claimed, 15 in the body"},
               {17, "16 claimed, 17 in the body"}};
  uint64_t id = 100;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    wire::Request q = r.put(0, 16, ++id);
    --r.req_seq;  // refused: its sequence number is not consumed
    ASSERT_EQ(r.send_msg(Rig::header(q), std::vector<uint8_t>(k.carried, 0xEE)), UCS_OK);
    ASSERT_TRUE(r.until([&] { return !r.raw->got.empty(); }));
    auto a = r.answers();
    ASSERT_EQ(a.size(), 1u);
    EXPECT_EQ(a[0].status, Status::RemoteInvalidRequest);
    EXPECT_EQ(a[0].op_id, id);
    EXPECT_EQ(a[0].node, r.t->node());
  }
  // A split engine header: 40 of its bytes in the AM header, the rest and the
  // payload in the body.
  {
    wire::Request q = r.put(0, 16, ++id);
    --r.req_seq;
    const auto h = Rig::header(q);
    ASSERT_EQ(r.send_msg(std::vector<uint8_t>(h.begin(), h.begin() + 40), cat({h.begin() + 40, h.end()}, pay)), UCS_OK);
    ASSERT_TRUE(r.until([&] { return !r.raw->got.empty(); }));
    auto a = r.answers();
    ASSERT_EQ(a.size(), 1u);
    EXPECT_EQ(a[0].status, Status::RemoteInvalidRequest);
    EXPECT_EQ(a[0].op_id, id);
  }
  EXPECT_EQ(r.t->rejected("malformed"), 5u);
  EXPECT_TRUE(untouched(*r.g));
  EXPECT_EQ(r.t->peer_error(r.hostile), "");
  // The sender is still a peer in good standing: its put (engine sequence 1)
  // runs.
  ASSERT_EQ(r.send_msg(Rig::header(r.put(0, 16, ++id)), pay), UCS_OK);
  EXPECT_TRUE(r.until([&] { return r.g->mem()[15] == 0xEE; }));
  EXPECT_EQ(0, std::memcmp(r.g->mem(), pay.data(), 16));
  std::memset(r.g->mem(), 0, 16);
  EXPECT_EQ(r.t->rejected("sequence"), 0u);
  r.expect_serves();
}

// A connected sender that breaks the channel's protocol in a well-formed
// header is lost (its operations in flight fail), and only it: the target
// serves others.
TEST(UcxHostile, ProtocolBreakLosesTheSenderOnly) {
  struct Case {
    const char* what;
    std::function<ucs_status_t(Rig&)> send;
    std::string why;
  } cases[] = {
      {"one byte past max_message()",
       [](Rig& r) {
         return r.send_msg(std::vector<uint8_t>(kMaxPrefix, 1),
                           std::vector<uint8_t>(ucx::kMaxMessage - kMaxPrefix + 1, 2));
       },
       "hostile broke the kinet UCX protocol: it sent a " + std::to_string(ucx::kMaxMessage + 1) +
           "-byte message, more than " + std::to_string(ucx::kMaxMessage)},
      {"a sequence number one past the window",
       [](Rig& r) { return r.send(cat(am_header(r.raw->node, kSeqWindow, 8), std::vector<uint8_t>(8, 1)), {1}); },
       "hostile broke the kinet UCX protocol: it sent message number " + std::to_string(kSeqWindow) +
           " while 0 was expected"},
      {"a replayed sequence number",
       [](Rig& r) {
         // Message 0 (8 bytes of garbage: malformed for the engine), then 0 again.
         const std::vector<uint8_t> m = cat(am_header(r.raw->node, 0, 8), std::vector<uint8_t>(8, 1));
         if (ucs_status_t s = r.send(m, {1}); s != UCS_OK) return s;
         r.until([&] { return r.t->rejected("malformed") == 1; });
         return r.send(m, {1});
       },
       "hostile broke the kinet UCX protocol: it sent message number 0 while 1 was expected"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    OPEN_RIG(r, true);
    // An operation in flight to the sender, so that its loss shows as a completion.
    const uint64_t v = 1;
    RemoteKey key;
    key.provider = RemoteKey::kTransport, key.node = r.raw->node, key.rkey = 5;
    const uint32_t kid = r.t->import_key(r.hostile, key);
    ASSERT_EQ(r.t->put(r.hostile, &v, 8, kid, 0x1000, 9), Status::Ok);
    k.send(r);  // the receiver may refuse a large one: the send's status is UCX's
    std::vector<Completion> done;
    ASSERT_EQ(wait_completions(*r.t, 1, done, {}), 1u);
    EXPECT_EQ(done[0].cookie, 9u);
    EXPECT_EQ(done[0].status, Status::TransportRetryExceeded);
    EXPECT_EQ(r.t->peer_error(r.hostile), "peer lost: " + k.why);
    EXPECT_TRUE(untouched(*r.g));
    r.expect_serves();
  }
}

// A sender that skips a sequence number: the messages behind the gap wait in
// memory, up to KINET_UCX_MAX_HELD_BYTES of them. Exactly the cap is held;
// one byte more loses the sender (and frees what it held), and nothing else.
// The last message is eager (1 byte: counted when it arrives) or as large as
// the others (rendezvous on this channel's transports: counted when its fetch
// would start).
TEST(UcxHostile, MessagesHeldBehindAGapStopAtTheCap) {
  ScopedEnv cap("KINET_UCX_MAX_HELD_BYTES", std::to_string(ucx::kMaxMessage));
  static_assert(ucx::kMaxMessage % 16 == 0);
  const size_t each = ucx::kMaxMessage / 16;
  for (const size_t last : {size_t{1}, each}) {
  SCOPED_TRACE("last message of " + std::to_string(last) + " bytes");
  OPEN_RIG(r, true);
  const uint64_t v = 1;
  RemoteKey key;
  key.provider = RemoteKey::kTransport, key.node = r.raw->node, key.rkey = 5;
  ASSERT_EQ(r.t->put(r.hostile, &v, 8, r.t->import_key(r.hostile, key), 0x1000, 9), Status::Ok);
  // Messages 1..16 (0 never comes), 8 bytes in the AM header and the rest as
  // data: 16 x kMaxMessage / 16 bytes, the cap exactly.
  for (uint64_t seq = 1; seq <= 16; ++seq)
    ASSERT_EQ(r.send(cat(am_header(r.raw->node, seq, 8), std::vector<uint8_t>(8, 1)),
                     std::vector<uint8_t>(each - 8, 2)),
              UCS_OK)
        << "message " << seq;
  r.until([] { return false; }, 200ms);
  EXPECT_EQ(r.t->peer_error(r.hostile), "");
  EXPECT_EQ(r.t->poll(r.c, 8), 0u);  // the put to the sender is still in flight
  // One message more (a rendezvous one is never fetched: no waiting for it).
  r.send(cat(am_header(r.raw->node, 17, 1), {1}), std::vector<uint8_t>(last - 1, 3), 100ms);
  r.until([&] { return !r.t->peer_error(r.hostile).empty(); });
  std::vector<Completion> done;
  ASSERT_EQ(wait_completions(*r.t, 1, done, {}), 1u);
  EXPECT_EQ(done[0].cookie, 9u);
  EXPECT_EQ(done[0].status, Status::TransportRetryExceeded);
  EXPECT_EQ(r.t->peer_error(r.hostile),
            "peer lost: hostile sent more than KINET_UCX_MAX_HELD_BYTES (" + std::to_string(ucx::kMaxMessage) +
                ") of messages waiting here: " + std::to_string(ucx::kMaxMessage) +
                " bytes held while message number 0 was expected, then message number 17 of " +
                std::to_string(last) + " bytes");
  EXPECT_EQ(r.t->rejected("sequence"), 0u);
  EXPECT_TRUE(untouched(*r.g));
  r.expect_serves();
  }
}

TEST(UcxHostile, HeldBytesCapBelowOneMessageIsRefused) {
  ScopedEnv cap("KINET_UCX_MAX_HELD_BYTES", std::to_string(ucx::kMaxMessage - 1));
  try {
    ucx_transport("target");
    FAIL() << "opened with a cap below one message";
  } catch (const Error& e) {
    if (e.code() == ErrorCode::NotSupported) GTEST_SKIP() << "UCX can't start here: " << e.what();
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("KINET_UCX_MAX_HELD_BYTES=" + std::to_string(ucx::kMaxMessage - 1) +
                                         " is less than one message (" + std::to_string(ucx::kMaxMessage) +
                                         " bytes)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kinet::test
