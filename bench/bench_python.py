#!/usr/bin/env python3
"""The Python package against the C++ calls on the same work, and against the NumPy peer
baseline (../shared/bench/numpy_recompute_ref.py) on the same instance. Run it through
bench/run_python.sh (which sets PYTHONPATH and finds the binaries).

Recompute of one 32k-token head (the reference's workload with --kv-heads 1: G*Q query rows,
variants KIVI 2-bit, KIVI 4-bit, exact, E random allocations with eviction):
  python   tierlab.RecomputeProblem(...).evaluate(selections, backend="cpu"), the E allocations
           in one call (setup included), seconds / E
  c++      the same backend call (Recomputer::evaluate through recompute()) timed in C++ in the
           same process, right after each Python call (RecomputeProblem._time_cpp): the overhead
           is the median over these pairs of python / c++ - 1; and bench_recompute_cpu --data DIR
           (its own process: Recomputer::evaluate over the same E allocations,
           seconds_per_allocation_amortized: setup included, / E), same sizes
  numpy    numpy_recompute_ref.py (seconds_per_allocation; and with its setup amortized over E)
  The instance is numpy_recompute_dump.py's (the reference's own draws); the Python call uses
  the reference's KIVI keys, so its errors are compared with the reference's.
Solve of a trace of 32k-token heads (tierlab.solve vs `tierlab solve --json`, exact, mixed,
head scope):
  python   wall time of tierlab.solve(trace, B) (reading the heads, their costs, the solve)
  c++      the same call's own C++ timing (Solution.seconds: allocate_trace), and the tool's
           "seconds.total" of `tierlab solve` (a separate process, same function)
Rounds alternate the sides so that each pair meets about the same load; medians of rounds.
Prints a report and one JSON line (--json FILE writes it).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import tierlab


def median(xs):
    return statistics.median(xs)


def run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench_python: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="build folder (bench/bench_recompute_cpu, tierlab)")
    ap.add_argument("--shared", required=True, help="the shared/ folder (bench/numpy_recompute_ref.py)")
    ap.add_argument("--repo", required=True)
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--queries", type=int, default=16)
    ap.add_argument("--allocations", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--solve-heads", type=int, default=4, help="32k-token heads of the solve trace")
    ap.add_argument("--budget", type=float, default=3.0)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    py = sys.executable
    bench_cpu = os.path.join(a.build, "bench", "bench_recompute_cpu")
    cli = os.path.join(a.build, "tierlab")
    ref = os.path.join(a.shared, "bench", "numpy_recompute_ref.py")
    dump = os.path.join(a.repo, "bench", "numpy_recompute_dump.py")
    sizes = ["--tokens", str(a.tokens), "--dim", str(a.dim), "--kv-heads", "1", "--group-size", str(a.group_size),
             "--queries", str(a.queries), "--allocations", str(a.allocations), "--seed", "0"]
    work = tempfile.mkdtemp(prefix="tierlab_bench_python.")
    load_before = open("/proc/loadavg").read().split()[:3]

    # ---- recompute: the instance ----------------------------------------------------------
    data = os.path.join(work, "data")
    subprocess.run([py, dump, "--out", data, *sizes], check=True, capture_output=True)
    T, D, R, E = a.tokens, a.dim, a.group_size * a.queries, a.allocations
    rd = lambda name, shape, dt=np.float32: np.fromfile(os.path.join(data, name), dtype=dt).reshape(shape)
    K, V, Q = rd("K.f32", (T, D)), rd("V.f32", (T, D)), rd("Q.f32", (R, D))
    K2, K4 = rd("K2.f32", (T, D)), rd("K4.f32", (T, D))
    alloc = rd("alloc.u8", (E, T), np.uint8)
    ref_errors = np.fromfile(os.path.join(data, "errors_f32.f64"), dtype=np.float64)
    problem = tierlab.RecomputeProblem(Q, K, V, [K2, K4, K])
    problem.evaluate(alloc, backend="cpu")  # warm-up

    # ---- solve: the trace -------------------------------------------------------------------
    params = tierlab.synthetic_params("llama-like", n_layers=1, n_kv_heads=a.solve_heads, prompt_len=a.tokens,
                                      decode_steps=1, head_dim=a.dim)
    trace_path = os.path.join(work, "solve.safetensors")
    t0 = time.perf_counter()
    trace = tierlab.write_synthetic(trace_path, params)
    synth_seconds = time.perf_counter() - t0
    tierlab.solve(trace, a.budget)  # warm-up (page cache, OpenMP threads)

    rec_inproc, rec_pairs, faults = [], [], []
    rec_py, rec_cpp, rec_np, rec_np_am, solve_py, solve_py_cpp, solve_cli = [], [], [], [], [], [], []
    for r in range(a.rounds):
        print(f"round {r + 1}/{a.rounds} ...", file=sys.stderr)
        times, inner = [], []
        for _ in range(a.repeats):  # the Python call and the same C++ call, back to back
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.perf_counter()
            errs = problem.evaluate(alloc, backend="cpu")
            times.append((time.perf_counter() - t0) / E)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
            inner.append(problem._time_cpp(alloc, "cpu", 1)[0] / E)
        rec_py.append(median(times))
        rec_inproc.append(median(inner))
        rec_pairs.extend(p / c - 1 for p, c in zip(times, inner))
        out = run_json([bench_cpu, "--data", data, "--repeats", str(a.repeats), *sizes])
        rec_cpp.append(out["seconds_per_allocation_amortized"])
        n = run_json([py, ref, *sizes])
        rec_np.append(n["seconds_per_allocation"])
        rec_np_am.append(n["seconds_per_allocation"] + n["setup_seconds"] / E)
        walls, inner = [], []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            s = tierlab.solve(trace, a.budget)
            walls.append(time.perf_counter() - t0)
            inner.append(s.seconds)
        solve_py.append(median(walls))
        solve_py_cpp.append(median(inner))
        solve_cli.append(run_json([cli, "solve", trace_path, "--budget", str(a.budget), "--json"])["seconds"]["total"])
    load_after = open("/proc/loadavg").read().split()[:3]

    py_err = float(errs.rel_error.mean())
    cli_sol = run_json([cli, "solve", trace_path, "--budget", str(a.budget), "--json"])
    res = {
        "tokens": T, "dim": D, "query_rows": R, "allocations": E, "rounds": a.rounds, "repeats": a.repeats,
        "cores": os.cpu_count(), "load_before": load_before, "load_after": load_after,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "recompute_ms_per_allocation": {"python": 1e3 * median(rec_py), "cpp_in_process": 1e3 * median(rec_inproc),
                                        "cpp": 1e3 * median(rec_cpp),
                                        "numpy": 1e3 * median(rec_np), "numpy_setup_amortized": 1e3 * median(rec_np_am)},
        "recompute_overhead_python_vs_cpp_in_process": median(rec_pairs),
        "recompute_overhead_python_vs_cpp": median([p / c - 1 for p, c in zip(rec_py, rec_cpp)]),
        "recompute_minor_page_faults_per_python_call": median(faults),
        "malloc_env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_") or k == "GLIBC_TUNABLES"},
        "recompute_speedup_numpy_over_python": median([n / p for n, p in zip(rec_np_am, rec_py)]),
        "recompute_speedup_numpy_loop_over_python": median([n / p for n, p in zip(rec_np, rec_py)]),
        "recompute_mean_rel_error": {"python": py_err, "numpy": float(ref_errors.mean())},
        "solve_heads": a.solve_heads, "solve_budget": a.budget, "synthetic_trace_seconds": synth_seconds,
        "solve_seconds": {"python_wall": median(solve_py), "cpp_in_call": median(solve_py_cpp), "cli": median(solve_cli)},
        "solve_overhead_python_vs_cpp_in_call": median([p / c - 1 for p, c in zip(solve_py, solve_py_cpp)]),
        "solve_overhead_python_vs_cli": median([p / c - 1 for p, c in zip(solve_py, solve_cli)]),
        "solve_objective_equal_to_cli": s.objective == cli_sol["model"]["objective"],
    }
    r = res
    ms = r["recompute_ms_per_allocation"]
    print(f"machine: {r['cores']} cores, load average {' '.join(load_before)} before, {' '.join(load_after)} after; "
          f"OMP_WAIT_POLICY={r['omp_wait_policy']}")
    print(f"recompute, one head: T={T}, d={D}, {R} query rows, variants kivi2/kivi4/exact + evict, {E} allocations "
          f"(medians of {a.rounds} rounds x {a.repeats} repeats; setup included, per allocation)")
    print(f"  python  tierlab.RecomputeProblem.evaluate : {ms['python']:9.2f} ms/allocation")
    print(f"          minor page faults per Python call: {r['recompute_minor_page_faults_per_python_call']:.0f} "
          f"(malloc settings from the environment: {r['malloc_env'] or 'none'})")
    print(f"  c++     the same backend call, same process: {ms['cpp_in_process']:8.2f} ms/allocation   "
          f"python overhead {100 * r['recompute_overhead_python_vs_cpp_in_process']:+.1f}% (median of {len(rec_pairs)} back-to-back pairs)")
    print(f"  c++     bench_recompute_cpu (own process): {ms['cpp']:9.2f} ms/allocation   "
          f"python vs it {100 * r['recompute_overhead_python_vs_cpp']:+.1f}% (medians of rounds)")
    print(f"  numpy   reference loop                    : {ms['numpy']:9.2f} ms/allocation "
          f"(setup amortized: {ms['numpy_setup_amortized']:.2f})   numpy / python: "
          f"{r['recompute_speedup_numpy_over_python']:.1f}x (loop only: {r['recompute_speedup_numpy_loop_over_python']:.1f}x)")
    print(f"  mean relative error: python {py_err:.10g}, numpy {ref_errors.mean():.10g} "
          f"(relative difference {abs(py_err - ref_errors.mean()) / abs(ref_errors.mean()):.1e})")
    sv = r["solve_seconds"]
    print(f"solve: {a.solve_heads} heads x T={T} (llama-like, d={D}), exact mixed head scope, B={a.budget}")
    print(f"  python  tierlab.solve wall time           : {sv['python_wall']:9.4f} s")
    print(f"  c++     the same call's allocate_trace    : {sv['cpp_in_call']:9.4f} s   "
          f"python overhead {100 * r['solve_overhead_python_vs_cpp_in_call']:+.2f}%")
    print(f"  c++     tierlab solve --json (seconds)    : {sv['cli']:9.4f} s   "
          f"python vs tool {100 * r['solve_overhead_python_vs_cli']:+.1f}% (median of the rounds' ratios); same objective: {r['solve_objective_equal_to_cli']}")
    print(json.dumps(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
