#!/usr/bin/env python3
"""Measure what the synthetic generator is calibrated on, from a trace, in NumPy alone.

An implementation independent of tierlab's C++ (model/realism.cpp), used for the golden numbers
of tests/test_realism.cpp and for the calibration constants of model/synthetic/synthetic.cpp
(docs/synthetic.md, "Where the numbers come from"). For every head of a trace (safetensors,
docs/trace-format.md; F32 or F16 tensors) and its causal observation queries (the query at
position p attends to keys 0..p, docs/model.md section 12, convention 4):

  realism statistics (as `tierlab info TRACE --realism`)
    entropy H (nats), first-token mass, n90 (fewest tokens holding 90% of the attention),
    margin (max - median logit, nats), 2-bit logit noise mean_t (q.(k^_t - k_t))^2 / d with k^
    KIVI 2-bit per channel in groups of 32 tokens (float32 arithmetic), key and query channel
    spread (max / median channel RMS)
  calibration quantities
    logit_std   per query, the standard deviation of its logits over t = 0..p; per head the mean
    query_cv    per head, the coefficient of variation of logit_std over its queries
    key_rho     per head, the lag-1 autocorrelation of the pre-RoPE keys (channel means removed)

Prints, per quantity, the median, 10th and 90th percentiles over heads (numpy.percentile), and
with --heads the per-head values.

Usage:
  /usr/bin/python3 tools/synthetic_calibration.py TRACE.safetensors [--heads]
"""
import argparse
import json
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__")

    def tensor(name):
        info = header[name]
        begin, end = info["data_offsets"]
        dtype = {"F32": np.float32, "F16": np.float16}[info["dtype"]]
        return np.frombuffer(data[begin:end], dtype=dtype).reshape(info["shape"]).astype(np.float64)

    return meta, tensor, set(header)


def kivi(keys, bits=2, group=32):
    """KIVI per-channel quantize-dequantize in float32 (model/quantizers/quantizer.hpp's arithmetic)."""
    out = keys.astype(np.float32).copy()
    levels = np.float32(2**bits - 1)
    for s in range(0, keys.shape[0], group):
        blk = keys[s:s + group].astype(np.float32)
        mn, mx = blk.min(0), blk.max(0)
        scale = (mx - mn) / levels
        with np.errstate(divide="ignore", invalid="ignore"):
            code = np.rint(np.clip((blk - mn) / scale, np.float32(0), levels)).astype(np.float32)
        out[s:s + group] = np.where(scale > 0, code * scale + mn, blk)
    return out.astype(np.float64)


def head_stats(meta, tensor, names, layer, head):
    T, W = int(meta["prompt_len"]), int(meta["obs_window"])
    g, d = int(meta["group_size"]), int(meta["head_dim"])
    prefix = f"layers.{layer}.heads.{head}."
    K = tensor(prefix + "keys")
    Q = tensor(prefix + "obs_queries").reshape(g, W, d)
    Kq = kivi(K)
    per = {k: [] for k in ("entropy", "first_token_mass", "n90", "margin", "noise", "logit_std")}
    for j in range(g):
        for i in range(W):
            p = T - W + i
            q = Q[j, i]
            s = K[:p + 1] @ q / np.sqrt(d)
            a = np.exp(s - s.max())
            a /= a.sum()
            nz = a[a > 0]
            per["entropy"].append(-(nz * np.log(nz)).sum())
            per["first_token_mass"].append(a[0])
            per["n90"].append(int(np.searchsorted(np.cumsum(np.sort(a)[::-1]), 0.9) + 1))
            per["margin"].append(s.max() - np.median(s))
            per["noise"].append(np.mean(((Kq[:p + 1] - K[:p + 1]) @ q) ** 2) / d)
            per["logit_std"].append(s.std())
    out = {k: float(np.mean(v)) for k, v in per.items()}
    stds = np.array(per["logit_std"])
    out["query_cv"] = float(stds.std() / stds.mean())
    key_rms = np.sqrt((K**2).mean(0))
    query_rms = np.sqrt((Q.reshape(-1, d) ** 2).mean(0))
    out["key_spread"] = float(key_rms.max() / np.median(key_rms))
    out["query_spread"] = float(query_rms.max() / np.median(query_rms))
    if prefix + "keys_pre_rope" in names:
        c = tensor(prefix + "keys_pre_rope")
        c = c - c.mean(0)
        out["key_rho"] = float((c[1:] * c[:-1]).sum() / (c * c).sum())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--heads", action="store_true", help="also print every head's values")
    args = ap.parse_args()
    meta, tensor, names = load(args.trace)
    rows = []
    for layer in range(int(meta["n_layers"])):
        for head in range(int(meta["n_kv_heads"])):
            rows.append(((layer, head), head_stats(meta, tensor, names, layer, head)))
    keys = list(rows[0][1])
    print(f"{args.trace}: T = {meta['prompt_len']}, W = {meta['obs_window']}, {len(rows)} heads")
    print(f"{'quantity':18s} {'median':>10s} {'p10':>10s} {'p90':>10s} {'mean':>10s}")
    for k in keys:
        v = np.array([r[k] for _, r in rows])
        print(f"{k:18s} {np.median(v):10.4g} {np.percentile(v, 10):10.4g} {np.percentile(v, 90):10.4g} {v.mean():10.4g}")
    if args.heads:
        print("layer head " + " ".join(f"{k:>10s}" for k in keys))
        for (layer, head), r in rows:
            print(f"{layer:5d} {head:4d} " + " ".join(f"{r[k]:10.4g}" for k in keys))


if __name__ == "__main__":
    sys.exit(main())
