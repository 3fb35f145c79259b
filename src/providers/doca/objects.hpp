// kinet — SDK mode's shared objects (internal to src/providers/doca): the
// device state every object holds, the PD, and the QP factory (qp.cpp).
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "core/log.hpp"
#include "kinet/kinet.hpp"
#include "providers/doca/device.hpp"
#include "providers/mlx5/host_objects.hpp"

namespace kinet::doca::detail {
using api::Obj;

using mlx5::host::errno_text;
using mlx5::host::hex;
using mlx5::host::log2u;

struct Shared {
  Shared(std::shared_ptr<const Sdk> k, const Backend& b) : sdk(std::move(k)), be(b) {}
  ~Shared() {
    if (vctx)
      if (const auto rc = f().verbs_context_destroy(vctx))
        KINET_LOG(Error, "%s: %s", be.name.c_str(), sdk->describe(rc, "doca_verbs_context_destroy").c_str());
    be.verbs->close(be.ctx);
  }
  Shared(const Shared&) = delete;
  std::shared_ptr<const Sdk> sdk;
  Backend be;
  std::mutex mu;  // serialises every call into the SDK and the verbs table
  Obj vctx = nullptr;
  DeviceAttr attr;
  mlx5::PortInfo port;
  std::atomic<bool> closed{false};

  const api::Fns& f() const { return sdk->fn(); }
  const std::string& name() const { return be.name; }
  void check(api::doca_error_t rc, const char* call, const std::string& who, const std::string& detail = {}) const {
    sdk->check(rc, call, who, detail);
  }
  void check_open(const std::string& who, const char* op) const {
    if (closed.load(std::memory_order_acquire))
      throw Error(ErrorCode::BadState, who + ": " + op + ": " + be.name + " was closed");
  }
};

// Destroys a DOCA attribute object when the scope ends.
struct Attr {
  const Shared& s;
  api::doca_error_t (*destroy)(Obj);
  const char* destroy_name;
  Obj o = nullptr;
  ~Attr() {
    if (o)
      if (const auto rc = destroy(o))
        KINET_LOG(Error, "%s: %s", s.name().c_str(), s.sdk->describe(rc, destroy_name).c_str());
  }
};

// A PD and the SDK's view of it, released when its last user goes.
struct PdRes {
  std::shared_ptr<Shared> s;
  ibv_pd* pd = nullptr;
  uint32_t pdn = 0;
  Obj dev = nullptr, vpd = nullptr;
  ~PdRes() {
    if (!s) return;
    std::lock_guard<std::mutex> g(s->mu);
    if (vpd)
      if (const auto rc = s->f().verbs_pd_destroy(vpd))
        KINET_LOG(Error, "%s: %s", s->name().c_str(), s->sdk->describe(rc, "doca_verbs_pd_destroy").c_str());
    if (dev)
      if (const auto rc = s->f().dev_close(dev))
        KINET_LOG(Error, "%s: %s", s->name().c_str(), s->sdk->describe(rc, "doca_dev_close").c_str());
    if (pd)
      if (const int rc = s->be.verbs->dealloc_pd(pd); rc != 0)
        KINET_LOG(Error, "%s: freeing PD %u failed (%s)", s->name().c_str(), pdn, errno_text(rc).c_str());
  }
};

// A QP of `pd` (config already checked by the PD): qp.cpp.
std::unique_ptr<QueuePair> make_qp(std::shared_ptr<PdRes> pd, const QpConfig& cfg);
}  // namespace kinet::doca::detail
