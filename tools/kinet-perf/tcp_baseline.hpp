// kinet-perf — the plain TCP baseline of the cross-process mode: a ping-pong
// (latency) and a one-way stream (bandwidth) on one connection set up exactly
// as kinet's TCP link sets up its own (src/fabric/tcp_link.cpp): non-blocking,
// TCP_NODELAY, the kernel's default buffer sizes, every send with
// MSG_NOSIGNAL, poll() when the socket would block. What the software NIC adds
// on top of TCP is then the ratio of the two runs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kinet::perf {

class Progress;

// Makes `fd` (a connected TCP socket) what a TcpLink makes of its socket.
void tcp_link_options(int fd);

// Ping-pong of n-byte messages: the client sends, the server echoes the bytes
// back. Client: returns one sample per measured iteration, half the round
// trip in microseconds (as write_lat), and checks the last echo byte for
// byte. Every wait is bounded by timeout_ns; failures throw PerfError.
std::vector<double> tcp_pingpong_client(int fd, size_t n, uint64_t warmup, uint64_t iters, uint64_t timeout_ns,
                                        Progress& pr);
void tcp_pingpong_server(int fd, size_t n, uint64_t total, uint64_t timeout_ns);

// Stream: the sender writes `count` messages of n bytes (one send() call per
// message, as the link sends one frame per call), the receiver reads them
// (as much as the socket holds per recv()) and answers one byte after the
// last; the sender's clock runs from its first send to that byte. Returns the
// seconds on the sender side, 0 on the receiver's.
double tcp_stream_send(int fd, size_t n, uint64_t count, uint64_t timeout_ns, Progress* pr);
void tcp_stream_recv(int fd, size_t n, uint64_t count, uint64_t timeout_ns);

}  // namespace kinet::perf
