#!/usr/bin/env python3
"""docs/extending.md is checked against the code as it is: every file of the repository it names exists
(placeholders such as <name> aside), and every function or type it names in backticks
(`name(` or `Name`) is declared somewhere in the sources. Stdlib only.

usage: test_extending_docs.py REPO"""
import pathlib
import re
import sys

repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[1])
doc = (repo / "docs" / "extending.md").read_text()
sources = "\n".join(p.read_text(errors="replace") for d in ("model", "solvers", "gpu", "scenarios", "gui", "python")
                    for p in (repo / d).rglob("*") if p.suffix in (".hpp", ".cpp", ".h") or p.name == "CMakeLists.txt")
sources += (repo / "tests" / "CMakeLists.txt").read_text()
problems = []
TOP = {"model", "solvers", "gpu", "gui", "scenarios", "tests", "docs", "python", "bench", "tools", "data", "deps"}

# File paths: a/b.ext, a/b.{hpp,cpp}, tests/x.cpp (not those with a <placeholder>).
for m in re.finditer(r"(?<![\w/.-])((?:[a-z0-9_]+/)+[A-Za-z0-9_]+(?:\.\{[a-z,]+\}|\.[a-z]+))", doc):
    path = m.group(1)
    if "<" in path or path.split("/")[0] not in TOP:  # placeholders; a run's outputs (tables/x.json)
        continue
    if "{" in path:
        stem, exts = path.split(".{")
        names = [stem + "." + e for e in exts.rstrip("}").split(",")]
    else:
        names = [path]
    for n in names:
        if not (repo / n).exists():
            problems.append(f"docs/extending.md names {n}, which is not in the repository")

# Functions named in backticks as `name(...)` and type-like `CamelCase` names.
for m in re.finditer(r"`([A-Za-z_][A-Za-z0-9_:]*)\(", doc):
    name = m.group(1).split("::")[-1]
    if not re.search(r"\b" + re.escape(name) + r"\s*\(", sources):
        problems.append(f"docs/extending.md names the function {name}(), which no source declares")
for m in re.finditer(r"`([A-Z][A-Za-z0-9]+)`", doc):
    name = m.group(1)
    if not re.search(r"\b(struct|class|enum class|using)\s+" + re.escape(name) + r"\b", sources):
        problems.append(f"docs/extending.md names the type {name}, which no source declares")

for p in sorted(set(problems)):
    print(p)
print(f"{len(set(problems))} problem(s)")
sys.exit(1 if problems else 0)
