#!/usr/bin/python3
"""Compare two output folders of `tierlab run` for the same scenario, number by number.

    tools/compare_runs.py OLD NEW [--rtol R] [--atol X] [--json FILE]
    tools/compare_runs.py --self-test

What is compared (each folder as `tierlab run --out DIR` writes it):

* cells/*.json, field by field, the timings aside (`seconds`, `phases`, `content_hash`): how many
  numbers differ and by how much (relative: |a - b| / max(|a|, |b|)), per field name; integers
  (counts, tiers, options), strings and booleans that differ; fields present in one folder only
  (e.g. fields added to the cell format since the older run);
* tables/*.csv as printed (the tables' own precision, so "identical to the last printed
  digit" is a count of zero), column by column, rows in file order; tables/*.json like the cells;
* summary.md, line by line, the output folder's own name aside.

Exit status: 0 when every numeric difference is within --rtol or --atol (both 0 by default:
identical) and nothing else differs (no integer, string, row or field that only one side has,
fields only the newer side has aside); 1 otherwise; 2 when a folder cannot be read.
Standard library only.
"""
import argparse
import csv
import difflib
import json
import math
import os
import re
import sys
import tempfile

TIMINGS = {"seconds", "phases", "content_hash"}


class Unreadable(Exception):
    """A folder or file that cannot be read (exit status 2)."""


class Stats:
    """Differences found in one group of files (the cells, or one table)."""

    def __init__(self):
        self.numbers = 0          # floats compared
        self.differing = 0        # floats that differ at all
        self.beyond = 0           # floats that differ beyond the tolerance
        self.max_rel = 0.0
        self.max_rel_at = ""
        self.max_abs = 0.0
        self.max_abs_at = ""
        self.by_field = {}        # field or column -> [differing, max rel, max abs]
        self.discrete = []        # (where, old, new): integers, strings, booleans, shapes
        self.only_old = []        # fields or files only in OLD
        self.only_new = []        # fields or files only in NEW

    def number(self, where, field, a, b, rtol, atol):
        self.numbers += 1
        if a == b or (math.isnan(a) and math.isnan(b)):
            return
        self.differing += 1
        if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
            rel = absd = math.inf
        else:
            absd = abs(a - b)
            rel = absd / max(abs(a), abs(b))
        if rel > rtol and absd > atol:
            self.beyond += 1
        if rel > self.max_rel:
            self.max_rel, self.max_rel_at = rel, f"{where}: {a!r} -> {b!r}"
        if absd > self.max_abs:
            self.max_abs, self.max_abs_at = absd, f"{where}: {a!r} -> {b!r}"
        f = self.by_field.setdefault(field, [0, 0.0, 0.0])
        f[0] += 1
        f[1] = max(f[1], rel)
        f[2] = max(f[2], absd)

    def failed(self):
        return self.beyond > 0 or self.discrete or self.only_old

    def as_dict(self):
        return {
            "numbers": self.numbers, "differing": self.differing, "beyond_tolerance": self.beyond,
            "max_rel": self.max_rel, "max_rel_at": self.max_rel_at, "max_abs": self.max_abs,
            "max_abs_at": self.max_abs_at,
            "by_field": {k: {"differing": v[0], "max_rel": v[1], "max_abs": v[2]} for k, v in self.by_field.items()},
            "discrete": [list(map(str, d)) for d in self.discrete], "only_old": self.only_old,
            "only_new": self.only_new,
        }


def is_float(x):
    return isinstance(x, float)


def is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def walk(a, b, path, field, st, rtol, atol):
    """JSON values a (OLD) and b (NEW) at path; field = the innermost key (for per-field counts)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k in TIMINGS:
                continue
            if k not in b:
                st.only_old.append(f"{path}/{k}")
            else:
                walk(a[k], b[k], f"{path}/{k}", k, st, rtol, atol)
        for k in b:
            if k not in a and k not in TIMINGS:
                st.only_new.append(f"{path}/{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            st.discrete.append((f"{path} (length)", len(a), len(b)))
            return
        for i, (u, v) in enumerate(zip(a, b)):
            walk(u, v, f"{path}[{i}]", field, st, rtol, atol)
    elif (is_float(a) or is_float(b)) and (is_float(a) or is_int(a)) and (is_float(b) or is_int(b)):
        st.number(path, field, float(a), float(b), rtol, atol)
    elif a != b or type(a) is not type(b):
        st.discrete.append((path, a, b))


def parse_number(s):
    try:
        return float(s)
    except ValueError:
        return None


def compare_csv(pa, pb, name, st, rtol, atol):
    with open(pa, newline="") as f:
        ra = list(csv.reader(f))
    with open(pb, newline="") as f:
        rb = list(csv.reader(f))
    if not ra or not rb or ra[0] != rb[0]:
        st.discrete.append((f"{name}: header", ra[0] if ra else None, rb[0] if rb else None))
        return
    header = ra[0]
    if len(ra) != len(rb):
        st.discrete.append((f"{name}: rows", len(ra) - 1, len(rb) - 1))
    for i, (x, y) in enumerate(zip(ra[1:], rb[1:]), start=2):
        key = x[0] if x else ""
        for j, col in enumerate(header):
            u = x[j] if j < len(x) else ""
            v = y[j] if j < len(y) else ""
            nu, nv = parse_number(u), parse_number(v)
            # An integer column (counts, budgets) compares as text: any change is a discrete one.
            if nu is not None and nv is not None and not (re.fullmatch(r"-?\d+", u) and re.fullmatch(r"-?\d+", v)):
                st.number(f"{name} line {i} ({key}) {col}", col, nu, nv, rtol, atol)
            elif u != v:
                st.discrete.append((f"{name} line {i} ({key}) {col}", u, v))


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise Unreadable(f"{path}: cannot read it as JSON ({e})")


def files(folder, sub, ext):
    d = os.path.join(folder, sub)
    return sorted(f for f in os.listdir(d) if f.endswith(ext)) if os.path.isdir(d) else []


def compare(old, new, rtol=0.0, atol=0.0):
    """Everything compare_runs.py reports, as a dict of groups (name -> Stats) and the summary diff."""
    for d in (old, new):
        if not os.path.isdir(d):
            raise Unreadable(f"{d}: not a folder (give two output folders of `tierlab run`)")
    groups = {}
    cells = Stats()
    ca, cb = files(old, "cells", ".json"), files(new, "cells", ".json")
    cells.only_old += [f"cells/{f}" for f in ca if f not in cb]
    cells.only_new += [f"cells/{f}" for f in cb if f not in ca]
    for f in ca:
        if f in cb:
            walk(load_json(os.path.join(old, "cells", f)), load_json(os.path.join(new, "cells", f)), f[:-5], "",
                 cells, rtol, atol)
    groups["cells"] = (cells, len([f for f in ca if f in cb]))
    ta, tb = files(old, "tables", ""), files(new, "tables", "")
    for f in ta:
        st = Stats()
        if f not in tb:
            st.only_old.append(f"tables/{f}")
        elif f.endswith(".csv"):
            compare_csv(os.path.join(old, "tables", f), os.path.join(new, "tables", f), f, st, rtol, atol)
        elif f.endswith(".json"):
            walk(load_json(os.path.join(old, "tables", f)), load_json(os.path.join(new, "tables", f)), f, "", st,
                 rtol, atol)
        groups[f"tables/{f}"] = (st, 1)
    for f in tb:
        if f not in ta:
            st = Stats()
            st.only_new.append(f"tables/{f}")
            groups[f"tables/{f}"] = (st, 1)
    summary = []
    sa, sb = os.path.join(old, "summary.md"), os.path.join(new, "summary.md")
    if os.path.isfile(sa) != os.path.isfile(sb):
        summary = [f"summary.md only in {'OLD' if os.path.isfile(sa) else 'NEW'}"]
    elif os.path.isfile(sa):
        def lines(p, folder):
            name = os.path.basename(os.path.normpath(folder))
            with open(p) as fh:
                return [l.replace(name, "<out>") for l in fh.read().splitlines()]
        summary = [l for l in difflib.unified_diff(lines(sa, old), lines(sb, new), "OLD/summary.md", "NEW/summary.md",
                                                   lineterm="", n=0)]
    return groups, summary


def report(old, new, groups, summary, rtol, atol, out=sys.stdout):
    p = lambda *a: print(*a, file=out)
    p(f"OLD {old}\nNEW {new}\ntolerance: relative {rtol:g} or absolute {atol:g}")
    failed = False
    for name, (st, n) in groups.items():
        label = f"{name} ({n} files)" if name == "cells" else name
        p(f"\n{label}: {st.numbers} numbers, {st.differing} differing, {st.beyond} beyond the tolerance")
        if st.differing:
            p(f"  largest relative difference {st.max_rel:.3g} at {st.max_rel_at}")
            p(f"  largest absolute difference {st.max_abs:.3g} at {st.max_abs_at}")
            worst = sorted(st.by_field.items(), key=lambda kv: -kv[1][1])[:8]
            p("  by field (differing, max rel, max abs): " +
              "; ".join(f"{k or '-'} {v[0]}, {v[1]:.2g}, {v[2]:.2g}" for k, v in worst))
        if st.discrete:
            p(f"  {len(st.discrete)} non-numeric or integer differences, e.g.:")
            for d in st.discrete[:6]:
                p(f"    {d[0]}: {d[1]!r} -> {d[2]!r}")
        if st.only_old:
            p(f"  {len(st.only_old)} only in OLD, e.g. {', '.join(st.only_old[:4])}")
        if st.only_new:
            fields = sorted({re.sub(r"\[\d+\]", "[]", x.split('/', 1)[-1]) for x in st.only_new})
            p(f"  {len(st.only_new)} only in NEW (not a failure), e.g. {', '.join(fields[:4])}")
        failed = failed or bool(st.failed())
    if summary[:1] and summary[0].startswith("summary.md only"):
        p(f"\n{summary[0]}")
    else:
        p(f"\nsummary.md: {sum(1 for l in summary if l[:1] in '+-' and l[:3] not in ('+++', '---'))} lines differ"
          " (the output folder's name aside)")
    shown = [] if summary[:1] and summary[0].startswith("summary.md only") else summary[:40]
    for l in shown:
        p("  " + l)
    failed = failed or bool(summary)
    p("\nverdict: " + ("DIFFERENT beyond the tolerance" if failed else "the same within the tolerance"))
    return failed


def self_test():
    """Two small folders with known differences: each kind must be found, and only it."""
    def write(folder, cell, table, summary):
        os.makedirs(os.path.join(folder, "cells"))
        os.makedirs(os.path.join(folder, "tables"))
        with open(os.path.join(folder, "cells", "c1.json"), "w") as f:
            json.dump(cell, f)
        with open(os.path.join(folder, "tables", "t.csv"), "w") as f:
            f.write(table)
        with open(os.path.join(folder, "summary.md"), "w") as f:
            f.write(summary)
    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "runA"), os.path.join(tmp, "runB")
        write(a, {"seconds": 1.0, "A": 0.5, "err": [1.0, 2.0], "option": "M", "tiers": [1, 2]},
              "cell,budget,A,winner\nx,1,0.5,M\n", "verdict in runA\nsame\n")
        write(b, {"seconds": 9.0, "A": 0.5000001, "err": [1.0, 2.0], "option": "M", "tiers": [1, 2], "added": 3},
              "cell,budget,A,winner\nx,1,0.5,M\n", "verdict in runB\nsame\n")
        groups, summary = compare(a, b)
        c = groups["cells"][0]
        assert (c.numbers, c.differing, c.beyond) == (3, 1, 1), vars(c)
        assert abs(c.max_rel - 2e-7) < 1e-12 and c.max_rel_at.startswith("c1/A"), c.max_rel_at
        assert c.only_new == ["c1/added"] and not c.only_old and not c.discrete
        assert groups["tables/t.csv"][0].numbers == 1 and groups["tables/t.csv"][0].differing == 0
        assert summary == [], summary  # the folder name is not a difference
        assert report(a, b, groups, summary, 0.0, 0.0, out=open(os.devnull, "w"))
        groups, summary = compare(a, b, rtol=1e-6)
        assert not report(a, b, groups, summary, 1e-6, 0.0, out=open(os.devnull, "w"))
        # A changed option, tier and printed winner are differences whatever the tolerance.
        with open(os.path.join(b, "cells", "c1.json"), "w") as f:
            json.dump({"A": 0.5, "err": [1.0, 2.0], "option": "E", "tiers": [1, 3]}, f)
        with open(os.path.join(b, "tables", "t.csv"), "w") as f:
            f.write("cell,budget,A,winner\nx,2,0.5,E\nx,3,0.1,M\n")
        groups, summary = compare(a, b, rtol=1.0)
        c = groups["cells"][0]
        assert sorted(d[0] for d in c.discrete) == ["c1/option", "c1/tiers[1]"], c.discrete
        t = groups["tables/t.csv"][0]
        assert sorted(d[0] for d in t.discrete) == ["t.csv line 2 (x) budget", "t.csv line 2 (x) winner", "t.csv: rows"], t.discrete
        assert report(a, b, groups, summary, 1.0, 0.0, out=open(os.devnull, "w"))
    print("compare_runs.py self-test: ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", nargs="?", help="output folder of the earlier run")
    ap.add_argument("new", nargs="?", help="output folder of the later run")
    ap.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default 0: identical)")
    ap.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default 0)")
    ap.add_argument("--json", help="also write the counts to this file")
    ap.add_argument("--self-test", action="store_true", help="check the comparison on two small folders")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.old or not a.new:
        ap.error("give two output folders (OLD NEW), or --self-test")
    if a.rtol < 0 or a.atol < 0 or math.isnan(a.rtol) or math.isnan(a.atol):
        ap.error(f"--rtol and --atol are >= 0 (got {a.rtol}, {a.atol})")
    try:
        groups, summary = compare(a.old, a.new, a.rtol, a.atol)
    except (Unreadable, OSError, UnicodeDecodeError, csv.Error) as e:
        print(f"compare_runs.py: {e}", file=sys.stderr)
        return 2
    failed = report(a.old, a.new, groups, summary, a.rtol, a.atol)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"old": a.old, "new": a.new, "rtol": a.rtol, "atol": a.atol, "different": failed,
                       "groups": {k: v[0].as_dict() for k, v in groups.items()}, "summary_diff": summary}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
