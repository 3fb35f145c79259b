// kinet — SDK mode's loader: finds the DOCA SDK named by $DOCA_SDK_LIB_PATH,
// loads libdoca_common.so, libdoca_verbs.so and libdoca_gpunetio.so from that
// directory with dlopen(RTLD_NOW | RTLD_LOCAL), resolves every entry point of
// doca_api.hpp, and decides between SDK mode and the open implementation.
//
// The decision is a pure function of the facts gathered (decide()), so every
// way an installation can be broken is unit-tested without one:
//   variable unset or empty        -> open implementation, nothing logged
//   not a directory / unreadable   -> open implementation, one warning naming it
//   a library fails to load        -> open implementation, one warning naming the file and dlerror()
//   a required symbol is missing   -> open implementation, one warning naming symbol and library
//   everything resolves            -> SDK mode, one info line naming the directory
// Errors the SDK returns once in SDK mode are not fallbacks: check() turns
// them into a kinet::Error naming the call and its doca_error_t.
#pragma once
#include <memory>
#include <string>

#include "kinet/kinet.hpp"
#include "providers/doca/doca_api.hpp"

namespace kinet::doca {

// What load() found, in the order it looks (it stops at the first problem).
struct Probe {
  std::string dir;        // $DOCA_SDK_LIB_PATH as given; empty = unset or empty
  int dir_errno = 0;      // stat() failed with this errno
  bool is_dir = true;     // stat() succeeded but the path is not a directory
  int failed_lib = -1;    // index into api::kLibFile of the library that did not load
  std::string dl_error;   // its dlerror() text
  std::string missing_symbol;  // first required symbol not found
  int missing_in = -1;         // the library it was looked up in
};

enum class Mode { Open, Sdk };
struct Decision {
  Mode mode = Mode::Open;
  bool warn = false;  // the line is a warning (SDK asked for, not used); else info, or nothing when empty
  std::string line;   // the one log line; empty when the variable is unset
};
Decision decide(const Probe& p);

// A loaded SDK: the libraries stay loaded as long as this object lives.
class Sdk {
 public:
  ~Sdk();
  Sdk(const Sdk&) = delete;
  Sdk& operator=(const Sdk&) = delete;

  const api::Fns& fn() const { return fns_; }
  const std::string& dir() const { return dir_; }
  // True for a stand-in SDK built by kinet's tests (exports kinet_standin).
  bool standin() const { return fns_.kinet_standin != nullptr; }

  // Throws unless rc is DOCA_SUCCESS: Error(code of rc, "<who>: DOCA SDK call
  // <call> failed: doca_error_t <rc> (<name>: <description>)<detail>"), name
  // and description from doca_error_get_name / _get_descr when the SDK exports
  // them, else "(no doca_error_get_name in this SDK)".
  void check(api::doca_error_t rc, const char* call, const std::string& who, const std::string& detail = {}) const;
  // The same text, for failures that are logged rather than thrown (destroy calls).
  std::string describe(api::doca_error_t rc, const char* call) const;

  struct Loaded {
    std::shared_ptr<const Sdk> sdk;  // null unless decision.mode == Sdk
    Decision decision;
  };
  // Loads the SDK in `dir` (empty: the variable is unset). Nothing is logged:
  // the caller prints decision.line. Never throws for a broken installation.
  static Loaded load(const std::string& dir);

  // $DOCA_SDK_LIB_PATH, loaded once per process; the decision's line is
  // logged once (warn or info). Null when SDK mode is off. Thread-safe.
  static std::shared_ptr<const Sdk> process();

 private:
  Sdk() = default;
  std::string dir_;
  void* handles_[api::kLibCount] = {};
  api::Fns fns_{};
};

// The kinet::ErrorCode a doca_error_t maps to.
ErrorCode error_code_of(api::doca_error_t rc);
}  // namespace kinet::doca
