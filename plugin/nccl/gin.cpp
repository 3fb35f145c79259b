// kinet NCCL plugin — GIN of the PROXY type: NCCL's GPU code queues put /
// put+signal descriptors for NCCL's host thread, which calls iput /
// iputSignal / test here; they run on a kinet::Transport (one per
// communicator) whose target side checks every operation against the
// registered windows.
//
// Shape: listen() starts a kinet bootstrap root and returns its UniqueId as
// the handle (128 bytes = NCCL_NET_HANDLE_MAXSIZE); connect() joins rank 0's
// (every rank's handle is a root, only handles[0] is used: the others are
// cancelled there, and closeListen cancels a root connect never came for),
// exchanges the transport addresses and connects every rank to every rank,
// itself included. regMrSym exchanges the RemoteKey blobs over the bootstrap.
#include "gin.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "kinet/bootstrap.hpp"

namespace kinet::nccl {
namespace {
using Clock = std::chrono::steady_clock;

struct GinCtx {
  void* handle = nullptr;  // NCCL's name for it (common.hpp: Handles)
  uint64_t comm_id = 0;
};

struct GinListen {
  void* handle = nullptr;  // NCCL's name for it (common.hpp: Handles)
  int dev = 0;
  UniqueId id{};  // the root listen() started: cancelled by connect() when another rank's serves, else by closeListen
};

// A registered window: local memory plus every rank's key for its copy.
struct GinMr {
  uint64_t handle = 0;  // mhandle and gin_handle (common.hpp: Handles)
  char* base = nullptr;
  size_t size = 0;
  std::unique_ptr<TransportRegion> region;
  struct Remote {
    uint32_t key_id;
    uint64_t addr, length;
  };
  std::vector<Remote> remote;  // by rank
  // The first `imported` keys of `remote` are imported into *t: released
  // with the window (deregMrSym, or a regMrSym that failed half-way), else
  // each registration kept one per rank until the transport ran out.
  Transport* t = nullptr;
  size_t imported = 0;
  ~GinMr() {
    for (size_t r = 0; r < imported; ++r) {
      try {
        t->release_key(remote[r].key_id);
      } catch (const Error& e) {
        warn("GIN: releasing the key of rank %zu: %s", r, e.what());
      }
    }
  }
};

struct GinReq {
  uint64_t handle = 0;  // the request NCCL holds and the transport's cookie (common.hpp: Handles)
  bool done = false;
  Status status = Status::Ok;
  int rank = -1;
};

struct GinComm {
  void* handle = nullptr;  // NCCL's name for it (common.hpp: Handles)
  int rank = 0, nranks = 0;
  std::string me;  // "GIN rank 2/4"
  std::unique_ptr<Bootstrap> bs;
  std::mutex bs_mu;  // regMrSym is collective and may come from any user thread
  std::unique_ptr<Transport> t;
  std::vector<PeerId> peer;          // by rank
  std::vector<int> rank_of;          // by PeerId

  std::shared_mutex mr_mu;           // registration (user threads) vs. lookups (progress thread)
  std::unordered_map<uint64_t, std::shared_ptr<GinMr>> mrs;  // by handle

  std::mutex op_mu;                  // posts and poll: one thread at a time (Transport's rule)
  std::unordered_map<uint64_t, std::unique_ptr<GinReq>> reqs;  // by handle
  std::vector<std::string> failed;   // by rank: why operations to it fail; empty while healthy
  std::atomic<bool> has_error{false};

  std::shared_ptr<GinMr> find_mr(const void* h) {
    std::shared_lock lk(mr_mu);
    auto it = mrs.find(as_handle(h));
    return it == mrs.end() ? nullptr : it->second;
  }

  // Drains completions into their requests (op_mu held).
  void drain() {
    Completion c[64];
    size_t n;
    while ((n = t->poll(c, 64)) > 0) {
      for (size_t i = 0; i < n; ++i) {
        auto it = reqs.find(c[i].cookie);
        if (it == reqs.end()) continue;
        GinReq& r = *it->second;
        r.done = true;
        r.status = c[i].status;
        if (c[i].status != Status::Ok && r.rank >= 0 && failed[r.rank].empty()) {
          std::string why = t->peer_error(c[i].peer);
          failed[r.rank] = std::string(status_string(c[i].status)) + (why.empty() ? "" : " (" + why + ")");
          has_error.store(true, std::memory_order_release);
        }
      }
      if (n < 64) break;
    }
  }

  // Posts through `post` (returning Status), retrying on NoSpace while it
  // polls, within the bootstrap bound. op_mu held.
  template <class F>
  Result post(const char* what, int to, F&& fn, void** request) {
    auto req = std::make_unique<GinReq>();
    req->rank = to;
    req->handle = new_handle();
    const uint64_t cookie = req->handle;
    const auto bound = Bootstrap::default_timeout();
    const auto deadline = Clock::now() + bound;
    Status st;
    while ((st = fn(cookie)) == Status::NoSpace) {
      drain();
      if (Clock::now() > deadline)
        return fail(kSystemError, me + ": " + what + " to rank " + std::to_string(to) + ": timeout after " +
                                      std::to_string(bound.count()) + " ms waiting for room to post (" +
                                      std::to_string(t->outstanding()) + " operations outstanding)");
    }
    if (st != Status::Ok)
      return fail(st == Status::InvalidArgument ? kInvalidArgument : kRemoteError,
                  me + ": " + what + " to rank " + std::to_string(to) + ": transport refused it: " + status_string(st));
    add(std::move(req), request);
    return kSuccess;
  }

  // Keeps `req` (its handle set) until test() reports it; hands NCCL its handle. op_mu held.
  void add(std::unique_ptr<GinReq> req, void** request) {
    const uint64_t h = req->handle;
    reqs.emplace(h, std::move(req));
    *request = as_ptr(h);
  }
};

std::string range_str(uint64_t off, uint64_t size) {
  return "[" + std::to_string(off) + ", +" + std::to_string(size) + ")";
}
bool inside(uint64_t off, uint64_t size, uint64_t length) { return off <= length && size <= length - off; }

// ---- the table's entries ----

Result gin_init(void** ctx, uint64_t comm_id, Logger log) {
  set_logger(log);
  if (!ctx) return fail(kInvalidArgument, "GIN init: ctx is NULL");
  return guarded("GIN init", [&] {
    auto* c = new GinCtx;
    c->comm_id = comm_id;
    c->handle = live_add(c, Kind::GinCtx);
    *ctx = c->handle;
    return kSuccess;
  });
}

Result gin_devices(int* ndev) {
  if (!ndev) return fail(kInvalidArgument, "GIN devices: ndev is NULL");
  *ndev = 1;
  return kSuccess;
}

Result gin_get_properties(int dev, Properties* p) {
  if (!p) return fail(kInvalidArgument, "GIN getProperties: props is NULL");
  if (dev != 0) return fail(kInvalidArgument, "GIN getProperties: device " + std::to_string(dev) + " (kinet has 1)");
  fill_properties(p, kDeviceGinProxy);
  return kSuccess;
}

Result gin_listen(void* ctx, int dev, void* handle, void** listen_comm) {
  if (!live<GinCtx>(ctx, Kind::GinCtx)) return fail(kInvalidArgument, "GIN listen: not a kinet GIN context");
  if (dev != 0) return fail(kInvalidArgument, "GIN listen: device " + std::to_string(dev) + " (kinet has 1)");
  if (!handle || !listen_comm) return fail(kInvalidArgument, "GIN listen: handle or listenComm is NULL");
  return guarded("GIN listen", [&] {
    static_assert(sizeof(UniqueId) <= kHandleMaxSize);
    UniqueId id = UniqueId::create();
    std::memset(handle, 0, kHandleMaxSize);
    std::memcpy(handle, &id, sizeof id);
    auto* l = new GinListen;
    l->dev = dev;
    l->id = id;
    l->handle = live_add(l, Kind::GinListen);
    *listen_comm = l->handle;
    info("GIN listen: bootstrap root %s", id.address_string().c_str());
    return kSuccess;
  });
}

Result gin_connect(void* ctx, void* handles[], int nranks, int rank, void* listen_comm, void** coll_comm) {
  if (!live<GinCtx>(ctx, Kind::GinCtx)) return fail(kInvalidArgument, "GIN connect: not a kinet GIN context");
  if (!live<GinListen>(listen_comm, Kind::GinListen))
    return fail(kInvalidArgument, "GIN connect: not a kinet GIN listen comm");
  if (!handles || !coll_comm || nranks < 1 || rank < 0 || rank >= nranks || !handles[0])
    return fail(kInvalidArgument, "GIN connect: rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
                                      (handles && handles[0] ? "" : ", handles NULL") +
                                      (coll_comm ? "" : ", collComm NULL"));
  return guarded("GIN connect", [&] {
    UniqueId id;
    std::memcpy(&id, handles[0], sizeof id);
    id.validate();
    // Only rank 0's root is used: this rank's own (if it is another) would
    // hold a thread and a socket until exit.
    auto* l = live<GinListen>(listen_comm, Kind::GinListen);
    if (std::memcmp(&l->id, &id, sizeof id) != 0 && UniqueId::cancel(l->id))
      info("GIN connect: rank %d stopped its unused bootstrap root %s", rank, l->id.address_string().c_str());
    auto c = std::make_unique<GinComm>();
    c->rank = rank;
    c->nranks = nranks;
    c->me = "GIN rank " + std::to_string(rank) + "/" + std::to_string(nranks);
    c->bs = Bootstrap::init(id, rank, nranks);
    // Every rank reports whether its transport opened, so one failure fails
    // all ranks at once with its reason instead of leaving them to time out.
    std::vector<uint8_t> mine;
    try {
      c->t = open_transport("nccl " + c->me);
      auto a = c->t->address();
      mine.push_back(1);
      mine.insert(mine.end(), a.begin(), a.end());
    } catch (const Error& e) {
      std::string why = e.what();
      mine.push_back(0);
      mine.insert(mine.end(), why.begin(), why.end());
    }
    auto all = c->bs->allgather(mine.data(), mine.size());
    for (int r = 0; r < nranks; ++r)
      if (all[r].empty() || all[r][0] != 1)
        throw Error(ErrorCode::NotSupported,
                    c->me + ": rank " + std::to_string(r) + " has no transport: " +
                        (all[r].empty() ? std::string("(empty answer)") : std::string(all[r].begin() + 1, all[r].end())));
    c->peer.resize(nranks);
    for (int r = 0; r < nranks; ++r) {
      std::vector<uint8_t> addr(all[r].begin() + 1, all[r].end());
      c->peer[r] = c->t->connect(addr, "rank " + std::to_string(r));
      if (c->rank_of.size() <= c->peer[r]) c->rank_of.resize(c->peer[r] + 1, -1);
      c->rank_of[c->peer[r]] = r;
      info("%s: rank %d served by kinet transport %s (%s)", c->me.c_str(), r, c->t->provider(),
           c->t->describe().c_str());
    }
    c->failed.assign(nranks, {});
    c->bs->barrier();  // every side connected before operations flow
    c->handle = live_add(c.get(), Kind::GinComm);
    *coll_comm = c->handle;
    (void)c.release();  // owned through its handle now
    return kSuccess;
  });
}

Result gin_create_context(void*, int, int, void**, DeviceHandle**) {
  return fail(kInvalidUsage, "GIN createContext: kinet's GIN is of the PROXY type (no device context)");
}

Result gin_reg_mr_sym(void* coll_comm, void* data, size_t size, int type, uint64_t, void** mhandle,
                      void** gin_handle) {
  auto* c = live<GinComm>(coll_comm, Kind::GinComm);
  if (!c) return fail(kInvalidArgument, "GIN regMrSym: not a kinet GIN comm");
  if (!mhandle) return fail(kInvalidArgument, c->me + ": regMrSym: mhandle is NULL");
  return guarded("GIN regMrSym", [&] {
    auto mr = std::make_shared<GinMr>();
    mr->base = static_cast<char*>(data);
    mr->size = size;
    // Register first, but take part in the exchange either way: a rank that
    // failed tells the others why instead of leaving them to time out.
    std::vector<uint8_t> mine;
    try {
      if (type != kPtrHost && type != kPtrCuda)
        throw Error(ErrorCode::InvalidArgument, "memory type " + std::to_string(type) + " (NCCL_PTR_HOST or _CUDA)");
      mr->region = c->t->register_memory(data, size, kAccessAll, type == kPtrCuda ? MemoryKind::Gpu : MemoryKind::Host);
      auto k = mr->region->remote_key().serialize();
      mine.push_back(1);
      mine.insert(mine.end(), k.begin(), k.end());
    } catch (const Error& e) {
      std::string why = e.what();
      mine.push_back(0);
      mine.insert(mine.end(), why.begin(), why.end());
    }
    std::vector<std::vector<uint8_t>> all;
    {
      std::lock_guard lk(c->bs_mu);
      all = c->bs->allgather(mine.data(), mine.size());
    }
    for (int r = 0; r < c->nranks; ++r)
      if (all[r].empty() || all[r][0] != 1)
        throw Error(ErrorCode::InvalidArgument,
                    c->me + ": regMrSym of " + std::to_string(size) + " bytes at " + std::to_string(uintptr_t(data)) +
                        ": rank " + std::to_string(r) + " could not register: " +
                        (all[r].empty() ? std::string("(empty answer)") : std::string(all[r].begin() + 1, all[r].end())));
    mr->remote.resize(c->nranks);
    mr->t = c->t.get();
    for (int r = 0; r < c->nranks; ++r) {
      RemoteKey k = RemoteKey::deserialize(all[r].data() + 1, all[r].size() - 1);
      mr->remote[r] = {c->t->import_key(c->peer[r], k), k.addr, k.length};
      mr->imported = r + 1;
    }
    mr->handle = new_handle();
    {
      std::unique_lock lk(c->mr_mu);
      c->mrs.emplace(mr->handle, mr);
    }
    *mhandle = as_ptr(mr->handle);
    if (gin_handle) *gin_handle = as_ptr(mr->handle);  // the same value travels through NCCL's 63-bit descriptor fields
    return kSuccess;
  });
}

Result gin_reg_mr_sym_dma_buf(void* coll_comm, void* data, size_t size, int type, uint64_t, int, uint64_t flags,
                              void** mhandle, void** gin_handle) {
  // The transport reaches GPU memory through CUDA copies, not the dma-buf.
  return gin_reg_mr_sym(coll_comm, data, size, type, flags, mhandle, gin_handle);
}

Result gin_dereg_mr_sym(void* coll_comm, void* mhandle) {
  auto* c = live<GinComm>(coll_comm, Kind::GinComm);
  if (!c) return fail(kInvalidArgument, "GIN deregMrSym: not a kinet GIN comm");
  std::shared_ptr<GinMr> mr;
  {
    std::unique_lock lk(c->mr_mu);
    auto it = c->mrs.find(as_handle(mhandle));
    if (it == c->mrs.end()) return fail(kInvalidArgument, c->me + ": deregMrSym: unknown memory handle");
    mr = std::move(it->second);
    c->mrs.erase(it);
  }
  mr->region.reset();  // no peer's operation touches the memory after this
  return kSuccess;
}

Result gin_destroy_context(void*) { return kSuccess; }

Result gin_close_coll(void* coll_comm) {
  auto* c = live<GinComm>(coll_comm, Kind::GinComm);
  if (!c) return fail(kInvalidArgument, "GIN closeColl: not a kinet GIN comm");
  return guarded("GIN closeColl", [&] {
    {
      std::lock_guard lk(c->op_mu);
      // Finish what is in flight (the transport drops it otherwise), bounded.
      const auto bound = Bootstrap::default_timeout();
      const auto deadline = Clock::now() + bound;
      while (c->t->outstanding() > 0 && Clock::now() < deadline) c->drain();
      if (c->t->outstanding() > 0)
        warn("%s: closeColl: %zu operations still outstanding after %lld ms; dropped", c->me.c_str(),
             c->t->outstanding(), static_cast<long long>(bound.count()));
    }
    live_remove(c->handle);
    delete c;
    return kSuccess;
  });
}

Result gin_close_listen(void* listen_comm) {
  auto* l = live<GinListen>(listen_comm, Kind::GinListen);
  if (!l) return fail(kInvalidArgument, "GIN closeListen: not a kinet GIN listen comm");
  // NCCL closes without connect when init fails between the two: the root
  // listen() started would keep its thread and listening socket until exit.
  // After connect this finds nothing (stopped there) or a finished root.
  if (UniqueId::cancel(l->id)) info("GIN closeListen: stopped bootstrap root %s", l->id.address_string().c_str());
  live_remove(l->handle);
  delete l;
  return kSuccess;
}

// The checks iput and iputSignal share; on success fills src / raddr.
Result check_put(GinComm* c, const char* what, uint64_t src_off, void* src_mh, size_t size, uint64_t dst_off,
                 void* dst_mh, uint32_t rank, const char** src, uint64_t* raddr, uint32_t* key_id) {
  if (rank >= static_cast<uint32_t>(c->nranks))
    return fail(kInvalidArgument, c->me + ": " + what + ": rank " + std::to_string(rank) + " (comm has " +
                                      std::to_string(c->nranks) + ")");
  if (!c->failed[rank].empty())
    return fail(kRemoteError, c->me + ": " + what + " to rank " + std::to_string(rank) +
                                  ": an earlier operation to it failed: " + c->failed[rank]);
  if (size == 0) return kSuccess;
  auto s = c->find_mr(src_mh);
  auto d = c->find_mr(dst_mh);
  if (!s || !d)
    return fail(kInvalidArgument, c->me + ": " + what + " to rank " + std::to_string(rank) + ": unknown " +
                                      (!s ? "source" : "destination") + " memory handle");
  if (!inside(src_off, size, s->size))
    return fail(kInvalidArgument, c->me + ": " + what + ": source " + range_str(src_off, size) +
                                      " outside its window of " + std::to_string(s->size) + " bytes");
  const auto& rw = d->remote[rank];
  if (!inside(dst_off, size, rw.length))
    return fail(kInvalidArgument, c->me + ": " + what + " to rank " + std::to_string(rank) + ": destination " +
                                      range_str(dst_off, size) + " outside its window of " +
                                      std::to_string(rw.length) + " bytes");
  *src = s->base + src_off;
  *raddr = rw.addr + dst_off;
  *key_id = rw.key_id;
  return kSuccess;
}

Result gin_iput(void* coll_comm, uint64_t src_off, void* src_mh, size_t size, uint64_t dst_off, void* dst_mh,
                uint32_t rank, void** request) {
  auto* c = live<GinComm>(coll_comm, Kind::GinComm);
  if (!c) return fail(kInvalidArgument, "GIN iput: not a kinet GIN comm");
  if (!request) return fail(kInvalidArgument, c->me + ": iput: request is NULL");
  return guarded("GIN iput", [&] {
    std::lock_guard lk(c->op_mu);
    const char* src = nullptr;
    uint64_t raddr = 0;
    uint32_t key = 0;
    if (Result r = check_put(c, "iput", src_off, src_mh, size, dst_off, dst_mh, rank, &src, &raddr, &key)) return r;
    if (size == 0) {  // nothing to move: done at once
      auto req = std::make_unique<GinReq>();
      req->handle = new_handle();
      req->done = true;
      req->rank = static_cast<int>(rank);
      c->add(std::move(req), request);
      return kSuccess;
    }
    return c->post("iput", static_cast<int>(rank),
                   [&](uint64_t ck) { return c->t->put(c->peer[rank], src, size, key, raddr, ck); }, request);
  });
}

Result gin_iput_signal(void* coll_comm, uint64_t src_off, void* src_mh, size_t size, uint64_t dst_off,
                       void* dst_mh, uint32_t rank, uint64_t signal_off, void* signal_mh, uint64_t signal_value,
                       uint32_t signal_op, void** request) {
  auto* c = live<GinComm>(coll_comm, Kind::GinComm);
  if (!c) return fail(kInvalidArgument, "GIN iputSignal: not a kinet GIN comm");
  if (!request) return fail(kInvalidArgument, c->me + ": iputSignal: request is NULL");
  return guarded("GIN iputSignal", [&] {
    std::lock_guard lk(c->op_mu);
    const char* src = nullptr;
    uint64_t raddr = 0;
    uint32_t key = 0;
    if (Result r = check_put(c, "iputSignal", src_off, src_mh, size, dst_off, dst_mh, rank, &src, &raddr, &key))
      return r;
    uint64_t value;
    if (signal_op == kSignalOpInc) value = 1;
    else if (signal_op == kSignalOpAdd) value = signal_value;
    else
      return fail(kInvalidArgument, c->me + ": iputSignal: signal op " + std::to_string(signal_op) +
                                        " (NCCL_NET_SIGNAL_OP_INC 1 or _ADD 2)");
    auto sig = c->find_mr(signal_mh);
    if (!sig) return fail(kInvalidArgument, c->me + ": iputSignal to rank " + std::to_string(rank) +
                                                ": unknown signal memory handle");
    const auto& sw = sig->remote[rank];
    if (signal_off % 8 != 0 || !inside(signal_off, 8, sw.length))
      return fail(kInvalidArgument, c->me + ": iputSignal to rank " + std::to_string(rank) + ": signal offset " +
                                        std::to_string(signal_off) + " not an aligned 8-byte word inside its window of " +
                                        std::to_string(sw.length) + " bytes");
    const PeerId p = c->peer[rank];
    if (size == 0)
      return c->post("signal", static_cast<int>(rank),
                     [&](uint64_t ck) { return c->t->signal(p, sw.key_id, sw.addr + signal_off, SignalOp::Add, value, ck); },
                     request);
    return c->post("iputSignal", static_cast<int>(rank),
                   [&](uint64_t ck) {
                     return c->t->put_signal(p, src, size, key, raddr, sw.key_id, sw.addr + signal_off, SignalOp::Add,
                                             value, ck);
                   },
                   request);
  });
}

Result gin_test(void* coll_comm, void* request, int* done) {
  auto* c = live<GinComm>(coll_comm, Kind::GinComm);
  if (!c) return fail(kInvalidArgument, "GIN test: not a kinet GIN comm");
  if (!done) return fail(kInvalidArgument, c->me + ": test: done is NULL");
  return guarded("GIN test", [&] {
    std::lock_guard lk(c->op_mu);
    auto it = c->reqs.find(as_handle(request));
    if (it == c->reqs.end()) return fail(kInvalidArgument, c->me + ": test: unknown request");
    if (!it->second->done) c->drain();
    GinReq& r = *it->second;
    *done = r.done ? 1 : 0;
    if (!r.done) return kSuccess;
    const Status st = r.status;
    const int to = r.rank;
    c->reqs.erase(it);
    if (st != Status::Ok)
      return fail(kRemoteError, c->me + ": operation to rank " + std::to_string(to) + " failed: " +
                                    (to >= 0 ? c->failed[to] : std::string(status_string(st))));
    return kSuccess;
  });
}

Result gin_progress(void* coll_comm) {
  auto* c = live<GinComm>(coll_comm, Kind::GinComm);
  if (!c) return fail(kInvalidArgument, "GIN ginProgress: not a kinet GIN comm");
  return guarded("GIN ginProgress", [&] {
    std::lock_guard lk(c->op_mu);
    c->drain();
    return kSuccess;
  });
}

// NCCL passes a context from createContext here, which PROXY mode never
// makes; a kinet comm is answered too (tests, and any caller that has one).
Result gin_query_last_error(void* gin_ctx, bool* has_error) {
  if (!has_error) return fail(kInvalidArgument, "GIN queryLastError: hasError is NULL");
  auto* c = live<GinComm>(gin_ctx, Kind::GinComm);
  *has_error = c && c->has_error.load(std::memory_order_acquire);
  return kSuccess;
}

Result gin_finalize(void* ctx) {
  auto* c = live<GinCtx>(ctx, Kind::GinCtx);
  if (!c) return fail(kInvalidArgument, "GIN finalize: not a kinet GIN context");
  live_remove(c->handle);
  delete c;
  return kSuccess;
}

}  // namespace

const GinV11 kGinV11 = {
    "kinet",       gin_init,          gin_devices,         gin_get_properties, gin_listen,
    gin_connect,   gin_create_context, gin_reg_mr_sym,     gin_reg_mr_sym_dma_buf, gin_dereg_mr_sym,
    gin_destroy_context, gin_close_coll, gin_close_listen, gin_iput,           gin_iput_signal,
    gin_test,      gin_progress,      gin_query_last_error, gin_finalize,
};

}  // namespace kinet::nccl
