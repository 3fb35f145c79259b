// kinet — the QP checks every provider makes the same way (internal): one
// text per rule, so the providers' errors stay alike.
#pragma once
#include <cstdint>
#include <string>

#include "kinet/kinet.hpp"

namespace kinet::detail {

// `in` checked against a device that takes at most `max_qp_wr` WQEs per ring
// and `max_msg` bytes per message, with its zero fields given their defaults
// (signal_period sq_depth/4 or 1, max_msg the device's, timeout_ms
// default_timeout_ms()). Throws InvalidArgument "<who>: create_qp: ..." naming
// the field and its bounds: sq_depth not a power of two in [2, max_qp_wr],
// signal_period not a power of two <= sq_depth/2, max_msg above `max_msg`.
// Ring placement and posters are the provider's to check.
QpConfig checked_qp_config(const std::string& who, const QpConfig& in, uint32_t max_qp_wr, uint32_t max_msg);

// A remote QP's info before to_rtr: InvalidArgument (or what QpInfo::validate
// throws) as "<who>: to_rtr: remote <why>", NotSupported "<who>: to_rtr: remote
// QP belongs to provider N, <only>" when r.provider isn't `provider`.
void check_remote_qp(const std::string& who, const QpInfo& r, uint16_t provider, const char* only);
}  // namespace kinet::detail
