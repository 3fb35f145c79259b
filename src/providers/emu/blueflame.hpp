// kinet emu — BlueFlame doorbells of the software NIC (dev::DoorbellMode::BlueFlame).
//
// A BlueFlame QP's doorbell register is a 64-byte window: the poster copies
// the last WQE it announces there, bytes 8..63 first, then the control
// segment head (bytes 0..7), which is the doorbell. Hardware may execute the
// copy instead of reading the ring, so the software NIC requires the copy to
// equal the ring's slot: a copy that differs is reported on that WQE as a
// LOCAL_QP_OP error.
#pragma once
#include <cstdint>
#include <string>

#include "providers/emu/emu.hpp"

namespace kinet::emu {

// `head`: the window's first 8 bytes, just taken (swapped out) by the engine.
// Returns the plain doorbell word the engine checks (producer index = the
// head's WQE index + 1, opcode and DS zero, the head's QP number). Sets
// *head_fault when the head is not a one-block control segment head (DS
// outside 1..4), and *copy_fault when the 64-byte copy differs from the ring
// slot of that WQE. A copy that a later ring may already have overwritten
// (the doorbell record moved on, or a new head arrived) is not judged; one
// whose bytes have not all landed yet is re-read for up to a few ms first.
uint64_t take_blueflame(EmuQp& qp, uint64_t head, std::string* head_fault, std::string* copy_fault);

}  // namespace kinet::emu
