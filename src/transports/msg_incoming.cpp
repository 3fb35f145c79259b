// The message engine's incoming side: messages from the channel sorted into
// requests (msg_target.cpp), answers and acknowledgements, which complete the
// requester's operations (msg_engine.hpp says the rules).
#include <algorithm>
#include <cstring>
#include <vector>

#include "providers/emu/safe_copy.hpp"
#include "transports/msg_engine.hpp"
#include "transports/msg_registry.hpp"

namespace kinet::transport {
using wire::MsgType;

void MsgTransport::on_stranger(std::string_view who, const uint8_t*, size_t bytes) {
  // Keyed as one sender: a stranger names itself (a port, a node id), and a
  // counter and a log line per name would grow without bound.
  reject("(strangers)", "stranger",
         std::to_string(bytes) + "-byte message from " + std::string(who) + ", a sender never connected");
}

void MsgTransport::on_message(uint32_t peer, const uint8_t* data, size_t bytes) {
  on_message_parts(peer, data, bytes, nullptr, 0);
}

void MsgTransport::on_message_parts(uint32_t peer, const uint8_t* head, size_t hlen, const uint8_t* body,
                                    size_t blen) {
  if (hlen == 0) head = body, hlen = blen, body = nullptr, blen = 0;  // one part after all
  Peer* p = peer_at(peer);
  if (!p) return reject("(strangers)", "stranger", "channel peer " + std::to_string(peer) + ", not a connected peer");
  if (p->lost) return;  // given up on: nothing it says counts any more
  MsgType t{};
  const bool typed = wire::peek_type(head, hlen, &t);
  if (typed && t == MsgType::Answer) return handle_answer(*p, head, hlen, body, blen);
  if (typed && t == MsgType::Ack) {
    if (blen == 0) return handle_ack(*p, head, hlen);
    std::vector<uint8_t> m(head, head + hlen);
    m.insert(m.end(), body, body + blen);
    return handle_ack(*p, m.data(), m.size());
  }
  handle_request(*p, head, hlen, body, blen);
}

void MsgTransport::handle_ack(Peer& p, const uint8_t* data, size_t bytes) {
  wire::Ack a;
  if (std::string e = wire::decode(data, bytes, &a); !e.empty()) return reject(p.name, "malformed ack", e);
  if (a.node != p.node) return reject(p.name, "wrong node", "ack from node " + std::to_string(a.node));
  apply_ack(p, a.ack);
}

void MsgTransport::apply_ack(Peer& p, uint64_t ack) {
  if (!ordered_ || ack == 0) return;
  if (ack > p.tx_seq)
    return reject(p.name, "bad ack", "ack of request " + std::to_string(ack) + ", only " +
                                         std::to_string(p.tx_seq) + " were sent");
  while (!p.unacked.empty() && p.unacked.front().first <= ack && !p.lost) {
    const uint64_t id = p.unacked.front().second;
    p.unacked.pop_front();
    // Gone when answered already (a failure) or failed with the peer.
    auto it = pieces_.find(id);
    if (it == pieces_.end() || ops_[it->second.first].peer != p.id) continue;
    const auto [place, piece] = it->second;
    erase_piece(it);
    finish_piece(place, piece, Status::Ok);
  }
}

void MsgTransport::owe_ack(Peer& p) {
  if (p.ack_owed) return;
  p.ack_owed = true;
  p.ack_owed_at = polls_;
  if (!p.ack_listed) ack_owed_.push_back(p.id);
  p.ack_listed = true;
}

void MsgTransport::send_owed_acks() {
  // An ack owed since an earlier poll() goes now: the application had its
  // chance to post a request that carries it (a ping-pong's reply).
  size_t keep = 0;
  for (uint32_t id : ack_owed_) {
    Peer& p = *peer_at(id);
    if (!p.ack_owed || p.lost) {
      p.ack_owed = p.ack_listed = false;
      continue;
    }
    if (p.ack_owed_at == polls_) {
      ack_owed_[keep++] = id;
      continue;
    }
    p.ack_owed = p.ack_listed = false;
    // An Ack still waiting at the end of the queue (the peer does not read)
    // takes the newer value: acks behind a stuck queue don't pile up.
    if (!p.q.empty() && p.q.back()->is_ack) {
      wire::encode(wire::Ack{node_, p.rx_next - 1}, p.q.back()->hdr);
      continue;
    }
    auto o = new_out();
    wire::encode(wire::Ack{node_, p.rx_next - 1}, o->hdr);
    o->hdr_len = wire::kAckBytes;
    o->is_ack = true;
    enqueue(p, std::move(o));
    flush(p);
  }
  ack_owed_.resize(keep);
}

void MsgTransport::handle_answer(Peer& p, const uint8_t* head, size_t hlen, const uint8_t* body, size_t blen) {
  wire::Answer a;
  if (std::string e = wire::decode(head, hlen, body, blen, &a); !e.empty())
    return reject(p.name, "malformed answer", e);
  if (a.node != p.node) return reject(p.name, "wrong node", "answer from node " + std::to_string(a.node));
  auto it = pieces_.find(a.op_id);
  if (it == pieces_.end() || ops_[it->second.first].peer != p.id)
    return reject(p.name, "unknown op id", "answer to op id " + std::to_string(a.op_id));
  const auto [place, piece] = it->second;
  erase_piece(it);
  Op& op = ops_[place];
  Status st = a.status;
  if (st == Status::Ok) {
    if (op.type == MsgType::Get && op.ipc) {
      if (a.length != 0) st = Status::BadResponse;  // the target wrote the data already
    } else if (op.type == MsgType::Get) {
      const uint64_t off = uint64_t{piece} * op.piece_bytes;
      // The piece's length is what was asked: a different answer is a bad response.
      if (a.length != std::min(op.piece_bytes, op.bytes - off))
        st = Status::BadResponse;
      else if (a.length && emu::safe_copy(op.dst + off, op.dst_kind, a.payload, MemoryKind::Host, a.length))
        st = Status::LocalAccess;
    } else if (op.type == MsgType::FetchAdd || op.type == MsgType::CompareSwap) {
      // The result may lie in registered GPU memory (a kernel's fetch_add through the proxy).
      if (a.length != 0) st = Status::BadResponse;
      else if (emu::safe_copy(op.result, op.result_kind, &a.old_value, MemoryKind::Host, 8)) st = Status::LocalAccess;
    } else if (a.length != 0 || a.old_value != 0) {
      st = Status::BadResponse;
    }
  }
  finish_piece(place, piece, st);
}

}  // namespace kinet::transport
