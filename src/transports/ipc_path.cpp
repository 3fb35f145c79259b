// Provider "cuda_ipc" (ipc_path.hpp): the IPC data path, CUDA's IpcMemory
// and the channel wrapper around shm.
#include "transports/ipc_path.hpp"

#include <algorithm>
#include <cstring>

#include "core/cuda_ipc.hpp"
#include "core/cuda_shim.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "transports/link_channel.hpp"
#include "transports/msg_engine.hpp"
#include "transports/msg_registry.hpp"

namespace kinet::transport {
namespace {
constexpr uint32_t kIpcAddrMagic = 0x4350494b;  // "KIPC"
constexpr size_t kIpcAddrPrefix = 12;           // magic, u64 process token

// Random per process: tells a peer in this same process apart.
uint64_t process_token() {
  static const uint64_t t = random_node_id();
  return t;
}

class CudaIpcMemory final : public IpcMemory {
 public:
  bool exports(MemoryKind k) const override { return k == MemoryKind::Gpu; }
  bool export_alloc(const void* p, Alloc* out, std::string* why) override {
    if (!cuda_ipc::allocation(p, &out->base, &out->size, why)) return false;
    cuda_ipc::Exported e{};
    if (!cuda_ipc::export_memory(reinterpret_cast<const void*>(out->base), &e, why)) return false;
    std::memcpy(out->handle, e.handle, sizeof out->handle);
    return true;
  }
  void* open(const uint8_t handle[wire::kIpcHandleBytes], uint64_t* size, std::string* why) override {
    void* b = cuda_ipc::open_handle(handle, why);
    if (!b) return nullptr;
    // The real size, from the driver (the range from the mapping to the
    // allocation's end, should the mapping not start at its base).
    uint64_t base = 0, n = 0;
    const auto at = reinterpret_cast<uint64_t>(b);
    if (!cuda_ipc::allocation(b, &base, &n, why) || at < base || at - base >= n) {
      if (why->empty()) *why = "the mapping lies outside the allocation the driver reports";
      std::string ignored;
      cuda_ipc::close_handle(b, &ignored);
      return nullptr;
    }
    *size = n - (at - base);
    return b;
  }
  void close(void* base) override {
    std::string why;
    if (!cuda_ipc::close_handle(base, &why)) KINET_LOG(Warn, "transport cuda_ipc: %s", why.c_str());
  }
  MemoryKind mapped_kind() const override { return MemoryKind::Gpu; }
  emu::CopyResult copy(void* dst, MemoryKind dk, const void* src, MemoryKind sk, uint64_t n) override {
    // GPU <-> GPU: one cudaMemcpyAsync on the shim's non-blocking stream, then
    // a bounded wait; a host side bounces through the fault-tolerant copy.
    return emu::safe_copy(dst, dk, src, sk, n);
  }
};

class CudaIpcChannel final : public Channel {
 public:
  explicit CudaIpcChannel(std::unique_ptr<Channel> shm) : shm_(std::move(shm)) {}
  const char* provider() const override { return "cuda_ipc"; }
  std::string describe() const override { return "cuda_ipc over " + shm_->describe(); }
  bool ordered() const override { return shm_->ordered(); }
  size_t max_message() const override { return shm_->max_message(); }
  std::vector<uint8_t> address() const override {
    std::vector<uint8_t> a(kIpcAddrPrefix);
    const uint64_t t = process_token();
    std::memcpy(a.data(), &kIpcAddrMagic, 4);
    std::memcpy(a.data() + 4, &t, 8);
    const std::vector<uint8_t> s = shm_->address();
    a.insert(a.end(), s.begin(), s.end());
    return a;
  }
  uint32_t add_peer(const std::vector<uint8_t>& a, const std::string& name) override {
    uint32_t magic = 0;
    if (a.size() > kIpcAddrPrefix) std::memcpy(&magic, a.data(), 4);
    if (magic != kIpcAddrMagic)
      throw Error(ErrorCode::InvalidArgument, "transport cuda_ipc: the address of " + name +
                                                  " is not a cuda_ipc address (" + std::to_string(a.size()) +
                                                  " bytes; a peer of another provider?)");
    return shm_->add_peer(std::vector<uint8_t>(a.begin() + kIpcAddrPrefix, a.end()), name);
  }
  bool send(uint32_t peer, const iovec* iov, int n, uint64_t token) override { return shm_->send(peer, iov, n, token); }
  size_t progress(ChannelEvents& ev) override { return shm_->progress(ev); }

 private:
  std::unique_ptr<Channel> shm_;
};

bool covers(const IpcMemory::Alloc& a, uint64_t p, uint64_t n) {
  return p >= a.base && p - a.base <= a.size && n <= a.size - (p - a.base);
}
}  // namespace

std::shared_ptr<IpcMemory> cuda_ipc_memory() {
  std::string why;
  if (!cuda_ipc::ranges_available(&why)) throw Error(ErrorCode::NotSupported, "transport cuda_ipc: " + why);
  if (!cuda::available())
    throw Error(ErrorCode::NotSupported,
                "transport cuda_ipc: kinet's CUDA shim can't copy GPU memory here (libkinet built without CUDA's "
                "headers?)");
  return std::make_shared<CudaIpcMemory>();
}

std::unique_ptr<Channel> make_cuda_ipc_channel(const TransportOptions& opt, uint64_t node) {
  return std::make_unique<CudaIpcChannel>(make_shm_channel(opt, node));
}

IpcPath::IpcPath(std::shared_ptr<IpcMemory> mem, std::string name)
    : mem_(std::move(mem)), name_(std::move(name)), same_process_(new std::atomic<bool>[kMaxPeers]) {
  for (size_t i = 0; i < kMaxPeers; ++i) same_process_[i].store(false, std::memory_order_relaxed);
}

IpcPath::~IpcPath() {
  for (auto& [peer, m] : maps_) close_all(m);
}

void IpcPath::close_all(std::unordered_map<std::string, Mapping>& m) {
  for (auto& [h, map] : m) {
    mem_->close(map.base);
    n_.closes.fetch_add(1, std::memory_order_relaxed);
  }
  m.clear();
}

void IpcPath::add_peer(uint32_t peer, const std::vector<uint8_t>& a) {
  if (peer >= kMaxPeers) return;
  uint32_t magic = 0;
  uint64_t token = 0;
  if (a.size() >= kIpcAddrPrefix) {
    std::memcpy(&magic, a.data(), 4);
    std::memcpy(&token, a.data() + 4, 8);
  }
  const bool same = magic == kIpcAddrMagic && token == process_token();
  same_process_[peer].store(same, std::memory_order_relaxed);
  if (same)
    KINET_LOG(Info, "transport %s: peer %u is in this process: its GPU data is staged through host memory (CUDA "
                    "can't open an IPC handle in the process that exported it)",
              name_.c_str(), peer);
}

const IpcMemory::Alloc* IpcPath::exported(Registry& reg, uint32_t key, const void* p, uint64_t n) {
  if (unexportable_.count(key)) return nullptr;
  const auto a = reinterpret_cast<uint64_t>(p);
  for (const auto& x : exports_[key])
    if (covers(x, a, n)) return &x;
  IpcMemory::Alloc x;
  std::string why;
  if (!mem_->export_alloc(p, &x, &why)) {
    // Staged from now on for this region: the export would fail again.
    unexportable_.emplace(key, true);
    const uint64_t f = n_.fallbacks.fetch_add(1, std::memory_order_relaxed) + 1;
    KINET_LOG(Warn, "transport %s: GPU memory at %s can't be exported through CUDA IPC (%s): region %s is staged "
                    "through host memory (%llu fallbacks so far)",
              name_.c_str(), text::hex(a).c_str(), why.c_str(), text::hex(key).c_str(),
              static_cast<unsigned long long>(f));
    return nullptr;
  }
  if (!covers(x, a, n)) {
    // This operation only: its range runs past the allocation holding its start.
    const uint64_t f = n_.fallbacks.fetch_add(1, std::memory_order_relaxed) + 1;
    if (f == 1 || f == 1000 || f == 1000000)
      KINET_LOG(Warn, "transport %s: [%s, +%llu) spans more than one GPU allocation: staged through host memory "
                      "(%llu fallbacks so far)",
                name_.c_str(), text::hex(a).c_str(), static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(f));
    return nullptr;
  }
  // Entries of deregistered regions go once they outnumber the live ones.
  if (exports_.size() > 2 * reg.by_key.size() + 64) {
    for (auto it = exports_.begin(); it != exports_.end();)
      it = it->first != key && !reg.by_key.count(it->first) ? exports_.erase(it) : std::next(it);
    for (auto it = unexportable_.begin(); it != unexportable_.end();)
      it = !reg.by_key.count(it->first) ? unexportable_.erase(it) : std::next(it);
  }
  std::vector<IpcMemory::Alloc>& w = exports_[key];
  w.push_back(x);
  return &w.back();
}

void IpcPath::prepare(Registry& reg, uint32_t key, const void* base, uint64_t len) {
  std::lock_guard lk(reg.mu);
  auto it = reg.by_key.find(key);
  if (it == reg.by_key.end() || !mem_->exports(it->second.kind)) return;
  exported(reg, key, base, std::min<uint64_t>(len, 1));
}

bool IpcPath::reference(Registry& reg, uint32_t peer, const void* p, uint64_t n, wire::IpcRef* ref) {
  if (peer >= kMaxPeers || same_process_[peer].load(std::memory_order_relaxed)) return false;
  if (!mem_->exports(MemoryKind::Host) && reg.gpu.load(std::memory_order_relaxed) == 0) return false;
  const auto a = reinterpret_cast<uint64_t>(p);
  std::lock_guard lk(reg.mu);
  uint32_t key = 0;
  for (auto& [k, e] : reg.by_key) {
    const auto b = reinterpret_cast<uint64_t>(e.base);
    if (mem_->exports(e.kind) && a >= b && a - b <= e.len && n <= e.len - (a - b)) {
      key = k;
      break;
    }
  }
  const IpcMemory::Alloc* hit = key ? exported(reg, key, p, n) : nullptr;
  if (!hit) return false;
  std::memcpy(ref->handle, hit->handle, sizeof ref->handle);
  ref->offset = a - hit->base;
  n_.refs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

Status IpcPath::execute(uint32_t peer, const wire::Request& r, uint8_t* local, MemoryKind local_kind,
                        std::string* reason, std::string* detail) {
  const char* tn = wire::type_name(r.type);
  auto& pm = maps_[peer];
  const std::string h(reinterpret_cast<const char*>(r.ipc.handle), wire::kIpcHandleBytes);
  auto it = pm.find(h);
  if (it == pm.end()) {
    if (pm.size() >= kMaxMappings) {
      auto lru = pm.begin();
      for (auto j = pm.begin(); j != pm.end(); ++j)
        if (j->second.used < lru->second.used) lru = j;
      mem_->close(lru->second.base);
      n_.closes.fetch_add(1, std::memory_order_relaxed);
      pm.erase(lru);
    }
    Mapping m;
    std::string why;
    m.base = mem_->open(r.ipc.handle, &m.size, &why);
    if (!m.base) {
      *reason = "ipc open";
      *detail = std::string(tn) + ": the requester's IPC handle does not open here: " + why;
      return Status::RemoteAccess;
    }
    n_.opens.fetch_add(1, std::memory_order_relaxed);
    it = pm.emplace(h, m).first;
  }
  Mapping& m = it->second;
  m.used = ++tick_;
  if (r.ipc.offset > m.size || r.length > m.size - r.ipc.offset) {
    *reason = "ipc out of bounds";
    *detail = std::string(tn) + " of [+" + std::to_string(r.ipc.offset) + ", +" + std::to_string(r.length) +
              ") outside the requester's allocation of " + std::to_string(m.size) + " bytes";
    return Status::RemoteAccess;
  }
  uint8_t* theirs = static_cast<uint8_t*>(m.base) + r.ipc.offset;
  const bool pull = r.type != wire::MsgType::Get;
  const emu::CopyResult c = pull ? mem_->copy(local, local_kind, theirs, mem_->mapped_kind(), r.length)
                                 : mem_->copy(theirs, mem_->mapped_kind(), local, local_kind, r.length);
  if (c) {
    *reason = "fault";
    *detail = std::string(tn) + " by IPC reference of " + std::to_string(r.length) + " bytes: " + c.why;
    return c.cuda ? Status::RemoteOperation : Status::RemoteAccess;
  }
  (pull ? n_.pulls : n_.pushes).fetch_add(1, std::memory_order_relaxed);
  n_.bytes.fetch_add(r.length, std::memory_order_relaxed);
  return Status::Ok;
}

void IpcPath::forget_peer(uint32_t peer) {
  auto it = maps_.find(peer);
  if (it == maps_.end()) return;
  close_all(it->second);
  maps_.erase(it);
}

size_t IpcPath::mappings(uint32_t peer) const {
  auto it = maps_.find(peer);
  return it == maps_.end() ? 0 : it->second.size();
}

IpcStats IpcPath::stats() const {
  IpcStats s;
  s.pulls = n_.pulls.load(std::memory_order_relaxed);
  s.pushes = n_.pushes.load(std::memory_order_relaxed);
  s.bytes = n_.bytes.load(std::memory_order_relaxed);
  s.refs = n_.refs.load(std::memory_order_relaxed);
  s.fallbacks = n_.fallbacks.load(std::memory_order_relaxed);
  s.opens = n_.opens.load(std::memory_order_relaxed);
  s.closes = n_.closes.load(std::memory_order_relaxed);
  return s;
}

}  // namespace kinet::transport
