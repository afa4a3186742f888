"""Traces in Python: opening, zero-copy views, building from NumPy arrays, writing, the
synthetic generator, and the messages of wrong input."""
import gc
import os
import re
import signal

import numpy as np
import pytest

import tierlab
from conftest import REPO, read_safetensors, run_cli


def test_the_package_reports_the_project_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        version = re.search(r"project\(tierlab VERSION ([0-9.]+)", f.read()).group(1)
    assert tierlab.__version__ == version
    assert tierlab._tierlab.__version__ == version


def test_every_public_name_has_a_docstring():
    for name in tierlab.__all__:
        obj = getattr(tierlab, name)
        if callable(obj):
            assert obj.__doc__ and obj.__doc__.strip(), name
    for cls in (tierlab.Trace, tierlab.Head, tierlab.Costs, tierlab.Solution, tierlab.Evaluation, tierlab.HeadErrors):
        for attr, value in vars(cls).items():
            if not attr.startswith("_") and isinstance(value, property):
                assert value.__doc__ is not None, f"{cls.__name__}.{attr}"


def test_opening_a_trace_reads_its_metadata(tiny_trace, tiny_trace_path):
    _, meta = read_safetensors(tiny_trace_path)
    t = tiny_trace
    assert t.path == tiny_trace_path
    assert (t.n_layers, t.n_kv_heads, t.group_size) == (int(meta["n_layers"]), int(meta["n_kv_heads"]), int(meta["group_size"]))
    assert (t.head_dim, t.prompt_len, t.obs_window, t.decode_steps) == (16, 192, 8, 8)
    assert t.storage_dtype == "F32"
    assert t.meta["prompt_len"] == 192 and t.meta["rope_theta"] == float(meta["rope_theta"])
    assert t.metadata == meta
    assert len(t) == 4
    assert "tiny" in t.provenance
    assert "192" in repr(t) and "Trace" in repr(t)


def test_opening_a_trace_gives_read_only_views_without_copying(tiny_trace, tiny_trace_path):
    tensors, _ = read_safetensors(tiny_trace_path)
    h = tiny_trace.head(1, 0)
    keys = h.keys
    assert keys.dtype == np.float32 and keys.shape == (192, 16)
    assert keys.flags.writeable is False
    assert keys.flags.owndata is False
    assert isinstance(keys.base, tierlab._tierlab._MappedTensor)
    assert keys.base.trace is tiny_trace
    assert keys.base.name == "layers.1.heads.0.keys"
    with pytest.raises(ValueError):
        keys[0, 0] = 1.0
    # Two views of one tensor share the mapped memory; nothing was copied.
    assert np.shares_memory(keys, tiny_trace.head(1, 0).keys)
    for field in ("keys", "keys_pre_rope", "values", "obs_queries", "decode_queries", "decode_keys", "decode_values"):
        np.testing.assert_array_equal(getattr(h, field), tensors[f"layers.1.heads.0.{field}"])
    assert h.obs_queries.shape == (2, 8, 16)
    assert h.file_backed and "view of" in repr(h)


def test_views_keep_the_trace_open_after_the_trace_object_is_dropped(tiny_trace_path):
    t = tierlab.open_trace(tiny_trace_path)
    values = t.head(0, 1).values
    expected = read_safetensors(tiny_trace_path)[0]["layers.0.heads.1.values"]
    del t
    gc.collect()
    np.testing.assert_array_equal(values, expected)


def test_loading_a_head_gives_the_cpp_readers_float32_copy(tiny_trace):
    view = tiny_trace.head(0, 0)
    copy = view.load()
    assert not copy.file_backed
    np.testing.assert_array_equal(copy.keys, view.keys)
    np.testing.assert_array_equal(copy.decode_queries, view.decode_queries)
    assert copy.keys.flags.writeable is False
    assert copy.keys.base is not None
    assert copy.spans == view.spans


def test_token_ids_and_any_tensor_read_by_name(tiny_trace):
    names = tiny_trace.tensor_names()
    assert "layers.0.heads.0.keys" in names and names == sorted(names)
    np.testing.assert_array_equal(tiny_trace.tensor("layers.0.heads.0.keys"), tiny_trace.head(0, 0).keys)
    with pytest.raises(tierlab.FormatError, match="no_such_tensor"):
        tiny_trace.tensor("no_such_tensor")


def test_the_python_synthetic_trace_is_byte_identical_to_the_cli_s(tiny_trace_path, workdir):
    calls = []
    p = tierlab.synthetic_params("tiny", seed=3, prompt_len=192, decode_steps=8)
    path = os.path.join(workdir, "tiny-py.safetensors")
    t = tierlab.write_synthetic(path, p, progress=lambda d, n: calls.append((d, n)))
    with open(path, "rb") as a, open(tiny_trace_path, "rb") as b:
        assert a.read() == b.read()
    assert calls[-1] == (4, 4) and len(calls) == 4
    head = tierlab.synthetic_head(p, 1, 1)
    np.testing.assert_array_equal(head.keys, t.head(1, 1).keys)
    np.testing.assert_array_equal(head.obs_queries, t.head(1, 1).obs_queries)
    assert "tiny" in tierlab.presets() and "llama-3.1-8b" in tierlab.presets()
    assert "preset=tiny" in repr(p)


def test_synthetic_parameters_are_validated_with_the_cpp_messages():
    with pytest.raises(tierlab.InputError, match="no parameter 'tokens'"):
        tierlab.synthetic_params("tiny", tokens=5)
    with pytest.raises(tierlab.InputError, match="prompt_len"):
        tierlab.synthetic_params("tiny", prompt_len=-3)
    with pytest.raises(tierlab.InputError, match="no-such-preset"):
        tierlab.synthetic_params("no-such-preset")
    with pytest.raises(tierlab.InputError, match="outside"):
        tierlab.synthetic_head(tierlab.synthetic_params("tiny"), 5, 0)
    assert issubclass(tierlab.InputError, ValueError)
    assert issubclass(tierlab.FormatError, tierlab.InputError)
    assert issubclass(tierlab.RecomputeError, RuntimeError)


def test_a_progress_callback_that_raises_stops_the_work_with_its_exception(workdir):
    def progress(done, total):
        raise ZeroDivisionError("from the callback")

    path = os.path.join(workdir, "stopped.safetensors")
    with pytest.raises(ZeroDivisionError, match="from the callback"):
        tierlab.write_synthetic(path, tierlab.synthetic_params("tiny"), progress=progress)
    assert not os.path.exists(path)


def test_ctrl_c_during_a_long_call_raises_keyboard_interrupt_and_leaves_no_partial_file(workdir):
    def progress(done, total):
        if done == 1:
            os.kill(os.getpid(), signal.SIGINT)  # the next head is not started

    path = os.path.join(workdir, "interrupted.safetensors")
    with pytest.raises(KeyboardInterrupt):
        tierlab.write_synthetic(path, tierlab.synthetic_params("tiny", n_layers=8), progress=progress)
    assert not os.path.exists(path)
    assert not [f for f in os.listdir(workdir) if f.startswith("interrupted.safetensors.tmp")]


def random_head(rng, T=96, d=16, g=2, W=8, S=4, layer=0, kv_head=0, dtype=np.float32):
    return dict(
        keys=rng.standard_normal((T, d)).astype(dtype),
        values=rng.standard_normal((T, d)).astype(dtype),
        obs_queries=rng.standard_normal((g, W, d)).astype(dtype),
        decode_queries=rng.standard_normal((g, S, d)).astype(dtype),
        decode_keys=rng.standard_normal((S, d)).astype(dtype),
        decode_values=rng.standard_normal((S, d)).astype(dtype),
        layer=layer,
        kv_head=kv_head,
    )


def test_a_trace_built_from_numpy_arrays_round_trips_and_the_cli_reads_it(workdir):
    rng = np.random.default_rng(0)
    arrays = [random_head(rng, layer=l, kv_head=h) for l in range(2) for h in range(3)]
    heads = [tierlab.Head(**a, spans=[(3, 9)] if a["layer"] == 1 else []) for a in arrays]
    path = os.path.join(workdir, "built.safetensors")
    ids = np.arange(100, dtype=np.int64)
    t = tierlab.write_trace(path, heads[::-1], provenance='{"source": "captured", "model": "mine"}', token_ids=ids)
    assert (t.n_layers, t.n_kv_heads, t.group_size, t.prompt_len, t.obs_window, t.decode_steps) == (2, 3, 2, 96, 8, 4)
    for a in arrays:
        h = t.head(a["layer"], a["kv_head"])
        for field in ("keys", "values", "obs_queries", "decode_queries", "decode_keys", "decode_values"):
            np.testing.assert_array_equal(getattr(h, field), a[field])
    assert t.head(1, 2).spans == [(3, 9)] and t.head(0, 0).spans == []
    np.testing.assert_array_equal(t.token_ids, ids)
    info = run_cli("info", path)
    assert "96" in info


def test_float16_traces_read_as_float16_views_and_bfloat16_as_float32_copies(workdir):
    rng = np.random.default_rng(1)
    a = random_head(rng)
    head = tierlab.Head(**a)
    f16 = tierlab.write_trace(os.path.join(workdir, "f16.safetensors"), [head], storage="F16")
    k = f16.head(0, 0).keys
    assert k.dtype == np.float16 and k.flags.writeable is False and isinstance(k.base, tierlab._tierlab._MappedTensor)
    np.testing.assert_array_equal(k, a["keys"].astype(np.float16))
    bf16 = tierlab.write_trace(os.path.join(workdir, "bf16.safetensors"), [head], storage="BF16")
    kb = bf16.head(0, 0).keys
    assert kb.dtype == np.float32 and kb.flags.owndata
    np.testing.assert_allclose(kb, a["keys"], rtol=2**-8)
    with pytest.raises(tierlab.InputError, match="storage"):
        tierlab.write_trace(os.path.join(workdir, "i32.safetensors"), [head], storage="I32")


def test_float64_and_float16_arrays_are_converted_to_float32():
    rng = np.random.default_rng(2)
    a = random_head(rng, dtype=np.float64)
    h = tierlab.Head(**a)
    assert h.keys.dtype == np.float32
    np.testing.assert_array_equal(h.keys, a["keys"].astype(np.float32))
    h16 = tierlab.Head(**random_head(rng, dtype=np.float16))
    assert h16.values.dtype == np.float32


@pytest.mark.parametrize(
    "change, pattern",
    [
        (dict(keys=np.zeros((96, 16), np.int32)), r"argument keys: expected a floating array .* got dtype int32"),
        (dict(keys=np.zeros((96, 16, 1), np.float32)), r"argument keys: expected a 2-dimensional array \[T, d\], got shape \[96, 16, 1\]"),
        (dict(keys=np.asfortranarray(np.zeros((96, 16), np.float32))), r"argument keys: expected a C-contiguous .* Fortran-ordered"),
        (dict(keys=np.zeros((96, 32), np.float32)[:, ::2]), r"argument keys: expected a C-contiguous .* strided"),
        (dict(keys=[[1.0]]), r"argument keys: expected a NumPy array, got list"),
        (dict(values=np.zeros((95, 16), np.float32)), r"argument values: expected shape \[96, 16\] \(as keys\), got \[95, 16\]"),
        (dict(obs_queries=np.zeros((2, 8, 15), np.float32)), r"argument obs_queries: expected shape \[g, W, 16\]"),
        (dict(obs_queries=np.zeros((2, 97, 16), np.float32)), r"W = 97 observation queries exceed the T = 96"),
        (dict(decode_keys=None), r"give all three or none"),
        (dict(decode_queries=np.zeros((3, 4, 16), np.float32)), r"argument decode_queries: expected shape \[2, S, 16\]"),
        (dict(decode_values=np.zeros((5, 16), np.float32)), r"argument decode_values: expected shape \[4, 16\], got \[5, 16\]"),
        (dict(spans=[(5, 200)]), r"argument spans: span \(5, 200\)"),
        (dict(rope_style="sideways"), r"argument rope_style: 'sideways'"),
    ],
)
def test_wrong_arrays_get_a_message_naming_the_argument_and_what_was_expected(change, pattern):
    a = random_head(np.random.default_rng(3))
    a.update(change)
    with pytest.raises(tierlab.InputError, match=pattern):
        tierlab.Head(**a)


def test_non_finite_values_are_refused_with_their_index():
    a = random_head(np.random.default_rng(4))
    a["values"][7, 3] = np.nan
    with pytest.raises(tierlab.InputError, match=r"argument values: NaN at index \(7, 3\) of shape \[96, 16\]"):
        tierlab.Head(**a)
    a = random_head(np.random.default_rng(4), dtype=np.float64)
    a["keys"][1, 2] = 1e300
    with np.errstate(over="ignore"), pytest.raises(tierlab.InputError, match=r"argument keys: Inf at index \(1, 2\).*beyond float32"):
        tierlab.Head(**a)


def test_writing_heads_that_do_not_fill_the_grid_names_the_head(workdir):
    rng = np.random.default_rng(5)
    h00 = tierlab.Head(**random_head(rng, layer=0, kv_head=0))
    h11 = tierlab.Head(**random_head(rng, layer=1, kv_head=1))
    with pytest.raises(tierlab.InputError, match=r"head \(layer 0, kv_head 1\) is missing"):
        tierlab.write_trace(os.path.join(workdir, "x.safetensors"), [h00, h11])
    with pytest.raises(tierlab.InputError, match=r"head \(layer 0, kv_head 0\) is given twice"):
        tierlab.write_trace(os.path.join(workdir, "x.safetensors"), [h00, h00])
    other = tierlab.Head(**random_head(rng, T=50, layer=0, kv_head=1))
    with pytest.raises(tierlab.InputError):  # the C++ writer's shape check against the trace's metadata
        tierlab.write_trace(os.path.join(workdir, "x.safetensors"), [h00, other])
    with pytest.raises(tierlab.InputError, match="token_ids"):
        tierlab.write_trace(os.path.join(workdir, "x.safetensors"), [h00], token_ids=np.arange(3))
    with pytest.raises(tierlab.InputError, match="no heads"):
        tierlab.write_trace(os.path.join(workdir, "x.safetensors"), [])
    assert not os.path.exists(os.path.join(workdir, "x.safetensors"))


def test_opening_a_missing_or_malformed_file_raises_input_and_format_errors(workdir, tiny_trace):
    with pytest.raises(tierlab.InputError, match="no-such-file.safetensors"):
        tierlab.open_trace(os.path.join(workdir, "no-such-file.safetensors"))
    bad = os.path.join(workdir, "garbage.safetensors")
    with open(bad, "wb") as f:
        f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    with pytest.raises(tierlab.FormatError, match="garbage.safetensors"):
        tierlab.Trace(bad)
    with pytest.raises(tierlab.InputError, match=r"head \(2, 0\) is outside the trace's 2 layers x 2 KV heads"):
        tiny_trace.head(2, 0)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_reading_a_large_trace_head_by_head_keeps_memory_near_one_head(workdir):
    """A ~200 MB trace (16 heads of 12 MiB) read head by head: the resident set grows by about
    one head, not by the file (the views map it; dropped views give their pages back)."""
    T, d = 16384, 64
    path = os.path.join(workdir, "large.safetensors")
    rng = np.random.default_rng(6)
    heads = []
    for layer in range(4):
        for kv in range(4):
            a = dict(keys=rng.standard_normal((T, d), dtype=np.float32),
                     values=rng.standard_normal((T, d), dtype=np.float32),
                     keys_pre_rope=rng.standard_normal((T, d), dtype=np.float32),
                     obs_queries=rng.standard_normal((1, 16, d), dtype=np.float32), layer=layer, kv_head=kv)
            heads.append(tierlab.Head(**a))
    tierlab.write_trace(path, heads)
    del heads, a
    gc.collect()
    head_bytes = 3 * T * d * 4
    file_bytes = os.path.getsize(path)
    assert file_bytes > 16 * head_bytes
    t = tierlab.open_trace(path)
    base = rss_bytes()
    peak = 0
    total = 0.0
    for h in tierlab.heads(t):
        k, v, p = h.keys, h.values, h.keys_pre_rope
        total += float(k.sum(dtype=np.float64)) + float(v.sum(dtype=np.float64)) + float(p.sum(dtype=np.float64))
        peak = max(peak, rss_bytes() - base)
        del k, v, p, h
    assert np.isfinite(total)
    # One head is 12 MiB; allow three heads (the kernel maps neighbouring pages in 2 MiB folios).
    assert peak < 3 * head_bytes, f"resident set grew by {peak / 2**20:.1f} MiB reading a {file_bytes / 2**20:.0f} MiB file"
    assert peak > head_bytes / 2  # the measurement sees the head it read
    del t
    os.remove(path)
