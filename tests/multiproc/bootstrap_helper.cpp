// One rank of a multi-process bootstrap test. Prints one line and exits:
//   "OK"                          exit 0
//   "ERROR <code> <message>"      exit 3 (a kinet::Error; code = error_code_name)
//   "FAIL <what>"                 exit 4 (data did not verify)
// Usage: kinet_bootstrap_helper (--id HEX | --create-id FILE) --rank R --nranks N
//          [--timeout MS] [--scenario full|init|die_after_barrier] [--victim R]
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "kinet/bootstrap.hpp"

namespace {
// Blob of `rank` in round `round`: size varies per rank, 0 included; bytes
// depend on (round, rank, index) so a blob landing in the wrong slot fails.
std::vector<uint8_t> blob(int round, int rank, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 131 + rank * 17 + round * 7 + 1) ^ (i >> 8));
  return v;
}
size_t gather_size(int round, int rank) { return rank == 0 ? 0 : (rank * 997 + round * 4099) % 70000 + 1; }

[[noreturn]] void fail(const std::string& what) {
  std::printf("FAIL %s\n", what.c_str());
  std::fflush(stdout);
  std::_Exit(4);
}

void full(kinet::Bootstrap& bs) {
  const int r = bs.rank(), n = bs.size();
  for (int round = 0; round < 3; ++round) {
    auto mine = blob(round, r, gather_size(round, r));
    auto all = bs.allgather(mine.data(), mine.size());
    if (static_cast<int>(all.size()) != n) fail("allgather returned " + std::to_string(all.size()) + " blobs");
    for (int j = 0; j < n; ++j)
      if (all[j] != blob(round, j, gather_size(round, j)))
        fail("allgather round " + std::to_string(round) + ": blob of rank " + std::to_string(j) + " differs");
    bs.barrier();
  }
  // A ring of p2p blobs, sent before anyone receives: large ones (4 MiB) fill
  // the socket buffers around the cycle, so this passes only if send makes
  // progress on receives. Two tags, received in the opposite order.
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  if (n > 1) {
    auto big = blob(100, r, 4u << 20);
    auto small = blob(101, r, 1000 + 13 * r);
    bs.send(next, 7, big);
    bs.send(next, 8, small);
    bs.send(next, 9, nullptr, 0);
    if (bs.recv(prev, 8) != blob(101, prev, 1000 + 13 * prev)) fail("p2p tag 8 from rank " + std::to_string(prev));
    if (bs.recv(prev, 7) != blob(100, prev, 4u << 20)) fail("p2p tag 7 from rank " + std::to_string(prev));
    if (!bs.recv(prev, 9).empty()) fail("p2p tag 9 (empty) from rank " + std::to_string(prev));
  }
  bs.barrier();
}
}  // namespace

int main(int argc, char** argv) {
  std::string id_hex, create_file, scenario = "full";
  int rank = -1, nranks = -1, victim = -1;
  long timeout_ms = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--id") id_hex = v;
    else if (k == "--create-id") create_file = v;
    else if (k == "--rank") rank = std::atoi(v.c_str());
    else if (k == "--nranks") nranks = std::atoi(v.c_str());
    else if (k == "--timeout") timeout_ms = std::atol(v.c_str());
    else if (k == "--scenario") scenario = v;
    else if (k == "--victim") victim = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  // Outside the try: a failing rank keeps its connections open while it
  // lingers below, so the others see the victim's loss, not this rank's exit.
  std::unique_ptr<kinet::Bootstrap> bs;
  try {
    kinet::UniqueId id{};
    if (!create_file.empty()) {
      id = kinet::UniqueId::create();
      {
        std::ofstream f(create_file + ".tmp");
        f << id.to_string() << "\n";
      }
      std::rename((create_file + ".tmp").c_str(), create_file.c_str());
    } else {
      id = kinet::UniqueId::from_string(id_hex);
    }
    bs = kinet::Bootstrap::init(id, rank, nranks, std::chrono::milliseconds(timeout_ms));
    if (scenario == "full") {
      full(*bs);
    } else if (scenario == "die_after_barrier") {
      bs->barrier();
      if (bs->rank() == victim) {
        // Half of an allgather reaches the peers, then the process dies.
        auto mine = blob(0, victim, 100);
        bs->send((victim + 1) % bs->size(), 1, mine);
        ::kill(::getpid(), SIGKILL);
      }
      auto mine = blob(0, bs->rank(), 100);
      bs->allgather(mine.data(), mine.size());
      fail("allgather returned although rank " + std::to_string(victim) + " was killed");
    } else if (scenario != "init") {
      fail("unknown scenario " + scenario);
    }
    std::printf("OK\n");
  } catch (const kinet::Error& e) {
    std::printf("ERROR %s %s\n", kinet::error_code_name(e.code()), e.what());
    std::fflush(stdout);
    // A survivor that exits closes its connections, and the others could see
    // that loss before the victim's: hold on so each reports the victim.
    if (scenario == "die_after_barrier") ::sleep(1);
    return 3;
  }
  std::fflush(stdout);
  return 0;
}
