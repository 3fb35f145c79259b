// Transport::open() and providers(): the registry of channel factories
// (registry.hpp) and the message engine on top of the chosen channel.
#include <mutex>
#include <utility>
#include <vector>

#include "core/env.hpp"
#include "core/log.hpp"
#include "transports/ipc_path.hpp"
#include "transports/link_channel.hpp"
#include "transports/loop_channel.hpp"
#include "transports/msg_engine.hpp"
#include "transports/registry.hpp"

namespace kinet {
namespace transport {
namespace {
struct Factories {
  std::mutex mu;
  std::vector<std::pair<const char*, ChannelFactory>> list;  // registration order
};

std::unique_ptr<Channel> make_loop(const TransportOptions&, uint64_t) { return make_loop_channel(); }

// The list with the built-in channels (what register_channel adds to).
Factories& base() {
  static Factories* f = [] {
    auto* f = new Factories;  // process lifetime
    f->list.emplace_back("loop", &make_loop);
    f->list.emplace_back("tcp", &make_tcp_channel);
    f->list.emplace_back("shm", &make_shm_channel);
    f->list.emplace_back("cuda_ipc", &make_cuda_ipc_channel);  // with MsgOptions::ipc, see open()
    return f;
  }();
  return *f;
}

// The list once the optional backends registered theirs.
Factories& factories() {
  static std::once_flag once;
  std::call_once(once, [] {
#if KINET_HAVE_UCX
    register_ucx_channel();
#endif
#if KINET_HAVE_OFI
    register_ofi_channel();
#endif
  });
  return base();
}

ChannelFactory find(const std::string& name) {
  Factories& f = factories();
  std::lock_guard lk(f.mu);
  for (auto& [n, fn] : f.list)
    if (name == n) return fn;
  return nullptr;
}
}  // namespace

void register_channel(const char* name, ChannelFactory fn) {
  Factories& f = base();
  std::lock_guard lk(f.mu);
  for (auto& [n, old] : f.list)
    if (std::string_view(n) == name) {
      old = fn;
      return;
    }
  f.list.emplace_back(name, fn);
}
}  // namespace transport

std::vector<std::string> Transport::providers() {
  std::vector<std::string> out;
  for (const char* n : {"ucx", "ofi", "tcp"})
    if (transport::find(n)) out.emplace_back(n);
  auto& f = transport::factories();
  std::lock_guard lk(f.mu);
  for (auto& [n, fn] : f.list) {
    std::string s(n);
    if (s != "ucx" && s != "ofi" && s != "tcp") out.push_back(s);
  }
  return out;
}

std::unique_ptr<Transport> Transport::open(const TransportOptions& opt) {
  std::string name = opt.provider.empty() ? env::get_str("KINET_TRANSPORT", "auto") : opt.provider;
  if (name.empty()) name = "auto";
  TransportOptions o = opt;
  if (o.timeout.count() <= 0) {
    std::string problem;
    const char* v = std::getenv("KINET_TRANSPORT_TIMEOUT_MS");
    o.timeout = std::chrono::milliseconds(env::parse_timeout_ms(v, &problem, "KINET_TRANSPORT_TIMEOUT_MS"));
    if (!problem.empty()) KINET_LOG(Warn, "%s", problem.c_str());
  }
  transport::MsgOptions mo;
  mo.name = o.name.empty() ? "transport" : o.name;
  mo.timeout = o.timeout;
  const uint64_t node = transport::random_node_id();
  auto make = [&](const std::string& n, transport::ChannelFactory f) -> std::unique_ptr<Transport> {
    transport::MsgOptions m = mo;
    if (n == "cuda_ipc") m.ipc = transport::cuda_ipc_memory();  // NotSupported without CUDA or a GPU
    return std::make_unique<transport::MsgTransport>(f(o, node), node, m);
  };
  if (name == "auto") {
    std::string why;
    for (const char* n : {"ucx", "ofi", "tcp"}) {
      transport::ChannelFactory f = transport::find(n);
      if (!f) continue;
      try {
        return make(n, f);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::NotSupported) throw;
        KINET_LOG(Info, "transport auto: %s can't start here: %s", n, e.what());
        why += std::string(why.empty() ? "" : "; ") + e.what();
      }
    }
    throw Error(ErrorCode::NotSupported, "transport auto: no provider starts here (" + why + ")");
  }
  transport::ChannelFactory f = transport::find(name);
  if (!f) {
    if (name == "ucx" || name == "ofi")
      throw Error(ErrorCode::NotSupported, "transport " + name + ": not built into this library");
    throw Error(ErrorCode::InvalidArgument, "transport: unknown provider \"" + name +
                                                "\" (ucx, ofi, tcp, shm, cuda_ipc, loop or auto)");
  }
  return make(name, f);
}

}  // namespace kinet
