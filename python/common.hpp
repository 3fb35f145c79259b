// kinet Python module: what its files share. Every function here is called
// with the GIL held unless its comment says otherwise.
#pragma once
#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "kinet/kinet.hpp"

namespace kinet::py {
namespace pb = pybind11;

// "InvalidArgument", "System", ...: the enumerator's name, which kinet.Error's
// `code` carries.
const char* code_name(ErrorCode c);
// The inverse; false for a name that is none of them.
bool code_from_name(const std::string& name, ErrorCode* out);

// kinet.Error (a RuntimeError subclass with a `code` attribute), created when
// the module is imported.
pb::handle error_type();
void init_error_type(pb::module_& m);

// The Python exception a store callback raised on this thread, kept until
// the binding that called into C++ turns the kinet::Error it became into a
// Python exception: that exception's __cause__ then is the original one.
void keep_cause(const pb::error_already_set& e);
pb::object take_cause();
void drop_cause();

// Runs f with the GIL released (f must not touch Python objects), after
// dropping a cause an earlier call left. A kinet::Error it throws reaches
// Python as kinet.Error through the translator module.cpp registers; an
// exception a store callback raised that is not an Exception (KeyboardInterrupt,
// SystemExit) is raised again as itself.
template <class F>
auto released(F&& f) -> decltype(f()) {
  drop_cause();
  pb::gil_scoped_release nogil;
  return f();
}

// A timeout argument: None -> `fallback`; datetime.timedelta, int or float
// (seconds). Rounded up to whole milliseconds; above 30 days counts as 30
// days. TypeError for another type; kinet.Error(InvalidArgument) naming `what`
// for a negative or NaN value.
std::chrono::milliseconds to_ms(pb::handle t, std::chrono::milliseconds fallback, const char* what);
pb::object to_timedelta(std::chrono::milliseconds ms);

// The bytes of a bytes-like object (bytes, bytearray, memoryview, a C-contiguous
// array), copied. With allow_str, a str is taken as its UTF-8 bytes (what
// torch's Store.set accepts). TypeError naming `what` for anything else.
std::vector<uint8_t> to_bytes(pb::handle v, const char* what, bool allow_str = false);
pb::bytes as_bytes(const std::vector<uint8_t>& v);

// A C++ string as a Python str; kinet.Error(InvalidArgument) naming `what`
// when it is not UTF-8.
pb::str to_str(const std::string& s, const std::string& what);

void bind_stores(pb::module_& m);
void bind_bootstrap(pb::module_& m);

}  // namespace kinet::py
