// An installed kinet's consumer: one put between two software NICs through
// the device verbs, checked byte for byte. Exit 0 only if the bytes arrived.
#include <kinet/kinet.hpp>
#include <kinet/version.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

int main() try {
  using namespace kinet;
  constexpr auto X = dev::Sharing::Exclusive;
  auto a = Device::open("emu"), b = Device::open("emu");
  auto pa = a->alloc_pd(), pb = b->alloc_pd();
  std::vector<unsigned char> src(1024), dst(1024, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  auto ms = pa->reg_mr(src.data(), src.size(), kAccessAll);
  auto md = pb->reg_mr(dst.data(), dst.size(), kAccessAll);
  auto qa = pa->create_qp(), qb = pb->create_qp();
  qa->connect(qb->info());
  qb->connect(qa->info());
  const dev::QpHandle h = qa->handle();
  dev::Ticket t;
  Status s = dev::put<X>(h, src.data(), ms->lkey(), md->addr_u64(), md->rkey(), src.size(), 0, &t);
  if (s == Status::Ok) s = dev::wait<X>(h, t);
  if (s != Status::Ok || std::memcmp(src.data(), dst.data(), src.size()) != 0) {
    std::fprintf(stderr, "consumer: put failed: %s\n", status_string(s));
    return 1;
  }
  std::printf("consumer: kinet %s (headers %s): put of %zu bytes arrived\n", version(), KINET_VERSION_STRING,
              src.size());
  return 0;
} catch (const kinet::Error& e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}
