#pragma once
// The C library allocator's policy for tierlab's programs (issue 38, item 2).
//
// A paper-scale cell allocates and frees buffers of megabytes thousands of times per head (the
// prepared softmax and its per-variant logit changes, rows x T; the materialised keys of each
// allocation, T x d; the surrogate's cost matrices). glibc serves a block above its mmap
// threshold (128 KiB, raised on the fly to at most 32 MiB) with a fresh mapping and returns it
// on free, and trims the top of its heap past the trim threshold: every such buffer is then
// new pages, faulted in and zeroed by the kernel. Measured on one reduced paper/01 cell
// (bench/bench_paper_cell.py, 16 KV heads, 2 idle cores): 18-19% of the wall time at T = 4096
// and 16,384 went to that.
//
// keep_freed_buffers() sets both thresholds high (a 32 MiB mapping threshold, glibc's largest,
// and a 2 GiB trim threshold), so a freed buffer stays in the heap and the next one of its size
// reuses its pages.
// The price is the heap's high-water mark held until exit: peak resident memory rose 16 MB at
// T = 4096 and 20 MB (10%) at 16,384 on that cell (docs/performance.md). A user's own
// allocator settings win: nothing is changed when GLIBC_TUNABLES names a glibc.malloc tunable,
// or when TIERLAB_ALLOCATOR=system. Without glibc it does nothing.
namespace tierlab {

// Call at the top of main(), before the work allocates. Returns whether it changed anything.
bool keep_freed_buffers();

// Gives the heap's free pages back to the system (glibc's malloc_trim) when keep_freed_buffers()
// is in force, and does nothing otherwise. For the boundary between two phases of work whose
// buffers differ: a paper-scale cell's per-head pass leaves each head's working set free in the
// heap (hundreds of MB at T = 32,768), and the model-wide solve that follows allocates its own on
// top of it; released there, the peak is the larger phase, not the sum (docs/performance.md).
// Costs one walk of the heap; the addresses later allocations get do not change. Returns whether
// memory went back to the system.
bool release_freed_buffers();

}  // namespace tierlab
