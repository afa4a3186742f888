"""Layers, and layers inside the layers: every #include "..." of the project goes one way.

The rule (docs/design.md, "Layers inside the layers"): each folder below may include only
itself and the folders named in its row; nothing lower includes anything higher. The model
sub-folders are separate CMake targets (model/CMakeLists.txt) and the rows for them equal
those targets' links, which this test also reads, so the table and the build cannot drift
apart. Run by ctest; `python3 tests/test_layers.py` prints every violation.
"""
import pathlib
import re
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# folder -> the folders it may include (transitively closed below).
ALLOWED = {
    "model/base": [],
    "model/io": ["model/base"],
    "model/llama2c": ["model/io"],
    "model/quantizers": ["model/io"],
    "model/synthetic": ["model/io"],
    "model": ["model/llama2c", "model/quantizers", "model/synthetic"],
    "solvers": ["model"],
    "gpu": ["solvers"],
    "scenarios/io": ["gpu"],
    "scenarios/figures": ["scenarios/io"],
    "scenarios/pipeline": ["scenarios/figures"],
    "scenarios/methods": ["scenarios/pipeline"],
    "scenarios/scenario": ["scenarios/methods"],
    "scenarios/analyses": ["scenarios/scenario"],
    "scenarios/run": ["scenarios/analyses"],
    "scenarios/cli": ["scenarios/run"],
    "gui": ["scenarios/cli"],
    "python/src": ["scenarios/run"],
}
# Top-level folders that are not layers (they may include any layer).
FREE = ("tests", "bench", "tools")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def closure(folder):
    seen, pending = set(), [folder]
    while pending:
        f = pending.pop()
        for g in ALLOWED[f]:
            if g not in seen:
                seen.add(g)
                pending.append(g)
    return seen | {folder}


def layer_of(rel):
    """The deepest folder of ALLOWED that holds rel (a path from the root), or None."""
    best = None
    for folder in ALLOWED:
        if rel == folder or rel.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def violations():
    out = []
    for path in sorted(ROOT.glob("**/*")):
        rel = path.relative_to(ROOT).as_posix()
        if path.suffix not in (".cpp", ".hpp", ".h", ".cu", ".cuh") or rel.startswith(("build", "out/")):
            continue
        if rel.split("/")[0] in FREE:
            continue
        src = layer_of(rel)
        if src is None:
            continue
        ok = closure(src)
        for inc in INCLUDE.findall(path.read_text(errors="replace")):
            target = layer_of(inc)
            if target is None:
                continue  # a header of the same folder by a relative name, or a third-party one
            if target not in ok:
                out.append(f"{rel}: includes {inc} ({target} is not below {src})")
    return out


def cmake_links(part):
    text = (ROOT / "model" / "CMakeLists.txt").read_text()
    m = re.search(r"tierlab_model_part\(%s LINKS ([^)]*)\)" % part, text)
    return None if m is None else sorted(x[len("tierlab_model_"):] for x in m.group(1).split() if x.startswith("tierlab_model_"))


class Layers(unittest.TestCase):
    def test_every_include_goes_down_the_layers(self):
        bad = violations()
        self.assertEqual(bad, [], "\n".join(bad))

    def test_the_model_targets_link_what_the_table_allows(self):
        for part in ("base", "io", "llama2c", "quantizers", "synthetic"):
            want = sorted(f.split("/")[1] for f in ALLOWED["model/" + part])
            self.assertEqual(cmake_links(part), want, f"model/CMakeLists.txt: tierlab_model_part({part} ...)")

    def test_every_source_folder_has_a_row(self):
        folders = set()
        for path in ROOT.glob("**/*.[ch]pp"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.split("/")[0] in ("model", "solvers", "gpu", "scenarios", "gui", "python") and "/" in rel:
                top = rel.split("/")[0]
                if top in ("model", "scenarios"):
                    folders.add("/".join(rel.split("/")[:2]) if rel.count("/") >= 2 else top)
        missing = sorted(f for f in folders if f not in ALLOWED and not f.startswith("scenarios/files"))
        self.assertEqual(missing, [], "folders without a layer row: " + ", ".join(missing))

    def test_the_checker_finds_an_upward_include(self):
        # The rule itself: base may not include io, a run may include an analysis.
        self.assertNotIn("model/io", closure("model/base"))
        self.assertIn("scenarios/analyses", closure("scenarios/run"))
        self.assertNotIn("scenarios/run", closure("scenarios/pipeline"))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--list":
        print("\n".join(violations()) or "no violations")
        sys.exit(0)
    unittest.main()
