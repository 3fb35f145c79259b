#include "emu_fixture.hpp"

namespace kinet::test {

Region make_region(ProtectionDomain& pd, size_t len, uint32_t access) {
  Region r;
  r.buf = alloc_buffer(len);
  r.len = len;
  r.mr = pd.reg_mr(r.buf.get(), len, access);
  return r;
}

QpConfig test_qp_config(uint32_t sq_depth, uint64_t timeout_ms) {
  QpConfig c;
  c.sq_depth = sq_depth;
  c.timeout_ms = timeout_ms;
  return c;
}

EmuPair::EmuPair(const PairOptions& o) {
  da = Device::open(o.device_a, o.dev_a);
  db = Device::open(o.device_b, o.dev_b);
  pa = da->alloc_pd();
  pb = db->alloc_pd();
  qa = pa->create_qp(o.cfg_a);
  qb = pb->create_qp(o.cfg_b);
  if (o.connect) {
    // Exchange the 64-byte blobs as a real out-of-band channel would.
    const std::vector<uint8_t> ia = qa->info().serialize(), ib = qb->info().serialize();
    qa->connect(QpInfo::deserialize(ib.data(), ib.size()), o.access_a);
    qb->connect(QpInfo::deserialize(ia.data(), ia.size()), o.access_b);
  }
}

EmuPair::~EmuPair() {
  ra.clear();
  rb.clear();
  qa.reset();
  qb.reset();
  pa.reset();
  pb.reset();
  da.reset();
  db.reset();
}

Region& EmuPair::reg_a(size_t len, uint32_t access) {
  ra.push_back(std::make_unique<Region>(make_region(*pa, len, access)));
  return *ra.back();
}
Region& EmuPair::reg_b(size_t len, uint32_t access) {
  rb.push_back(std::make_unique<Region>(make_region(*pb, len, access)));
  return *rb.back();
}

void EmuPair::destroy_b(bool whole_device) {
  // Keep the buffers (the test may still look at them), drop the registrations.
  for (auto& r : rb) r->mr.reset();
  qb.reset();
  if (whole_device) {
    pb.reset();
    db.reset();
  }
}

}  // namespace kinet::test
