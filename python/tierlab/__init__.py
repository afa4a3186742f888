"""tierlab: key-cache budget allocation for LLM serving (quantize, evict or mix precisions
per token), in Python.

The C++ library through a pybind11 extension (tierlab._tierlab) with NumPy arrays:

  traces      open_trace / Trace (heads' tensors as read-only views of the memory map),
              Head (build one from NumPy arrays), write_trace, synthetic_params,
              synthetic_head, write_synthetic, presets
  the model   Tier, Ladder, methods(), surrogate_costs (tierlab.Costs), dominance,
              dominance_ratio (R_h(b)), fit_noise
  solving     solve (a trace: any solver, family, scope, one budget or a list),
              solve_head (one head)
  recompute   recompute (an allocation of a trace), recompute_head (many allocations of
              one head, per-row and mean errors), RecomputeProblem / recompute_variants (the
              backends' own problem: variants and selections),
              interior (the interior advantage A of every head: tierlab.Interior),
              rd_curve (the rate-distortion curve: every family over a budget grid,
              recomputed, with the lower hull; a dict of arrays)
  scenarios   load_scenario, run_scenario, read_tables
  figures     figures (each as data), Figure.save, render_figures
  errors      InputError (a ValueError; FormatError is one), RecomputeError (a RuntimeError)

docs/python.md is the tutorial; help(tierlab.<name>) documents each function.
"""
import glob as _glob
import json as _json
import os as _os

import numpy as _np

# OpenMP threads wait passively (sleep when idle) unless the user chose a policy, as in
# tierlab's programs (model/base/openmp_policy.hpp): libgomp reads this once, when the
# extension below loads it, so it is set here, before the import.
_os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from ._version import __version__
from ._tierlab import (
    InputError,
    FormatError,
    RecomputeError,
    Trace,
    Head,
    SynthParams,
    Tier,
    Ladder,
    Costs,
    Dominance,
    NoiseModel,
    Solution,
    HeadSolution,
    HeadErrors,
    Evaluation,
    Interior,
    RecomputeProblem,
    Scenario,
    Figure,
    open_trace,
    write_trace,
    presets,
    synthetic_head,
    write_synthetic,
    methods,
    surrogate_costs,
    dominance,
    dominance_ratio,
    fit_noise,
    cuda_available,
    solve,
    solve_head,
    recompute,
    recompute_head,
    recompute_variants,
    interior,
    rd_curve,
    load_scenario,
    run_scenario,
    figures,
    render_figures,
)
from . import _tierlab

if _tierlab.__version__ != __version__:  # a stale build tree mixing two versions
    raise ImportError(f"tierlab: the extension is version {_tierlab.__version__}, the package {__version__}")


def synthetic_params(preset="tiny", **overrides):
    """The parameters of a synthetic trace: a preset (tierlab.presets()) with any field of
    tierlab.SynthParams overridden, e.g. synthetic_params("tiny", prompt_len=512, seed=3).
    Validated: tierlab.InputError names the parameter and value at fault."""
    p = SynthParams.preset(preset)
    for key, value in overrides.items():
        if key == "preset":
            key = "preset_name"
        if not hasattr(p, key) or key.startswith("_"):
            raise InputError(f"synthetic_params: no parameter '{key}' (see help(tierlab.SynthParams))")
        setattr(p, key, value)
    p.validate()
    return p


def heads(trace):
    """Every head of a trace, layer by layer (a generator of tierlab.Head views)."""
    for layer in range(trace.n_layers):
        for kv_head in range(trace.n_kv_heads):
            yield trace.head(layer, kv_head)


def _column(values):
    """A CSV column as a float array when every cell is a number (empty cells and n/a: NaN),
    else as an array of strings."""
    out = []
    for v in values:
        if v in ("", "n/a", "nan", "NaN"):
            out.append(_np.nan)
            continue
        try:
            out.append(float(v))
        except ValueError:
            return _np.array(values, dtype=str)
    return _np.array(out, dtype=_np.float64)


def read_table(path):
    """One table of a scenario run: a .csv as a dict column -> NumPy array (numbers as
    float64, text as str), a .json as its parsed value."""
    if str(path).endswith(".json"):
        try:
            with open(path) as f:
                return _json.load(f)
        except FileNotFoundError:
            raise InputError(f"table {path} does not exist") from None
    return {name: _column(col) for name, col in _tierlab._read_table_csv(str(path)).items()}


def read_tables(run_dir):
    """Every table of a scenario run folder (run_dir/tables): a dict name -> table, where a
    CSV table is a dict column -> NumPy array and a JSON table its parsed value (the name
    is the file name: "cells.csv", "interior.json", ...)."""
    folder = _os.path.join(str(run_dir), "tables")
    if not _os.path.isdir(folder):
        raise InputError(f"run folder {run_dir} has no tables/ (run the scenario first: tierlab.run_scenario)")
    out = {}
    for path in sorted(_glob.glob(_os.path.join(folder, "*.csv")) + _glob.glob(_os.path.join(folder, "*.json"))):
        out[_os.path.basename(path)] = read_table(path)
    return out


__all__ = [name for name in dir() if not name.startswith("_")]
