"""The model in Python: tiers, ladders, the method registries, surrogate costs against an
independent NumPy implementation of docs/model.md section 3, dominance and the noise fit."""
import numpy as np
import pytest

import tierlab
from conftest import cli_json


def test_tiers_parse_name_and_rate_as_the_model_states():
    t = tierlab.Tier("kivi2g64")
    assert (t.name, t.kind, t.bits, t.group, t.quantizer) == ("kivi2g64", "kivi", 2, 64, "kivi")
    # KIVI per channel, groups of G tokens: fp16 scale + fp16 min per channel per group = 32 / G bits.
    assert t.nominal_rate(128) == (2.0, 2.0 + 32 / 64)
    assert tierlab.Tier("token4").nominal_rate(64) == (4.0, 4.0 + 32 / 64)
    assert tierlab.Tier("evict").nominal_rate(64) == (0.0, 0.0)
    assert tierlab.Tier("exact").nominal_rate(64) == (16.0, 16.0)
    assert tierlab.Tier("turboquant2").method == "turboquant"
    assert tierlab.Tier("kivi4") == tierlab.Tier("kivi4")
    assert repr(t) == "<tierlab.Tier kivi2g64>"
    with pytest.raises(tierlab.InputError, match="kivi99"):
        tierlab.Tier("kivi99")
    with pytest.raises(tierlab.InputError):
        tierlab.Tier("fp7")


def test_ladders_add_evict_and_exact_and_index_their_tiers():
    lad = tierlab.Ladder("kivi2,kivi4")
    assert lad.name == "evict,kivi2,kivi4,exact"
    assert len(lad) == 4 and lad.exact_index == 3
    assert [t.name for t in lad.tiers] == ["evict", "kivi2", "kivi4", "exact"]
    assert lad[-1].name == "exact" and lad[1].bits == 2
    assert lad.index_of_bits(4) == 2 and lad.index_of_bits(3) == -1
    assert tierlab.Ladder(["kivi2", "kivi8"]).name == "evict,kivi2,kivi8,exact"
    assert tierlab.Ladder.kivi([2, 4]).name == "evict,kivi2,kivi4,exact"
    with pytest.raises(IndexError):
        lad[4]
    with pytest.raises(tierlab.InputError):
        tierlab.Ladder("kivi4,kivi2")  # not increasing
    with pytest.raises(tierlab.InputError, match="argument ladder"):
        tierlab.Ladder(3)


def test_methods_lists_every_registry_as_the_cli_does():
    cli = cli_json("methods")
    for kind, cli_kind in (("quantizer", "key quantizer"), ("scorer", "eviction scorer"), ("allocator", "seed allocator"),
                           ("policy", "uniform policy"), ("solver", "solver")):
        ours = tierlab.methods(kind)
        theirs = [m for m in cli if m["kind"] == cli_kind]
        assert ours == theirs, kind
        assert ours  # every registry has entries
    solvers = tierlab.methods("solver")
    assert [s["name"] for s in solvers] == ["exact", "greedy", "greedy-raw", "waterfill", "smoothed"]
    assert all(s["summary"] and s["params"] for s in solvers)
    assert tierlab.methods() == cli  # one catalogue, entry for entry
    assert len(tierlab.methods()) == sum(len(tierlab.methods(k)) for k in ("quantizer", "scorer", "allocator", "policy", "solver"))
    assert [p["name"] for p in tierlab.methods("policy")] == ["exact", "kivi:B[:gG][:rR]", "token:B[:gN]", "evict:KEEP"]
    rate = [p for p in solvers[0]["params"] if p["name"] == "rate"][0]
    assert rate["default"] == "total" and rate["choices"] == ["code", "total"]
    with pytest.raises(tierlab.InputError, match="argument kind: 'policies'"):
        tierlab.methods("policies")


def numpy_token_weights(head):
    """docs/model.md section 3 in float64 NumPy, causal: observation row i of every query head is at
    prompt position T - W + i and sees the tokens 0 .. T - W + i."""
    K = head.keys.astype(np.float64)
    V = head.values.astype(np.float64)
    Q = head.obs_queries.astype(np.float64)
    g, W, d = Q.shape
    T = K.shape[0]
    rows = Q.reshape(g * W, d)
    pos = np.tile(np.arange(T - W, T), g)
    s = rows @ K.T / np.sqrt(d)
    s[np.arange(T)[None, :] > pos[:, None]] = -np.inf
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    o = p @ V
    dist2 = ((V[None, :, :] - o[:, None, :]) ** 2).sum(-1)
    a = (p**2 * dist2).mean(0)
    evict = (p**2 * dist2 / (1 - p) ** 2).mean(0)
    return a, evict, p.mean(0), (o**2).sum(1).mean()


def test_surrogate_costs_match_an_independent_numpy_implementation(tiny_trace):
    head = tiny_trace.head(0, 1)
    c = tierlab.surrogate_costs(head, "kivi2,kivi4")
    a, evict, attention, on2 = numpy_token_weights(head)
    np.testing.assert_allclose(c.a, a, rtol=1e-4, atol=1e-12 * a.max())
    np.testing.assert_allclose(c.evict_cost, evict, rtol=1e-4, atol=1e-12 * evict.max())
    np.testing.assert_allclose(c.attention, attention, rtol=1e-4, atol=1e-9)
    assert c.output_norm2 == pytest.approx(on2, rel=1e-5)
    assert c.cost.shape == (4, 192) and c.noise.shape == (4, 192)
    np.testing.assert_array_equal(c.cost[0], c.evict_cost)
    np.testing.assert_array_equal(c.cost[-1], 0.0)
    assert c.cost.flags.writeable is False and c.cost.base is not None
    np.testing.assert_array_equal(c.code_rates, [0, 2, 4, 16])
    np.testing.assert_array_equal(c.total_rates, [0, 3, 5, 16])
    assert c.ladder.name == "evict,kivi2,kivi4,exact"
    assert "L0.H1" in repr(c)
    d = tierlab.surrogate_costs(head, queries="decode")
    assert d.queries == "decode" and d.cost.shape == (5, 192)
    with pytest.raises(tierlab.InputError, match="argument queries: 'later'"):
        tierlab.surrogate_costs(head, queries="later")


def test_dominance_and_r_of_b_follow_from_the_costs(tiny_trace):
    for l, h in ((0, 0), (1, 1)):
        c = tierlab.surrogate_costs(tiny_trace.head(l, h))
        dom = tierlab.dominance(c)
        R = c.cost.sum(1) / c.cost[0].sum()
        np.testing.assert_allclose(dom.R, R, rtol=1e-12)
        assert dom.R[0] == 1.0 and dom.R[-1] == 0.0
        np.testing.assert_array_equal(dom.dominated[1:-1], R[1:-1] >= 1)
        np.testing.assert_array_equal(dom.rate, c.total_rates)  # total bits by default, as every front door
        assert dom.hull_dominated.dtype == bool and len(dom.hull_dominated) == 5
        assert tierlab.dominance_ratio(c, 2) == pytest.approx(R[1], rel=1e-12)
        assert tierlab.dominance_ratio(c, 8) == pytest.approx(R[3], rel=1e-12)
        np.testing.assert_array_equal(tierlab.dominance(c, rate="code").rate, c.code_rates)
        assert "Dominance" in repr(dom)
    with pytest.raises(tierlab.InputError, match="no tier with 3 code bits"):
        tierlab.dominance_ratio(c, 3)
    with pytest.raises(tierlab.InputError):
        tierlab.dominance(c, rate="bytes")


def test_the_noise_model_is_the_least_squares_fit_of_log_noise_on_bits(tiny_trace):
    c = tierlab.surrogate_costs(tiny_trace.head(1, 0))
    n = tierlab.fit_noise(c)
    bits = c.total_rates[1:-1]  # the default rate kind, total bits
    mean_noise = c.noise[1:-1].mean(1)
    slope, intercept = np.polyfit(bits, np.log(mean_noise), 1)
    assert n.fitted and n.quantizer == "kivi"
    assert n.beta == pytest.approx(np.exp(-slope), rel=1e-9)
    assert n.alpha == pytest.approx(np.exp(intercept), rel=1e-9)
    assert n(2.0) == pytest.approx(n.alpha * n.beta**-2.0, rel=1e-12)
    assert "NoiseModel" in repr(n)
