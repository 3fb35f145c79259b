// kinet emu tests of the control path — expecting a kinet::Error.
#pragma once
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <string>

#include "emu_fixture.hpp"

namespace kinet::test {

// Runs f, expects a kinet::Error with `code` whose message mentions one of `words`.
inline ::testing::AssertionResult throws_error(const std::function<void()>& f, ErrorCode code,
                                               std::initializer_list<const char*> words) {
  try {
    f();
  } catch (const Error& e) {
    if (e.code() != code)
      return ::testing::AssertionFailure() << "threw code '" << error_code_name(e.code()) << "', expected '"
                                           << error_code_name(code) << "': " << e.what();
    if (!mentions_any(e.what(), words)) {
      std::string list;
      for (const char* w : words) list += std::string(list.empty() ? "" : ", ") + "'" + w + "'";
      return ::testing::AssertionFailure() << "message does not mention any of " << list << ": \"" << e.what()
                                           << "\"";
    }
    return ::testing::AssertionSuccess() << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-kinet exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// Runs f, expects a kinet::Error with `code` and exactly the message `what`.
inline ::testing::AssertionResult throws_exactly(const std::function<void()>& f, ErrorCode code,
                                                 const std::string& what) {
  try {
    f();
  } catch (const Error& e) {
    if (e.code() != code)
      return ::testing::AssertionFailure() << "threw code '" << error_code_name(e.code()) << "', expected '"
                                           << error_code_name(code) << "': " << e.what();
    if (e.what() != what)
      return ::testing::AssertionFailure() << "message \"" << e.what() << "\", expected \"" << what << "\"";
    return ::testing::AssertionSuccess() << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-kinet exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

inline std::string hexs(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace kinet::test
