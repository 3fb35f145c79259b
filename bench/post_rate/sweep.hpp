// kinet-post-rate — which rows run: the configurations of one sweep.
#pragma once
#include <vector>

#include "common.hpp"

namespace kinet::bench {

// Retire CTAs for qps QPs (one warp per QP, 32 warps per CTA).
uint32_t cons_ctas_for(uint32_t qps);

// Every row of a sweep on a GPU of `sms` SMs: the single-thread, warp, CTA,
// shared-QP and whole-GPU rows, then the warp-coop CTA x QP table; filtered
// by o.only; o.quick keeps about 20.
std::vector<Config> build_sweep(const Options& o, int sms);

}  // namespace kinet::bench
