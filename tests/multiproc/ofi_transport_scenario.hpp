// kinet ofi transport tests — the requester's scenario over a Transport to a
// target process (ofi_transport_helper "target"): every operation with data
// byte for byte, split transfers, more operations than the depth, and crafted
// out-of-bounds / wrong-access / wrong-key / unaligned operations answered
// with their exact status. Run by the test itself (loopback) and by the
// helper's "requester" role (network namespaces). Returns "" or what failed.
#pragma once
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "kinet/transport.hpp"
#include "../common/idle_backoff.hpp"

namespace kinet::test::ofi {

// The target's memory: guard | rw region | guard | read-only region | guard.
constexpr size_t kGuard = 64, kRw = 512 * 1024, kRo = 4096;
constexpr uint8_t kGuardByte = 0xee;
inline uint8_t ro_byte(size_t i) { return static_cast<uint8_t>(i * 7 + 3); }

struct Scenario {
  Transport& t;
  PeerId peer;
  RemoteKey rw, ro;  // the target's keys
  std::string fail;
  std::vector<uint8_t> model = std::vector<uint8_t>(kRw, 0);  // what rw must hold
  Scenario(Transport& tr, PeerId p, RemoteKey w, RemoteKey r) : t(tr), peer(p), rw(std::move(w)), ro(std::move(r)) {}

  // Posts with `post` (retrying NoSpace) and waits for that one completion.
  template <class F>
  Status run(F&& post, uint64_t cookie) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    Completion c[16];
    Status s;
    while ((s = post()) == Status::NoSpace && std::chrono::steady_clock::now() < end) t.poll(c, 0);
    if (s != Status::Ok) return s;
    IdleBackoff idle;  // a killed or stopped target takes seconds to give up on
    while (std::chrono::steady_clock::now() < end) {
      const size_t n = t.poll(c, 16);
      for (size_t i = 0; i < n; ++i)
        if (c[i].cookie == cookie) return c[i].status;
      idle(n > 0);
    }
    return Status::Pending;
  }
  bool expect(Status got, Status want, const std::string& what) {
    if (got == want) return true;
    if (fail.empty())
      fail = what + ": status " + std::to_string(static_cast<int>(got)) + ", expected " +
             std::to_string(static_cast<int>(want)) + " (" + t.peer_error(peer) + ")";
    return false;
  }
  bool check(bool ok, const std::string& what) {
    if (!ok && fail.empty()) fail = what;
    return ok;
  }

  std::string go() {
    const uint32_t krw = t.import_key(peer, rw), kro = t.import_key(peer, ro);
    RemoteKey forged = rw;
    forged.rkey ^= 0x5a5a;
    const uint32_t kbad = t.import_key(peer, forged);
    const uint64_t a = rw.addr;
    uint64_t cookie = 1;
    auto pat = [](size_t n, uint8_t salt) {
      std::vector<uint8_t> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + salt + (i >> 8));
      return v;
    };
    auto put = [&](const std::vector<uint8_t>& d, uint64_t off, uint32_t key, Status want, const std::string& what) {
      const uint64_t c = cookie++;
      const bool ok = expect(run([&] { return t.put(peer, d.data(), d.size(), key, a + off, c); }, c), want, what);
      if (ok && want == Status::Ok) std::memcpy(model.data() + off, d.data(), d.size());
    };
    auto get_cmp = [&](uint64_t off, size_t n, const std::string& what) {
      std::vector<uint8_t> back(n, 0x11);
      const uint64_t c = cookie++;
      if (expect(run([&] { return t.get(peer, back.data(), n, krw, a + off, c); }, c), Status::Ok, what))
        check(std::memcmp(back.data(), model.data() + off, n) == 0, what + ": data differs");
    };
    // put / get, small and split (more than three pieces)
    put(pat(1000, 1), 100, krw, Status::Ok, "put 1000 B");
    get_cmp(0, 4096, "get 4 KiB");
    const size_t big = 3 * 65536 + 777;
    put(pat(big, 2), 8192, krw, Status::Ok, "split put");
    get_cmp(8192, big, "split get");
    // the region's last byte and one past it; one before its start
    put(pat(1, 3), kRw - 1, krw, Status::Ok, "put of the last byte");
    {
      std::vector<uint8_t> two = pat(2, 4);
      const uint64_t c = cookie++;
      expect(run([&] { return t.put(peer, two.data(), 2, krw, a + kRw - 1, c); }, c), Status::RemoteAccess,
             "put one byte past the end");
      const uint64_t c2 = cookie++;
      expect(run([&] { return t.put(peer, two.data(), 1, krw, a - 1, c2); }, c2), Status::RemoteAccess,
             "put one byte before the start");
      std::vector<uint8_t> back(2);
      const uint64_t c3 = cookie++;
      expect(run([&] { return t.get(peer, back.data(), 2, krw, a + kRw - 1, c3); }, c3), Status::RemoteAccess,
             "get one byte past the end");
    }
    // access rights: read-only region takes get, refuses put and atomics
    {
      std::vector<uint8_t> back(kRo);
      const uint64_t c = cookie++;
      if (expect(run([&] { return t.get(peer, back.data(), kRo, kro, ro.addr, c); }, c), Status::Ok, "get of ro"))
        for (size_t i = 0; i < kRo; ++i)
          if (!check(back[i] == ro_byte(i), "ro byte " + std::to_string(i) + " differs")) break;
      const auto d = pat(8, 5);
      const uint64_t c2 = cookie++;
      expect(run([&] { return t.put(peer, d.data(), 8, kro, ro.addr, c2); }, c2), Status::RemoteAccess, "put to ro");
      uint64_t r = 0;
      const uint64_t c3 = cookie++;
      expect(run([&] { return t.fetch_add(peer, &r, kro, ro.addr, 1, c3); }, c3), Status::RemoteAccess,
             "fetch_add on ro");
    }
    // a key the target never issued
    {
      const auto d = pat(8, 6);
      const uint64_t c = cookie++;
      expect(run([&] { return t.put(peer, d.data(), 8, kbad, a, c); }, c), Status::RemoteAccess, "put with a forged key");
    }
    // atomics and signals
    {
      uint64_t r = 77;
      uint64_t c = cookie++;
      const uint64_t w = 16;  // an 8-byte word of rw
      std::memset(model.data() + w, 0, 8);
      std::vector<uint8_t> zero(8, 0);
      put(zero, w, krw, Status::Ok, "zero the atomic word");
      c = cookie++;
      expect(run([&] { return t.fetch_add(peer, &r, krw, a + w, 5, c); }, c), Status::Ok, "fetch_add");
      check(r == 0, "fetch_add returned " + std::to_string(r));
      c = cookie++;
      expect(run([&] { return t.compare_swap(peer, &r, krw, a + w, 5, 9, c); }, c), Status::Ok, "compare_swap hit");
      check(r == 5, "compare_swap returned " + std::to_string(r));
      c = cookie++;
      expect(run([&] { return t.compare_swap(peer, &r, krw, a + w, 5, 11, c); }, c), Status::Ok, "compare_swap miss");
      check(r == 9, "compare_swap (miss) returned " + std::to_string(r));
      c = cookie++;
      expect(run([&] { return t.fetch_add(peer, &r, krw, a + w + 4, 1, c); }, c), Status::RemoteInvalidRequest,
             "unaligned fetch_add");
      c = cookie++;
      expect(run([&] { return t.signal(peer, krw, a + w, SignalOp::Add, 100, c); }, c), Status::Ok, "signal add");
      const uint64_t nine = 109;
      std::memcpy(model.data() + w, &nine, 8);
      const auto d = pat(3000, 7);
      c = cookie++;
      if (expect(run([&] { return t.put_signal(peer, d.data(), d.size(), krw, a + 20000, krw, a + 24, SignalOp::Set,
                                               4242, c); },
                     c),
                 Status::Ok, "put_signal")) {
        std::memcpy(model.data() + 20000, d.data(), d.size());
        const uint64_t v = 4242;
        std::memcpy(model.data() + 24, &v, 8);
      }
      get_cmp(0, 64, "atomic words");
      get_cmp(20000, 3000, "put_signal data");
    }
    // more operations than the depth (1024 by default): 3000 8-byte puts
    {
      constexpr size_t kN = 3000;
      std::vector<uint64_t> vals(kN);
      size_t posted = 0, done = 0, nospace = 0;
      const uint64_t base = cookie;
      cookie += kN;
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      Completion cs[64];
      while (done < kN && std::chrono::steady_clock::now() < end) {
        while (posted < kN) {
          vals[posted] = posted * 0x9e3779b97f4a7c15ull;
          const Status s = t.put(peer, &vals[posted], 8, krw, a + 300000 + 8 * posted, base + posted);
          if (s == Status::NoSpace) {
            ++nospace;
            break;
          }
          if (!expect(s, Status::Ok, "post of put " + std::to_string(posted))) return fail;
          ++posted;
        }
        const size_t n = t.poll(cs, 64);
        for (size_t i = 0; i < n; ++i) expect(cs[i].status, Status::Ok, "put " + std::to_string(cs[i].cookie - base));
        done += n;
      }
      check(done == kN, "only " + std::to_string(done) + " of 3000 puts completed");
      check(nospace > 0, "3000 puts never hit the depth");
      std::memcpy(model.data() + 300000, vals.data(), 8 * kN);
      get_cmp(300000, 8 * kN, "3000 puts");
    }
    get_cmp(0, kRw, "the whole region");
    return fail;
  }
};

}  // namespace kinet::test::ofi
