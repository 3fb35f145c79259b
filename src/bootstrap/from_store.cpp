// kinet bootstrap from a key-value store: rank 0 publishes the UniqueId in a
// record that says who made it (host, boot id, PID namespace, process and its
// start time), so that a rank can tell an id a dead process on this host left
// from a fresh one, and every error can say whose id it was.
#include <sys/types.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/log.hpp"
#include "kinet/bootstrap.hpp"
#include "kinet/store.hpp"

namespace kinet {
namespace {
using Clock = std::chrono::steady_clock;

// The value under store_key(): fixed size, host byte order (the ranks of one
// job share an architecture, as they do for the UniqueId itself).
struct Record {
  static constexpr char kMagic[8] = {'K', 'I', 'N', 'E', 'T', 'S', 'I', 'D'};
  static constexpr uint32_t kVersion = 1;
  char magic[8];
  uint32_t version;
  uint32_t status;      // 0: `id` is valid; 1: rank 0 failed, `why` says how
  uint32_t nranks;      // the job's size, as rank 0 was told
  uint32_t reserved0;
  uint64_t created_ms;  // Unix time
  uint64_t pid;
  uint64_t start_ticks;  // the process's start time (/proc/<pid>/stat field 22)
  uint64_t pidns;        // inode of /proc/self/ns/pid; 0: unknown
  char boot_id[40];      // /proc/sys/kernel/random/boot_id; empty: unknown
  char host[64];
  UniqueId id;
  char why[512];
};
static_assert(sizeof(Record) == 800);

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

// Field 22 (starttime) of /proc/<pid>/stat; 0 when the process doesn't exist.
uint64_t start_ticks(uint64_t pid) {
  const std::string s = read_line("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = s.rfind(')');  // the command name may hold spaces and ')'
  if (paren == std::string::npos) return 0;
  std::istringstream in(s.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && (in >> field); ++i)
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  return 0;
}

uint64_t pid_namespace() {
  char buf[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof buf - 1);  // "pid:[4026531836]"
  if (n <= 0) return 0;
  const char* open = std::strchr(buf, '[');
  return open ? std::strtoull(open + 1, nullptr, 10) : 0;
}

void copy_str(char* dst, size_t cap, const std::string& s) {
  std::memset(dst, 0, cap);
  std::memcpy(dst, s.data(), std::min(s.size(), cap - 1));
}

std::string str(const char* field, size_t cap) { return std::string(field, strnlen(field, cap)); }

Record make_record(int nranks) {
  Record r{};
  std::memcpy(r.magic, Record::kMagic, sizeof r.magic);
  r.version = Record::kVersion;
  r.nranks = static_cast<uint32_t>(nranks);
  r.created_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  r.pid = static_cast<uint64_t>(::getpid());
  r.start_ticks = start_ticks(r.pid);
  r.pidns = pid_namespace();
  copy_str(r.boot_id, sizeof r.boot_id, read_line("/proc/sys/kernel/random/boot_id"));
  char host[sizeof r.host] = {};
  ::gethostname(host, sizeof host - 1);
  copy_str(r.host, sizeof r.host, host);
  return r;
}

std::vector<uint8_t> bytes_of(const Record& r) {
  const auto* p = reinterpret_cast<const uint8_t*>(&r);
  return {p, p + sizeof r};
}

std::string utc(uint64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return b;
}

std::string origin(const Record& r) {
  return "written by process " + std::to_string(r.pid) + " on host " + str(r.host, sizeof r.host) + " at " +
         utc(r.created_ms);
}

// Parses a store value; throws InvalidArgument saying what is wrong with it.
Record parse(const std::vector<uint8_t>& v, const std::string& where) {
  const std::string bad = where + " holds " + std::to_string(v.size()) + " bytes that are not a kinet unique id record";
  if (v.size() != sizeof(Record))
    throw Error(ErrorCode::InvalidArgument, bad + " (a record has " + std::to_string(sizeof(Record)) + " bytes)");
  Record r;
  std::memcpy(&r, v.data(), sizeof r);
  if (std::memcmp(r.magic, Record::kMagic, sizeof r.magic) != 0)
    throw Error(ErrorCode::InvalidArgument, bad + " (wrong magic)");
  if (r.version != Record::kVersion)
    throw Error(ErrorCode::InvalidArgument, bad + " of version " + std::to_string(Record::kVersion) + " (version " +
                                                std::to_string(r.version) + ": another kinet release?)");
  if (r.status > 1) throw Error(ErrorCode::InvalidArgument, bad + " (status " + std::to_string(r.status) + ")");
  if (r.status == 0) {
    try {
      r.id.validate();
    } catch (const Error& e) {
      throw Error(ErrorCode::InvalidArgument, bad + " (its unique id: " + e.what() + ")");
    }
  }
  return r;
}

// Whether `r` certainly comes from a process that is gone: only decidable on
// this host and in this PID namespace; anything else counts as alive.
bool stale(const Record& r, std::string* why) {
  static const std::string boot = read_line("/proc/sys/kernel/random/boot_id");
  static const uint64_t ns = pid_namespace();
  if (boot.empty() || ns == 0 || r.pidns != ns || str(r.boot_id, sizeof r.boot_id) != boot) return false;
  const uint64_t now = start_ticks(r.pid);
  if (now == r.start_ticks && now != 0) return false;
  *why = now == 0 ? "its process " + std::to_string(r.pid) + " no longer runs"
                  : "its process " + std::to_string(r.pid) + " has ended (that process id now belongs to another)";
  return true;
}
}  // namespace

std::string Bootstrap::store_key(const std::string& prefix) {
  return prefix.empty() ? "kinet_unique_id" : prefix + "/kinet_unique_id";
}

std::unique_ptr<Bootstrap> Bootstrap::from_store(Store& store, int rank, int nranks, const std::string& prefix,
                                                 std::chrono::milliseconds timeout) {
  const std::string me = "bootstrap: from_store rank " + std::to_string(rank) + "/" + std::to_string(nranks);
  // init()'s range too, checked before rank 0 starts a rendezvous for nothing.
  if (nranks < 1 || nranks > (1 << 20) || rank < 0 || rank >= nranks)
    throw Error(ErrorCode::InvalidArgument, me + ": rank or nranks out of range (nranks 1..2^20)");
  if (timeout.count() <= 0)
    throw Error(ErrorCode::InvalidArgument, me + ": timeout " + std::to_string(timeout.count()) + " ms");
  timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 30));  // no deadline overflow
  const std::string key = store_key(prefix);
  const std::string where = "key '" + key + "' in " + store.describe();

  if (rank == 0) {
    Record rec = make_record(nranks);
    // On failure the others learn why at once instead of timing out.
    const auto publish_failure = [&](const std::string& why) {
      rec.status = 1;
      copy_str(rec.why, sizeof rec.why, why);
      try {
        store.set(key, bytes_of(rec));
      } catch (const std::exception& e) {
        KINET_LOG(Warn, "%s: could not publish rank 0's failure under %s: %s", me.c_str(), where.c_str(), e.what());
      }
    };
    try {
      rec.id = UniqueId::create();
    } catch (const Error& e) {
      publish_failure(std::string("UniqueId::create: ") + e.what());
      throw;
    }
    try {
      store.set(key, bytes_of(rec));
    } catch (...) {
      UniqueId::cancel(rec.id);  // nobody can learn the id: end its rendezvous
      throw;
    }
    std::unique_ptr<Bootstrap> bs;
    try {
      bs = init(rec.id, 0, nranks, timeout);
    } catch (const Error& e) {
      // The rendezvous thread and its listener would otherwise stay until
      // this process exits, one set per failed call.
      UniqueId::cancel(rec.id);
      publish_failure(std::string("init: ") + e.what());
      throw Error(e.code(), std::string(e.what()) + " (unique id published under " + where + ")");
    }
    // Every rank registered with the root, so every rank has read the key.
    try {
      store.erase(key);
    } catch (const std::exception& e) {
      KINET_LOG(Warn, "%s: could not erase %s after init: %s", me.c_str(), where.c_str(), e.what());
    }
    return bs;
  }

  const auto deadline = Clock::now() + timeout;
  std::chrono::milliseconds step(1);
  bool told = false;
  Record rec;
  for (;;) {
    // The first wait gets the whole bound (so its error names the caller's timeout).
    const auto left = !told ? timeout
                            : std::max(std::chrono::milliseconds(0),
                                       std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    std::vector<uint8_t> v;
    try {
      v = store.get(key, left);
    } catch (const Error& e) {
      throw Error(e.code(), me + ": waiting for rank 0's unique id: " + e.what());
    }
    rec = parse(v, me + ": " + where);
    // A failure record is stale too when its process is gone: an earlier
    // job's rank 0 may have left it, and this job's rank 0 may still come.
    std::string why;
    if (!stale(rec, &why)) {
      if (rec.status == 1)
        throw Error(ErrorCode::System, me + ": rank 0 failed (" + origin(rec) + "): " + str(rec.why, sizeof rec.why));
      break;
    }
    if (Clock::now() >= deadline)
      throw Error(ErrorCode::System,
                  me + ": timeout after " + std::to_string(timeout.count()) + " ms: " + where + " holds only a stale " +
                      (rec.status == 1 ? "record of rank 0's failure" : "unique id") + " (" + origin(rec) + "; " + why +
                      (rec.status == 1 ? "; it failed with: " + str(rec.why, sizeof rec.why) : std::string()) +
                      "): left by an earlier job with the same prefix? Prefixes must be unique per job; rank 0 of "
                      "this job has not published its id");
    if (!told) KINET_LOG(Info, "%s: %s holds a stale id (%s; %s): waiting for a fresh one", me.c_str(), where.c_str(),
                         origin(rec).c_str(), why.c_str());
    told = true;
    std::this_thread::sleep_for(std::min<Clock::duration>(step, std::max<Clock::duration>(deadline - Clock::now(), {})));
    step = std::min(step * 2, std::chrono::milliseconds(50));
  }
  if (rec.nranks != static_cast<uint32_t>(nranks))
    throw Error(ErrorCode::InvalidArgument, me + ": rank 0 published its id for " + std::to_string(rec.nranks) +
                                                " ranks under " + where + " (" + origin(rec) + "), this rank was told " +
                                                std::to_string(nranks));
  try {
    return init(rec.id, rank, nranks, timeout);
  } catch (const Error& e) {
    throw Error(e.code(), std::string(e.what()) + " (unique id from " + where + ", " + origin(rec) +
                              "; an id an earlier job left under the same prefix fails this way: prefixes must be "
                              "unique per job)");
  }
}

}  // namespace kinet
