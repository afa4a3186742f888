#!/usr/bin/env python3
"""The specification the code cites is in the repository (issue 39).

Comments, docstrings and docs cite the project's specification as
"docs/model.md section N" (also "sections N, M and K"), "docs/model.md convention N"
(the numbered list of docs/model.md's "Conventions" section) and
"docs/methods.md section N". This script scans the source tree and fails when

  - a cited section is not a numbered heading ("## N. ...") of that file,
  - a cited convention is not an item of docs/model.md's numbered list of conventions,
  - any scanned file names MODEL.md or METHODS.md (reference notes that are not in the
    repository; the specification is docs/model.md and docs/methods.md).

Usage: test_spec_citations.py [REPO_ROOT]   (default: the folder above tests/)
Standard library only; exit status 0 when every citation resolves.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
SCAN_DIRS = ["model", "solvers", "gpu", "scenarios", "gui", "python", "tests", "bench", "tools", "docs"]
SCAN_TOP_FILES = ["README.md", "CMakeLists.txt", "setup.sh"]
EXTENSIONS = (".cpp", ".hpp", ".h", ".cu", ".cuh", ".py", ".md", ".txt", ".yaml", ".yml", ".sh", ".cmake", ".ui")
SKIP_DIRS = {".git", "__pycache__", "node_modules"}

# A comment or docstring line break inside a citation ("docs/model.md\n// section 8"): the next
# line's comment marker is dropped so that the citation reads as one phrase.
LINE_BREAK = re.compile(r"[ \t]*\r?\n[ \t]*(?:(?://+|#+|\*+|\"\"\"|-)(?=[ \t]))?[ \t]*")
NUMBER_LIST = r"(\d+(?:\.\d+)*(?:\s*(?:,|and|,\s*and)\s*\d+(?:\.\d+)*)*)"
SECTION_CITE = re.compile(r"docs/(model|methods)\.md['’]?s?,?\s+\(?sections?\s+" + NUMBER_LIST)
CONVENTION_CITE = re.compile(r"\bconventions?\s+" + NUMBER_LIST)
FORBIDDEN = re.compile(r"(?<![\w/.-])(MODEL|METHODS)\.md")
HEADING = re.compile(r"^#{2,6}\s+(\d+(?:\.\d+)*)\.?\s+\S", re.M)


def numbers(text):
    return re.findall(r"\d+(?:\.\d+)*", text)


def read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def sections_of(path):
    return set(HEADING.findall(read(path)))


def conventions_of(path):
    """Items of the numbered list under the heading whose title says Conventions."""
    text = read(path)
    m = re.search(r"^(#{2,6})\s+\d+(?:\.\d+)*\.?\s+Conventions\b.*$", text, re.M)
    if not m:
        return set()
    rest = text[m.end():]
    end = re.search(r"^#{2,6}\s", rest, re.M)
    body = rest[: end.start()] if end else rest
    return set(re.findall(r"^(\d+)\.\s", body, re.M))


def source_files():
    for top in SCAN_TOP_FILES:
        p = os.path.join(ROOT, top)
        if os.path.isfile(p):
            yield p
    for d in SCAN_DIRS:
        base = os.path.join(ROOT, d)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(n for n in dirnames if n not in SKIP_DIRS and not n.startswith("build"))
            for name in sorted(filenames):
                if name.endswith(EXTENSIONS):
                    yield os.path.join(dirpath, name)


def line_of(text, index):
    return text.count("\n", 0, index) + 1


def main():
    spec = {
        "model": os.path.join(ROOT, "docs", "model.md"),
        "methods": os.path.join(ROOT, "docs", "methods.md"),
    }
    failures = []
    for kind, path in spec.items():
        if not os.path.isfile(path):
            failures.append(f"docs/{kind}.md is missing")
    if failures:
        print("\n".join(failures))
        return 1
    sections = {kind: sections_of(path) for kind, path in spec.items()}
    conventions = conventions_of(spec["model"])
    if not sections["model"] or not sections["methods"]:
        print("no numbered sections ('## N. Title') found in docs/model.md or docs/methods.md")
        return 1
    if not conventions:
        print("docs/model.md has no numbered list of conventions under a 'N. Conventions' heading")
        return 1

    n_sections = n_conventions = 0
    for path in source_files():
        rel = os.path.relpath(path, ROOT)
        if os.path.abspath(path) == os.path.abspath(__file__):
            continue  # this script names the forbidden files in order to forbid them
        raw = read(path)
        for m in FORBIDDEN.finditer(raw):
            failures.append(f"{rel}:{line_of(raw, m.start())}: cites {m.group(0)}, which is not in the repository "
                            f"(cite docs/{m.group(1).lower()}.md and its section)")
        # Join wrapped comment lines, keeping a map back to the original line numbers.
        joined, offsets, pos = [], [], 0
        for m in LINE_BREAK.finditer(raw):
            joined.append(raw[pos:m.start()])
            offsets.append((sum(len(s) for s in joined), line_of(raw, m.start()) + 1))
            joined.append(" ")
            pos = m.end()
        joined.append(raw[pos:])
        text = "".join(joined)

        def line(index):
            n = 1
            for off, ln in offsets:
                if off <= index:
                    n = ln
                else:
                    break
            return n

        for m in SECTION_CITE.finditer(text):
            kind = m.group(1)
            for num in numbers(m.group(2)):
                n_sections += 1
                if num not in sections[kind]:
                    failures.append(f"{rel}:{line(m.start())}: cites docs/{kind}.md section {num}, which has no "
                                    f"heading '## {num}. ...' (sections: {', '.join(sorted(sections[kind], key=lambda s: [int(x) for x in s.split('.')]))})")
        for m in CONVENTION_CITE.finditer(text):
            for num in numbers(m.group(1)):
                n_conventions += 1
                if num not in conventions:
                    failures.append(f"{rel}:{line(m.start())}: cites convention {num}; docs/model.md's conventions "
                                    f"are 1..{max(int(c) for c in conventions)}")

    if n_sections < 20:
        failures.append(f"only {n_sections} section citations found: is the scan looking in the right place ({ROOT})?")
    if failures:
        print("\n".join(failures))
        print(f"{len(failures)} problem(s); {n_sections} section and {n_conventions} convention citations checked")
        return 1
    print(f"ok: {n_sections} section citations and {n_conventions} convention citations resolve in docs/model.md "
          f"(sections {len(sections['model'])}, conventions {len(conventions)}) and docs/methods.md "
          f"(sections {len(sections['methods'])}); no file cites MODEL.md or METHODS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
