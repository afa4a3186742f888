#!/usr/bin/python3
"""tools/capture_hf.py checks every option before it loads a model, and says which one is
wrong (issue 15, item 27). Runs without PyTorch: the checks come before the import is needed."""
import subprocess
import sys
import os

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "capture_hf.py")
CASES = [
    (["--prompt-ids", ""], "--prompt-ids is empty"),
    (["--prompt-ids", "1,x"], "'x' is not a non-negative integer token id"),
    (["--prompt-ids", "1,-3"], "'-3' is not a non-negative integer token id"),
    (["--prompt-ids", "1,2", "--obs-window", "5"], "--obs-window is 5, longer than the 2 prompt ids"),
    (["--prompt-ids", "1,2,3", "--obs-window", "0"], "the observation window W must be at least 1"),
    (["--prompt-ids", "1,2", "--decode-steps", "-1"], "--decode-steps is -1"),
    (["--prompt-file", "/nonexistent/prompt.txt"], "is not a readable file"),
    (["--prompt", "  "], "--prompt is empty"),
]


def main():
    failures = 0
    for extra, expect in CASES:
        args = [sys.executable, TOOL, "--model", "never-loaded", "--decode-steps", "1", "-o", "/tmp/never.safetensors"] + extra
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ok = p.returncode == 2 and expect in p.stderr and "Traceback" not in p.stderr
        print(("ok   " if ok else "FAIL ") + " ".join(extra) + " -> " + p.stderr.strip().splitlines()[-1])
        failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
