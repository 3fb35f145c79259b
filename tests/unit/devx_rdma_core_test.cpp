// The mlx5 provider loads rdma-core with dlopen (providers/mlx5/rdma_core_lib):
// every entry point resolves from this machine's libibverbs/libmlx5, a
// missing file or symbol is a clear NotSupported, and the device names route
// as documented in providers/mlx5/register.cpp. (The calls themselves need a
// ConnectX device: the hw suite runs them.)
#include <gtest/gtest.h>

#include <string>

#include "kinet/kinet.hpp"
#include "providers/mlx5/devx.hpp"
#include "providers/mlx5/rdma_core.hpp"
#include "providers/mlx5/rdma_core_lib.hpp"
#include <cerrno>
#include <cstring>
#include <functional>

namespace {
using kinet::ErrorCode;
namespace m = kinet::mlx5;

const m::RdmaCoreLib* lib_or_skip() {
  std::string why;
  const m::RdmaCoreLib* l = m::rdma_core(&why);
  if (!l) ADD_FAILURE() << "rdma-core did not load (scripts/install-deps.sh installs it): " << why;
  return l;
}

// f throws kinet::Error with `code` and exactly `what`.
::testing::AssertionResult throws_exactly(const std::function<void()>& f, ErrorCode code, const std::string& what) {
  try {
    f();
  } catch (const kinet::Error& e) {
    if (e.code() == code && e.what() == what) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "threw " << kinet::error_code_name(e.code()) << " \"" << e.what()
                                         << "\", expected " << kinet::error_code_name(code) << " \"" << what
                                         << "\"";
  }
  return ::testing::AssertionFailure() << "did not throw; expected \"" << what << "\"";
}

}  // namespace

TEST(DevxRdmaCore, EveryEntryPointIsSet) {
  if (!lib_or_skip()) return;
  const m::DevxOps& o = m::rdma_core_ops();
  for (const void* p : {(const void*)o.obj_create, (const void*)o.obj_modify, (const void*)o.obj_query,
                        (const void*)o.obj_destroy, (const void*)o.general_cmd, (const void*)o.umem_reg,
                        (const void*)o.umem_dereg, (const void*)o.alloc_uar, (const void*)o.free_uar})
    EXPECT_NE(p, nullptr);
  // Optional: set exactly when libmlx5 has mlx5dv_devx_umem_reg_ex (rdma-core 44, as CI's, has it).
  EXPECT_EQ(o.umem_reg_dmabuf != nullptr, m::rdma_core()->umem_reg_ex != nullptr);
  const m::VerbsOps& v = m::rdma_core_verbs();
  for (const void* p : {(const void*)v.close, (const void*)v.alloc_pd, (const void*)v.dealloc_pd,
                        (const void*)v.reg_mr, (const void*)v.dereg_mr, (const void*)v.query_port})
    EXPECT_NE(p, nullptr);
}

// A missing file and a file without the symbols each say exactly which.
TEST(DevxRdmaCore, LoadFailuresNameTheFileAndSymbol) {
  m::RdmaCoreLib l{};
  std::string why;
  EXPECT_FALSE(m::load_rdma_core("/nonexistent/libibverbs.so.1", "libmlx5.so.1", &l, &why));
  EXPECT_EQ(why.rfind("/nonexistent/libibverbs.so.1 could not be loaded (", 0), 0u) << why;
  if (!lib_or_skip()) return;
  why.clear();
  EXPECT_FALSE(m::load_rdma_core("libibverbs.so.1", "/nonexistent/libmlx5.so.1", &l, &why));
  EXPECT_EQ(why.rfind("/nonexistent/libmlx5.so.1 could not be loaded (", 0), 0u) << why;
  why.clear();
  // libibverbs itself as the mlx5 library: it loads but has no mlx5dv symbol.
  EXPECT_FALSE(m::load_rdma_core("libibverbs.so.1", "libibverbs.so.1", &l, &why));
  EXPECT_EQ(why, "libibverbs.so.1 lacks mlx5dv_is_supported (rdma-core too old?)");
  why.clear();
  EXPECT_TRUE(m::load_rdma_core("libibverbs.so.1", "libmlx5.so.1", &l, &why)) << why;
  EXPECT_NE(l.query_gid_ex, nullptr);
}

// Without an RDMA device: "mlx5_0" is NotFound saying why (no device, or no
// RDMA in this kernel at all), and "auto" falls back to the software NIC.
TEST(DevxRdmaCore, NoDeviceIsNotFoundAndAutoIsTheSoftwareNic) {
  const m::RdmaCoreLib* l = lib_or_skip();
  if (!l) return;
  int n = 0;
  ibv_device** list = l->get_device_list(&n);
  const int list_errno = errno;
  if (list) l->free_device_list(list);
  if (n > 0) GTEST_SKIP() << n << " RDMA devices present: the hw suite opens them";
  // What rdma-core says here: an empty list, or no RDMA support in the kernel.
  const std::string why = list ? " (present: none)"
                               : ": ibv_get_device_list failed (errno " + std::to_string(list_errno) + ": " +
                                     std::strerror(list_errno) + "; ENOSYS: the kernel has no RDMA support loaded)";
  EXPECT_TRUE(throws_exactly([] { m::open_rdma_core_device("mlx5_0"); }, ErrorCode::NotFound,
                             "open mlx5_0: no such RDMA device" + why));
  EXPECT_TRUE(throws_exactly([] { m::open_rdma_core_device("auto"); }, ErrorCode::NotFound,
                             std::string("open auto: no such RDMA device") + (list ? " supporting mlx5dv" : "") + why));
  // Through the registry: any "mlx5_*" name reaches the provider.
  EXPECT_TRUE(throws_exactly([] { kinet::Device::open("mlx5_0"); }, ErrorCode::NotFound,
                             "open mlx5_0: no such RDMA device" + why));
  auto d = kinet::Device::open("auto");
  EXPECT_EQ(d->attr().provider, std::string("emu"));
  // Names of the software NIC's DevX entry point still go to it.
  EXPECT_EQ(kinet::Device::open("mlx5_emu")->attr().provider, std::string("mlx5"));
}
