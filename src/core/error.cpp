#include "kinet/kinet.hpp"
#include "kinet/version.hpp"

namespace kinet {
const char* version() { return KINET_VERSION_STRING; }

const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::InvalidArgument: return "invalid argument";
    case ErrorCode::NotFound: return "not found";
    case ErrorCode::NotSupported: return "not supported";
    case ErrorCode::BadState: return "bad state";
    case ErrorCode::ResourceExhausted: return "resource exhausted";
    case ErrorCode::System: return "system error";
  }
  return "unknown error";
}
const char* qp_state_name(QpState s) {
  switch (s) {
    case QpState::Reset: return "RESET";
    case QpState::Init: return "INIT";
    case QpState::Rtr: return "RTR";
    case QpState::Rts: return "RTS";
    case QpState::Error: return "ERROR";
  }
  return "?";
}
}  // namespace kinet
