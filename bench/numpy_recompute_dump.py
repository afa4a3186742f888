#!/usr/bin/env python3
"""Dump the exact instance numpy_recompute_ref.py measures, so that bench_recompute_cpu
can recompute the same errors on the same data (the two programs' random generators
differ, so without this they would only agree in distribution).

The data are regenerated with the reference's seed and the reference's code, in the
same order of random draws (channel permutation, K, V, Q, then the allocations).
Written to --out (raw little-endian, C order):
  K.f32, V.f32        (H, T, D) float32
  Q.f32               (H, G*Q, D) float32
  K2.f32, K4.f32      (H, T, D) float32, the reference's KIVI 2- and 4-bit keys
  alloc.u8            (E, H, T) uint8, tiers 0..3 (0 evict, 1 kivi2, 2 kivi4, 3 exact)
  errors_f32.f64      (E,) the reference's per-allocation mean relative error, computed
                      exactly as the reference does (float32)
  errors_f64.f64      (E,) the same formula in float64 from the same float32 inputs
  meta.json           sizes and seed
Usage: numpy_recompute_dump.py --out DIR [the reference's options]
"""
import argparse, json, math, os

import numpy as np


def kivi_per_channel(k, bits, group):  # the reference's code, unchanged
    h, t, d = k.shape
    kg = k.reshape(h, t // group, group, d)
    lo = kg.min(axis=2, keepdims=True)
    hi = kg.max(axis=2, keepdims=True)
    levels = 2 ** bits - 1
    scale = np.maximum(hi - lo, 1e-8) / levels
    code = np.round(np.clip((kg - lo) / scale, 0, levels))
    return (code * scale + lo).reshape(h, t, d).astype(np.float32)


def allocation_errors(Q, K, V, tiers, allocs, scale, dtype):
    """The reference's per-allocation formula (gather -> mask -> softmax -> P @ V)."""
    Q, K, V = Q.astype(dtype), K.astype(dtype), V.astype(dtype)
    tiers = [t.astype(dtype) for t in tiers]
    scale = dtype(scale)
    H, GQ, _ = Q.shape
    T = K.shape[1]
    S_all = np.stack([np.matmul(Q, kt.transpose(0, 2, 1)) * scale for kt in tiers])
    S = np.matmul(Q, K.transpose(0, 2, 1)) * scale
    P = np.exp(S - S.max(-1, keepdims=True)); P /= P.sum(-1, keepdims=True)
    O = np.matmul(P, V)
    onorm = (O * O).sum(-1)
    errs = []
    for tier in allocs:
        idx = np.maximum(tier, 1) - 1
        s = np.take_along_axis(S_all, np.broadcast_to(idx[None, :, None, :], (1, H, GQ, T)), 0)[0]
        s = np.where((tier == 0)[:, None, :], -np.inf, s)
        p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
        o = np.matmul(p, V)
        errs.append(float((((o - O) ** 2).sum(-1) / onorm).mean()))
    return np.array(errs, dtype=np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--queries", type=int, default=16)
    ap.add_argument("--allocations", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    # --- the reference's data, in the reference's order of draws ---
    rng = np.random.default_rng(a.seed)
    H, T, D, G, Qn, E = a.kv_heads, a.tokens, a.dim, a.group_size, a.queries, a.allocations
    chan = np.ones(D, np.float32); chan[rng.permutation(D)[: D // 16]] = 8.0
    K = (rng.standard_normal((H, T, D), dtype=np.float32) * chan).astype(np.float32)
    V = rng.standard_normal((H, T, D), dtype=np.float32)
    Q = (rng.standard_normal((H, G * Qn, D), dtype=np.float32) * 2.0).astype(np.float32)
    scale = np.float32(1.0 / math.sqrt(D))
    tiers = [kivi_per_channel(K, 2, 32), kivi_per_channel(K, 4, 32), K]
    allocs = rng.integers(0, 4, size=(E, H, T))
    # --- what the reference reports, and the same formula in float64 ---
    err32 = allocation_errors(Q, K, V, tiers, allocs, scale, np.float32)
    err64 = allocation_errors(Q, K, V, tiers, allocs, 1.0 / math.sqrt(D), np.float64)

    os.makedirs(a.out, exist_ok=True)
    def put(name, arr, dtype):
        np.ascontiguousarray(arr, dtype=dtype).tofile(os.path.join(a.out, name))
    put("K.f32", K, "<f4"); put("V.f32", V, "<f4"); put("Q.f32", Q, "<f4")
    put("K2.f32", tiers[0], "<f4"); put("K4.f32", tiers[1], "<f4")
    put("alloc.u8", allocs, "u1")
    put("errors_f32.f64", err32, "<f8"); put("errors_f64.f64", err64, "<f8")
    meta = {"tokens": T, "dim": D, "kv_heads": H, "query_heads_per_kv": G, "queries_per_head": Qn,
            "allocations": E, "seed": a.seed, "numpy": np.__version__,
            "mean_rel_error_f32": float(err32.mean()), "mean_rel_error_f64": float(err64.mean())}
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
