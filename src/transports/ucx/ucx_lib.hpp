// kinet transports, ucx — UCP loaded with dlopen: libkinet builds against
// UCX's headers but never links it, so one binary runs with or without UCX.
#pragma once
#include <ucp/api/ucp.h>

#include <memory>
#include <string>

namespace kinet::transport::ucx {

inline constexpr const char* kLibucp = "libucp.so.0";

// Every UCP/UCS entry point the channel uses, resolved at load.
struct Fns {
  decltype(&::ucp_config_read) config_read;
  decltype(&::ucp_config_modify) config_modify;
  decltype(&::ucp_config_release) config_release;
  decltype(&::ucp_init_version) init_version;
  decltype(&::ucp_cleanup) cleanup;
  decltype(&::ucp_get_version_string) get_version_string;
  decltype(&::ucp_worker_create) worker_create;
  decltype(&::ucp_worker_destroy) worker_destroy;
  decltype(&::ucp_worker_get_address) worker_get_address;
  decltype(&::ucp_worker_release_address) worker_release_address;
  decltype(&::ucp_worker_progress) worker_progress;
  decltype(&::ucp_worker_set_am_recv_handler) worker_set_am_recv_handler;
  decltype(&::ucp_ep_create) ep_create;
  decltype(&::ucp_ep_close_nbx) ep_close_nbx;
  decltype(&::ucp_am_send_nbx) am_send_nbx;
  decltype(&::ucp_am_recv_data_nbx) am_recv_data_nbx;
  decltype(&::ucp_am_data_release) am_data_release;
  decltype(&::ucp_request_check_status) request_check_status;
  decltype(&::ucp_request_free) request_free;
  decltype(&::ucs_status_string) status_string;  // libucs, found through libucp's dependencies
};

class Library {
 public:
  ~Library();
  // Loads `path` (a soname or a file) and resolves every symbol of Fns.
  // Null with *why set ("<path> could not be loaded (<dlerror>)", "<path>
  // lacks <symbol>") when it can't.
  static std::shared_ptr<const Library> load(const char* path, std::string* why);
  const Fns& fn() const { return fns_; }
  std::string status(ucs_status_t s) const;  // "Connection reset by remote peer (-25)"

 private:
  Library() = default;
  void* dl_ = nullptr;
  Fns fns_{};
};

}  // namespace kinet::transport::ucx
