// kinet transports, ucx — a Channel over UCX active messages (UCP, loaded
// with dlopen from libucp.so.0; see ucx_lib.hpp).
//
// One UCP context and one worker (AM feature, single-thread mode; the channel
// serialises its own calls with a mutex). address() = a 24-byte kinet header
// (magic "KUCX", version, this side's node id, the UCP address length) + the
// UCP worker address. add_peer() creates an endpoint with peer error handling:
// UCX's error callback becomes on_peer_lost. send() is one ucp_am_send_nbx
// with a 24-byte AM header (magic, version, prefix length, the sender's node
// id, a per-peer sequence number); a two-part message whose first part is
// at most 128 bytes (the engine's header) carries that part in the AM header
// after it and sends the second contiguously, so UCX can use its zero-copy
// rendezvous; other multi-part messages use UCX's iov datatype. The
// receiver hands the parts to on_message_parts(). It maps the node id to a
// peer (unknown -> on_stranger) and delivers each peer's messages in sequence
// order, so ordered() is true whatever UCX does (UCX documents ordering for
// its tag API, not for AM, and a rendezvous message completes after eager
// messages sent behind it). Eager data is delivered from UCX's buffer;
// rendezvous data is fetched with ucp_am_recv_data_nbx straight into the
// target region when the engine places it (ChannelEvents::place_body: a
// put that passes the target's check, every earlier undelivered message of
// its sender placed too, started once nothing earlier that it overlaps is
// still to land: a running placed fetch, a placed body queued before it, or
// the signal word of an earlier undelivered put_signal), else into a pooled
// buffer first. A body that waits holds back only the ones that overlap it.
//
// Environment: every UCX_* variable passes through to UCX. The ones that
// matter: UCX_TLS (transports, e.g. "tcp", "shm", "rc,sm"; default all),
// UCX_NET_DEVICES (e.g. "eth0", "mlx5_0:1"), UCX_RNDV_THRESH (eager vs
// rendezvous size), UCX_KEEPALIVE_INTERVAL (how fast a silent dead peer is
// found; kinet makes it 1s unless the variable is set: UCX's 20s default is
// too slow for a peer timeout).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "transports/channel.hpp"
#include "transports/ucx/ucx_lib.hpp"

namespace kinet::transport::ucx {

// max_message(): 1 MiB of payload plus the engine's header (a 1 MiB put is
// one message); the engine splits larger transfers.
inline constexpr size_t kMaxMessage = (size_t{1} << 20) + 128;
inline constexpr size_t kSendSlots = 1024;              // sends in flight before send() returns false
// Bytes of one peer's messages the channel holds in memory while they wait
// for their turn (KINET_UCX_MAX_HELD_BYTES, at least kMaxMessage). An honest
// sender's stay below 64 MiB + its eager burst: at most 64 rendezvous fetches
// run at once, and in-order messages go at the next progress().
inline constexpr size_t kDefaultMaxHeld = size_t{256} << 20;

// Opens a UCX channel named `name` with node id `node` (non-zero). Throws
// kinet::Error NotSupported when `lib` can't be loaded or lacks a symbol
// ("ucx: libucp.so.0 could not be loaded (...)") or UCX can't start (UCX's
// reason), InvalidArgument for node 0 or a KINET_UCX_MAX_HELD_BYTES below
// kMaxMessage.
std::unique_ptr<Channel> make_channel(uint64_t node, const std::string& name, const char* lib = kLibucp);

}  // namespace kinet::transport::ucx
