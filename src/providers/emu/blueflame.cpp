// kinet emu — BlueFlame doorbells (see blueflame.hpp).
#include "providers/emu/blueflame.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/cuda_shim.hpp"
#include "providers/emu/decode.hpp"
#include "providers/emu/prm.hpp"

namespace kinet::emu {
namespace {
constexpr auto kLandBound = std::chrono::milliseconds(5);  // a copy still in flight from a kernel lands well within
}

uint64_t take_blueflame(EmuQp& qp, uint64_t head, std::string* head_fault, std::string* copy_fault) {
  uint8_t h[8];
  std::memcpy(h, &head, 8);
  const uint32_t opmod_idx_opcode = rd_be32(h), qpn_ds = rd_be32(h + 4);
  const uint16_t idx = static_cast<uint16_t>(opmod_idx_opcode >> 8);
  const uint32_t ds = qpn_ds & 0xffu, qpn = qpn_ds >> 8;
  const uint16_t pi = static_cast<uint16_t>(idx + 1);
  const uint64_t word = mlx5::doorbell_word(pi, kinet::detail::bswap32_constexpr(qpn << 8));
  if (ds == 0 || ds > 4) {
    *head_fault = "BlueFlame write " + hex(head) + " names WQE " + std::to_string(idx) + " with DS " +
                  std::to_string(ds) + ": a BlueFlame copy is one 64-byte WQE (DS 1..4)";
    return word;
  }
  // The ring's slot: written and released before the record and the head.
  uint8_t ring[prm::kWqeBB];
  const uint8_t* s = qp.sq + (idx & ((1u << qp.log_n) - 1)) * prm::kWqeBB;
  if (qp.block_on_gpu) cuda::copy(ring, s, sizeof ring);
  else std::memcpy(ring, s, sizeof ring);
  uint8_t copy[prm::kWqeBB];
  std::memcpy(copy, h, 8);
  const auto end = std::chrono::steady_clock::now() + kLandBound;
  for (;;) {
    for (int i = 1; i < 8; ++i) {
      const uint64_t v = std::atomic_ref<uint64_t>(qp.db[i]).load(std::memory_order_relaxed);
      std::memcpy(copy + 8 * i, &v, 8);
    }
    if (std::memcmp(copy, ring, sizeof ring) == 0) return word;
    // Posters write the record, then the window: bytes from a later ring
    // imply a later record (acquire after the reads).
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint32_t rec_raw = std::atomic_ref<uint32_t>(qp.dbrec[prm::kDbrecSend]).load(std::memory_order_acquire);
    uint8_t rb[4];
    std::memcpy(rb, &rec_raw, 4);
    if (static_cast<uint16_t>(rd_be32(rb)) != pi) return word;  // a later ring started: not judged
    if (std::atomic_ref<uint64_t>(qp.db[0]).load(std::memory_order_acquire) != prm::kNoDoorbell) return word;
    if (std::chrono::steady_clock::now() > end) break;
    std::this_thread::yield();
  }
  size_t at = 0;
  while (copy[at] == ring[at]) ++at;
  *copy_fault = "BlueFlame copy of WQE " + std::to_string(idx) + " differs from its ring slot (first at byte " +
                std::to_string(at) + ": copy " + hex(copy[at]) + ", ring " + hex(ring[at]) +
                "); the NIC would execute the copy";
  return word;
}
}  // namespace kinet::emu
