// kinet-info --comm: which path kinet::Comm gives each peer between processes
// of this host, and why. Forks local ranks joined by a Bootstrap, builds a
// Comm in each and reports rank 0's choice per peer (Comm::path,
// Comm::path_reason, Comm::report).
#pragma once
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace kinet::info {

struct CommReportOptions {
  int ranks = 2;              // 2..64 local processes
  std::string path = "auto";  // CommConfig::path: auto, p2p, proxy, gdaki
  std::string transport;      // CommConfig::transport; empty: KINET_TRANSPORT
  std::string device = "auto";  // CommConfig::device (the gdaki path's NIC)
  std::string memory = "auto";  // auto, host, gpu (CommConfig::memory)
  std::chrono::milliseconds timeout{30000};  // the bootstrap's bound; each rank gets it plus 30 s to finish
};

// Must be called before this process starts any thread (it forks). Never
// throws for what the ranks report: {"ranks", "path", "memory", "rank0":
// {"gpu", "peers": [{"peer", "path", "reason"}], "report": [lines]}} on
// success; {"error": "...", "ranks_failed": [{"rank", "exit", "message"}]}
// when a rank failed (the Comm constructor's error, e.g. path p2p impossible).
// Throws InvalidArgument for options out of range.
nlohmann::ordered_json comm_report(const CommReportOptions& o);
std::string comm_report_text(const nlohmann::ordered_json& r);

}  // namespace kinet::info
