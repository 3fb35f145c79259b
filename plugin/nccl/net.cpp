// kinet NCCL plugin — the net half (netDeviceType HOST): NCCL's two-sided,
// tagged send/recv between a pair of ranks.
//
// Each connection is one non-blocking TCP stream carrying frames
// {tag, bytes} + payload in send order; the receiver matches them in order
// against the receives NCCL posted (NCCL posts matching receives in the same
// order). Why TCP here and not the one-sided Transport: NCCL's net calls must
// never block and are two-sided, so over put/signal each receive would need a
// clear-to-send carrying a freshly imported key per buffer; a stream does
// the matching for free, and the data path NCCL wants kinet for is GIN's.
// Host memory by default (ptrSupport HOST): NCCL stages GPU data through host
// buffers, as it does for its own socket transport. KINET_NCCL_NET_CUDA=1
// adds NCCL_PTR_CUDA: GPU buffers are registered, and a send copies its GPU
// data into a host buffer of the request (kinet's bounded CUDA copy) before
// it streams; a receive lands in such a buffer and is copied to the GPU
// before test() reports it done (so iflush has nothing left to do).
//
// Handle: magic, the listener's address (bootstrap WireAddr) and a 16-byte
// secret; accept() takes only a connection that presents the secret.
// connect() never blocks: it starts a non-blocking TCP connect and returns a
// NULL comm (NCCL calls again with the same handle) until the connect is done
// and the hello sent; the attempt waits in a table keyed by the handle's
// content. Refused / unreachable fails at once, a connect that never
// completes after KINET_BOOTSTRAP_TIMEOUT_MS.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "bootstrap/socket.hpp"
#include "core/cuda_shim.hpp"
#include "gin.hpp"
#include "kinet/bootstrap.hpp"

namespace kinet::nccl {
namespace {
using bs::Fd;

constexpr uint32_t kHandleMagic = 0x4e4b4e31;  // "1NKN"

struct NetHandle {
  uint32_t magic;
  uint32_t reserved0;
  bs::WireAddr addr;
  uint8_t secret[16];
  uint8_t reserved[72];
};
static_assert(sizeof(NetHandle) == kHandleMaxSize);

struct Hello {  // the first bytes a connecting side sends
  uint32_t magic;
  uint32_t reserved;
  uint8_t secret[16];
};

struct FrameHead {
  int32_t tag;
  uint32_t reserved;
  uint64_t bytes;
};
static_assert(sizeof(FrameHead) == 16);

// Host memory needs no registration: the handle proves regMr was called and
// says where the memory is.
struct NetMr {
  void* handle = nullptr;  // NCCL's name for it (common.hpp: Handles)
  bool gpu = false;
  const char* base = nullptr;
  size_t size = 0;
};

struct NetComm;
struct NetReq {
  void* handle = nullptr;  // NCCL's name for it (common.hpp: Handles)
  NetComm* comm = nullptr;
  bool send = false;
  bool done = false;
  char* data = nullptr;
  uint64_t size = 0;   // send: bytes to send; recv: room posted
  int tag = 0;
  FrameHead head{};    // send: what goes first; recv: what arrived
  uint64_t moved = 0;  // bytes of head + payload moved so far
  char* gpu_dst = nullptr;    // recv into GPU memory: `data` is the staging buffer, copied here when done
  std::unique_ptr<char[]> staged;  // host copy of GPU data (send: the payload; recv: what arrived); not zeroed
};

struct NetComm {
  Kind kind;                              // NetSend or NetRecv
  void* handle = nullptr;                 // NCCL's name for it (common.hpp: Handles)
  Fd fd;
  std::string peer;                       // "10.0.0.2:41234"
  std::string error;                      // why the stream is unusable; empty while it works
  std::deque<std::unique_ptr<NetReq>> q;  // posted, in order (a finished one leaves when tested)

  // Moves bytes for the requests in order; marks finished ones done. A
  // failure (peer closed, reset, bad frame) is recorded in `error`.
  void progress() {
    for (auto& rp : q) {
      NetReq& r = *rp;
      if (r.done) continue;
      if (!error.empty()) return;
      if (!(r.send ? push(r) : pull(r))) return;  // would block: later requests wait their turn
    }
  }

  bool io_failed(ssize_t n, const char* doing) {
    if (n == 0) error = "peer " + peer + " closed the connection while " + doing;
    else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    else error = std::string(doing) + " peer " + peer + ": " + std::strerror(errno);
    return true;
  }

  bool push(NetReq& r) {
    while (r.moved < sizeof r.head + r.size) {
      iovec iov[2];
      int n = 0;
      if (r.moved < sizeof r.head) iov[n++] = {reinterpret_cast<char*>(&r.head) + r.moved, sizeof r.head - r.moved};
      uint64_t off = r.moved > sizeof r.head ? r.moved - sizeof r.head : 0;
      if (r.size > off) iov[n++] = {r.data + off, r.size - off};
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = n;
      ssize_t w = ::sendmsg(fd.get(), &m, MSG_NOSIGNAL);
      if (w < 0) {
        io_failed(w, "sending to");  // records the error unless it would block
        return false;
      }
      r.moved += static_cast<uint64_t>(w);
    }
    r.done = true;
    return true;
  }

  bool pull(NetReq& r) {
    while (r.moved < sizeof r.head) {
      ssize_t n = ::recv(fd.get(), reinterpret_cast<char*>(&r.head) + r.moved, sizeof r.head - r.moved, 0);
      if (n <= 0) {
        io_failed(n, "receiving from");
        return false;
      }
      r.moved += static_cast<uint64_t>(n);
      if (r.moved == sizeof r.head) {
        if (r.head.tag != r.tag) {
          error = "peer " + peer + " sent a message with tag " + std::to_string(r.head.tag) +
                  " where the posted receive expects tag " + std::to_string(r.tag);
          return false;
        }
        if (r.head.bytes > r.size) {
          error = "peer " + peer + " sent " + std::to_string(r.head.bytes) + " bytes to a receive of " +
                  std::to_string(r.size) + " bytes (tag " + std::to_string(r.tag) + ")";
          return false;
        }
      }
    }
    while (r.moved < sizeof r.head + r.head.bytes) {
      uint64_t off = r.moved - sizeof r.head;
      ssize_t n = ::recv(fd.get(), r.data + off, r.head.bytes - off, 0);
      if (n <= 0) {
        io_failed(n, "receiving from");
        return false;
      }
      r.moved += static_cast<uint64_t>(n);
    }
    if (r.gpu_dst && r.head.bytes) {
      try {
        cuda::copy(r.gpu_dst, r.data, r.head.bytes);
      } catch (const std::exception& e) {
        error = "copying " + std::to_string(r.head.bytes) + " received bytes to GPU memory: " + e.what();
        return false;
      }
    }
    r.done = true;
    return true;
  }
};

struct NetListen {
  void* handle = nullptr;  // NCCL's name for it (common.hpp: Handles)
  Fd lfd;
  uint8_t secret[16];
  std::string where;
  struct Pending {
    Fd fd;
    std::string peer;
    Hello hello{};
    size_t got = 0;
  };
  std::vector<Pending> pending;
};

Result net_init(void** ctx, uint64_t, CommConfig*, Logger log, ProfilerCallback) {
  set_logger(log);
  if (ctx) *ctx = nullptr;  // no per-communicator state
  return kSuccess;
}

Result net_devices(int* ndev) {
  if (!ndev) return fail(kInvalidArgument, "net devices: ndev is NULL");
  *ndev = 1;
  return kSuccess;
}

Result net_get_properties(int dev, Properties* p) {
  if (!p) return fail(kInvalidArgument, "net getProperties: props is NULL");
  if (dev != 0) return fail(kInvalidArgument, "net getProperties: device " + std::to_string(dev) + " (kinet has 1)");
  fill_properties(p, kDeviceHost);
  return kSuccess;
}

Result net_listen(void*, int dev, void* handle, void** listen_comm) {
  if (dev != 0) return fail(kInvalidArgument, "net listen: device " + std::to_string(dev) + " (kinet has 1)");
  if (!handle || !listen_comm) return fail(kInvalidArgument, "net listen: handle or listenComm is NULL");
  return guarded("net listen", [&] {
    auto l = std::make_unique<NetListen>();
    bs::Interface itf = bs::pick_interface();
    bs::SockAddr bound;
    l->lfd = bs::listen_on(itf.addr, 0, &bound);
    if (::getrandom(l->secret, sizeof l->secret, 0) != static_cast<ssize_t>(sizeof l->secret))
      throw Error(ErrorCode::System, std::string("getrandom: ") + std::strerror(errno));
    l->where = bound.str() + " (" + itf.name + ")";
    NetHandle h{};
    h.magic = kHandleMagic;
    h.addr = bs::to_wire(bound);
    std::memcpy(h.secret, l->secret, sizeof h.secret);
    std::memcpy(handle, &h, sizeof h);
    info("net listen on %s", l->where.c_str());
    l->handle = live_add(l.get(), Kind::NetListen);
    *listen_comm = l->handle;
    (void)l.release();  // owned through its handle now
    return kSuccess;
  });
}

// A connect in progress: NCCL calls connect again with the same handle while
// it returns a NULL comm, so the state waits here, keyed by the handle's
// content (magic, address, secret: NCCL may copy the handle between calls).
struct PendingConnect {
  Fd fd;
  bs::SockAddr to;
  bs::Deadline deadline;
  long long timeout_ms = 0;  // what `deadline` was set from (KINET_BOOTSTRAP_TIMEOUT_MS)
  bool connected = false;  // TCP handshake done
  Hello hello{};
  size_t sent = 0;         // bytes of `hello` sent
};
std::mutex g_connect_mu;
std::map<std::string, PendingConnect> g_connects;  // guarded by g_connect_mu

std::string connect_key(const NetHandle& h) {
  return std::string(reinterpret_cast<const char*>(&h), offsetof(NetHandle, reserved));
}

[[noreturn]] void connect_failed(const PendingConnect& p, const std::string& why) {
  throw Error(ErrorCode::System, "kinet net listener at " + p.to.str() + ": " + why);
}
[[noreturn]] void connect_failed_errno(const PendingConnect& p, int err) {
  connect_failed(p, std::string(std::strerror(err)) +
                        (err == ECONNREFUSED ? " (nothing listens there: the handle's listener is gone)" : ""));
}

// One non-blocking step of `p`; true when the hello is all sent. Throws on
// failure (the caller drops `p`, closing its socket).
bool connect_step(PendingConnect& p) {
  if (!p.connected) {
    pollfd pf{p.fd.get(), POLLOUT, 0};
    int n = ::poll(&pf, 1, 0);
    if (n < 0 && errno != EINTR) {
      const int e = errno;
      connect_failed(p, std::string("poll: ") + std::strerror(e));
    }
    if (n <= 0) {
      if (bs::ms_left(p.deadline) == 0)
        connect_failed(p, "timeout: the TCP connect did not complete within KINET_BOOTSTRAP_TIMEOUT_MS (" +
                              std::to_string(p.timeout_ms) + " ms)");
      return false;
    }
    int err = 0;
    socklen_t el = sizeof err;
    if (::getsockopt(p.fd.get(), SOL_SOCKET, SO_ERROR, &err, &el) != 0) err = errno;
    if (err) connect_failed_errno(p, err);
    p.connected = true;
    int one = 1;
    ::setsockopt(p.fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  while (p.sent < sizeof p.hello) {
    ssize_t w = ::send(p.fd.get(), reinterpret_cast<const char*>(&p.hello) + p.sent, sizeof p.hello - p.sent,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p.sent += static_cast<size_t>(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (bs::ms_left(p.deadline) == 0) connect_failed(p, "timeout sending the handshake");
      return false;
    } else {
      const int e = errno;
      connect_failed(p, std::string("sending the handshake: ") + std::strerror(e));
    }
  }
  return true;
}

Result net_connect(void*, int dev, void* handle, void** send_comm, DeviceHandle**) {
  if (!send_comm || !handle) return fail(kInvalidArgument, "net connect: handle or sendComm is NULL");
  *send_comm = nullptr;
  if (dev != 0) return fail(kInvalidArgument, "net connect: device " + std::to_string(dev) + " (kinet has 1)");
  return guarded("net connect", [&] {
    NetHandle h;
    std::memcpy(&h, handle, sizeof h);
    if (h.magic != kHandleMagic)
      throw Error(ErrorCode::InvalidArgument, "not a kinet net handle (magic " + std::to_string(h.magic) + ")");
    const std::string key = connect_key(h);
    std::lock_guard<std::mutex> lk(g_connect_mu);
    // Connects NCCL stopped calling for: dropped (their sockets closed) once past their deadline.
    for (auto it = g_connects.begin(); it != g_connects.end();)
      it = it->first != key && bs::ms_left(it->second.deadline) == 0 ? g_connects.erase(it) : std::next(it);
    auto it = g_connects.find(key);
    if (it == g_connects.end()) {
      PendingConnect p;
      p.to = bs::from_wire(h.addr, "net handle");
      const auto timeout = Bootstrap::default_timeout();
      p.timeout_ms = static_cast<long long>(timeout.count());
      p.deadline = bs::Clock::now() + timeout;
      p.hello = Hello{kHandleMagic, 0, {}};
      std::memcpy(p.hello.secret, h.secret, sizeof p.hello.secret);
      p.fd = Fd(::socket(p.to.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!p.fd) {
        const int e = errno;
        connect_failed(p, std::string("socket: ") + std::strerror(e));
      }
      // Refused or unreachable fails at once (here or in connect_step): the
      // listener exists before its handle is shared, so it is gone or cannot
      // be reached. EINTR: the connect goes on in the background, like EINPROGRESS.
      if (::connect(p.fd.get(), reinterpret_cast<const sockaddr*>(&p.to.ss), p.to.len) != 0 &&
          errno != EINPROGRESS && errno != EINTR)
        connect_failed_errno(p, errno);
      it = g_connects.emplace(key, std::move(p)).first;
    }
    bool done;
    try {
      done = connect_step(it->second);
    } catch (...) {
      g_connects.erase(it);
      throw;
    }
    if (!done) return kSuccess;  // NULL comm: NCCL calls again with this handle
    auto c = std::make_unique<NetComm>();
    c->kind = Kind::NetSend;
    c->fd = std::move(it->second.fd);
    c->peer = it->second.to.str();
    g_connects.erase(it);
    c->handle = live_add(c.get(), Kind::NetSend);
    *send_comm = c->handle;
    (void)c.release();  // owned through its handle now
    return kSuccess;
  });
}

Result net_accept(void* listen_comm, void** recv_comm, DeviceHandle**) {
  auto* l = live<NetListen>(listen_comm, Kind::NetListen);
  if (!l) return fail(kInvalidArgument, "net accept: not a kinet listen comm");
  if (!recv_comm) return fail(kInvalidArgument, "net accept: recvComm is NULL");
  *recv_comm = nullptr;
  return guarded("net accept", [&] {
    for (;;) {
      bs::SockAddr a;
      a.len = sizeof a.ss;
      int fd = ::accept4(l->lfd.get(), reinterpret_cast<sockaddr*>(&a.ss), &a.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) break;
        throw Error(ErrorCode::System, "accept on " + l->where + ": " + std::strerror(errno));
      }
      l->pending.push_back({Fd(fd), a.str()});
    }
    for (size_t i = 0; i < l->pending.size(); ++i) {
      auto& p = l->pending[i];
      ssize_t n = ::recv(p.fd.get(), reinterpret_cast<char*>(&p.hello) + p.got, sizeof p.hello - p.got, 0);
      bool drop = false;
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        warn("net accept on %s: %s closed before its handshake", l->where.c_str(), p.peer.c_str());
        drop = true;
      } else if (n > 0 && (p.got += static_cast<size_t>(n)) == sizeof p.hello) {
        if (p.hello.magic != kHandleMagic || std::memcmp(p.hello.secret, l->secret, sizeof l->secret) != 0) {
          warn("net accept on %s: refused %s: wrong handshake or secret", l->where.c_str(), p.peer.c_str());
          drop = true;
        } else {
          auto c = std::make_unique<NetComm>();
          c->kind = Kind::NetRecv;
          c->fd = std::move(p.fd);
          c->peer = p.peer;
          l->pending.erase(l->pending.begin() + static_cast<long>(i));
          c->handle = live_add(c.get(), Kind::NetRecv);
          *recv_comm = c->handle;
          (void)c.release();  // owned through its handle now
          return kSuccess;
        }
      }
      if (drop) l->pending.erase(l->pending.begin() + static_cast<long>(i--));
    }
    return kSuccess;
  });
}

// Whether [p, +n) lies inside what m registered.
bool mr_holds(const NetMr& m, const void* p, size_t n) {
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(m.base);
  return a >= b && a - b <= m.size && n <= m.size - (a - b);
}

NetComm* any_comm(void* c) {
  if (auto* n = live<NetComm>(c, Kind::NetSend)) return n;
  return live<NetComm>(c, Kind::NetRecv);
}

Result net_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (!any_comm(comm)) return fail(kInvalidArgument, "net regMr: not a kinet net comm");
  if (!mhandle) return fail(kInvalidArgument, "net regMr: mhandle is NULL");
  if (type != kPtrHost && !(type == kPtrCuda && net_takes_cuda()))
    return fail(kInvalidArgument, "net regMr: memory type " + std::to_string(type) +
                                      (type == kPtrCuda ? ": CUDA memory needs KINET_NCCL_NET_CUDA=1 and a GPU"
                                                        : ": the kinet net takes host (1) or CUDA (2) memory"));
  if (!data && size > 0) return fail(kInvalidArgument, "net regMr: NULL data of " + std::to_string(size) + " bytes");
  if (type == kPtrCuda && size > 0 && cuda::pointer_kind(data) != MemoryKind::Gpu)
    return fail(kInvalidArgument, "net regMr: CUDA memory type for a pointer CUDA does not know as device memory");
  auto* m = new NetMr;
  m->gpu = type == kPtrCuda;
  m->base = static_cast<const char*>(data);
  m->size = size;
  m->handle = live_add(m, Kind::NetMr);
  *mhandle = m->handle;
  return kSuccess;
}

Result net_reg_mr_dma_buf(void* comm, void* data, size_t size, int type, uint64_t, int, void** mhandle) {
  return net_reg_mr(comm, data, size, type, mhandle);
}

Result net_dereg_mr(void* comm, void* mhandle) {
  if (!any_comm(comm)) return fail(kInvalidArgument, "net deregMr: not a kinet net comm");
  auto* m = live<NetMr>(mhandle, Kind::NetMr);
  if (!m) return fail(kInvalidArgument, "net deregMr: not a kinet memory handle");
  live_remove(m->handle);
  delete m;
  return kSuccess;
}

Result net_isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void*, void** request) {
  auto* c = live<NetComm>(send_comm, Kind::NetSend);
  if (!c) return fail(kInvalidArgument, "net isend: not a kinet send comm");
  if (!request) return fail(kInvalidArgument, "net isend: request is NULL");
  *request = nullptr;
  if (!c->error.empty()) return fail(kRemoteError, "net isend to " + c->peer + ": " + c->error);
  const NetMr* mr = live<NetMr>(mhandle, Kind::NetMr);
  if (size > 0 && (!data || !mr))
    return fail(kInvalidArgument, "net isend to " + c->peer + ": NULL data or not a kinet memory handle");
  if (size > 0 && !mr_holds(*mr, data, size))
    return fail(kInvalidArgument, "net isend to " + c->peer + ": " + std::to_string(size) +
                                      " bytes are not inside the registered memory");
  if (c->q.size() >= static_cast<size_t>(kMaxRequests)) return kSuccess;  // NULL request: NCCL retries
  auto r = std::make_unique<NetReq>();
  r->comm = c;
  r->send = true;
  r->data = static_cast<char*>(data);
  if (size > 0 && mr->gpu) {
    r->staged.reset(new (std::nothrow) char[size]);  // no exception may reach NCCL
    if (!r->staged)
      return fail(kSystemError, "net isend to " + c->peer + ": no host memory for a " + std::to_string(size) +
                                    "-byte copy of GPU data");
    try {
      cuda::copy(r->staged.get(), data, size);
    } catch (const std::exception& e) {
      return fail(kSystemError, "net isend to " + c->peer + ": copying " + std::to_string(size) +
                                    " bytes from GPU memory: " + e.what());
    }
    r->data = r->staged.get();
  }
  r->size = size;
  r->tag = tag;
  r->head = FrameHead{tag, 0, size};
  r->handle = live_add(r.get(), Kind::NetReq);
  *request = r->handle;
  c->q.push_back(std::move(r));
  c->progress();
  return kSuccess;
}

Result net_irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void**,
                 void** request) {
  auto* c = live<NetComm>(recv_comm, Kind::NetRecv);
  if (!c) return fail(kInvalidArgument, "net irecv: not a kinet recv comm");
  if (!request) return fail(kInvalidArgument, "net irecv: request is NULL");
  *request = nullptr;
  if (n != 1) return fail(kInvalidUsage, "net irecv: " + std::to_string(n) + " receives at once (maxRecvs is 1)");
  if (!data || !sizes || !tags || !mhandles)
    return fail(kInvalidArgument, "net irecv from " + c->peer + ": NULL data, sizes, tags or mhandles");
  if (!c->error.empty()) return fail(kRemoteError, "net irecv from " + c->peer + ": " + c->error);
  const NetMr* mr = live<NetMr>(mhandles[0], Kind::NetMr);
  if (sizes[0] > 0 && (!data[0] || !mr))
    return fail(kInvalidArgument, "net irecv from " + c->peer + ": NULL data or not a kinet memory handle");
  if (sizes[0] > 0 && !mr_holds(*mr, data[0], sizes[0]))
    return fail(kInvalidArgument, "net irecv from " + c->peer + ": " + std::to_string(sizes[0]) +
                                      " bytes are not inside the registered memory");
  if (c->q.size() >= static_cast<size_t>(kMaxRequests)) return kSuccess;
  auto r = std::make_unique<NetReq>();
  r->comm = c;
  r->data = static_cast<char*>(data[0]);
  if (sizes[0] > 0 && mr->gpu) {
    r->staged.reset(new (std::nothrow) char[sizes[0]]);
    if (!r->staged)
      return fail(kSystemError, "net irecv from " + c->peer + ": no host memory for a " +
                                    std::to_string(sizes[0]) + "-byte receive into GPU memory");
    r->gpu_dst = r->data;
    r->data = r->staged.get();
  }
  r->size = sizes[0];
  r->tag = tags[0];
  r->handle = live_add(r.get(), Kind::NetReq);
  *request = r->handle;
  c->q.push_back(std::move(r));
  c->progress();
  return kSuccess;
}

Result net_iflush(void*, int, void**, int*, void**, void** request) {
  if (request) *request = nullptr;  // host memory: nothing to flush
  return kSuccess;
}

Result net_test(void* request, int* done, int* sizes) {
  auto* r = live<NetReq>(request, Kind::NetReq);
  if (!r || !done) return fail(kInvalidArgument, "net test: not a kinet request, or done is NULL");
  NetComm* c = r->comm;
  c->progress();
  *done = 0;
  if (!r->done) {
    if (!c->error.empty()) return fail(kRemoteError, "net test: " + c->error);
    return kSuccess;
  }
  *done = 1;
  if (sizes) *sizes = static_cast<int>(r->send ? r->size : r->head.bytes);
  for (auto it = c->q.begin(); it != c->q.end(); ++it)
    if (it->get() == r) {
      live_remove(r->handle);
      c->q.erase(it);
      break;
    }
  return kSuccess;
}

Result net_close(void* comm, Kind kind, const char* what) {
  auto* c = live<NetComm>(comm, kind);
  if (!c) return fail(kInvalidArgument, std::string("net ") + what + ": not a kinet comm of that kind");
  for (auto& r : c->q) live_remove(r->handle);  // requests still queued go with their comm
  live_remove(c->handle);
  delete c;
  return kSuccess;
}
Result net_close_send(void* c) { return net_close(c, Kind::NetSend, "closeSend"); }
Result net_close_recv(void* c) { return net_close(c, Kind::NetRecv, "closeRecv"); }

Result net_close_listen(void* listen_comm) {
  auto* l = live<NetListen>(listen_comm, Kind::NetListen);
  if (!l) return fail(kInvalidArgument, "net closeListen: not a kinet listen comm");
  live_remove(l->handle);
  delete l;
  return kSuccess;
}

Result net_finalize(void*) { return kSuccess; }

}  // namespace

const NetV11 kNetV11 = {
    "kinet",        net_init,       net_devices,    net_get_properties, net_listen,
    net_connect,    net_accept,     net_reg_mr,     net_reg_mr_dma_buf, net_dereg_mr,
    net_isend,      net_irecv,      net_iflush,     net_test,           net_close_send,
    net_close_recv, net_close_listen, nullptr,      nullptr,            nullptr,
    net_finalize,   nullptr,
};

}  // namespace kinet::nccl
