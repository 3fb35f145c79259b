// kinet core — a FIFO whose entries are reused in place. Internal header.
//
// A std::deque of large entries allocates a block per push and frees it per
// pop; the software NIC's engine pushes one entry per WQE. Here a push
// fills the slot after the newest entry where it is (next(), then push()),
// and pop_front() leaves the oldest slot for a later push, with what it owns
// (a vector keeps its capacity): a steady stream allocates nothing once the
// ring has grown to its peak. Not thread-safe.
#pragma once
#include <cassert>
#include <cstddef>
#include <utility>
#include <vector>

namespace kinet {

template <class T>
class ReuseRing {
 public:
  bool empty() const { return n_ == 0; }
  size_t size() const { return n_; }
  // The i-th oldest entry (0: front), i < size().
  T& operator[](size_t i) { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  const T& operator[](size_t i) const { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  T& front() { return (*this)[0]; }
  T& back() { return (*this)[n_ - 1]; }
  // The slot the next push() makes the newest entry, as its last user left
  // it (the caller resets what it needs). Valid until the next next(),
  // push() or clear(); pop_front() leaves it alone. May grow the ring
  // (doubling: entries move, references to them end).
  T& next() {
    if (n_ == slots_.size()) grow();
    return slots_[(head_ + n_) & (slots_.size() - 1)];
  }
  // Makes the slot next() returned the newest entry.
  void push() {
    assert(n_ < slots_.size());
    ++n_;
  }
  void pop_front() {
    assert(n_ > 0);
    head_ = (head_ + 1) & (slots_.size() - 1);
    --n_;
  }
  // Drops every entry and frees the slots (and what they own).
  void clear() {
    std::vector<T>().swap(slots_);
    head_ = n_ = 0;
  }

 private:
  std::vector<T> slots_;  // a power of two of them, or none
  size_t head_ = 0, n_ = 0;
  void grow() {
    std::vector<T> s(slots_.empty() ? 8 : slots_.size() * 2);
    for (size_t i = 0; i < n_; ++i) s[i] = std::move((*this)[i]);
    slots_.swap(s);
    head_ = 0;
  }
};

}  // namespace kinet
