// kinet transports — the "tcp" and "shm" channels over kinet's fabric links
// (src/fabric/tcp_link.*, shm_link.*): one link per peer, a listener for the
// peers that connect to us.
#pragma once
#include <cstdint>
#include <memory>

#include "kinet/transport.hpp"
#include "transports/channel.hpp"

namespace kinet::transport {

std::unique_ptr<Channel> make_tcp_channel(const TransportOptions& opt, uint64_t node);
std::unique_ptr<Channel> make_shm_channel(const TransportOptions& opt, uint64_t node);

}  // namespace kinet::transport
