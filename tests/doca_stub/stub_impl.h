/* kinet tests — helpers of the stand-in DOCA libraries (see stub.h). */
#ifndef KINET_DOCA_STUB_IMPL_H
#define KINET_DOCA_STUB_IMPL_H
#include <stdlib.h>
#include <string.h>

#include "stub.h"

#define STUB_EXPORT __attribute__((visibility("default")))
STUB_EXPORT struct kinet_stub_stats kinet_stub_stats;

/* Counts the call; returns STUB_FAIL_CODE from the function named STUB_FAIL. */
#ifdef STUB_FAIL
#define STUB_ENTER()                                              \
  do {                                                            \
    ++kinet_stub_stats.calls;                                     \
    if (strcmp(__func__, STUB_FAIL) == 0) return STUB_FAIL_CODE;  \
  } while (0)
#else
#define STUB_ENTER() ++kinet_stub_stats.calls
#endif

static void* stub_new(size_t n) {
  ++kinet_stub_stats.live;
  return calloc(1, n);
}
static void stub_free(void* p) {
  if (!p) return;
  --kinet_stub_stats.live;
  free(p);
}
#endif
