// kinet — a key-value store the ranks of one job share, for a bootstrap that
// starts from one (Bootstrap::from_store) instead of a UniqueId passed by hand.
//
// The interface has the shape of torch.distributed.Store (set / get / check /
// wait / delete_key), so a binding can adapt a torch Store (TCPStore,
// FileStore, a PrefixStore) to it. kinet ships two:
//   FileStore    a directory on a filesystem every rank sees (NFS, Lustre, a
//                local directory for ranks of one host): one file per key.
//   MemoryStore  one process's map: threads as ranks (tests, single-process
//                programs).
//
// Contract of every Store:
//   - set() replaces the value as a whole: a reader on any rank sees the old
//     value or the new one, never a part of either.
//   - get() and wait() are bounded by their timeout; a timeout throws
//     Error(System) naming the key(s) waited for and the store (describe()).
//   - keys: 1 to kMaxKey bytes, any bytes except NUL; else InvalidArgument.
//   - A store holds what earlier jobs left in it: a job uses keys under its
//     own prefix (a job id), never a prefix an earlier job used.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kinet/kinet.hpp"

namespace kinet {

class Store {
 public:
  static constexpr size_t kMaxKey = 1024;
  virtual ~Store() = default;

  // Sets `key` to `value` (replacing an earlier value). Throws InvalidArgument
  // (a bad key) or System (the store failed, naming the key).
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // The value of `key`, waiting until some rank set it, at most `timeout`.
  // Throws System ("timeout after N ms waiting for key 'K' in <store>").
  virtual std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Whether every key is set now; does not wait.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Returns once every key is set, at most `timeout`; the timeout error names
  // the keys still missing. The default polls check() with a backoff (1 ms
  // growing to 50 ms).
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Removes `key`; false when it was not set.
  virtual bool erase(const std::string& key) = 0;
  // For error messages: "FileStore /shared/jobs/42".
  virtual std::string describe() const = 0;

  // Throws InvalidArgument when `key` breaks the key rules above.
  static void check_key(const std::string& key);
};

// One file per key in a directory (created, with its parents, when missing).
//   set:  the value goes to a temporary file in the directory (".tmp.*"),
//         then rename(2) puts it in place: atomic on POSIX filesystems and on
//         NFS, so readers never see a partial value.
//   get:  polls for the file (backoff 1 ms growing to 50 ms) until the
//         timeout. On NFS a new file can take the client's attribute-cache
//         time (acdirmin, a few seconds) to appear: give get a timeout well
//         above it.
// A key's file name is the key with every byte outside [A-Za-z0-9._-] (and
// a leading '.') written as %XX; a name over 255 bytes is InvalidArgument.
// Values up to kMaxValue bytes (a larger file: InvalidArgument on get). A
// key's path that is not a regular file (a directory, a FIFO someone put
// there) is InvalidArgument on get, at once: it never blocks the get.
// The store never deletes what it did not write; erase() removes one key.
class FileStore : public Store {
 public:
  static constexpr uint64_t kMaxValue = uint64_t{64} << 20;
  // Throws InvalidArgument (empty path, or a path that is not a directory)
  // or System (it can't be created), naming the path.
  explicit FileStore(std::string dir);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool erase(const std::string& key) override;
  std::string describe() const override { return "FileStore " + dir_; }

  const std::string& dir() const { return dir_; }
  // The file that holds `key` (whether or not it is set).
  std::string path(const std::string& key) const;

 private:
  std::string dir_;
};

// An in-process store: a map under a mutex; get/wait sleep on a condition
// variable. Safe from any number of threads.
class MemoryStore : public Store {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool erase(const std::string& key) override;
  std::string describe() const override { return "MemoryStore"; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<uint8_t>> kv_;
};

}  // namespace kinet
