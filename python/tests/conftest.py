"""Shared fixtures of the Python package's tests (run by ctest: python/CMakeLists.txt sets
PYTHONPATH to BUILD/python, TIERLAB_CLI to the tierlab tool and TIERLAB_TEST_TMP)."""
import json
import os
import shutil
import struct
import subprocess
import tempfile

import numpy as np
import pytest

import tierlab

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli_path():
    path = os.environ.get("TIERLAB_CLI", os.path.join(REPO, "build", "tierlab"))
    if not os.path.exists(path):
        pytest.skip(f"the tierlab tool is not built ({path})")
    return path


def run_cli(*args):
    """Runs the tierlab tool; returns its stdout (raises with its stderr on failure)."""
    p = subprocess.run([cli_path(), *map(str, args)], capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(f"tierlab {' '.join(map(str, args))} failed ({p.returncode}): {p.stderr}")
    return p.stdout


def cli_json(*args):
    return json.loads(run_cli(*args, "--json"))


def read_safetensors(path):
    """An independent minimal safetensors reader (the format's spec): {name: array}, metadata."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": "<f4", "F16": "<f2", "I32": "<i4", "I64": "<i8", "U8": "u1"}
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b : 8 + n + e], dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return out, meta


@pytest.fixture(scope="session")
def workdir():
    base = os.environ.get("TIERLAB_TEST_TMP")
    if base:
        os.makedirs(base, exist_ok=True)
    path = tempfile.mkdtemp(prefix="pytest-", dir=base)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_trace_path(workdir):
    """A small synthetic trace written by the CLI (a path independent of the module)."""
    path = os.path.join(workdir, "tiny.safetensors")
    run_cli("synth", "--preset", "tiny", "--seed", "3", "--tokens", "192", "--decode-steps", "8", "-o", path)
    return path


@pytest.fixture(scope="session")
def tiny_trace(tiny_trace_path):
    return tierlab.open_trace(tiny_trace_path)
