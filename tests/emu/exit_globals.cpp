// Devices, PDs, QPs and MRs held in globals, connected and with writes in
// flight, are destroyed by exit() in whatever order the runtime picks: the
// program must exit 0 (the software NIC's fabric and memory guard are never
// destroyed).
#include <cstdio>
#include <memory>
#include <vector>

#include "kinet/kinet.hpp"

namespace {
std::unique_ptr<kinet::Device> g_da, g_db;
std::unique_ptr<kinet::ProtectionDomain> g_pa, g_pb;
std::unique_ptr<kinet::QueuePair> g_qa, g_qb;
std::vector<uint8_t> g_buf_a(1 << 20), g_buf_b(1 << 20);
std::unique_ptr<kinet::MemoryRegion> g_ma, g_mb;
}  // namespace

int main() {
  try {
    g_da = kinet::Device::open("emu");
    g_db = kinet::Device::open("emu");
    g_pa = g_da->alloc_pd();
    g_pb = g_db->alloc_pd();
    g_qa = g_pa->create_qp({});
    g_qb = g_pb->create_qp({});
    g_qa->connect(g_qb->info(), kinet::kAccessAll);
    g_qb->connect(g_qa->info(), kinet::kAccessAll);
    g_ma = g_pa->reg_mr(g_buf_a.data(), g_buf_a.size(), kinet::kAccessAll);
    g_mb = g_pb->reg_mr(g_buf_b.data(), g_buf_b.size(), kinet::kAccessAll);
    const kinet::dev::QpHandle h = g_qa->handle();
    for (int i = 0; i < 16; ++i)
      if (kinet::dev::put<kinet::dev::Sharing::Exclusive>(h, g_buf_a.data(), g_ma->lkey(),
                                                          reinterpret_cast<uint64_t>(g_buf_b.data()), g_mb->rkey(),
                                                          g_buf_a.size(), 0, nullptr) != kinet::Status::Ok) {
        std::fprintf(stderr, "put failed\n");
        return 1;
      }
  } catch (const kinet::Error& e) {
    std::fprintf(stderr, "setup failed: %s\n", e.what());
    return 1;
  }
  std::exit(0);  // globals die here, writes still in flight
}
