// kinet Python module (docs/PYTHON.md): kinet.Error, the helpers the other
// files share, version(), env_table() and the module itself.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <pybind11/eval.h>

#include "common.hpp"
#include "core/env.hpp"
#include "kinet/version.hpp"

namespace kinet::py {
namespace {
// Strong references held for the life of the process: Python objects in
// static storage would be released after the interpreter is gone.
PyObject* g_error = nullptr;
PyObject* g_timedelta = nullptr;
thread_local PyObject* t_cause = nullptr;  // owned; only touched with the GIL held

constexpr const char* kErrorSource = R"(
class Error(RuntimeError):
    """A kinet failure. `code` names its kinet::ErrorCode: InvalidArgument,
    NotFound, NotSupported, BadState, ResourceExhausted or System; str(e) says
    what failed and why, naming the rank, peer, key or store involved. A
    Python store may raise it too: its code then carries through."""

    def __init__(self, message, code="System"):
        super().__init__(message)
        self.code = code
)";

// Sets kinet.Error for `e` as the pending Python error; __cause__ is the
// exception a store callback raised during this call, if one did.
void raise_error(const Error& e) {
  pb::object cause = take_cause();
  if (cause && !PyObject_IsInstance(cause.ptr(), PyExc_Exception)) {
    // KeyboardInterrupt, SystemExit: the caller asked to stop; give it back as it was.
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(cause.ptr())), cause.ptr());
    return;
  }
  pb::object exc = pb::reinterpret_borrow<pb::object>(g_error)(pb::str(e.what()), code_name(e.code()));
  if (cause) PyException_SetCause(exc.ptr(), cause.release().ptr());  // steals the reference
  PyErr_SetObject(g_error, exc.ptr());
}

pb::list env_table() {
  pb::list out;
  for (const env::Variable& v : env::variables()) {
    pb::dict d;
    d["name"] = v.name;
    d["default"] = v.default_value;
    d["meaning"] = v.meaning;
    d["reader"] = v.reader;
    d["test_only"] = v.test_only;
    const char* now = std::getenv(v.name);
    d["value"] = now ? pb::object(pb::str(now)) : pb::object(pb::none());
    out.append(d);
  }
  return out;
}
}  // namespace

const char* code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::InvalidArgument: return "InvalidArgument";
    case ErrorCode::NotFound: return "NotFound";
    case ErrorCode::NotSupported: return "NotSupported";
    case ErrorCode::BadState: return "BadState";
    case ErrorCode::ResourceExhausted: return "ResourceExhausted";
    case ErrorCode::System: return "System";
  }
  return "System";
}

bool code_from_name(const std::string& name, ErrorCode* out) {
  for (ErrorCode c : {ErrorCode::InvalidArgument, ErrorCode::NotFound, ErrorCode::NotSupported, ErrorCode::BadState,
                      ErrorCode::ResourceExhausted, ErrorCode::System})
    if (name == code_name(c)) {
      *out = c;
      return true;
    }
  return false;
}

pb::handle error_type() { return g_error; }

void init_error_type(pb::module_& m) {
  pb::dict ns;
  ns["__name__"] = "kinet";
  ns["__builtins__"] = pb::module_::import("builtins");
  pb::exec(kErrorSource, ns, ns);
  g_error = ns["Error"].ptr();
  Py_INCREF(g_error);
  m.attr("Error") = pb::handle(g_error);
  g_timedelta = pb::module_::import("datetime").attr("timedelta").ptr();
  Py_INCREF(g_timedelta);
  pb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raise_error(e);
    }
  });
}

void keep_cause(const pb::error_already_set& e) {
  PyObject* v = e.value().ptr();
  Py_XINCREF(v);
  Py_XDECREF(t_cause);
  t_cause = v;
}

pb::object take_cause() {
  PyObject* v = t_cause;
  t_cause = nullptr;
  return pb::reinterpret_steal<pb::object>(v);
}

void drop_cause() { take_cause(); }

std::chrono::milliseconds to_ms(pb::handle t, std::chrono::milliseconds fallback, const char* what) {
  if (t.is_none()) return fallback;
  double s;
  if (PyObject_IsInstance(t.ptr(), g_timedelta)) {
    s = t.attr("total_seconds")().cast<double>();
  } else if ((PyLong_Check(t.ptr()) && !PyBool_Check(t.ptr())) || PyFloat_Check(t.ptr())) {
    s = PyFloat_Check(t.ptr()) ? PyFloat_AsDouble(t.ptr()) : PyLong_AsDouble(t.ptr());
    if (s == -1.0 && PyErr_Occurred()) throw pb::error_already_set();  // OverflowError: an int beyond a double
  } else {
    throw pb::type_error(std::string(what) + ": a timeout is a datetime.timedelta or seconds (int or float), not " +
                         std::string(pb::str(pb::type::handle_of(t).attr("__name__"))));
  }
  if (std::isnan(s) || s < 0)
    throw Error(ErrorCode::InvalidArgument, std::string(what) + ": timeout of " + std::to_string(s) + " s");
  constexpr double kMax = 30.0 * 24 * 3600;  // as the C++ side: no deadline overflows
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(std::min(s, kMax) * 1000.0)));
}

pb::object to_timedelta(std::chrono::milliseconds ms) {
  return pb::reinterpret_borrow<pb::object>(g_timedelta)(pb::arg("milliseconds") = ms.count());
}

std::vector<uint8_t> to_bytes(pb::handle v, const char* what, bool allow_str) {
  if (allow_str && PyUnicode_Check(v.ptr())) {
    Py_ssize_t n = 0;
    const char* p = PyUnicode_AsUTF8AndSize(v.ptr(), &n);
    if (!p) throw pb::error_already_set();
    return {reinterpret_cast<const uint8_t*>(p), reinterpret_cast<const uint8_t*>(p) + n};
  }
  if (!PyObject_CheckBuffer(v.ptr()))
    throw pb::type_error(std::string(what) + ": expected a bytes-like object" + (allow_str ? " or str" : "") +
                         ", not " + std::string(pb::str(pb::type::handle_of(v).attr("__name__"))));
  Py_buffer view;
  if (PyObject_GetBuffer(v.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) throw pb::error_already_set();
  const auto* p = static_cast<const uint8_t*>(view.buf);
  std::vector<uint8_t> out(p, p + view.len);
  PyBuffer_Release(&view);
  return out;
}

pb::bytes as_bytes(const std::vector<uint8_t>& v) {
  return pb::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

pb::str to_str(const std::string& s, const std::string& what) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "strict");
  if (!o) {
    PyErr_Clear();
    throw Error(ErrorCode::InvalidArgument, what + " is not UTF-8: a Python store takes str keys");
  }
  return pb::reinterpret_steal<pb::str>(o);
}

}  // namespace kinet::py

PYBIND11_MODULE(kinet, m) {
  namespace kp = kinet::py;
  m.doc() = "kinet: GPU-initiated RDMA. The Python side of the control path: stores, the bootstrap and the "
            "communicator's path report (docs/PYTHON.md).";
  m.attr("__version__") = KINET_VERSION_STRING;
  kp::init_error_type(m);
  m.def("version", [] { return std::string(kinet::version()); },
        "The version of the kinet library in this module (\"MAJOR.MINOR.PATCH\").");
  m.def("env_table", &kp::env_table,
        "Every environment variable kinet reads (the table docs/ENVIRONMENT.md is made from): a list of dicts "
        "with name, default, meaning, reader, test_only and value (the current value, None when unset).");
  kp::bind_stores(m);
  kp::bind_bootstrap(m);
}
