/* Stand-in libdoca_verbs.so (stub.h): bridge imports, device attributes, CQ,
 * QP with the RC state machine, AH. A modify must come from the state the
 * transition needs (else DOCA_ERROR_BAD_STATE, 18) and carry the attributes
 * it needs (else DOCA_ERROR_INVALID_VALUE, 6), as a device would insist. */
#include "stub_impl.h"

enum { RST = 0, INIT = 1, RTR = 2, RTS = 3, ERR = 4 };
enum {
  A_WRITE = 1 << 0,
  A_READ = 1 << 1,
  A_PKEY = 1 << 2,
  A_MIN_RNR = 1 << 3,
  A_PORT = 1 << 4,
  A_NEXT = 1 << 5,
  A_MTU = 1 << 7,
  A_RQ_PSN = 1 << 8,
  A_SQ_PSN = 1 << 9,
  A_DEST = 1 << 10,
  A_ACK = 1 << 11,
  A_RETRY = 1 << 12,
  A_RNR = 1 << 13,
  A_AH = 1 << 14
};

struct gid {
  uint8_t raw[16];
};
struct dev_attr {
  uint32_t max_qp, max_qp_wr, max_mr;
};
struct cq_attr {
  uint32_t size;
  struct stub_umem* umem;
  uint64_t off;
  struct stub_uar* uar;
};
struct cq {
  struct cq_attr a;
  uint32_t cqn;
};
struct qp_init {
  void *pd, *scq, *rcq;
  uint32_t sq_wr, rq_wr, sges, type;
  struct stub_umem *umem, *dbr_umem;
  uint64_t off, dbr_off;
  struct stub_uar* uar;
};
struct qp {
  struct qp_init a;
  uint32_t qpn;
  int state;
};
struct ah {
  int type;
  uint8_t gid[16];
  uint32_t dlid;
  uint8_t sgid, hop;
};
struct qp_attr {
  int next, cur, mtu, write, read, atomic;
  uint32_t rq_psn, sq_psn, dest;
  struct ah* ah;
  uint16_t pkey, port, ack, retry, rnr, min_rnr;
  uint8_t rd, dest_rd;
};

static uint32_t next_qpn = KINET_STUB_QPN_BASE, next_cqn = KINET_STUB_CQN_BASE;

#ifdef STUB_LINKED
int kinet_stub_common_ping(void); /* in libdoca_common.so.2, this library's dependency */
#endif
STUB_EXPORT int doca_verbs_bridge_verbs_context_import(void* ctx, uint32_t flags, void** vctx) {
  STUB_ENTER();
  if (!ctx || flags || !vctx) return 6;
#ifdef STUB_LINKED
  if (kinet_stub_common_ping() != 42) return 22;
#endif
  *vctx = stub_new(8);
  ++kinet_stub_stats.ctx_import;
  return 0;
}
STUB_EXPORT int doca_verbs_context_destroy(void* vctx) {
  STUB_ENTER();
  stub_free(vctx);
  ++kinet_stub_stats.ctx_destroy;
  return 0;
}
STUB_EXPORT int doca_verbs_bridge_verbs_pd_import(void* pd, void** vpd) {
  STUB_ENTER();
  if (!pd || !vpd) return 6;
  *vpd = stub_new(8);
  ++kinet_stub_stats.pd_import;
  return 0;
}
STUB_EXPORT int doca_verbs_pd_destroy(void* vpd) {
  STUB_ENTER();
  stub_free(vpd);
  ++kinet_stub_stats.pd_destroy;
  return 0;
}
STUB_EXPORT int doca_verbs_bridge_verbs_query_device(void* ctx, void** attr) {
  STUB_ENTER();
  if (!ctx || !attr) return 6;
  struct dev_attr* a = stub_new(sizeof *a);
  a->max_qp = 4096, a->max_qp_wr = KINET_STUB_MAX_QP_WR, a->max_mr = 65536;
#ifdef STUB_MAX_QP_WR
  a->max_qp_wr = STUB_MAX_QP_WR;
#endif
  *attr = a;
  ++kinet_stub_stats.query_device;
  return 0;
}
STUB_EXPORT int doca_verbs_device_attr_free(void* a) {
  STUB_ENTER();
  stub_free(a);
  return 0;
}
STUB_EXPORT uint32_t doca_verbs_device_attr_get_max_qp(const void* a) {
  ++kinet_stub_stats.calls;
  return ((const struct dev_attr*)a)->max_qp;
}
STUB_EXPORT uint32_t doca_verbs_device_attr_get_max_qp_wr(const void* a) {
  ++kinet_stub_stats.calls;
  return ((const struct dev_attr*)a)->max_qp_wr;
}
STUB_EXPORT uint32_t doca_verbs_device_attr_get_max_mr(const void* a) {
  ++kinet_stub_stats.calls;
  return ((const struct dev_attr*)a)->max_mr;
}

/* ---- CQ ---- */
STUB_EXPORT int doca_verbs_cq_attr_create(void** a) {
  STUB_ENTER();
  *a = stub_new(sizeof(struct cq_attr));
  return 0;
}
STUB_EXPORT int doca_verbs_cq_attr_destroy(void* a) {
  STUB_ENTER();
  stub_free(a);
  return 0;
}
STUB_EXPORT int doca_verbs_cq_attr_set_cq_size(void* a, uint32_t n) {
  STUB_ENTER();
  ((struct cq_attr*)a)->size = n;
  return 0;
}
STUB_EXPORT int doca_verbs_cq_attr_set_external_umem(void* a, void* umem, uint64_t off) {
  STUB_ENTER();
  ((struct cq_attr*)a)->umem = umem, ((struct cq_attr*)a)->off = off;
  return 0;
}
STUB_EXPORT int doca_verbs_cq_attr_set_external_uar(void* a, void* uar) {
  STUB_ENTER();
  ((struct cq_attr*)a)->uar = uar;
  return 0;
}
STUB_EXPORT int doca_verbs_cq_create(void* vctx, void* attr, void** out) {
  STUB_ENTER();
  const struct cq_attr* a = attr;
  if (!vctx || !a || !out || !a->size || !a->umem || !a->uar) return 6;
  if (a->off + (uint64_t)a->size * 64 + 64 > a->umem->size) return 6; /* ring + doorbell record in the UMEM */
  struct cq* c = stub_new(sizeof *c);
  c->a = *a;
  c->cqn = next_cqn++;
  *out = c;
  kinet_stub_stats.cq_size = a->size, kinet_stub_stats.cq_umem_offset = a->off;
  ++kinet_stub_stats.cq_create;
  return 0;
}
STUB_EXPORT int doca_verbs_cq_destroy(void* c) {
  STUB_ENTER();
  stub_free(c);
  ++kinet_stub_stats.cq_destroy;
  return 0;
}
STUB_EXPORT void doca_verbs_cq_get_wq(void* cq, void** buf, uint32_t* n, uint8_t* size) {
  const struct cq* c = cq;
  ++kinet_stub_stats.calls;
  *buf = (uint8_t*)c->a.umem->addr + c->a.off, *n = c->a.size, *size = 64;
}
STUB_EXPORT void doca_verbs_cq_get_dbr_addr(void* cq, uint64_t** db, uint32_t** ci, uint32_t** arm) {
  const struct cq* c = cq;
  ++kinet_stub_stats.calls;
  /* the record follows the ring, cache-line aligned */
  uint64_t off = (c->a.off + (uint64_t)c->a.size * 64 + 63) & ~63ull;
  *ci = (uint32_t*)((uint8_t*)c->a.umem->addr + off);
  *arm = *ci + 1;
  *db = c->a.uar->reg;
}
STUB_EXPORT uint32_t doca_verbs_cq_get_cqn(const void* cq) {
  ++kinet_stub_stats.calls;
  return ((const struct cq*)cq)->cqn;
}

/* ---- QP ---- */
STUB_EXPORT int doca_verbs_qp_init_attr_create(void** a) {
  STUB_ENTER();
  *a = stub_new(sizeof(struct qp_init));
  return 0;
}
STUB_EXPORT int doca_verbs_qp_init_attr_destroy(void* a) {
  STUB_ENTER();
  stub_free(a);
  return 0;
}
#define INIT_SET(fn, field, type)       \
  STUB_EXPORT int fn(void* a, type v) { \
    STUB_ENTER();                       \
    ((struct qp_init*)a)->field = v;    \
    return 0;                           \
  }
INIT_SET(doca_verbs_qp_init_attr_set_pd, pd, void*)
INIT_SET(doca_verbs_qp_init_attr_set_send_cq, scq, void*)
INIT_SET(doca_verbs_qp_init_attr_set_receive_cq, rcq, void*)
INIT_SET(doca_verbs_qp_init_attr_set_sq_wr, sq_wr, uint32_t)
INIT_SET(doca_verbs_qp_init_attr_set_rq_wr, rq_wr, uint32_t)
INIT_SET(doca_verbs_qp_init_attr_set_send_max_sges, sges, uint32_t)
INIT_SET(doca_verbs_qp_init_attr_set_qp_type, type, uint32_t)
INIT_SET(doca_verbs_qp_init_attr_set_external_uar, uar, void*)
STUB_EXPORT int doca_verbs_qp_init_attr_set_external_umem(void* a, void* umem, uint64_t off) {
  STUB_ENTER();
  ((struct qp_init*)a)->umem = umem, ((struct qp_init*)a)->off = off;
  return 0;
}
STUB_EXPORT int doca_verbs_qp_init_attr_set_external_dbr_umem(void* a, void* umem, uint64_t off) {
  STUB_ENTER();
  ((struct qp_init*)a)->dbr_umem = umem, ((struct qp_init*)a)->dbr_off = off;
  return 0;
}
STUB_EXPORT int doca_verbs_qp_create(void* vctx, void* attr, void** out) {
  STUB_ENTER();
  const struct qp_init* a = attr;
  if (!vctx || !a || !out || !a->pd || !a->scq || !a->rcq || !a->sq_wr || !a->umem || !a->dbr_umem || !a->uar) return 6;
  if (a->sq_wr > KINET_STUB_MAX_QP_WR || a->off + (uint64_t)a->sq_wr * 64 > a->umem->size ||
      a->dbr_off + 8 > a->dbr_umem->size)
    return 6;
  struct qp* q = stub_new(sizeof *q);
  q->a = *a;
  q->qpn = next_qpn++;
  q->state = RST;
  *out = q;
  kinet_stub_stats.sq_wr = a->sq_wr, kinet_stub_stats.rq_wr = a->rq_wr, kinet_stub_stats.max_sges = a->sges;
  kinet_stub_stats.qp_type = a->type, kinet_stub_stats.sq_umem_offset = a->off;
  kinet_stub_stats.dbr_umem_offset = a->dbr_off;
  ++kinet_stub_stats.qp_create;
  return 0;
}
STUB_EXPORT int doca_verbs_qp_destroy(void* q) {
  STUB_ENTER();
  stub_free(q);
  ++kinet_stub_stats.qp_destroy;
  return 0;
}
STUB_EXPORT void doca_verbs_qp_get_wq(const void* qp, void** sq, uint32_t* sq_n, void** rq, uint32_t* rq_n,
                                      uint32_t* rwqe) {
  const struct qp* q = qp;
  ++kinet_stub_stats.calls;
  *sq = (uint8_t*)q->a.umem->addr + q->a.off, *sq_n = q->a.sq_wr, *rq = NULL, *rq_n = 0, *rwqe = 0;
#ifdef STUB_SHIFT_SQ
  *sq = (uint8_t*)*sq + 64; /* an SDK that put the ring elsewhere than asked */
#endif
}
STUB_EXPORT void* doca_verbs_qp_get_dbr_addr(const void* qp) {
  const struct qp* q = qp;
  ++kinet_stub_stats.calls;
  return (uint8_t*)q->a.dbr_umem->addr + q->a.dbr_off;
}
STUB_EXPORT void* doca_verbs_qp_get_uar_addr(const void* qp) {
  ++kinet_stub_stats.calls;
  return ((const struct qp*)qp)->a.uar->reg;
}
STUB_EXPORT uint32_t doca_verbs_qp_get_qpn(const void* qp) {
  ++kinet_stub_stats.calls;
  return ((const struct qp*)qp)->qpn;
}

#ifndef STUB_OMIT_QP_MODIFY
STUB_EXPORT int doca_verbs_qp_modify(void* qp, void* attr, int mask) {
  STUB_ENTER();
  struct qp* q = qp;
  const struct qp_attr* a = attr;
  if (!q || !a || !(mask & A_NEXT)) return 6;
  static const int need[5] = {0, A_WRITE | A_READ | A_PKEY | A_PORT, A_MTU | A_DEST | A_RQ_PSN | A_AH,
                              A_SQ_PSN | A_ACK | A_RETRY | A_RNR, 0};
  static const int from[5] = {-1, RST, INIT, RTR, -1};
  if (a->next < RST || a->next > ERR) return 6;
  if (from[a->next] >= 0 && q->state != from[a->next]) return 18;
  if ((mask & need[a->next]) != need[a->next]) return 6;
  q->state = a->next;
  struct kinet_stub_stats* s = &kinet_stub_stats;
  s->modify_mask = mask, s->next_state = a->next, s->path_mtu = a->mtu, s->atomic_mode = a->atomic;
  s->allow_write = a->write, s->allow_read = a->read, s->dest_qpn = a->dest, s->rq_psn = a->rq_psn;
  s->sq_psn = a->sq_psn, s->port_num = a->port, s->ack_timeout = a->ack, s->retry_cnt = a->retry;
  s->rnr_retry = a->rnr, s->min_rnr_timer = a->min_rnr, s->max_rd_atomic = a->rd, s->max_dest_rd_atomic = a->dest_rd;
  if (a->ah) {
    s->addr_type = a->ah->type, s->dlid = a->ah->dlid, s->sgid_index = a->ah->sgid, s->hop_limit = a->ah->hop;
    memcpy(s->gid, a->ah->gid, 16);
  }
  ++s->qp_modify;
  return 0;
}
#endif
STUB_EXPORT int doca_verbs_qp_query(void* qp, void* attr, void* init_attr, int* mask) {
  STUB_ENTER();
  if (!qp || !attr || !init_attr || !mask) return 6;
  ((struct qp_attr*)attr)->cur = ((struct qp*)qp)->state;
  *mask = 1 << 6;
  ++kinet_stub_stats.qp_query;
  return 0;
}

STUB_EXPORT int doca_verbs_qp_attr_create(void** a) {
  STUB_ENTER();
  *a = stub_new(sizeof(struct qp_attr));
  return 0;
}
STUB_EXPORT int doca_verbs_qp_attr_destroy(void* a) {
  STUB_ENTER();
  stub_free(a);
  return 0;
}
STUB_EXPORT int doca_verbs_qp_attr_get_current_state(void* a) {
  ++kinet_stub_stats.calls;
  return ((struct qp_attr*)a)->cur;
}
#define ATTR_SET(fn, field, type)       \
  STUB_EXPORT int fn(void* a, type v) { \
    STUB_ENTER();                       \
    ((struct qp_attr*)a)->field = v;    \
    return 0;                           \
  }
ATTR_SET(doca_verbs_qp_attr_set_next_state, next, int)
ATTR_SET(doca_verbs_qp_attr_set_path_mtu, mtu, int)
ATTR_SET(doca_verbs_qp_attr_set_rq_psn, rq_psn, uint32_t)
ATTR_SET(doca_verbs_qp_attr_set_sq_psn, sq_psn, uint32_t)
ATTR_SET(doca_verbs_qp_attr_set_dest_qp_num, dest, uint32_t)
ATTR_SET(doca_verbs_qp_attr_set_allow_remote_write, write, int)
ATTR_SET(doca_verbs_qp_attr_set_allow_remote_read, read, int)
ATTR_SET(doca_verbs_qp_attr_set_atomic_mode, atomic, int)
ATTR_SET(doca_verbs_qp_attr_set_pkey_index, pkey, uint16_t)
ATTR_SET(doca_verbs_qp_attr_set_port_num, port, uint16_t)
ATTR_SET(doca_verbs_qp_attr_set_ack_timeout, ack, uint16_t)
ATTR_SET(doca_verbs_qp_attr_set_retry_cnt, retry, uint16_t)
ATTR_SET(doca_verbs_qp_attr_set_rnr_retry, rnr, uint16_t)
ATTR_SET(doca_verbs_qp_attr_set_min_rnr_timer, min_rnr, uint16_t)
ATTR_SET(doca_verbs_qp_attr_set_max_rd_atomic, rd, uint8_t)
ATTR_SET(doca_verbs_qp_attr_set_max_dest_rd_atomic, dest_rd, uint8_t)
/* The QP keeps its own copy of the path (the AH may be destroyed after). */
STUB_EXPORT int doca_verbs_qp_attr_set_ah_attr(void* a, void* ah) {
  STUB_ENTER();
  struct qp_attr* qa = a;
  if (!ah) return 6;
  qa->ah = ah;
  return 0;
}

/* ---- AH ---- */
STUB_EXPORT int doca_verbs_ah_attr_create(void* vctx, void** ah) {
  STUB_ENTER();
  if (!vctx || !ah) return 6;
  *ah = stub_new(sizeof(struct ah));
  ++kinet_stub_stats.ah_create;
  return 0;
}
STUB_EXPORT int doca_verbs_ah_attr_destroy(void* ah) {
  STUB_ENTER();
  stub_free(ah);
  return 0;
}
STUB_EXPORT int doca_verbs_ah_attr_set_gid(void* ah, struct gid g) {
  STUB_ENTER();
  memcpy(((struct ah*)ah)->gid, g.raw, 16);
  return 0;
}
STUB_EXPORT int doca_verbs_ah_attr_set_addr_type(void* ah, int t) {
  STUB_ENTER();
  ((struct ah*)ah)->type = t;
  return 0;
}
STUB_EXPORT int doca_verbs_ah_attr_set_dlid(void* ah, uint32_t l) {
  STUB_ENTER();
  ((struct ah*)ah)->dlid = l;
  return 0;
}
STUB_EXPORT int doca_verbs_ah_attr_set_sgid_index(void* ah, uint8_t i) {
  STUB_ENTER();
  ((struct ah*)ah)->sgid = i;
  return 0;
}
STUB_EXPORT int doca_verbs_ah_attr_set_hop_limit(void* ah, uint8_t h) {
  STUB_ENTER();
  ((struct ah*)ah)->hop = h;
  return 0;
}
