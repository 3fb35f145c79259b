// One process of the ofi channel tests (ofi_channel_test). Opens an "ofi"
// channel, prints "ADDR <hex>", reads "PEER <hex>" from stdin, add_peer()s it
// and runs its role:
//   echo       sends every message back to its sender; on stdin EOF prints
//              "OK <echoed>" and exits 0.
//   stranger   sends one message (the bytes "stranger") to the peer, which
//              did not add this side; prints "SENT <ok>", waits for stdin EOF.
//   drive N    sends N pattern messages (ofi_test_util.hpp), up to 64 in
//              flight, to an echo peer and checks the echoes: order and bytes.
//              Prints "OK <N>" or "FAIL <what>".
// --node X sets the channel's node id (hex; default random). A channel that
// can't open prints "SKIP <why>" and exits 77; an error "ERROR <what>", 3.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <string>

#include "ofi_test_util.hpp"
#include "transports/ofi/ofi_channel.hpp"

namespace {
using namespace kinet::test::ofi;
using kinet::transport::Channel;
using Clock = std::chrono::steady_clock;

std::string stdin_buf;
bool stdin_eof = false;
// A whole stdin line if one arrived (never blocks).
bool stdin_line(std::string* l) {
  pollfd p{0, POLLIN, 0};
  while (!stdin_eof && poll(&p, 1, 0) == 1) {
    char b[4096];
    const ssize_t n = read(0, b, sizeof b);
    if (n <= 0) {
      stdin_eof = true;
      break;
    }
    stdin_buf.append(b, static_cast<size_t>(n));
  }
  const size_t at = stdin_buf.find('\n');
  if (at == std::string::npos) return false;
  *l = stdin_buf.substr(0, at);
  stdin_buf.erase(0, at + 1);
  return true;
}

[[noreturn]] void finish(int code, const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  std::_Exit(code);
}

struct Pending {
  uint32_t peer;
  std::vector<uint8_t> data;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) finish(2, "ERROR usage: ofi_channel_helper echo|stranger|drive N [--node X]");
  const std::string role = argv[1];
  uint64_t n_drive = 0;
  uint64_t node = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--node") && i + 1 < argc) node = std::stoull(argv[++i], nullptr, 16);
    else n_drive = std::stoull(argv[i]);
  }
  std::unique_ptr<Channel> ch;
  try {
    ch = kinet::transport::ofi::make_ofi_channel({.provider = "ofi", .name = "helper " + role}, node);
  } catch (const kinet::Error& e) {
    if (e.code() == kinet::ErrorCode::NotSupported) finish(77, std::string("SKIP ") + e.what());
    finish(3, std::string("ERROR ") + e.what());
  }
  std::printf("ADDR %s\n", to_hex(ch->address()).c_str());
  std::fflush(stdout);
  Recorder rec;
  std::string l;
  const auto bound = Clock::now() + std::chrono::seconds(30);
  while (!stdin_line(&l)) {
    if (stdin_eof || Clock::now() > bound) finish(3, "ERROR no PEER line");
    ch->progress(rec);
    usleep(1000);
  }
  if (l.rfind("PEER ", 0) != 0) finish(3, "ERROR expected PEER, got " + l);
  uint32_t peer = 0;
  try {
    peer = ch->add_peer(from_hex(l.substr(5)), "the test's peer");
  } catch (const kinet::Error& e) {
    finish(3, std::string("ERROR ") + e.what());
  }

  if (role == "echo") {
    std::deque<Pending> out;
    std::map<uint64_t, std::vector<uint8_t>> inflight;
    uint64_t token = 0, echoed = 0;
    kinet::test::IdleBackoff idle;
    while (!stdin_eof) {
      idle(ch->progress(rec) > 0);
      for (auto& [p, d] : rec.msgs) out.push_back({p, std::move(d)});
      rec.msgs.clear();
      for (auto& [t, ok] : rec.sent) {
        if (!ok) finish(4, "FAIL an echo failed");
        inflight.erase(t);
      }
      rec.sent.clear();
      while (!out.empty()) {
        iovec v{out.front().data.data(), out.front().data.size()};
        if (!ch->send(out.front().peer, &v, 1, token)) break;
        inflight[token++] = std::move(out.front().data);
        out.pop_front();
        ++echoed;
      }
      if (out.empty()) stdin_line(&l);
    }
    finish(0, "OK " + std::to_string(echoed));
  }
  if (role == "stranger") {
    const char msg[] = "stranger";
    iovec v{const_cast<char*>(msg), 8};
    while (!ch->send(peer, &v, 1, 1)) ch->progress(rec);
    const auto end = Clock::now() + std::chrono::seconds(20);
    while (!rec.sent.count(1) && Clock::now() < end) ch->progress(rec);
    std::printf("SENT %d\n", rec.sent.count(1) ? int(rec.sent[1]) : -1);
    std::fflush(stdout);
    while (!stdin_eof) {
      ch->progress(rec);
      stdin_line(&l);
      usleep(1000);
    }
    finish(0, "OK");
  }
  if (role == "drive") {
    const size_t max = ch->max_message();
    uint64_t next = 0, got = 0;
    size_t in_flight = 0;
    std::map<uint64_t, std::vector<uint8_t>> bufs;
    const auto end = Clock::now() + std::chrono::seconds(180);
    while (got < n_drive) {
      if (Clock::now() > end) finish(4, "FAIL timeout: " + std::to_string(got) + " of " + std::to_string(n_drive) + " echoes");
      while (next < n_drive && in_flight < 64) {
        auto d = pattern(next, pattern_size(next, max));
        iovec v[3] = {{d.data(), d.size() / 3}, {d.data() + d.size() / 3, d.size() / 3},
                      {d.data() + 2 * (d.size() / 3), d.size() - 2 * (d.size() / 3)}};
        if (!ch->send(peer, v, 3, next)) break;
        bufs[next++] = std::move(d);
        ++in_flight;
      }
      ch->progress(rec);
      for (auto& [t, ok] : rec.sent) {
        if (!ok) finish(4, "FAIL send " + std::to_string(t) + " failed");
        bufs.erase(t);
      }
      rec.sent.clear();
      for (auto& [p, d] : rec.msgs) {
        if (d != pattern(got, pattern_size(got, max)))
          finish(4, "FAIL echo " + std::to_string(got) + " differs (" + std::to_string(d.size()) + " bytes)");
        ++got;
        --in_flight;
      }
      rec.msgs.clear();
      if (!rec.lost.empty()) finish(4, "FAIL peer lost: " + rec.lost[0].second);
      if (!rec.strangers.empty()) finish(4, "FAIL stranger: " + rec.strangers[0].first);
    }
    finish(0, "OK " + std::to_string(got));
  }
  finish(2, "ERROR unknown role " + role);
}
