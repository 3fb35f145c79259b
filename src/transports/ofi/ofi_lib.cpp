#include "transports/ofi/ofi_lib.hpp"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

#include "kinet/kinet.hpp"

namespace kinet::transport::ofi {

const Lib* Lib::load(const char* path, std::string* why) {
  why->clear();
  void* dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char* e = dlerror();
    *why = std::string(path) + " could not be loaded (" + (e ? e : "no reason given") + ")";
    return nullptr;
  }
  auto* lib = new Lib;
  struct Sym {
    const char* name;
    void* slot;
  } syms[] = {
      {"fi_getinfo", &lib->getinfo}, {"fi_freeinfo", &lib->freeinfo}, {"fi_dupinfo", &lib->dupinfo},
      {"fi_fabric", &lib->fabric},   {"fi_strerror", &lib->strerror}, {"fi_version", &lib->version},
  };
  for (const Sym& s : syms) {
    void* a = dlsym(dl, s.name);
    if (!a) {
      *why = std::string(path) + " lacks " + s.name;
      delete lib;
      dlclose(dl);
      return nullptr;
    }
    std::memcpy(s.slot, &a, sizeof a);
  }
  return lib;  // never freed: see the declaration
}

const Lib& Lib::process() {
  static const Lib* lib = nullptr;
  static std::string why;
  static std::once_flag once;
  std::call_once(once, [] { lib = load(kDefaultPath, &why); });
  if (!lib) throw Error(ErrorCode::NotSupported, "transport \"ofi\": libfabric is not usable here: " + why);
  return *lib;
}

std::string Lib::version_string() const {
  const uint32_t v = version();
  return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
}

std::string Lib::error(int rc) const {
  const char* s = strerror(rc < 0 ? -rc : rc);
  return std::string(s ? s : "unknown error") + " (" + std::to_string(rc) + ")";
}

}  // namespace kinet::transport::ofi
