// kinet — the QP checks every provider makes the same way (see qp_checks.hpp).
#include "core/qp_checks.hpp"

namespace kinet::detail {
namespace {
bool is_pow2(uint64_t v) { return v && !(v & (v - 1)); }
}  // namespace

QpConfig checked_qp_config(const std::string& who, const QpConfig& in, uint32_t max_qp_wr, uint32_t max_msg) {
  QpConfig cfg = in;
  if (!is_pow2(cfg.sq_depth) || cfg.sq_depth < 2 || cfg.sq_depth > max_qp_wr)
    throw Error(ErrorCode::InvalidArgument, who + ": create_qp: sq_depth " + std::to_string(cfg.sq_depth) +
                                                " must be a power of two in [2, " + std::to_string(max_qp_wr) + "]");
  if (cfg.signal_period == 0) cfg.signal_period = cfg.sq_depth >= 4 ? cfg.sq_depth / 4 : 1;
  if (!is_pow2(cfg.signal_period) || cfg.signal_period > cfg.sq_depth / 2)
    throw Error(ErrorCode::InvalidArgument, who + ": create_qp: signal_period " + std::to_string(cfg.signal_period) +
                                                " must be a power of two <= sq_depth/2");
  if (cfg.max_msg > max_msg)
    throw Error(ErrorCode::InvalidArgument, who + ": create_qp: max_msg " + std::to_string(cfg.max_msg) +
                                                " exceeds the device's max_msg " + std::to_string(max_msg));
  if (cfg.max_msg == 0) cfg.max_msg = max_msg;
  if (cfg.timeout_ms == 0) cfg.timeout_ms = default_timeout_ms();
  return cfg;
}

void check_remote_qp(const std::string& who, const QpInfo& r, uint16_t provider, const char* only) {
  try {
    r.validate();
  } catch (const Error& e) {
    throw Error(e.code(), who + ": to_rtr: remote " + e.what());
  }
  if (r.provider != provider)
    throw Error(ErrorCode::NotSupported, who + ": to_rtr: remote QP belongs to provider " +
                                             std::to_string(r.provider) + ", " + only);
}
}  // namespace kinet::detail
