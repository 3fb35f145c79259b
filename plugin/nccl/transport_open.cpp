// kinet NCCL plugin — the one call that creates a Transport.
#include "common.hpp"

namespace kinet::nccl {

std::unique_ptr<Transport> open_transport(const std::string& name) {
  TransportOptions opt;
  opt.name = name;
  return Transport::open(opt);
}

}  // namespace kinet::nccl
