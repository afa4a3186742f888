#!/usr/bin/env python3
"""Every test's name fits the console width of Catch2's reporter.

Catch2 2.x prints a failing test's name wrapped at CATCH_CONFIG_CONSOLE_WIDTH, continuation
lines indented to just after the name's first ": ". A name whose first ": " ends at or past the
width aborts the reporter (an assertion inside Catch) and the failure it was reporting is never
printed: CI once showed only "Assertion `m_column.m_width > m_column.m_indent' failed".
The tests link Debian's prebuilt Catch2WithMain (compiling Catch's own main would add about
16 s of compilation to every fresh build), built with the header's default width. This script
reads that width from the header (catch2/catch.hpp) and the names from `ctest -N` in the build
folder, and fails naming every test whose colon lies too far in.

Usage: test_test_names.py BUILD_DIR   (standard library only)
"""
import os
import re
import subprocess
import sys

build = sys.argv[1]
header = os.environ.get("CATCH_HEADER", "/usr/include/catch2/catch.hpp")
m = re.search(r"#define CATCH_CONFIG_CONSOLE_WIDTH (\d+)", open(header).read())
if not m:
    sys.exit(f"{header}: no '#define CATCH_CONFIG_CONSOLE_WIDTH N'")
width = int(m.group(1))
listing = subprocess.run(["ctest", "-N"], cwd=build, capture_output=True, text=True, check=True).stdout
names = re.findall(r"^\s*Test\s+#\d+: (.*)$", listing, re.M)
if len(names) < 10:
    sys.exit(f"ctest -N in {build} listed {len(names)} tests: is it a built tierlab build folder?")
bad = []
for name in names:
    i = name.find(": ")
    # Catch's Column needs width - 1 (its text width) > indent = i + 2.
    if i >= 0 and i + 2 >= width - 1:
        bad.append(f"  first ': ' at column {i} (width {width}): {name}")
if bad:
    print(f"{len(bad)} test name(s) would abort Catch's reporter on failure; shorten the part before the colon:")
    print("\n".join(bad))
    sys.exit(1)
print(f"{len(names)} test names fit the console width {width}")
