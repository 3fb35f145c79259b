// kinet tests — a send ring, doorbell record and CQ in plain host memory with
// no NIC behind them: the test plays the NIC and writes CQEs by hand. Used to
// test the device verbs' bookkeeping (tickets, signalling, doorbells, owner
// bits, timeouts) without the library.
#pragma once
#include <endian.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "kinet/device/qp.cuh"
#include "kinet/mlx5/wire.hpp"

namespace kinet::test {

struct FakeRing {
  std::vector<uint8_t> sq_mem;
  std::vector<mlx5::Cqe64> cqes;
  alignas(8) uint32_t dbrec[2]{};
  alignas(8) uint32_t cq_dbrec[2]{};
  alignas(8) uint64_t db = 0;
  dev::SqState state{};
  dev::QpHandle h{};
  uint32_t nic_ci = 0;  // CQEs written by the fake NIC

  FakeRing(uint32_t log_sq, uint32_t log_cq, uint32_t signal_period, uint64_t timeout_ns = 200'000'000ull,
           uint32_t max_msg = 1u << 30, uint32_t qpn = 0x1234)
      : sq_mem((size_t{64} << log_sq) + 64), cqes(size_t{1} << log_cq) {
    for (auto& c : cqes) {
      std::memset(&c, 0, sizeof c);
      c.op_own = mlx5::kCqeInitOpOwn;
    }
    uint8_t* sq = sq_mem.data();
    sq += (64 - reinterpret_cast<uintptr_t>(sq) % 64) % 64;
    h.sq = sq;
    h.dbrec = dbrec;
    h.db = &db;
    h.state = &state;
    h.cq = dev::CqHandle{cqes.data(), cq_dbrec, log_cq, 3};
    h.timeout_ns = timeout_ns;
    h.log_n = log_sq;
    h.qpn = qpn;
    h.qpn_be8 = htobe32(qpn << 8);
    h.max_msg = max_msg;
    h.signal_period = signal_period;
  }
  FakeRing(const FakeRing&) = delete;

  const uint8_t* slot(uint64_t idx) const { return h.sq + (idx & (h.size() - 1)) * 64; }
  const mlx5::CtrlSeg& ctrl(uint64_t idx) const { return *reinterpret_cast<const mlx5::CtrlSeg*>(slot(idx)); }
  uint8_t opcode(uint64_t idx) const { return static_cast<uint8_t>(be32toh(ctrl(idx).opmod_idx_opcode) & 0xff); }
  uint16_t wqe_index(uint64_t idx) const {
    return static_cast<uint16_t>((be32toh(ctrl(idx).opmod_idx_opcode) >> 8) & 0xffff);
  }
  uint32_t ds(uint64_t idx) const { return be32toh(ctrl(idx).qpn_ds) & 0x3f; }
  bool wants_cqe(uint64_t idx) const { return ctrl(idx).fm_ce_se & mlx5::kCtrlCqUpdate; }
  bool fenced(uint64_t idx) const { return ctrl(idx).fm_ce_se & mlx5::kCtrlFence; }
  uint64_t raddr(uint64_t idx) const {
    return be64toh(reinterpret_cast<const mlx5::RaddrSeg*>(slot(idx) + 16)->raddr);
  }
  const mlx5::DataSeg& data(uint64_t idx, int seg = 2) const {
    return *reinterpret_cast<const mlx5::DataSeg*>(slot(idx) + 16 * seg);
  }
  uint32_t send_pi() const { return be32toh(std::atomic_ref<uint32_t>(const_cast<uint32_t&>(dbrec[1])).load()); }

  // Writes the next CQE, for WQE index wqe_idx: success, or an error CQE.
  void complete(uint64_t wqe_idx, uint8_t syndrome = 0, uint8_t cqe_op = 0xff) {
    const uint32_t log_n = h.cq.log_n;
    mlx5::Cqe64& c = cqes[nic_ci & ((1u << log_n) - 1)];
    uint8_t bytes[64] = {};
    const uint8_t op = cqe_op != 0xff ? cqe_op : uint8_t(syndrome ? mlx5::kCqeReqErr : mlx5::kCqeReq);
    auto* e = reinterpret_cast<mlx5::ErrCqe*>(bytes);
    if (syndrome) {
      e->syndrome = syndrome;
      e->vendor_err_synd = 0x42;
    }
    e->s_wqe_opcode_qpn = htobe32(h.qpn);
    e->wqe_counter = htobe16(static_cast<uint16_t>(wqe_idx));
    e->op_own = static_cast<uint8_t>((op << 4) | mlx5::cqe_sw_owner(nic_ci, log_n));
    // Body first, then the last 4 bytes (wqe_counter, signature, op_own) with a release store.
    std::memcpy(&c, bytes, 60);
    uint32_t tail;
    std::memcpy(&tail, bytes + 60, 4);
    std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(&c) + 60))
        .store(tail, std::memory_order_release);
    ++nic_ci;
  }
};

}  // namespace kinet::test
