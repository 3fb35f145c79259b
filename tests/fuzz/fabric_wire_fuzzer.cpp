// libFuzzer entry point for the fabric's wire decoder (optional, not in CI):
//   cmake -DCMAKE_CXX_COMPILER=clang++ -DKINET_FUZZERS=ON ... && ninja kinet_fabric_wire_fuzzer
//   ./build/tests/kinet_fabric_wire_fuzzer -max_len=70000 -max_total_time=60
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "../unit/fabric_wire_oracle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size ? size : 1]);  // exact size: ASan sees overreads
  if (size) std::memcpy(copy.get(), data, size);
  bool accepted = false;
  const std::string bad = kinet::fabric::test::check_decode(copy.get(), size, &accepted);
  if (!bad.empty()) {
    std::fprintf(stderr, "fabric wire fuzzer: %s\n", bad.c_str());
    std::abort();
  }
  return 0;
}
