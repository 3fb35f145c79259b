// kinet — the DOCA SDK entry points SDK mode calls, declared here (no DOCA
// header is needed to build kinet; the libraries are loaded with dlopen).
//
// Where the facts come from (read through the search tools, nothing copied):
//  - Names and C signatures as the closed SDK exports them: the function-pointer
//    types NVIDIA's open-source GPUNetIO v3.0.0 (github NVIDIA-DOCA/gpunetio,
//    commit aa2ae97) resolves with dlsym when DOCA_SDK_LIB_PATH is set:
//    src/doca_verbs_dev_sdk_wrapper.cpp (doca_rdma_bridge_open_dev_from_pd,
//    doca_dev_close), src/doca_verbs_qp_sdk_wrapper.cpp (doca_verbs_qp_*,
//    doca_verbs_ah_attr_*, the bridge imports), src/doca_verbs_cq_sdk_wrapper.cpp
//    (doca_verbs_cq_*), src/doca_verbs_umem_sdk_wrapper.cpp (doca_umem_*),
//    src/doca_verbs_uar_sdk_wrapper.cpp (doca_uar_*),
//    src/doca_gpunetio_sdk_wrapper.cpp (doca_gpu_create/destroy). Its later
//    dev wrapper adds doca_verbs_pd_destroy and doca_verbs_context_destroy.
//    Note the SDK getters differ from the open headers: doca_verbs_qp_get_qpn,
//    doca_verbs_cq_get_cqn return the number; doca_verbs_qp_get_wq,
//    doca_verbs_cq_get_wq/get_dbr_addr return void; doca_verbs_qp_create and
//    doca_verbs_cq_create take a doca_verbs_context, not a doca_dev.
//  - Which library exports what: the same wrappers look doca_rdma_bridge_*,
//    doca_dev_close, doca_umem_* and doca_uar_* up in libdoca_common.so,
//    doca_verbs_* in libdoca_verbs.so, doca_gpu_* in libdoca_gpunetio.so.
//  - doca_verbs_bridge_verbs_query_device: the SDK header doca_verbs_bridge.h;
//    the device-attribute getters: doca_verbs.h of the same repository.
//  - Enum and mask values (QP states, MTU, atomic mode, address type, UAR
//    type, DOCA_VERBS_QP_ATTR_* bits): include/host/doca_verbs.h of that
//    repository; its SDK wrappers pass them to the SDK unchanged, so they are
//    the SDK's values. doca_error_t's values: include/host/doca_error.h.
//  - doca_error_get_name / doca_error_get_descr (const char* from a
//    doca_error_t): DOCA Core (docs.nvidia.com/doca/sdk "DOCA Core", doca_error.h),
//    exported by libdoca_common.so; optional here.
#pragma once
#include <cstddef>
#include <cstdint>

struct ibv_context;
struct ibv_pd;

namespace kinet::doca::api {

using doca_error_t = int;  // a C enum; 0 = DOCA_SUCCESS
inline constexpr doca_error_t kSuccess = 0;
inline constexpr doca_error_t kErrNotPermitted = 2, kErrInUse = 3, kErrNotSupported = 4, kErrAgain = 5,
                              kErrInvalidValue = 6, kErrNoMemory = 7, kErrBadState = 18, kErrFull = 24,
                              kErrDriver = 21;

// Every DOCA object is opaque: kinet only passes the pointers back.
using Obj = void*;

enum QpState : int { kQpRst = 0, kQpInit = 1, kQpRtr = 2, kQpRts = 3, kQpErr = 4 };
enum Mtu : int { kMtu256 = 0, kMtu512 = 1, kMtu1K = 2, kMtu2K = 3, kMtu4K = 4 };
enum AtomicMode : int { kAtomicNone = 0, kAtomicUpTo8Bytes = 3 };
enum AddrType : int { kAddrIpv4 = 0, kAddrIpv6 = 1, kAddrIbGrh = 2, kAddrIbNoGrh = 3 };
enum UarType : int { kUarBlueflame = 0, kUarNoncache = 1 };
inline constexpr uint32_t kQpTypeRc = 0;
// doca_verbs_qp_modify's attr_mask bits (DOCA_VERBS_QP_ATTR_*).
enum QpAttrMask : int {
  kAttrAllowRemoteWrite = 1 << 0,
  kAttrAllowRemoteRead = 1 << 1,
  kAttrPkeyIndex = 1 << 2,
  kAttrMinRnrTimer = 1 << 3,
  kAttrPortNum = 1 << 4,
  kAttrNextState = 1 << 5,
  kAttrCurrentState = 1 << 6,
  kAttrPathMtu = 1 << 7,
  kAttrRqPsn = 1 << 8,
  kAttrSqPsn = 1 << 9,
  kAttrDestQpNum = 1 << 10,
  kAttrAckTimeout = 1 << 11,
  kAttrRetryCnt = 1 << 12,
  kAttrRnrRetry = 1 << 13,
  kAttrAhAttr = 1 << 14,
  kAttrAtomicMode = 1 << 15,
  kAttrMaxQpRdAtomic = 1 << 16,
  kAttrMaxDestRdAtomic = 1 << 17,
};
struct Gid {  // struct doca_verbs_gid, passed by value
  uint8_t raw[16];
};

// The libraries, in load order (libdoca_verbs and libdoca_gpunetio depend on
// libdoca_common).
enum class Lib : uint8_t { Common, Verbs, Gpunetio };
inline constexpr int kLibCount = 3;
inline constexpr const char* kLibFile[kLibCount] = {"libdoca_common.so", "libdoca_verbs.so", "libdoca_gpunetio.so"};

// Every entry point SDK mode uses. All are required except those marked
// optional in the symbol table (sdk.cpp).
struct Fns {
  // libdoca_common: errors, device from a PD, UMEM, UAR.
  const char* (*error_get_name)(doca_error_t);   // optional
  const char* (*error_get_descr)(doca_error_t);  // optional
  doca_error_t (*rdma_bridge_open_dev_from_pd)(ibv_pd* pd, Obj* dev);
  doca_error_t (*dev_close)(Obj dev);
  doca_error_t (*umem_create)(Obj dev, void* addr, size_t size, uint32_t access, Obj* umem);
  doca_error_t (*umem_destroy)(Obj umem);
  doca_error_t (*uar_create)(Obj dev, int type, Obj* uar);
  doca_error_t (*uar_destroy)(Obj uar);
  doca_error_t (*uar_reg_addr_get)(Obj uar, void** reg);

  // libdoca_verbs: bridge imports, device attributes, CQ, QP, AH.
  doca_error_t (*verbs_context_import)(ibv_context* ctx, uint32_t flags, Obj* vctx);
  doca_error_t (*verbs_context_destroy)(Obj vctx);
  doca_error_t (*verbs_pd_import)(ibv_pd* pd, Obj* vpd);
  doca_error_t (*verbs_pd_destroy)(Obj vpd);
  doca_error_t (*verbs_query_device)(ibv_context* ctx, Obj* attr);
  doca_error_t (*device_attr_free)(Obj attr);
  uint32_t (*device_attr_get_max_qp)(const void* attr);
  uint32_t (*device_attr_get_max_qp_wr)(const void* attr);
  uint32_t (*device_attr_get_max_mr)(const void* attr);

  doca_error_t (*cq_attr_create)(Obj* attr);
  doca_error_t (*cq_attr_destroy)(Obj attr);
  doca_error_t (*cq_attr_set_cq_size)(Obj attr, uint32_t n);
  doca_error_t (*cq_attr_set_external_umem)(Obj attr, Obj umem, uint64_t offset);
  doca_error_t (*cq_attr_set_external_uar)(Obj attr, Obj uar);
  doca_error_t (*cq_create)(Obj vctx, Obj attr, Obj* cq);
  doca_error_t (*cq_destroy)(Obj cq);
  void (*cq_get_wq)(Obj cq, void** buf, uint32_t* n, uint8_t* cqe_size);
  void (*cq_get_dbr_addr)(Obj cq, uint64_t** uar_db, uint32_t** ci_dbr, uint32_t** arm_dbr);
  uint32_t (*cq_get_cqn)(const void* cq);

  doca_error_t (*qp_init_attr_create)(Obj* attr);
  doca_error_t (*qp_init_attr_destroy)(Obj attr);
  doca_error_t (*qp_init_attr_set_pd)(Obj attr, Obj vpd);
  doca_error_t (*qp_init_attr_set_send_cq)(Obj attr, Obj cq);
  doca_error_t (*qp_init_attr_set_receive_cq)(Obj attr, Obj cq);
  doca_error_t (*qp_init_attr_set_sq_wr)(Obj attr, uint32_t n);
  doca_error_t (*qp_init_attr_set_rq_wr)(Obj attr, uint32_t n);
  doca_error_t (*qp_init_attr_set_send_max_sges)(Obj attr, uint32_t n);
  doca_error_t (*qp_init_attr_set_qp_type)(Obj attr, uint32_t type);
  doca_error_t (*qp_init_attr_set_external_umem)(Obj attr, Obj umem, uint64_t offset);
  doca_error_t (*qp_init_attr_set_external_dbr_umem)(Obj attr, Obj umem, uint64_t offset);
  doca_error_t (*qp_init_attr_set_external_uar)(Obj attr, Obj uar);
  doca_error_t (*qp_create)(Obj vctx, Obj init_attr, Obj* qp);
  doca_error_t (*qp_destroy)(Obj qp);
  doca_error_t (*qp_modify)(Obj qp, Obj attr, int mask);
  doca_error_t (*qp_query)(Obj qp, Obj attr, Obj init_attr, int* mask);
  void (*qp_get_wq)(const void* qp, void** sq, uint32_t* sq_n, void** rq, uint32_t* rq_n, uint32_t* rwqe_size);
  void* (*qp_get_dbr_addr)(const void* qp);
  void* (*qp_get_uar_addr)(const void* qp);
  uint32_t (*qp_get_qpn)(const void* qp);

  doca_error_t (*qp_attr_create)(Obj* attr);
  doca_error_t (*qp_attr_destroy)(Obj attr);
  doca_error_t (*qp_attr_set_next_state)(Obj attr, int state);
  int (*qp_attr_get_current_state)(Obj attr);
  doca_error_t (*qp_attr_set_path_mtu)(Obj attr, int mtu);
  doca_error_t (*qp_attr_set_rq_psn)(Obj attr, uint32_t psn);
  doca_error_t (*qp_attr_set_sq_psn)(Obj attr, uint32_t psn);
  doca_error_t (*qp_attr_set_dest_qp_num)(Obj attr, uint32_t qpn);
  doca_error_t (*qp_attr_set_allow_remote_write)(Obj attr, int allow);
  doca_error_t (*qp_attr_set_allow_remote_read)(Obj attr, int allow);
  doca_error_t (*qp_attr_set_atomic_mode)(Obj attr, int mode);
  doca_error_t (*qp_attr_set_ah_attr)(Obj attr, Obj ah);
  doca_error_t (*qp_attr_set_pkey_index)(Obj attr, uint16_t index);
  doca_error_t (*qp_attr_set_port_num)(Obj attr, uint16_t port);
  doca_error_t (*qp_attr_set_ack_timeout)(Obj attr, uint16_t timeout);
  doca_error_t (*qp_attr_set_retry_cnt)(Obj attr, uint16_t n);
  doca_error_t (*qp_attr_set_rnr_retry)(Obj attr, uint16_t n);
  doca_error_t (*qp_attr_set_min_rnr_timer)(Obj attr, uint16_t t);
  doca_error_t (*qp_attr_set_max_rd_atomic)(Obj attr, uint8_t n);
  doca_error_t (*qp_attr_set_max_dest_rd_atomic)(Obj attr, uint8_t n);

  doca_error_t (*ah_attr_create)(Obj vctx, Obj* ah);
  doca_error_t (*ah_attr_destroy)(Obj ah);
  doca_error_t (*ah_attr_set_gid)(Obj ah, Gid gid);
  doca_error_t (*ah_attr_set_addr_type)(Obj ah, int type);
  doca_error_t (*ah_attr_set_dlid)(Obj ah, uint32_t dlid);
  doca_error_t (*ah_attr_set_sgid_index)(Obj ah, uint8_t index);
  doca_error_t (*ah_attr_set_hop_limit)(Obj ah, uint8_t hops);

  // libdoca_gpunetio: the GPU handler a GPU-posted QP is exported through.
  doca_error_t (*gpu_create)(const char* pcie_bdf, Obj* gpu);
  doca_error_t (*gpu_destroy)(Obj gpu);

  // A stand-in SDK built by kinet's tests exports this; no real SDK does
  // (optional; see provider.cpp for what it allows).
  const char* (*kinet_standin)();
};
}  // namespace kinet::doca::api
