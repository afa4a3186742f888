#pragma once
// OpenMP's waiting policy for tierlab's programs (issue 21, item 3).
//
// GNU OpenMP (libgomp) lets an idle worker thread spin for about 300,000 iterations
// (milliseconds) before it sleeps, after every parallel region, unless OMP_WAIT_POLICY
// says otherwise. On a shared, loaded machine a spinning thread holds a core that a
// descheduled peer, or the program's own serial part, needs. tierlab's programs therefore
// wait passively by default. libgomp reads the variable once, when it is loaded (before
// main), so the only way to change the default from inside a program is to set the variable
// and start the program again: use_passive_openmp_wait() does that at the top of main(),
// once (the variable set, the restarted program goes on). An OMP_WAIT_POLICY or
// GOMP_SPINCOUNT the user has set is kept as it is.
//
// Started by an MPI launcher as several processes on one node (OMPI_COMM_WORLD_LOCAL_SIZE,
// MPI_LOCALNRANKS or SLURM_NTASKS_PER_NODE above 1), each process also gets its share of the
// node's cores, OMP_NUM_THREADS = max(1, cores / processes), unless the user set it, so
// `mpirun -n 2` on 2 cores runs 2 x 1 threads rather than 2 x 2.
namespace tierlab {

// Call first thing in main(). Returns only when the policy is already settled (the user's
// or passive) or when the restart failed (then the program goes on with libgomp's default).
void use_passive_openmp_wait(char** argv);

// Eigen's matrix products never split over threads (Eigen::setNbThreads(1)), so that no number
// depends on how many threads there are. Eigen splits a large product outside a parallel
// region over omp_get_max_threads() threads and sizes its blocking by that count, so its sums
// run in an order that depends on it: the channel-variance analysis's key covariance
// (K^T K over T tokens) changed in its 9th digit between OMP_NUM_THREADS=1 and 2, and with it
// the tables of `--jobs`, MPI ranks on a share of a node and a single process would differ.
// tierlab's own parallel loops (the CPU backend's tiles and selections, the surrogate's blocks,
// heads side by side) keep the cores busy and give the same bits on any number of threads;
// inside them Eigen ran on one thread already. Call at the top of main() (the Python module
// calls it when imported).
void same_bits_on_any_thread_count();

}  // namespace tierlab
