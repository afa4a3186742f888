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
namespace tierlab {

// Call first thing in main(). Returns only when the policy is already settled (the user's
// or passive) or when the restart failed (then the program goes on with libgomp's default).
void use_passive_openmp_wait(char** argv);

}  // namespace tierlab
