// Registers the mlx5 provider with the core's provider registry (called once
// by the CMake-generated register_builtin()). Names it opens:
//   "mlx5_emu", "mlx5_emuN"  the provider over the software NIC's DevX entry
//                            point (CI runs the real control path this way)
//   "mlx5_*", or any name    a real ConnectX ("mlx5_0", "mlx5_bond_0", a
//   rdma-core lists          renamed "rocep23s0f0"): rdma-core loaded with
//                            dlopen (rdma_core_lib.hpp)
//   "auto"                   the first device mlx5dv supports; with none (or no
//                            rdma-core) the software NIC "emu", with a log line
//                            saying why
#include "core/log.hpp"
#include "core/provider.hpp"
#include "providers/mlx5/provider.hpp"
#if KINET_HAVE_RDMA_CORE
#include "providers/mlx5/rdma_core.hpp"
#include "providers/mlx5/rdma_core_lib.hpp"
#endif

namespace kinet::provider {
namespace {
bool mlx5_emu_matches(std::string_view n) {
  constexpr std::string_view p = "mlx5_emu";
  if (n.substr(0, p.size()) != p) return false;
  return n.substr(p.size()).find_first_not_of("0123456789") == std::string_view::npos;
}

// Whether rdma-core (when it loads) lists a device named n.
bool rdma_core_lists(std::string_view n) {
#if KINET_HAVE_RDMA_CORE
  const mlx5::RdmaCoreLib* l = mlx5::rdma_core();
  if (!l || n.empty()) return false;
  int count = 0;
  ibv_device** list = l->get_device_list(&count);
  if (!list) return false;
  bool found = false;
  for (int i = 0; i < count && !found; ++i) found = n == l->get_device_name(list[i]);
  l->free_device_list(list);
  return found;
#else
  (void)n;
  return false;
#endif
}

// "mlx5_*" always (ConnectX's own naming: a missing one then gets rdma-core's
// "no such RDMA device (present: ...)" rather than "no provider").
bool mlx5_matches(std::string_view n) {
  return n.substr(0, 5) == "mlx5_" || n == "auto" || rdma_core_lists(n);
}

std::unique_ptr<Device> open_mlx5(std::string_view n, const DeviceOptions& o) {
  if (mlx5_emu_matches(n)) return mlx5::open_emu_device(n, o);
#if KINET_HAVE_RDMA_CORE
  if (n != "auto") return mlx5::open_rdma_core_device(n);  // NotSupported when rdma-core can't load
  try {
    return mlx5::open_rdma_core_device(n);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::NotFound && e.code() != ErrorCode::NotSupported) throw;
    KINET_LOG(Info, "auto: no ConnectX device to drive (%s): using the software NIC 'emu'", e.what());
  }
#else
  if (n != "auto")
    throw Error(ErrorCode::NotSupported, std::string(n) + ": this libkinet was built without rdma-core's headers "
                                         "(infiniband/mlx5dv.h): only the software NIC is available");
  KINET_LOG(Info, "auto: this libkinet was built without rdma-core's headers: using the software NIC 'emu'");
#endif
  return Device::open("emu", o);
}
}  // namespace

void register_mlx5() {
  add({"mlx5",
       "ConnectX provider (DevX, UMEM rings, UAR doorbell): devices rdma-core lists ('mlx5_0'), 'auto' (the first "
       "ConnectX, else the software NIC), and 'mlx5_emu'/'mlx5_emuN' (over the software NIC's DevX entry point)",
       mlx5_matches, open_mlx5, "mlx5_emu"});
}
}  // namespace kinet::provider
