// kinet — the few CUDA runtime calls the host library needs, loaded with
// dlopen so libkinet runs (and its tests pass) on machines without CUDA.
#pragma once
#include <cstddef>

#include "kinet/kinet.hpp"

namespace kinet::cuda {
// True when a CUDA runtime loads and sees at least one GPU.
bool available();
// Host for anything CUDA does not know as device memory.
MemoryKind pointer_kind(const void* p);
// Copies between any two of host and GPU memory (cudaMemcpyDefault).
void copy(void* dst, const void* src, size_t n);
// Page-locked host memory mapped into every GPU's address space, or plain
// aligned host memory when there is no GPU. Zeroed.
void* alloc_pinned(size_t n);
void free_pinned(void* p);
// GPU memory (throws NotSupported without a GPU). Zeroed.
void* alloc_device(size_t n);
void free_device(void* p);
}  // namespace kinet::cuda
