// kinet emu tests of the control path — expecting a kinet::Error.
#pragma once
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <string>

#include "emu_fixture.hpp"

namespace kinet::test {

// Runs f, expects a kinet::Error with `code` whose message `why_not` accepts:
// it returns "" for a good message, else what is wrong with it.
inline ::testing::AssertionResult throws_error_if(const std::function<void()>& f, ErrorCode code,
                                                  const std::function<std::string(const std::string&)>& why_not) {
  try {
    f();
  } catch (const Error& e) {
    if (e.code() != code)
      return ::testing::AssertionFailure() << "threw code '" << error_code_name(e.code()) << "', expected '"
                                           << error_code_name(code) << "': " << e.what();
    if (std::string bad = why_not(e.what()); !bad.empty()) return ::testing::AssertionFailure() << bad;
    return ::testing::AssertionSuccess() << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-kinet exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// Runs f, expects a kinet::Error with `code` whose message mentions one of `words`.
inline ::testing::AssertionResult throws_error(const std::function<void()>& f, ErrorCode code,
                                               std::initializer_list<const char*> words) {
  return throws_error_if(f, code, [words](const std::string& what) -> std::string {
    if (mentions_any(what, words)) return "";
    std::string list;
    for (const char* w : words) list += std::string(list.empty() ? "" : ", ") + "'" + w + "'";
    return "message does not mention any of " + list + ": \"" + what + "\"";
  });
}

// Runs f, expects a kinet::Error with `code` and exactly the message `what`.
inline ::testing::AssertionResult throws_exactly(const std::function<void()>& f, ErrorCode code,
                                                 const std::string& what) {
  return throws_error_if(f, code, [&what](const std::string& got) -> std::string {
    return got == what ? "" : "message \"" + got + "\", expected \"" + what + "\"";
  });
}

inline std::string hexs(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace kinet::test
