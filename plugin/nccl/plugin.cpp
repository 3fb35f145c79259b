// kinet NCCL plugin — the two symbols NCCL 2.28 looks up in
// libnccl-net-kinet.so (NCCL_NET_PLUGIN=kinet), and the properties of
// kinet's one device.
#include <atomic>

#include "gin.hpp"

namespace kinet::nccl {

void fill_properties(Properties* p, DeviceType type) {
  static char name[] = "kinet";
  *p = Properties{};
  p->name = name;
  p->pci_path = nullptr;           // not a PCI device: NCCL attaches it to the first CPU
  p->guid = 0x6b696e6574ull;       // "kinet"
  p->ptr_support = type == kDeviceHost ? (net_takes_cuda() ? kPtrHost | kPtrCuda : kPtrHost) : (kPtrHost | kPtrCuda);
  p->reg_is_global = 0;
  p->force_flush = 0;
  p->speed = 100000;               // Mbps; a nominal figure for NCCL's topology search
  p->port = 1;
  p->latency = 0;
  p->max_comms = 65536;
  p->max_recvs = 1;                // GIN: proxy queue of 32 descriptors per peer
  p->net_device_type = type;
  p->net_device_version = 0;
  p->vprops.ndevs = 1;
  p->vprops.devs[0] = 0;
  p->max_p2p_bytes = kMaxNetSize;
  p->max_coll_bytes = kMaxNetSize;
  p->max_multi_request_size = 1;
}

}  // namespace kinet::nccl

// Copies of the tables under NCCL's symbol names: C linkage, writable (NCCL
// gets a plain pointer), the only symbols the library exports (exports.map).
extern "C" {
__attribute__((visibility("default"))) kinet::nccl::NetV11 ncclNetPlugin_v11 = kinet::nccl::kNetV11;
__attribute__((visibility("default"))) kinet::nccl::GinV11 ncclGinPlugin_v11 = kinet::nccl::kGinV11;
}
