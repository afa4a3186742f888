#!/usr/bin/env python3
"""The BLAS NumPy runs on, and this machine's measured fp32 matrix-product rate: what the peer
baselines are measured against (issue 38: Debian's default reference BLAS made every NumPy
baseline about 7x slower than a NumPy of any ordinary install, which uses OpenBLAS).

Prints JSON: {"blas": "openblas" | "reference" | "mkl" | "blis" | "unknown", "library": path,
"sgemm_gflops": median GFLOP/s of N x N x N float32 products, "n": N, "threads": ...}.
usage: blas_probe.py [--n N] [--repeats R]"""
import argparse
import json
import os
import statistics
import time

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=2048)
ap.add_argument("--repeats", type=int, default=7)
args = ap.parse_args()

rng = np.random.default_rng(0)
a = rng.standard_normal((args.n, args.n), dtype=np.float32)
b = rng.standard_normal((args.n, args.n), dtype=np.float32)
a @ b  # loads the BLAS and warms it up

# The BLAS is the shared library the product loaded into this process.
libs = set()
with open("/proc/self/maps") as f:
    for line in f:
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        name = os.path.basename(path)
        if any(k in name for k in ("blas", "mkl", "blis")):
            libs.add(os.path.realpath(path))
# NumPy calls cblas through libblas.so.3 (Debian's alternatives); the directory of the one
# loaded says whose it is (a LAPACK may load OpenBLAS beside a reference libblas).
def kind_of(lib):
    if "openblas" in lib:
        return "openblas"
    if "mkl" in lib:
        return "mkl"
    if "blis" in lib:
        return "blis"
    return "reference"


front = [lib for lib in libs if os.path.basename(lib).startswith(("libblas.so", "libcblas.so"))]
kind = kind_of(front[0]) if front else (kind_of(sorted(libs)[0]) if libs else "unknown")

times = []
for _ in range(args.repeats):
    t0 = time.perf_counter()
    a @ b
    times.append(time.perf_counter() - t0)
t = statistics.median(times)
print(json.dumps({"blas": kind, "library": ", ".join(sorted(libs)), "n": args.n,
                  "sgemm_gflops": 2.0 * args.n ** 3 / t / 1e9, "sgemm_seconds": t,
                  "threads": os.environ.get("OPENBLAS_NUM_THREADS", "default")}))
