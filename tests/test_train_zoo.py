#!/usr/bin/python3
"""tools/train_zoo.py, smoke test: a few steps of training, then tierlab reads the checkpoint.

Trains a tiny model (2 layers, 4 query heads sharing 2 KV heads, head dim 8, RoPE theta
1e6, context 32) for 60 steps on a corpus made of this repository's docs, then checks:
  * the training loss falls;
  * rerunning the same command resumes from the saved state and writes the same checkpoint;
  * `tierlab capture` reads the llama2.c checkpoint (theta 1e6 from its RoPE tables) and
    its keys, pre-RoPE keys, values, observation and decode queries of every layer and
    head equal the training code's own (its forward pass, hooked) to float tolerance, and
    the decoded tokens are the training code's greedy choices;
  * `tierlab replay --json` (exact policy) gives, at every decode step, the negative
    log-likelihood of the greedy token that the training code's logits give.
Exit status 77 (ctest SKIP_RETURN_CODE) with "SKIPPED: ..." when torch or numpy is missing
(python3-torch is not a build dependency: deps/zoo-packages.txt).

Usage: test_train_zoo.py --tierlab PATH_TO_TIERLAB
"""
import argparse
import glob
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOOL = os.path.join(ROOT, "tools", "train_zoo.py")

try:
    import numpy as np
except ImportError:
    print("SKIPPED: numpy not installed")
    sys.exit(SKIP)
try:
    import torch
except ImportError:
    print("SKIPPED: torch not installed (tools/train_zoo.py needs Debian's python3-torch, deps/zoo-packages.txt)")
    sys.exit(SKIP)

sys.path.insert(0, os.path.join(ROOT, "tools"))
import train_zoo  # noqa: E402

LAYERS, HEADS, KV, HD, CTX, THETA = 2, 4, 2, 8, 32, 1e6
G = HEADS // KV
T, S, W = 20, 8, 4

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def read_safetensors(path):
    """The F32/I32 tensors of a safetensors file, without the safetensors package."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": "<f4", "I32": "<i4", "I64": "<i8"}[t["dtype"]]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dtype).reshape(t["shape"])
    return out, header.get("__metadata__", {})


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tierlab", required=True)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        # A corpus of English text: the repository's docs, repeated to the size the split needs.
        text = b"".join(open(p, "rb").read() for p in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))))
        text = text.replace(b"\x01", b" ")
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "wb") as f:
            f.write(text * (1 + 2 * train_zoo.BLOCK * train_zoo.HELD_OUT_EVERY // len(text)))
        cmd = [sys.executable, TOOL, "--name", "tiny", "--out", tmp, "--state-dir", os.path.join(tmp, "state"),
               "--corpus", corpus, "--layers", str(LAYERS), "--heads", str(HEADS), "--kv-heads", str(KV),
               "--head-dim", str(HD), "--rope-theta", str(THETA), "--ctx", str(CTX), "--batch", "16",
               "--steps", "60", "--warmup", "10", "--lr", "3e-3", "--log-every", "10", "--eval-every", "30",
               "--eval-windows", "8", "--final-eval-windows", "16", "--max-minutes", "10"]
        r = run(cmd)
        check(r.returncode == 0, "train_zoo.py trains 60 steps")
        if r.returncode != 0:
            return 1
        cfg = json.load(open(os.path.join(tmp, "tiny", "config.json")))
        losses = [h["train_loss"] for h in cfg["history"] if "train_loss" in h]
        check(len(losses) == 6 and losses[-1] < losses[0] - 0.5,
              f"the training loss falls (every 10 steps: {', '.join(f'{x:.3f}' for x in losses)})")
        check(cfg["held_out_loss_nats_per_byte"] < cfg["baselines_nats_per_byte"]["1-gram"] + 0.5,
              f"held-out loss {cfg['held_out_loss_nats_per_byte']:.3f} is reported beside the baselines")
        binary = os.path.join(tmp, "tiny", "tiny.bin")
        sha = hashlib.sha256(open(binary, "rb").read()).hexdigest()
        r = run(cmd)
        check(r.returncode == 0 and "resumed at step 60" in r.stdout, "rerunning resumes from the saved state")
        check(hashlib.sha256(open(binary, "rb").read()).hexdigest() == sha, "and writes the same checkpoint")

        # The training code's forward pass on the saved weights, every layer's q, k, v hooked.
        model = train_zoo.build_model(torch, cfg["architecture"])
        state = torch.load(os.path.join(tmp, "state", "tiny.pt"))
        model.load_state_dict(state["model"])
        model.eval()
        prompt = [train_zoo.BOS] + list(text[1000:1000 + T - 1])
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(S):  # greedy decoding with the full context
                ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
            trace = []
            logits = model(torch.tensor([ids]), trace=trace)[0].double()
        logp = torch.log_softmax(logits, dim=-1)

        out = os.path.join(tmp, "tiny.safetensors")
        r = run([args.tierlab, "capture", "--checkpoint", binary, "--prompt-ids", ",".join(map(str, prompt)),
                 "--decode-steps", str(S), "--obs-window", str(W), "-o", out])
        check(r.returncode == 0, "tierlab capture reads the checkpoint")
        if r.returncode != 0:
            return 1
        tensors, meta = read_safetensors(out)
        check(abs(float(meta.get("rope_theta", "nan")) - THETA) <= 1e-6 * THETA,
              f"the trace's RoPE theta is the training's ({meta.get('rope_theta')})")
        check(list(tensors["token_ids"]) == ids, "the decoded tokens are the training code's greedy choices")
        worst = 0.0
        for l in range(LAYERS):
            q = trace[l]["q"][0].numpy()          # [T+S, HEADS, HD], post-RoPE
            k_pre = trace[l]["k_pre"][0].numpy()  # [T+S, KV, HD]
            k = trace[l]["k"][0].numpy()
            v = trace[l]["v"][0].numpy()
            for h in range(KV):
                p = f"layers.{l}.heads.{h}."
                # Decode step s (1..S) feeds the token at position T + s - 1.
                want = {"keys": k[:T, h], "keys_pre_rope": k_pre[:T, h], "values": v[:T, h],
                        "decode_keys": k[T:T + S, h], "decode_values": v[T:T + S, h],
                        "obs_queries": q[T - W:T, h * G:(h + 1) * G].transpose(1, 0, 2),
                        "decode_queries": q[T:T + S, h * G:(h + 1) * G].transpose(1, 0, 2)}
                for name, w in want.items():
                    got = tensors[p + name]
                    if got.shape != w.shape:
                        check(False, f"{p}{name} has shape {got.shape}, expected {w.shape}")
                        continue
                    worst = max(worst, float(np.max(np.abs(got - w) / (1e-3 + np.abs(w)))))
        check(worst < 1e-3, f"every captured key, value and query equals the training code's (largest relative "
                            f"difference {worst:.2e})")

        r = run([args.tierlab, "replay", "--checkpoint", binary, "--prompt-ids", ",".join(map(str, prompt)),
                 "--decode-steps", str(S), "--policy", "exact", "--json"])
        check(r.returncode == 0, "tierlab replay reads the checkpoint")
        if r.returncode != 0:
            return 1
        steps = json.loads(r.stdout)["steps"]
        diffs, same_argmax = [], True
        for s, st in enumerate(steps, start=1):
            pos = T + s - 1  # decode step s feeds the token at this position; its logits pick the next
            best = int(logits[pos].argmax())
            same_argmax = same_argmax and st["full_argmax"] == best
            diffs.append(abs(st["nll_full"] - float(-logp[pos, best])))
        check(same_argmax, "replay's full-cache greedy token at every step is the training code's argmax")
        check(len(steps) == S and max(diffs) < 1e-4,
              f"replay's per-step negative log-likelihood equals the training code's log-softmax "
              f"(largest difference {max(diffs):.2e} nats)")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
