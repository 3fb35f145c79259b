// kinet transports — the registry of channel factories behind
// Transport::open() (transport.cpp). Backends register theirs from a function
// register_<name>_channel() that transport.cpp calls once, under
// KINET_HAVE_<NAME>; the built-in ones (loop, tcp, shm) are always there.
#pragma once
#include <cstdint>
#include <memory>

#include "kinet/transport.hpp"
#include "transports/channel.hpp"

namespace kinet::transport {

// Makes the channel of one Transport whose random node id is `node`. Throws
// kinet::Error NotSupported (with the library's reason) when the backend
// can't start here.
using ChannelFactory = std::unique_ptr<Channel> (*)(const TransportOptions&, uint64_t node);

// Adds or replaces `name` (a string literal: kept by pointer). Thread-safe.
void register_channel(const char* name, ChannelFactory f);

// Backends' registration hooks (defined in their directories).
void register_ucx_channel();
void register_ofi_channel();

}  // namespace kinet::transport
