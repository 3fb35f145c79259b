// libFuzzer entry point for the transports' wire decoders (optional, not in CI;
// CI runs the deterministic kinet_transport_wire_test):
//   cmake -DCMAKE_CXX_COMPILER=clang++ -DKINET_FUZZERS=ON ... && ninja kinet_transport_wire_fuzzer
//   ./build/tests/kinet_transport_wire_fuzzer -max_len=4096 -max_total_time=60
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "../transport/transport_wire_oracle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size ? size : 1]);  // exact size: ASan sees overreads
  if (size) std::memcpy(copy.get(), data, size);
  int accepted = 0;
  const std::string bad = kinet::transport::test::check_wire(copy.get(), size, &accepted);
  if (!bad.empty()) {
    std::fprintf(stderr, "transport wire fuzzer: %s\n", bad.c_str());
    std::abort();
  }
  return 0;
}
