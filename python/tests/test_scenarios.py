"""Scenarios and figures in Python: validating, running with a progress callback and Ctrl-C,
reading the tables back as NumPy arrays, and the figures as data and as files, against the
files `tierlab run` writes for the same scenario."""
import csv
import json
import os
import signal
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import tierlab
from conftest import REPO, run_cli

MINI = """name: mini
description: Three tiny synthetic cells (the Python package's tests).
traces:
  synthetic:
    presets: [tiny]
    seeds: [0, 1, 2]
    context_lengths: [64]
ladder: evict,kivi2,kivi4,kivi8,exact
rate_kind: total
budgets: [2, 4]
primary_budget: 2
queries: decode
backend: cpu
seed: 0
bootstrap: 100
waterfill:
  cell: tiny-s0-T64
  layer: 0
  kv_head: 1
  budget: 2
"""


@pytest.fixture(scope="module")
def scenario_file(workdir):
    path = os.path.join(workdir, "mini.yaml")
    with open(path, "w") as f:
        f.write(MINI)
    return path


@pytest.fixture(scope="module")
def cli_run(scenario_file, workdir):
    out = os.path.join(workdir, "mini-cli")
    run_cli("run", scenario_file, "--out", out)
    return out


@pytest.fixture(scope="module")
def py_run(scenario_file, workdir):
    out = os.path.join(workdir, "mini-py")
    calls = []
    result = tierlab.run_scenario(scenario_file, out, progress=lambda d, n: calls.append((d, n)))
    return out, result, calls


def test_a_scenario_file_is_validated_into_its_cells_and_budgets(scenario_file):
    s = tierlab.load_scenario(scenario_file)
    assert s.name == "mini" and s.budgets == [2.0, 4.0] and s.primary_budget == 2.0
    assert [c["id"] for c in s.cells] == ["tiny-s0-T64", "tiny-s1-T64", "tiny-s2-T64"]
    assert s.cells[0]["source"] == "synthetic" and s.cells[0]["preset"] == "tiny"
    assert s.rate_kind == "total" and s.queries == "decode" and s.ladder.name == "evict,kivi2,kivi4,kivi8,exact"
    assert s.analyses[0] == "interior" and "waterfill" in s.analyses
    assert "3 cells" in repr(s)
    shipped = tierlab.load_scenario(os.path.join(REPO, "scenarios", "files", "01-interior-synthetic.yaml"))
    assert len(shipped.cells) == 36


def test_an_invalid_scenario_is_an_input_error_naming_the_file_and_key(workdir):
    bad = os.path.join(workdir, "bad.yaml")
    with open(bad, "w") as f:
        f.write(MINI.replace("budgets: [2, 4]", "budgets: [2, 40]"))
    with pytest.raises(tierlab.InputError, match=r"bad\.yaml.*budget"):
        tierlab.load_scenario(bad)
    with pytest.raises(tierlab.InputError, match="no-such.yaml"):
        tierlab.load_scenario(os.path.join(workdir, "no-such.yaml"))


def test_running_a_scenario_reports_progress_and_writes_what_tierlab_run_writes(py_run, cli_run):
    out, result, calls = py_run
    assert result["cells_total"] == 3 and result["cells_computed"] == 3 and result["tables_written"]
    assert result["backend"].startswith("cpu")
    assert calls == [(1, 3), (2, 3), (3, 3)]
    for name in os.listdir(os.path.join(cli_run, "cells")):
        with open(os.path.join(cli_run, "cells", name)) as a, open(os.path.join(out, "cells", name)) as b:
            ja, jb = json.load(a), json.load(b)
        ja.pop("seconds", None), jb.pop("seconds", None)
        ja.pop("phases", None), jb.pop("phases", None)
        assert ja.keys() == jb.keys()
    again = tierlab.run_scenario(tierlab.load_scenario(os.path.join(out, "scenario.yaml")), out)
    assert again["cells_skipped"] == 3 and again["cells_computed"] == 0


def test_the_tables_read_back_as_numpy_arrays_with_the_csv_numbers(py_run):
    out, _, _ = py_run
    tables = tierlab.read_tables(out)
    assert "cells.csv" in tables and "interior.json" in tables
    cells = tables["cells.csv"]
    with open(os.path.join(out, "tables", "cells.csv")) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6  # 3 cells x 2 budgets
    for column, values in cells.items():
        raw = [r[column] for r in rows]
        if values.dtype == np.float64:
            for v, r in zip(values, raw):
                assert (np.isnan(v) and r in ("", "n/a", "nan", "NaN")) or v == float(r), column
        else:
            assert list(values) == raw, column
    assert any(v.dtype == np.float64 for v in cells.values())
    assert any(v.dtype.kind == "U" for v in cells.values())  # the cell ids
    with open(os.path.join(out, "tables", "interior.json")) as f:
        assert tables["interior.json"] == json.load(f)
    with pytest.raises(tierlab.InputError, match="has no tables"):
        tierlab.read_tables(os.path.join(out, "cells"))


def test_figures_as_data_are_the_figures_tierlab_run_draws(py_run, cli_run, workdir):
    out, _, _ = py_run
    figs = tierlab.figures(out)
    drawn = {os.path.splitext(f)[0] for f in os.listdir(os.path.join(cli_run, "figures"))}
    assert set(figs) == drawn
    for name, fig in figs.items():
        assert fig.title and fig.series
        for s in fig.series:
            assert isinstance(s["x"], np.ndarray) and s["x"].shape == s["y"].shape
        lines = fig.csv().strip().splitlines()
        assert lines[0] == "series,x,y"
        assert len(lines) - 1 == sum(len(s["x"]) for s in fig.series)
        svg = os.path.join(workdir, f"{name}.svg")
        fig.save(svg)
        with open(svg) as a, open(os.path.join(cli_run, "figures", f"{name}.svg")) as b:
            assert a.read() == b.read(), name
        ET.parse(svg)
    fig = figs["waterfill_bits"]
    png, pdf = os.path.join(workdir, "wf.png"), os.path.join(workdir, "wf.pdf")
    fig.save(png)
    fig.save(pdf)
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(pdf, "rb") as f:
        assert f.read(5) == b"%PDF-"
    assert "Figure" in repr(fig)
    files = tierlab.render_figures(out)
    assert len(files) == 3 * len(figs) and all(os.path.exists(f) for f in files)
    with pytest.raises(tierlab.InputError, match="does not exist"):
        tierlab.figures(os.path.join(workdir, "no-run-here"))


def test_ctrl_c_during_a_scenario_run_keeps_the_finished_cells(scenario_file, workdir):
    out = os.path.join(workdir, "mini-interrupted")

    def progress(done, total):
        if done == 1:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt, match="finished cells kept"):
        tierlab.run_scenario(scenario_file, out, progress=progress)
    finished = os.listdir(os.path.join(out, "cells"))
    assert 1 <= len(finished) < 3
    assert not os.path.exists(os.path.join(out, "tables", "interior.json"))
    resumed = tierlab.run_scenario(scenario_file, out)
    assert resumed["cells_skipped"] == len(finished) and resumed["tables_written"]


def test_a_run_beyond_a_stated_size_limit_is_refused_before_any_work_unless_force_size(scenario_file, workdir):
    out = os.path.join(workdir, "mini-limited")
    with pytest.raises(tierlab.InputError, match=r"exceeds max_memory|exceeds --max-memory|too large"):
        tierlab.run_scenario(scenario_file, out, max_memory="1M")
    assert not os.path.exists(os.path.join(out, "cells"))
    with pytest.raises(tierlab.InputError, match="max_memory"):
        tierlab.run_scenario(scenario_file, out, max_memory="12abc")
    r = tierlab.run_scenario(scenario_file, out, max_memory="1M", force_size=True)
    assert r["cells_computed"] == 3 and r["tables_written"]
