// Registers the "ucx" channel with Transport::open() (transports/registry.hpp).
#include "transports/registry.hpp"
#include "transports/ucx/ucx_channel.hpp"

namespace kinet::transport {

void register_ucx_channel() {
  register_channel("ucx", [](const TransportOptions& o, uint64_t node) -> std::unique_ptr<Channel> {
    return ucx::make_channel(node, o.name.empty() ? std::string("ucx") : o.name);
  });
}

}  // namespace kinet::transport
