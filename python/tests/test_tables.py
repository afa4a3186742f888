"""The tables of a scenario run read back by tierlab.read_tables when a trace's file name holds
a comma, a double quote and a line end: CSV as RFC 4180 defines it (scenarios/io/csv.hpp),
checked against Python's own csv module (issue 33, item 6)."""
import csv
import json
import os

import numpy as np

import tierlab
from conftest import run_cli

STEM = 'trace "x", y\nz'


def test_a_trace_name_with_a_comma_a_quote_and_a_line_end_reads_back_with_the_right_values(workdir):
    folder = os.path.join(workdir, "odd-name")
    os.makedirs(folder, exist_ok=True)
    trace = os.path.join(folder, STEM + ".safetensors")
    run_cli("synth", "--preset", "tiny", "--seed", "0", "--tokens", "48", "-o", trace)
    scenario = os.path.join(folder, "odd.yaml")
    with open(scenario, "w") as f:
        f.write("name: odd-name\ntraces:\n  files: [" + json.dumps(os.path.basename(trace)) + "]\n"
                "budgets: [2, 4]\nbackend: cpu\nbootstrap: 100\n")
    out = os.path.join(folder, "out")
    assert tierlab.run_scenario(scenario, out)["tables_written"]
    tables = tierlab.read_tables(out)
    cells, cells_json = tables["cells.csv"], tables["cells.json"]
    assert list(cells["cell"]) == ["file-" + STEM] * 2
    assert list(cells["preset"]) == ["file"] * 2
    assert list(cells["budget"]) == [2.0, 4.0]
    for row, cell in enumerate(cells_json):
        assert cells["winner"][row] == cell["winner"]
        for column in ("A", "A_surrogate", "dominated_share", "heads_defined"):
            if cell[column] is None:
                assert np.isnan(cells[column][row])
            else:
                assert abs(cells[column][row] - cell[column]) <= 1e-5 * abs(cell[column]) + 1e-12, column
    # Python's csv module (RFC 4180) reads the same fields as tierlab's reader, in every table.
    for name, table in tables.items():
        if not name.endswith(".csv"):
            continue
        with open(os.path.join(out, "tables", name), newline="") as f:
            rows = list(csv.DictReader(f))
        for column, values in table.items():
            raw = [r[column] for r in rows]
            if values.dtype == np.float64:
                assert all((np.isnan(v) and r in ("", "nan")) or v == float(r) for v, r in zip(values, raw)), (name, column)
            else:
                assert list(values) == raw, (name, column)
    heads = tables["heads.csv"]
    assert set(heads["cell"]) == {"file-" + STEM} and len(heads["cell"]) == 2 * 4
