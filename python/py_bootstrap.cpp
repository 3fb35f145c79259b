// kinet Python module: kinet.Bootstrap (from a store or a unique id) and
// kinet.Comm (creation and its per-peer path report).
#include <pybind11/stl.h>

#include <memory>
#include <mutex>

#include "common.hpp"
#include "kinet/bootstrap.hpp"
#include "kinet/comm.hpp"
#include "kinet/transport.hpp"
#include "py_store.hpp"

namespace kinet::py {
namespace {
using namespace pybind11::literals;

// A Bootstrap shared by its Python object and the Comms made from it (a Comm
// needs its bootstrap alive). Its calls must not overlap (bootstrap.hpp):
// Python threads run them with the GIL released, so a call from a second
// thread while one runs is refused instead of corrupting the protocol.
struct PyBoot {
  std::unique_ptr<Bootstrap> bs;
  std::mutex busy;

  // Holds `busy` for one call; BadState when another thread holds it.
  class Call {
   public:
    Call(PyBoot& b, const char* what) : lock_(b.busy, std::try_to_lock) {
      if (!lock_.owns_lock())
        throw Error(ErrorCode::BadState, "bootstrap rank " + std::to_string(b.bs->rank()) + ": " + what +
                                             " called while another thread is in a call on this Bootstrap (or on "
                                             "a Comm made from it): its calls must not overlap");
    }

   private:
    std::unique_lock<std::mutex> lock_;
  };
};

struct PyComm {
  std::shared_ptr<PyBoot> boot;  // declared first: destroyed after the Comm
  std::unique_ptr<Comm> comm;
};

// from_store's store argument: a kinet.Store as it is, anything else adapted.
std::shared_ptr<Store> store_of(pb::object obj) {
  if (pb::isinstance<Store>(obj)) return obj.cast<std::shared_ptr<Store>>();
  return std::make_shared<PyStore>(std::move(obj));
}

std::shared_ptr<PyBoot> from_store(pb::object store, int rank, int world_size, const std::string& prefix,
                                   pb::handle timeout) {
  const auto t = to_ms(timeout, Bootstrap::default_timeout(), "Bootstrap.from_store");
  std::shared_ptr<Store> s = store_of(std::move(store));
  auto b = std::make_shared<PyBoot>();
  b->bs = released([&] { return Bootstrap::from_store(*s, rank, world_size, prefix, t); });
  return b;
}

std::shared_ptr<PyBoot> from_unique_id(const std::string& id, int rank, int nranks, pb::handle timeout) {
  const auto t = to_ms(timeout, Bootstrap::default_timeout(), "Bootstrap.init");
  const UniqueId uid = UniqueId::from_string(id);
  auto b = std::make_shared<PyBoot>();
  b->bs = released([&] { return Bootstrap::init(uid, rank, nranks, t); });
  return b;
}

pb::list allgather(PyBoot& b, pb::handle data) {
  const std::vector<uint8_t> mine = to_bytes(data, "Bootstrap.allgather");
  std::vector<std::vector<uint8_t>> all = released([&] {
    PyBoot::Call c(b, "allgather");
    return b.bs->allgather(mine.data(), mine.size());
  });
  pb::list out;
  for (const auto& v : all) out.append(as_bytes(v));
  return out;
}

pb::bytes broadcast(PyBoot& b, pb::handle data, int root) {
  const int n = b.bs->size();
  if (root < 0 || root >= n)
    throw Error(ErrorCode::InvalidArgument, "bootstrap rank " + std::to_string(b.bs->rank()) + ": broadcast root " +
                                                std::to_string(root) + " out of range (" + std::to_string(n) +
                                                " ranks)");
  const bool me = b.bs->rank() == root;
  if (me && data.is_none())
    throw pb::type_error("Bootstrap.broadcast: the root rank must pass the data (bytes-like)");
  const std::vector<uint8_t> mine = me ? to_bytes(data, "Bootstrap.broadcast") : std::vector<uint8_t>();
  std::vector<std::vector<uint8_t>> all = released([&] {
    PyBoot::Call c(b, "broadcast");
    return b.bs->allgather(mine.data(), mine.size());
  });
  return as_bytes(all[static_cast<size_t>(root)]);
}

std::string path_name(const Comm& c, int peer) { return dev::comm_path_name(uint32_t(c.path(peer))); }

std::unique_ptr<Comm> make_comm(const std::shared_ptr<PyBoot>& boot, const pb::object& path,
                                const pb::object& transport, const pb::object& device, const std::string& memory,
                                pb::handle timeout, uint32_t counters) {
  CommConfig cfg;
  if (!path.is_none()) cfg.path = path.cast<std::string>();
  if (!transport.is_none()) cfg.transport = transport.cast<std::string>();
  if (!device.is_none()) cfg.device = device.cast<std::string>();
  if (memory == "auto") cfg.memory = CommConfig::Memory::Auto;
  else if (memory == "host") cfg.memory = CommConfig::Memory::Host;
  else if (memory == "gpu") cfg.memory = CommConfig::Memory::Gpu;
  else
    throw Error(ErrorCode::InvalidArgument, "Comm: memory '" + memory + "' (auto, host or gpu)");
  cfg.timeout = to_ms(timeout, std::chrono::milliseconds(0), "Comm");
  cfg.counters = counters;
  return released([&] {
    PyBoot::Call c(*boot, "Comm()");
    return std::make_unique<Comm>(*boot->bs, cfg);
  });
}
}  // namespace

void bind_bootstrap(pb::module_& m) {
  m.def("create_unique_id", [] { return released([] { return UniqueId::create(); }).to_string(); },
        "Creates a unique id (256 hex digits) and starts its rendezvous in this process, which must live until "
        "every rank's Bootstrap.init returned. Ship the string to every rank.");

  pb::class_<PyBoot, std::shared_ptr<PyBoot>>(m, "Bootstrap", R"(Ranks of one job connected to each other
(kinet/bootstrap.hpp). Every call releases the GIL while it waits and is bounded by
`timeout`; calls must not overlap (a second thread gets kinet.Error(BadState)).)")
      .def_static("from_store", &from_store, "store"_a, "rank"_a, "world_size"_a, "prefix"_a = "kinet",
                  "timeout"_a = pb::none(),
                  R"(Collective. Rank 0 creates a unique id and sets it under store_key(prefix) in `store`; the
others get it; then every rank connects. `store`: a kinet.Store, or any object with
torch.distributed.Store's methods (a TCPStore, a process group's store, ...: see
StoreAdapter). `prefix` must be new for each job using the store. timeout: timedelta
or seconds, bounding the wait for the id and then the connection (None:
KINET_BOOTSTRAP_TIMEOUT_MS, 30 s).)")
      .def_static("init", &from_unique_id, "unique_id"_a, "rank"_a, "nranks"_a, "timeout"_a = pb::none(),
                  "Collective: connects rank `rank` of `nranks` through the rendezvous of a create_unique_id() "
                  "string.")
      .def_static("store_key", &Bootstrap::store_key, "prefix"_a, "The key from_store uses for `prefix`.")
      .def_static("default_timeout", [] { return to_timedelta(Bootstrap::default_timeout()); })
      .def_property_readonly("rank", [](const PyBoot& b) { return b.bs->rank(); })
      .def_property_readonly("nranks", [](const PyBoot& b) { return b.bs->size(); })
      .def_property_readonly("size", [](const PyBoot& b) { return b.bs->size(); })
      .def_property_readonly("timeout", [](const PyBoot& b) { return to_timedelta(b.bs->timeout()); })
      .def(
          "barrier",
          [](PyBoot& b) {
            released([&] {
              PyBoot::Call c(b, "barrier");
              b.bs->barrier();
            });
          },
          "Collective: returns once every rank has entered it.")
      .def("allgather", &allgather, "data"_a,
           "Collective: every rank's bytes (sizes may differ, empty allowed), a list indexed by rank.")
      .def("broadcast", &broadcast, "data"_a = pb::none(), "root"_a = 0,
           "Collective: the root's bytes on every rank (the others' data is ignored; None allowed).")
      .def(
          "send",
          [](PyBoot& b, int peer, uint32_t tag, pb::handle data) {
            const std::vector<uint8_t> v = to_bytes(data, "Bootstrap.send");
            released([&] {
              PyBoot::Call c(b, "send");
              b.bs->send(peer, tag, v);
            });
          },
          "peer"_a, "tag"_a, "data"_a,
          "Sends bytes to `peer` (returns once handed to the kernel). Blobs with one tag arrive in order.")
      .def(
          "recv",
          [](PyBoot& b, int peer, uint32_t tag) {
            return as_bytes(released([&] {
              PyBoot::Call c(b, "recv");
              return b.bs->recv(peer, tag);
            }));
          },
          "peer"_a, "tag"_a, "The next bytes `peer` sent with `tag`, waiting at most `timeout`.")
      .def("__repr__", [](const PyBoot& b) {
        return "<kinet.Bootstrap rank " + std::to_string(b.bs->rank()) + "/" + std::to_string(b.bs->size()) + ">";
      });

  pb::class_<PyComm, std::shared_ptr<PyComm>>(m, "Comm", R"(The communicator (kinet/comm.hpp) on a Bootstrap:
collective creation, and which path each peer got and why. Kernels use it from
C++/CUDA; from Python it is the control path and its report. Without a GPU the
windows live in host memory and peers get the proxy path (or gdaki on the
software NIC with device="emu", path="gdaki").)")
      .def(pb::init([](std::shared_ptr<PyBoot> boot, pb::object path, pb::object transport, pb::object device,
                       const std::string& memory, pb::handle timeout, uint32_t counters) {
             auto c = std::make_shared<PyComm>();
             c->comm = make_comm(boot, path, transport, device, memory, timeout, counters);
             c->boot = std::move(boot);
             return c;
           }),
           "bootstrap"_a, "path"_a = pb::none(), "transport"_a = pb::none(), "device"_a = pb::none(),
           "memory"_a = "auto", "timeout"_a = pb::none(), "counters"_a = 0,
           R"(Collective over every rank of `bootstrap`. path: "auto", "proxy", "p2p", "gdaki" (None:
KINET_COMM_PATH); transport: the proxy's (None: KINET_TRANSPORT); device: the gdaki
path's NIC (None: "auto"; "emu": the software NIC); memory: "auto", "host" or "gpu";
timeout: bound of device-side waits (None: KINET_TIMEOUT_MS).)")
      .def_property_readonly("rank", [](const PyComm& c) { return c.comm->rank(); })
      .def_property_readonly("size", [](const PyComm& c) { return c.comm->size(); })
      .def_property_readonly("gpu", [](const PyComm& c) { return c.comm->gpu(); },
                             "Whether windows live in GPU memory (kernels post).")
      .def_property_readonly("transport", [](const PyComm& c) { return c.comm->transport().describe(); })
      .def("path", [](const PyComm& c, int peer) { return path_name(*c.comm, peer); }, "peer"_a,
           "The path to `peer`: self, p2p, proxy or gdaki.")
      .def("path_reason", [](const PyComm& c, int peer) { return c.comm->path_reason(peer); }, "peer"_a)
      .def(
          "paths",
          [](const PyComm& c) {
            pb::list out;
            for (int p = 0; p < c.comm->size(); ++p)
              out.append(pb::dict("peer"_a = p, "path"_a = path_name(*c.comm, p),
                                  "reason"_a = c.comm->path_reason(p)));
            return out;
          },
          "Per peer: a dict with peer, path and reason.")
      .def("describe_paths", [](const PyComm& c) { return c.comm->report(); },
           "One line per peer, as kinet-info --comm prints it: \"rank 0 -> rank 1: proxy ...: <reason>\".")
      .def("report", [](const PyComm& c) { return c.comm->report(); }, "The same as describe_paths().")
      .def(
          "barrier",
          [](PyComm& c) {
            released([&] {
              PyBoot::Call call(*c.boot, "Comm.barrier");
              c.comm->barrier();
            });
          },
          "Collective control-path barrier; call it before dropping the Comm.")
      .def("device_error", [](const PyComm& c) { return c.comm->device_error(); },
           "This rank's first device-side failure, spelled out; empty while there is none.")
      .def("peer_error", [](const PyComm& c, int peer) { return c.comm->peer_error(peer); }, "peer"_a,
           "Why `peer` failed (\"peer lost: ...\"); empty while it is healthy.")
      .def("__repr__", [](const PyComm& c) {
        return "<kinet.Comm rank " + std::to_string(c.comm->rank()) + "/" + std::to_string(c.comm->size()) + ">";
      });
}

}  // namespace kinet::py
