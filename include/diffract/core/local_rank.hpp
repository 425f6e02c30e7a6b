// Which process of a multi-process job this is on its machine, as the launcher says (no MPI needed).
#pragma once

namespace diffract {

// This process's rank among the processes of the job on its machine, from the launcher's
// environment (OpenMPI's OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID, Slurm's SLURM_LOCALID);
// 0 outside a launcher or when the value is not a non-negative number. The CUDA backend uses it to
// give each rank of a machine its own GPU (local rank modulo the GPU count).
int local_rank();

}  // namespace diffract
