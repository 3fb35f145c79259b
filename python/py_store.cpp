// kinet Python module: the Store adapter (py_store.hpp) and the bindings of
// kinet.Store, FileStore, MemoryStore and StoreAdapter.
#include "py_store.hpp"

#include <pybind11/stl.h>

#include "kinet/bootstrap.hpp"

namespace kinet::py {
namespace {
using Clock = std::chrono::steady_clock;
using namespace pybind11::literals;

std::string quoted(const std::vector<std::string>& keys) {
  std::string s;
  for (const std::string& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

std::string type_name(pb::handle o) { return pb::str(pb::type::handle_of(o).attr("__name__")); }

// "RuntimeError: disk full"
std::string exception_text(const pb::error_already_set& e) {
  std::string msg;
  try {
    msg = pb::str(e.value());
  } catch (const pb::error_already_set&) {
    msg = "(its str() failed)";
  }
  return type_name(e.value()) + (msg.empty() ? "" : ": " + msg);
}

bool is_timeout(const pb::error_already_set& e) {
  return PyObject_IsInstance(e.value().ptr(), PyExc_TimeoutError) == 1 || type_name(e.value()) == "DistStoreError";
}

// Whether fn accepts (keys, timeout): torch's pybind11 methods have no
// signature inspect can read, and they do (wait's second overload).
bool takes_timeout(pb::handle fn) {
  pb::object sig;
  try {
    sig = pb::module_::import("inspect").attr("signature")(fn);
  } catch (const pb::error_already_set&) {
    return true;
  }
  try {
    sig.attr("bind")(pb::list(), to_timedelta(std::chrono::milliseconds(1)));
    return true;
  } catch (const pb::error_already_set&) {
    return false;
  }
}

bool has_method(pb::handle o, const char* name) {
  return pb::hasattr(o, name) && PyCallable_Check(o.attr(name).ptr());
}
}  // namespace

PyStore::PyStore(pb::object obj) : obj_(std::move(obj)) {
  std::string r;
  try {
    r = pb::repr(obj_);
  } catch (const pb::error_already_set&) {
    r = "<" + type_name(obj_) + " object>";
  }
  if (r.size() > 160) r = r.substr(0, 157) + "...";
  describe_ = "Python store " + r;
  for (const char* m : {"set", "get", "check"})
    if (!has_method(obj_, m))
      throw Error(ErrorCode::InvalidArgument, "StoreAdapter: " + describe_ + " has no method " + m +
                                                  "(): a store needs set, get and check, and should have wait and "
                                                  "delete_key (the methods of torch.distributed.Store)");
  has_wait_ = has_method(obj_, "wait");
  wait_takes_timeout_ = has_wait_ && takes_timeout(obj_.attr("wait"));
  has_delete_ = has_method(obj_, "delete_key");
}

PyStore::~PyStore() {
  pb::gil_scoped_acquire gil;
  obj_ = pb::object();
}

void PyStore::fail(const pb::error_already_set& e, const std::string& call) const {
  ErrorCode code = ErrorCode::System;
  if (PyObject_IsInstance(e.value().ptr(), error_type().ptr()) == 1 && pb::hasattr(e.value(), "code")) {
    ErrorCode c;
    if (code_from_name(pb::str(e.value().attr("code")), &c)) code = c;
  }
  keep_cause(e);
  throw Error(code, describe_ + ": " + call + " raised " + exception_text(e));
}

pb::list PyStore::key_list(const std::vector<std::string>& keys) const {
  pb::list l;
  for (const std::string& k : keys) l.append(to_str(k, "store: key '" + k + "'"));
  return l;
}

void PyStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  check_key(key);
  pb::gil_scoped_acquire gil;
  pb::str k = to_str(key, "store: key");
  try {
    obj_.attr("set")(k, as_bytes(value));
  } catch (const pb::error_already_set& e) {
    fail(e, "set('" + key + "', " + std::to_string(value.size()) + " bytes)");
  }
}

std::vector<uint8_t> PyStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  check_key(key);
  wait({key}, timeout);
  pb::gil_scoped_acquire gil;
  const std::string call = "get('" + key + "')";
  pb::object v;
  try {
    v = obj_.attr("get")(to_str(key, "store: key"));
  } catch (const pb::error_already_set& e) {
    fail(e, call);
  }
  if (!PyUnicode_Check(v.ptr()) && !PyObject_CheckBuffer(v.ptr()))
    throw Error(ErrorCode::System, describe_ + ": " + call + " returned " + type_name(v) + ", not bytes");
  try {
    return to_bytes(v, "store get", true);
  } catch (const pb::error_already_set& e) {
    fail(e, call + "'s value as bytes:");
  }
}

bool PyStore::check(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) check_key(k);
  pb::gil_scoped_acquire gil;
  const std::string call = "check([" + quoted(keys) + "])";
  if (PyErr_CheckSignals() != 0) fail(pb::error_already_set(), "waiting in " + call);  // Ctrl-C
  pb::object r;
  try {
    r = obj_.attr("check")(key_list(keys));
  } catch (const pb::error_already_set& e) {
    fail(e, call);
  }
  if (!PyBool_Check(r.ptr()) && !PyLong_Check(r.ptr()))
    throw Error(ErrorCode::System, describe_ + ": " + call + " returned " + type_name(r) + ", not bool");
  return PyObject_IsTrue(r.ptr()) == 1;
}

void PyStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  for (const std::string& k : keys) check_key(k);
  if (keys.empty()) return;
  if (!wait_takes_timeout_ || timeout.count() <= 0) {
    Store::wait(keys, timeout);  // polls check(); a zero bound checks once
    return;
  }
  const std::string call = "wait([" + quoted(keys) + "], " + std::to_string(timeout.count()) + " ms)";
  const auto start = Clock::now();
  pb::gil_scoped_acquire gil;
  try {
    obj_.attr("wait")(key_list(keys), to_timedelta(timeout));
    return;
  } catch (const pb::error_already_set& e) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (!is_timeout(e) && waited + std::chrono::milliseconds(2) < timeout) fail(e, call);
    // Which keys are still missing: the contract names them.
    std::vector<std::string> missing;
    try {
      for (const std::string& k : keys)
        if (!PyObject_IsTrue(obj_.attr("check")(key_list({k})).ptr())) missing.push_back(k);
    } catch (const pb::error_already_set&) {
      missing = keys;
    }
    if (missing.empty()) missing = keys;
    keep_cause(e);
    throw Error(ErrorCode::System, "store: timeout after " + std::to_string(timeout.count()) +
                                       " ms waiting for keys " + quoted(missing) + " in " + describe_ + " (its " +
                                       call + " raised " + exception_text(e) + ")");
  }
}

bool PyStore::erase(const std::string& key) {
  check_key(key);
  if (!has_delete_)
    throw Error(ErrorCode::NotSupported, describe_ + " has no delete_key(): key '" + key + "' stays set");
  pb::gil_scoped_acquire gil;
  const std::string call = "delete_key('" + key + "')";
  pb::object r;
  try {
    r = obj_.attr("delete_key")(to_str(key, "store: key"));
  } catch (const pb::error_already_set& e) {
    fail(e, call);
  }
  if (r.is_none()) return true;
  if (!PyBool_Check(r.ptr()) && !PyLong_Check(r.ptr()))
    throw Error(ErrorCode::System, describe_ + ": " + call + " returned " + type_name(r) + ", not bool");
  return PyObject_IsTrue(r.ptr()) == 1;
}

void bind_stores(pb::module_& m) {
  pb::class_<Store, std::shared_ptr<Store>>(m, "Store", R"(A key-value store the ranks of one job share
(kinet/store.hpp), with torch.distributed.Store's method names. Keys: str of 1 to
1024 bytes, no NUL. Values: bytes (set also takes a bytes-like object or str).
Every call releases the GIL while it waits.)")
      .def(
          "set",
          [](Store& s, const std::string& key, pb::handle value) {
            std::vector<uint8_t> v = to_bytes(value, "Store.set value", true);
            released([&] { s.set(key, v); });
          },
          "key"_a, "value"_a, "Sets key to value, replacing an earlier value.")
      .def(
          "get",
          [](Store& s, const std::string& key, pb::handle timeout) {
            const auto t = to_ms(timeout, Bootstrap::default_timeout(), "Store.get");
            return as_bytes(released([&] { return s.get(key, t); }));
          },
          "key"_a, "timeout"_a = pb::none(),
          "The value of key, waiting until it is set, at most timeout (timedelta or seconds; None: "
          "KINET_BOOTSTRAP_TIMEOUT_MS). kinet.Error(System) naming the key on timeout.")
      .def(
          "check", [](Store& s, const std::vector<std::string>& keys) { return released([&] { return s.check(keys); }); },
          "keys"_a, "Whether every key is set now (does not wait).")
      .def(
          "wait",
          [](Store& s, const std::vector<std::string>& keys, pb::handle timeout) {
            const auto t = to_ms(timeout, Bootstrap::default_timeout(), "Store.wait");
            released([&] { s.wait(keys, t); });
          },
          "keys"_a, "timeout"_a = pb::none(),
          "Returns once every key is set, at most timeout (None: KINET_BOOTSTRAP_TIMEOUT_MS); the timeout error "
          "names the keys still missing.")
      .def(
          "delete_key", [](Store& s, const std::string& key) { return released([&] { return s.erase(key); }); },
          "key"_a, "Removes key; False when it was not set.")
      .def("describe", &Store::describe)
      .def("__repr__", [](const Store& s) { return "<kinet." + s.describe() + ">"; });

  pb::class_<FileStore, Store, std::shared_ptr<FileStore>>(
      m, "FileStore", "One file per key in a directory every rank sees (created when missing).")
      .def(pb::init<std::string>(), "path"_a)
      .def_property_readonly("path", &FileStore::dir);
  pb::class_<MemoryStore, Store, std::shared_ptr<MemoryStore>>(
      m, "MemoryStore", "A store in this process's memory: threads as ranks.")
      .def(pb::init<>());
  pb::class_<PyStore, Store, std::shared_ptr<PyStore>>(m, "StoreAdapter", R"(A kinet.Store over a Python object with
torch.distributed.Store's methods (set, get, check; wait and delete_key if it has
them): what Bootstrap.from_store wraps any such object in. docs/PYTHON.md says
what each call becomes.)")
      .def(pb::init<pb::object>(), "store"_a)
      .def_property_readonly("object", &PyStore::object, "The wrapped object.")
      .def_property_readonly("waits_with_timeout", &PyStore::waits_with_timeout,
                             "Whether waits go to the object's wait(keys, timeout) (else check() is polled).");
}

}  // namespace kinet::py
