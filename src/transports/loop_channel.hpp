// kinet transports — the "loop" channel: Transports of one process reach each
// other through a process-wide table (tests, and the proxy's single-process
// mode). An address is 12 bytes: "KNL1" then the channel's u64 id
// (little-endian), never reused in the process. Ordered; a message is copied
// into the target's inbox at send(); an inbox over kLoopInboxBytes refuses
// more (send() returns false). A destroyed channel is reported lost to every
// channel that added it ("peer lost: loop channel N closed").
#pragma once
#include <memory>

#include "transports/channel.hpp"

namespace kinet::transport {

inline constexpr size_t kLoopMaxMessage = size_t{1} << 20;
inline constexpr size_t kLoopInboxBytes = size_t{64} << 20;

std::unique_ptr<Channel> make_loop_channel();

}  // namespace kinet::transport
