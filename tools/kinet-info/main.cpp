// kinet-info — what kinet can run on this machine, and why not.
//
// CUDA and libibverbs are probed with dlopen at run time, so this binary has
// no link dependency on either and runs everywhere kinet builds. The report is
// gathered once as JSON; text output is rendered from it.
#include <dlfcn.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/env.hpp"
#include "comm_report.hpp"
#include "core/provider.hpp"
#include "diagnose.hpp"
#include "dl.hpp"
#include "kinet/kinet.hpp"

#ifndef KINET_INFO_VERSION
#define KINET_INFO_VERSION "unknown"
#endif

extern char** environ;

namespace {
using json = nlohmann::ordered_json;

using kinet::info::open_first;
using kinet::info::sym;

std::string version_str(int v) {  // CUDA encodes 1000*major + 10*minor
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// ---- providers (from the registry: kinet-info knows none by name) --------
json probe_providers() {
  json out = json::array();
  for (const kinet::provider::Provider& p : kinet::provider::all()) {
    json j = {{"name", p.name}, {"description", p.description}};
    if (!p.probe_device) {
      j["available"] = nullptr;
      j["detail"] = "no device to probe without hardware";
    } else {
      try {
        auto dev = kinet::Device::open(p.probe_device);
        const kinet::DeviceAttr& a = dev->attr();
        j["available"] = true;
        j["detail"] = {{"device", a.name}, {"max_qp_wr", a.max_qp_wr}, {"max_msg", a.max_msg},
                       {"gpu_memory", a.gpu_memory}};
      } catch (const std::exception& e) {
        j["available"] = false;
        j["detail"] = e.what();
      }
    }
    out.push_back(j);
  }
  return out;
}

// ---- GPU ----------------------------------------------------------------
json probe_cuda() {
  json out = {{"runtime", nullptr}, {"gpus", json::array()}, {"problem", nullptr}};
  std::string lib_name;
  void* rt = open_first({"libcudart.so.13", "libcudart.so.12", "libcudart.so"}, &lib_name);
  if (!rt) {
    out["problem"] = std::string("no CUDA runtime: libcudart.so.13/.12/.so not found (") + dlerror() + ")";
    return out;
  }
  using IntFn = int (*)(int*);
  using ErrStrFn = const char* (*)(int);
  using AttrFn = int (*)(int*, int, int);
  using BusIdFn = int (*)(char*, int, int);
  auto runtime_version = sym<IntFn>(rt, "cudaRuntimeGetVersion");
  auto driver_version = sym<IntFn>(rt, "cudaDriverGetVersion");
  auto device_count = sym<IntFn>(rt, "cudaGetDeviceCount");
  auto error_string = sym<ErrStrFn>(rt, "cudaGetErrorString");
  auto attribute = sym<AttrFn>(rt, "cudaDeviceGetAttribute");
  auto bus_id = sym<BusIdFn>(rt, "cudaDeviceGetPCIBusId");
  if (!device_count || !error_string) {
    out["problem"] = lib_name + " loaded but cudaGetDeviceCount/cudaGetErrorString missing";
    return out;
  }
  int rv = 0, dv = 0;
  if (runtime_version) runtime_version(&rv);
  if (driver_version) driver_version(&dv);
  out["runtime"] = {{"library", lib_name},
                    {"version", rv ? version_str(rv) : "?"},
                    {"driver", dv ? version_str(dv) : "none (no NVIDIA driver)"}};
  int n = 0;
  const int err = device_count(&n);
  if (err != 0) {
    out["problem"] = std::string("no usable GPU: cudaGetDeviceCount: ") + error_string(err) + " (error " +
                     std::to_string(err) + ")";
    return out;
  }
  // Names come from the driver API (stable across CUDA versions).
  std::string drv_name;
  void* drv = open_first({"libcuda.so.1", "libcuda.so"}, &drv_name);
  using CuInitFn = int (*)(unsigned);
  using CuNameFn = int (*)(char*, int, int);
  using CuMemFn = int (*)(size_t*, int);
  auto cu_init = drv ? sym<CuInitFn>(drv, "cuInit") : nullptr;
  auto cu_name = drv ? sym<CuNameFn>(drv, "cuDeviceGetName") : nullptr;
  auto cu_mem = drv ? sym<CuMemFn>(drv, "cuDeviceTotalMem_v2") : nullptr;
  const bool cu_ok = cu_init && cu_init(0) == 0;
  for (int d = 0; d < n; ++d) {
    char name[256] = "?";
    if (cu_ok && cu_name) cu_name(name, sizeof name, d);
    int major = 0, minor = 0;
    if (attribute) {
      attribute(&major, 75, d);  // cudaDevAttrComputeCapabilityMajor
      attribute(&minor, 76, d);  // cudaDevAttrComputeCapabilityMinor
    }
    char bus[32] = "?";
    if (bus_id) bus_id(bus, sizeof bus, d);
    size_t mem = 0;
    if (cu_ok && cu_mem) cu_mem(&mem, d);
    out["gpus"].push_back({{"index", d}, {"name", name}, {"sm", major * 10 + minor}, {"memory_bytes", mem},
                           {"pci", bus}});
  }
  return out;
}

// ---- RDMA ---------------------------------------------------------------
json probe_rdma() {
  json out = {{"library", nullptr}, {"devices", json::array()}, {"problem", nullptr}};
  std::string lib_name;
  void* ib = open_first({"libibverbs.so.1", "libibverbs.so"}, &lib_name);
  if (!ib) {
    out["problem"] = std::string("no libibverbs: ") + dlerror() + " (install rdma-core / ibverbs-providers)";
    return out;
  }
  out["library"] = lib_name;
  using ListFn = void** (*)(int*);
  using FreeFn = void (*)(void**);
  using NameFn = const char* (*)(void*);
  auto get_list = sym<ListFn>(ib, "ibv_get_device_list");
  auto free_list = sym<FreeFn>(ib, "ibv_free_device_list");
  auto get_name = sym<NameFn>(ib, "ibv_get_device_name");
  if (!get_list || !get_name) {
    out["problem"] = lib_name + " loaded but ibv_get_device_list/ibv_get_device_name missing";
    return out;
  }
  int n = 0;
  void** list = get_list(&n);
  if (!list) {
    const int e = errno;
    out["problem"] = std::string("no RDMA devices: ibv_get_device_list: ") + std::strerror(e) +
                     (e == ENOSYS ? " (no RDMA support in this kernel or container)" : "");
    return out;
  }
  if (n == 0) out["problem"] = "no RDMA devices (no NIC, or /dev/infiniband not visible here)";
  for (int i = 0; i < n; ++i) {
    const char* name = get_name(list[i]);
    json d = {{"name", name ? name : "?"}};
    try {
      auto dev = kinet::Device::open(name ? name : "");
      d["usable"] = true;
      d["detail"] = "provider " + dev->attr().provider;
    } catch (const std::exception& e) {
      d["usable"] = false;
      d["detail"] = e.what();
    }
    out["devices"].push_back(d);
  }
  if (free_list) free_list(list);
  return out;
}

// ---- environment ----------------------------------------------------------
json probe_env() {
  json vars = json::array();
  for (const kinet::env::Variable& v : kinet::env::variables()) {
    const char* val = std::getenv(v.name);
    vars.push_back({{"name", v.name},
                    {"value", val ? json(val) : json(nullptr)},
                    {"default", v.default_value},
                    {"read_by", v.reader},
                    {"test_only", v.test_only},
                    {"meaning", v.meaning}});
  }
  json unknown = json::array();
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "KINET_", 6) != 0) continue;
    std::string name(*e, std::strcspn(*e, "="));
    bool known = false;
    for (const kinet::env::Variable& v : kinet::env::variables()) known |= name == v.name;
    if (!known) unknown.push_back(name);
  }
  return {{"variables", vars}, {"timeout_ms_now", kinet::default_timeout_ms()}, {"set_but_unknown", unknown}};
}

// ---- text rendering ----------------------------------------------------------
std::string str(const json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

void print_env(const json& env) {
  std::printf("Environment (library, providers, tools; then test suite only)\n");
  for (bool test_only : {false, true})
    for (const json& v : env["variables"]) {
      if (v["test_only"].get<bool>() != test_only) continue;
      std::printf("  %-18s = %-10s default %-7s read by %s%s\n    %s\n", str(v["name"]).c_str(),
                  v["value"].is_null() ? "(unset)" : str(v["value"]).c_str(), str(v["default"]).c_str(),
                  str(v["read_by"]).c_str(), test_only ? " (tests only)" : "", str(v["meaning"]).c_str());
    }
  std::printf("  (bound of waits now: %s ms)\n", env["timeout_ms_now"].dump().c_str());
  for (const json& n : env["set_but_unknown"])
    std::printf("  %s is set but not read by this version\n", str(n).c_str());
}

void print_report(const json& r) {
  std::printf("kinet %s\nProviders\n", str(r["version"]).c_str());
  for (const json& p : r["providers"]) {
    std::printf("  %-6s %s\n", str(p["name"]).c_str(), str(p["description"]).c_str());
    if (p["available"].is_null())
      std::printf("         %s\n", str(p["detail"]).c_str());
    else if (!p["available"].get<bool>())
      std::printf("         NOT available: %s\n", str(p["detail"]).c_str());
    else {
      const json& d = p["detail"];
      std::printf("         available: %s (max_qp_wr %s, max_msg %s, GPU memory %s)\n", str(d["device"]).c_str(),
                  d["max_qp_wr"].dump().c_str(), d["max_msg"].dump().c_str(),
                  d["gpu_memory"].get<bool>() ? "yes" : "no");
    }
  }
  const json& c = r["cuda"];
  std::printf("GPU (CUDA runtime via dlopen)\n");
  if (!c["runtime"].is_null())
    std::printf("  %s: runtime %s, driver %s\n", str(c["runtime"]["library"]).c_str(),
                str(c["runtime"]["version"]).c_str(), str(c["runtime"]["driver"]).c_str());
  if (!c["problem"].is_null()) std::printf("  %s\n", str(c["problem"]).c_str());
  for (const json& g : c["gpus"])
    std::printf("  GPU %s: %s, sm_%s, %.0f GiB, PCI %s\n", g["index"].dump().c_str(), str(g["name"]).c_str(),
                g["sm"].dump().c_str(), g["memory_bytes"].get<double>() / double(1ull << 30), str(g["pci"]).c_str());
  const json& ib = r["rdma"];
  std::printf("RDMA (libibverbs via dlopen)\n");
  if (!ib["problem"].is_null())
    std::printf("  %s%s\n", ib["library"].is_null() ? "" : (str(ib["library"]) + ": ").c_str(),
                str(ib["problem"]).c_str());
  for (const json& d : ib["devices"])
    std::printf("  %s: %s%s\n", str(d["name"]).c_str(), d["usable"].get<bool>() ? "usable by kinet, " : "not usable by kinet: ",
                str(d["detail"]).c_str());
  print_env(r["environment"]);
  const json& can = r["can_run"];
  std::printf("Can run here\n");
  std::printf("  host threads on the software NIC (emu): %s\n", str(can["host_on_emu"]).c_str());
  std::printf("  GPU kernels on the software NIC:        %s\n", str(can["gpu_on_emu"]).c_str());
  std::printf("  GPU kernels on an RDMA NIC (GDAKI):     %s\n", str(can["gpu_on_nic"]).c_str());
}

json can_run(const json& providers, size_t gpus, size_t nics) {
  bool emu = false;
  for (const json& p : providers) emu |= p["name"] == "emu" && p["available"] == true;
  return {{"host_on_emu", emu ? "yes" : "no"},
          {"gpu_on_emu", !emu ? "no (emu missing)" : gpus > 0 ? "yes (GPU present)" : "no (no usable GPU)"},
          {"gpu_on_nic", gpus > 0 && nics > 0 ? "maybe: see the RDMA devices above"
                         : gpus > 0           ? "no (no RDMA device)"
                         : nics > 0           ? "no (no usable GPU)"
                                              : "no (no GPU, no RDMA device)"}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Prints the kinet version, its providers, the GPUs and RDMA devices found here (CUDA and\n"
               "libibverbs are loaded with dlopen), the environment variables kinet reads, and whether GDAKI\n"
               "can run on each GPU-NIC pair (if not: why, and how to fix it).",
               "kinet-info"};
  bool as_json = false, env_only = false, markdown = false;
  app.add_flag("--json", as_json, "the whole report (or, with --env, the variables) as JSON on stdout");
  app.add_flag("--env", env_only, "only the environment variables kinet reads, their values and defaults");
  app.add_flag("--markdown", markdown, "with --env: docs/ENVIRONMENT.md's text")->needs("--env")->excludes("--json");
  bool comm = false;
  kinet::info::CommReportOptions co;
  std::string path_opt = co.path;
  auto* comm_flag = app.add_flag("--comm", comm,
                                 "fork local ranks joined by a bootstrap, build a kinet::Comm and print rank 0's path "
                                 "to each peer and why (exit 1 when a rank fails)");
  app.add_option("--ranks", co.ranks, "with --comm: local ranks (2..64)")->needs(comm_flag)->capture_default_str();
  app.add_option("--path", path_opt, "with --comm: the Comm's path (CommConfig::path)")
      ->needs(comm_flag)
      ->check(CLI::IsMember({"auto", "p2p", "proxy", "gdaki"}))
      ->capture_default_str();
  app.add_option("--transport", co.transport, "with --comm: the proxy's transport (default: KINET_TRANSPORT)")
      ->needs(comm_flag);
  app.add_option("--device", co.device, "with --comm: the gdaki path's NIC (\"emu\": the software NIC)")
      ->needs(comm_flag)
      ->capture_default_str();
  app.add_option("--memory", co.memory, "with --comm: where windows live")
      ->needs(comm_flag)
      ->check(CLI::IsMember({"auto", "host", "gpu"}))
      ->capture_default_str();
  comm_flag->excludes("--env");
  app.set_version_flag("--version", KINET_INFO_VERSION);
  CLI11_PARSE(app, argc, argv);
  try {
    if (comm) {  // first: it forks, and no thread may exist yet
      co.path = path_opt;
      const auto r = kinet::info::comm_report(co);
      if (as_json) std::printf("%s\n", r.dump(2).c_str());
      else std::fputs(kinet::info::comm_report_text(r).c_str(), stdout);
      return r.contains("error") ? 1 : 0;
    }
    if (env_only) {
      if (markdown) std::fputs(kinet::env::markdown().c_str(), stdout);
      else if (as_json) std::printf("%s\n", probe_env().dump(2).c_str());
      else print_env(probe_env());
      return 0;
    }
    json r = {{"version", KINET_INFO_VERSION}, {"providers", probe_providers()}, {"cuda", probe_cuda()},
              {"rdma", probe_rdma()}, {"environment", probe_env()}};
    r["can_run"] = can_run(r["providers"], r["cuda"]["gpus"].size(), r["rdma"]["devices"].size());
    // GDAKI per GPU-NIC pair: facts, then the pure decision (diagnose.hpp).
    const kinet::info::Facts facts = kinet::info::collect_facts();
    const kinet::info::Diagnosis diag = kinet::info::diagnose(facts);
    r["gdaki"] = kinet::info::to_json(facts, diag);
    if (as_json) {
      std::printf("%s\n", r.dump(2).c_str());
    } else {
      print_report(r);
      std::fputs(kinet::info::to_text(facts, diag).c_str(), stdout);
    }
    return 0;  // a machine without a GPU or NIC is a valid answer, not a failure
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kinet-info: %s\n", e.what());
    return 1;
  }
}
