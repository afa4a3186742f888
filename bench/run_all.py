#!/usr/bin/python3
"""Every headline benchmark of docs/performance.md in one run, each beside its peer.

Runs, in this order, on the build folder given:
  recompute      bench/run_recompute_cpu.sh: tierlab's CPU backend vs the NumPy reference
  recompute-load the same with one competing busy process per core (--load $(nproc))
  solver-2       bench/run_solver.sh at B = 2: the exact solver vs NumPy's bisection and CBC
  solver-12.345  the same at B = 12.345 (NumPy only)
  capture        bench_capture: the llama2.c forward pass vs the plain-C figure of issue 4
  explorer       bench_explorer: a budget change in tierlab-explorer (absolute 50 ms target)
  paper-cell     bench/bench_paper_cell.py: one paper/01 cell at T = 4096 cut to 16 KV heads, its
                 time against the machine's measured limits (target 1.3x); with --previous EXE
                 the same cell by the binary built before a change, side by side (target 0.1x)
  build          only when named in --only: apt's part of a fresh setup (bench/apt_time.sh, as root),
                 then a clean `bash setup.sh` into a fresh folder; together at most 360 s
records the load average before and after, and prints one table: each figure, the value
bench/documented.json holds (the one docs/performance.md quotes), the value now, their
ratio, the target and whether it is met. Exits 1 when a target is missed (not with --quick).

  bench/run_all.sh [--build DIR] [--quick] [--record] [--json FILE] [--only NAME,...] [--previous EXE]

--quick: small sizes (seconds, not minutes; ctest runs it so the script cannot rot);
targets are not checked and nothing is recorded. --record: write the values of this run
(with the date and the load) into bench/documented.json, for docs/performance.md.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENTED = os.path.join(REPO, "bench", "documented.json")
PLAIN_C_TOKENS_PER_SECOND = 6500.0  # issue 4: llama2.c run.c, one core (quoted by bench_capture)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(cmd, env=None, quiet=False):
    """Runs cmd, returns stdout; stderr passes through (progress) unless quiet."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run(cmd, env=full_env, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL if quiet else None, text=True)
    if p.returncode != 0:
        sys.stdout.write(p.stdout)
        raise SystemExit(f"run_all: {' '.join(cmd)} failed with exit status {p.returncode}")
    return p.stdout


def run_json(cmd):
    """Runs a benchmark that writes its figures to `--json FILE`, echoes its output, returns the figures."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        sys.stdout.write(run(cmd + ["--json", out]))
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


def grab(pattern, text, what):
    m = re.search(pattern, text, re.M)
    if not m:
        raise SystemExit(f"run_all: could not read {what} from the benchmark's output:\n{text}")
    return float(m.group(1))


def find_shared():
    for cand in (os.path.join(REPO, "..", "shared"), os.path.join(REPO, "shared"), "/work/shared"):
        if os.path.isfile(os.path.join(cand, "bench", "numpy_recompute_ref.py")):
            return os.path.abspath(cand)
    return None


class Figure:
    def __init__(self, key, label, unit, value, target=None, better="higher", note=""):
        self.key, self.label, self.unit, self.value = key, label, unit, value
        self.target, self.better, self.note = target, better, note

    def meets(self):
        if self.target is None:
            return None
        return self.value >= self.target if self.better == "higher" else self.value <= self.target

    def target_text(self):
        if self.target is None:
            return ""
        return (">= " if self.better == "higher" else "<= ") + fmt(self.target) + self.unit_suffix()

    def unit_suffix(self):
        return "x" if self.unit == "x" else (" " + self.unit if self.unit else "")


def fmt(v):
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def bench_recompute(build, quick, load):
    sizes = ["--tokens", "1024", "--rounds", "1", "--repeats", "1"] if quick else []
    cmd = ["bash", os.path.join(REPO, "bench", "run_recompute_cpu.sh"), "--build", build] + sizes
    if load:
        cmd += ["--load", str(load)]
    j = run_json(cmd)
    tag = "recompute-load" if load else "recompute"
    where = f" under {load} busy process{'es' if load > 1 else ''}" if load else ""
    return [
        Figure(f"{tag}.tierlab_ms", f"CPU recompute{where}: tierlab ms/allocation", "ms", j["tierlab_ms"], better="lower"),
        Figure(f"{tag}.numpy_ms", f"CPU recompute{where}: NumPy ms/allocation", "ms", j["numpy_ms"], better="lower"),
        Figure(f"{tag}.speedup", f"CPU recompute{where}: NumPy ({j['blas']}) / tierlab", "x", j["speedup"]),
        Figure(f"{tag}.fraction_of_limit", f"CPU recompute{where}: tierlab's effective rate / measured fp32 GEMM rate "
               f"({j['sgemm_gflops']:.0f} GFLOP/s)", "", j["tierlab_fraction_of_limit"], target=0.8),
    ]


def bench_solver(build, quick, budget, cbc):
    env = {"BUDGET": str(budget), "REPS": "3" if quick else "5", "REF_REPS": "1",
           "CBC_ITEMS": (str(2000 if quick else 20000) if cbc else "0")}
    if quick:
        env["ITEMS"] = "100000"
    text = run(["bash", os.path.join(REPO, "bench", "run_solver.sh"), build], env=env)
    sys.stdout.write(text)
    b = f"{budget:g}"
    figs = [
        Figure(f"solver-{b}.exact_wall_s", f"exact solver, B = {b}: median wall", "s",
               grab(r"^exact:\s+median ([0-9.eE+-]+) s wall", text, "the exact solver's wall time"),
               target=None if quick else 0.5, better="lower"),
        Figure(f"solver-{b}.exact_cpu_s", f"exact solver, B = {b}: median CPU", "s",
               grab(r"median CPU ([0-9.eE+-]+) s", text, "the exact solver's CPU time"), better="lower"),
        Figure(f"solver-{b}.numpy_s", f"NumPy bisection, B = {b}", "s",
               grab(r"^numpy:\s+median ([0-9.eE+-]+) s", text, "NumPy's time"), better="lower"),
        Figure(f"solver-{b}.speedup", f"exact solver, B = {b}: NumPy / exact", "x",
               grab(r"^ratio:\s+numpy / exact time = ([0-9.eE+-]+)x", text, "the NumPy ratio"), target=10.0),
    ]
    obj = re.search(r"^objective: exact .*: (equal|exact better|numpy better)", text, re.M)
    if obj and obj.group(1) == "numpy better":
        figs[-1].note = "NumPy's objective is better: a defect"
        figs[-1].value = 0.0
    if cbc:
        figs.append(Figure(f"solver-{b}.cbc_speedup", f"exact solver, B = {b}: CBC / exact (prefix)", "x",
                           grab(r"^ratio:\s+cbc / exact time = ([0-9.eE+-]+)x", text, "the CBC ratio"), target=100.0))
    return figs


def bench_capture(build, quick):
    text = run([os.path.join(build, "bench", "bench_capture"), "--repeats", "3" if quick else "30"],
               env={"OMP_NUM_THREADS": "1"})
    sys.stdout.write(text)
    cpu = grab(r"^forward only, 256 positions\s+([0-9.]+)", text, "forward tokens/s")
    cap = grab(r"^capture \+ trace file, 256 positions\s+([0-9.]+)", text, "capture tokens/s")
    return [
        Figure("capture.forward_tps", "llama2.c forward, 256 positions: tokens/s (CPU)", "tok/s", cpu),
        Figure("capture.forward_vs_c", "forward vs plain C (6,500 tok/s, quoted)", "x", cpu / PLAIN_C_TOKENS_PER_SECOND,
               target=1.0),
        Figure("capture.file_vs_c", "capture + trace file vs plain C", "x", cap / PLAIN_C_TOKENS_PER_SECOND, target=1.0),
    ]


def bench_explorer(build, quick):
    exe = os.path.join(build, "bench", "bench_explorer")
    if not os.path.exists(exe):
        print("run_all: bench_explorer not built (TIERLAB_GUI off): explorer figures skipped")
        return []
    args = ["--changes", "5", "--tokens", "4096"] if quick else []
    text = run([exe] + args, env={"QT_QPA_PLATFORM": "offscreen"})
    sys.stdout.write(text)
    return [
        Figure("explorer.change_ms", "explorer budget change: median", "ms",
               grab(r"re-plot: median ([0-9.]+) ms", text, "the budget change's median"),
               target=None if quick else 50.0, better="lower"),
        Figure("explorer.obs_ms", "explorer: 128 observation queries after a change", "ms",
               grab(r"observation queries, median ([0-9.]+) ms", text, "the observation queries' median"), better="lower"),
    ]


def bench_paper_cell(build, quick, previous):
    """One reduced paper/01 cell (bench/bench_paper_cell.py): seconds, distance to the machine's limit, and with
    --previous the ratio to the binary built before a change (issue 38's targets: a tenth of the time)."""
    cmd = [sys.executable, os.path.join(REPO, "bench", "bench_paper_cell.py"), "--build", build,
           "--tokens", "4096", "--layers", "1" if quick else "2"]
    if previous:
        cmd += ["--previous", previous]
    j = run_json(cmd)
    c = j["cells"][0]
    figs = [
        Figure("paper_cell.seconds", f"paper/01 cell, T = 4096, {c['kv_heads']} KV heads: seconds", "s", c["seconds"],
               better="lower"),
        # Issue 38 began at 12-13x from the limit on an idle machine (docs/performance.md): a tenth of that time.
        Figure("paper_cell.limit_ratio", "paper/01 cell: actual / the hardware's limit (GEMM rate, bandwidth)", "x",
               c["seconds"] / c["limit_s"], target=None if quick else 1.3, better="lower"),
    ]
    if "previous_seconds" in c:
        figs.append(Figure("paper_cell.vs_previous", "paper/01 cell: this binary / the previous one", "x",
                           c["seconds"] / c["previous_seconds"], target=None if quick else 0.1, better="lower",
                           note="" if c.get("previous_identical") else "cell results differ"))
    return figs


def bench_build():
    """A fresh `bash setup.sh` in two measured parts: apt's (bench/apt_time.sh: the packages a minimal
    Debian 12 would need, downloaded and reinstalled here, as root) and a clean setup.sh into a fresh
    folder (the packages installed, so apt does nothing there): the programs; then `cmake --build` of
    the rest (the tests), as the README's test command does. Without root only the build is timed."""
    figs = []
    apt_s = None
    if os.geteuid() == 0:
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            run(["bash", os.path.join(REPO, "bench", "apt_time.sh"), "--json", f.name], quiet=True)
            apt = json.load(open(f.name))
        apt_s = apt["update_s"] + apt["download_s"] + apt["install_s"]
        print(f"apt (bench/apt_time.sh): {apt['packages']} packages, {apt['download_mb']} MB: update {apt['update_s']} s, "
              f"download {apt['download_s']} s, unpack and configure {apt['install_s']} s")
        figs.append(Figure("build.apt_s", f"apt for a fresh Debian 12 ({apt['packages']} packages, {apt['download_mb']} MB; "
                           "bench/apt_time.sh): seconds", "s", apt_s, better="lower"))
    else:
        print("apt part not measured (bench/apt_time.sh reinstalls packages: needs root)")
    work = tempfile.mkdtemp(prefix="tierlab_build.")
    try:
        t0 = time.perf_counter()
        run(["bash", os.path.join(REPO, "setup.sh")], env={"TIERLAB_BUILD_DIR": os.path.join(work, "build")}, quiet=True)
        secs = time.perf_counter() - t0
        t1 = time.perf_counter()
        run(["cmake", "--build", os.path.join(work, "build"), "-j", str(os.cpu_count() or 1)], quiet=True)
        tests = time.perf_counter() - t1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"clean build (bash setup.sh, packages installed): {secs:.0f} s; then the tests: {tests:.0f} s")
    figs.append(Figure("build.clean_s", "clean bash setup.sh (packages installed): seconds", "s", secs,
                       target=None if apt_s is not None else 360.0, better="lower"))
    if apt_s is not None:
        figs.append(Figure("build.fresh_s", "fresh bash setup.sh, apt included (the two rows above): seconds", "s",
                           apt_s + secs, target=360.0, better="lower"))
    figs.append(Figure("build.tests_s", "then the tests (cmake --build, the README's test command): seconds", "s", tests,
                       better="lower"))
    return figs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--only", default="", help="comma-separated: recompute,recompute-load,solver,capture,explorer,"
                                                "paper-cell,build (build only when named: a clean build takes minutes)")
    ap.add_argument("--previous", help="paper-cell: a tierlab binary built before a change, run side by side")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    if a.quick and a.record:
        raise SystemExit("run_all: --record takes a full run, not --quick")
    if find_shared() is None:
        print("run_all: ../shared/bench (the peer baselines) not found beside the repository: nothing to compare with")
        return 77
    # The benchmarks are not in the default build (bench/CMakeLists.txt): build them here.
    built = subprocess.run(["cmake", "--build", build, "--target", "benches"], capture_output=True, text=True)
    if built.returncode != 0:
        raise SystemExit(f"run_all: `cmake --build {build} --target benches` failed:\n{built.stdout[-2000:]}{built.stderr[-2000:]}")
    for exe in ("bench_recompute_cpu", "bench_solver", "bench_capture"):
        if not os.path.exists(os.path.join(build, "bench", exe)):
            raise SystemExit(f"run_all: {build}/bench/{exe} missing: build with -DTIERLAB_BENCH=ON first")
    only = set(x for x in a.only.split(",") if x)
    want = lambda name: not only or name in only
    cores = os.cpu_count() or 1
    started = datetime.datetime.now()
    load_before = loadavg()
    figs = []
    if want("recompute"):
        figs += bench_recompute(build, a.quick, 0)
    if want("recompute-load"):
        figs += bench_recompute(build, a.quick, 1 if a.quick else cores)
    if want("solver"):
        figs += bench_solver(build, a.quick, 2.0, cbc=True)
        figs += bench_solver(build, a.quick, 12.345, cbc=False)
    if want("capture"):
        figs += bench_capture(build, a.quick)
    if want("explorer"):
        figs += bench_explorer(build, a.quick)
    if want("paper-cell"):
        figs += bench_paper_cell(build, a.quick, a.previous)
    if "build" in only:
        figs += bench_build()
    load_after = loadavg()
    minutes = (datetime.datetime.now() - started).total_seconds() / 60

    documented = {}
    if os.path.exists(DOCUMENTED):
        with open(DOCUMENTED) as f:
            documented = json.load(f)
    doc_vals = documented.get("figures", {})
    print()
    print(f"run_all {started:%Y-%m-%d %H:%M}: {cores} cores, load average {load_before} before, {load_after} after, "
          f"{minutes:.1f} min{'; QUICK sizes: not comparable, targets not checked' if a.quick else ''}")
    if documented:
        print(f"documented: {documented.get('date', '?')}, load {documented.get('load', '?')} (bench/documented.json)")
    print()
    print("| figure | documented | now | now / documented | target | met |")
    print("|---|---|---|---|---|---|")
    missed = []
    for g in figs:
        d = doc_vals.get(g.key)
        ratio = f"{g.value / d:.2f}" if d else ""
        met = "" if a.quick else {None: "", True: "yes", False: "**no**"}[g.meets()]
        if not a.quick and g.meets() is False:
            missed.append(g)
        now = fmt(g.value) + g.unit_suffix()
        doc = (fmt(d) + g.unit_suffix()) if d is not None else "-"
        print(f"| {g.label} | {doc} | {now} | {ratio} | {g.target_text()} | {met}{' (' + g.note + ')' if g.note else ''} |")
    result = {"date": f"{started:%Y-%m-%d}", "load": f"{load_before} before, {load_after} after",
              "cores": cores, "quick": a.quick, "figures": {g.key: g.value for g in figs}}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    if a.record:
        merged = dict(doc_vals)
        merged.update(result["figures"])
        tmp = DOCUMENTED + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"date": result["date"], "load": result["load"], "cores": cores, "figures": merged}, f, indent=1)
            f.write("\n")
        os.replace(tmp, DOCUMENTED)
        print(f"\nrecorded into {DOCUMENTED}")
    if missed:
        print("\nmissed targets: " + "; ".join(f"{g.label} = {fmt(g.value)}{g.unit_suffix()} (target {g.target_text()})"
                                             for g in missed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
