// kinet multiproc tests — one side of a UCX channel test between processes.
//   ucx_channel_helper --mode stream|killer|victim|stranger|intruder --me FILE --peer FILE [--count N]
// Writes this side's address to --me, reads the other's from --peer (both
// bounded), runs the mode and prints one line: "OK ..." or "FAIL <why>".
//   stream:   both sides send --count messages of stream_size() to each other,
//             check them in order byte for byte, then exchange "BYE".
//   victim:   sends "HELLO", and once "ACK" arrives kills itself with SIGKILL.
//   killer:   waits for "HELLO", answers "ACK", then sends a message every ~2 ms
//             (--idle: none) until on_peer_lost; prints "OK lost after <ms> ms:
//             <why>". --silent: expects no on_peer_lost for 2 s (shared memory).
//   stranger: never adds the peer; waits for its message through on_stranger.
//   intruder: adds the peer, sends "INTRUDER" to it.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "transports/ucx/ucx_channel.hpp"
#include "ucx_channel_util.hpp"

using namespace kinet::test::ucx;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {
std::string arg(int argc, char** argv, const char* name, const char* dflt = "") {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return dflt;
}
bool flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}
int fail(const std::string& why) {
  std::printf("FAIL %s\n", why.c_str());
  std::fflush(stdout);
  return 1;
}
void write_address(const std::string& path, const std::vector<uint8_t>& a) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(reinterpret_cast<const char*>(a.data()), static_cast<std::streamsize>(a.size()));
  }
  std::rename(tmp.c_str(), path.c_str());
}
std::vector<uint8_t> read_address(const std::string& path, std::chrono::milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  while (Clock::now() < deadline) {
    std::ifstream f(path, std::ios::binary);
    if (f) return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    std::this_thread::sleep_for(1ms);  // polling a file another process renames into place
  }
  return {};
}
bool is(const Recorder::Msg& m, const char* text) {
  return m.data.size() == std::strlen(text) && std::memcmp(m.data.data(), text, m.data.size()) == 0;
}
bool send_text(kinet::transport::Channel& ch, uint32_t peer, const char* text, uint64_t token) {
  iovec iov{const_cast<char*>(text), std::strlen(text)};
  return ch.send(peer, &iov, 1, token);
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = arg(argc, argv, "--mode");
  const std::string me = arg(argc, argv, "--me"), peer_file = arg(argc, argv, "--peer");
  const uint64_t count = std::stoull(arg(argc, argv, "--count", "200"));
  try {
    auto ch = kinet::transport::ucx::make_channel(random_node(), "helper " + mode);
    write_address(me, ch->address());
    const auto pa = read_address(peer_file, 20s);
    if (pa.empty()) return fail("no peer address in " + peer_file + " after 20 s");
    Recorder r;
    const auto deadline = Clock::now() + 60s;  // generous: sanitizers on 2 loaded cores
    auto spin = [&](auto pred) {
      kinet::test::IdleBackoff idle;
      while (!pred()) {
        if (Clock::now() > deadline) return false;
        idle(ch->progress(r) > 0);
      }
      return true;
    };
    if (mode == "stranger") {
      if (!spin([&] { return !r.strangers.empty(); })) return fail("no stranger's message within 60 s");
      uint64_t node = 0;
      for (int i = 0; i < 8; ++i) node |= uint64_t{pa[8 + i]} << (8 * i);
      char hex[24];
      std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(node));
      const auto& s = r.strangers[0];
      if (std::string(s.data.begin(), s.data.end()) != "INTRUDER") return fail("the stranger's data differs");
      if (s.who.find(hex) == std::string::npos) return fail("who = '" + s.who + "' does not name " + hex);
      if (!r.msgs.empty()) return fail("a stranger's message was delivered as a peer's");
      std::printf("OK %s\n", s.who.c_str());
      return 0;
    }
    const uint32_t p = ch->add_peer(pa, "the other helper");
    if (mode == "intruder") {
      if (!send_text(*ch, p, "INTRUDER", 1)) return fail("send refused");
      spin([&] { return !r.sent.empty(); });  // whether it completes doesn't matter
      std::printf("OK sent\n");
      return 0;
    }
    if (mode == "victim") {
      // on_sent means the buffer is free, not that the data arrived: wait for ACK.
      if (!send_text(*ch, p, "HELLO", 1)) return fail("send refused");
      if (!spin([&] { return !r.msgs.empty(); })) return fail("no ACK within 60 s");
      std::fflush(stdout);
      kill(getpid(), SIGKILL);
    }
    if (mode == "killer") {
      if (!spin([&] { return !r.msgs.empty(); })) return fail("no HELLO within 60 s");
      if (!send_text(*ch, p, "ACK", 2)) return fail("send refused");
      const auto t0 = Clock::now();
      const bool idle = flag(argc, argv, "--idle");
      uint64_t tok = 100;
      auto last = t0;
      const bool silent = flag(argc, argv, "--silent");
      const long long silent_ms = 2000;
      const auto lost_by = Clock::now() + (silent ? std::chrono::milliseconds(silent_ms) : 20s);
      kinet::test::IdleBackoff backoff;  // a silent case waits 2 s
      while (r.lost.empty() && Clock::now() < lost_by) {
        if (!idle && Clock::now() - last > 2ms) {
          if (send_text(*ch, p, "PING", tok)) ++tok;
          last = Clock::now();
        }
        backoff(ch->progress(r) > 0);
      }
      if (silent) {
        // Shared memory without peer failure detection: nothing reported,
        // nothing blocks; the engine's timeout is what finds the dead peer.
        if (!r.lost.empty()) return fail("on_peer_lost without UCX's peer failure detection: " + r.lost[0].second);
        std::printf("OK silent for %lld ms, %llu sends taken\n", static_cast<long long>(silent_ms),
                    static_cast<unsigned long long>(tok - 100));
        return 0;
      }
      if (r.lost.empty()) return fail("no on_peer_lost within 20 s of the victim's HELLO");
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
      if (r.lost.size() != 1 || r.lost[0].first != p) return fail("on_peer_lost for the wrong peer or twice");
      // Later sends complete not ok.
      if (!send_text(*ch, p, "LATE", 7)) return fail("send to a lost peer refused");
      if (!spin([&] { return r.sent.count(7); }) || r.sent[7]) return fail("a send to a lost peer did not fail");
      std::printf("OK lost after %lld ms: %s\n", static_cast<long long>(ms), r.lost[0].second.c_str());
      return 0;
    }
    if (mode == "stream") {
      StreamSender tx{ch.get(), p, count};
      StreamReceiver rx;
      bool bye_sent = false, bye_got = false;
      while (!(bye_got && bye_sent && r.sent.count(~0ull))) {
        if (Clock::now() > deadline)
          return fail("stream not done in 60 s: sent " + std::to_string(tx.next) + ", received " +
                      std::to_string(rx.got) + " of " + std::to_string(count));
        ch->progress(r);
        // The other side exits only after our BYE, which we send only after
        // its whole stream arrived: losing it then is its normal exit.
        if (!r.lost.empty() && !(bye_sent && rx.got == count)) return fail("peer lost: " + r.lost[0].second);
        if (!r.lost.empty()) break;
        tx.pump(r);
        while (!r.msgs.empty() && rx.got < count) {
          Recorder r1;
          r1.msgs.push_back(std::move(r.msgs.front()));
          r.msgs.pop_front();
          rx.pump(r1, p);
        }
        if (!rx.error.empty()) return fail(rx.error);
        if (!tx.error.empty()) return fail(tx.error);
        if (rx.got == count && !r.msgs.empty()) {
          if (!is(r.msgs.front(), "BYE")) return fail("a message after the stream that is not BYE");
          r.msgs.pop_front();
          bye_got = true;
        }
        if (tx.done() && rx.got == count && !bye_sent) bye_sent = send_text(*ch, p, "BYE", ~0ull);
      }
      if (r.lost.empty() && !r.sent[~0ull]) return fail("BYE not delivered");
      std::printf("OK %llu each way, up to %llu in flight\n", static_cast<unsigned long long>(count),
                  static_cast<unsigned long long>(tx.max_inflight));
      return 0;
    }
    return fail("unknown --mode " + mode);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
