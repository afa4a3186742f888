"""Solving and exact recomputation in Python, against the tierlab tool (`tierlab solve --json`,
`tierlab eval --json`: a separate process and code path) and against NumPy."""
import os
import re
import sys
import threading
import time

import numpy as np
import pytest

import tierlab
from conftest import cli_json, read_safetensors

CASES = [
    dict(solver="exact", family="mixed", scope="head", rate="code", budget=3.0),
    dict(solver="exact", family="routed", scope="model", rate="total", budget=2.5),
    dict(solver="greedy", family="mixed", scope="layer", rate="code", budget=4.0),
    dict(solver="greedy-raw", family="evict", scope="head", rate="code", budget=2.0),
    dict(solver="waterfill", family="mixed", scope="head", rate="code", budget=3.0),
    dict(solver="smoothed", family="mixed", scope="head", rate="code", budget=3.0),
    dict(solver="exact", family="quantize", scope="head", rate="total", budget=5.0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['solver']}-{c['family']}-{c['scope']}-{c['rate']}")
def test_solving_a_trace_gives_the_numbers_of_tierlab_solve_json(case, tiny_trace, tiny_trace_path, workdir):
    alloc_path = os.path.join(workdir, f"alloc-{case['solver']}-{case['family']}-{case['scope']}.safetensors")
    cli = cli_json("solve", tiny_trace_path, "--budget", case["budget"], "--solver", case["solver"], "--family",
                   case["family"], "--scope", case["scope"], "--rate", case["rate"], "--write-allocation", alloc_path)
    s = tierlab.solve(tiny_trace, case["budget"], solver=case["solver"], family=case["family"], scope=case["scope"],
                      rate=case["rate"])
    timing = re.compile(r"[0-9][0-9.e+-]* m?s\b")  # the messages state solve times
    assert s.status == cli["status"] and timing.sub("t", s.message) == timing.sub("t", cli["message"])
    m = cli["model"]
    assert s.objective == m["objective"]
    assert s.bound == m["bound"]
    assert s.gap == m["gap"]
    assert s.code_rate == m["rate"]["code_bits"] and s.total_rate == m["rate"]["total_bits"]
    assert s.budget_rate == m["budget_rate"]
    assert s.family_share == m["family_share"]
    heads = s.heads
    ladder = [t.name for t in s.ladder.tiers]
    for i, h in enumerate(cli["heads"]):
        assert (heads["layer"][i], heads["kv_head"][i]) == (h["layer"], h["kv_head"])
        assert heads["objective"][i] == h["objective"]
        assert heads["code_rate"][i] == h["rate"]["code_bits"] and heads["total_rate"][i] == h["rate"]["total_bits"]
        assert heads["option"][i] == h["option"]
        assert list(heads["histogram"][i]) == [h["histogram"].get(name, 0) for name in ladder]
        if h.get("bound") is not None:
            assert heads["bound"][i] == h["bound"]
    tiers, meta = read_safetensors(alloc_path)
    assert meta["tierlab.ladder"] == s.ladder.name
    a = s.allocation
    assert a.shape == (2, 2, 192) and np.issubdtype(a.dtype, np.integer)
    for l in range(2):
        for h in range(2):
            np.testing.assert_array_equal(a[l, h], tiers[f"layers.{l}.heads.{h}.tiers"])
    assert s.to_json()["model"] == m
    assert "Solution" in repr(s) and s.feasible


def test_a_list_of_budgets_gives_one_solution_per_budget(tiny_trace):
    calls = []
    many = tierlab.solve(tiny_trace, [2.0, 3.0, 4.0], progress=lambda d, n: calls.append((d, n)))
    assert [s.budget for s in many] == [2.0, 3.0, 4.0]
    for s in many:
        one = tierlab.solve(tiny_trace, s.budget)
        assert one.objective == s.objective
        np.testing.assert_array_equal(one.allocation, s.allocation)
    assert calls[-1] == (12, 12)
    assert tierlab.solve(tiny_trace, np.float64(3.0)).objective == many[1].objective
    assert tierlab.solve(tiny_trace, np.array([3.0]))[0].objective == many[1].objective


def test_solving_one_head_agrees_with_its_costs_and_the_trace_solve(tiny_trace):
    head = tiny_trace.head(1, 0)
    c = tierlab.surrogate_costs(head)
    for family in ("mixed", "quantize", "evict", "routed"):
        sol = tierlab.solve_head(head, 3.0, family=family, costs=c)
        t = sol.tiers
        assert sol.feasible and t.shape == (192,)
        assert sol.objective == pytest.approx(c.cost[t, np.arange(192)].sum(), rel=1e-12)
        assert c.total_rates[t].sum() <= 3.0 * 192 + 1e-9  # nominal total bits (the default) within B
        assert sol.bound <= sol.objective * (1 + 1e-12) and sol.gap >= -1e-18
        whole = tierlab.solve(tiny_trace, 3.0, family=family)
        assert sol.objective == pytest.approx(whole.heads["objective"][2], rel=1e-12)
    assert tierlab.solve_head(head, 3.0).objective == tierlab.solve_head(head, 3.0, costs=c).objective
    wf = tierlab.solve_head(head, 3.0, solver="waterfill")
    assert wf.feasible
    infeasible = tierlab.solve_head(head, 0.5, family="quantize")
    assert not infeasible.feasible and infeasible.message and "infeasible" in repr(infeasible)


def test_wrong_solver_arguments_are_input_errors_naming_the_value(tiny_trace):
    with pytest.raises(tierlab.InputError, match="simplex"):
        tierlab.solve(tiny_trace, 3.0, solver="simplex")
    with pytest.raises(tierlab.InputError, match="universe"):
        tierlab.solve(tiny_trace, 3.0, scope="universe")
    with pytest.raises(tierlab.InputError, match="budget"):
        tierlab.solve(tiny_trace, -1.0)
    with pytest.raises(tierlab.InputError, match="empty list"):
        tierlab.solve(tiny_trace, [])
    c = tierlab.surrogate_costs(tiny_trace.head(0, 0), "kivi2")
    with pytest.raises(tierlab.InputError, match="argument costs: computed on ladder evict,kivi2,exact"):
        tierlab.solve_head(tiny_trace.head(0, 0), 3.0, costs=c)


def test_recomputing_an_allocation_gives_the_numbers_of_tierlab_eval_json(tiny_trace, tiny_trace_path, workdir):
    alloc_path = os.path.join(workdir, "alloc-eval.safetensors")
    cli_json("solve", tiny_trace_path, "--budget", 2.5, "--write-allocation", alloc_path)
    cli = cli_json("eval", tiny_trace_path, "--allocation", alloc_path, "--backend", "cpu")
    s = tierlab.solve(tiny_trace, 2.5)
    ev = tierlab.recompute(tiny_trace, s, backend="cpu")
    assert ev.backend == cli["backend"] and ev.has_decode
    heads = ev.heads
    for i, h in enumerate(cli["heads"]):
        for q in ("obs", "decode"):
            for k in ("rel_error", "abs_error", "attn_tv", "logit_error"):
                assert heads[f"{q}_{k}"][i] == pytest.approx(h[q][k], rel=1e-12, abs=1e-300), (i, q, k)
        assert heads["code_rate"][i] == h["rate"]["code_bits"]
        assert heads["evicted_fraction"][i] == h["evicted_fraction"]
        assert heads["predicted_abs"][i] == pytest.approx(h["surrogate"]["predicted_abs"], rel=1e-12)
    for q in ("obs", "decode"):
        assert ev.model[q]["rel_error"] == pytest.approx(cli["model"][q]["rel_error"], rel=1e-12)
    assert len(ev.layers) == 2
    # The same allocation as an array, and through recompute_head, give the same numbers.
    ev2 = tierlab.recompute(tiny_trace, s.allocation, backend="cpu")
    np.testing.assert_array_equal(ev2.heads["obs_rel_error"], heads["obs_rel_error"])
    for i, (l, h) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
        for q in ("obs", "decode"):
            e = tierlab.recompute_head(tiny_trace.head(l, h), s.allocation[l, h], backend="cpu", queries=q)
            assert e.rel_error[0] == pytest.approx(heads[f"{q}_rel_error"][i], rel=1e-12)
            assert e.attn_tv[0] == pytest.approx(heads[f"{q}_attn_tv"][i], rel=1e-12)
        assert e.code_rate[0] == heads["code_rate"][i]
    assert "Evaluation" in repr(ev) and ev.to_json()["heads"][0]["layer"] == 0


def numpy_row_errors(head, tiers, ladder_rows_keys):
    """Relative output error of each observation row, in float64 NumPy (causal, docs/model.md section 8)."""
    K = head.keys.astype(np.float64)
    V = head.values.astype(np.float64)
    Q = head.obs_queries.astype(np.float64)
    g, W, d = Q.shape
    T = K.shape[0]
    rows = Q.reshape(g * W, d)
    pos = np.tile(np.arange(T - W, T), g)
    mask = np.arange(T)[None, :] > pos[:, None]

    def out(keys, keep):
        s = rows @ keys.T / np.sqrt(d)
        s[mask | ~keep[None, :]] = -np.inf
        p = np.exp(s - s.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        return p @ V

    o = out(K, np.ones(T, bool))
    o_hat = out(ladder_rows_keys, tiers > 0)
    return ((o_hat - o) ** 2).sum(1) / (o**2).sum(1)


def test_per_row_errors_average_to_the_mean_and_match_numpy(tiny_trace):
    head = tiny_trace.head(0, 1)
    rng = np.random.default_rng(0)
    allocs = np.stack([rng.choice([0, 4], size=192, p=[0.3, 0.7]) for _ in range(3)])  # evict or exact only
    e = tierlab.recompute_head(head, allocs, backend="cpu", per_row=True)
    assert e.row_rel_error.shape == (3, 16) and e.rel_error.shape == (3,)
    # Each row is recomputed on its own (a one-row problem): the same formulas as the
    # batched mean, with float32 GEMMs blocked differently, so they agree to the CPU
    # backend's stated precision (6e-7 relative), not to the last bit.
    np.testing.assert_allclose(e.row_rel_error.mean(1), e.rel_error, rtol=1e-6)
    np.testing.assert_allclose(e.row_attn_tv.mean(1), e.attn_tv, rtol=1e-6)
    for k in range(3):
        ref = numpy_row_errors(head, allocs[k], head.keys.astype(np.float64))
        np.testing.assert_allclose(e.row_rel_error[k], ref, rtol=2e-5, atol=1e-12)
    assert tierlab.recompute_head(head, allocs, backend="cpu").row_rel_error is None
    d = tierlab.recompute_head(head, allocs, backend="cpu", queries="decode", per_row=True)
    assert d.row_rel_error.shape == (3, 16)
    np.testing.assert_allclose(d.row_rel_error.mean(1), d.rel_error, rtol=1e-6)
    exact = tierlab.recompute_head(head, np.full(192, 4), backend="cpu")
    assert exact.rel_error[0] == 0.0 and exact.code_rate[0] == 16.0
    assert "3 allocations" in repr(e)


def test_recomputing_given_variants_matches_the_numpy_gather_formula():
    rng = np.random.default_rng(1)
    T, d, R = 300, 32, 12
    K = rng.standard_normal((T, d), dtype=np.float32)
    V = rng.standard_normal((T, d), dtype=np.float32)
    Q = (2 * rng.standard_normal((R, d))).astype(np.float32)
    noisy = (K + 0.05 * rng.standard_normal((T, d))).astype(np.float32)
    sel = rng.integers(0, 3, size=(4, T))  # 0 evict, 1 noisy, 2 exact
    e = tierlab.recompute_variants(Q, K, V, [noisy, K], sel, backend="cpu")
    Q64, K64, V64 = Q.astype(np.float64), K.astype(np.float64), V.astype(np.float64)
    s = Q64 @ K64.T / np.sqrt(d)
    p = np.exp(s - s.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
    o = p @ V64
    for k in range(4):
        keys = np.where((sel[k] == 1)[:, None], noisy.astype(np.float64), K64)
        sh = Q64 @ keys.T / np.sqrt(d)
        sh[:, sel[k] == 0] = -np.inf
        ph = np.exp(sh - sh.max(1, keepdims=True)); ph /= ph.sum(1, keepdims=True)
        ref = (((ph @ V64 - o) ** 2).sum(1) / (o**2).sum(1)).mean()
        assert e.rel_error[k] == pytest.approx(ref, rel=1e-5)
    problem = tierlab.RecomputeProblem(Q, K, V, [noisy, K])
    assert (problem.tokens, problem.rows) == (T, R) and "2 variants" in repr(problem)
    again = problem.evaluate(sel, backend="cpu", per_row=True)
    np.testing.assert_array_equal(again.rel_error, e.rel_error)
    # Row by row the float32 products round differently than in blocks of rows: 1e-6, not 1e-12.
    np.testing.assert_allclose(again.row_rel_error.mean(1), e.rel_error, rtol=1e-6)
    with pytest.raises(tierlab.InputError, match=r"argument selections: value 3 .* outside \[0, 2\]"):
        problem.evaluate(np.full(T, 3))
    vis = np.full(R, T // 2)
    half = tierlab.recompute_variants(Q, K, V, [noisy, K], sel, backend="cpu", visible=vis)
    cut = tierlab.recompute_variants(Q, K[: T // 2].copy(), V[: T // 2].copy(), [noisy[: T // 2].copy(), K[: T // 2].copy()],
                                     sel[:, : T // 2].copy(), backend="cpu")
    np.testing.assert_allclose(half.rel_error, cut.rel_error, rtol=1e-6)


def test_recomputation_arguments_are_checked_with_messages_naming_them(tiny_trace):
    head = tiny_trace.head(0, 0)
    with pytest.raises(tierlab.InputError, match=r"argument allocations: value 7 at index \(3\) is outside \[0, 4\]"):
        a = np.zeros(192, np.int64); a[3] = 7
        tierlab.recompute_head(head, a)
    with pytest.raises(tierlab.InputError, match="argument allocations: expected 192 tokens per allocation"):
        tierlab.recompute_head(head, np.zeros((2, 191), np.int64))
    with pytest.raises(tierlab.InputError, match="argument allocations: expected an integer array, got dtype float64"):
        tierlab.recompute_head(head, np.zeros(192))
    with pytest.raises(tierlab.InputError, match="backend"):
        tierlab.recompute_head(head, np.zeros(192, np.int64), backend="gpu")
    with pytest.raises(tierlab.InputError, match=r"argument allocation: expected shape \[2, 2, 192\]"):
        tierlab.recompute(tiny_trace, np.zeros((2, 3, 192), np.int64))
    with pytest.raises(tierlab.InputError, match="argument allocation: expected a tierlab.Solution"):
        tierlab.recompute(tiny_trace, "all of them")
    with pytest.raises(tierlab.InputError, match="the solution has no allocation"):
        tierlab.recompute(tiny_trace, tierlab.solve(tiny_trace, 0.5, family="quantize"))
    K = np.zeros((10, 4), np.float32)
    with pytest.raises(tierlab.InputError, match=r"argument variants\[1\]: expected shape \[10, 4\]"):
        tierlab.recompute_variants(np.ones((2, 4), np.float32), K, K, [K, np.zeros((9, 4), np.float32)], np.zeros((1, 10), np.int64))
    with pytest.raises(tierlab.InputError, match="argument visible: expected one limit per query row"):
        tierlab.recompute_variants(np.ones((2, 4), np.float32), K, K, [K], np.zeros((1, 10), np.int64), visible=np.array([3]))


def test_the_cuda_backend_is_an_input_error_where_it_is_not_there(tiny_trace):
    available, reason = tierlab.cuda_available()
    if available:
        e = tierlab.recompute_head(tiny_trace.head(0, 0), np.full(192, 2), backend="cuda")
        c = tierlab.recompute_head(tiny_trace.head(0, 0), np.full(192, 2), backend="cpu")
        assert e.backend == "cuda" and e.rel_error[0] == pytest.approx(c.rel_error[0], rel=1e-5)
    else:
        assert reason
        with pytest.raises(tierlab.InputError, match="backend 'cuda' is not available"):
            tierlab.recompute(tiny_trace, tierlab.solve(tiny_trace, 3.0), backend="cuda")
    assert tierlab.recompute_head(tiny_trace.head(0, 0), np.full(192, 2), backend="auto").backend in ("cpu", "cuda")


def test_a_feasible_solution_says_why_it_is_not_proven_optimal(tiny_trace):
    g = tierlab.solve(tiny_trace, 2.5, solver="greedy")
    assert g.status == "feasible" and g.feasible_reason == "heuristic"
    assert g.to_json()["feasible_reason"] == "heuristic"
    e = tierlab.solve(tiny_trace, 2.5, solver="exact", rate="code")  # code bits: no repair to the measured budget
    assert e.status == "optimal" and e.feasible_reason is None


def test_long_calls_release_the_gil(workdir):
    # Independent of the machine's speed: with a switch interval far longer than the test,
    # CPython never takes the GIL from the main thread; another thread runs only while the
    # main thread gives the GIL up itself. The other thread looks at `inside`, which is True
    # only while tierlab.solve runs (no Python code between setting it and the call gives up
    # the GIL). So if solve held the GIL, the other thread could never see inside == True, in
    # any number of calls; if solve releases it, the waiting thread takes it during a call.
    p = tierlab.synthetic_params("tiny", n_layers=2, n_kv_heads=2, prompt_len=512, obs_window=32)
    t = tierlab.write_synthetic(os.path.join(workdir, "gil.safetensors"), p)
    state = {"inside": False, "stop": False}
    seen_inside = threading.Event()

    def watcher():
        while not state["stop"]:
            if state["inside"]:
                seen_inside.set()
                return
            time.sleep(0.0005)  # gives up the GIL; asks for it again on waking

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        th = threading.Thread(target=watcher)
        th.start()
        calls = 0
        while calls < 100 and not seen_inside.is_set():
            state["inside"] = True
            tierlab.solve(t, [2.0, 3.0])
            state["inside"] = False
            calls += 1
        state["stop"] = True
        th.join()
    finally:
        sys.setswitchinterval(interval)
    assert seen_inside.is_set(), f"no other thread ran during {calls} calls of tierlab.solve: the GIL was held"


def test_the_interior_advantage_gives_the_numbers_of_tierlab_solve_advantage(tiny_trace, tiny_trace_path):
    cli = cli_json("solve", tiny_trace_path, "--budget", 2, "--rate", "total", "--advantage", "--backend", "cpu")["interior"]
    r = tierlab.interior(tiny_trace, 2.0, backend="cpu")
    assert r.budget == 2.0 and r.rate == "total" and r.backend == cli["backend"]
    assert r.dominated_share == cli["dominated_share"]
    assert r.mean_advantage_decode == pytest.approx(cli["mean_advantage"]["decode"], rel=1e-12)
    assert r.median_advantage_obs == pytest.approx(cli["median_advantage"]["obs"], rel=1e-12)
    t = r.heads
    for i, h in enumerate(cli["heads"]):
        assert (t["layer"][i], t["kv_head"][i], bool(t["dominated_2bit"][i])) == (h["layer"], h["kv_head"], h["dominated_2bit"])
        assert t["A_decode"][i] == pytest.approx(h["advantage"]["decode"], rel=1e-12)
        assert t["A_surrogate"][i] == pytest.approx(h["advantage"]["surrogate"], rel=1e-12)
        for f in ("Q", "E", "M"):
            assert bool(t[f"{f}_feasible"][i]) == h[f]["feasible"]
            if h[f]["feasible"]:
                assert t[f"{f}_decode_rel_error"][i] == pytest.approx(h[f]["decode"]["rel_error"], rel=1e-12)
                assert t[f"{f}_total_rate"][i] == h[f]["rate"]["total_bits"]
                assert t[f"{f}_option"][i] == h[f]["option"]
        # A from the table's own errors, as docs/model.md section 6 defines it.
        errs = [t[f"{f}_decode_rel_error"][i] for f in ("Q", "E")]
        best = min(e for e in errs if not np.isnan(e))
        assert t["A_decode"][i] == pytest.approx(1 - t["M_decode_rel_error"][i] / best, rel=1e-12)
    both = tierlab.interior(tiny_trace, [2.0, 3.0], backend="cpu")
    assert [x.budget for x in both] == [2.0, 3.0]
    np.testing.assert_allclose(both[0].heads["A_decode"], t["A_decode"], rtol=1e-12)
    assert "Interior" in repr(r) and r.to_json()["dominated_share"] == cli["dominated_share"]
    with pytest.raises(tierlab.InputError, match="argument budget = 20"):
        tierlab.interior(tiny_trace, [2.0, 20.0])
