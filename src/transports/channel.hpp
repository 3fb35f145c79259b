// kinet transports — a channel: the one thing a transport backend provides.
// Reliable messages to peers it was told about; nothing else. The message
// engine (msg_engine.*) builds the public Transport on top of it: operation
// encoding, the target's check, ordering of signals after data, timeouts,
// completions. Backends: ucx/ (UCX active messages), ofi/ (libfabric RDM
// endpoints), link_channel.* (kinet's TCP and shm fabric links: "tcp",
// "shm"), loop_channel.* ("loop": one process). A backend's factory is
// registered in registry.hpp.
#pragma once
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kinet::transport {

// What a channel reports from progress().
class ChannelEvents {
 public:
  virtual ~ChannelEvents() = default;
  // A whole message from `peer` (as numbered by add_peer). `data` is valid
  // only during the call. Messages from one peer arrive in the order that
  // peer sent them (a backend that can't promise it says so in ordered()).
  virtual void on_message(uint32_t peer, const uint8_t* data, size_t bytes) = 0;
  // The same, for a backend that received the message in two parts (the
  // first iov entry of send() and the rest): the message is head ++ body.
  // By default the parts are joined (a copy) and passed to on_message();
  // the engine overrides it to take the body where it lies.
  virtual void on_message_parts(uint32_t peer, const uint8_t* head, size_t hlen, const uint8_t* body, size_t blen);
  // A message from a sender that was never add_peer()ed (the engine rejects
  // it); `who` describes the sender as well as the backend can.
  virtual void on_stranger(std::string_view who, const uint8_t* data, size_t bytes) = 0;
  // Where the body of `peer`'s message should land, asked by a channel that
  // fetches large bodies after their head has arrived (UCX rendezvous)
  // before it fetches: nullptr (the default) = into the channel's own buffer.
  // Otherwise the body is fetched to the address returned (then delivered by
  // on_message_parts with body == that address) and *pin was incremented:
  // the channel decrements it (and drops its reference) once it writes there
  // no more (the fetch ended, failed or never started), delivered or not,
  // or once it takes a buffer for the body after all. The channel asks only while
  // every earlier message of `peer` not yet delivered is a placed one, and
  // starts a placed fetch only once no placed fetch still running overlaps
  // it: data of a later message never lands under an earlier one's.
  // *word (when placed): an 8-byte word the message writes at its delivery
  // (a put_signal's signal), or null. A later placed body of `peer` that
  // overlaps it is fetched only once that message was delivered (or into a
  // buffer), so the later data is not overwritten by the earlier signal.
  virtual uint8_t* place_body(uint32_t peer, const uint8_t* head, size_t hlen, size_t blen,
                              std::shared_ptr<std::atomic<uint32_t>>* pin, uint8_t** word);
  // send(..., token) finished: the buffers may be reused. ok == false: the
  // message was not delivered (the peer is then lost, on_peer_lost follows).
  virtual void on_sent(uint64_t token, bool ok) = 0;
  // The peer died, closed or was unreachable; `why` completes
  // "peer lost: <why>". Reported once per peer.
  virtual void on_peer_lost(uint32_t peer, const std::string& why) = 0;
};

inline uint8_t* ChannelEvents::place_body(uint32_t, const uint8_t*, size_t, size_t,
                                          std::shared_ptr<std::atomic<uint32_t>>*, uint8_t**) {
  return nullptr;
}

inline void ChannelEvents::on_message_parts(uint32_t peer, const uint8_t* head, size_t hlen, const uint8_t* body,
                                            size_t blen) {
  if (blen == 0) return on_message(peer, head, hlen);
  if (hlen == 0) return on_message(peer, body, blen);
  std::vector<uint8_t> m(head, head + hlen);
  m.insert(m.end(), body, body + blen);
  on_message(peer, m.data(), m.size());
}

class Channel {
 public:
  virtual ~Channel() = default;
  virtual const char* provider() const = 0;  // "ucx"
  virtual std::string describe() const = 0;  // "ucx 1.13 tcp on eth0"
  // Whether messages from one peer are delivered in send order (else the
  // engine reorders by sequence number).
  virtual bool ordered() const = 0;
  // Largest message send() accepts; the engine splits larger transfers.
  virtual size_t max_message() const = 0;
  // This side's address blob (what a peer passes to add_peer).
  virtual std::vector<uint8_t> address() const = 0;
  // Makes a peer reachable; returns its number: dense from 0 in call order,
  // no number taken by a call that throws (the engine's PeerId is this
  // number). Throws kinet::Error InvalidArgument for a malformed blob, System
  // when unreachable; `name` appears in messages. May run concurrently with
  // send() and progress() of the engine's thread.
  virtual uint32_t add_peer(const std::vector<uint8_t>& address, const std::string& name) = 0;
  // Starts sending the concatenation of iov[0..n) to `peer`. false: no room
  // now (progress and retry); nothing was taken. Called from inside an event
  // of progress() it may say false for that reason alone (UCX delivers from
  // its receive callback, where it must not send): retry after progress().
  // true: on_sent(token) follows from a later progress() once the buffers
  // may be reused. The engine keeps
  // its own header buffers until on_sent; payload buffers are the user's and
  // stay valid until the operation completes, which for a lost peer (or one
  // past the engine's timeout) is at once: a channel that sends without
  // copying must not read a peer's buffers after reporting it lost.
  virtual bool send(uint32_t peer, const iovec* iov, int n, uint64_t token) = 0;
  // Drives the backend; reports events through `ev`. Never blocks. Returns
  // the number of events reported.
  virtual size_t progress(ChannelEvents& ev) = 0;
  // Moves data into placed bodies (ChannelEvents::place_body) and reports
  // nothing: callable from any thread, for a deregistration waiting for its
  // pins. give_up: peers with a placed fetch still running are lost, which
  // ends those fetches (on_peer_lost follows from progress()).
  virtual void drive_placed(bool give_up) { (void)give_up; }
};

}  // namespace kinet::transport
