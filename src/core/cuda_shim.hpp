// kinet — the few CUDA runtime calls the host library needs, loaded with
// dlopen so libkinet runs (and its tests pass) on machines without CUDA.
//
// The rule of this file: nothing here waits behind a user's kernel. Every
// CUDA call is one that does not synchronise the device (no cudaFree,
// cudaFreeHost, cudaHostUnregister, cudaMemset or cudaMemcpy on the legacy
// default stream), and all GPU work goes on the shim's own non-blocking
// streams, so a kernel that spins until the software NIC answers cannot stall
// the NIC, whatever stream it runs on. Checked on a GPU by
// tests/gpu/gpu_nic_hygiene_test.cu.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kinet/kinet.hpp"

namespace kinet::cuda {
// True when a CUDA runtime loads and sees at least one GPU.
bool available();
// Whether the CUDA driver loads modules lazily (CUDA_MODULE_LOADING unset or
// LAZY, the default since CUDA 12.2). Then a kernel's first launch loads it,
// and that load waits behind kernels already running: measured on an H200, a
// proxy's GPU copies stalled while one kernel spun waiting for the proxy and a
// second, never-launched kernel was queued behind it.
bool lazy_loading();
// Logs that hazard (Info) once per process, naming `who`, when lazy_loading().
void warn_if_lazy_loading(const char* who);
// Host for anything CUDA does not know as device memory (managed memory too).
MemoryKind pointer_kind(const void* p);
// Copies n bytes between any two of host and GPU memory (plain memcpy when
// neither side is GPU or managed memory). The copy runs on a non-blocking
// stream of the GPU that owns the GPU side and is complete on return. The wait
// is bounded by default_timeout_ms(): past it, throws Error(System) naming the
// copy. Safe from any thread; leaves the calling thread's current device as it
// was. Pageable host memory is staged through staging() in pieces: CUDA would
// copy it synchronously inside the driver, beyond any bound.
void copy(void* dst, const void* src, size_t n);
// This thread's page-locked staging buffer of kStagingBytes (allocated on
// first use, back to the pool when the thread ends). A caller may fill it and
// pass it to copy(), which then copies without staging.
inline constexpr size_t kStagingBytes = size_t{1} << 20;
uint8_t* staging();
// Page-locked host memory mapped into every GPU's address space, or plain
// aligned host memory when there is no GPU. Zeroed. Throws ResourceExhausted.
void* alloc_pinned(size_t n);
// Gives p (from alloc_pinned; null is a no-op) back. With CUDA the block is
// kept for reuse by alloc_pinned, not returned to CUDA: cudaFreeHost waits for
// every kernel on the device. What is kept is at most what was once in use.
void free_pinned(void* p);
// GPU memory on the calling thread's current device (throws NotSupported
// without a GPU, ResourceExhausted when the GPU is full). Zeroed on return.
void* alloc_device(size_t n);
// Gives p (from alloc_device; null is a no-op) back; kept for reuse, as in
// free_pinned (cudaFree waits for every kernel on the device).
void free_device(void* p);

// A NIC's doorbell page (PCIe I/O memory mapped into this process, e.g. a
// UAR) mapped into every GPU: cudaHostRegister(cudaHostRegisterIoMemory) of
// the pages around [p, p + n). Returns the GPU's address of p, or null with
// *why saying what failed (no GPU, a driver that can't map I/O memory).
void* map_io_memory(void* p, size_t n, std::string* why);
// Undoes map_io_memory (p: the host address given to it). cudaHostUnregister
// may wait for running kernels: call it only at teardown.
void unmap_io_memory(void* p);
// GPU memory [p, p + n) exported as a dma-buf (cuMemGetHandleForAddressRange
// over the enclosing host pages) for ibv_reg_dmabuf_mr: the fd (the caller
// closes it once registered) and *offset of p inside it; -1 with *why when it
// can't (no GPU, an old driver, a kernel without dma-buf).
int dmabuf_fd(const void* p, size_t n, uint64_t* offset, std::string* why);
}  // namespace kinet::cuda
