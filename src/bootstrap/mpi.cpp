// kinet bootstrap under mpirun: rank 0 of MPI_COMM_WORLD creates the unique
// ID, MPI_Bcast carries it, then the ordinary TCP bootstrap. Built into the
// optional kinet_mpi library so that libkinet never needs MPI.
#include <mpi.h>

#include <cstring>
#include <string>

#include "kinet/bootstrap.hpp"

namespace kinet {

std::unique_ptr<Bootstrap> Bootstrap::from_mpi(std::chrono::milliseconds timeout) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized)
    throw Error(ErrorCode::BadState, finalized ? "bootstrap: from_mpi: MPI is already finalized"
                                               : "bootstrap: from_mpi: MPI is not initialized (call MPI_Init first)");
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Rank 0's outcome travels with the id, so that a failure on rank 0 ends
  // every rank at once instead of leaving them to time out at the root.
  struct {
    int32_t ok;
    UniqueId id;
  } msg{};
  std::string why;
  if (rank == 0) {
    try {
      msg.id = UniqueId::create();
      msg.ok = 1;
    } catch (const Error& e) {
      why = e.what();
    }
  }
  int rc = MPI_Bcast(&msg, sizeof msg, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS)
    throw Error(ErrorCode::System, "bootstrap: from_mpi: MPI_Bcast of the unique id failed (" + std::to_string(rc) + ")");
  if (!msg.ok)
    throw Error(ErrorCode::System, "bootstrap: from_mpi: rank 0 could not create the unique id" +
                                       (why.empty() ? std::string() : ": " + why));
  return init(msg.id, rank, size, timeout);
}

}  // namespace kinet
