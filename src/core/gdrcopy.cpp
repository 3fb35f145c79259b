#include "core/gdrcopy.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/cuda_shim.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "kinet/kinet.hpp"

namespace kinet::gdr {
namespace {
using text::hexp;
}  // namespace

Library::~Library() {
  if (g_ && fns_.close)
    if (const int rc = fns_.close(g_); rc != 0) KINET_LOG(Error, "gdr_close failed (%d)", rc);
  if (dl_) dlclose(dl_);
}

Library::Loaded Library::load(const char* path) {
  Loaded out;
  std::shared_ptr<Library> lib(new Library);
  lib->dl_ = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib->dl_) {
    const char* e = dlerror();
    out.why = std::string(path) + " could not be loaded (" + (e ? e : "no reason given") + ")";
    return out;
  }
  struct Sym {
    const char* name;
    void* slot;
  } syms[] = {
      {"gdr_open", &lib->fns_.open},
      {"gdr_close", &lib->fns_.close},
      {"gdr_pin_buffer", &lib->fns_.pin_buffer},
      {"gdr_unpin_buffer", &lib->fns_.unpin_buffer},
      {"gdr_map", &lib->fns_.map},
      {"gdr_unmap", &lib->fns_.unmap},
      {"gdr_copy_from_mapping", &lib->fns_.copy_from_mapping},
  };
  for (const Sym& s : syms) {
    void* a = dlsym(lib->dl_, s.name);
    if (!a) {
      out.why = std::string(path) + " lacks " + s.name;
      return out;
    }
    std::memcpy(s.slot, &a, sizeof a);
  }
  lib->g_ = lib->fns_.open();
  if (!lib->g_) {
    out.why = std::string("gdr_open failed (is the gdrdrv kernel module loaded and /dev/gdrdrv accessible?)");
    return out;
  }
  out.lib = std::move(lib);
  return out;
}

std::shared_ptr<const Library> Library::process() {
  static std::shared_ptr<const Library> lib;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* v = std::getenv("KINET_GDRCOPY");
    if (v && std::strcmp(v, "0") == 0) {
      KINET_LOG(Debug, "GDRCopy disabled by KINET_GDRCOPY=0: CPU reads of GPU memory use CUDA copies");
      return;
    }
    Loaded l = load(kDefaultLib);
    if (!l.lib) KINET_LOG(Debug, "GDRCopy not used: %s; CPU reads of GPU memory use CUDA copies", l.why.c_str());
    lib = std::move(l.lib);
  });
  return lib;
}

std::unique_ptr<Mapping> Mapping::create(std::shared_ptr<const Library> lib, const void* gpu, size_t n,
                                         std::string* why) {
  why->clear();
  if (!lib) return *why = "no GDRCopy library", nullptr;
  const uint64_t a = reinterpret_cast<uint64_t>(gpu);
  if (!gpu || n == 0 || n > ~a) return *why = "empty or wrapping range at " + hexp(gpu), nullptr;
  const uint64_t base = a & ~(kGpuPage - 1);
  const uint64_t end = (a + n + kGpuPage - 1) & ~(kGpuPage - 1);
  std::unique_ptr<Mapping> m(new Mapping);
  const Fns& f = lib->fn();
  if (const int rc = f.pin_buffer(lib->handle(), static_cast<unsigned long>(base), end - base, 0, 0, &m->mh_);
      rc != 0)
    return *why = "gdr_pin_buffer of " + std::to_string(end - base) + " bytes at " +
                  hexp(reinterpret_cast<void*>(base)) + " failed (" + std::to_string(rc) + ")",
           nullptr;
  if (const int rc = f.map(lib->handle(), m->mh_, &m->va_, end - base); rc != 0 || !m->va_) {
    f.unpin_buffer(lib->handle(), m->mh_);
    return *why = "gdr_map of " + std::to_string(end - base) + " bytes at " + hexp(reinterpret_cast<void*>(base)) +
                  " failed (" + std::to_string(rc) + ")",
           nullptr;
  }
  m->lib_ = std::move(lib);
  m->mapped_ = end - base;
  m->offset_ = a - base;
  m->gpu_ = gpu;
  m->n_ = n;
  return m;
}

Mapping::~Mapping() {
  const Fns& f = lib_->fn();
  if (const int rc = f.unmap(lib_->handle(), mh_, va_, mapped_); rc != 0)
    KINET_LOG(Error, "gdr_unmap of the mapping of %s failed (%d)", hexp(gpu_).c_str(), rc);
  if (const int rc = f.unpin_buffer(lib_->handle(), mh_); rc != 0)
    KINET_LOG(Error, "gdr_unpin_buffer of %s failed (%d)", hexp(gpu_).c_str(), rc);
}

void Mapping::read(void* dst, size_t off, size_t n) const {
  if (off > n_ || n > n_ - off)
    throw Error(ErrorCode::InvalidArgument, "GDRCopy read of [" + std::to_string(off) + ", +" + std::to_string(n) +
                                                ") is outside the " + std::to_string(n_) + " mapped bytes at " +
                                                hexp(gpu_));
  const void* src = static_cast<const uint8_t*>(va_) + offset_ + off;
  if (const int rc = lib_->fn().copy_from_mapping(mh_, dst, src, n); rc != 0)
    throw Error(ErrorCode::System, "gdr_copy_from_mapping of " + std::to_string(n) + " bytes at " +
                                       hexp(static_cast<const uint8_t*>(gpu_) + off) + " failed (" +
                                       std::to_string(rc) + ")");
}

GpuReader::GpuReader(const void* gpu, size_t n) : GpuReader(Library::process(), gpu, n) {}

GpuReader::GpuReader(std::shared_ptr<const Library> lib, const void* gpu, size_t n) : src_(gpu), n_(n) {
  if (!lib || cuda::pointer_kind(gpu) != MemoryKind::Gpu) return;  // host memory: plain reads
  std::string why;
  map_ = Mapping::create(std::move(lib), gpu, n, &why);
  if (!map_) KINET_LOG(Debug, "GDRCopy can't map %s: %s; reading it with CUDA copies", hexp(gpu).c_str(), why.c_str());
}

void GpuReader::read(void* dst) const {
  if (map_) map_->read(dst, 0, n_);
  else cuda::copy(dst, src_, n_);
}
}  // namespace kinet::gdr
