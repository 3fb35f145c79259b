/* Stand-in libgdrapi.so.2 (GDRCopy) built by the tests: "pins" and "maps"
 * host memory (the mapping is the memory itself), records what it was asked
 * and counts calls. STUB_OMIT_COPY leaves gdr_copy_from_mapping out. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define STUB_EXPORT __attribute__((visibility("default")))

struct kinet_gdr_stub_stats {
  int open, close, pin, unpin, map, unmap, copy;
  unsigned long pin_addr;
  size_t pin_size, map_size;
  int live; /* pins not yet unpinned */
};
STUB_EXPORT struct kinet_gdr_stub_stats kinet_gdr_stub_stats;

static char g_handle;

STUB_EXPORT void* gdr_open(void) {
  ++kinet_gdr_stub_stats.open;
  return &g_handle;
}
STUB_EXPORT int gdr_close(void* g) {
  ++kinet_gdr_stub_stats.close;
  return g == &g_handle ? 0 : 22;
}
STUB_EXPORT int gdr_pin_buffer(void* g, unsigned long addr, size_t size, uint64_t token, uint32_t va_space,
                               unsigned long* mh) {
  ++kinet_gdr_stub_stats.pin;
  if (g != &g_handle || token || va_space || (addr & 0xffff) || (size & 0xffff)) return 22; /* 64 KiB pages */
  kinet_gdr_stub_stats.pin_addr = addr, kinet_gdr_stub_stats.pin_size = size;
  *mh = addr;
  ++kinet_gdr_stub_stats.live;
  return 0;
}
STUB_EXPORT int gdr_unpin_buffer(void* g, unsigned long mh) {
  ++kinet_gdr_stub_stats.unpin;
  if (g != &g_handle || !mh) return 22;
  --kinet_gdr_stub_stats.live;
  return 0;
}
STUB_EXPORT int gdr_map(void* g, unsigned long mh, void** va, size_t size) {
  ++kinet_gdr_stub_stats.map;
  if (g != &g_handle) return 22;
  kinet_gdr_stub_stats.map_size = size;
  *va = (void*)mh;
  return 0;
}
STUB_EXPORT int gdr_unmap(void* g, unsigned long mh, void* va, size_t size) {
  ++kinet_gdr_stub_stats.unmap;
  return g == &g_handle && (void*)mh == va && size == kinet_gdr_stub_stats.map_size ? 0 : 22;
}
#ifndef STUB_OMIT_COPY
STUB_EXPORT int gdr_copy_from_mapping(unsigned long mh, void* h, const void* d, size_t n) {
  ++kinet_gdr_stub_stats.copy;
  if (!mh) return 22;
  memcpy(h, d, n);
  return 0;
}
#endif
