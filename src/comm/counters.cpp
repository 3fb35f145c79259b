// kinet — host side of the communicator's counters (see counters.hpp).
#include "comm/counters.hpp"

#include <cstddef>
#include <string>
#include <vector>

#include "core/cuda_shim.hpp"
#include "kinet/kinet.hpp"

namespace kinet::comm_counters {

using dev::CommPath;

uint8_t* make_tracks(dev::CommPeer* peers, int size, bool gpu, void* dev_peers) {
  std::vector<size_t> off(size, 0);  // 1 + the track's offset; 0: none
  size_t total = 0;
  for (int r = 0; r < size; ++r) {
    const dev::CommPeer& p = peers[r];
    uint64_t ring = 0;
    if (p.path == uint32_t(CommPath::Proxy)) ring = p.ch.size();
    if (p.path == uint32_t(CommPath::Gdaki)) ring = p.qp.size();
    if (ring == 0) continue;
    off[r] = total + 1;
    total += sizeof(dev::CommCounterTrack) + ring * sizeof(dev::CommCounterTag);
  }
  if (total == 0) return nullptr;
  auto* mem = static_cast<uint8_t*>(gpu ? cuda::alloc_device(total) : cuda::alloc_pinned(total));
  for (int r = 0; r < size; ++r) {
    if (off[r] == 0) continue;
    auto* t = reinterpret_cast<dev::CommCounterTrack*>(mem + off[r] - 1);
    store_release<Scope::System>(&peers[r].ctr, t);
    if (dev_peers)
      cuda::copy(static_cast<uint8_t*>(dev_peers) + sizeof(dev::CommPeer) * r + offsetof(dev::CommPeer, ctr), &t,
                 sizeof t);
  }
  return mem;
}

uint64_t* at(const dev::WindowHandle& h, uint32_t i) {
  if (i >= h.ncounters)
    throw Error(ErrorCode::InvalidArgument, "comm window " + std::to_string(h.id) + ": counter " + std::to_string(i) +
                                                " out of range (the window has " + std::to_string(h.ncounters) +
                                                " counters)");
  return h.counters + 2 * uint64_t{i};
}

uint64_t read(const uint64_t* pair, bool gpu) {
  if (!gpu) return load_acquire<Scope::System>(const_cast<uint64_t*>(pair));
  uint64_t v = 0;
  cuda::copy(&v, pair, sizeof v);
  return v;
}

void reset(uint64_t* pair, uint64_t value, bool gpu) {
  if (gpu) {
    const uint64_t both[2] = {value, 0};
    cuda::copy(pair, both, sizeof both);
    return;
  }
  store_relaxed<Scope::System>(pair + 1, uint64_t{0});
  store_release<Scope::System>(pair, value);
}

}  // namespace kinet::comm_counters
