"""The rate-distortion curve in Python (tierlab.rd_curve) against the tierlab tool's
`tierlab solve --budgets A:B:STEP --recompute --json` (a separate process), and the
properties of its arrays."""
import numpy as np
import pytest

import tierlab
from conftest import cli_json


@pytest.mark.parametrize("scope,rate", [("head", "code"), ("model", "total")])
def test_the_curve_arrays_are_the_numbers_of_tierlab_solve_budgets_json(tiny_trace, tiny_trace_path, scope, rate):
    cli = cli_json("solve", tiny_trace_path, "--budgets", "0:6:1.5", "--recompute", "--scope", scope, "--rate", rate)
    c = tierlab.rd_curve(tiny_trace, "0:6:1.5", scope=scope, rate=rate)
    np.testing.assert_array_equal(c["budgets"], cli["budgets"])
    assert c["queries"] == cli["queries"] == "decode"
    assert set(c["families"]) == {"quantize", "evict", "mixed", "routed"}
    for name, f in c["families"].items():
        j = cli["families"][name]
        assert list(f["feasible"]) == j["feasible"]
        for key in ("rate", "code_bits", "total_bits", "surrogate", "error"):
            want = np.array([np.nan if v is None else v for v in j[key]], dtype=float)
            np.testing.assert_allclose(f[key], want, rtol=1e-12, atol=0, equal_nan=True)
    np.testing.assert_allclose(c["hull"]["rate"], cli["hull"]["rate"], rtol=1e-12)
    np.testing.assert_allclose(c["hull"]["value"], cli["hull"]["value"], rtol=1e-12)
    assert list(c["ladder"]["tier"]) == [p["tier"] for p in cli["ladder_points"]]
    assert list(c["ladder"]["above_hull"]) == [p["above_hull"] for p in cli["ladder_points"]]


def test_the_hull_lies_below_every_point_and_more_budget_never_hurts(tiny_trace):
    c = tierlab.rd_curve(tiny_trace, [0.0, 1.0, 2.0, 3.0, 4.0, 8.0, 16.0], families=["evict", "mixed"], rate="code")
    hx, hy = c["hull"]["rate"], c["hull"]["value"]
    assert np.all(np.diff(hx) > 0)
    for f in c["families"].values():
        ok = f["feasible"]
        assert np.all(np.interp(f["rate"][ok], hx, hy) <= f["error"][ok] * (1 + 1e-12) + 1e-15)
        s = f["surrogate"][ok]
        assert np.all(s[1:] <= s[:-1] * (1 + 1e-9) + 1e-15)
        assert np.all(f["rate"][ok] <= c["budgets"][ok] + 1e-9)
    assert np.all(c["families"]["mixed"]["surrogate"] <= c["families"]["evict"]["surrogate"] * (1 + 1e-9))


def test_wrong_curve_arguments_are_input_errors_naming_them(tiny_trace):
    with pytest.raises(tierlab.InputError, match="budgets"):
        tierlab.rd_curve(tiny_trace, "0:4")
    with pytest.raises(tierlab.InputError, match="bogus"):
        tierlab.rd_curve(tiny_trace, "0:4:1", families=["bogus"])
    with pytest.raises(tierlab.InputError, match="query set"):
        tierlab.rd_curve(tiny_trace, "0:4:1", queries="later")


def test_named_methods_are_the_points_of_tierlab_solve_method(tiny_trace, tiny_trace_path):
    specs = ["kivi:4", "{quantizer: kivi, bits: 2, residual: 0}", "{scorer: snapkv, window: 8}"]
    args = ["solve", tiny_trace_path, "--budgets", "0:8:4", "--recompute"]
    for s in specs:
        args += ["--method", s]
    cli = cli_json(*args)
    c = tierlab.rd_curve(tiny_trace, "0:8:4", methods=specs)
    # kivi:4, the KIVI quantizer, then snapkv at the keep ratios 4/16 and 8/16 of the budgets
    assert [m["label"] for m in c["methods"]] == [m["label"] for m in cli["methods"]]
    assert len(c["methods"]) == 4
    for m, j in zip(c["methods"], cli["methods"]):
        assert m["kind"] == j["kind"]
        assert m["above_hull"] == j["above_hull"]
        for key in ("code_bits", "total_bits", "rate", "surrogate", "error"):
            np.testing.assert_allclose(m[key], j[key], rtol=1e-12, atol=0)
    np.testing.assert_allclose([m["rate"] for m in c["methods"][2:]], [4.0, 8.0], rtol=1e-9)
    s = tierlab.rd_curve(tiny_trace, "0:8:4", methods=["kivi:4"], recompute=False)
    assert np.isnan(s["methods"][0]["error"])
    assert "methods" not in tierlab.rd_curve(tiny_trace, "0:8:4", recompute=False)


def test_a_bad_named_method_is_an_input_error_naming_it(tiny_trace):
    with pytest.raises(tierlab.InputError, match="kivi:9"):
        tierlab.rd_curve(tiny_trace, "0:4:2", methods=["kivi:9"])
    with pytest.raises(tierlab.InputError, match="bogus"):
        tierlab.rd_curve(tiny_trace, "0:4:2", methods=["{quantizer: bogus}"])


def test_on_one_decode_steps_queries_the_curve_and_its_methods_are_those_of_tierlab_solve_queries_step(
        tiny_trace, tiny_trace_path):
    specs = ["kivi:4", "{family: M, budget: 4}"]
    args = ["solve", tiny_trace_path, "--budgets", "0:8:4", "--recompute", "--queries", "step", "--decode-step", "2"]
    for s in specs:
        args += ["--method", s]
    cli = cli_json(*args)
    c = tierlab.rd_curve(tiny_trace, "0:8:4", queries="step", decode_step=2, methods=specs)
    assert c["queries"] == "step"
    np.testing.assert_allclose(c["families"]["mixed"]["error"], cli["families"]["mixed"]["error"], rtol=1e-12)
    for m, j in zip(c["methods"], cli["methods"]):
        np.testing.assert_allclose(m["error"], j["error"], rtol=1e-12, atol=0)
    # M* at B = 4 named as a method is the curve's M point at B = 4, on step 2's queries.
    np.testing.assert_allclose(c["methods"][1]["error"], c["families"]["mixed"]["error"][1], rtol=1e-6)
    # Another step's queries give other errors.
    other = tierlab.rd_curve(tiny_trace, "0:8:4", queries="step", decode_step=1)
    assert not np.allclose(other["families"]["mixed"]["error"][1:], c["families"]["mixed"]["error"][1:], rtol=1e-9)
