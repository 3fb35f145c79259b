// kinet — the communicator's host side: transport, proxy, path choice per
// peer, the gdaki QPs, windows, the peer monitor.
#include "kinet/comm.hpp"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/collective.hpp"
#include "comm/counters.hpp"
#include "comm/gdaki.hpp"
#include "core/cuda_ipc.hpp"
#include "core/cuda_shim.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/thread_name.hpp"
#include "kinet/proxy.hpp"
#include "kinet/transport.hpp"

namespace kinet {
namespace {

using dev::CommPath;

// Who a rank is, exchanged at creation to choose paths.
struct NodeInfo {
  char host[64];
  char boot_id[40];
  uint32_t gpu;  // windows in GPU memory
  uint32_t nic;  // 1: a NIC for the gdaki path is open
  char nic_text[160];  // nic: its name; else why there is none (empty: not looked for)
};

NodeInfo node_info(bool gpu) {
  NodeInfo n{};
  gethostname(n.host, sizeof n.host - 1);
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  std::strncpy(n.boot_id, id.c_str(), sizeof n.boot_id - 1);
  n.gpu = gpu ? 1 : 0;
  return n;
}

template <class T> T* alloc_array(size_t n) {
  return static_cast<T*>(cuda::alloc_pinned(sizeof(T) * (n ? n : 1)));  // zeroed; mapped into GPUs
}

// Kernels read the per-peer tables on every operation: with the GPU, a copy
// in GPU memory (the tables do not change once built), else the host table.
void* device_copy(bool gpu, const void* host, size_t bytes) {
  if (!gpu) return const_cast<void*>(host);
  void* d = cuda::alloc_device(bytes);
  cuda::copy(d, host, bytes);
  return d;
}

// One rank's part of a window, as exchanged.
struct WindowBlob {
  uint64_t addr = 0, bytes = 0;
  uint32_t gpu = 0, has_ipc = 0;
  uint32_t qp_rkey = 0, pad = 0;  // gdaki: the part's MR rkey (host order)
  cuda_ipc::Exported ipc{};
  std::vector<uint8_t> key;  // RemoteKey::serialize()
};

std::vector<uint8_t> pack(const WindowBlob& b) {
  std::vector<uint8_t> v(sizeof(uint64_t) * 2 + 16 + sizeof(cuda_ipc::Exported) + b.key.size());
  uint8_t* p = v.data();
  std::memcpy(p, &b.addr, 8), p += 8;
  std::memcpy(p, &b.bytes, 8), p += 8;
  std::memcpy(p, &b.gpu, 4), p += 4;
  std::memcpy(p, &b.has_ipc, 4), p += 4;
  std::memcpy(p, &b.qp_rkey, 4), p += 8;
  std::memcpy(p, &b.ipc, sizeof b.ipc), p += sizeof b.ipc;
  std::memcpy(p, b.key.data(), b.key.size());
  return v;
}

WindowBlob unpack(const std::vector<uint8_t>& v, int rank) {
  constexpr size_t fixed = 32 + sizeof(cuda_ipc::Exported);
  if (v.size() < fixed)
    throw Error(ErrorCode::InvalidArgument, "comm: window blob of rank " + std::to_string(rank) + " is " +
                                                std::to_string(v.size()) + " bytes, less than " + std::to_string(fixed));
  WindowBlob b;
  const uint8_t* p = v.data();
  std::memcpy(&b.addr, p, 8), p += 8;
  std::memcpy(&b.bytes, p, 8), p += 8;
  std::memcpy(&b.gpu, p, 4), p += 4;
  std::memcpy(&b.has_ipc, p, 4), p += 4;
  std::memcpy(&b.qp_rkey, p, 4), p += 8;
  std::memcpy(&b.ipc, p, sizeof b.ipc), p += sizeof b.ipc;
  b.key.assign(p, v.data() + v.size());
  return b;
}

const char* op_name(uint32_t op) {
  static const char* const names[] = {"none",         "put",          "put_value",    "get",         "put_signal",
                                      "signal",       "wait_signal",  "fetch_add",    "compare_swap", "quiet",
                                      "fence",        "barrier",      "wait_counter", "read_counter", "reset_counter"};
  return op < sizeof names / sizeof *names ? names[op] : "?";
}

}  // namespace

struct CommWindow::Impl {
  bool owned = false, gpu = false;
  void* local = nullptr;
  std::unique_ptr<ProxyRegion> region;
  std::unique_ptr<MemoryRegion> mr;                // gdaki: the part registered on the Comm's PD
  dev::CommWindowPeer* peers = nullptr;            // pinned
  void* dev_peers = nullptr;                       // GPU copy of peers (GPU windows), else null
  std::vector<std::pair<void*, uint64_t>> mapped;  // IPC mappings to close
  std::vector<WindowBlob> blobs;                   // every rank's part
  uint64_t* counters = nullptr;                    // WindowHandle::counters
  bool counters_on_gpu = false;
  ~Impl() {
    for (auto& [p, off] : mapped) cuda_ipc::close(p, off);
    region.reset();
    mr.reset();  // the Comm destroyed its QPs first: nothing moves through the MR any more
    if (owned) {
      if (gpu) cuda_ipc::free(local);
      else cuda::free_pinned(local);
    }
    cuda::free_pinned(peers);
    cuda::free_device(dev_peers);
    if (counters_on_gpu) cuda::free_device(counters);
    else cuda::free_pinned(counters);
  }
};

struct Comm::Impl {
  Bootstrap* bs = nullptr;
  int rank = 0, size = 0;
  bool gpu = false;
  std::string mode;  // auto, proxy, p2p, gdaki
  uint64_t timeout_ns = 0;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Proxy> proxy;
  std::vector<PeerId> tp_peer;          // rank -> transport peer (own rank: unused)
  std::vector<ProxyChannel*> channels;  // rank -> channel (proxy peers only)
  std::vector<uint32_t> path;           // rank -> CommPath
  std::vector<std::string> reason;
  std::vector<NodeInfo> nodes;
  dev::CommPeer* peers = nullptr;       // pinned
  void* dev_peers = nullptr;            // GPU copy of peers (with the GPU), else null
  dev::CommState* state = nullptr;      // pinned
  uint32_t* peer_down = nullptr;        // pinned
  uint8_t* scratch = nullptr;           // put_value sources and atomic results of proxy peers
  bool scratch_on_gpu = false;          // GPU memory (kernels post) or pinned host memory (host threads)
  std::unique_ptr<ProxyRegion> scratch_region;
  comm_gdaki::Peers gd;  // the gdaki path: NIC, PD, a QP per gdaki peer, the atomics' scratch
  uint32_t counters = 0;            // CommConfig::counters
  uint8_t* ctr_mem = nullptr;       // the counter tracks of proxy and gdaki peers (CommPeer::ctr), once needed
  bool ctr_on_gpu = false;
  std::vector<std::unique_ptr<CommWindow>> windows;  // [0]: the barrier window
  // Monitor: marks peers the transport lost, so that device waits end.
  std::thread monitor;
  std::chrono::milliseconds monitor_period{5};
  mutable std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::vector<std::string> lost;  // under mu

  // Teardown in dependency order (also after a constructor that threw).
  ~Impl() {
    if (monitor.joinable()) {
      {
        std::lock_guard<std::mutex> lk(mu);
        stopping = true;
      }
      cv.notify_all();
      monitor.join();
    }
    if (proxy) proxy->stop();  // posters see WrFlushed for what did not complete
    gd.close_qps();            // flushed and gone (bounded, also with a lost peer) before their MRs and memory
    windows.clear();           // regions before the proxy, memory after its threads stopped
    scratch_region.reset();
    proxy.reset();
    transport.reset();
    if (scratch_on_gpu) cuda::free_device(scratch);
    else cuda::free_pinned(scratch);
    if (ctr_on_gpu) cuda::free_device(ctr_mem);
    else cuda::free_pinned(ctr_mem);
    cuda::free_pinned(peers);
    cuda::free_device(dev_peers);
    cuda::free_pinned(state);
    cuda::free_pinned(peer_down);
  }
  void setup_proxy_peers(const CommConfig& cfg);
  void import_keys(CommWindow& w);
  void ensure_counter_tracks();
};

CommWindow::~CommWindow() = default;

void CommWindow::publish_peers(int size) {
  impl_->dev_peers = device_copy(true, impl_->peers, sizeof(dev::CommWindowPeer) * size);
  h_.peers = static_cast<const dev::CommWindowPeer*>(impl_->dev_peers);
}

Comm::Comm(Bootstrap& bs, const CommConfig& cfg) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.bs = &bs;
  m.rank = bs.rank();
  m.size = bs.size();
  const std::string who = "comm rank " + std::to_string(m.rank);
  // Every exchange below carries each rank's verdict on what it did since
  // the previous one (collective.hpp): a rank whose own part failed (a bad
  // CommConfig field, a transport that can't start, ...) still takes part,
  // and every rank throws, so that none is left one collective ahead.
  std::exception_ptr failed;
  std::string no_gpu;
  NodeInfo me{};
  try {
    m.mode = cfg.path.empty() ? env::get_str("KINET_COMM_PATH", "auto") : cfg.path;
    if (m.mode != "auto" && m.mode != "proxy" && m.mode != "p2p" && m.mode != "gdaki")
      throw Error(ErrorCode::InvalidArgument, who + ": path \"" + m.mode + "\" is not auto, proxy, p2p or gdaki");
    if (cfg.slots < 2 || cfg.slots > (1u << 20) || (cfg.slots & (cfg.slots - 1)))
      throw Error(ErrorCode::InvalidArgument, who + ": slots " + std::to_string(cfg.slots) +
                                                  " is not a power of two in 2..2^20");
    const bool have_gpu = cuda_ipc::available(&no_gpu) && cuda::available();
    if (cfg.memory == CommConfig::Memory::Gpu && !have_gpu)
      throw Error(ErrorCode::NotSupported, who + ": GPU memory asked for, but " + no_gpu);
    m.gpu = cfg.memory == CommConfig::Memory::Gpu || (cfg.memory == CommConfig::Memory::Auto && have_gpu);
    if (cfg.counters > CommConfig::kMaxCounters)
      throw Error(ErrorCode::InvalidArgument, who + ": counters " + std::to_string(cfg.counters) + " is above " +
                                                  std::to_string(CommConfig::kMaxCounters));
    m.counters = cfg.counters;
    const uint64_t ms = cfg.timeout.count() > 0 ? static_cast<uint64_t>(cfg.timeout.count()) : default_timeout_ms();
    m.timeout_ns = std::min<uint64_t>(ms, env::kMaxTimeoutMs) * 1000000ull;

    // Who is where, and who has a NIC for gdaki.
    me = node_info(m.gpu);
    std::string text;
    m.gd.device = comm_gdaki::open_nic(m.mode, cfg, &text);
    me.nic = m.gd.device ? 1 : 0;
    std::strncpy(me.nic_text, text.c_str(), sizeof me.nic_text - 1);
  } catch (...) {
    failed = std::current_exception();
  }
  for (auto& b : comm_coll::allgather(bs, who, failed, &me, sizeof me)) {
    if (b.size() != sizeof(NodeInfo))
      throw Error(ErrorCode::InvalidArgument, who + ": a peer's node info has " + std::to_string(b.size()) + " bytes");
    NodeInfo n;
    std::memcpy(&n, b.data(), sizeof n);
    n.host[sizeof n.host - 1] = 0;
    n.boot_id[sizeof n.boot_id - 1] = 0;
    n.nic_text[sizeof n.nic_text - 1] = 0;
    m.nodes.push_back(n);
  }

  // The transport, connected to every other rank.
  std::vector<uint8_t> addr;
  try {
    TransportOptions to;
    to.provider = cfg.transport;
    to.name = "rank " + std::to_string(m.rank);
    m.transport = Transport::open(to);
    addr = m.transport->address();
  } catch (...) {
    failed = std::current_exception();
  }
  const auto addrs = comm_coll::allgather(bs, who, failed, addr.data(), addr.size());
  try {
    m.tp_peer.assign(m.size, 0);
    for (int r = 0; r < m.size; ++r)
      if (r != m.rank) m.tp_peer[r] = m.transport->connect(addrs[r], "rank " + std::to_string(r));
    // Paths, first guess: p2p where the memory could be mapped; the barrier
    // window's mapping below confirms it.
    m.path.assign(m.size, uint32_t(CommPath::Proxy));
    m.reason.assign(m.size, "");
    for (int r = 0; r < m.size; ++r) {
      if (r == m.rank) {
        m.path[r] = uint32_t(CommPath::Self);
        m.reason[r] = "this rank: local copies";
        continue;
      }
      const NodeInfo& n = m.nodes[r];
      std::string why;
      if (m.mode == "proxy") why = "KINET_COMM_PATH/CommConfig::path is proxy";
      else if (m.mode == "gdaki") why = "KINET_COMM_PATH/CommConfig::path is gdaki";
      else if (!m.gpu) why = "windows in host memory (no GPU here" + (no_gpu.empty() ? std::string() : ": " + no_gpu) + "); CUDA IPC maps GPU memory only";
      else if (!n.gpu) why = "rank " + std::to_string(r) + " keeps its windows in host memory";
      else if (std::strcmp(n.host, me.host) != 0 || std::strcmp(n.boot_id, me.boot_id) != 0)
        why = std::string("another host (") + n.host + ")";
      if (why.empty()) {
        m.path[r] = uint32_t(CommPath::P2p);
        m.reason[r] = "same host, GPU memory mapped through CUDA IPC";
        continue;
      }
      if (m.mode == "p2p")
        throw Error(ErrorCode::NotSupported, who + ": path p2p to rank " + std::to_string(r) + " impossible: " + why);
      m.reason[r] = why;
      if (m.mode == "proxy") continue;
      // Gdaki when both ends opened a NIC (the same test on both: symmetric).
      std::string no_qp;
      if (!me.nic) no_qp = me.nic_text;
      else if (!n.nic) no_qp = "rank " + std::to_string(r) + ": " + n.nic_text;
      if (no_qp.empty()) {
        m.path[r] = uint32_t(CommPath::Gdaki);
        m.reason[r] = why + "; RC QPs on " + m.gd.device->name() + " (" + m.gd.device->attr().provider + ") to " +
                      n.nic_text;
      } else if (m.mode == "gdaki") {
        throw Error(ErrorCode::NotSupported, who + ": path gdaki to rank " + std::to_string(r) + " impossible: " + no_qp);
      } else {
        m.reason[r] = why + "; no gdaki: " + no_qp;
      }
    }

    m.proxy = std::make_unique<Proxy>(*m.transport);
    m.peers = alloc_array<dev::CommPeer>(m.size);
    m.state = alloc_array<dev::CommState>(1);
    m.state->err_peer = -1;
    m.peer_down = alloc_array<uint32_t>(m.size);
    m.channels.assign(m.size, nullptr);
  } catch (...) {
    failed = std::current_exception();
  }
  comm_coll::barrier(bs, who, failed);  // everyone connected to everyone before operations flow

  // The barrier window: one arrival counter per rank. Maps p2p peers (and
  // demotes those that fail to the proxy), then sets up the proxy peers.
  m.lost.assign(m.size, "");
  {
    // The gdaki exchanges, on every rank where any two ranks opened a NIC
    // (the same test on every rank: the node infos are everyone's).
    int nics = 0;
    for (const NodeInfo& n : m.nodes) nics += n.nic != 0;
    m.gd.connect(bs, m.path, cfg, m.gpu, m.timeout_ns, m.peers, nics >= 2);
  }
  add_window(nullptr, static_cast<size_t>(m.size) * 8, true, 0);
  m.setup_proxy_peers(cfg);
  m.import_keys(*m.windows[0]);
  if (m.gpu) {
    m.dev_peers = device_copy(true, m.peers, sizeof(dev::CommPeer) * m.size);
    m.windows[0]->publish_peers(m.size);
  }
  m.monitor_period = cfg.monitor_period.count() > 0 ? cfg.monitor_period : std::chrono::milliseconds(5);

  m.monitor = named_thread("kinet-comm-mon", [&i = m] {
    std::unique_lock<std::mutex> lk(i.mu);
    while (!i.stopping) {
      for (int r = 0; r < i.size; ++r) {
        if (r == i.rank || !i.lost[r].empty()) continue;
        std::string e = i.transport->peer_error(i.tp_peer[r]);
        if (e.empty()) continue;
        i.lost[r] = e;
        KINET_LOG(Warn, "comm rank %d: rank %d lost: %s", i.rank, r, e.c_str());
        store_release<Scope::System>(&i.peer_down[r], 1u);
      }
      i.cv.wait_for(lk, i.monitor_period);
    }
  });
}

Comm::~Comm() = default;

void Comm::Impl::setup_proxy_peers(const CommConfig& cfg) {
  size_t nproxy = 0;
  for (int r = 0; r < size; ++r) nproxy += path[r] == uint32_t(CommPath::Proxy);
  const size_t per_peer = size_t{cfg.slots} * (sizeof(uint64_t) + sizeof(dev::CommAtomicSlot));
  if (nproxy) {
    // Kernels claim atomic slots with system-scope CAS: in GPU memory, since
    // GPU atomics on pinned host memory are not atomic over most PCIe links
    // (the H200 run timed out claiming a slot there). The proxy writes results
    // into it through the transport's GPU-region copies.
    scratch_on_gpu = gpu;
    scratch = static_cast<uint8_t*>(gpu ? cuda::alloc_device(per_peer * nproxy) : cuda::alloc_pinned(per_peer * nproxy));
    scratch_region = proxy->register_memory(scratch, per_peer * nproxy, kLocalWrite,
                                            gpu ? MemoryKind::Gpu : MemoryKind::Host);
  }
  ProxyChannelConfig cc;
  cc.slots = cfg.slots;
  cc.posters = gpu ? Posters::Gpu : Posters::Host;
  cc.timeout = std::chrono::milliseconds(timeout_ns / 1000000);
  size_t k = 0;
  for (int r = 0; r < size; ++r) {
    dev::CommPeer& p = peers[r];
    p.path = path[r];
    if (path[r] != uint32_t(CommPath::Proxy)) continue;
    channels[r] = &proxy->channel(tp_peer[r], cc);
    p.ch = channels[r]->handle();
    p.scratch_lkey = scratch_region->lkey().be;
    uint8_t* base = scratch + per_peer * k++;
    p.put_scratch = reinterpret_cast<uint64_t*>(base);
    p.atomic_scratch = reinterpret_cast<dev::CommAtomicSlot*>(base + size_t{cfg.slots} * sizeof(uint64_t));
  }
}

void Comm::Impl::import_keys(CommWindow& w) {
  for (int r = 0; r < size; ++r) {
    if (path[r] == uint32_t(CommPath::Gdaki))
      w.impl_->peers[r].rkey = kinet::detail::bswap32_constexpr(w.impl_->blobs[r].qp_rkey);
    if (path[r] != uint32_t(CommPath::Proxy)) continue;
    const auto& key = w.impl_->blobs[r].key;
    w.impl_->peers[r].rkey = channels[r]->import_key(RemoteKey::deserialize(key.data(), key.size())).be;
  }
}

// The counters' bookkeeping, with the first window that has counters.
void Comm::Impl::ensure_counter_tracks() {
  if (ctr_mem) return;
  ctr_on_gpu = gpu;
  ctr_mem = comm_counters::make_tracks(peers, size, gpu, dev_peers);
}

CommWindow& Comm::add_window(void* ptr, size_t bytes, bool owned, uint32_t counters) {
  Impl& m = *impl_;
  const std::string who = "comm rank " + std::to_string(m.rank) + ": window " + std::to_string(m.windows.size());
  // A rank whose own part fails here (a bad argument, an allocation or a
  // registration that failed) still takes part in the exchange, its failure
  // carried in it, and every rank throws (collective.hpp): otherwise it
  // would skip the allgather and be one collective behind the others, whose
  // next barrier would take this call's blobs.
  std::exception_ptr failed;
  auto w = std::unique_ptr<CommWindow>(new CommWindow);
  w->impl_ = std::make_unique<CommWindow::Impl>();
  CommWindow::Impl& wi = *w->impl_;
  WindowBlob mine;
  std::string no_export;
  std::vector<uint8_t> packed;
  try {
    if (bytes == 0) throw Error(ErrorCode::InvalidArgument, who + ": 0 bytes");
    if (!owned && !ptr) throw Error(ErrorCode::InvalidArgument, who + ": null pointer");
    if (counters == kFromConfig) counters = m.counters;
    if (counters > CommConfig::kMaxCounters)
      throw Error(ErrorCode::InvalidArgument, who + ": counters " + std::to_string(counters) + " is above " +
                                                  std::to_string(CommConfig::kMaxCounters));
    wi.owned = owned;
    wi.gpu = owned ? m.gpu : cuda::pointer_kind(ptr) == MemoryKind::Gpu;
    wi.local = owned ? (wi.gpu ? cuda_ipc::alloc(bytes) : cuda::alloc_pinned(bytes)) : ptr;
    wi.peers = alloc_array<dev::CommWindowPeer>(m.size);
    w->gpu_ = wi.gpu;
    w->h_.id = static_cast<uint32_t>(m.windows.size());
    w->h_.local = static_cast<uint8_t*>(wi.local);
    w->h_.bytes = bytes;
    w->h_.peers = wi.peers;
    if (counters) {  // {value, failure} pairs, zeroed
      wi.counters_on_gpu = m.gpu;
      const size_t cb = size_t{counters} * 16;
      wi.counters = static_cast<uint64_t*>(m.gpu ? cuda::alloc_device(cb) : cuda::alloc_pinned(cb));
      w->h_.counters = wi.counters;
      w->h_.ncounters = counters;
      m.ensure_counter_tracks();
    }
    wi.region = m.proxy->register_memory(wi.local, bytes, kAccessAll, wi.gpu ? MemoryKind::Gpu : MemoryKind::Host);
    w->h_.lkey = wi.region->lkey().be;
    if (m.gd.pd) {
      wi.mr = m.gd.pd->reg_mr(wi.local, bytes, kAccessAll);
      w->h_.qp_lkey = wi.mr->lkey().be;
    }

    mine.addr = reinterpret_cast<uint64_t>(wi.local);
    mine.bytes = bytes;
    mine.gpu = wi.gpu;
    mine.key = wi.region->remote_key().serialize();
    if (wi.mr) mine.qp_rkey = wi.mr->rkey_value();
    bool any_p2p = false;
    for (uint32_t p : m.path) any_p2p |= p == uint32_t(CommPath::P2p);
    if (wi.gpu && any_p2p) mine.has_ipc = cuda_ipc::export_memory(wi.local, &mine.ipc, &no_export);
    packed = pack(mine);
  } catch (...) {
    failed = std::current_exception();
  }
  const auto all = comm_coll::allgather(*m.bs, who, failed, packed.data(), packed.size());
  for (int r = 0; r < m.size; ++r) wi.blobs.push_back(unpack(all[r], r));
  for (int r = 1; r < m.size; ++r)  // the same text on every rank
    if (wi.blobs[r].bytes != wi.blobs[0].bytes)
      throw Error(ErrorCode::InvalidArgument, who + ": not symmetric: rank 0 has " + std::to_string(wi.blobs[0].bytes) +
                                                  " bytes, rank " + std::to_string(r) + " has " +
                                                  std::to_string(wi.blobs[r].bytes));
  m.windows.push_back(std::move(w));
  CommWindow& win = *m.windows.back();
  const bool first = win.h_.id == 0;  // the barrier window, while paths are still being decided
  for (int r = 0; r < m.size; ++r) {
    dev::CommWindowPeer& p = wi.peers[r];
    p.raddr = wi.blobs[r].addr;
    if (r == m.rank) {
      p.mapped = win.h_.local;
      continue;
    }
    if (m.path[r] != uint32_t(CommPath::P2p)) continue;
    std::string why;
    void* mapped = nullptr;
    if (!wi.blobs[r].gpu) why = "rank " + std::to_string(r) + "'s part is host memory";
    else if (!wi.blobs[r].has_ipc) why = "rank " + std::to_string(r) + " could not export its part";
    else if (!mine.has_ipc && !no_export.empty()) why = "this rank could not export its part: " + no_export;
    else mapped = cuda_ipc::open(wi.blobs[r].ipc, &why);
    if (mapped) {
      p.mapped = static_cast<uint8_t*>(mapped);
      wi.mapped.emplace_back(mapped, wi.blobs[r].ipc.offset);
      continue;
    }
    if (!first || m.mode == "p2p")
      throw Error(first ? ErrorCode::NotSupported : ErrorCode::System,
                  who + ": p2p mapping of rank " + std::to_string(r) + "'s part failed: " + why);
    m.path[r] = uint32_t(CommPath::Proxy);
    m.reason[r] = "CUDA IPC mapping failed: " + why;
  }
  if (!first) {
    m.import_keys(win);
    if (wi.gpu) win.publish_peers(m.size);
  }
  return win;
}

CommWindow& Comm::alloc_symmetric(size_t bytes, uint32_t counters) { return add_window(nullptr, bytes, true, counters); }
CommWindow& Comm::register_window(void* ptr, size_t bytes, uint32_t counters) {
  return add_window(ptr, bytes, false, counters);
}

uint64_t CommWindow::counter(uint32_t i) const {
  return comm_counters::read(comm_counters::at(h_, i), impl_->counters_on_gpu);
}
void CommWindow::reset_counter(uint32_t i, uint64_t value) {
  comm_counters::reset(comm_counters::at(h_, i), value, impl_->counters_on_gpu);
}

int Comm::rank() const { return impl_->rank; }
int Comm::size() const { return impl_->size; }
bool Comm::gpu() const { return impl_->gpu; }
Transport& Comm::transport() const { return *impl_->transport; }
Proxy& Comm::proxy() const { return *impl_->proxy; }
void Comm::barrier() { impl_->bs->barrier(); }

dev::CommHandle Comm::device_handle() const {
  const Impl& m = *impl_;
  dev::CommHandle h;
  h.rank = m.rank;
  h.size = m.size;
  h.pad = 0;
  h.peers = m.dev_peers ? static_cast<const dev::CommPeer*>(m.dev_peers) : m.peers;
  h.state = m.state;
  h.peer_down = m.peer_down;
  h.timeout_ns = m.timeout_ns;
  h.barrier = m.windows[0]->handle();
  return h;
}

dev::CommPath Comm::path(int peer) const {
  if (peer < 0 || peer >= impl_->size)
    throw Error(ErrorCode::InvalidArgument, "comm rank " + std::to_string(impl_->rank) + ": peer " +
                                                std::to_string(peer) + " out of range 0.." + std::to_string(impl_->size - 1));
  return static_cast<dev::CommPath>(impl_->path[peer]);
}

std::string Comm::path_reason(int peer) const {
  path(peer);
  return impl_->reason[peer];
}

std::string Comm::report() const {
  const Impl& m = *impl_;
  std::string s;
  for (int r = 0; r < m.size; ++r) {
    s += "rank " + std::to_string(m.rank) + " -> rank " + std::to_string(r) + ": " + dev::comm_path_name(m.path[r]);
    if (m.path[r] == uint32_t(CommPath::Proxy)) s += std::string(" over ") + m.transport->describe();
    if (m.path[r] == uint32_t(CommPath::P2p)) s += " (" + cuda_ipc::device_name() + ")";
    if (const QueuePair* q = m.gd.qp(r))
      s += " over " + m.gd.device->name() + " QP " + std::to_string(q->qpn()) + " (" + qp_state_name(q->state()) + ")";
    s += ": " + m.reason[r] + "\n";
  }
  return s;
}

std::string Comm::peer_error(int peer) const {
  const Impl& m = *impl_;
  path(peer);
  if (peer == m.rank) return "";
  {
    std::lock_guard<std::mutex> lk(m.mu);
    if (!m.lost[peer].empty()) return m.lost[peer];
  }
  std::string e = m.transport->peer_error(m.tp_peer[peer]);
  if (e.empty() && m.channels[peer]) e = m.channels[peer]->last_error();
  if (e.empty() && m.gd.qp(peer)) e = m.gd.qp(peer)->last_error();
  return e;
}

std::string Comm::device_error() const {
  const Impl& m = *impl_;
  const int32_t st = load_acquire<Scope::System>(&m.state->err_status);
  if (st == 0) return "";
  const dev::CommState& s = *m.state;
  std::string e = "comm rank " + std::to_string(m.rank) + ": " + op_name(s.err_op);
  if (s.err_peer >= 0) e += " (rank " + std::to_string(s.err_peer) + ")";
  if (s.err_window != ~0u)
    e += " window " + std::to_string(s.err_window) + (s.err_counter ? " counter " : " offset ") +
         std::to_string(s.err_offset);
  e += std::string(": ") + status_string(static_cast<Status>(st));
  const auto op = static_cast<dev::CommOp>(s.err_op);
  if (s.err_counter == 2 && s.err_window != ~0u)
    e += " (counter " + std::to_string(s.err_offset) + " out of range: the window has " +
         std::to_string(s.err_expected) + " counters)";
  else if (op == dev::CommOp::WaitCounter)
    e += " (waited for " + std::to_string(s.err_expected) + ", saw " + std::to_string(s.err_seen) + ")";
  if (op == dev::CommOp::WaitSignal)
    e += " (waited for " + std::to_string(s.err_expected) + ", saw " + std::to_string(s.err_seen) + ")";
  if (op == dev::CommOp::Barrier)
    e += " (waited for rank " + std::to_string(s.err_peer) + " to arrive at barrier " + std::to_string(s.err_expected) +
         ", it had arrived at " + std::to_string(s.err_seen) + ")";
  if ((op == dev::CommOp::FetchAdd || op == dev::CommOp::CompareSwap) && s.err_expected != 0)
    e += s.err_seen != 0 ? " (descriptor " + std::to_string(s.err_expected - 1) +
                               "'s result slot was still held by the poster of descriptor " +
                               std::to_string(s.err_seen - 1) + ")"
                         : " (waited for descriptor " + std::to_string(s.err_expected - 1) + " of the channel to complete)";
  if (s.err_peer >= 0 && s.err_peer < m.size && s.err_peer != m.rank) {
    if (std::string pe = peer_error(s.err_peer); !pe.empty()) e += ": " + pe;
    // A proxy peer: how far its channel got, so a stuck descriptor is named.
    if (const ProxyChannel* ch = m.channels[s.err_peer])
      e += " [channel to rank " + std::to_string(s.err_peer) + ": " + std::to_string(ch->completed()) +
           " descriptors completed, status " + status_string(ch->status()) + "]";
    // A gdaki peer: the QP's state (ERROR once a CQE failed).
    if (const QueuePair* q = m.gd.qp(s.err_peer))
      e += " [QP " + std::to_string(q->qpn()) + " to rank " + std::to_string(s.err_peer) + ": " +
           qp_state_name(q->state()) + "]";
  }
  return e;
}

}  // namespace kinet
