// kinet fabric — the wire protocol between software NICs (and, later, proxies)
// in different processes: what travels for one RDMA operation, and its answer.
//
// Every frame is a 16-byte header and a body; all integers little-endian.
//   header   magic "KNF1" (u32 0x31464e4b), version u8 (3), type u8, flags u16
//            (0), body_len u32, reserved u32 (0)
//   Hello    the first frame each side sends on a new link: who it is, the
//            largest frame it accepts.
//   Request  one responder operation (a whole WQE or one chunk of it): WRITE
//            carries its payload; READ asks for `len` bytes back; atomics
//            carry operand/compare and get the old value back; Flush asks
//            for nothing but its answer, which sends every answer held back
//            before it (see ack_later below).
//   Response answers one Request (same seq): a PRM syndrome (0 = done), a
//            reason text, READ data, the atomic's old value; and, with
//            `covers` = k > 0, the k Requests before it too (seq - k ..
//            seq - 1), each a kAckLater WRITE that succeeded: held answers
//            travel as one.
// A requester splits a transfer into Requests of at most kMaxChunk bytes, so
// no frame is larger than kMaxFrame whatever max_msg is.
//
// Bodies (offsets in bytes; every reserved byte 0; unused operands 0):
//   Hello    0 process_id u64 | 8 max_frame u32 | 12 name_len u16 | 14 reserved
//            u16 | 16 name (printable ASCII)                    = 16 + name_len
//   Request  0 seq | 8 from_node | 16 to_node | 24 raddr | 32 len | 40 operand |
//            48 compare (u64s) | 56 from_qpn u32 | 60 to_qpn u32 | 64 rkey u32 |
//            68 kind u8 | 69 flags u8 | 70 reserved u8[2] | 72 payload (Write only)
//                                                  = 72 (+ len for a Write)
//   Response 0 seq | 8 old_value | 16 len (u64s) | 24 syndrome u8 | 25 reserved
//            u8 | 26 why_len u16 | 28 covers u32 | 32 why (printable ASCII) |
//            32 + why_len payload (len bytes)      = 32 + why_len + len
// Field rules decode() enforces: QPNs are 24 bits; Write/Read len <= kMaxChunk
// and operand = compare = 0; FetchAdd len 8, compare 0; CompareSwap len 8;
// Flush raddr = len = rkey = operand = compare = 0; flags only kAckLater,
// only on a Write;
// a Response with syndrome 0 has no reason, one with a syndrome no payload,
// covers < seq;
// Hello max_frame in [kMaxFrame, kMaxFrameCeiling], name <= kMaxName.
// Alignment of an atomic's raddr is the responder's check (an error CQE, not
// a malformed frame).
//
// decode() reads nothing past `n` bytes and checks every field (magic,
// version, type, reserved bits and words, lengths against each other and the
// limits); it is the only function that turns peer bytes into a Frame, and it
// is fuzzed in CI.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kinet::fabric {

inline constexpr uint32_t kMagic = 0x31464e4b;  // "KNF1" read as little-endian bytes
inline constexpr uint8_t kVersion = 3;  // 2: Request flags, Flush; 3: Response covers
inline constexpr size_t kHeaderBytes = 16;
inline constexpr uint64_t kMaxChunk = 1u << 20;  // payload bytes per Request / Response
inline constexpr size_t kMaxWhy = 512;           // reason text bytes in a Response
inline constexpr size_t kMaxFrame = 4096 + kMaxChunk;  // header + body, upper bound of any frame
inline constexpr size_t kMaxName = 128;                // Hello name bytes
inline constexpr uint32_t kMaxFrameCeiling = 1u << 30; // largest Hello max_frame taken as sane
inline constexpr size_t kHelloFixed = 16, kRequestFixed = 72, kResponseFixed = 32;  // body bytes before the variable part

// Transport: a message of the transports' engine (src/transports) riding a
// fabric link; the links carry it (frame_body_len accepts it), decode()
// refuses it: it is never a software-NIC frame.
enum class FrameType : uint8_t { Hello = 1, Request = 2, Response = 3, Transport = 4 };

// Operation kinds, as they travel (values are the wire's, not the PRM's).
enum class OpKind : uint8_t { Write = 1, Read = 2, FetchAdd = 3, CompareSwap = 4, Flush = 5 };
// "WRITE", "READ", "FETCH_ADD", "COMPARE_SWAP", "FLUSH"; "?" for a value outside the enum.
const char* op_kind_name(OpKind k);

struct Hello {
  uint64_t process_id = 0;  // random per process: tells a reconnect from a new peer
  uint32_t max_frame = 0;   // largest frame this side accepts (>= 4096 + kMaxChunk)
  std::string name;         // printable, for messages ("host:pid"), <= 128 bytes
};

// Addresses on the wire: a node is one software NIC, unique across hosts and
// processes (64 random bits); a QP is named by its node and QPN.
inline constexpr uint8_t kAckLater = 0x01;  // Request::flags

struct Request {
  uint64_t seq = 0;            // requester's, echoed by the Response
  uint64_t from_node = 0;
  uint32_t from_qpn = 0;
  uint64_t to_node = 0;
  uint32_t to_qpn = 0;
  OpKind kind = OpKind::Write;
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  uint64_t len = 0;            // Write: payload size; Read: bytes asked; atomics: 8
  uint64_t operand = 0;        // FetchAdd: add; CompareSwap: swap
  uint64_t compare = 0;        // CompareSwap
  // kAckLater: the requester needs this Write's answer only eventually (it
  // retires a WQE nobody waits on: an unsignalled WRITE), so the responder
  // may hold a successful answer back, up to its ack delay, and send it with
  // later ones (KINET_EMU_ACK_DELAY_US). Every other answer goes at once and
  // takes the held ones with it. What the Write did to memory is not delayed.
  uint8_t flags = 0;
  // Write: the payload (len bytes). encode() takes it by pointer, decode()
  // points into the received buffer (valid while that buffer is).
  const uint8_t* payload = nullptr;
};

struct Response {
  uint64_t seq = 0;
  // Also answers Requests seq - covers .. seq - 1: kAckLater WRITEs that
  // succeeded (the requester checks that they were sent so).
  uint32_t covers = 0;
  uint8_t syndrome = 0;        // PRM CQE syndrome; 0 = completed
  std::string why;             // reason when syndrome != 0 (<= kMaxWhy bytes)
  uint64_t old_value = 0;      // atomics
  uint64_t len = 0;            // Read: bytes that follow (== the Request's len on success, else 0)
  const uint8_t* payload = nullptr;
};

struct Frame {
  FrameType type = FrameType::Hello;
  Hello hello;
  Request request;
  Response response;
};

// Appends one encoded frame to `out`. The caller keeps within the limits
// (debug builds assert them); encode never fails otherwise.
void encode(const Hello& h, std::vector<uint8_t>& out);
void encode(const Request& r, std::vector<uint8_t>& out);
void encode(const Response& r, std::vector<uint8_t>& out);
// A frame without its payload bytes (a WRITE Request's, a READ Response's;
// the header still counts them): for Link::send_parts(head, payload), which
// sends the payload from where it is.
void encode_head(const Request& r, std::vector<uint8_t>& out);
void encode_head(const Response& r, std::vector<uint8_t>& out);

// Body length announced by a frame header (the first kHeaderBytes bytes of
// `hdr`), so a reader knows how much to read; "" in *why on success. Fails on
// a bad magic, version, type, flags or reserved word, or a body longer than
// `max_frame - kHeaderBytes`.
bool frame_body_len(const uint8_t* hdr, size_t max_frame, uint32_t* body_len, std::string* why);

// Decodes one whole frame (header + body, exactly n bytes). On failure returns
// false and says which field is wrong and why in *why; `out` is then
// unspecified. Payload pointers point into `p`.
bool decode(const uint8_t* p, size_t n, Frame* out, std::string* why);

// Decodes the head of a WRITE Request frame cut by Link::recv_split: its
// header and the Request's fixed part, exactly n = kHeaderBytes +
// kRequestFixed bytes, the payload still to come. Checks every field that
// decode() checks (the header's body_len against the Request's len among
// them); any other frame fails. out->request.payload is null.
bool decode_write_head(const uint8_t* p, size_t n, Frame* out, std::string* why);

// `s` cut to at most `max` bytes, every byte outside printable ASCII replaced
// by '?': what a Response's reason or a Hello's name may carry.
std::string printable(std::string_view s, size_t max);

}  // namespace kinet::fabric
