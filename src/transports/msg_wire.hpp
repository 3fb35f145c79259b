// kinet transports — the message engine's wire format (msg_engine.*): one
// operation request or one answer per channel message. Little-endian, fixed
// header then payload; a magic and version lead every message.
//
// Request (kRequestBytes header, then `length` payload bytes for Put and
// PutSignal, nothing for the others; with flag kFlagIpc, an IpcRef instead):
//    0 u32 magic   4 u8 version   5 u8 type (MsgType)   6 u8 sig_op   7 u8 flags
//    8 u64 node (sender)   16 u64 seq (per sender and target, from 1)
//   24 u64 op id   32 u32 key   36 u32 sig_key   40 u64 raddr   48 u64 length
//   56 u64 operand (add, swap or signal value)   64 u64 compare   72 u64 sig_raddr
//   80 u64 ack: the highest sequence number of the receiver's own requests that
//      the sender has executed when it queued this request (0: none), i.e. an
//      acknowledgement piggybacked on the reverse direction (see Ack)
// Answer (kAnswerBytes header, then `length` bytes of Get data):
//    0 u32 magic   4 u8 version   5 u8 type = Answer   6 u16 0
//    8 u64 node (answerer)   16 u64 seq (of the request)   24 u64 op id
//   32 i32 status (kinet::Status)   36 u32 0   40 u64 old value   48 u64 length
// Ack (kAckBytes, nothing after): a cumulative acknowledgement, sent when no
// request to that peer carried it:
//    0 u32 magic   4 u8 version   5 u8 type = Ack   6 u16 0   8 u64 node   16 u64 ack (non-zero)
// IPC reference (flags & kFlagIpc; cuda_ipc transports, ipc_path.hpp): the data
// of a Put / PutSignal, or the destination of a Get, is GPU memory of the
// requester that the target maps and copies itself; the message carries,
// instead of payload, exactly kIpcRefBytes:
//    0 u8[64] CUDA IPC handle of the requester's allocation   64 u64 offset in it
// and `length` (1 .. kMaxIpcBytes) is the number of bytes to copy. A Get
// answered Ok then carries no data (the target wrote it already).
// After pieces (flags & kFlagAfterPieces, PutSignal only): the last piece of
// a put_signal split into several messages, sent right behind its data
// pieces; `compare` (1 .. seq - 1) says how many requests before it are that
// operation's data pieces. The target executes it only if none of requests
// seq - compare .. seq - 1 from this sender failed (else it answers
// RemoteInvalidRequest and writes nothing), so the signal never claims data
// that did not land, without a round trip between data and signal.
// An ack of N says: every request up to sequence number N was executed; those
// of them that were put, signal or put_signal and succeeded get no answer of
// their own (gets, atomics and every failure are answered, ahead of the ack).
// Fields an operation does not use must be zero: a decoder accepts one
// encoding per message, so a fuzzer can check re-encoding gives the same bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kinet/status.hpp"

namespace kinet::transport::wire {

inline constexpr uint32_t kMagic = 0x544e4b31;  // "1KNT"
inline constexpr uint8_t kVersion = 4;  // 3: flags byte, IPC references; 4: kFlagAfterPieces
inline constexpr size_t kRequestBytes = 88;
inline constexpr size_t kAnswerBytes = 56;
inline constexpr size_t kAckBytes = 24;
inline constexpr size_t kAckOffset = 80;  // of the request's ack field
inline constexpr uint8_t kFlagIpc = 1;      // request byte 7: an IpcRef instead of payload
inline constexpr uint8_t kFlagAfterPieces = 2;  // request byte 7: a split put_signal's last piece (below)
inline constexpr size_t kIpcHandleBytes = 64;
inline constexpr size_t kIpcRefBytes = 72;
inline constexpr uint64_t kMaxIpcBytes = uint64_t{1} << 31;  // Transport::kMaxOpBytes

enum class MsgType : uint8_t {
  Put = 1, Get = 2, FetchAdd = 3, CompareSwap = 4, Signal = 5, PutSignal = 6,
  Answer = 0x81, Ack = 0x82,
};
const char* type_name(MsgType t);  // "put", ..., "answer"; "unknown" otherwise

// Where the requester's GPU bytes are (flag kFlagIpc).
struct IpcRef {
  uint8_t handle[kIpcHandleBytes] = {};  // of the allocation
  uint64_t offset = 0;                   // of the data in it
};

struct Request {
  MsgType type = MsgType::Put;
  uint8_t sig_op = 0;        // Signal / PutSignal: kinet::SignalOp (1 add, 2 set)
  uint8_t flags = 0;         // kFlagIpc: `ipc` names the data (Put, PutSignal) or destination (Get)
  IpcRef ipc;                // with kFlagIpc
  uint64_t node = 0, seq = 0, op_id = 0;
  uint32_t key = 0, sig_key = 0;
  uint64_t raddr = 0, length = 0;  // Put / PutSignal: payload bytes; Get: bytes asked; atomics, Signal: 8
  uint64_t operand = 0, compare = 0, sig_raddr = 0;
  uint64_t ack = 0;                  // any value: the engine checks it against what it sent
  const uint8_t* payload = nullptr;  // decode: points into the message
};

struct Answer {
  uint64_t node = 0, seq = 0, op_id = 0;
  Status status = Status::Ok;
  uint64_t old_value = 0;
  uint64_t length = 0;               // Get data bytes (0 unless status Ok)
  const uint8_t* payload = nullptr;  // decode: points into the message
};

struct Ack {
  uint64_t node = 0, ack = 0;
};

// Writes the header only (payload travels as its own iovec).
void encode_header(const Request& r, uint8_t out[kRequestBytes]);
void encode_header(const Answer& a, uint8_t out[kAnswerBytes]);
void encode(const Ack& a, uint8_t out[kAckBytes]);
void encode(const IpcRef& r, uint8_t out[kIpcRefBytes]);

// What a message is, from its first bytes: Answer, a request type, or
// nothing (false) when shorter than 8 bytes or not this magic / version.
bool peek_type(const uint8_t* m, size_t n, MsgType* t);

// Validate every field and never read past m[n). Empty result: accepted
// (payload points into m); else why not ("short message: ...", "bad type ...",
// "length ... but ... payload bytes", ...), one line, naming the field.
// Request rules: the magic and version; a known request type; flags: only
// kFlagIpc, and only on Put / PutSignal / Get; kFlagAfterPieces only on a
// PutSignal without kFlagIpc, with compare 1 .. seq - 1; sig_op 1 or 2 for Signal /
// PutSignal and 0 otherwise; op id non-zero;
// key non-zero (Signal: key/raddr name the signal word; PutSignal: sig_key
// non-zero too); fields the type does not use zero; length 8 for atomics and Signal; payload exactly `length` bytes
// for Put / PutSignal, none otherwise. With kFlagIpc instead: exactly
// kIpcRefBytes after the header, length 1 .. kMaxIpcBytes, offset + length
// below 2^64 (whether the range lies in the allocation is the target's
// check, against the allocation it mapped).
// Answer rules: the magic, version, type; reserved zero; op id non-zero;
// status one of Ok, RemoteAccess, RemoteInvalidRequest, RemoteOperation;
// length zero unless Ok, payload exactly `length` bytes.
std::string decode(const uint8_t* m, size_t n, Request* out);
std::string decode(const uint8_t* m, size_t n, Answer* out);
// The same for a message received in two parts, header ++ body (bn > 0):
// the first part must be exactly the header; the payload is `b`.
std::string decode(const uint8_t* m, size_t n, const uint8_t* b, size_t bn, Request* out);
std::string decode(const uint8_t* m, size_t n, const uint8_t* b, size_t bn, Answer* out);
// Ack rules: the magic, version, type; reserved zero; ack non-zero; exactly kAckBytes.
std::string decode(const uint8_t* m, size_t n, Ack* out);

}  // namespace kinet::transport::wire
