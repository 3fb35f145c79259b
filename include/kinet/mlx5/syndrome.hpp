// kinet — mlx5 CQE error syndrome -> kinet::Status. Lives next to the mlx5
// wire format so that kinet/status.hpp stays provider-independent.
#pragma once
#include <cstdint>

#include "kinet/mlx5/wire.hpp"
#include "kinet/status.hpp"

namespace kinet::mlx5 {

// Status of an error CQE with this syndrome; an unknown syndrome is UnknownCqeError.
KINET_HD constexpr Status status_from_syndrome(uint8_t syndrome) {
  switch (syndrome) {
    case kSynLocalLength: return Status::LocalLength;
    case kSynLocalQpOp: return Status::LocalQpOp;
    case kSynLocalProt: return Status::LocalProtection;
    case kSynWrFlush: return Status::WrFlushed;
    case kSynMwBind: return Status::MwBind;
    case kSynBadResp: return Status::BadResponse;
    case kSynLocalAccess: return Status::LocalAccess;
    case kSynRemoteInvalReq: return Status::RemoteInvalidRequest;
    case kSynRemoteAccess: return Status::RemoteAccess;
    case kSynRemoteOp: return Status::RemoteOperation;
    case kSynTransportRetryExc: return Status::TransportRetryExceeded;
    case kSynRnrRetryExc: return Status::RnrRetryExceeded;
    case kSynRemoteAborted: return Status::RemoteAborted;
    default: return Status::UnknownCqeError;
  }
}

}  // namespace kinet::mlx5
