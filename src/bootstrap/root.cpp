// kinet bootstrap — the unique ID and the root's rendezvous service: every
// rank registers its listener address, the root answers with the table of
// all addresses once every rank has registered.
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "bootstrap/socket.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/thread_name.hpp"
#include "kinet/bootstrap.hpp"

namespace kinet {
namespace {
using namespace bs;

class RootService {
 public:
  RootService(Fd lfd, const uint8_t* secret, std::string where)
      : lfd_(std::move(lfd)), who_("bootstrap root " + where) {
    std::memcpy(secret_, secret, sizeof secret_);
    stop_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!stop_) throw Error(ErrorCode::System, who_ + ": eventfd: " + std::strerror(errno));
    thread_ = named_thread("kinet-bs-root", [this] { run(); });
  }
  ~RootService() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(stop_.get(), &one, sizeof one);
    thread_.join();
  }
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  bool serves(const uint8_t* secret) const { return std::memcmp(secret_, secret, sizeof secret_) == 0; }

 private:
  void reply(int fd, RootStatus st, const std::vector<WireAddr>* table, const SockAddr& peer) {
    Hello r{};
    r.magic = Hello::kMagic;
    r.version = Hello::kVersion;
    r.kind = static_cast<uint16_t>(HelloKind::RootReply);
    r.status = static_cast<uint32_t>(st);
    r.nranks = table ? static_cast<uint32_t>(table->size()) : 0;
    // A rank that stopped reading must not hold up the others for long.
    Deadline d = Clock::now() + std::chrono::seconds(2);
    try {
      write_all(fd, &r, sizeof r, d, peer.str());
      if (table) write_all(fd, table->data(), table->size() * sizeof(WireAddr), d, peer.str());
    } catch (const Error& e) {
      KINET_LOG(Warn, "%s: could not answer %s: %s", who_.c_str(), peer.str().c_str(), e.what());
    }
  }

  void refuse(Fd& fd, const SockAddr& peer, const Hello& h, RootStatus st) {
    KINET_LOG(Warn, "%s: refused %s (rank %u of %u): %s", who_.c_str(), peer.str().c_str(), h.rank, h.nranks,
              root_status_name(st));
    reply(fd.get(), st, nullptr, peer);
    fd.reset();
  }

  void run() {
    int nranks = -1;
    int registered = 0;
    std::vector<Fd> conns;
    std::vector<SockAddr> peers;
    std::vector<WireAddr> table;
    Deadline give_up = Deadline::max();
    auto on_hello = [&](Fd& fd, const SockAddr& peer, const Hello& h) {
      if (h.kind != static_cast<uint16_t>(HelloKind::ToRoot)) {
        KINET_LOG(Warn, "%s: refused %s: handshake kind %u is not a registration", who_.c_str(),
                  peer.str().c_str(), h.kind);
        return;
      }
      if (std::memcmp(h.secret, secret_, sizeof secret_) != 0) return refuse(fd, peer, h, RootStatus::WrongSecret);
      if (nranks < 0) {
        if (h.nranks < 1 || h.nranks > (1u << 20)) return refuse(fd, peer, h, RootStatus::RankOutOfRange);
        nranks = static_cast<int>(h.nranks);
        conns.resize(nranks);
        peers.resize(nranks);
        table.assign(nranks, WireAddr{});
        // Answer before the ranks' own bound so they learn who is missing.
        give_up = Clock::now() + std::chrono::milliseconds(uint64_t(h.timeout_ms) * 9 / 10);
      }
      if (h.nranks != static_cast<uint32_t>(nranks)) return refuse(fd, peer, h, RootStatus::NranksMismatch);
      if (h.rank >= h.nranks) return refuse(fd, peer, h, RootStatus::RankOutOfRange);
      if (conns[h.rank]) return refuse(fd, peer, h, RootStatus::DuplicateRank);
      if (h.addr.family != AF_INET && h.addr.family != AF_INET6) {
        KINET_LOG(Warn, "%s: refused %s (rank %u): listener address family %u", who_.c_str(), peer.str().c_str(),
                  h.rank, h.addr.family);
        return;
      }
      conns[h.rank] = std::move(fd);
      peers[h.rank] = peer;
      table[h.rank] = h.addr;
      ++registered;
      KINET_LOG(Debug, "%s: rank %u of %d registered from %s", who_.c_str(), h.rank, nranks, peer.str().c_str());
    };
    bool all = false;
    try {
      all = accept_hellos(lfd_.get(), give_up, stop_.get(), who_, on_hello,
                          [&] { return nranks > 0 && registered == nranks; });
    } catch (const Error& e) {
      KINET_LOG(Error, "%s: %s", who_.c_str(), e.what());
    }
    lfd_.reset();  // late ranks are refused by the kernel and time out naming the root
    uint64_t stopped = 0;
    bool asked_to_stop = ::read(stop_.get(), &stopped, sizeof stopped) == sizeof stopped;
    if (all) {
      for (int r = 0; r < nranks; ++r) reply(conns[r].get(), RootStatus::Ok, &table, peers[r]);
    } else if (nranks > 0 && !asked_to_stop) {
      std::string missing;
      for (int r = 0; r < nranks; ++r)
        if (!conns[r]) missing += (missing.empty() ? "" : ",") + std::to_string(r);
      KINET_LOG(Warn, "%s: timeout: %d of %d ranks registered; missing ranks %s", who_.c_str(), registered,
                nranks, missing.c_str());
      for (int r = 0; r < nranks; ++r)
        if (conns[r]) reply(conns[r].get(), RootStatus::Timeout, &table, peers[r]);
    }
    finished_.store(true, std::memory_order_release);
  }

  Fd lfd_;
  Fd stop_;
  std::string who_;
  uint8_t secret_[16];
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

// Root services of this process; finished ones are reaped by the next
// create(), the rest are stopped at exit.
struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<RootService>> services;
  const pid_t pid = ::getpid();
  ~Registry() {
    // A child forked without exec shares the services' descriptors but not
    // their threads: stopping them there would stop the parent's root and
    // join threads the child doesn't have. Leave them to the parent.
    if (::getpid() != pid)
      for (auto& s : services) (void)s.release();
  }
};
Registry& registry() {
  static Registry r;
  return r;
}

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

UniqueId UniqueId::create() {
  uint64_t port = env::get_u64("KINET_BOOTSTRAP_PORT", 0);
  if (port > 65535)
    throw Error(ErrorCode::InvalidArgument,
                "bootstrap: KINET_BOOTSTRAP_PORT=" + std::to_string(port) + " is not a port (0..65535)");
  Interface iface = pick_interface();
  SockAddr bound;
  Fd lfd = listen_on(iface.addr, static_cast<uint16_t>(port), &bound);
  UniqueId id{};
  id.magic = kMagic;
  id.version = kVersion;
  WireAddr w = to_wire(bound);
  id.family = w.family;
  id.port = w.port;
  id.scope_id = w.scope_id;
  std::memcpy(id.addr, w.addr, sizeof id.addr);
  size_t got = 0;
  while (got < sizeof id.secret) {
    ssize_t n = ::getrandom(id.secret + got, sizeof id.secret - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(ErrorCode::System, std::string("bootstrap: getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  auto svc = std::make_unique<RootService>(std::move(lfd), id.secret, bound.str() + " (" + iface.name + ")");
  Registry& reg = registry();
  std::lock_guard<std::mutex> g(reg.mu);
  std::erase_if(reg.services, [](const std::unique_ptr<RootService>& s) { return s->finished(); });
  reg.services.push_back(std::move(svc));
  KINET_LOG(Info, "bootstrap: root listening on %s (%s)", bound.str().c_str(), iface.name.c_str());
  return id;
}

bool UniqueId::cancel(const UniqueId& id) {
  std::unique_ptr<RootService> gone;  // stopped outside the lock: its destructor joins the thread
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> g(reg.mu);
    if (::getpid() != reg.pid) return false;  // a forked child: the services' threads are the parent's
    auto it = std::find_if(reg.services.begin(), reg.services.end(),
                           [&](const std::unique_ptr<RootService>& s) { return s->serves(id.secret); });
    if (it == reg.services.end()) return false;
    gone = std::move(*it);
    reg.services.erase(it);
  }
  const bool was_running = !gone->finished();
  gone.reset();
  return was_running;
}

void UniqueId::validate() const {
  auto bad = [](const std::string& m) { throw Error(ErrorCode::InvalidArgument, "bootstrap: unique id: " + m); };
  if (magic != kMagic) bad("magic 0x" + [&] { char b[16]; std::snprintf(b, sizeof b, "%08x", magic); return std::string(b); }() + " is not a kinet unique id");
  if (version != kVersion) bad("version " + std::to_string(version) + " (this build speaks " + std::to_string(kVersion) + ")");
  if (family != AF_INET && family != AF_INET6) bad("address family " + std::to_string(family) + " is neither IPv4 nor IPv6");
  if (port == 0) bad("port 0");
}

std::string UniqueId::to_string() const {
  static const char* digits = "0123456789abcdef";
  const auto* p = reinterpret_cast<const uint8_t*>(this);
  std::string s(2 * sizeof *this, '0');
  for (size_t i = 0; i < sizeof *this; ++i) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  return s;
}

UniqueId UniqueId::from_string(std::string_view hex) {
  UniqueId id{};
  if (hex.size() != 2 * sizeof id)
    throw Error(ErrorCode::InvalidArgument, "bootstrap: unique id: " + std::to_string(hex.size()) +
                                                " characters, expected " + std::to_string(2 * sizeof id) +
                                                " hex digits");
  auto* p = reinterpret_cast<uint8_t*>(&id);
  for (size_t i = 0; i < sizeof id; ++i) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      throw Error(ErrorCode::InvalidArgument,
                  "bootstrap: unique id: character " + std::to_string(hi < 0 ? 2 * i : 2 * i + 1) + " is not a hex digit");
    p[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  id.validate();
  return id;
}

std::string UniqueId::address_string() const {
  WireAddr w{};
  w.family = family;
  w.port = port;
  w.scope_id = scope_id;
  std::memcpy(w.addr, addr, sizeof addr);
  if (family != AF_INET && family != AF_INET6) return "<invalid address>";
  return from_wire(w, "unique id").str();
}

}  // namespace kinet
