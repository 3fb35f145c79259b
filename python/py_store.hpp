// kinet Python module: a kinet::Store over any Python object with the methods
// of torch.distributed.Store (TCPStore, FileStore, HashStore, PrefixStore, a
// process group's store, or a duck-typed object of one's own).
//
// What each kinet::Store call becomes (store.hpp's contract on the left):
//   set(key, value)       obj.set(key, value)          key: str, value: bytes
//   get(key, timeout)     wait([key], timeout), then obj.get(key) -> bytes-like or str
//   check(keys)           obj.check(keys) -> bool
//   wait(keys, timeout)   obj.wait(keys, timedelta(timeout)) where obj.wait takes a
//                         timeout (torch's does); else check() polled with a
//                         1 ms .. 50 ms backoff, the GIL released while sleeping
//   erase(key)            obj.delete_key(key) -> bool (None counts as True);
//                         NotSupported when obj has none
// Bounds: a timeout of 0 ms never reaches obj.wait (torch reads a zero timeout
// as "no timeout"): one check() decides. A wait that raised after the timeout,
// or raised TimeoutError / torch's DistStoreError, is a timeout: System
// "store: timeout after N ms waiting for keys 'K' in <describe()>", naming the
// keys check() still finds missing, and what obj raised. obj.get() itself is
// bounded only by the object's own timeout (torch: its store timeout): it is
// called once wait() saw the key set.
// Failures: a Python exception from obj becomes kinet::Error naming the
// method, the key(s) and the store, with the exception's type and message;
// its code is System, or the exception's own `code` when it is a kinet.Error.
// The original exception is kept (keep_cause) as the __cause__ of the
// kinet.Error the caller finally sees. A pending signal (Ctrl-C) is checked
// before every check() and ends a wait with KeyboardInterrupt.
// Keys that are not UTF-8 can't become str: InvalidArgument.
// Thread safety: every call takes the GIL for its Python part and only for it.
#pragma once
#include "common.hpp"
#include "kinet/store.hpp"

namespace kinet::py {

class PyStore final : public Store {
 public:
  // GIL held. Throws InvalidArgument when obj lacks a callable set, get or check.
  explicit PyStore(pb::object obj);
  ~PyStore() override;  // takes the GIL to release obj

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool erase(const std::string& key) override;
  // "Python store <repr(obj), at most 160 characters>", made once (no GIL needed).
  std::string describe() const override { return describe_; }

  pb::object object() const { return obj_; }  // GIL held
  bool waits_with_timeout() const { return wait_takes_timeout_; }

 private:
  [[noreturn]] void fail(const pb::error_already_set& e, const std::string& call) const;
  pb::list key_list(const std::vector<std::string>& keys) const;

  pb::object obj_;
  std::string describe_;
  bool has_wait_ = false;
  bool wait_takes_timeout_ = false;
  bool has_delete_ = false;
};

}  // namespace kinet::py
