// kinet emu — data movement that survives bad user memory. Hardware pins the
// pages of a registration; the emulator cannot, so a region unmapped after
// reg_mr must turn into an error CQE, never a SIGSEGV on the engine thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kinet/kinet.hpp"

namespace kinet::emu {

// Which side of a copy failed, and why ("" when it succeeded).
struct CopyResult {
  enum Side : uint8_t { None, Src, Dst } side = None;
  bool cuda = false;  // a CUDA copy failed (else: host memory not mapped)
  std::string why;
  explicit operator bool() const { return side != None; }  // true = failed
};

// Copies n bytes. Host memory is copied with a memcpy that a SIGSEGV/SIGBUS
// ends early (a process-wide handler, installed at the first copy, chains to
// the previous one for every other fault; a handler the application installs
// later replaces it, and then a bad region crashes again); GPU memory goes
// through the CUDA shim, whose exceptions come back as {cuda, why}, with the
// host side bounced through the guarded copy. Never throws.
CopyResult safe_copy(void* dst, MemoryKind dk, const void* src, MemoryKind sk, size_t n);

// Whether every page of host memory [src, +n) can be read now: a failure as
// safe_copy reports an unreadable source (side Src). For a source read next
// by something other than safe_copy (the kernel, in send(2), which fails
// with EFAULT rather than a signal): what is unmapped after the check fails
// that reader instead. Never throws.
CopyResult probe_source(const void* src, size_t n);

// A release update of the 8 aligned bytes of host memory at `word`: a
// store of `value`, or with `add` a fetch-add of it, so that what was
// written before is visible to whoever reads the new value with acquire. A
// fault (unmapped, read-only) ends it with nothing written (side Dst).
CopyResult safe_release_update(uint64_t* word, bool add, uint64_t value);

// One NIC atomic on the 8 aligned bytes at `target`. Host memory: a CPU
// atomic (acq_rel) that a fault ends early, so it is atomic with CPU threads'
// atomics on the word too (more than IBV_ATOMIC_HCA promises). GPU memory:
// a read-modify-write through safe_copy under one process-wide lock (atomic
// among this process's NIC atomics only, not with GPU threads).
// `old` receives the previous value (host byte order).
CopyResult safe_atomic(uint64_t* target, MemoryKind kind, bool fetch_add, uint64_t operand, uint64_t compare,
                       uint64_t* old);

}  // namespace kinet::emu
