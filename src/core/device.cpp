#include <string>

#include "core/provider.hpp"
#include "kinet/kinet.hpp"

namespace kinet {
std::unique_ptr<Device> Device::open(std::string_view name, const DeviceOptions& opt) {
  std::string known;
  for (const provider::Provider& p : provider::all()) {
    if (p.matches(name)) return p.open(name, opt);
    known += known.empty() ? "" : "; ";
    known += std::string(p.name) + ": " + p.description;
  }
  throw Error(ErrorCode::NotFound, "no RDMA device named '" + std::string(name) + "': no registered provider claims it (" +
                                       (known.empty() ? std::string("none registered") : known) +
                                       "); kinet-info lists what this machine has");
}
}  // namespace kinet
