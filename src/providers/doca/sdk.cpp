// kinet — SDK mode's loader (see sdk.hpp).
#include "providers/doca/sdk.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/log.hpp"

namespace kinet::doca {
namespace {
using api::Fns;
using api::Lib;

// One entry point: where it is looked up and where its address goes.
struct Symbol {
  Lib lib;
  const char* name;
  size_t slot;  // offsetof the pointer in Fns
  bool required;
};

#define KINET_DOCA_SYM(lib, name, field, req) {Lib::lib, name, offsetof(Fns, field), req}
constexpr Symbol kSymbols[] = {
    KINET_DOCA_SYM(Common, "doca_error_get_name", error_get_name, false),
    KINET_DOCA_SYM(Common, "doca_error_get_descr", error_get_descr, false),
    KINET_DOCA_SYM(Common, "kinet_standin", kinet_standin, false),
    KINET_DOCA_SYM(Common, "doca_rdma_bridge_open_dev_from_pd", rdma_bridge_open_dev_from_pd, true),
    KINET_DOCA_SYM(Common, "doca_dev_close", dev_close, true),
    KINET_DOCA_SYM(Common, "doca_umem_create", umem_create, true),
    KINET_DOCA_SYM(Common, "doca_umem_destroy", umem_destroy, true),
    KINET_DOCA_SYM(Common, "doca_uar_create", uar_create, true),
    KINET_DOCA_SYM(Common, "doca_uar_destroy", uar_destroy, true),
    KINET_DOCA_SYM(Common, "doca_uar_reg_addr_get", uar_reg_addr_get, true),

    KINET_DOCA_SYM(Verbs, "doca_verbs_bridge_verbs_context_import", verbs_context_import, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_context_destroy", verbs_context_destroy, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_bridge_verbs_pd_import", verbs_pd_import, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_pd_destroy", verbs_pd_destroy, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_bridge_verbs_query_device", verbs_query_device, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_device_attr_free", device_attr_free, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_device_attr_get_max_qp", device_attr_get_max_qp, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_device_attr_get_max_qp_wr", device_attr_get_max_qp_wr, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_device_attr_get_max_mr", device_attr_get_max_mr, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_cq_attr_create", cq_attr_create, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_cq_attr_destroy", cq_attr_destroy, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_cq_attr_set_cq_size", cq_attr_set_cq_size, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_cq_attr_set_external_umem", cq_attr_set_external_umem, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_cq_attr_set_external_uar", cq_attr_set_external_uar, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_cq_create", cq_create, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_cq_destroy", cq_destroy, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_cq_get_wq", cq_get_wq, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_cq_get_dbr_addr", cq_get_dbr_addr, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_cq_get_cqn", cq_get_cqn, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_init_attr_create", qp_init_attr_create, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_init_attr_destroy", qp_init_attr_destroy, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_init_attr_set_pd", qp_init_attr_set_pd, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_init_attr_set_send_cq", qp_init_attr_set_send_cq, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_init_attr_set_receive_cq", qp_init_attr_set_receive_cq, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_init_attr_set_sq_wr", qp_init_attr_set_sq_wr, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_init_attr_set_rq_wr", qp_init_attr_set_rq_wr, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_init_attr_set_send_max_sges", qp_init_attr_set_send_max_sges, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_init_attr_set_qp_type", qp_init_attr_set_qp_type, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_init_attr_set_external_umem", qp_init_attr_set_external_umem, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_init_attr_set_external_dbr_umem", qp_init_attr_set_external_dbr_umem, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_init_attr_set_external_uar", qp_init_attr_set_external_uar, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_create", qp_create, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_destroy", qp_destroy, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_modify", qp_modify, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_query", qp_query, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_get_wq", qp_get_wq, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_get_dbr_addr", qp_get_dbr_addr, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_get_uar_addr", qp_get_uar_addr, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_get_qpn", qp_get_qpn, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_create", qp_attr_create, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_destroy", qp_attr_destroy, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_next_state", qp_attr_set_next_state, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_get_current_state", qp_attr_get_current_state, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_path_mtu", qp_attr_set_path_mtu, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_rq_psn", qp_attr_set_rq_psn, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_sq_psn", qp_attr_set_sq_psn, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_dest_qp_num", qp_attr_set_dest_qp_num, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_allow_remote_write", qp_attr_set_allow_remote_write, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_allow_remote_read", qp_attr_set_allow_remote_read, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_atomic_mode", qp_attr_set_atomic_mode, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_ah_attr", qp_attr_set_ah_attr, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_pkey_index", qp_attr_set_pkey_index, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_port_num", qp_attr_set_port_num, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_ack_timeout", qp_attr_set_ack_timeout, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_retry_cnt", qp_attr_set_retry_cnt, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_rnr_retry", qp_attr_set_rnr_retry, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_min_rnr_timer", qp_attr_set_min_rnr_timer, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_max_rd_atomic", qp_attr_set_max_rd_atomic, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_qp_attr_set_max_dest_rd_atomic", qp_attr_set_max_dest_rd_atomic, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_ah_attr_create", ah_attr_create, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_ah_attr_destroy", ah_attr_destroy, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_ah_attr_set_gid", ah_attr_set_gid, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_ah_attr_set_addr_type", ah_attr_set_addr_type, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_ah_attr_set_dlid", ah_attr_set_dlid, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_ah_attr_set_sgid_index", ah_attr_set_sgid_index, true),
    KINET_DOCA_SYM(Verbs, "doca_verbs_ah_attr_set_hop_limit", ah_attr_set_hop_limit, true),

    KINET_DOCA_SYM(Gpunetio, "doca_gpu_create", gpu_create, true),
    KINET_DOCA_SYM(Gpunetio, "doca_gpu_destroy", gpu_destroy, true),
};
#undef KINET_DOCA_SYM

constexpr const char* kOpen = "; SDK mode off: kinet's open control path is used";

std::string lib_path(const std::string& dir, int lib) { return dir + "/" + api::kLibFile[lib]; }
}  // namespace

Decision decide(const Probe& p) {
  Decision d;
  if (p.dir.empty()) return d;  // not asked for: nothing to say
  const std::string var = "DOCA_SDK_LIB_PATH=" + p.dir;
  d.warn = true;
  if (p.dir_errno != 0) {
    d.line = var + ": can't be read (errno " + std::to_string(p.dir_errno) + ": " + std::strerror(p.dir_errno) + ")" +
             kOpen;
  } else if (!p.is_dir) {
    d.line = var + ": not a directory (it must name the directory holding libdoca_common.so, libdoca_verbs.so "
                   "and libdoca_gpunetio.so)" +
             kOpen;
  } else if (p.failed_lib >= 0 && p.failed_lib < api::kLibCount) {
    d.line = var + ": " + lib_path(p.dir, p.failed_lib) + " could not be loaded (" +
             (p.dl_error.empty() ? std::string("no reason given") : p.dl_error) + ")" + kOpen;
  } else if (!p.missing_symbol.empty()) {
    const int lib = p.missing_in >= 0 && p.missing_in < api::kLibCount ? p.missing_in : 0;
    d.line = var + ": " + lib_path(p.dir, lib) + " lacks " + p.missing_symbol +
             " (an SDK older or newer than kinet knows?)" + kOpen;
  } else {
    d.mode = Mode::Sdk;
    d.warn = false;
    d.line = "DOCA SDK mode: control-path objects (device, PD, UMEM, UAR, CQ, QP) through the DOCA SDK in " + p.dir;
  }
  return d;
}

ErrorCode error_code_of(api::doca_error_t rc) {
  switch (rc) {
    case api::kErrInvalidValue: return ErrorCode::InvalidArgument;
    case api::kErrNotSupported:
    case api::kErrNotPermitted: return ErrorCode::NotSupported;
    case api::kErrNoMemory:
    case api::kErrFull:
    case api::kErrAgain: return ErrorCode::ResourceExhausted;
    case api::kErrBadState:
    case api::kErrInUse: return ErrorCode::BadState;
    default: return ErrorCode::System;
  }
}

Sdk::~Sdk() {
  for (int i = api::kLibCount - 1; i >= 0; --i)
    if (handles_[i]) dlclose(handles_[i]);
}

std::string Sdk::describe(api::doca_error_t rc, const char* call) const {
  std::string s = std::string("DOCA SDK call ") + call + " failed: doca_error_t " + std::to_string(rc) + " (";
  const char* name = fns_.error_get_name ? fns_.error_get_name(rc) : nullptr;
  const char* descr = fns_.error_get_descr ? fns_.error_get_descr(rc) : nullptr;
  if (name) s += name;
  else s += fns_.error_get_name ? "no name for this value" : "no doca_error_get_name in this SDK";
  if (descr && *descr) s += std::string(": ") + descr;
  return s + ")";
}

void Sdk::check(api::doca_error_t rc, const char* call, const std::string& who, const std::string& detail) const {
  if (rc == api::kSuccess) return;
  throw Error(error_code_of(rc), who + ": " + describe(rc, call) + detail);
}

Sdk::Loaded Sdk::load(const std::string& dir) {
  Loaded out;
  Probe p;
  p.dir = dir;
  if (dir.empty()) {
    out.decision = decide(p);
    return out;
  }
  std::shared_ptr<Sdk> sdk(new Sdk);
  sdk->dir_ = dir;
  struct stat st{};
  if (stat(dir.c_str(), &st) != 0) p.dir_errno = errno;
  else p.is_dir = S_ISDIR(st.st_mode);
  for (int i = 0; i < api::kLibCount && p.dir_errno == 0 && p.is_dir; ++i) {
    // RTLD_LOCAL: the SDK's symbols stay out of the global namespace (they
    // can't clash with the application's or with kinet's names). Loading in
    // dependency order is what lets that work without LD_LIBRARY_PATH: a
    // later library's DT_NEEDED (libdoca_common.so.N) is satisfied by the
    // copy already loaded by path, matched by soname, and resolved in its own
    // dependency scope. (NVIDIA's GPUNetIO loads them RTLD_GLOBAL for the same
    // purpose.) An SDK whose libraries don't name their dependencies fails
    // here with dlerror()'s "undefined symbol", which the fallback line shows.
    sdk->handles_[i] = dlopen(lib_path(dir, i).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!sdk->handles_[i]) {
      const char* e = dlerror();
      p.failed_lib = i;
      p.dl_error = e ? e : "";
      break;
    }
  }
  if (p.dir_errno == 0 && p.is_dir && p.failed_lib < 0) {
    for (const Symbol& s : kSymbols) {
      void* h = sdk->handles_[static_cast<int>(s.lib)];
      dlerror();
      void* addr = dlsym(h, s.name);
      if (!addr && s.required) {
        p.missing_symbol = s.name;
        p.missing_in = static_cast<int>(s.lib);
        break;
      }
      std::memcpy(reinterpret_cast<char*>(&sdk->fns_) + s.slot, &addr, sizeof addr);
    }
  }
  out.decision = decide(p);
  if (out.decision.mode == Mode::Sdk) out.sdk = std::move(sdk);
  return out;  // otherwise ~Sdk closes whatever was opened
}

std::shared_ptr<const Sdk> Sdk::process() {
  static std::shared_ptr<const Sdk> sdk;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* v = std::getenv("DOCA_SDK_LIB_PATH");
    Loaded l = load(v ? v : "");
    if (!l.decision.line.empty()) {
      if (l.decision.warn) KINET_LOG(Warn, "%s", l.decision.line.c_str());
      else KINET_LOG(Info, "%s", l.decision.line.c_str());
    }
    sdk = std::move(l.sdk);
  });
  return sdk;
}
}  // namespace kinet::doca
