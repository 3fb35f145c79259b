// kinet fabric — the TCP Link (link.hpp) between processes on any hosts, and
// the "tcp ADDRESS:PORT" endpoints that name a listener.
#pragma once
#include <memory>
#include <string>

#include "bootstrap/socket.hpp"
#include "fabric/link.hpp"
#include "fabric/wire.hpp"

namespace kinet::fabric {

// "tcp 192.0.2.2:41234" / "tcp [fe80::1%2]:41234" for a bound address.
std::string tcp_endpoint(const bs::SockAddr& a);
// The address an endpoint names. Throws InvalidArgument saying what is wrong
// (not "tcp ", no port, a port out of range, not a numeric address).
bs::SockAddr parse_tcp_endpoint(const std::string& endpoint);

class TcpLink final : public Link {
 public:
  // Takes ownership of a connected stream socket (made non-blocking here,
  // TCP_NODELAY set). `peer` names it in messages ("tcp 192.0.2.2:41234").
  // Frames larger than `max_frame` are refused (InvalidArgument).
  TcpLink(bs::Fd fd, std::string peer, size_t max_frame = kMaxFrame);
  ~TcpLink() override;
  // Every send goes out with MSG_NOSIGNAL: a peer that died is an EPIPE
  // ("peer lost"), never a SIGPIPE.
  void send_parts(const uint8_t* head, size_t n1, const uint8_t* body, size_t n2,
                  Clock::time_point deadline) override;
  // At most kMaxPieces pieces.
  void send_gather(std::span<const Piece> pieces, Clock::time_point deadline) override;
  static constexpr size_t kMaxPieces = 256;  // under IOV_MAX (1024)
  bool kernel_reads_body() const override { return true; }  // sendmsg(2)
  bool recv(std::vector<uint8_t>& out, Clock::time_point deadline) override;
  bool recv_split(std::vector<uint8_t>& out, Clock::time_point deadline, size_t split_over, size_t head,
                  size_t* rest) override;
  std::span<const uint8_t> rest_buffered(size_t n) override;
  size_t recv_rest(uint8_t* dst, size_t n, bool* bad_dst) override;
  bool wait_rest(Clock::time_point deadline) override;
  // shutdown(2) of both directions: wakes a send or recv blocked in poll.
  void close() override;
  const std::string& peer_name() const override { return peer_; }
  // True when bytes of a next frame were already read ahead (no syscall):
  // a receiver may then take that frame before doing anything else.
  bool buffered() const override { return ra_pos_ < ra_end_; }

 private:
  bs::Fd fd_;
  std::string peer_;
  size_t max_frame_;
  CloseReason closed_;
  // Receive state: a frame being assembled across recv() calls.
  std::vector<uint8_t> rx_;
  size_t rx_got_ = 0;
  size_t rx_need_ = kHeaderBytes;  // kHeaderBytes until the header is in, then the whole frame
  // Read-ahead: one recv(2) takes what the socket holds (up to kReadAhead),
  // so small frames cost no syscall of their own; a frame's rest of at least
  // kReadAhead bytes is read straight into rx_ (no extra copy).
  static constexpr size_t kReadAhead = 64 * 1024;
  std::vector<uint8_t> ra_;
  size_t ra_pos_ = 0, ra_end_ = 0;
  size_t cut_rest_ = 0;  // bytes of a cut frame (recv_split) still to be taken
  // How much a read-ahead recv(2) asks for: kReadAhead, or after a cut frame
  // with a rest of kReadAhead or more only the next frame's head, so that
  // the rest of a stream of large frames is not read ahead (and copied) but
  // comes straight to where it goes.
  size_t ra_ask_ = kReadAhead;

  // recv() and recv_split(): frames over split_over bytes cut after `head`.
  bool recv_frame(std::vector<uint8_t>& out, Clock::time_point deadline, size_t split_over, size_t head,
                  size_t* rest);

  // Closes the link for `why` (the first reason given is kept).
  void shut(const std::string& why);
  // Closes the link for `why` and throws "peer lost: <the link's reason>".
  [[noreturn]] void lost(const std::string& why);
  [[noreturn]] void timeout(Clock::time_point start, const char* what);
};

// Connects to `endpoint` (retrying a refused connection until `deadline`).
// Throws System: "tcp ...: can't connect: <why>".
std::unique_ptr<TcpLink> tcp_connect(const std::string& endpoint, Clock::time_point deadline);

}  // namespace kinet::fabric
