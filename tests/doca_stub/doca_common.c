/* Stand-in libdoca_common.so: errors, device from a PD, UMEM, UAR (stub.h). */
#include "stub_impl.h"

struct stub_dev {
  void* pd;
};

#ifdef STUB_LINKED
/* Called by libdoca_verbs.so of the "linked" scenario, which names this
 * library as a dependency (DT_NEEDED libdoca_common.so.2) as the SDK's do. */
STUB_EXPORT int kinet_stub_common_ping(void) { return 42; }
#endif

#ifndef STUB_NO_STANDIN
STUB_EXPORT const char* kinet_standin(void) { return "kinet stand-in DOCA SDK"; }
#endif

#ifndef STUB_NO_ERROR_NAME
STUB_EXPORT const char* doca_error_get_name(int e) {
  switch (e) {
    case 0: return "DOCA_SUCCESS";
    case 6: return "DOCA_ERROR_INVALID_VALUE";
    case 7: return "DOCA_ERROR_NO_MEMORY";
    case 18: return "DOCA_ERROR_BAD_STATE";
    case 21: return "DOCA_ERROR_DRIVER";
  }
  return NULL;
}
STUB_EXPORT const char* doca_error_get_descr(int e) { return e == 21 ? "DOCA Driver call failure" : ""; }
#endif

STUB_EXPORT int doca_rdma_bridge_open_dev_from_pd(void* pd, void** dev) {
  STUB_ENTER();
  if (!pd || !dev) return 6;
  struct stub_dev* d = stub_new(sizeof *d);
  d->pd = pd;
  *dev = d;
  ++kinet_stub_stats.dev_open;
  return 0;
}
STUB_EXPORT int doca_dev_close(void* dev) {
  STUB_ENTER();
  if (!dev) return 6;
  stub_free(dev);
  ++kinet_stub_stats.dev_close;
  return 0;
}
STUB_EXPORT int doca_umem_create(void* dev, void* addr, size_t size, uint32_t access, void** umem) {
  STUB_ENTER();
  if (!dev || !addr || !size || !umem) return 6;
  struct stub_umem* u = stub_new(sizeof *u);
  u->addr = addr, u->size = size, u->access = access;
  *umem = u;
  kinet_stub_stats.umem_addr = addr, kinet_stub_stats.umem_size = size;
  ++kinet_stub_stats.umem_create;
  return 0;
}
STUB_EXPORT int doca_umem_destroy(void* umem) {
  STUB_ENTER();
  stub_free(umem);
  ++kinet_stub_stats.umem_destroy;
  return 0;
}
STUB_EXPORT int doca_uar_create(void* dev, int type, void** uar) {
  STUB_ENTER();
  if (!dev || !uar) return 6;
  struct stub_uar* u = stub_new(sizeof *u);
  u->type = type;
  kinet_stub_stats.uar_type = type;
  *uar = u;
  ++kinet_stub_stats.uar_create;
  return 0;
}
STUB_EXPORT int doca_uar_destroy(void* uar) {
  STUB_ENTER();
  stub_free(uar);
  ++kinet_stub_stats.uar_destroy;
  return 0;
}
STUB_EXPORT int doca_uar_reg_addr_get(void* uar, void** reg) {
  STUB_ENTER();
  if (!uar || !reg) return 6;
  *reg = ((struct stub_uar*)uar)->reg;
  return 0;
}
