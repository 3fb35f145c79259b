/* kinet tests — a stand-in DOCA SDK (libdoca_common.so, libdoca_verbs.so,
 * libdoca_gpunetio.so) built by the test suite: the entry points kinet's SDK
 * mode uses (src/providers/doca/doca_api.hpp), answering from plain memory
 * and recording what they were asked, so tests can assert kinet took the SDK
 * path and passed the right values. Not an SDK: no NIC is behind it.
 *
 * Build switches (one scenario directory each, tests/CMakeLists.txt):
 *   STUB_FAIL="<call>" STUB_FAIL_CODE=<n>  that call returns doca_error_t n
 *   STUB_NO_ERROR_NAME                     no doca_error_get_name / _descr
 *   STUB_OMIT_QP_MODIFY                    no doca_verbs_qp_modify
 *   STUB_SHIFT_SQ                          doca_verbs_qp_get_wq reports the ring 64 B off
 *   STUB_MAX_QP_WR=<n>                     the device attributes' max_qp_wr */
#ifndef KINET_DOCA_STUB_H
#define KINET_DOCA_STUB_H
#include <stddef.h>
#include <stdint.h>

/* What one library saw; each library exports its own as kinet_stub_stats. */
struct kinet_stub_stats {
  int calls;   /* every entry point */
  int live;    /* objects created and not yet destroyed */
  int dev_open, dev_close, umem_create, umem_destroy, uar_create, uar_destroy;
  int ctx_import, ctx_destroy, pd_import, pd_destroy, query_device;
  int cq_create, cq_destroy, qp_create, qp_destroy, qp_modify, qp_query, ah_create;
  /* the last CQ / QP creation */
  uint32_t cq_size, sq_wr, rq_wr, max_sges, qp_type;
  uint64_t cq_umem_offset, sq_umem_offset, dbr_umem_offset;
  void* umem_addr;  /* the last UMEM's address */
  size_t umem_size;
  int uar_type;
  /* the last modify */
  int modify_mask, next_state, path_mtu, atomic_mode, allow_write, allow_read, addr_type;
  uint32_t dest_qpn, rq_psn, sq_psn, dlid;
  uint8_t gid[16];
  uint8_t sgid_index, hop_limit, max_rd_atomic, max_dest_rd_atomic;
  uint16_t port_num, ack_timeout, retry_cnt, rnr_retry, min_rnr_timer;
};

#define KINET_STUB_QPN_BASE 0x5d000u
#define KINET_STUB_CQN_BASE 0x0c00u
#define KINET_STUB_MAX_QP_WR 1024u

/* Objects shared by the libraries (each reads the others' through these). */
struct stub_umem {
  void* addr;
  size_t size;
  uint32_t access;
};
struct stub_uar {
  int type;
  uint64_t reg[8]; /* the "doorbell register" */
};
#endif
