// kinet NCCL plugin — the one call that creates a Transport. Built with
// KINET_NCCL_NO_ENGINE while this tree has no transport engine
// (src/transports/*.cpp): every connect then fails with that reason.
#include "common.hpp"

namespace kinet::nccl {

std::unique_ptr<Transport> open_transport(const std::string& name) {
#ifdef KINET_NCCL_NO_ENGINE
  throw Error(ErrorCode::NotSupported,
              "kinet transport for '" + name + "': this build of kinet has no transport engine (src/transports)");
#else
  TransportOptions opt;
  opt.name = name;
  return Transport::open(opt);
#endif
}

}  // namespace kinet::nccl
