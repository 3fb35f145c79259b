#include "transports/link_channel.hpp"

#include "kinet/kinet.hpp"

namespace kinet::transport {
// Placeholder until the link channels land: not available yet.
std::unique_ptr<Channel> make_tcp_channel(const TransportOptions&, uint64_t) {
  throw Error(ErrorCode::NotSupported, "transport tcp: not implemented yet");
}
std::unique_ptr<Channel> make_shm_channel(const TransportOptions&, uint64_t) {
  throw Error(ErrorCode::NotSupported, "transport shm: not implemented yet");
}
}  // namespace kinet::transport
