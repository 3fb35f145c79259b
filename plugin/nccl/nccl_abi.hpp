// kinet NCCL plugin — the binary interface NCCL 2.28 expects from a network
// plugin library: the v11 net table (`ncclNetPlugin_v11`) and the v11 GIN
// table (`ncclGinPlugin_v11`). NCCL does not install these headers, so the
// types are declared here from the facts of NCCL v2.28.9-1's
// src/include/plugin/nccl_net.h, src/include/plugin/net/net_v11.h,
// src/include/nccl_common.h and src/include/nccl_device/net_device.h (read at
// tag v2.28.9-1). Only the shape matters to NCCL: field order, types, sizes.
// The sizes and offsets asserted below follow from those field lists under
// the x86-64 / aarch64 LP64 ABI (8-byte pointers and size_t, 4-byte int,
// float and enum); each group says which declaration it comes from.
#pragma once
#include <cstddef>
#include <cstdint>

namespace kinet::nccl {

// nccl.h: ncclResult_t (also in the installed /usr/local/cuda/include/nccl.h,
// checked in abi_check.cpp when that header is present).
enum Result : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
};

// nccl_common.h: ncclDebugLogLevel and the subsystem bits of ncclDebugLogSubSys.
enum LogLevel : int { kLogNone = 0, kLogVersion = 1, kLogWarn = 2, kLogInfo = 3, kLogAbort = 4, kLogTrace = 5 };
constexpr unsigned long kSubsysInit = 0x1, kSubsysNet = 0x10;
// nccl_common.h: ncclDebugLogger_t (printf-style, called with file and line).
using Logger = void (*)(LogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...);
// nccl_common.h: ncclProfilerCallback_t; kinet never calls it.
using ProfilerCallback = Result (*)(void** event, int type, void* parent, int64_t plugin_id, void* data);

// nccl_net.h constants.
constexpr size_t kHandleMaxSize = 128;      // NCCL_NET_HANDLE_MAXSIZE
constexpr int kPtrHost = 0x1;               // NCCL_PTR_HOST
constexpr int kPtrCuda = 0x2;               // NCCL_PTR_CUDA
constexpr int kPtrDmaBuf = 0x4;             // NCCL_PTR_DMABUF
constexpr uint64_t kMrFlagForceSo = 1;      // NCCL_NET_MR_FLAG_FORCE_SO
constexpr uint32_t kSignalOpInc = 1;        // NCCL_NET_SIGNAL_OP_INC
constexpr uint32_t kSignalOpAdd = 2;        // NCCL_NET_SIGNAL_OP_ADD
constexpr int kMaxRequests = 32;            // NCCL_NET_MAX_REQUESTS (per comm)
constexpr int kMaxDevsPerNic = 4;           // NCCL_NET_MAX_DEVS_PER_NIC
constexpr size_t kMaxNetSize = 1ull << 30;  // MAX_NET_SIZE (what NCCL's own plugins report)

// net_device.h: ncclNetDeviceType.
enum DeviceType : int { kDeviceHost = 0, kDeviceUnpack = 1, kDeviceGinProxy = 2, kDeviceGinGdaki = 3 };

// net_device.h: ncclNetDeviceHandle_v7_t .. _v11_t (one layout).
struct DeviceHandle {
  DeviceType type;
  int version;
  void* handle;
  size_t size;
  int needs_proxy_progress;
};
static_assert(sizeof(DeviceHandle) == 32 && offsetof(DeviceHandle, handle) == 8 &&
              offsetof(DeviceHandle, size) == 16 && offsetof(DeviceHandle, needs_proxy_progress) == 24);

// net_v11.h: ncclNetVDeviceProps_v11_t.
struct VDeviceProps {
  int ndevs;
  int devs[kMaxDevsPerNic];
};
static_assert(sizeof(VDeviceProps) == 20);

// net_v11.h: ncclNetCommConfig_v11_t (a traffic class, -1 = undefined).
struct CommConfig {
  int traffic_class;
};
static_assert(sizeof(CommConfig) == 4);

// net_v11.h: ncclNetProperties_v11_t, shared by net, collnet and GIN.
struct Properties {
  char* name;
  char* pci_path;               // NULL: not a PCI device (NCCL attaches it to the first CPU)
  uint64_t guid;
  int ptr_support;              // kPtr* bits
  int reg_is_global;
  int force_flush;
  int speed;                    // Mbps
  int port;
  float latency;                // us
  int max_comms;
  int max_recvs;                // grouped receives; GIN: proxy queue = 32 * max_recvs
  DeviceType net_device_type;
  int net_device_version;
  VDeviceProps vprops;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
  int max_multi_request_size;
};
static_assert(offsetof(Properties, pci_path) == 8 && offsetof(Properties, guid) == 16 &&
              offsetof(Properties, ptr_support) == 24 && offsetof(Properties, latency) == 44 &&
              offsetof(Properties, max_recvs) == 52 && offsetof(Properties, net_device_type) == 56 &&
              offsetof(Properties, vprops) == 64 && offsetof(Properties, max_p2p_bytes) == 88 &&
              offsetof(Properties, max_coll_bytes) == 96 && offsetof(Properties, max_multi_request_size) == 104 &&
              sizeof(Properties) == 112);

// net_v11.h: ncclNetCommAttr_v11_t and ncclNetAttr_v11_t (setNetAttr hints).
struct CommAttr {
  int32_t max_concurrent_peers, min_concurrent_peers, max_flows_per_peer, min_flows_per_peer;
};
struct NetAttr {
  CommAttr send, recv;
  uint32_t op, algo, proto;
};
static_assert(sizeof(NetAttr) == 44);

// net_v11.h: ncclNet_v11_t, exported as `ncclNetPlugin_v11`. Contracts NCCL
// relies on: connect/accept never block (return a NULL comm and are called
// again); isend/irecv may return a NULL request ("try again"); test reports
// done and the sizes.
struct NetV11 {
  const char* name;
  Result (*init)(void** ctx, uint64_t comm_id, CommConfig* config, Logger log, ProfilerCallback prof);
  Result (*devices)(int* ndev);
  Result (*get_properties)(int dev, Properties* props);
  Result (*listen)(void* ctx, int dev, void* handle, void** listen_comm);
  Result (*connect)(void* ctx, int dev, void* handle, void** send_comm, DeviceHandle** send_dev_comm);
  Result (*accept)(void* listen_comm, void** recv_comm, DeviceHandle** recv_dev_comm);
  Result (*reg_mr)(void* comm, void* data, size_t size, int type, void** mhandle);
  Result (*reg_mr_dma_buf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  Result (*dereg_mr)(void* comm, void* mhandle);
  Result (*isend)(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  Result (*irecv)(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                  void** request);
  Result (*iflush)(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
  Result (*test)(void* request, int* done, int* sizes);
  Result (*close_send)(void* send_comm);
  Result (*close_recv)(void* recv_comm);
  Result (*close_listen)(void* listen_comm);
  Result (*get_device_mr)(void* comm, void* mhandle, void** dptr_mhandle);
  Result (*irecv_consumed)(void* recv_comm, int n, void* request);
  Result (*make_vdevice)(int* d, VDeviceProps* props);
  Result (*finalize)(void* ctx);
  Result (*set_net_attr)(void* ctx, NetAttr* attr);
};
static_assert(sizeof(NetV11) == 22 * sizeof(void*) && offsetof(NetV11, isend) == 10 * sizeof(void*) &&
              offsetof(NetV11, test) == 13 * sizeof(void*) && offsetof(NetV11, set_net_attr) == 21 * sizeof(void*));

// net_v11.h: ncclGin_v11_t, exported as `ncclGinPlugin_v11` (2.28 finds GIN
// only in the net plugin's library). In PROXY mode NCCL 2.28.9 never calls
// createContext / destroyContext / queryLastError (it keeps its own context),
// ignores the result of test() and ginProgress(), and treats a failed iput /
// iputSignal as fatal for the communicator.
struct GinV11 {
  const char* name;
  Result (*init)(void** ctx, uint64_t comm_id, Logger log);
  Result (*devices)(int* ndev);
  Result (*get_properties)(int dev, Properties* props);
  Result (*listen)(void* ctx, int dev, void* handle, void** listen_comm);
  Result (*connect)(void* ctx, void* handles[], int nranks, int rank, void* listen_comm, void** coll_comm);
  Result (*create_context)(void* coll_comm, int nsignals, int ncounters, void** gin_ctx, DeviceHandle** dev_handle);
  Result (*reg_mr_sym)(void* coll_comm, void* data, size_t size, int type, uint64_t mr_flags, void** mhandle,
                       void** gin_handle);
  Result (*reg_mr_sym_dma_buf)(void* coll_comm, void* data, size_t size, int type, uint64_t offset, int fd,
                               uint64_t mr_flags, void** mhandle, void** gin_handle);
  Result (*dereg_mr_sym)(void* coll_comm, void* mhandle);
  Result (*destroy_context)(void* gin_ctx);
  Result (*close_coll)(void* coll_comm);
  Result (*close_listen)(void* listen_comm);
  Result (*iput)(void* coll_comm, uint64_t src_off, void* src_mhandle, size_t size, uint64_t dst_off,
                 void* dst_mhandle, uint32_t rank, void** request);
  Result (*iput_signal)(void* coll_comm, uint64_t src_off, void* src_mhandle, size_t size, uint64_t dst_off,
                        void* dst_mhandle, uint32_t rank, uint64_t signal_off, void* signal_mhandle,
                        uint64_t signal_value, uint32_t signal_op, void** request);
  Result (*test)(void* coll_comm, void* request, int* done);
  Result (*gin_progress)(void* coll_comm);
  Result (*query_last_error)(void* gin_ctx, bool* has_error);
  Result (*finalize)(void* ctx);
};
static_assert(sizeof(GinV11) == 19 * sizeof(void*) && offsetof(GinV11, connect) == 5 * sizeof(void*) &&
              offsetof(GinV11, reg_mr_sym) == 7 * sizeof(void*) && offsetof(GinV11, iput) == 13 * sizeof(void*) &&
              offsetof(GinV11, test) == 15 * sizeof(void*) && offsetof(GinV11, finalize) == 18 * sizeof(void*));

static_assert(sizeof(void*) == 8 && sizeof(size_t) == 8 && sizeof(int) == 4 && sizeof(DeviceType) == 4,
              "the layouts above are those of an LP64 ABI");

}  // namespace kinet::nccl
