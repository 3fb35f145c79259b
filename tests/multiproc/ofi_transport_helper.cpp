// One process of the ofi transport tests (ofi_transport_test): a Transport
// over "ofi" in one of two roles, talking to the test on stdin / stdout:
//   target     registers guard | rw | guard | ro | guard (ofi_transport_scenario.hpp),
//              prints "ADDR <hex>", "KEYRW <hex>", "KEYRO <hex>", reads
//              "PEER <hex>", connects, polls until stdin EOF, then prints
//              "GUARDS <ok|bad at N> RO <ok|bad at N>" and exits 0.
//   requester  prints "ADDR <hex>", reads "PEER", "KEYRW", "KEYRO" lines,
//              connects and runs the scenario: prints "OK" or "FAIL <what>".
// A transport that can't open prints "SKIP <why>" (exit 77); errors "ERROR <what>" (exit 3).
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "kinet/transport.hpp"
#include "ofi_test_util.hpp"
#include "ofi_transport_scenario.hpp"

namespace {
using namespace kinet;
using namespace kinet::test::ofi;

[[noreturn]] void finish(int code, const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  std::_Exit(code);
}
void say(const std::string& l) {
  std::printf("%s\n", l.c_str());
  std::fflush(stdout);
}

std::string in_buf;
bool in_eof = false;
bool in_line(std::string* l) {
  pollfd p{0, POLLIN, 0};
  while (!in_eof && poll(&p, 1, 0) == 1) {
    char b[65536];
    const ssize_t n = read(0, b, sizeof b);
    if (n <= 0) {
      in_eof = true;
      break;
    }
    in_buf.append(b, static_cast<size_t>(n));
  }
  const size_t at = in_buf.find('\n');
  if (at == std::string::npos) return false;
  *l = in_buf.substr(0, at);
  in_buf.erase(0, at + 1);
  return true;
}
// The next stdin line starting with `tag ` (its rest), polling `t` meanwhile.
std::string expect_line(Transport& t, const std::string& tag) {
  std::string l;
  Completion c[8];
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  kinet::test::IdleBackoff idle;
  while (!in_line(&l)) {
    if (in_eof || std::chrono::steady_clock::now() > end) finish(3, "ERROR no " + tag + " line");
    idle(t.poll(c, 0) > 0);
  }
  if (l.rfind(tag + " ", 0) != 0) finish(3, "ERROR expected " + tag + ", got " + l.substr(0, 40));
  return l.substr(tag.size() + 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) finish(2, "ERROR usage: ofi_transport_helper target|requester");
  const std::string role = argv[1];
  std::unique_ptr<Transport> t;
  try {
    t = Transport::open({.provider = "ofi", .name = role, .timeout = std::chrono::seconds(20)});
  } catch (const Error& e) {
    if (e.code() == ErrorCode::NotSupported) finish(77, std::string("SKIP ") + e.what());
    finish(3, std::string("ERROR ") + e.what());
  }
  say("ADDR " + to_hex(t->address()));
  try {
    if (role == "target") {
      std::vector<uint8_t> mem(3 * kGuard + kRw + kRo, kGuardByte);
      uint8_t* rw = mem.data() + kGuard;
      uint8_t* ro = rw + kRw + kGuard;
      std::memset(rw, 0, kRw);
      for (size_t i = 0; i < kRo; ++i) ro[i] = ro_byte(i);
      auto r1 = t->register_memory(rw, kRw, kRemoteWrite | kRemoteRead | kRemoteAtomic);
      auto r2 = t->register_memory(ro, kRo, kRemoteRead);
      say("KEYRW " + to_hex(r1->remote_key().serialize()));
      say("KEYRO " + to_hex(r2->remote_key().serialize()));
      t->connect(from_hex(expect_line(*t, "PEER")), "requester");
      Completion c[64];
      std::string l;
      kinet::test::IdleBackoff idle;  // serves until stdin closes, seconds idle in the fault cases
      while (!in_eof) {
        idle(t->poll(c, 64) > 0);
        in_line(&l);
      }
      std::string g = "ok", o = "ok";
      for (size_t i = 0; i < mem.size(); ++i) {
        const bool guard = i < kGuard || (i >= kGuard + kRw && i < 2 * kGuard + kRw) || i >= 2 * kGuard + kRw + kRo;
        if (guard && mem[i] != kGuardByte && g == "ok") g = "bad at " + std::to_string(i);
      }
      for (size_t i = 0; i < kRo; ++i)
        if (ro[i] != ro_byte(i) && o == "ok") o = "bad at " + std::to_string(i);
      finish(0, "GUARDS " + g + " RO " + o);
    }
    if (role == "requester") {
      const auto addr = from_hex(expect_line(*t, "PEER"));
      const auto krw = from_hex(expect_line(*t, "KEYRW"));
      const auto kro = from_hex(expect_line(*t, "KEYRO"));
      const PeerId p = t->connect(addr, "target");
      Scenario s{*t, p, RemoteKey::deserialize(krw.data(), krw.size()), RemoteKey::deserialize(kro.data(), kro.size())};
      const std::string f = s.go();
      finish(f.empty() ? 0 : 4, f.empty() ? "OK" : "FAIL " + f);
    }
  } catch (const Error& e) {
    finish(3, std::string("ERROR ") + e.what());
  }
  finish(2, "ERROR unknown role " + role);
}
