#!/usr/bin/env python3
"""tools/capture_hf.py on a randomly initialised tiny Llama (no download).

Builds a LlamaConfig model with GQA (4 query heads, 2 KV heads), saves it to a temporary
directory, runs the tool's command line on it, then checks the trace file:
  * `tierlab info --json` reads it and reports the expected shapes and metadata;
  * the decoded tokens are the model's greedy choices;
  * post-RoPE keys are the pre-RoPE keys rotated in halves with the file's rope_theta;
  * every decode step's attention output, recomputed in numpy from the trace's tensors
    alone (softmax(q k^T / sqrt(d)) V), equals the model's own attention output (the
    input of o_proj, hooked here independently of the tool).
Exit status 77 (ctest SKIP_RETURN_CODE) with "SKIPPED: ..." when torch, transformers,
safetensors or numpy is missing.

Usage: test_capture_hf.py [--tierlab PATH_TO_TIERLAB]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "tools", "capture_hf.py")

try:
    import torch
except ImportError:
    print("SKIPPED: torch not installed (tools/capture_hf.py needs PyTorch + transformers)")
    sys.exit(SKIP)
try:
    import transformers  # noqa: F401
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError:
    print("SKIPPED: transformers not installed (tools/capture_hf.py needs PyTorch + transformers)")
    sys.exit(SKIP)
try:
    import numpy as np
    from safetensors.numpy import load_file
    from safetensors import safe_open
except ImportError as e:
    print(f"SKIPPED: {e.name} not installed")
    sys.exit(SKIP)

T, S, W = 12, 6, 4
N_LAYERS, N_HEADS, N_KV, HIDDEN = 2, 4, 2, 64
D = HIDDEN // N_HEADS
G = N_HEADS // N_KV

failures = []
passes = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    (passes if cond else failures).append(what)


def tiny_model(directory):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=N_LAYERS,
                      num_attention_heads=N_HEADS, num_key_value_heads=N_KV, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # sharper attention than the 0.02-std initialisation gives
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    model.save_pretrained(directory)
    return model


def rotate_half(x, theta):
    """Hugging Face RoPE ("half" style) in float64: pair (i, i + d/2) of position p rotated
    by p / theta^(2i/d)."""
    n, d = x.shape
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))
    rot = np.concatenate([-x[:, d // 2:], x[:, :d // 2]], 1)
    return x * cos + rot * sin


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tierlab", help="path of the tierlab executable (for `tierlab info --json`)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = os.path.join(tmp, "tiny-llama")
        model = tiny_model(model_dir)
        prompt = [1, 5, 17, 33, 2, 9, 71, 40, 8, 8, 60, 3]
        out = os.path.join(tmp, "trace.safetensors")
        cmd = [sys.executable, TOOL, "--model", model_dir, "--prompt-ids", ",".join(map(str, prompt)),
               "--decode-steps", str(S), "--obs-window", str(W), "--device", "cpu", "--check", "-o", out]
        run = subprocess.run(cmd, capture_output=True, text=True)
        print(run.stdout + run.stderr)
        check(run.returncode == 0, "capture_hf.py exits 0 (its own --check passes)")
        if run.returncode != 0:
            return 1

        tensors = load_file(out)
        with safe_open(out, "np") as f:
            meta = f.metadata()
        check(meta["tierlab.format"] == "trace-v1", "metadata tierlab.format = trace-v1")
        check(meta["rope_style"] == "half", "rope_style = half")
        check(int(meta["prompt_len"]) == T and int(meta["decode_steps"]) == S and int(meta["obs_window"]) == W,
              "T, S, W in the metadata")
        check(json.loads(meta["provenance"])["source"] == "captured", "provenance source = captured")

        if args.tierlab:
            info = subprocess.run([args.tierlab, "info", out, "--json"], capture_output=True, text=True)
            check(info.returncode == 0, "tierlab info --json reads the trace: " + info.stderr.strip())
            if info.returncode == 0:
                j = json.loads(info.stdout)
                check((j["n_layers"], j["n_kv_heads"], j["group_size"], j["head_dim"]) == (N_LAYERS, N_KV, G, D),
                      f"tierlab info: layers/KV heads/g/d = {j['n_layers']}/{j['n_kv_heads']}/{j['group_size']}/{j['head_dim']}")
                check((j["prompt_len"], j["obs_window"], j["decode_steps"]) == (T, W, S), "tierlab info: T, W, S")
                check(j["has_pre_rope"] and j["rope"]["style"] == "half", "tierlab info: pre-RoPE keys, half RoPE")
                check(j["token_ids"] == T + S, "tierlab info: T + S token ids")
                check(j["provenance"]["source"] == "captured", "tierlab info: provenance")
        else:
            print("note: --tierlab not given, `tierlab info --json` not checked")

        ids = tensors["token_ids"].astype(np.int64)
        check(list(ids[:T]) == prompt, "token_ids start with the prompt")
        outputs = {}

        def hook(l):
            def f(_m, a):
                outputs[l] = a[0][0].detach().double().numpy()
            return f
        handles = [layer.self_attn.o_proj.register_forward_pre_hook(hook(l)) for l, layer in enumerate(model.model.layers)]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor(ids)[None], use_cache=False).logits[0].double().numpy()
        for h in handles:
            h.remove()
        greedy = [int(np.argmax(logits[T + s - 2])) for s in range(1, S + 1)]
        check(greedy == list(ids[T:]), f"decoded tokens are the model's greedy choices {greedy}")

        theta = float(meta["rope_theta"])
        worst_rope = worst_attn = 0.0
        for l in range(N_LAYERS):
            for h in range(N_KV):
                p = f"layers.{l}.heads.{h}."
                k_pre = tensors[p + "keys_pre_rope"].astype(np.float64)
                worst_rope = max(worst_rope, float(np.abs(rotate_half(k_pre, theta) - tensors[p + "keys"]).max()))
                K = np.concatenate([tensors[p + "keys"], tensors[p + "decode_keys"]]).astype(np.float64)
                V = np.concatenate([tensors[p + "values"], tensors[p + "decode_values"]]).astype(np.float64)
                Q = tensors[p + "decode_queries"].astype(np.float64)   # [g, S, d]
                Qo = tensors[p + "obs_queries"].astype(np.float64)     # [g, W, d]
                for j in range(G):
                    qh = h * G + j
                    for s in range(1, S + 1):
                        a = K[:T + s] @ Q[j, s - 1] / np.sqrt(D)
                        w = np.exp(a - a.max())
                        o = (w / w.sum()) @ V[:T + s]
                        ref = outputs[l][T + s - 1, qh * D:(qh + 1) * D]
                        worst_attn = max(worst_attn, float(np.abs(o - ref).max() / np.abs(ref).max()))
                    for i in range(W):  # observation query i at position T - W + i, causal
                        pos = T - W + i
                        a = K[:pos + 1] @ Qo[j, i] / np.sqrt(D)
                        w = np.exp(a - a.max())
                        o = (w / w.sum()) @ V[:pos + 1]
                        ref = outputs[l][pos, qh * D:(qh + 1) * D]
                        worst_attn = max(worst_attn, float(np.abs(o - ref).max() / np.abs(ref).max()))
        check(worst_rope < 1e-4, f"keys = half-RoPE(keys_pre_rope, theta={theta:g}) (max diff {worst_rope:.2e})")
        check(worst_attn < 1e-5, f"recomputed attention outputs equal the model's (max rel diff {worst_attn:.2e})")
    print(f"{len(passes)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
