// Bootstrap::from_mpi under mpirun: every rank allgathers blobs of different
// sizes, passes one around a ring and meets at a barrier. Prints
// "rank R: OK" or the failure, and exits non-zero on failure.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kinet/bootstrap.hpp"

static std::vector<uint8_t> blob(int rank, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 29 + rank * 3 + 1);
  return v;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    auto bs = kinet::Bootstrap::from_mpi(std::chrono::milliseconds(20000));
    const int n = bs->size();
    int mpi_size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
    if (bs->rank() != rank || n != mpi_size) throw std::runtime_error("rank/size differ from MPI's");
    auto mine = blob(rank, static_cast<size_t>(rank) * 1000);  // rank 0: empty
    auto all = bs->allgather(mine.data(), mine.size());
    for (int j = 0; j < n; ++j)
      if (all[j] != blob(j, static_cast<size_t>(j) * 1000)) throw std::runtime_error("allgather blob of rank " + std::to_string(j));
    if (n > 1) {
      bs->send((rank + 1) % n, 5, blob(rank, 12345));
      if (bs->recv((rank + n - 1) % n, 5) != blob((rank + n - 1) % n, 12345)) throw std::runtime_error("ring blob");
    }
    bs->barrier();
    std::printf("rank %d: OK\n", rank);
  } catch (const std::exception& e) {
    std::printf("rank %d: FAIL %s\n", rank, e.what());
    rc = 1;
  }
  std::fflush(stdout);
  MPI_Finalize();
  return rc;
}
