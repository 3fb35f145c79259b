// kinet transports — libfabric loaded at run time (dlopen of libfabric.so.1):
// libkinet never links it. Only the library's real symbols are resolved here;
// every other fi_* call (fi_domain, fi_sendmsg, fi_cq_read ...) is a static
// inline wrapper in <rdma/fi_*.h> over the objects' ops tables and is called
// directly. Never call an inline wrapper that names a real symbol
// (fi_allocinfo -> fi_dupinfo): use the table (dupinfo(nullptr)).
#pragma once
#include <rdma/fabric.h>

#include <cstdint>
#include <string>

namespace kinet::transport::ofi {

struct Lib {
  static constexpr const char* kDefaultPath = "libfabric.so.1";

  int (*getinfo)(uint32_t version, const char* node, const char* service, uint64_t flags,
                 const struct fi_info* hints, struct fi_info** info) = nullptr;
  void (*freeinfo)(struct fi_info* info) = nullptr;
  struct fi_info* (*dupinfo)(const struct fi_info* info) = nullptr;
  int (*fabric)(struct fi_fabric_attr* attr, struct fid_fabric** fabric, void* context) = nullptr;
  const char* (*strerror)(int errnum) = nullptr;
  uint32_t (*version)() = nullptr;

  // Loads `path` and resolves every symbol above. nullptr with *why saying
  // what is missing ("<path> could not be loaded (<dlerror>)", "<path> lacks
  // fi_getinfo"). The library stays loaded for the process lifetime
  // (libfabric's providers keep global state and threads).
  static const Lib* load(const char* path, std::string* why);
  // libfabric.so.1, loaded once per process. Throws kinet::Error NotSupported
  // naming what is missing.
  static const Lib& process();

  // "1.17" (the loaded library's version).
  std::string version_string() const;
  // fi_strerror(-rc) text for a negative libfabric return code.
  std::string error(int rc) const;
};

}  // namespace kinet::transport::ofi
