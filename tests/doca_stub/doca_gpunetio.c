/* Stand-in libdoca_gpunetio.so (stub.h): the GPU handler calls. */
#include "stub_impl.h"

STUB_EXPORT int doca_gpu_create(const char* bdf, void** gpu) {
  STUB_ENTER();
  if (!bdf || !gpu) return 6;
  *gpu = stub_new(1);
  return 0;
}
STUB_EXPORT int doca_gpu_destroy(void* gpu) {
  STUB_ENTER();
  stub_free(gpu);
  return 0;
}
