#!/usr/bin/env python3
"""The sources of a unity target (tierlab_unity in CMakeLists.txt) are compiled together, a few
to a unit. Two of them defining the same name with internal linkage (inside `namespace {`, or
`static` at namespace scope) either fail to compile or, worse, let one file call the other's
overload without a word. This test reads the source lists the configure step wrote
(BUILD/unity_sources/TARGET.txt) and fails naming every such name defined in two files of
one target.

The scan is textual: comments, strings and character literals are blanked, braces are
tracked, and at the scope of an anonymous namespace (and `static` at any namespace scope)
each declaration's name is taken: the name before its first "(" (a function), before "=",
"{" or ";" (a variable), or after struct/class/enum/using (a type).

    test_unity_names.py BUILD_DIR
    test_unity_names.py --self-test
"""
import os
import re
import sys

KEYWORDS = {"const", "constexpr", "inline", "static", "extern", "thread_local", "unsigned", "signed",
            "operator", "return", "template", "typename", "if", "for", "while", "switch", "sizeof",
            "decltype", "noexcept", "override", "final", "volatile", "mutable", "auto"}


def blank(text):
    """Comments, string and character literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            if c == "'" and i > 0 and (text[i - 1].isalnum()):  # digit separator 1'000
                out.append(c); i += 1; continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def declared_name(stmt):
    """The name a namespace-scope declaration introduces, or None."""
    s = re.sub(r"\s+", " ", stmt).strip()
    s = re.sub(r"^template ?<.*?> ?", "", s)
    if not s or s.startswith("#") or s.startswith("namespace") or s.startswith("using namespace"):
        return None
    m = re.match(r"(?:enum(?: class)?|struct|class|union) (\w+)", s)
    if m:
        return m.group(1)
    m = re.match(r"using (\w+) ?=", s)
    if m:
        return m.group(1)
    head = re.split(r"[=({;]", s, 1)[0]
    m = re.search(r"(~?\w+)\s*(?:\[[^\]]*\]\s*)*$", head)
    if not m:
        return None
    name = m.group(1)
    if name in KEYWORDS or name.isdigit():
        return None
    if re.search(r"\boperator\b", head):
        return None
    return name


def internal_names(text):
    """Names with internal linkage defined at namespace scope: {name: line}."""
    text = blank(text)
    # Preprocessor lines are not declarations.
    text = re.sub(r"^[ \t]*#[^\n]*(?:\\\n[^\n]*)*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.M)
    names = {}
    stack = []  # "anon", "ns" or "block"
    stmt_start = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "{;}":
            stmt = text[stmt_start:i]
            at_ns = all(k in ("anon", "ns") for k in stack)
            if c == "{":
                m = re.search(r"\bnamespace\s*([\w:]*)\s*$", stmt)
                if at_ns and m:
                    stack.append("anon" if not m.group(1) else "ns")
                    stmt_start = i + 1; i += 1; continue
                if re.search(r"\bextern\s*$", stmt.strip().rsplit('"', 1)[0] + " ") and at_ns:
                    stack.append("ns"); stmt_start = i + 1; i += 1; continue
            if at_ns and c in "{;":
                internal = "anon" in stack or re.match(r"\s*(?:template\s*<[^>]*>\s*)?static\b", stmt)
                if internal and (c == "{" or not re.search(r"^\s*(?:using\s+namespace|namespace)\b", stmt)):
                    name = declared_name(stmt)
                    if name:
                        names.setdefault(name, text.count("\n", 0, stmt_start + len(stmt) - len(stmt.lstrip())) + 1)
            if c == "{":
                stack.append("block")
            elif c == "}":
                if stack:
                    stack.pop()
            stmt_start = i + 1
            # A declaration's body: skip to its end at the same depth so nothing inside counts.
        i += 1
    return names


def clashes(sources):
    seen = {}
    for path in sources:
        with open(path, encoding="utf-8") as f:
            for name, line in internal_names(f.read()).items():
                seen.setdefault(name, []).append(f"{path}:{line}")
    return {k: v for k, v in seen.items() if len(v) > 1}


def self_test():
    a = """
namespace tierlab {
namespace {
const double kScale = 2.0;  // a comment with parse(
struct Row { int x; };
std::string fmt(double v, const char* f) { if (v) { return "x{"; } return f; }
template <typename T> T twice(T t) { return t + t; }
}  // namespace
static int counter = 0;
int visible(int x) { return x; }
}  // namespace tierlab
"""
    got = internal_names(a)
    assert set(got) == {"kScale", "Row", "fmt", "twice", "counter"}, got
    assert "visible" not in got and "x" not in got
    b = "namespace tierlab { namespace detail { int helper(); } namespace { int fmt(int v) { return v; } } }"
    assert set(internal_names(b)) == {"fmt"}, internal_names(b)
    print("self-test passed")


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        self_test()
        return 0
    build = sys.argv[1]
    folder = os.path.join(build, "unity_sources")
    lists = sorted(f for f in os.listdir(folder) if f.endswith(".txt"))
    if not lists:
        print(f"test_unity_names: no source lists in {folder}")
        return 1
    bad = 0
    for lst in lists:
        with open(os.path.join(folder, lst), encoding="utf-8") as f:
            sources = [s for s in f.read().split("\n") if s]
        for name, where in sorted(clashes(sources).items()):
            bad += 1
            print(f"{lst[:-4]}: `{name}` has internal linkage in {len(where)} of its sources: " + ", ".join(where))
        print(f"{lst[:-4]}: {len(sources)} sources checked")
    if bad:
        print(f"{bad} name(s) defined in more than one source of a unity target: rename them or share one "
              "definition in a header (CMakeLists.txt, tierlab_unity)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
