// kinet — CUDA IPC for the communicator's p2p path: GPU memory of one process
// mapped into another on the same host. The CUDA runtime and driver are
// loaded with dlopen (no CUDA headers needed to build), like core/cuda_shim.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kinet::comm_ipc {

inline constexpr size_t kHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)

struct Exported {
  uint8_t handle[kHandleBytes];
  uint64_t offset;  // of the exported pointer inside its allocation
};

// True when a CUDA runtime with the IPC calls loads and sees a GPU; else
// false with *why.
bool available(std::string* why);
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

}  // namespace kinet::comm_ipc
