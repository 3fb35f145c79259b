// kinet — CUDA IPC: GPU memory of one process mapped into another on the same
// host. Used by the communicator's p2p path (src/comm) and the cuda_ipc
// transport (src/transports/ipc_path.*). The CUDA runtime and driver are
// loaded with dlopen (no CUDA headers needed to build), like core/cuda_shim.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kinet::cuda_ipc {

inline constexpr size_t kHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)

struct Exported {
  uint8_t handle[kHandleBytes];
  uint64_t offset;  // of the exported pointer inside its allocation
};

// True when a CUDA runtime with the IPC calls loads and sees a GPU; else
// false with *why.
bool available(std::string* why);
// available(), and the driver's cuMemGetAddressRange (what the transport
// needs to check a peer's range against the real allocation); else false
// with *why.
bool ranges_available(std::string* why);
// The calling thread's current GPU ("0000:18:00.0 (device 0)"), for reports.
std::string device_name();
// cudaMalloc'd, zeroed GPU memory (an allocation base, as IPC exports it).
// Throws ResourceExhausted or System.
void* alloc(size_t bytes);
void free(void* p);
// Exports the allocation holding p. False with *why on failure.
bool export_memory(const void* p, Exported* out, std::string* why);
// Maps a peer's exported allocation; returns the address of the exported
// pointer here (base + offset), or null with *why.
void* open(const Exported& e, std::string* why);
// Unmaps what open() returned.
void close(void* mapped, uint64_t offset);

// The allocation holding GPU address p (a local one, or the base of a mapped
// peer allocation): its base and its real size, from the driver
// (cuMemGetAddressRange). False with *why (not GPU memory, no driver call).
bool allocation(const void* p, uint64_t* base, uint64_t* size, std::string* why);
// Maps a peer's handle (the whole allocation); the base here, or null with
// *why. Opening a handle this process already has open returns the same base
// with a reference count (CUDA's rule); each open needs one close_handle.
void* open_handle(const uint8_t handle[kHandleBytes], std::string* why);
// Unmaps what open_handle() returned. False with *why when CUDA refused.
bool close_handle(void* base, std::string* why);

}  // namespace kinet::cuda_ipc
