// kinet NCCL plugin — what the net and GIN halves share: NCCL's logger, the
// one place a kinet::Transport is opened, and turning exceptions into NCCL
// result codes with a reason in the log.
#pragma once
#include <cstdarg>
#include <cstdint>
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

// Handles: what this plugin gives NCCL in place of its objects' addresses
// (contexts, comms, listen comms, requests, memory handles). Each is a value
// of a process-wide counter, never reused and never NULL, mapped to
// {Kind, object} while the object lives. So a stale handle (a finished
// request, a closed comm) finds nothing even when the allocator has given its
// object's address to a new object, and a foreign or NULL pointer is rejected
// with a reason instead of read. NCCL only stores and passes them back (net:
// HOST device type; GIN: PROXY type, nothing on the GPU). Values lie in
// [2^60, 2^63): above every user-space address (no pointer of this process
// is a handle) and below 2^63, as GIN's gin_handle must be (it travels
// through NCCL's 63-bit descriptor fields). Thread safe.
enum class Kind : uint8_t { GinCtx, GinListen, GinComm, NetListen, NetSend, NetRecv, NetMr, NetReq };
// A new handle value (for objects a comm keeps in its own table: GIN
// requests and memory handles).
uint64_t new_handle();
inline void* as_ptr(uint64_t h) { return reinterpret_cast<void*>(static_cast<uintptr_t>(h)); }
inline uint64_t as_handle(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }
// Registers `obj` as a live object of kind `k`; returns its new handle (the
// object keeps it, for live_remove).
void* live_add(void* obj, Kind k);
// Forgets handle `h`; nothing when it is unknown.
void live_remove(const void* h);
// The object of handle `h` when `h` is live and of kind `k`, else NULL.
void* live_find(const void* h, Kind k);
template <class T>
T* live(void* h, Kind k) {
  return static_cast<T*>(live_find(h, k));
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
