#include "transports/ucx/ucx_lib.hpp"

#include <dlfcn.h>

#include <cstring>

namespace kinet::transport::ucx {

Library::~Library() {
  if (dl_) dlclose(dl_);
}

std::shared_ptr<const Library> Library::load(const char* path, std::string* why) {
  std::shared_ptr<Library> lib(new Library);
  lib->dl_ = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib->dl_) {
    const char* e = dlerror();
    *why = std::string(path) + " could not be loaded (" + (e ? e : "no reason given") + ")";
    return nullptr;
  }
  Fns& f = lib->fns_;
  struct Sym {
    const char* name;
    void* slot;
  } syms[] = {
      {"ucp_config_read", &f.config_read},
      {"ucp_config_modify", &f.config_modify},
      {"ucp_config_release", &f.config_release},
      {"ucp_init_version", &f.init_version},
      {"ucp_cleanup", &f.cleanup},
      {"ucp_get_version_string", &f.get_version_string},
      {"ucp_worker_create", &f.worker_create},
      {"ucp_worker_destroy", &f.worker_destroy},
      {"ucp_worker_get_address", &f.worker_get_address},
      {"ucp_worker_release_address", &f.worker_release_address},
      {"ucp_worker_progress", &f.worker_progress},
      {"ucp_worker_set_am_recv_handler", &f.worker_set_am_recv_handler},
      {"ucp_ep_create", &f.ep_create},
      {"ucp_ep_close_nbx", &f.ep_close_nbx},
      {"ucp_am_send_nbx", &f.am_send_nbx},
      {"ucp_am_recv_data_nbx", &f.am_recv_data_nbx},
      {"ucp_am_data_release", &f.am_data_release},
      {"ucp_request_check_status", &f.request_check_status},
      {"ucp_request_free", &f.request_free},
      {"ucs_status_string", &f.status_string},
  };
  for (const Sym& s : syms) {
    void* a = dlsym(lib->dl_, s.name);
    if (!a) {
      *why = std::string(path) + " lacks " + s.name;
      return nullptr;
    }
    std::memcpy(s.slot, &a, sizeof a);
  }
  return lib;
}

std::string Library::status(ucs_status_t s) const {
  return std::string(fns_.status_string(s)) + " (" + std::to_string(static_cast<int>(s)) + ")";
}

}  // namespace kinet::transport::ucx
