// kinet bootstrap from an NCCL communicator: rank and size from the comm, the
// UniqueId broadcast by NCCL itself. NCCL and the CUDA runtime are loaded with
// dlopen and the few C signatures used are declared here (from NCCL's and
// CUDA's documented C API), so libkinet needs neither library nor header.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/cuda_shim.hpp"
#include "core/dl_util.hpp"
#include "core/log.hpp"
#include "kinet/bootstrap.hpp"

namespace kinet {
namespace {
using Clock = std::chrono::steady_clock;

// ncclResult_t values (nccl.h): ncclSuccess 0, ncclInProgress 7.
constexpr int kNcclSuccess = 0, kNcclInProgress = 7;
constexpr int kNcclUint8 = 1;  // ncclDataType_t ncclUint8
// cudaError_t cudaSuccess 0, cudaErrorNotReady 600; cudaMemcpyKind; stream and event flags.
constexpr int kCudaSuccess = 0, kCudaNotReady = 600;
constexpr int kHostToDevice = 1, kDeviceToHost = 2;
constexpr unsigned kStreamNonBlocking = 1, kEventDisableTiming = 2;

struct Nccl {
  int (*commCount)(ncclComm*, int*) = nullptr;
  int (*commUserRank)(ncclComm*, int*) = nullptr;
  int (*commCuDevice)(ncclComm*, int*) = nullptr;
  int (*commGetAsyncError)(ncclComm*, int*) = nullptr;
  int (*broadcast)(const void*, void*, size_t, int, int, ncclComm*, CUstream_st*) = nullptr;
  const char* (*getErrorString)(int) = nullptr;
  std::string from;  // where the symbols came from, for messages
};

struct Cudart {
  int (*getDevice)(int*) = nullptr;
  int (*setDevice)(int) = nullptr;
  int (*memcpyAsync)(void*, const void*, size_t, int, CUstream_st*) = nullptr;
  int (*streamCreateWithFlags)(CUstream_st**, unsigned) = nullptr;
  int (*streamDestroy)(CUstream_st*) = nullptr;
  int (*eventCreateWithFlags)(void**, unsigned) = nullptr;
  int (*eventRecord)(void*, CUstream_st*) = nullptr;
  int (*eventQuery)(void*) = nullptr;
  int (*eventDestroy)(void*) = nullptr;
  const char* (*getErrorString)(int) = nullptr;
};

bool all_syms(void* h, std::initializer_list<std::pair<const char*, void**>> names, std::string* missing) {
  for (const auto& [name, slot] : names) {
    *slot = dlsym(h, name);
    if (!*slot) {
      *missing = name;
      return false;
    }
  }
  return true;
}

bool load_nccl_from(void* h, Nccl& n, std::string* missing) {
  return all_syms(h,
                  {{"ncclCommCount", reinterpret_cast<void**>(&n.commCount)},
                   {"ncclCommUserRank", reinterpret_cast<void**>(&n.commUserRank)},
                   {"ncclCommCuDevice", reinterpret_cast<void**>(&n.commCuDevice)},
                   {"ncclCommGetAsyncError", reinterpret_cast<void**>(&n.commGetAsyncError)},
                   {"ncclBroadcast", reinterpret_cast<void**>(&n.broadcast)},
                   {"ncclGetErrorString", reinterpret_cast<void**>(&n.getErrorString)}},
                  missing);
}

// $KINET_NCCL_LIB, else the NCCL already in the process, else libnccl.so.2.
Nccl load_nccl(const std::string& me) {
  Nccl n;
  std::string missing;
  const char* env = std::getenv("KINET_NCCL_LIB");
  if (!(env && *env) && dlsym(RTLD_DEFAULT, "ncclBroadcast")) {
    if (!load_nccl_from(RTLD_DEFAULT, n, &missing))
      throw Error(ErrorCode::NotSupported, me + ": the NCCL loaded in this process lacks " + missing);
    n.from = "the NCCL already loaded in this process";
    return n;
  }
  const std::string file = env && *env ? env : "libnccl.so.2";
  void* h = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    throw Error(ErrorCode::NotSupported, me + ": no NCCL: dlopen(" + file + ") failed: " + (e ? e : "?") +
                                             (env && *env ? " (KINET_NCCL_LIB)" : " (set KINET_NCCL_LIB to its path)"));
  }
  if (!load_nccl_from(h, n, &missing))
    throw Error(ErrorCode::NotSupported, me + ": " + file + " lacks " + missing + " (not an NCCL 2 library?)");
  n.from = file;
  return n;
}

Cudart load_cudart(const std::string& me) {
  void* h = dl::open_cudart();
  if (!h) throw Error(ErrorCode::NotSupported, me + ": no CUDA runtime (libcudart.so.13/.12/.so) to load");
  Cudart c;
  std::string missing;
  Cudart* t = &c;
  if (!all_syms(h,
                {{"cudaGetDevice", reinterpret_cast<void**>(&t->getDevice)},
                 {"cudaSetDevice", reinterpret_cast<void**>(&t->setDevice)},
                 {"cudaMemcpyAsync", reinterpret_cast<void**>(&t->memcpyAsync)},
                 {"cudaStreamCreateWithFlags", reinterpret_cast<void**>(&t->streamCreateWithFlags)},
                 {"cudaStreamDestroy", reinterpret_cast<void**>(&t->streamDestroy)},
                 {"cudaEventCreateWithFlags", reinterpret_cast<void**>(&t->eventCreateWithFlags)},
                 {"cudaEventRecord", reinterpret_cast<void**>(&t->eventRecord)},
                 {"cudaEventQuery", reinterpret_cast<void**>(&t->eventQuery)},
                 {"cudaEventDestroy", reinterpret_cast<void**>(&t->eventDestroy)},
                 {"cudaGetErrorString", reinterpret_cast<void**>(&t->getErrorString)}},
                &missing))
    throw Error(ErrorCode::NotSupported, me + ": the CUDA runtime lacks " + missing);
  return c;
}

std::string str_or(const char* s) { return s ? s : "(no text)"; }

// What travels: rank 0's outcome with the id.
struct NcclIdMsg {
  int32_t ok;
  int32_t reserved;
  UniqueId id;
};
static_assert(sizeof(NcclIdMsg) == 136);
}  // namespace

std::unique_ptr<Bootstrap> Bootstrap::from_nccl(::ncclComm* comm, ::CUstream_st* stream,
                                                std::chrono::milliseconds timeout) {
  std::string me = "bootstrap: from_nccl";
  if (!comm) throw Error(ErrorCode::InvalidArgument, me + ": null NCCL communicator");
  if (timeout.count() <= 0)
    throw Error(ErrorCode::InvalidArgument, me + ": timeout " + std::to_string(timeout.count()) + " ms");
  timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 30));  // no deadline overflow
  const Nccl nccl = load_nccl(me);
  const auto nccl_check = [&](int rc, const char* what) {
    if (rc != kNcclSuccess && rc != kNcclInProgress)
      throw Error(ErrorCode::System, me + ": " + what + " failed: " + str_or(nccl.getErrorString(rc)) + " (ncclResult " +
                                         std::to_string(rc) + ", NCCL from " + nccl.from + ")");
  };
  int rank = -1, nranks = 0, dev = -1;
  nccl_check(nccl.commUserRank(comm, &rank), "ncclCommUserRank");
  nccl_check(nccl.commCount(comm, &nranks), "ncclCommCount");
  nccl_check(nccl.commCuDevice(comm, &dev), "ncclCommCuDevice");
  me += " rank " + std::to_string(rank) + "/" + std::to_string(nranks);
  if (!cuda::available()) throw Error(ErrorCode::NotSupported, me + ": no CUDA runtime or no GPU here");
  const Cudart rt = load_cudart(me);
  const auto cuda_check = [&](int rc, const char* what) {
    if (rc != kCudaSuccess)
      throw Error(ErrorCode::System, me + ": " + what + " failed: " + str_or(rt.getErrorString(rc)) + " (error " +
                                         std::to_string(rc) + ")");
  };

  // The comm's GPU is current for the CUDA calls below; the caller's comes back.
  int prev = -1;
  cuda_check(rt.getDevice(&prev), "cudaGetDevice");
  struct Restore {
    const Cudart& rt;
    int prev, dev;
    ~Restore() {
      if (prev != dev) rt.setDevice(prev);
    }
  } restore{rt, prev, dev};
  if (prev != dev) cuda_check(rt.setDevice(dev), "cudaSetDevice");

  NcclIdMsg* host = static_cast<NcclIdMsg*>(cuda::alloc_pinned(sizeof(NcclIdMsg)));
  void* gpu = nullptr;
  try {
    gpu = cuda::alloc_device(sizeof(NcclIdMsg));
  } catch (...) {
    cuda::free_pinned(host);
    throw;
  }
  std::string rank0_why;
  if (rank == 0) {
    try {
      host->id = UniqueId::create();
      host->ok = 1;
    } catch (const Error& e) {
      rank0_why = e.what();  // still broadcast: the others fail at once, not at their timeout
    }
  }
  CUstream_st* own = nullptr;
  void* done = nullptr;
  bool pending = false;  // work that may still write `gpu` / `host` was queued
  try {
    if (!stream) {
      cuda_check(rt.streamCreateWithFlags(&own, kStreamNonBlocking), "cudaStreamCreateWithFlags");
      stream = own;
    }
    cuda_check(rt.eventCreateWithFlags(&done, kEventDisableTiming), "cudaEventCreateWithFlags");
    pending = true;
    if (rank == 0) cuda_check(rt.memcpyAsync(gpu, host, sizeof(NcclIdMsg), kHostToDevice, stream), "cudaMemcpyAsync (id to GPU)");
    const auto deadline = Clock::now() + timeout;
    const std::string tmo = me + ": timeout after " + std::to_string(timeout.count()) + " ms waiting for ";
    const int brc = nccl.broadcast(gpu, gpu, sizeof(NcclIdMsg), kNcclUint8, 0, comm, stream);
    nccl_check(brc, "ncclBroadcast of the unique id");
    // A non-blocking comm may still be enqueueing the broadcast: nothing
    // else goes on the stream before NCCL says it is done.
    for (int async = brc; async == kNcclInProgress;) {
      nccl_check(nccl.commGetAsyncError(comm, &async), "ncclCommGetAsyncError");
      nccl_check(async, "ncclBroadcast of the unique id (non-blocking communicator)");
      if (async != kNcclInProgress) break;
      if (Clock::now() >= deadline)
        throw Error(ErrorCode::System, tmo + "NCCL to enqueue the broadcast of the unique id (non-blocking communicator)");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    cuda_check(rt.memcpyAsync(host, gpu, sizeof(NcclIdMsg), kDeviceToHost, stream), "cudaMemcpyAsync (id from GPU)");
    cuda_check(rt.eventRecord(done, stream), "cudaEventRecord");
    std::chrono::microseconds step(50);
    for (;;) {
      const int q = rt.eventQuery(done);
      if (q == kCudaSuccess) break;
      if (q != kCudaNotReady) cuda_check(q, "cudaEventQuery (waiting for the broadcast)");
      int async = kNcclSuccess;
      nccl_check(nccl.commGetAsyncError(comm, &async), "ncclCommGetAsyncError");
      if (async != kNcclSuccess && async != kNcclInProgress)
        throw Error(ErrorCode::System, me + ": the NCCL communicator failed during the broadcast of the unique id: " +
                                           str_or(nccl.getErrorString(async)));
      if (Clock::now() >= deadline)
        throw Error(ErrorCode::System, tmo + "the ncclBroadcast of the unique id from rank 0 (does every rank of the "
                                             "communicator call from_nccl? is another collective running on it?); its "
                                             "buffers stay allocated");
      std::this_thread::sleep_for(step);
      step = std::min(step * 2, std::chrono::microseconds(5000));
    }
    pending = false;
  } catch (...) {
    if (done) rt.eventDestroy(done);
    if (own) rt.streamDestroy(own);  // returns at once; CUDA frees it when its work ends
    if (!pending) {
      cuda::free_device(gpu);
      cuda::free_pinned(host);
    }
    throw;
  }
  rt.eventDestroy(done);
  if (own) rt.streamDestroy(own);
  const NcclIdMsg msg = *host;
  cuda::free_device(gpu);
  cuda::free_pinned(host);
  if (rank == 0 && !rank0_why.empty())
    throw Error(ErrorCode::System, me + ": could not create the unique id: " + rank0_why);
  if (!msg.ok) throw Error(ErrorCode::System, me + ": rank 0 could not create the unique id (its error is on rank 0)");
  try {
    msg.id.validate();
  } catch (const Error& e) {
    throw Error(ErrorCode::InvalidArgument, me + ": the broadcast delivered a bad unique id: " + e.what());
  }
  KINET_LOG(Info, "%s: unique id received through ncclBroadcast (NCCL from %s)", me.c_str(), nccl.from.c_str());
  return init(msg.id, rank, nranks, timeout);
}

}  // namespace kinet
