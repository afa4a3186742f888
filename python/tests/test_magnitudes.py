"""Finite inputs that would overflow float32 are refused (docs/model.md section 12, convention 10;
issue 33): a trace whose keys approach the float32 maximum, or whose logits q.k would overflow,
gave -nan and inf results with exit status 0 from eval and solve. The file is written here by an
independent safetensors writer (the format's spec), so no tierlab writer check is involved."""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

import tierlab
from conftest import cli_path, read_safetensors


def write_safetensors(path, tensors, meta):
    header = {"__metadata__": meta}
    blobs, offset = [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def scaled_trace(src, dst, key_scale, query_scale):
    """The trace src with every head's keys (prompt, pre-RoPE, decode) scaled so the largest
    key element is key_scale, and the queries multiplied by query_scale."""
    tensors, meta = read_safetensors(src)
    out = {}
    for name, arr in tensors.items():
        a = arr.astype(np.float64)
        if name.endswith(("keys", "keys_pre_rope")):
            a = a / np.abs(a).max() * key_scale
        elif name.endswith("queries"):
            a = a * query_scale
        out[name] = a.astype(np.float32)
    assert all(np.isfinite(a).all() for a in out.values())
    write_safetensors(dst, out, meta)


@pytest.mark.parametrize("key_scale, query_scale", [(3e38, 1.0), (1e20, 1e20)], ids=["keys near float32 max", "logits overflow"])
@pytest.mark.parametrize("command", [["eval", "--policy", "kivi:2"], ["eval", "--policy", "token:2"], ["solve", "--budget", "2"]],
                         ids=["eval kivi", "eval token", "solve"])
def test_finite_keys_or_queries_beyond_float32s_range_are_refused_naming_the_head_not_printed_as_nan(
        workdir, tiny_trace_path, key_scale, query_scale, command):
    path = os.path.join(workdir, f"scaled-{key_scale:g}-{query_scale:g}.safetensors")
    scaled_trace(tiny_trace_path, path, key_scale, query_scale)
    p = subprocess.run([cli_path(), *command, path], capture_output=True, text=True)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "nan" not in p.stdout and "inf" not in p.stdout
    assert f"trace '{path}', head L0.H0: its largest key norm is K = " in p.stderr
    assert "convention 10" in p.stderr
    with pytest.raises(tierlab.InputError, match="head L0.H0"):
        tierlab.open_trace(path).head(0, 0).load()  # the head's values are read (and checked) on load


def test_a_head_built_in_python_beyond_the_range_is_refused_as_the_reader_refuses_it(tiny_trace):
    h = tiny_trace.head(0, 0).load()
    keys = np.asarray(h.keys, dtype=np.float64)
    big = (keys / np.abs(keys).max() * 3e38).astype(np.float32)
    with pytest.raises(tierlab.InputError, match="tierlab.Head: its largest key norm is K = "):
        tierlab.Head(keys=big, values=np.asarray(h.values), obs_queries=np.asarray(h.obs_queries))


def test_a_trace_just_inside_the_range_is_evaluated_with_finite_numbers(workdir, tiny_trace_path):
    path = os.path.join(workdir, "scaled-inside.safetensors")
    scaled_trace(tiny_trace_path, path, 1e17, 1.0)  # K about 4e17, Q K far below 2^120
    p = subprocess.run([cli_path(), "eval", "--policy", "kivi:2", path], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "nan" not in p.stdout and "inf" not in p.stdout
