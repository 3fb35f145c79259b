// kinet-info's GDAKI diagnosis (tools/kinet-info/diagnose.hpp) over
// fabricated fact sets: a machine with everything, and each thing missing
// alone (no NIC, no GPU, a NIC that is not mlx5, a port down, no RoCE v2 GID,
// neither dma-buf nor peermem, a container without uverbs, uverbs without
// access, a low memlock limit, no GDRCopy, a build without rdma-core), each
// with its exact verdict, reason and fix.
#include <gtest/gtest.h>

#include <limits>

#include "diagnose.hpp"

namespace {
using namespace kinet::info;
namespace m = kinet::mlx5;

bool has(const std::string& t, const std::string& p) { return t.find(p) != std::string::npos; }

m::RdmaDevice roce_nic(const std::string& name = "mlx5_0") {
  m::RdmaDevice n;
  n.name = name;
  n.mlx5 = true;
  n.pci = "0000:17:00.0";
  m::PortEntry p;
  p.port = 1;
  p.state = "active";
  p.link_layer = "Ethernet";
  p.active_mtu = 4096;
  p.gids = {{0, "fe80::1", "RoCE v1", "eth0"}, {1, "fe80::1", "RoCE v2", "eth0"},
            {3, "::ffff:10.0.0.2", "RoCE v2", "eth0"}};
  n.ports.push_back(p);
  return n;
}

// A machine where GDAKI runs: GPU, ConnectX with an active RoCE port, peermem,
// device files, unlimited memlock, GDRCopy, a provider that maps the UAR.
Facts good() {
  Facts f;
  f.gpus.push_back({0, "NVIDIA H200", 90, "0000:18:00.0", 1});
  f.rdma_core_built = true;
  f.nics.push_back(roce_nic());
  f.kernel_release = "6.8.0-45-generic";
  f.nvidia_driver = true;
  f.peermem_loaded = true;
  f.registry_dwords = "PeerMappingOverride=1;";
  f.dev_infiniband = true;
  f.uverbs = {"/dev/infiniband/uverbs0"};
  f.rdma_cm = true;
  f.memlock_bytes = std::numeric_limits<uint64_t>::max();
  f.gdrcopy = true;
  f.provider_maps_uar = true;
  return f;
}

const Finding* find(const std::vector<Finding>& v, const std::string& check) {
  for (const Finding& x : v)
    if (x.check == check) return &x;
  return nullptr;
}
int blockers(const Diagnosis& d) {
  int n = 0;
  for (const Finding& x : d.machine) n += x.blocker;
  for (const Pair& p : d.pairs)
    for (const Finding& x : p.findings) n += x.blocker;
  return n;
}

TEST(Diagnose, EverythingPresentRunsWithTheUarDoorbell) {
  const Diagnosis d = diagnose(good());
  EXPECT_TRUE(d.any_gdaki);
  ASSERT_EQ(d.pairs.size(), 1u);
  EXPECT_TRUE(d.pairs[0].gdaki);
  EXPECT_EQ(d.pairs[0].doorbell, "uar");
  EXPECT_EQ(blockers(d), 0);
  EXPECT_EQ(d.summary, "GDAKI can run here (doorbell mode uar)");
  EXPECT_EQ(d.backend, "mlx5 provider over rdma-core (DevX), doorbell mode uar");
  EXPECT_EQ(find(d.machine, "gdrcopy"), nullptr);
  EXPECT_EQ(find(d.machine, "uar"), nullptr);
}

TEST(Diagnose, NoNicSaysSoPlainly) {
  Facts f = good();
  f.nics.clear();
  f.dev_infiniband = false;
  f.uverbs.clear();
  const Diagnosis d = diagnose(f);
  EXPECT_FALSE(d.any_gdaki);
  EXPECT_TRUE(d.pairs.empty());
  const Finding* n = find(d.machine, "nic");
  ASSERT_NE(n, nullptr);
  EXPECT_TRUE(n->blocker);
  EXPECT_EQ(n->what, "no RDMA device");
  EXPECT_TRUE(has(n->fix, "software NIC (devices 'emu', 'mlx5_emu')"));
  EXPECT_EQ(d.summary, "GDAKI can't run here: no RDMA device");
  EXPECT_EQ(d.backend, "the software NIC only (devices 'emu', 'mlx5_emu'): no RDMA device");
  EXPECT_EQ(find(d.machine, "devices"), nullptr) << "no device-file complaints without a NIC";
  EXPECT_EQ(find(d.machine, "uar"), nullptr) << "no doorbell talk without a NIC";
}

TEST(Diagnose, NoGpu) {
  Facts f = good();
  f.gpus.clear();
  f.gpu_problem = "no NVIDIA driver (libcuda.so.1 not found)";
  const Diagnosis d = diagnose(f);
  EXPECT_FALSE(d.any_gdaki);
  const Finding* g = find(d.machine, "gpu");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->what, "no GPU: no NVIDIA driver (libcuda.so.1 not found)");
  EXPECT_EQ(d.summary, "GDAKI can't run here: no GPU: no NVIDIA driver (libcuda.so.1 not found)");
}

TEST(Diagnose, NicThatIsNotMlx5) {
  Facts f = good();
  f.nics[0].mlx5 = false;
  f.nics[0].name = "irdma0";
  const Diagnosis d = diagnose(f);
  ASSERT_EQ(d.pairs.size(), 1u);
  EXPECT_FALSE(d.pairs[0].gdaki);
  ASSERT_EQ(d.pairs[0].findings.size(), 1u);
  EXPECT_EQ(d.pairs[0].findings[0].what, "irdma0 is not an mlx5 (ConnectX) device");
  EXPECT_EQ(d.summary, "GDAKI can't run here: irdma0 is not an mlx5 (ConnectX) device");
}

TEST(Diagnose, OneGoodNicOfTwo) {
  Facts f = good();
  f.nics.push_back(roce_nic("mlx5_1"));
  f.nics[1].ports[0].state = "down";
  const Diagnosis d = diagnose(f);
  ASSERT_EQ(d.pairs.size(), 2u);
  EXPECT_TRUE(d.pairs[0].gdaki);
  EXPECT_FALSE(d.pairs[1].gdaki);
  EXPECT_EQ(d.pairs[1].findings[0].what, "mlx5_1 has no active port (port 1 down)");
  EXPECT_TRUE(d.any_gdaki);
}

TEST(Diagnose, RocePortWithoutRoceV2Gid) {
  Facts f = good();
  f.nics[0].ports[0].gids = {{0, "fe80::1", "RoCE v1", "eth0"}};
  const Diagnosis d = diagnose(f);
  ASSERT_EQ(d.pairs[0].findings.size(), 1u);
  EXPECT_EQ(d.pairs[0].findings[0].check, "gid");
  EXPECT_EQ(d.pairs[0].findings[0].what, "mlx5_0 port 1 (RoCE) has no RoCE v2 GID");
  EXPECT_TRUE(has(d.pairs[0].findings[0].fix, "KINET_GID_INDEX"));
}

TEST(Diagnose, InfiniBandNeedsNoGid) {
  Facts f = good();
  f.nics[0].ports[0].link_layer = "InfiniBand";
  f.nics[0].ports[0].gids.clear();
  EXPECT_TRUE(diagnose(f).any_gdaki);
}

TEST(Diagnose, NeitherDmabufNorPeermem) {
  Facts f = good();
  f.peermem_loaded = false;
  f.kernel_release = "5.11.22";
  Diagnosis d = diagnose(f);
  const Finding* m = find(d.machine, "memory");
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->blocker);
  EXPECT_EQ(m->what, "neither dma-buf nor nvidia_peermem: kernel 5.11.22 is older than 5.12 (no RDMA dma-buf import) "
                     "and /sys/module/nvidia_peermem is absent");
  EXPECT_TRUE(has(m->fix, "modprobe nvidia_peermem"));
  EXPECT_FALSE(d.any_gdaki);
  // The edge: 5.12 with a GPU that exports dma-bufs is enough.
  f.kernel_release = "5.12.0";
  d = diagnose(f);
  EXPECT_FALSE(find(d.machine, "memory")->blocker);
  EXPECT_TRUE(has(find(d.machine, "memory")->what, "dma-buf: kernel 5.12.0"));
  EXPECT_TRUE(d.any_gdaki);
  // A new kernel but a GPU without dma-buf support.
  f.gpus[0].dmabuf = 0;
  d = diagnose(f);
  EXPECT_TRUE(find(d.machine, "memory")->blocker);
  EXPECT_TRUE(has(find(d.machine, "memory")->what, "the GPU does not report dma-buf support"));
}

TEST(Diagnose, ContainerWithoutDeviceFiles) {
  Facts f = good();
  f.dev_infiniband = false;
  f.uverbs.clear();
  f.rdma_cm = false;
  const Diagnosis d = diagnose(f);
  const Finding* x = find(d.machine, "devices");
  ASSERT_NE(x, nullptr);
  EXPECT_TRUE(x->blocker);
  EXPECT_EQ(x->what, "/dev/infiniband is missing (RDMA devices are listed, but can't be opened here)");
  EXPECT_TRUE(has(x->fix, "--device=/dev/infiniband/uverbsN"));
  EXPECT_FALSE(d.any_gdaki);
}

TEST(Diagnose, UverbsWithoutAccess) {
  Facts f = good();
  f.uverbs = {"/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"};
  f.uverbs_denied = {"/dev/infiniband/uverbs1"};
  const Diagnosis d = diagnose(f);
  EXPECT_EQ(find(d.machine, "devices")->what, "no read/write access to /dev/infiniband/uverbs1");
  EXPECT_FALSE(d.any_gdaki);
}

TEST(Diagnose, MemlockEdge) {
  Facts f = good();
  f.memlock_bytes = (uint64_t(1) << 30) - 1;
  Diagnosis d = diagnose(f);
  ASSERT_NE(find(d.machine, "memlock"), nullptr);
  EXPECT_TRUE(find(d.machine, "memlock")->blocker);
  EXPECT_TRUE(has(find(d.machine, "memlock")->what, "memlock limit 1023 MiB and no CAP_IPC_LOCK"));
  f.memlock_bytes = uint64_t(1) << 30;
  EXPECT_EQ(find(diagnose(f).machine, "memlock"), nullptr);
  f.memlock_bytes = 8 << 20;
  f.cap_ipc_lock = true;
  EXPECT_EQ(find(diagnose(f).machine, "memlock"), nullptr) << "CAP_IPC_LOCK pins without limit";
}

TEST(Diagnose, UarNotMappableFallsBackToCpuDoorbellAndNamesTheDriverSetting) {
  Facts f = good();
  f.provider_maps_uar = false;
  f.provider_uar_why = "cudaHostRegister failed (error 800)";
  f.registry_dwords = "";
  const Diagnosis d = diagnose(f);
  EXPECT_TRUE(d.any_gdaki) << "CPU-assisted doorbells still run GDAKI";
  EXPECT_EQ(d.pairs[0].doorbell, "cpu");
  EXPECT_EQ(d.pairs[0].doorbell_why, "cudaHostRegister failed (error 800)");
  const Finding* u = find(d.machine, "uar");
  ASSERT_NE(u, nullptr);
  EXPECT_FALSE(u->blocker);
  EXPECT_TRUE(has(u->what, "without PeerMappingOverride=1")) << u->what;
  EXPECT_EQ(u->fix, "nothing needed to run; for GPU-rung doorbells the UAR must map into the GPU: NVIDIA driver option "
                    "NVreg_RegistryDwords=\"PeerMappingOverride=1;\" (then reload the driver)");
  f.registry_dwords = "PeerMappingOverride=1;";
  EXPECT_EQ(find(diagnose(f).machine, "uar")->fix,
            "nothing needed to run; for GPU-rung doorbells the UAR must map into the GPU");
  EXPECT_EQ(d.summary, "GDAKI can run here (doorbell mode cpu)");
}

TEST(Diagnose, DoorbellEnvironmentIsHonouredOrReported) {
  Facts f = good();
  f.doorbell_env = "bf";
  EXPECT_EQ(diagnose(f).pairs[0].doorbell, "bf");
  f.doorbell_env = "nonsense";
  const Diagnosis d = diagnose(f);
  EXPECT_EQ(d.pairs[0].doorbell, "none");
  EXPECT_EQ(d.pairs[0].doorbell_why, "KINET_DOORBELL_MODE=nonsense is not one of auto, uar, bf, cpu");
}

TEST(Diagnose, GdrcopyAbsentIsANoteNotABlocker) {
  Facts f = good();
  f.gdrcopy = false;
  f.gdrcopy_problem = "libgdrapi.so.2: cannot open shared object file";
  const Diagnosis d = diagnose(f);
  const Finding* g = find(d.machine, "gdrcopy");
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(g->blocker);
  EXPECT_TRUE(has(g->what, "GDRCopy is absent (libgdrapi.so.2: cannot open shared object file)"));
  EXPECT_TRUE(d.any_gdaki);
}

TEST(Diagnose, BuiltWithoutRdmaCore) {
  Facts f = good();
  f.rdma_core_built = false;
  f.nics.clear();
  f.nic_names = {"mlx5_0"};
  const Diagnosis d = diagnose(f);
  const Finding* b = find(d.machine, "build");
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(has(b->what, "built without rdma-core"));
  EXPECT_TRUE(d.pairs.empty());
  EXPECT_FALSE(d.any_gdaki);
  EXPECT_EQ(d.summary, "GDAKI can't run here: kinet-info was built without rdma-core");
}

TEST(Diagnose, JsonAndTextCarryTheVerdict) {
  Facts f = good();
  f.peermem_loaded = false;
  f.kernel_release = "5.4.0";
  const Diagnosis d = diagnose(f);
  const auto j = to_json(f, d);
  EXPECT_EQ(j["gdaki"], false);
  EXPECT_EQ(j["pairs"][0]["nic"], "mlx5_0");
  EXPECT_EQ(j["rdma_devices"][0]["ports"][0]["gids"][2]["gid"], "::ffff:10.0.0.2");
  const std::string t = to_text(f, d);
  EXPECT_TRUE(has(t, "BLOCKER [memory] neither dma-buf nor nvidia_peermem")) << t;
  EXPECT_TRUE(has(t, "GPU 0 + mlx5_0: GDAKI can't run")) << t;
  EXPECT_TRUE(has(t, "GID[3] ::ffff:10.0.0.2 RoCE v2 (eth0)")) << t;
}

TEST(Diagnose, KernelVersion) {
  EXPECT_EQ(kernel_version("5.12.0-rc1"), std::make_pair(5, 12));
  EXPECT_EQ(kernel_version("6.18.44-fc-v1045"), std::make_pair(6, 18));
  EXPECT_EQ(kernel_version("garbage"), std::make_pair(0, 0));
}

}  // namespace
