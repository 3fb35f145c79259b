// kinet example: one RDMA write and one read between two software NICs,
// posted by a host thread through the same device verbs kernels use.
//   ./build/examples/hello_put
#include <kinet/kinet.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

using namespace kinet;

int main() try {
  auto a = Device::open("emu"), b = Device::open("emu");  // two software NICs
  auto pa = a->alloc_pd(), pb = b->alloc_pd();
  std::vector<char> src(4096), dst(4096, 0), back(4096, 0);
  std::snprintf(src.data(), src.size(), "hello from %s to %s", a->name().c_str(), b->name().c_str());
  auto msrc = pa->reg_mr(src.data(), src.size(), kAccessAll);
  auto mback = pa->reg_mr(back.data(), back.size(), kAccessAll);
  auto mdst = pb->reg_mr(dst.data(), dst.size(), kAccessAll);

  auto qa = pa->create_qp(), qb = pb->create_qp();
  qa->connect(qb->info());  // RESET -> INIT -> RTR -> RTS, with the peer's 64-byte info blob
  qb->connect(qa->info());

  const dev::QpHandle h = qa->handle();  // what a kernel would get by value
  using X = std::integral_constant<dev::Sharing, dev::Sharing::Exclusive>;
  dev::Ticket t;
  Status s = dev::put<X::value>(h, src.data(), msrc->lkey(), mdst->addr_u64(), mdst->rkey(), src.size(), 0, &t);
  if (s == Status::Ok) s = dev::wait<X::value>(h, t);
  if (s != Status::Ok) {
    std::fprintf(stderr, "put failed: %s (%s)\n", status_string(s), qa->last_error().c_str());
    return 1;
  }
  s = dev::get<X::value>(h, back.data(), mback->lkey(), mdst->addr_u64(), mdst->rkey(), back.size(), 0, &t);
  if (s == Status::Ok) s = dev::wait<X::value>(h, t);
  if (s != Status::Ok || std::memcmp(back.data(), src.data(), src.size()) != 0) {
    std::fprintf(stderr, "get failed: %s\n", status_string(s));
    return 1;
  }
  std::printf("%s: wrote and read back \"%s\"\n", qp_state_name(qa->state()), dst.data());

  // A bad key is an error completion with a reason, and the QP goes to ERROR.
  s = dev::put<X::value>(h, src.data(), msrc->lkey(), mdst->addr_u64(), Rkey{0x78563412}, 64, 0, &t);
  if (s == Status::Ok) s = dev::wait<X::value>(h, t);
  std::printf("bad rkey -> %s\n  %s\n", status_string(s), qa->last_error().c_str());
  return s == Status::RemoteAccess ? 0 : 1;
} catch (const Error& e) {
  std::fprintf(stderr, "kinet error (%s): %s\n", error_code_name(e.code()), e.what());
  return 1;
}
