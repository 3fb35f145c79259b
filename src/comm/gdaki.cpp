// kinet — the communicator's gdaki path, host side (see gdaki.hpp).
#include "comm/gdaki.hpp"

#include <cstring>

#include "comm/collective.hpp"
#include "core/cuda_shim.hpp"
#include "core/env.hpp"

namespace kinet::comm_gdaki {

std::unique_ptr<Device> open_nic(const std::string& mode, const CommConfig& cfg, std::string* text) {
  text->clear();
  if (mode != "gdaki" && mode != "auto") return nullptr;
  const std::string name = cfg.device.empty() ? "auto" : cfg.device;
  const bool only_hw = mode == "auto" && name == "auto";
  DeviceOptions o;
  o.emu_fabric = cfg.emu_fabric;
  using F = DeviceOptions::Fabric;
  // The software NIC reaches other processes only on a fabric: unless
  // KINET_EMU_FABRIC says otherwise, both (shm on this host, else tcp).
  if (o.emu_fabric == F::FromEnv && env::get_str("KINET_EMU_FABRIC", "").empty()) o.emu_fabric = F::Auto;
  if (only_hw) o.emu_fabric = F::Local;  // a software NIC opened here is dropped
  try {
    auto d = Device::open(name, o);
    const bool hw = d->attr().provider == "mlx5" && d->name().rfind("mlx5_emu", 0) != 0;
    if (only_hw && !hw) {
      *text = "no RDMA NIC here (device \"auto\" is the software NIC " + d->name() +
              ", which the Comm takes only when asked: CommConfig::device or path gdaki)";
      return nullptr;
    }
    *text = d->name() + " (" + d->attr().provider + ")";
    return d;
  } catch (const Error& e) {
    *text = "device \"" + name + "\" did not open: " + e.what();
    return nullptr;
  }
}

Peers::~Peers() {
  qps.clear();
  scratch_mr.reset();
  if (scratch_on_gpu) cuda::free_device(scratch);
  else cuda::free_pinned(scratch);
  pd.reset();
  device.reset();
}

void Peers::connect(Bootstrap& bs, const std::vector<uint32_t>& path, const CommConfig& cfg, bool gpu,
                    uint64_t timeout_ns, dev::CommPeer* peers, bool exchange) {
  const int size = static_cast<int>(path.size()), rank = bs.rank();
  size_t n = 0;
  for (int r = 0; r < size; ++r) n += path[r] == uint32_t(dev::CommPath::Gdaki);
  if (n == 0) device.reset();  // opened for nothing (every peer got another path)
  if (!exchange) return;
  // Every rank takes part in both exchanges, also one without gdaki peers or
  // whose own part failed: its failure travels in the exchange
  // (collective.hpp) and every rank throws, in step.
  const std::string who = "comm rank " + std::to_string(rank);
  std::exception_ptr failed;
  std::vector<uint8_t> blob;
  uint32_t depth = cfg.slots;
  QpConfig qc;
  try {
    if (n) {
      pd = device->alloc_pd();
      while (depth > device->attr().max_qp_wr && depth > 2) depth /= 2;
      qc.sq_depth = depth;
      qc.rings = gpu ? RingPlacement::Gpu : RingPlacement::Host;
      qc.posters = gpu ? Posters::Gpu : Posters::Host;
      qc.timeout_ms = timeout_ns / 1000000;
      qps.resize(size);
    }
    for (int r = 0; r < size; ++r) {
      std::vector<uint8_t> info;
      if (path[r] == uint32_t(dev::CommPath::Gdaki)) {
        qps[r] = pd->create_qp(qc);
        info = qps[r]->info().serialize();
      }
      const uint32_t len = static_cast<uint32_t>(info.size());
      blob.insert(blob.end(), reinterpret_cast<const uint8_t*>(&len), reinterpret_cast<const uint8_t*>(&len) + 4);
      blob.insert(blob.end(), info.begin(), info.end());
    }
  } catch (...) {
    failed = std::current_exception();
  }
  const auto all = comm_coll::allgather(bs, who, failed, blob.data(), blob.size());
  try {
    for (int r = 0; r < size; ++r) {
      if (!qp(r)) continue;
      // Rank r's blob: size entries (u32 length, QpInfo); ours is entry `rank`.
      const std::vector<uint8_t>& b = all[r];
      size_t off = 0;
      uint32_t len = 0;
      for (int k = 0; k <= rank; ++k) {
        if (b.size() - off < 4)
          throw Error(ErrorCode::InvalidArgument, who + ": rank " + std::to_string(r) + "'s QP info blob ends at entry " +
                                                      std::to_string(k) + " of " + std::to_string(size));
        std::memcpy(&len, b.data() + off, 4);
        off += 4;
        if (len > b.size() - off)
          throw Error(ErrorCode::InvalidArgument, who + ": rank " + std::to_string(r) + "'s QP info entry " +
                                                      std::to_string(k) + " announces " + std::to_string(len) +
                                                      " bytes, " + std::to_string(b.size() - off) + " left");
        if (k < rank) off += len;
      }
      if (len == 0)
        throw Error(ErrorCode::InvalidArgument, who + ": rank " + std::to_string(r) + " sent no QP for this rank");
      try {
        qps[r]->connect(QpInfo::deserialize(b.data() + off, len), kAccessAll);
      } catch (const Error& e) {
        throw Error(e.code(), who + ": connecting the gdaki QP to rank " + std::to_string(r) + ": " + e.what());
      }
    }
    if (n) {
      const size_t per_peer = size_t{depth} * sizeof(dev::CommAtomicSlot) + 64;  // + the discard word
      scratch = static_cast<uint8_t*>(gpu ? cuda::alloc_device(per_peer * n) : cuda::alloc_pinned(per_peer * n));
      scratch_on_gpu = gpu;
      scratch_mr = pd->reg_mr(scratch, per_peer * n, kLocalWrite);
      size_t k = 0;
      for (int r = 0; r < size; ++r) {
        if (!qps[r]) continue;
        dev::CommPeer& p = peers[r];
        uint8_t* base = scratch + per_peer * k++;
        p.qp = qps[r]->handle();
        p.scratch_lkey = scratch_mr->lkey().be;
        p.atomic_scratch = reinterpret_cast<dev::CommAtomicSlot*>(base);
        p.put_scratch = reinterpret_cast<uint64_t*>(base + size_t{depth} * sizeof(dev::CommAtomicSlot));
      }
    }
  } catch (...) {
    failed = std::current_exception();
  }
  comm_coll::barrier(bs, who, failed);  // no WQE flows before both ends are connected
}

}  // namespace kinet::comm_gdaki
