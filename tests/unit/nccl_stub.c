/* A stand-in libnccl for kinet_store_test: the few calls Bootstrap::from_nccl
 * makes, answering as rank 1 of 2 on GPU 0. NCCL_STUB_FAIL=1 makes
 * ncclCommUserRank fail with ncclInternalError (3). ncclBroadcast moves
 * nothing (on a GPU machine the id then arrives as zeros: "rank 0 could not
 * create the unique id"). */
#include <stdlib.h>

struct ncclComm;
int ncclCommCount(struct ncclComm* c, int* n) { (void)c; *n = 2; return 0; }
int ncclCommUserRank(struct ncclComm* c, int* r) {
  (void)c;
  const char* f = getenv("NCCL_STUB_FAIL");
  if (f && *f == '1') return 3;
  *r = 1;
  return 0;
}
int ncclCommCuDevice(struct ncclComm* c, int* d) { (void)c; *d = 0; return 0; }
int ncclCommGetAsyncError(struct ncclComm* c, int* e) { (void)c; *e = 0; return 0; }
int ncclBroadcast(const void* s, void* r, size_t n, int t, int root, struct ncclComm* c, void* st) {
  (void)s; (void)r; (void)n; (void)t; (void)root; (void)c; (void)st;
  return 0;
}
const char* ncclGetErrorString(int rc) { return rc == 3 ? "stub internal error" : "stub"; }
