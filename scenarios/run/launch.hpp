#pragma once
// How `tierlab run` was started: by an MPI launcher (mpirun, mpiexec, srun) or not.
// Read from the launcher's environment, so it works in builds without MPI (which then refuse
// to run as several copies: they would all compute the same cells).
namespace tierlab {

// The number of processes the launcher started (Open MPI's OMPI_COMM_WORLD_SIZE, MPICH/Hydra's
// and Slurm PMI's PMI_SIZE, PMIx's PMIX_RANK with Slurm's SLURM_NTASKS), or 0 when this process
// was not started by an MPI launcher.
int launched_ranks();

// Was this tierlab built with MPI (TIERLAB_MPI, Open MPI found at configure time)?
bool built_with_mpi();

}  // namespace tierlab
