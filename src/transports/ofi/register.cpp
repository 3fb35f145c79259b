// Registers the libfabric channel with the transport registry (called from
// transport.cpp under KINET_HAVE_OFI).
#include "transports/ofi/ofi_channel.hpp"
#include "transports/registry.hpp"

namespace kinet::transport {
void register_ofi_channel() { register_channel("ofi", &ofi::make_ofi_channel); }
}  // namespace kinet::transport
