// kinet transports — the message engine's private types: the registry of
// local regions (shared by the engine and its regions, which may outlive it)
// and the engine's operation, message and peer records.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kinet/kinet.hpp"
#include "transports/msg_engine.hpp"

namespace kinet::transport {

struct Registry {
  // Held while an operation checks and accesses a region: a deregistration
  // (which takes it to erase the key) waits for the access in progress.
  std::mutex mu;
  struct Entry {
    uint8_t* base;
    uint64_t len;
    uint32_t access;
    MemoryKind kind;
    // Bodies the channel is fetching straight into the region
    // (ChannelEvents::place_body): its deregistration waits for 0.
    std::shared_ptr<std::atomic<uint32_t>> pins;
  };
  std::unordered_map<uint32_t, Entry> by_key;
  std::atomic<int> gpu{0};  // regions of kind Gpu (local buffers are looked up only when > 0)

  // Why a request's range fails the target's check (None: it passes).
  enum class Fault { None, UnknownKey, OutOfBounds, NoAccess, Unaligned };
  // The check of [raddr, raddr + len) under `key` for access `need` (and
  // 8-byte alignment when `word`); under mu. *out: the key's entry whenever
  // the key is registered (a failure's message names its range and access),
  // valid while mu is held (no copy: pins is a shared_ptr, and this is on
  // every request's path).
  Fault check(uint32_t key, uint64_t raddr, uint64_t len, uint32_t need, bool word, const Entry** out) const;

  // Set by the engine for its lifetime (under drive_mu): moves data into
  // placed bodies without delivering anything (Channel::drive_placed), for a
  // deregistration that waits for its pins on the thread that would
  // otherwise poll; give_up ends fetches that ran past `timeout`.
  std::mutex drive_mu;
  std::function<void(bool give_up)> drive;
  std::chrono::milliseconds timeout{10000};
};

// A fresh key: random, non-zero, never handed out before in this process.
uint32_t unique_key();

inline constexpr uint32_t kNone = UINT32_MAX;

struct MsgTransport::Op {
  uint32_t gen = 0;
  bool busy = false;
  wire::MsgType type = wire::MsgType::Put;
  PeerId peer = 0;
  uint64_t cookie = 0;
  uint8_t* dst = nullptr;  // get
  MemoryKind dst_kind = MemoryKind::Host;
  uint64_t* result = nullptr;  // atomics
  MemoryKind result_kind = MemoryKind::Host;
  uint32_t pieces_left = 0;
  uint32_t fail_piece = kNone;
  Status status = Status::Ok;
  uint64_t piece_bytes = 0;
  uint64_t bytes = 0;
  bool ipc = false;  // sent by IPC reference (cuda_ipc): a get's answer carries no data
};

struct MsgTransport::Out {
  uint8_t hdr[wire::kRequestBytes];
  size_t hdr_len = 0;
  const uint8_t* payload = nullptr;
  size_t len = 0;
  std::vector<uint8_t> owned;  // staged GPU data, answer data
  bool is_answer = false;
  bool is_request = false;     // carries the ack field, filled in when queued
  bool is_ack = false;         // an Ack message: a later one updates it while it waits in Peer::q
};

struct MsgTransport::Peer {
  PeerId id = 0;
  std::string name;
  uint64_t node = 0;
  uint64_t tx_seq = 0, rx_next = 1;
  bool lost = false;    // poll thread's view
  std::string error;    // under err_mu_
  std::deque<std::unique_ptr<Out>> q;
  size_t answers_queued = 0;
  size_t answer_bytes_queued = 0;  // their payloads (MsgOptions::max_backlog_bytes)
  bool pending = false;
  std::map<uint64_t, std::vector<uint8_t>> held;  // !ordered(): early requests by sequence number
  // Requester: requests sent that an ack completes, as (seq, op id), in seq order.
  std::deque<std::pair<uint64_t, uint64_t>> unacked;
  // Target: an ack of rx_next - 1 is owed since poll number ack_owed_at.
  bool ack_owed = false;
  // Target: the highest sequence number of this peer's requests answered
  // with a failure (a split put_signal's last piece checks it).
  uint64_t failed_seq = 0;
  bool ack_listed = false;  // in MsgTransport::ack_owed_
  uint64_t ack_owed_at = 0;
};


}  // namespace kinet::transport
