// kinet — the host side of the communicator's local-completion counters
// (kinet/device/comm.cuh "Counters"): the per-peer bookkeeping the device
// API credits completions through, and the host's view of a window's
// counters. Used by src/comm/comm.cpp.
#pragma once
#include <cstdint>

#include "kinet/device/comm.cuh"

namespace kinet::comm_counters {

// One zeroed block holding, per proxy or gdaki peer of `peers`, a
// CommCounterTrack and a tag per ring slot; peers[r].ctr (stored atomically:
// posters of other windows may be running) and, when dev_peers is set, its
// GPU copy point into it. GPU memory when `gpu`, else pinned host memory.
// Null when no peer needs one (self and p2p count at once). The caller frees
// it (cuda::free_device / free_pinned) after the QPs and channels are gone.
uint8_t* make_tracks(dev::CommPeer* peers, int size, bool gpu, void* dev_peers);

// Counter i's {value, failure} pair of window h; throws InvalidArgument
// naming the window and the count for i >= h.ncounters.
uint64_t* at(const dev::WindowHandle& h, uint32_t i);
// The value as last credited; sets value and clears the failure. `gpu`:
// the pair is in GPU memory (copied through the CUDA shim).
uint64_t read(const uint64_t* pair, bool gpu);
void reset(uint64_t* pair, uint64_t value, bool gpu);

}  // namespace kinet::comm_counters
