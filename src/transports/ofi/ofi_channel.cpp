#include "transports/ofi/ofi_channel.hpp"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/log.hpp"
#include "core/text.hpp"
#include "transports/ofi/ofi_lib.hpp"

namespace kinet::transport::ofi {
namespace {

void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
using text::hex64;

const char* addr_format_name(uint32_t f) {
  switch (f) {
    case FI_SOCKADDR_IN: return "FI_SOCKADDR_IN";
    case FI_SOCKADDR_IN6: return "FI_SOCKADDR_IN6";
    case FI_SOCKADDR: return "FI_SOCKADDR";
    case FI_ADDR_EFA: return "FI_ADDR_EFA";
    case FI_ADDR_STR: return "FI_ADDR_STR";
    default: return "another address format";
  }
}

// What an operation's context points at: the provider's scratch space first
// (FI_CONTEXT / FI_CONTEXT2 mode), then which pool it belongs to.
enum class Kind : uint8_t { Send, Recv };
struct CtxBase {
  fi_context2 fictx;  // first: the pointer passed as an operation's context
  Kind kind;
};
struct SendCtx : CtxBase {
  SendCtx() : CtxBase{{}, Kind::Send} {}
  uint32_t peer = 0;
  uint64_t token = 0;
  bool probe = false;  // the channel's own liveness probe: no on_sent
  bool busy = false;   // posted, completion not yet read
  std::chrono::steady_clock::time_point posted{};
  uint8_t hdr[kHeaderBytes];
  std::vector<uint8_t> bounce;  // when the iov count exceeds the provider's iov_limit
};
struct RecvBuf : CtxBase {
  RecvBuf() : CtxBase{{}, Kind::Recv} {}
  std::unique_ptr<uint8_t[]> data;
};
CtxBase* base_of(void* ctx) { return reinterpret_cast<CtxBase*>(ctx); }

// The libfabric objects, closed in dependency order (the endpoint first: it
// cancels the posted receives before their buffers go).
struct Fids {
  const Lib* lib;
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  explicit Fids(const Lib* l) : lib(l) {}
  Fids(const Fids&) = delete;
  Fids& operator=(const Fids&) = delete;
  ~Fids() {
    if (ep) fi_close(&ep->fid);
    if (av) fi_close(&av->fid);
    if (cq) fi_close(&cq->fid);
    if (domain) fi_close(&domain->fid);
    if (fabric) fi_close(&fabric->fid);
    if (info) lib->freeinfo(info);
  }
};

struct Peer {
  std::string name;
  uint64_t node = 0;
  fi_addr_t addr = FI_ADDR_NOTAVAIL;
  bool lost = false;
  bool lost_reported = false;
  std::string why;
  uint64_t send_seq = 0;  // of the next message to it
  std::chrono::steady_clock::time_point last_send{};  // of a message (not a probe)
  bool reached = false;  // a send to it completed: connected once
  std::chrono::steady_clock::time_point eagain_since{};  // sends refused (FI_EAGAIN) since, or {}
  uint64_t recv_seq = 0;  // of the next message from it to deliver
  // Messages from it that completed before an earlier one (the provider
  // completes a large, rendezvous message after later small ones): by
  // sequence number, delivered once the gap closes.
  std::map<uint64_t, std::pair<RecvBuf*, size_t>> held;
};

class OfiChannel final : public Channel {
 public:
  OfiChannel(const Lib& lib, const TransportOptions& opt, uint64_t node);
  ~OfiChannel() override = default;
  const char* provider() const override { return "ofi"; }
  std::string describe() const override { return describe_; }
  bool ordered() const override { return ordered_; }
  size_t max_message() const override { return max_message_; }
  std::vector<uint8_t> address() const override { return address_; }
  uint32_t add_peer(const std::vector<uint8_t>& address, const std::string& name) override;
  bool send(uint32_t peer, const iovec* iov, int n, uint64_t token) override;
  size_t progress(ChannelEvents& ev) override;

 private:
  [[noreturn]] void fail(ErrorCode code, const std::string& call, int rc) const {
    throw Error(code, "transport \"ofi\" (" + name_ + "): " + call + " failed: " + lib_.error(rc));
  }
  fi_info* pick_info();
  void post_recv(RecvBuf* b);
  void lose(uint32_t peer, const std::string& why);
  void report_lost(ChannelEvents& ev, size_t* events);
  bool post_send(uint32_t peer, const iovec* iov, int n, size_t total, uint64_t token, bool probe);
  void probe_peers();
  bool handle_recv(ChannelEvents& ev, RecvBuf* b, size_t len, fi_addr_t src, size_t* events);
  void handle_error(ChannelEvents& ev, size_t* events);
  std::string straddr(const void* addr) const;

  const Lib& lib_;
  const uint64_t node_;
  const std::string name_;
  bool source_ = false;   // FI_SOURCE granted: cq entries name the sender's fi_addr
  bool ordered_ = false;  // FI_ORDER_SAS granted: messages are matched in order, completions put in order here
  size_t max_message_ = 0;
  size_t iov_limit_ = 1;
  std::vector<uint8_t> address_;
  std::string describe_;

  mutable std::recursive_mutex mu_;
  std::vector<Peer> peers_;
  std::unordered_map<uint64_t, uint32_t> by_node_;
  std::vector<std::unique_ptr<SendCtx>> send_pool_;
  std::vector<SendCtx*> free_send_;
  std::vector<std::unique_ptr<RecvBuf>> recv_pool_;
  std::vector<RecvBuf*> repost_;     // receives to post again (the provider said EAGAIN)
  std::deque<uint64_t> failed_;      // send() tokens to a lost peer: on_sent(false) at progress()
  bool any_lost_unreported_ = false;
  std::chrono::steady_clock::time_point last_probe_{};
  std::chrono::milliseconds stuck_{3000};  // a send pending this long: the peer is lost
  // Last: destroyed first, before the buffers the endpoint may still hold.
  Fids f_;
  fi_info*& info_ = f_.info;
  fid_fabric*& fabric_ = f_.fabric;
  fid_domain*& domain_ = f_.domain;
  fid_av*& av_ = f_.av;
  fid_cq*& cq_ = f_.cq;
  fid_ep*& ep_ = f_.ep;
};

// fi_getinfo takes most of a second here (it probes every provider and
// interface), so it runs once per process; each channel opens on a copy.
fi_info* OfiChannel::pick_info() {
  struct Picked {
    fi_info* info = nullptr;
    std::string why;
  };
  static Picked picked;
  static std::once_flag once;
  std::call_once(once, [this] {
    setenv("FI_OFI_RXM_BUFFER_SIZE", kRxmBufferSize, 0);  // see kRxmBufferSize; the user's value wins
    setenv("FI_OFI_RXM_USE_SRX", kRxmUseSrx, 0);          // see kRxmUseSrx; the user's value wins
    // Tried in order; the first a provider grants wins: FI_SOURCE lets the
    // receiver verify the sender's address, FI_ORDER_SAS keeps messages in order.
    struct Want {
      bool source, sas;
    } wants[] = {{true, true}, {false, true}, {true, false}, {false, false}};
    int last = 0;
    const uint32_t ver = std::min<uint32_t>(lib_.version(), FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION));
    for (const Want& w : wants) {
      fi_info* hints = lib_.dupinfo(nullptr);
      if (!hints) {
        picked.why = "fi_dupinfo(NULL) returned no hints";
        return;
      }
      hints->caps = FI_MSG | (w.source ? FI_SOURCE : 0);
      hints->mode = FI_CONTEXT | FI_CONTEXT2;
      hints->ep_attr->type = FI_EP_RDM;
      hints->domain_attr->mr_mode = 0;  // no application-registered buffers
      hints->domain_attr->threading = FI_THREAD_DOMAIN;
      hints->domain_attr->av_type = FI_AV_TABLE;
      hints->tx_attr->msg_order = w.sas ? FI_ORDER_SAS : 0;
      hints->rx_attr->msg_order = w.sas ? FI_ORDER_SAS : 0;
      // Queue sizes this channel uses: providers size their buffer pools by
      // them (tcp;ofi_rxm's default 2048 costs tens of MiB and most of a second).
      hints->tx_attr->size = kMaxSendsInFlight;
      hints->rx_attr->size = kMaxSendsInFlight;
      fi_info* out = nullptr;
      last = lib_.getinfo(ver, nullptr, nullptr, 0, hints, &out);
      lib_.freeinfo(hints);
      if (last == 0 && out) {
        picked.info = out;  // kept for the process lifetime
        return;
      }
    }
    const char* prov = std::getenv("FI_PROVIDER");
    picked.why = "fi_getinfo: " + lib_.error(last) + "; FI_PROVIDER=" + (prov ? prov : "(unset)");
  });
  if (!picked.info)
    throw Error(ErrorCode::NotSupported,
                "transport \"ofi\": no libfabric provider offers FI_EP_RDM endpoints with FI_MSG here (" + picked.why + ")");
  fi_info* out = lib_.dupinfo(picked.info);
  if (!out) throw Error(ErrorCode::ResourceExhausted, "transport \"ofi\": fi_dupinfo of the provider's info failed");
  source_ = (out->caps & FI_SOURCE) != 0;
  ordered_ = (out->tx_attr->msg_order & FI_ORDER_SAS) && (out->rx_attr->msg_order & FI_ORDER_SAS);
  return out;
}

OfiChannel::OfiChannel(const Lib& lib, const TransportOptions& opt, uint64_t node)
    : lib_(lib), node_(node), name_(opt.name.empty() ? "ofi endpoint" : opt.name), f_(&lib) {
  {
    info_ = pick_info();
    const std::string prov = info_->fabric_attr->prov_name ? info_->fabric_attr->prov_name : "?";
    auto check = [&](int rc, const char* call) {
      if (rc != 0) fail(ErrorCode::System, std::string(call) + " (provider " + prov + ")", rc);
    };
    check(lib_.fabric(info_->fabric_attr, &fabric_, nullptr), "fi_fabric");
    check(fi_domain(fabric_, info_, &domain_, nullptr), "fi_domain");
    const size_t tx = std::min<size_t>(kMaxSendsInFlight, info_->tx_attr->size ? info_->tx_attr->size : 64);
    const size_t rx = std::min<size_t>(kRecvBuffers, info_->rx_attr->size ? info_->rx_attr->size : 64);
    fi_cq_attr cqa{};
    cqa.size = tx + rx + 16;
    cqa.format = FI_CQ_FORMAT_DATA;
    cqa.wait_obj = FI_WAIT_NONE;
    check(fi_cq_open(domain_, &cqa, &cq_, nullptr), "fi_cq_open");
    fi_av_attr ava{};
    ava.type = FI_AV_TABLE;
    check(fi_av_open(domain_, &ava, &av_, nullptr), "fi_av_open");
    check(fi_endpoint(domain_, info_, &ep_, nullptr), "fi_endpoint");
    check(fi_ep_bind(ep_, &av_->fid, 0), "fi_ep_bind(av)");
    check(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    check(fi_enable(ep_), "fi_enable");

    if (opt.timeout.count() > 0)
      stuck_ = std::clamp(std::chrono::milliseconds(opt.timeout / 2), kStuckMin, kStuckMax);
    else
      stuck_ = kStuckMax;
    max_message_ = std::min<size_t>(kMaxMessage, info_->ep_attr->max_msg_size - kHeaderBytes);
    iov_limit_ = std::max<size_t>(1, info_->tx_attr->iov_limit);
    for (size_t i = 0; i < tx; ++i) {
      send_pool_.push_back(std::make_unique<SendCtx>());
      free_send_.push_back(send_pool_.back().get());
    }
    for (size_t i = 0; i < rx; ++i) {
      recv_pool_.push_back(std::make_unique<RecvBuf>());
      recv_pool_.back()->data.reset(new uint8_t[max_message_ + kHeaderBytes]);
      post_recv(recv_pool_.back().get());
    }

    std::vector<uint8_t> name(64);
    size_t len = name.size();
    int rc = fi_getname(&ep_->fid, name.data(), &len);
    if (rc == -FI_ETOOSMALL && len <= kMaxNameBytes) {
      name.resize(len);
      rc = fi_getname(&ep_->fid, name.data(), &len);
    }
    check(rc, "fi_getname");
    if (len == 0 || len > kMaxNameBytes) fail(ErrorCode::System, "fi_getname (address of " + std::to_string(len) + " bytes)", -FI_EINVAL);
    name.resize(len);
    address_.resize(kAddrHeaderBytes + len);
    put32(&address_[0], kAddrMagic);
    address_[4] = kWireVersion & 0xff;
    address_[5] = kWireVersion >> 8;
    put32(&address_[8], info_->addr_format);
    put32(&address_[12], static_cast<uint32_t>(len));
    put64(&address_[16], node_);
    std::memcpy(&address_[kAddrHeaderBytes], name.data(), len);

    describe_ = "ofi " + lib_.version_string() + " " + prov + " on " +
                (info_->domain_attr->name ? info_->domain_attr->name : "?") + " " + straddr(name.data()) +
                (ordered_ ? "" : " (unordered)");
    KINET_LOG(Info, "%s: %s, node %s, max message %zu, iov_limit %zu, FI_SOURCE %s", name_.c_str(),
              describe_.c_str(), hex64(node_).c_str(), max_message_, iov_limit_, source_ ? "yes" : "no");
  }
}

std::string OfiChannel::straddr(const void* addr) const {
  char buf[128];
  size_t len = sizeof buf;
  if (!av_ || !fi_av_straddr(av_, addr, buf, &len)) return "(unprintable address)";
  buf[sizeof buf - 1] = 0;
  return buf;
}

void OfiChannel::post_recv(RecvBuf* b) {
  iovec v{b->data.get(), max_message_ + kHeaderBytes};
  fi_msg m{};
  m.msg_iov = &v;
  m.iov_count = 1;
  m.addr = FI_ADDR_UNSPEC;
  m.context = &b->fictx;
  const ssize_t rc = fi_recvmsg(ep_, &m, 0);
  if (rc == -FI_EAGAIN) {
    repost_.push_back(b);
  } else if (rc != 0) {
    // A receive the endpoint refuses: the pool shrinks; say why once.
    KINET_LOG(Error, "transport \"ofi\" (%s): fi_recvmsg failed: %s; one receive buffer fewer", name_.c_str(),
              lib_.error(static_cast<int>(rc)).c_str());
  }
}

uint32_t OfiChannel::add_peer(const std::vector<uint8_t>& a, const std::string& name) {
  auto bad = [&](const std::string& why) {
    throw Error(ErrorCode::InvalidArgument, "transport \"ofi\": the address of " + name + " is malformed: " + why);
  };
  if (a.size() < kAddrHeaderBytes)
    bad(std::to_string(a.size()) + " bytes, less than the " + std::to_string(kAddrHeaderBytes) + "-byte header");
  if (get32(&a[0]) != kAddrMagic) bad("not an ofi address (magic " + hex64(get32(&a[0])) + ")");
  const uint16_t ver = static_cast<uint16_t>(a[4] | (a[5] << 8));
  if (ver != kWireVersion) bad("version " + std::to_string(ver) + ", this side speaks " + std::to_string(kWireVersion));
  const uint32_t fmt = get32(&a[8]);
  const uint32_t len = get32(&a[12]);
  if (len == 0 || len > kMaxNameBytes || len != a.size() - kAddrHeaderBytes)
    bad("endpoint name of " + std::to_string(len) + " bytes in a blob of " + std::to_string(a.size()));
  if (fmt != info_->addr_format)
    bad(std::string("its endpoint uses ") + addr_format_name(fmt) + ", this one " + addr_format_name(info_->addr_format) +
        " (a different provider or address family: check FI_PROVIDER / FI_TCP_IFACE on both sides)");
  const uint64_t node = get64(&a[16]);
  std::lock_guard<std::recursive_mutex> lk(mu_);
  if (auto it = by_node_.find(node); it != by_node_.end())
    throw Error(ErrorCode::InvalidArgument, "transport \"ofi\": " + name + " has node id " + hex64(node) +
                                                ", already added as " + peers_[it->second].name);
  fi_addr_t fa = FI_ADDR_NOTAVAIL;
  const int rc = fi_av_insert(av_, &a[kAddrHeaderBytes], 1, &fa, 0, nullptr);
  if (rc != 1)
    throw Error(ErrorCode::InvalidArgument, "transport \"ofi\": libfabric rejected the address of " + name + " (" +
                                                straddr(&a[kAddrHeaderBytes]) + "): fi_av_insert returned " +
                                                (rc < 0 ? lib_.error(rc) : std::to_string(rc)));
  const auto id = static_cast<uint32_t>(peers_.size());
  Peer np;
  np.name = name;
  np.node = node;
  np.addr = fa;
  peers_.push_back(std::move(np));
  by_node_[node] = id;
  KINET_LOG(Debug, "%s: peer %u is %s (node %s at %s)", name_.c_str(), id, name.c_str(), hex64(node).c_str(),
            straddr(&a[kAddrHeaderBytes]).c_str());
  return id;
}

void OfiChannel::lose(uint32_t peer, const std::string& why) {
  Peer& p = peers_[peer];
  if (p.lost) return;
  p.lost = true;
  p.why = why;
  any_lost_unreported_ = true;
  // Messages held for a gap that will not close now: their buffers go back.
  for (auto& [seq, h] : p.held) post_recv(h.first);
  p.held.clear();
}

bool OfiChannel::send(uint32_t peer, const iovec* iov, int n, uint64_t token) {
  std::lock_guard<std::recursive_mutex> lk(mu_);
  if (peer >= peers_.size())
    throw Error(ErrorCode::InvalidArgument, "transport \"ofi\": send to peer " + std::to_string(peer) + ", only " +
                                                std::to_string(peers_.size()) + " added");
  if (n < 0 || (n > 0 && !iov))
    throw Error(ErrorCode::InvalidArgument, "transport \"ofi\": send with " + std::to_string(n) + " iov entries");
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    if (iov[i].iov_len && !iov[i].iov_base)
      throw Error(ErrorCode::InvalidArgument, "transport \"ofi\": send with a null iov buffer");
    total += iov[i].iov_len;
    if (total > max_message_) break;
  }
  if (total > max_message_)
    throw Error(ErrorCode::InvalidArgument, "transport \"ofi\": a message of more than " + std::to_string(total) +
                                                " bytes to " + peers_[peer].name + ", max_message() is " +
                                                std::to_string(max_message_));
  Peer& p = peers_[peer];
  if (p.lost) {
    failed_.push_back(token);
    return true;
  }
  return post_send(peer, iov, n, total, token, false);
}

bool OfiChannel::post_send(uint32_t peer, const iovec* iov, int n, size_t total, uint64_t token, bool probe) {
  Peer& p = peers_[peer];
  if (free_send_.empty()) return false;
  SendCtx* c = free_send_.back();
  c->peer = peer;
  c->token = token;
  c->probe = probe;
  put32(c->hdr, kMsgMagic);
  c->hdr[4] = kWireVersion & 0xff;
  c->hdr[5] = kWireVersion >> 8;
  c->hdr[6] = probe ? kFlagProbe : 0;
  c->hdr[7] = 0;
  put64(c->hdr + 8, node_);
  put64(c->hdr + 16, probe ? 0 : p.send_seq);
  iovec v[8];
  size_t count;
  if (static_cast<size_t>(n) + 1 <= std::min<size_t>(iov_limit_, 8)) {
    v[0] = {c->hdr, kHeaderBytes};
    for (int i = 0; i < n; ++i) v[i + 1] = iov[i];
    count = static_cast<size_t>(n) + 1;
  } else {
    c->bounce.resize(kHeaderBytes + total);
    std::memcpy(c->bounce.data(), c->hdr, kHeaderBytes);
    size_t at = kHeaderBytes;
    for (int i = 0; i < n; ++i) {
      if (iov[i].iov_len) std::memcpy(c->bounce.data() + at, iov[i].iov_base, iov[i].iov_len);
      at += iov[i].iov_len;
    }
    v[0] = {c->bounce.data(), at};
    count = 1;
  }
  fi_msg m{};
  m.msg_iov = v;
  m.iov_count = count;
  m.addr = p.addr;
  m.context = &c->fictx;
  const ssize_t rc = fi_sendmsg(ep_, &m, 0);
  if (rc == -FI_EAGAIN) {
    if (p.eagain_since == std::chrono::steady_clock::time_point{}) p.eagain_since = std::chrono::steady_clock::now();
    return false;
  }
  p.eagain_since = {};
  free_send_.pop_back();
  if (rc == 0) {
    c->busy = true;
    c->posted = std::chrono::steady_clock::now();
  }
  if (rc == 0 && !probe) {
    ++p.send_seq;
    p.last_send = std::chrono::steady_clock::now();
  }
  if (rc != 0) {
    free_send_.push_back(c);
    lose(peer, "fi_sendmsg to " + p.name + " failed: " + lib_.error(static_cast<int>(rc)));
    if (!probe) failed_.push_back(token);
  }
  return true;
}

// A peer that died after its last message is noticed by libfabric's tcp
// provider only when something is sent to it again (the first write after
// the peer's exit still succeeds; the next fails). So a peer sent to in the
// last kProbeWindow gets a small probe every kProbeInterval: a dead one fails
// it, and the loss is reported without waiting for the engine's timeout.
//
// When the connection breaks, tcp;ofi_rxm may instead queue the sends and try
// to reconnect (refused, again and again, with no error completion) or refuse
// them with FI_EAGAIN: a send pending, or refused, for stuck_ means the peer
// is lost too, once it was reached before
// (a first connection waits for the peer to progress: the engine's timeout).
void OfiChannel::probe_peers() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_probe_ < kProbeInterval) return;
  last_probe_ = now;
  for (const auto& c : send_pool_)
    if (c->busy && peers_[c->peer].reached && !peers_[c->peer].lost && now - c->posted > stuck_)
      lose(c->peer, "fi_sendmsg to " + peers_[c->peer].name + " failed: no completion in " +
                        std::to_string(stuck_.count()) +
                        " ms (libfabric can't reach it: the process is gone or not progressing)");
  for (uint32_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    if (p.reached && !p.lost && p.eagain_since != std::chrono::steady_clock::time_point{} &&
        now - p.eagain_since > stuck_)
      lose(i, "fi_sendmsg to " + p.name + " refused (FI_EAGAIN) for " + std::to_string(stuck_.count()) +
                  " ms (libfabric can't reach it: the process is gone or not progressing)");
  }
  for (uint32_t i = 0; i < peers_.size(); ++i) {
    const Peer& p = peers_[i];
    if (p.lost || p.last_send == std::chrono::steady_clock::time_point{} || now - p.last_send > kProbeWindow) continue;
    if (free_send_.size() < 2) return;  // real traffic first
    post_send(i, nullptr, 0, 0, 0, true);
  }
}

void OfiChannel::report_lost(ChannelEvents& ev, size_t* events) {
  if (!any_lost_unreported_) return;
  any_lost_unreported_ = false;
  for (uint32_t i = 0; i < peers_.size(); ++i)
    if (peers_[i].lost && !peers_[i].lost_reported) {
      peers_[i].lost_reported = true;
      ++*events;
      ev.on_peer_lost(i, peers_[i].why);
    }
}

// Returns whether `b` may be posted again (false: held for ordering).
bool OfiChannel::handle_recv(ChannelEvents& ev, RecvBuf* b, size_t len, fi_addr_t src, size_t* events) {
  const uint8_t* d = b->data.get();
  ++*events;
  if (len < kHeaderBytes || get32(d) != kMsgMagic || d[4] != (kWireVersion & 0xff) || d[5] != (kWireVersion >> 8)) {
    ev.on_stranger("an ofi sender (a message of " + std::to_string(len) + " bytes without a kinet header)", d, len);
    return true;
  }
  if (d[6] & kFlagProbe) {
    --*events;
    return true;  // liveness only
  }
  const uint64_t node = get64(d + 8);
  const uint64_t seq = get64(d + 16);
  const auto it = by_node_.find(node);
  if (it == by_node_.end()) {
    ev.on_stranger("ofi node " + hex64(node) + " (never added)", d + kHeaderBytes, len - kHeaderBytes);
    return true;
  }
  Peer& p = peers_[it->second];
  if (source_ && src != p.addr) {
    ev.on_stranger("ofi node " + hex64(node) + " claiming to be " + p.name + " from another address", d + kHeaderBytes,
                   len - kHeaderBytes);
    return true;
  }
  if (p.lost) {
    --*events;
    return true;  // reported lost: the engine has given up on it
  }
  if (ordered_ && seq != p.recv_seq) {
    // Behind: a repeat; far ahead: not a sender of this protocol. Both dropped.
    if (seq < p.recv_seq || seq - p.recv_seq > (uint64_t{1} << 32) || p.held.count(seq)) {
      KINET_LOG(Warn, "transport \"ofi\" (%s): message %llu from %s dropped (expected %llu)", name_.c_str(),
                static_cast<unsigned long long>(seq), p.name.c_str(), static_cast<unsigned long long>(p.recv_seq));
      --*events;
      return true;
    }
    // The receive buffers are the endpoint's, shared by every peer: one
    // whose gap does not close (a message of it went to on_stranger, or a
    // hostile sender) must not take them all. Half of them is far beyond any
    // reordering rxm does.
    if (p.held.size() >= std::max<size_t>(1, recv_pool_.size() / 2)) {
      lose(it->second, std::to_string(p.held.size()) + " messages held for a gap at message " +
                           std::to_string(p.recv_seq) + " that does not close (half of the receive buffers)");
      --*events;
      return true;
    }
    p.held[seq] = {b, len};
    --*events;
    return false;
  }
  const uint32_t id = it->second;
  ev.on_message(id, d + kHeaderBytes, len - kHeaderBytes);
  if (!ordered_) return true;
  ++peers_[id].recv_seq;
  // Deliver what this one unblocked (`p` stays valid: add_peer can't run
  // inside this call on another thread, the lock is held; a handler's own
  // add_peer may grow peers_, so look it up again).
  for (;;) {
    Peer& q = peers_[id];
    auto h = q.held.find(q.recv_seq);
    if (h == q.held.end()) break;
    auto [hb, hl] = h->second;
    q.held.erase(h);
    ++q.recv_seq;
    ++*events;
    ev.on_message(id, hb->data.get() + kHeaderBytes, hl - kHeaderBytes);
    post_recv(hb);
  }
  return true;
}

void OfiChannel::handle_error(ChannelEvents& ev, size_t* events) {
  fi_cq_err_entry e{};
  const ssize_t rc = fi_cq_readerr(cq_, &e, 0);
  if (rc != 1) return;
  char pbuf[256] = "";
  const char* prov = fi_cq_strerror(cq_, e.prov_errno, e.err_data, pbuf, sizeof pbuf);
  std::string why = lib_.error(-e.err);
  if (prov && *prov) why += "; provider: " + std::string(prov);
  if (!e.op_context) {
    KINET_LOG(Warn, "transport \"ofi\" (%s): an error completion without a context: %s", name_.c_str(), why.c_str());
    return;
  }
  if (base_of(e.op_context)->kind == Kind::Send) {
    auto* c = static_cast<SendCtx*>(base_of(e.op_context));
    c->busy = false;
    free_send_.push_back(c);
    lose(c->peer, "fi_sendmsg to " + peers_[c->peer].name + " failed: " + why);
    if (!c->probe) {
      ++*events;
      ev.on_sent(c->token, false);
    }
    report_lost(ev, events);
    return;
  }
  auto* b = static_cast<RecvBuf*>(base_of(e.op_context));
  if (e.err == FI_ECANCELED) return;  // the endpoint is closing
  // A message larger than a receive buffer (FI_ETRUNC) or a broken transfer:
  // no peer can be blamed reliably; drop it and keep the buffer.
  KINET_LOG(Warn, "transport \"ofi\" (%s): a receive failed (%s); message dropped", name_.c_str(), why.c_str());
  post_recv(b);
}

size_t OfiChannel::progress(ChannelEvents& ev) {
  std::lock_guard<std::recursive_mutex> lk(mu_);
  size_t events = 0;
  while (!failed_.empty()) {
    const uint64_t t = failed_.front();
    failed_.pop_front();
    ++events;
    ev.on_sent(t, false);
  }
  report_lost(ev, &events);
  if (!repost_.empty()) {
    std::vector<RecvBuf*> again;
    again.swap(repost_);
    for (RecvBuf* b : again) post_recv(b);
  }
  probe_peers();
  report_lost(ev, &events);
  constexpr size_t kBatch = 16;
  for (int round = 0; round < 8; ++round) {
    fi_cq_data_entry e[kBatch];
    fi_addr_t src[kBatch];
    const ssize_t n = source_ ? fi_cq_readfrom(cq_, e, kBatch, src) : fi_cq_read(cq_, e, kBatch);
    if (n == -FI_EAGAIN) break;
    if (n == -FI_EAVAIL) {
      handle_error(ev, &events);
      continue;
    }
    if (n < 0) {
      KINET_LOG(Error, "transport \"ofi\" (%s): fi_cq_read failed: %s", name_.c_str(), lib_.error(static_cast<int>(n)).c_str());
      break;
    }
    for (ssize_t i = 0; i < n; ++i) {
      if (!e[i].op_context) continue;
      if (base_of(e[i].op_context)->kind == Kind::Send) {
        auto* c = static_cast<SendCtx*>(base_of(e[i].op_context));
        c->busy = false;
        free_send_.push_back(c);
        peers_[c->peer].reached = true;
        if (c->probe) continue;
        ++events;
        ev.on_sent(c->token, true);
      } else {
        auto* b = static_cast<RecvBuf*>(base_of(e[i].op_context));
        if (handle_recv(ev, b, e[i].len, source_ ? src[i] : FI_ADDR_NOTAVAIL, &events)) post_recv(b);
      }
    }
    if (static_cast<size_t>(n) < kBatch) break;
  }
  return events;
}

}  // namespace

std::unique_ptr<Channel> make_ofi_channel(const TransportOptions& opt, uint64_t node) {
  return std::make_unique<OfiChannel>(Lib::process(), opt, node);
}

}  // namespace kinet::transport::ofi
