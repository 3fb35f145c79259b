// kinet — GDRCopy (libgdrapi.so.2), optional, loaded with dlopen: CPU reads
// of small GPU-memory words (a doorbell record, a ring index) through a BAR1
// mapping instead of a cudaMemcpy on a stream (microseconds less per read,
// and nothing queued behind a user's kernel).
//
// Facts used (read through the search tools): the entry points and their C
// signatures are gdrcopy's include/gdrapi.h (github NVIDIA/gdrcopy), also
// declared by NVIDIA-DOCA/gpunetio src/doca_gpunetio_gdrcopy.cpp, which loads
// the same library with dlopen:
//   gdr_t gdr_open(void);  int gdr_close(gdr_t);
//   int gdr_pin_buffer(gdr_t, unsigned long addr, size_t size, uint64_t p2p_token,
//                      uint32_t va_space, gdr_mh_t* handle);
//   int gdr_unpin_buffer(gdr_t, gdr_mh_t);
//   int gdr_map(gdr_t, gdr_mh_t, void** va, size_t size);
//   int gdr_unmap(gdr_t, gdr_mh_t, void* va, size_t size);
//   int gdr_copy_from_mapping(gdr_mh_t, void* h_ptr, const void* map_d_ptr, size_t size);
// gdr_mh_t is a struct of one unsigned long passed by value; pinning works in
// GPU pages of 64 KiB (GPU_PAGE_SHIFT 16), so kinet pins and maps the whole
// pages around the range and reads at its offset in the mapping.
//
// Absent library, a missing symbol, gdr_open failing (no gdrdrv module) or
// KINET_GDRCOPY=0: the CUDA-copy path, with one debug line saying why.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace kinet::gdr {

struct Fns {
  void* (*open)();
  int (*close)(void* g);
  int (*pin_buffer)(void* g, unsigned long addr, size_t size, uint64_t p2p_token, uint32_t va_space,
                    unsigned long* handle);  // gdr_mh_t*: one unsigned long
  int (*unpin_buffer)(void* g, unsigned long handle);
  int (*map)(void* g, unsigned long handle, void** va, size_t size);
  int (*unmap)(void* g, unsigned long handle, void* va, size_t size);
  int (*copy_from_mapping)(unsigned long handle, void* h_ptr, const void* map_d_ptr, size_t size);
};

inline constexpr uint64_t kGpuPage = 1ull << 16;
inline constexpr const char* kDefaultLib = "libgdrapi.so.2";

// A loaded libgdrapi with an open gdr_t; unloaded when the last user goes.
class Library {
 public:
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  const Fns& fn() const { return fns_; }
  void* handle() const { return g_; }

  struct Loaded {
    std::shared_ptr<const Library> lib;  // null when unusable
    std::string why;                     // why not (names the file or the symbol)
  };
  // Loads `path` (dlopen RTLD_NOW | RTLD_LOCAL) and calls gdr_open. Never throws.
  static Loaded load(const char* path = kDefaultLib);
  // The process's library: null with KINET_GDRCOPY=0 or when load() fails
  // (one debug line, logged once). Thread-safe.
  static std::shared_ptr<const Library> process();

 private:
  Library() = default;
  void* dl_ = nullptr;
  void* g_ = nullptr;
  Fns fns_{};
};

// [gpu, gpu+n) pinned and mapped into the CPU's address space.
class Mapping {
 public:
  // Null, with the reason in *why, when the library refuses (pin or map fails).
  static std::unique_ptr<Mapping> create(std::shared_ptr<const Library> lib, const void* gpu, size_t n,
                                         std::string* why);
  ~Mapping();  // unmaps and unpins; failures are logged
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  // Copies n bytes from gpu+off (off + n <= the mapped length) into dst with
  // gdr_copy_from_mapping. Throws Error(System) naming the range if it fails,
  // InvalidArgument if the range is outside the mapping.
  void read(void* dst, size_t off, size_t n) const;
  size_t length() const { return n_; }

 private:
  Mapping() = default;
  std::shared_ptr<const Library> lib_;
  unsigned long mh_ = 0;
  void* va_ = nullptr;      // the mapping of the pinned pages
  size_t mapped_ = 0;       // their length
  size_t offset_ = 0;       // where gpu starts in them
  const void* gpu_ = nullptr;
  size_t n_ = 0;
};

// Reads a small GPU-memory range from the CPU: through GDRCopy when the
// process's library is usable and maps it, else with cuda::copy (the path
// without GDRCopy). Host memory is read with memcpy either way.
class GpuReader {
 public:
  GpuReader(const void* gpu, size_t n);
  GpuReader(std::shared_ptr<const Library> lib, const void* gpu, size_t n);  // tests: a given library
  void read(void* dst) const;  // all n bytes
  bool via_gdrcopy() const { return map_ != nullptr; }

 private:
  const void* src_;
  size_t n_;
  std::unique_ptr<Mapping> map_;
};
}  // namespace kinet::gdr
