#include "comm_report.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "kinet/bootstrap.hpp"
#include "kinet/comm.hpp"
#include "kinet/transport.hpp"

namespace kinet::info {
namespace {
using json = nlohmann::ordered_json;

bool write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t w = ::write(fd, s.data() + done, s.size() - done);
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

std::string read_all(int fd) {
  std::string s;
  char buf[4096];
  ssize_t k;
  while ((k = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(k));
  return s;
}

CommConfig config_of(const CommReportOptions& o) {
  CommConfig c;
  c.path = o.path;
  c.transport = o.transport;
  c.device = o.device;
  c.memory = o.memory == "host" ? CommConfig::Memory::Host
             : o.memory == "gpu" ? CommConfig::Memory::Gpu
                                 : CommConfig::Memory::Auto;
  return c;
}

// Rank r's Comm, built and torn down; rank 0 returns its report as JSON.
std::string report_of(int r, Bootstrap& bs, const CommReportOptions& o) {
  Comm comm(bs, config_of(o));
  std::string out;
  if (r == 0) {
    json peers = json::array();
    for (int p = 0; p < comm.size(); ++p)
      peers.push_back({{"peer", p},
                       {"path", dev::comm_path_name(uint32_t(comm.path(p)))},
                       {"reason", comm.path_reason(p)}});
    json lines = json::array();
    const std::string rep = comm.report();
    for (size_t at = 0; at < rep.size();) {
      const size_t nl = rep.find('\n', at);
      lines.push_back(rep.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
      at = nl == std::string::npos ? rep.size() : nl + 1;
    }
    out = json{{"gpu", comm.gpu()}, {"transport", comm.transport().describe()},
               {"peers", peers}, {"report", lines}}
              .dump();
  }
  comm.barrier();  // no rank tears down while a peer still sets up
  // The report is complete. Tearing Comms down at once makes some transports
  // (ucx) log "peer lost" for peers that are tearing down too: not what this
  // tool reports on, so the ranks' teardown is silenced.
  if (const int null = ::open("/dev/null", O_WRONLY); null >= 0) ::dup2(null, 2);
  return out;
}

// One rank's life in its forked process: returns what it reports (rank 0:
// the JSON of its Comm; others: "").
std::string run_rank(int r, const CommReportOptions& o, int id_read, int id_write) {
  std::string id;
  if (r == 0) {
    id = UniqueId::create().to_string();
    for (int k = 1; k < o.ranks; ++k)
      if (!write_all(id_write, id)) throw Error(ErrorCode::System, "kinet-info: handing the unique id to rank " + std::to_string(k) + " failed");
  } else {
    char buf[256];
    size_t got = 0;
    while (got < sizeof buf) {  // 256 bytes < PIPE_BUF: rank 0's writes are atomic
      const ssize_t k = ::read(id_read, buf + got, sizeof buf - got);
      if (k <= 0) throw Error(ErrorCode::System, "kinet-info: rank 0 ended before handing out the unique id");
      got += static_cast<size_t>(k);
    }
    id.assign(buf, sizeof buf);
  }
  auto bs = Bootstrap::init(UniqueId::from_string(id), r, o.ranks, o.timeout);
  std::string out = report_of(r, *bs, o);
  bs->barrier();  // every Comm is gone before any rank exits: no peer sees another vanish
  return out;
}
}  // namespace

json comm_report(const CommReportOptions& o) {
  if (o.ranks < 2 || o.ranks > 64)
    throw Error(ErrorCode::InvalidArgument, "--ranks " + std::to_string(o.ranks) + ": 2 to 64 local ranks");
  if (o.memory != "auto" && o.memory != "host" && o.memory != "gpu")
    throw Error(ErrorCode::InvalidArgument, "--memory " + o.memory + ": auto, host or gpu");
  int idp[2];
  if (pipe(idp) != 0) throw Error(ErrorCode::System, "kinet-info: pipe failed");
  std::vector<pid_t> pids;
  std::vector<int> outs;
  for (int r = 0; r < o.ranks; ++r) {
    int op[2];
    if (pipe(op) != 0) break;
    const pid_t pid = fork();
    if (pid < 0) {
      close(op[0]);
      close(op[1]);
      break;
    }
    if (pid == 0) {
      close(op[0]);
      int code = 0;
      std::string msg;
      try {
        msg = run_rank(r, o, idp[0], idp[1]);
      } catch (const std::exception& e) {
        msg = e.what();
        code = 3;
      }
      write_all(op[1], msg);
      _exit(code);
    }
    close(op[1]);
    pids.push_back(pid);
    outs.push_back(op[0]);
  }
  close(idp[0]);
  close(idp[1]);
  json failed = json::array();
  std::string rank0;
  const auto deadline = std::chrono::steady_clock::now() + o.timeout + std::chrono::seconds(30);
  for (size_t r = 0; r < pids.size(); ++r) {
    int st = 0;
    bool killed = false;
    for (;;) {
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) break;
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &st, 0);
        killed = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const std::string msg = read_all(outs[r]);
    close(outs[r]);
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (code == 0 && !killed) {
      if (r == 0) rank0 = msg;
      continue;
    }
    failed.push_back({{"rank", r},
                      {"exit", code},
                      {"message", killed ? "did not finish within the bound; killed" : msg}});
  }
  json out = {{"ranks", o.ranks},
              {"path", o.path},
              {"memory", o.memory},
              {"transport", o.transport.empty() ? json(nullptr) : json(o.transport)},
              {"device", o.device}};
  if (pids.size() != size_t(o.ranks)) {
    out["error"] = "could not fork " + std::to_string(o.ranks) + " ranks";
  } else if (!failed.empty()) {
    out["error"] = "a rank failed to build the communicator";
    out["ranks_failed"] = failed;
  } else {
    out["rank0"] = json::parse(rank0, nullptr, false);
    if (out["rank0"].is_discarded()) out["error"] = "rank 0 sent an unreadable report";
  }
  return out;
}

std::string comm_report_text(const json& r) {
  auto str = [](const json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); };
  std::string s = "Communicator between " + r["ranks"].dump() + " local processes (path " + str(r["path"]) +
                  ", memory " + str(r["memory"]) + ", transport " +
                  (r["transport"].is_null() ? "from KINET_TRANSPORT" : str(r["transport"])) + ")\n";
  if (r.contains("error")) {
    s += "  FAILED: " + str(r["error"]) + "\n";
    if (r.contains("ranks_failed"))
      for (const json& f : r["ranks_failed"])
        s += "  rank " + f["rank"].dump() + " (exit " + f["exit"].dump() + "): " + str(f["message"]) + "\n";
    return s;
  }
  const json& z = r["rank0"];
  s += std::string("  windows in ") + (z["gpu"].get<bool>() ? "GPU" : "host") + " memory; transport " +
       str(z["transport"]) + "; rank 0's paths:\n";
  for (const json& line : z["report"]) s += "  " + str(line) + "\n";
  return s;
}

}  // namespace kinet::info
