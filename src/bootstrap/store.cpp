// kinet key-value stores (kinet/store.hpp): the polling wait every store
// inherits, FileStore (one file per key, rename for atomic set) and
// MemoryStore (threads of one process).
#include "kinet/store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

namespace kinet {
namespace {
using Clock = std::chrono::steady_clock;

std::string errstr(int e) { return std::strerror(e); }

// A key as it appears in messages: printable bytes as they are, others \xNN.
std::string shown(const std::string& key) {
  std::string s;
  for (unsigned char c : key) {
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      s += static_cast<char>(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      s += b;
    }
  }
  return "'" + s + "'";
}

std::string timeout_msg(std::chrono::milliseconds t, const std::string& what, const Store& s) {
  return "store: timeout after " + std::to_string(t.count()) + " ms waiting for " + what + " in " + s.describe();
}

// Sleeps for the next step of a 1 ms .. 50 ms backoff, never past `deadline`.
void backoff(std::chrono::microseconds& step, Clock::time_point deadline) {
  const auto now = Clock::now();
  if (now < deadline) std::this_thread::sleep_for(std::min<Clock::duration>(step, deadline - now));
  step = std::min<std::chrono::microseconds>(step * 2, std::chrono::milliseconds(50));
}

// A bound as a deadline: negative counts as 0, and a huge one (milliseconds::max())
// is cut to 30 days so that now + bound can't overflow.
Clock::time_point deadline_after(std::chrono::milliseconds t) {
  return Clock::now() + std::clamp<std::chrono::milliseconds>(t, std::chrono::milliseconds(0), std::chrono::hours(24 * 30));
}

bool safe_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

// Creates `dir` and its missing parents (mkdir -p).
void make_dirs(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at != dir.size() && dir[at] != '/') continue;
    const std::string part = dir.substr(0, at);
    if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST)
      throw Error(ErrorCode::System, "FileStore: cannot create directory " + part + ": " + errstr(errno));
  }
}
}  // namespace

void Store::check_key(const std::string& key) {
  if (key.empty()) throw Error(ErrorCode::InvalidArgument, "store: empty key");
  if (key.size() > kMaxKey)
    throw Error(ErrorCode::InvalidArgument, "store: key of " + std::to_string(key.size()) + " bytes (at most " +
                                                std::to_string(kMaxKey) + "): " + shown(key.substr(0, 64)) + "...");
  if (key.find('\0') != std::string::npos)
    throw Error(ErrorCode::InvalidArgument, "store: key " + shown(key) + " contains a NUL byte");
}

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = deadline_after(timeout);
  std::chrono::microseconds step(1000);
  for (;;) {
    std::string missing;
    for (const std::string& k : keys)
      if (!check({k})) missing += (missing.empty() ? "" : ", ") + shown(k);
    if (missing.empty()) return;
    if (Clock::now() >= deadline) throw Error(ErrorCode::System, timeout_msg(timeout, "keys " + missing, *this));
    backoff(step, deadline);
  }
}

// ---- FileStore ----------------------------------------------------------------

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) throw Error(ErrorCode::InvalidArgument, "FileStore: empty directory path");
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  struct stat st {};
  if (::stat(dir_.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw Error(ErrorCode::InvalidArgument, "FileStore: " + dir_ + " is not a directory");
    return;
  }
  if (errno != ENOENT) throw Error(ErrorCode::System, "FileStore: cannot stat " + dir_ + ": " + errstr(errno));
  make_dirs(dir_);
}

std::string FileStore::path(const std::string& key) const {
  check_key(key);
  std::string name;
  for (size_t i = 0; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (safe_byte(c) && !(i == 0 && c == '.')) {  // a leading '.' would clash with ".", ".." and ".tmp.*"
      name += static_cast<char>(c);
    } else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      name += b;
    }
  }
  if (name.size() > 255)
    throw Error(ErrorCode::InvalidArgument, "FileStore: key " + shown(key.substr(0, 64)) +
                                                "... makes a file name of " + std::to_string(name.size()) +
                                                " bytes (at most 255)");
  return dir_ + "/" + name;
}

void FileStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  const std::string final_path = path(key);
  // Unique per set: pid, a process-wide sequence and a salt (O_EXCL catches the rest). No
  // thread_local engine: 2.5 KB of TLS in libkinet.a left the NCCL plugin's .so unloadable
  // ("cannot allocate memory in static TLS block").
  static const uint64_t salt = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  static std::atomic<uint64_t> seq{0};
  const std::string tmp = dir_ + "/.tmp." + std::to_string(::getpid()) + "." + std::to_string(salt) + "." +
                          std::to_string(seq.fetch_add(1, std::memory_order_relaxed));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) throw Error(ErrorCode::System, "FileStore: set " + shown(key) + ": cannot create " + tmp + ": " + errstr(errno));
  size_t done = 0;
  int err = 0;
  while (done < value.size()) {
    const ssize_t w = ::write(fd, value.data() + done, value.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = w < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(w);
  }
  if (::close(fd) != 0 && !err) err = errno;  // NFS reports write errors at close
  if (!err && ::rename(tmp.c_str(), final_path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(tmp.c_str());
    throw Error(ErrorCode::System, "FileStore: set " + shown(key) + " (" + final_path + "): " + errstr(err));
  }
}

std::vector<uint8_t> FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const std::string p = path(key);
  const auto deadline = deadline_after(timeout);
  std::chrono::microseconds step(1000);
  int fd;
  for (;;) {
    // O_NONBLOCK: opening a FIFO put at the key's path would block until a
    // writer comes, past the bound; fstat below refuses it instead. (A
    // regular file ignores the flag.)
    fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) break;
    if (errno != ENOENT)
      throw Error(ErrorCode::System, "FileStore: get " + shown(key) + ": cannot open " + p + ": " + errstr(errno));
    if (Clock::now() >= deadline) throw Error(ErrorCode::System, timeout_msg(timeout, "key " + shown(key), *this));
    backoff(step, deadline);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int e = errno;
    ::close(fd);
    throw Error(ErrorCode::InvalidArgument,
                "FileStore: get " + shown(key) + ": " + p + " is not a regular file" + (e ? ": " + errstr(e) : ""));
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxValue) {
    ::close(fd);
    throw Error(ErrorCode::InvalidArgument, "FileStore: get " + shown(key) + ": " + p + " holds " +
                                                std::to_string(st.st_size) + " bytes, more than a value may (" +
                                                std::to_string(kMaxValue) + ")");
  }
  // The file is never written in place (set renames a finished one over it),
  // so reading to its end gives one whole value; a file that another writer
  // grows meanwhile is still read only up to kMaxValue.
  std::vector<uint8_t> v(static_cast<size_t>(st.st_size));
  size_t got = 0;
  for (;;) {
    if (got == v.size()) {
      if (v.size() >= kMaxValue) {
        uint8_t extra;
        const ssize_t k = ::read(fd, &extra, 1);
        if (k == 0) break;
        const int e = errno;
        ::close(fd);
        if (k < 0) throw Error(ErrorCode::System, "FileStore: get " + shown(key) + ": reading " + p + ": " + errstr(e));
        throw Error(ErrorCode::InvalidArgument, "FileStore: get " + shown(key) + ": " + p + " grew past " +
                                                    std::to_string(kMaxValue) + " bytes while being read");
      }
      v.resize(std::min<size_t>(kMaxValue, v.size() + 65536));
    }
    const ssize_t k = ::read(fd, v.data() + got, v.size() - got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      const int e = errno;
      ::close(fd);
      throw Error(ErrorCode::System, "FileStore: get " + shown(key) + ": reading " + p + ": " + errstr(e));
    }
    if (k == 0) break;
    got += static_cast<size_t>(k);
  }
  v.resize(got);
  ::close(fd);
  return v;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    struct stat st {};
    const std::string p = path(k);
    if (::stat(p.c_str(), &st) != 0) {
      if (errno == ENOENT) return false;
      throw Error(ErrorCode::System, "FileStore: check " + shown(k) + ": cannot stat " + p + ": " + errstr(errno));
    }
  }
  return true;
}

bool FileStore::erase(const std::string& key) {
  const std::string p = path(key);
  if (::unlink(p.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  throw Error(ErrorCode::System, "FileStore: erase " + shown(key) + ": cannot remove " + p + ": " + errstr(errno));
}

// ---- MemoryStore ----------------------------------------------------------------

void MemoryStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  check_key(key);
  {
    std::lock_guard<std::mutex> g(mu_);
    kv_[key] = value;
  }
  cv_.notify_all();
}

std::vector<uint8_t> MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  check_key(key);
  std::unique_lock<std::mutex> g(mu_);
  if (!cv_.wait_until(g, deadline_after(timeout), [&] { return kv_.count(key) != 0; }))
    throw Error(ErrorCode::System, timeout_msg(timeout, "key " + shown(key), *this));
  return kv_[key];
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) check_key(k);
  std::lock_guard<std::mutex> g(mu_);
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return kv_.count(k) != 0; });
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  for (const std::string& k : keys) check_key(k);
  std::unique_lock<std::mutex> g(mu_);
  const auto all = [&] { return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return kv_.count(k) != 0; }); };
  if (cv_.wait_until(g, deadline_after(timeout), all)) return;
  std::string missing;
  for (const std::string& k : keys)
    if (!kv_.count(k)) missing += (missing.empty() ? "" : ", ") + shown(k);
  throw Error(ErrorCode::System, timeout_msg(timeout, "keys " + missing, *this));
}

bool MemoryStore::erase(const std::string& key) {
  check_key(key);
  std::lock_guard<std::mutex> g(mu_);
  return kv_.erase(key) != 0;
}

}  // namespace kinet
