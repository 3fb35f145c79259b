// kinet multiproc tests — helpers for the UCX channel tests: an event
// recorder, a data pattern, and a sender that keeps many messages in flight.
#pragma once
#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "transports/channel.hpp"
#include "../common/idle_backoff.hpp"

namespace kinet::test::ucx {

// Sizes cycled by the stream tests: eager and rendezvous (UCX switches to
// rendezvous somewhere between 8 KiB and 64 KiB on tcp and shm), up to max_message().
inline size_t stream_size(uint64_t i) {
  static const size_t sizes[] = {8, 1, 64, 1000, 8192, 20000, 65536, 300000, 1 << 20, 24};
  return sizes[i % (sizeof sizes / sizeof sizes[0])];
}
// Message i: its index in the first 8 bytes (when it fits), then a pattern.
inline std::vector<uint8_t> make_message(uint64_t i, size_t n) {
  std::vector<uint8_t> m(n);
  for (size_t j = 0; j < n; ++j) m[j] = static_cast<uint8_t>(i * 131 + j * 7 + 3);
  if (n >= 8) std::memcpy(m.data(), &i, 8);
  return m;
}
// Empty when `data` is message i of the stream, else what differs.
inline std::string check_message(uint64_t i, const uint8_t* data, size_t n) {
  const size_t want = stream_size(i);
  if (n != want) return "message " + std::to_string(i) + " has " + std::to_string(n) + " bytes, not " + std::to_string(want);
  const auto m = make_message(i, n);
  for (size_t j = 0; j < n; ++j)
    if (data[j] != m[j]) return "message " + std::to_string(i) + " differs at byte " + std::to_string(j);
  return {};
}

inline uint64_t random_node() {
  std::random_device rd;
  return ((uint64_t{rd()} << 32) | rd()) | 1;
}

struct Recorder : transport::ChannelEvents {
  struct Msg {
    uint32_t peer;
    std::vector<uint8_t> data;
  };
  struct Strange {
    std::string who;
    std::vector<uint8_t> data;
  };
  std::deque<Msg> msgs;
  std::vector<Strange> strangers;
  std::map<uint64_t, bool> sent;  // token -> ok
  std::vector<std::pair<uint32_t, std::string>> lost;
  void on_message(uint32_t peer, const uint8_t* d, size_t n) override { msgs.push_back({peer, {d, d + n}}); }
  void on_stranger(std::string_view who, const uint8_t* d, size_t n) override {
    strangers.push_back({std::string(who), {d, d + n}});
  }
  void on_sent(uint64_t token, bool ok) override { sent[token] = ok; }
  void on_peer_lost(uint32_t peer, const std::string& why) override { lost.emplace_back(peer, why); }
};

// Progresses `chs` until pred() or `bound` passes; returns pred().
template <class Pred>
bool progress_until(std::initializer_list<std::pair<transport::Channel*, Recorder*>> chs, Pred pred,
                    std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  IdleBackoff idle;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    size_t events = 0;
    for (auto [c, r] : chs) events += c->progress(*r);
    idle(events > 0);
  }
  return true;
}

// Sends messages [0, count) of the stream to `peer` as fast as the channel
// takes them; buffers live until their on_sent. Call pump() until done().
struct StreamSender {
  StreamSender(transport::Channel* c, uint32_t p, uint64_t n) : ch(c), peer(p), count(n) {}
  transport::Channel* ch;
  uint32_t peer;
  uint64_t count;
  uint64_t next = 0;
  std::map<uint64_t, std::vector<uint8_t>> inflight;
  uint64_t max_inflight = 0;
  std::string error;
  void pump(Recorder& r) {
    for (auto it = r.sent.begin(); it != r.sent.end() && it->first < count;) {
      if (!it->second && error.empty()) error = "message " + std::to_string(it->first) + " was not delivered";
      inflight.erase(it->first);
      it = r.sent.erase(it);
    }
    while (next < count) {
      auto m = make_message(next, stream_size(next));
      iovec iov[2] = {{m.data(), m.size() / 2}, {m.data() + m.size() / 2, m.size() - m.size() / 2}};
      auto& slot = inflight[next];
      slot = std::move(m);
      iov[0].iov_base = slot.data();
      iov[1].iov_base = slot.data() + slot.size() / 2;
      if (!ch->send(peer, iov, 2, next)) {
        inflight.erase(next);
        break;
      }
      ++next;
      if (inflight.size() > max_inflight) max_inflight = inflight.size();
    }
  }
  bool done() const { return next == count && inflight.empty(); }
};

// Receives the stream in order; error says what went wrong first.
struct StreamReceiver {
  uint64_t got = 0;
  std::string error;
  void pump(Recorder& r, uint32_t peer) {
    while (!r.msgs.empty()) {
      auto m = std::move(r.msgs.front());
      r.msgs.pop_front();
      if (!error.empty()) continue;
      if (m.peer != peer) error = "a message from peer " + std::to_string(m.peer);
      else error = check_message(got, m.data.data(), m.data.size());
      ++got;
    }
  }
};

}  // namespace kinet::test::ucx
