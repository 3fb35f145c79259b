// kinet NCCL plugin — what the net and GIN halves share: NCCL's logger, the
// one place a kinet::Transport is opened, and turning exceptions into NCCL
// result codes with a reason in the log.
#pragma once
#include <cstdarg>
#include <memory>
#include <string>

#include "kinet/transport.hpp"
#include "nccl_abi.hpp"

namespace kinet::nccl {

// NCCL's logger, as passed to the last init (NULL before: messages go to
// kinet's own log). Thread safe.
void set_logger(Logger log);
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Logs `what: reason` at WARN and returns `r`: every failure NCCL sees from
// this plugin comes with its reason in NCCL's log.
Result fail(Result r, const std::string& what);

// Runs `body` (returning Result); a kinet::Error becomes a logged failure
// (InvalidArgument -> kInvalidArgument, System/timeouts -> kSystemError,
// others -> kInternalError), so no exception crosses into NCCL.
template <class F>
Result guarded(const char* what, F&& body) noexcept;

// The transport of one communicator (TransportOptions::provider empty:
// KINET_TRANSPORT decides). Throws what Transport::open throws.
std::unique_ptr<Transport> open_transport(const std::string& name);
// Whether the net half takes CUDA memory (NCCL_PTR_CUDA): KINET_NCCL_NET_CUDA=1
// and a GPU CUDA sees.
bool net_takes_cuda();

Result result_of(const Error& e);

// Objects this plugin handed to NCCL, so that a pointer NCCL passes back is
// checked without dereferencing it: a foreign, stale or NULL pointer is
// rejected with a reason instead of read. Thread safe.
enum class Kind : uint8_t { GinCtx, GinListen, GinComm, NetListen, NetSend, NetRecv, NetMr, NetReq };
void live_add(const void* p, Kind k);
void live_remove(const void* p);
bool live_is(const void* p, Kind k);
template <class T>
T* live(void* p, Kind k) {
  return live_is(p, k) ? static_cast<T*>(p) : nullptr;
}

template <class F>
Result guarded(const char* what, F&& body) noexcept {
  try {
    return body();
  } catch (const Error& e) {
    return fail(result_of(e), std::string(what) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return fail(kSystemError, std::string(what) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(kInternalError, std::string(what) + ": " + e.what());
  }
}

}  // namespace kinet::nccl
