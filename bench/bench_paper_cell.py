#!/usr/bin/env python3
"""One paper/01 cell at a reduced head count, with its time by phase against the machine's limits.

The llama-3.1-8b preset cut to --layers layers (4: 32 of its 256 KV heads) at each --tokens T,
paper/01's ladder, budgets, total bits, decode queries and model-wide routed verdict, on the CPU
backend, run by `tierlab run` (issue 38, item 1: a cost model first). The cell's JSON carries its
time by phase -- generation of the synthetic trace, surrogate costs, solves, recomputation --
with the dense floating-point work and the bytes of each (model/base/phases.hpp counts them where
the shapes are known); the tables are timed by a rerun over the finished cell. Beside it, two
probes of this machine taken in the same run: the fp32 GEMM rate (NumPy's BLAS, all cores; the
BLAS is printed) and the memory bandwidth (a large array copy). For every phase it prints

    seconds, share of the cell, GFLOP, GFLOP/s, the GEMM-bound time (flops / GEMM rate), the
    memory-bound time (bytes / bandwidth), and actual / max(the two): how far the phase is from
    what the hardware allows (1 = at the limit)

and the same for the whole cell. Timings on a shared machine: the load average is printed.

    bench/bench_paper_cell.py [--build DIR] [--tokens 4096,16384] [--layers 4] [--json FILE] [--previous EXE]

With --previous, the same cell is first run by another tierlab binary (the one built from the
commit before a change) and the ratio of the cell times is printed, with whether the cell's
results are identical (issue 38: measured side by side, same machine).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ["generate", "surrogate", "solve", "recompute"]


def loadavg():
    return os.getloadavg()[0]


def probes():
    """(fp32 GEMM FLOP/s, memory copy bytes/s, the BLAS): bench/blas_probe.py and an array copy."""
    import numpy as np
    out = subprocess.run([sys.executable, os.path.join(REPO, "bench", "blas_probe.py")], capture_output=True, text=True,
                         check=True)
    probe = json.loads(out.stdout)
    x = np.ones(64 * 1024 * 1024 // 4, dtype=np.float32)  # 64 MiB
    y = np.empty_like(x)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        np.copyto(y, x)
        times.append(time.perf_counter() - t0)
    bandwidth = 2 * x.nbytes / sorted(times)[len(times) // 2]  # read + write
    return probe["sgemm_gflops"] * 1e9, bandwidth, probe["blas"]


def cell_scenario(tokens, layers):
    """The reduced paper/01 cell as a scenario file (also bench/profile_paper_cell.sh's, via --print-scenario)."""
    return f"""name: paper-cell-T{tokens}
traces:
  synthetic:
    presets: [llama-3.1-8b]
    seeds: [0]
    context_lengths: [{tokens}]
    overrides:
      decode_steps: 16
      n_layers: {layers}
ladder: evict,kivi2,kivi4,kivi8,exact
rate_kind: total
budgets: [1, 2, 3, 4]
primary_budget: 2
primary_aggregation: routed
queries: decode
backend: cpu
seed: 0
bootstrap: 2000
"""


def peak_resident_kb(child):
    """The child's peak resident memory (VmHWM of /proc/PID/status, read every 20 ms until it exits; monotone, so
    the last reading is the peak up to its last 20 ms). Not getrusage: a child forked from this Python process
    would carry the interpreter's own peak into ru_maxrss."""
    peak = 0
    while child.poll() is None:
        try:
            with open(f"/proc/{child.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass
        time.sleep(0.02)
    return peak


def run_cell(exe, tokens, layers, work, tag=""):
    yaml = cell_scenario(tokens, layers)
    path = os.path.join(work, f"cell-{tokens}.yaml")
    with open(path, "w") as f:
        f.write(yaml)
    out = os.path.join(work, f"out-{tokens}{tag}")
    t0 = time.perf_counter()
    child = subprocess.Popen([exe, "run", path, "--out", out, "--jobs", "1"], stdout=subprocess.DEVNULL)
    peak_kb = peak_resident_kb(child)
    if child.returncode != 0:
        raise SystemExit(f"bench_paper_cell: {exe} run failed with exit status {child.returncode}")
    total = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([exe, "run", path, "--out", out, "--jobs", "1"], check=True, stdout=subprocess.DEVNULL)
    tables = time.perf_counter() - t0
    cells = os.listdir(os.path.join(out, "cells"))
    with open(os.path.join(out, "cells", cells[0])) as f:
        cell = json.load(f)
    cell["peak_rss_mb"] = peak_kb / 1024
    return cell, total, tables


def strip_timings(cell):
    """A cell's JSON without what differs between two runs of the same computation."""
    if isinstance(cell, dict):
        return {k: strip_timings(v) for k, v in cell.items()
                if k not in ("seconds", "phases", "content_hash", "trace", "peak_rss_mb")}
    if isinstance(cell, list):
        return [strip_timings(x) for x in cell]
    return cell


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--tokens", default="4096,16384")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--json")
    ap.add_argument("--previous", help="another tierlab binary (e.g. built from the commit before a change): the same "
                                       "cell run with it first, side by side, and the ratio printed")
    ap.add_argument("--print-scenario", action="store_true", help="print the first --tokens cell's scenario and stop")
    a = ap.parse_args()
    if a.print_scenario:
        print(cell_scenario(int(a.tokens.split(",")[0]), a.layers), end="")
        return
    build = os.path.abspath(a.build)
    if not os.path.exists(os.path.join(build, "tierlab")):
        raise SystemExit(f"bench_paper_cell: {build}/tierlab missing: bash setup.sh first")
    load0 = loadavg()
    gemm, bandwidth, blas = probes()
    print(f"machine: {os.cpu_count()} cores, load average {load0:.2f}; fp32 GEMM {gemm / 1e9:.1f} GFLOP/s "
          f"(NumPy on {blas}, bench/blas_probe.py); memory copy {bandwidth / 1e9:.1f} GB/s")
    work = tempfile.mkdtemp(prefix="tierlab_paper_cell.")
    report = {"gemm_flops_per_s": gemm, "bandwidth_bytes_per_s": bandwidth, "blas": blas, "cells": []}
    try:
        for tokens in [int(t) for t in a.tokens.split(",")]:
            previous = None
            if a.previous:  # first, so that neither run always gets the warmer machine
                previous, _, _ = run_cell(os.path.abspath(a.previous), tokens, a.layers, work, "-previous")
            cell, total, tables = run_cell(os.path.join(build, "tierlab"), tokens, a.layers, work)
            secs = cell["seconds"]
            print(f"\ncell llama-3.1-8b, {a.layers} layers ({cell['n_heads']} KV heads), T = {tokens}: "
                  f"{secs:.1f} s in the cell, {total:.1f} s the whole run, peak resident {cell['peak_rss_mb']:.0f} MB; "
                  f"tables and figures rewritten in {tables:.1f} s")
            print(f"{'phase':<10} {'seconds':>8} {'share':>6} {'GFLOP':>8} {'GFLOP/s':>8} {'GEMM-bound s':>12} "
                  f"{'memory-bound s':>14} {'actual/limit':>12}")
            rows = []
            accounted = 0.0
            lim_total = 0.0
            # Heads side by side (scenarios/pipeline/parallel_heads.hpp): a phase's seconds are busy
            # time summed over the threads; divided by their number, an estimate of its wall time.
            threads = cell.get("phases", {}).get("threads", 1)
            if threads > 1:
                print(f"(heads ran on {threads} threads side by side: each phase's seconds below are its summed busy "
                      f"time divided by {threads})")
            for ph in PHASES:
                p = cell.get("phases", {}).get(ph, {"seconds": 0, "flops": 0, "bytes": 0})
                s, fl, by = p["seconds"] / threads, p["flops"], p["bytes"]
                accounted += s
                g, m = fl / gemm, by / bandwidth
                limit = max(g, m)
                lim_total += limit
                ratio = s / limit if limit > 0 else float("nan")
                rows.append({"phase": ph, "seconds": s, "flops": fl, "bytes": by, "gemm_bound_s": g,
                             "memory_bound_s": m, "ratio": ratio if limit > 0 else None})
                ratio_text = f"{ratio:12.1f}" if limit > 0 else f"{'-':>12}"  # solves: no dense work counted
                print(f"{ph:<10} {s:8.2f} {s / secs:6.1%} {fl / 1e9:8.1f} {fl / s / 1e9 if s > 0 else 0:8.1f} "
                      f"{g:12.3f} {m:14.3f} {ratio_text}")
            other = secs - accounted
            print(f"{'other':<10} {other:8.2f} {other / secs:6.1%}   (materialising allocations, measuring rates, trace I/O)")
            print(f"{'cell':<10} {secs:8.2f} {1:6.1%} {'':>8} {'':>8} {'':>12} {'':>14} "
                  f"{secs / lim_total if lim_total > 0 else float('nan'):12.1f}  (actual / the phases' limits summed)")
            entry = {"tokens": tokens, "layers": a.layers, "kv_heads": cell["n_heads"], "seconds": secs,
                     "run_seconds": total, "tables_seconds": tables, "phases": rows, "other_s": other,
                     "head_threads": threads,
                     "limit_s": lim_total}
            if previous is not None:
                entry["previous_seconds"] = previous["seconds"]
                entry["previous_peak_rss_mb"], entry["peak_rss_mb"] = previous["peak_rss_mb"], cell["peak_rss_mb"]
                same = strip_timings(previous) == strip_timings(cell)
                entry["previous_identical"] = same
                print(f"previous binary ({a.previous}): {previous['seconds']:.2f} s, peak resident "
                      f"{previous['peak_rss_mb']:.0f} MB; this / previous = {secs / previous['seconds']:.3f} in time, "
                      f"{cell['peak_rss_mb'] / previous['peak_rss_mb']:.3f} in memory; cell results "
                      f"{'identical' if same else 'DIFFER'} (timings and content hash aside)")
            report["cells"].append(entry)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load1 = loadavg()
    print(f"\nload average {load0:.2f} before, {load1:.2f} after")
    report["load_before"], report["load_after"] = load0, load1
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
