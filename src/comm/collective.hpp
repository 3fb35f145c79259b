// kinet — the Comm's collective exchanges with every rank's verdict: a rank
// whose own part of a collective call failed before the exchange (a bad
// argument, an allocation that failed) still takes part in it, so that the
// bootstrap's collective sequence numbers stay in step, and every rank then
// fails the same call. Used by src/comm/comm.cpp and src/comm/gdaki.cpp.
//
// Wire format of one rank's blob: u32 failed (0 or 1), u32 ErrorCode,
// u32 reason length, the reason (UTF-8, at most kMaxReason bytes), then the
// caller's data (empty when failed).
#pragma once
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "kinet/bootstrap.hpp"
#include "kinet/kinet.hpp"

namespace kinet::comm_coll {

inline constexpr size_t kHeader = 12;
inline constexpr size_t kMaxReason = 2048;
inline constexpr int kMaxNamed = 4;  // ranks whose reasons an error spells out

// The code and text of a captured exception.
inline void describe(const std::exception_ptr& e, ErrorCode* code, std::string* what) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& x) {
    *code = x.code(), *what = x.what();
  } catch (const std::bad_alloc& x) {
    *code = ErrorCode::ResourceExhausted, *what = std::string("out of memory: ") + x.what();
  } catch (const std::exception& x) {
    *code = ErrorCode::System, *what = x.what();
  } catch (...) {
    *code = ErrorCode::System, *what = "an unknown exception";
  }
}

// Collective: every rank's `data` (as Bootstrap::allgather), every rank
// calling it, also one whose part failed (`failed` set: its data is not
// sent). When some rank failed, throws on every rank after the exchange: a
// rank that failed keeps its own error's code (its own error unchanged when
// it was the only one; else its text, then the others'); the other ranks
// throw the code of the first rank that failed, "<who>: rank R failed
// (every rank fails this call): <R's reason>", the first few such ranks
// named. A peer blob that is malformed is InvalidArgument naming the rank
// (the same on every rank: every rank sees the same blobs).
inline std::vector<std::vector<uint8_t>> allgather(Bootstrap& bs, const std::string& who,
                                                   const std::exception_ptr& failed, const void* data, size_t bytes) {
  std::vector<uint8_t> mine(kHeader);
  uint32_t hdr[3] = {0, 0, 0};
  if (failed) {
    ErrorCode code;
    std::string what;
    describe(failed, &code, &what);
    if (what.size() > kMaxReason) what = what.substr(0, kMaxReason - 3) + "...";
    hdr[0] = 1, hdr[1] = static_cast<uint32_t>(code), hdr[2] = static_cast<uint32_t>(what.size());
    mine.insert(mine.end(), what.begin(), what.end());
  } else if (bytes) {
    auto* p = static_cast<const uint8_t*>(data);
    mine.insert(mine.end(), p, p + bytes);
  }
  std::memcpy(mine.data(), hdr, kHeader);
  auto all = bs.allgather(mine.data(), mine.size());

  const int me = bs.rank();
  std::vector<int> bad;
  std::vector<uint32_t> codes(all.size());
  std::vector<std::string> reasons(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    std::vector<uint8_t>& b = all[r];
    uint32_t h[3];
    if (b.size() < kHeader)
      throw Error(ErrorCode::InvalidArgument, who + ": rank " + std::to_string(r) + "'s blob has " +
                                                  std::to_string(b.size()) + " bytes, less than its " +
                                                  std::to_string(kHeader) + "-byte header");
    std::memcpy(h, b.data(), kHeader);
    if (h[0] > 1 || (h[0] == 1 && h[2] > b.size() - kHeader))
      throw Error(ErrorCode::InvalidArgument, who + ": rank " + std::to_string(r) + "'s blob has a malformed header");
    if (h[0] == 1) {
      bad.push_back(static_cast<int>(r));
      codes[r] = h[1];
      reasons[r].assign(reinterpret_cast<const char*>(b.data() + kHeader), h[2]);
    } else {
      b.erase(b.begin(), b.begin() + kHeader);
    }
  }
  if (bad.empty()) return all;

  // Names the failing ranks other than this one, with their reasons.
  auto others = [&] {
    std::string s;
    int named = 0, more = 0;
    for (int r : bad) {
      if (r == me) continue;
      if (named == kMaxNamed) {
        ++more;
        continue;
      }
      s += std::string(named++ ? "; " : "") + "rank " + std::to_string(r) + " failed: " + reasons[r];
    }
    if (more) s += "; and " + std::to_string(more) + " more ranks failed";
    return s;
  };
  if (failed) {
    if (bad.size() == 1) std::rethrow_exception(failed);
    ErrorCode code;
    std::string what;
    describe(failed, &code, &what);
    throw Error(code, what + " (every rank fails this call; also " + others() + ")");
  }
  const uint32_t c = codes[bad.front()];
  const ErrorCode code = c <= static_cast<uint32_t>(ErrorCode::System) ? static_cast<ErrorCode>(c) : ErrorCode::System;
  throw Error(code, who + ": " + others() + " (every rank fails this call)");
}

// Collective: a barrier carrying every rank's verdict, as allgather above.
inline void barrier(Bootstrap& bs, const std::string& who, const std::exception_ptr& failed) {
  allgather(bs, who, failed, nullptr, 0);
}

}  // namespace kinet::comm_coll
