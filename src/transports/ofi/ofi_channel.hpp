// kinet transports — the libfabric channel ("ofi"): reliable messages over one
// FI_EP_RDM endpoint (FI_MSG), an FI_AV_TABLE address vector and one CQ.
//
// Provider: libfabric's own choice, filtered by its environment: FI_PROVIDER
// ("tcp" here, which libfabric layers as tcp;ofi_rxm; "efa", "verbs", "cxi" on
// clusters), FI_TCP_IFACE (the tcp provider's interface; needed when the first
// interface libfabric lists is not the one peers reach), FI_LOG_LEVEL (warn,
// debug) for libfabric's own diagnosis. Only providers that need no
// application-registered buffers (mr_mode without FI_MR_LOCAL) are accepted.
//
// Wire: every message starts with a 24-byte header (magic "KOFM" u32, version
// u16, flags u8 (kFlagProbe), 0 u8, the sender's node id u64, its sequence number to this peer u64;
// little-endian); the receiver maps the node id to the peer that add_peer()
// named and, where the provider offers FI_SOURCE, checks that the message came
// from that peer's address (else on_stranger, with the bytes after the
// header). Receives go into a pool of pre-posted buffers of max_message() + 24
// bytes.
//
// Ordering: FI_ORDER_SAS is asked for, and ordered() says whether it was
// granted. Even then a provider may complete a large (rendezvous) message
// after later small ones (tcp;ofi_rxm does, above its 16 KiB eager size), so
// the receiver holds early messages until the sequence gap closes (SAS
// guarantees the late one already has a receive buffer). Without SAS messages
// are delivered as they complete and the engine reorders.
// Dead peers: a send to a dead peer fails with an error completion, but the
// tcp provider notices only on the second write after the peer died (the
// first still succeeds), so peers sent to in the last kProbeWindow get a
// header-only probe every kProbeInterval from progress(): a peer killed while
// a request to it is outstanding is lost within ~2 intervals. Where
// tcp;ofi_rxm instead queues the sends (or refuses them with FI_EAGAIN) and
// keeps reconnecting (refused, without an error completion), a send pending
// or refused for half the transport's
// timeout (0.5 .. 3 s) loses a peer that was reached before ("no completion
// in N ms"); the first connection to a peer is left to the engine's timeout. One killed
// while idle and never sent to again is not noticed (nothing to notice:
// the next request finds it). A stopped (SIGSTOP) or cut-off peer accepts
// probes: the engine's timeout covers it. The failure is
// on_sent(false) + on_peer_lost("fi_sendmsg to <name> failed: <fi_strerror>"),
// and every later send to that peer fails at once (on_sent(false) from the
// next progress()).
//
// Threading: send(), progress() and add_peer() may be called from different
// threads (a lock serialises them); events are reported from progress() only,
// with the lock held (a handler may call send()).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "kinet/transport.hpp"
#include "transports/channel.hpp"

namespace kinet::transport::ofi {

constexpr size_t kHeaderBytes = 24;
constexpr uint32_t kMsgMagic = 0x4d464f4b;   // "KOFM" little-endian
constexpr uint32_t kAddrMagic = 0x41464f4b;  // "KOFA"
constexpr uint16_t kWireVersion = 1;
// max_message() unless the provider's limit is lower: a 64 KiB put and the
// engine's header (up to 128 bytes) are one message.
constexpr size_t kMaxMessage = 64 * 1024 + 128;
constexpr size_t kRecvBuffers = 64;          // pre-posted receives
constexpr size_t kMaxSendsInFlight = 256;    // or the provider's tx size if lower
// tcp;ofi_rxm sends messages up to its bounce-buffer size eagerly and larger
// ones by rendezvous (extra round trips: on loopback a 16 KiB put took 78 us
// instead of 17, a 1 MiB ping-pong ran at half the rate). Unless the user set
// FI_OFI_RXM_BUFFER_SIZE, the channel sets it (before libfabric starts) so a
// whole message of kMaxMessage goes eagerly; rxm then keeps ~8 MiB of bounce
// buffers per connected peer instead of ~2.
constexpr const char* kRxmBufferSize = "66560";  // 65 KiB: kMaxMessage + kHeaderBytes + rxm's header, rounded up
// tcp;ofi_rxm (libfabric 1.17) otherwise posts its receive bounce buffers on
// a shared receive context: thousands of FI_OFI_RXM_BUFFER_SIZE buffers,
// allocated and touched 1024 at a time (68 MiB a chunk at kRxmBufferSize),
// when the endpoint opens. Measured on the 2-vCPU VM, two channels and a
// message between them: 616 MB peak RSS and 3.2 s with it, 211 MB and 1.5 s
// without (then each connection posts FI_OFI_RXM_MSG_RX_SIZE, 128, of its
// own, and one chunk is allocated at the endpoint's first connection, not
// four at its open). Unless the user set FI_OFI_RXM_USE_SRX, the channel
// sets it to this, before libfabric starts.
constexpr const char* kRxmUseSrx = "0";
constexpr uint8_t kFlagProbe = 1;            // header byte 6: a liveness probe, never delivered
// Peers sent to within kProbeWindow get a probe every kProbeInterval (see
// "Dead peers" above).
constexpr std::chrono::milliseconds kProbeInterval{100};
constexpr std::chrono::milliseconds kProbeWindow{5000};
// A send without completion for half the transport's timeout, clamped to
// [kStuckMin, kStuckMax], loses the peer.
constexpr std::chrono::milliseconds kStuckMin{500}, kStuckMax{3000};

// Address blob: magic u32, version u16, 0 u16, addr_format u32, name length
// u32, node id u64, then fi_getname()'s bytes (little-endian fields).
constexpr size_t kAddrHeaderBytes = 24;
constexpr size_t kMaxNameBytes = 1024;

// Opens the channel (`opt.name` appears in messages). Throws kinet::Error
// NotSupported naming what is missing (libfabric.so.1, a symbol, no provider
// offering FI_EP_RDM + FI_MSG here, with libfabric's reason); System when an
// object can't be created (naming the call and the provider).
std::unique_ptr<Channel> make_ofi_channel(const TransportOptions& opt, uint64_t node);

}  // namespace kinet::transport::ofi
