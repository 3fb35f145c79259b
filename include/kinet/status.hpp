// kinet — status codes returned by device verbs (kernels and host threads
// alike) and carried by host-side kinet::Error.
//
// Provider-independent: a NIC's own completion codes are mapped to these next
// to that NIC's wire format (mlx5: kinet/mlx5/syndrome.hpp). The numeric
// values are stable (they are stored in dev::SqState and printed in logs).
#pragma once
#include <cstdint>

#include "kinet/device/platform.cuh"

namespace kinet {

enum class Status : int32_t {
  Ok = 0,
  // Not an error: the operation has not completed yet / the ring is full.
  Pending = 1,
  NoSpace = 2,
  // Bounded waits that ran out; the name says what was waited for.
  TimeoutSqSpace = 10,      // free send-queue slots (completions did not arrive)
  TimeoutPublishOrder = 11, // an earlier reservation was never published
  TimeoutCompletion = 12,   // the CQE of a ticket
  TimeoutLock = 13,         // the doorbell or CQ lock
  // Misuse detected before anything reached the NIC.
  InvalidArgument = 20,     // e.g. inline payload too large, zero-sized reservation
  QpBroken = 21,            // an earlier bounded wait failed; the QP's queue state is unusable
  // Errors reported by the NIC in a completion (mlx5: one per CQE error syndrome).
  LocalLength = 40,
  LocalQpOp = 41,
  LocalProtection = 42,
  WrFlushed = 43,
  MwBind = 44,
  BadResponse = 45,
  LocalAccess = 46,
  RemoteInvalidRequest = 47,
  RemoteAccess = 48,
  RemoteOperation = 49,
  TransportRetryExceeded = 50,
  RnrRetryExceeded = 51,
  RemoteAborted = 52,
  UnknownCqeError = 59,
};

KINET_HD constexpr bool is_error(Status s) { return s != Status::Ok && s != Status::Pending && s != Status::NoSpace; }

KINET_HD constexpr const char* status_string(Status s) {
  switch (s) {
    case Status::Ok: return "ok";
    case Status::Pending: return "pending";
    case Status::NoSpace: return "send queue full";
    case Status::TimeoutSqSpace: return "timed out waiting for free send-queue slots";
    case Status::TimeoutPublishOrder: return "timed out waiting for an earlier WQE to be published";
    case Status::TimeoutCompletion: return "timed out waiting for a completion";
    case Status::TimeoutLock: return "timed out waiting for a queue lock";
    case Status::InvalidArgument: return "invalid argument";
    case Status::QpBroken: return "QP unusable after an earlier timeout";
    case Status::LocalLength: return "local length error (CQE syndrome 0x01)";
    case Status::LocalQpOp: return "local QP operation error (CQE syndrome 0x02)";
    case Status::LocalProtection: return "local protection error: bad lkey or address outside its region (CQE syndrome 0x04)";
    case Status::WrFlushed: return "work request flushed: QP in error state (CQE syndrome 0x05)";
    case Status::MwBind: return "memory window bind error (CQE syndrome 0x06)";
    case Status::BadResponse: return "bad response (CQE syndrome 0x10)";
    case Status::LocalAccess: return "local access error (CQE syndrome 0x11)";
    case Status::RemoteInvalidRequest: return "remote invalid request (CQE syndrome 0x12)";
    case Status::RemoteAccess: return "remote access error: bad rkey, bounds or permissions (CQE syndrome 0x13)";
    case Status::RemoteOperation: return "remote operation error (CQE syndrome 0x14)";
    case Status::TransportRetryExceeded: return "transport retry counter exceeded (CQE syndrome 0x15)";
    case Status::RnrRetryExceeded: return "RNR retry counter exceeded (CQE syndrome 0x16)";
    case Status::RemoteAborted: return "remote aborted (CQE syndrome 0x22)";
    case Status::UnknownCqeError: return "unknown CQE error syndrome";
  }
  return "unknown status";
}

}  // namespace kinet
