#!/usr/bin/env python3
"""Capture a tierlab trace from a Hugging Face causal LM (Llama, Mistral, Qwen2/Qwen3).

Writes the same safetensors container as `tierlab capture` (docs/trace-format.md): per
layer l and KV head h the post-RoPE keys, pre-RoPE keys and values of the T prompt
positions, the observation queries (the last W prompt positions, post-RoPE, of the g
query heads h*g .. h*g+g-1), the decode-step queries, and the key/value each decode
step appends, plus the token ids of the prompt and of the S decoded tokens.

Sequence: the prompt x_0..x_{T-1} is followed by S tokens chosen greedily by the model
with its full cache (x_T = argmax of the prompt's last logits, ...). Then one forward
pass over all T + S tokens is recorded: decode step s (1-based) is position T + s - 1,
whose query attends to the T prompt keys and decode keys 1..s, exactly as during
incremental decoding (causal attention).

How the tensors are captured: every attention module of these model families calls its
modeling module's `apply_rotary_pos_emb(q, k, cos, sin)`; this tool wraps that function
while it records, so the pre-RoPE q/k are its inputs and the post-RoPE q/k its outputs:
RoPE "as the model applies it" (Hugging Face rotates the halves (i, i + d/2): rope_style
"half"; any rope scaling the model uses is applied too). A forward pre-hook on each
attention module says which layer is running, and a forward hook on v_proj records the
values. Qwen3's per-head q/k RMSNorm runs before RoPE, so its pre-RoPE keys are the
normalised ones (what RoPE rotates).

Usage:
  python3 tools/capture_hf.py --model PATH_OR_HUB_ID --prompt "Once upon a time" \
      --decode-steps 64 --obs-window 32 -o trace.safetensors [--device cuda] [--dtype bfloat16]
  python3 tools/capture_hf.py --model ./tiny-llama --prompt-ids 1,15,27,3 --decode-steps 8 -o t.safetensors

Needs torch, transformers and safetensors (numpy for --check).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from contextlib import contextmanager

try:
    import torch
except ImportError:  # --help works without PyTorch; main() says what is missing
    torch = None

def no_grad(fn):
    """torch.no_grad() when PyTorch is installed (the functions that need it run only then)."""
    return torch.no_grad()(fn) if torch is not None else fn


FORMAT = "trace-v1"
STORAGE = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}  # trace dtype -> torch dtype name
COMPUTE = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def attention_modules(model):
    """The self-attention modules, in layer order (modules with q/k/v/o projections)."""
    mods = [m for m in model.modules() if all(hasattr(m, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj"))]
    if not mods:
        raise RuntimeError(f"{type(model).__name__}: found no attention module with q_proj/k_proj/v_proj/o_proj")
    return mods


def model_shape(model):
    """(n_layers, n_heads, n_kv_heads, head_dim) from the model's config."""
    cfg = model.config
    cfg = getattr(cfg, "text_config", None) or cfg
    n_heads = cfg.num_attention_heads
    n_kv = getattr(cfg, "num_key_value_heads", None) or n_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    return len(attention_modules(model)), n_heads, n_kv, head_dim


def rope_config(model, head_dim):
    """(theta, rotary_dim, rope_type, scaling) from the config (transformers 4 and 5 layouts)."""
    cfg = getattr(model.config, "text_config", None) or model.config
    params = getattr(cfg, "rope_parameters", None) or {}
    scaling = getattr(cfg, "rope_scaling", None) or {}
    theta = params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    rope_type = params.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    factor = params.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", 1.0))
    rotary_dim = int(head_dim * factor)
    return float(theta), (0 if rotary_dim == head_dim else rotary_dim), rope_type, (params or scaling or None)


class _Recorder:
    """Collects, per layer, the RoPE inputs/outputs and the values of one forward pass."""

    def __init__(self, n_layers, first_query_pos):
        self.layer = None
        self.first_query_pos = first_query_pos  # keep queries from here on (T - W)
        self.q = [None] * n_layers       # [n_heads, n - first, d] post-RoPE
        self.k_pre = [None] * n_layers   # [n_kv, n, d]
        self.k_post = [None] * n_layers  # [n_kv, n, d]
        self.v = [None] * n_layers       # [n, n_kv * d]
        self.rope_calls = [0] * n_layers

    def on_rope(self, q_out, k_in, k_out):
        layer = self.layer
        if layer is None:
            return
        if q_out.dim() != 4 or k_in.dim() != 4:
            raise RuntimeError(f"apply_rotary_pos_emb got q of shape {tuple(q_out.shape)}; expected [batch, heads, seq, head_dim]")
        self.rope_calls[layer] += 1
        self.q[layer] = q_out[0, :, self.first_query_pos:].detach().float().cpu()
        self.k_pre[layer] = k_in[0].detach().float().cpu()
        self.k_post[layer] = k_out[0].detach().float().cpu()


@contextmanager
def recording(model, recorder):
    """Wraps apply_rotary_pos_emb of the attention modules' modeling modules and hooks the
    layers and v_proj; restores everything on exit."""
    mods = attention_modules(model)
    handles, patched = [], {}
    try:
        for index, attn in enumerate(mods):
            def pre_hook(_module, _args, index=index):
                recorder.layer = index
            handles.append(attn.register_forward_pre_hook(pre_hook))

            def v_hook(_module, _inputs, output, index=index):
                recorder.v[index] = output[0].detach().float().cpu()
            handles.append(attn.v_proj.register_forward_hook(v_hook))

            module = sys.modules[type(attn).__module__]
            if module.__name__ in patched:
                continue
            original = getattr(module, "apply_rotary_pos_emb", None)
            if original is None:
                raise RuntimeError(f"{module.__name__} has no apply_rotary_pos_emb: this model family is not supported "
                                   "(supported: Llama, Mistral, Qwen2, Qwen3 as implemented in transformers)")

            def wrapper(q, k, *args, _original=original, **kwargs):
                q_out, k_out = _original(q, k, *args, **kwargs)
                recorder.on_rope(q_out, k, k_out)
                return q_out, k_out
            patched[module.__name__] = (module, original)
            module.apply_rotary_pos_emb = wrapper
        yield recorder
    finally:
        for h in handles:
            h.remove()
        for module, original in patched.values():
            module.apply_rotary_pos_emb = original
        recorder.layer = None


@no_grad
def greedy_continuation(model, prompt_ids, decode_steps):
    """x_T..x_{T+S-1}: S tokens chosen greedily with the full (KV-cached) model."""
    device = next(model.parameters()).device
    out = model(input_ids=torch.tensor([prompt_ids], device=device), use_cache=True)
    tokens = []
    for s in range(decode_steps):
        nxt = int(out.logits[0, -1].argmax())
        tokens.append(nxt)
        if s + 1 < decode_steps:
            out = model(input_ids=torch.tensor([[nxt]], device=device), past_key_values=out.past_key_values,
                        use_cache=True)
    return tokens


@no_grad
def capture(model, prompt_ids, decode_steps, obs_window, storage="F32", provenance=None):
    """Returns (tensors, metadata) of the trace, ready for safetensors.torch.save_file."""
    if storage not in STORAGE:
        raise ValueError(f"storage {storage!r} is not one of {sorted(STORAGE)}")
    n_layers, n_heads, n_kv, d = model_shape(model)
    if n_heads % n_kv:
        raise ValueError(f"n_heads = {n_heads} is not a multiple of n_kv_heads = {n_kv}")
    g = n_heads // n_kv
    T, S, W = len(prompt_ids), decode_steps, obs_window
    if T < 1:
        raise ValueError("the prompt is empty")
    if not 0 <= W <= T:
        raise ValueError(f"observation window W = {W} must be in 0..T = {T}")
    if S < 0:
        raise ValueError(f"decode steps S = {S} is negative")

    ids = list(prompt_ids) + greedy_continuation(model, prompt_ids, S)
    device = next(model.parameters()).device
    rec = _Recorder(n_layers, T - W)
    with recording(model, rec):
        model(input_ids=torch.tensor([ids], device=device), use_cache=False)
    missing = [l for l in range(n_layers) if rec.rope_calls[l] != 1 or rec.v[l] is None]
    if missing:
        raise RuntimeError(f"layers {missing} were not recorded (apply_rotary_pos_emb calls per layer: {rec.rope_calls}); "
                           "this model's attention does not call its module's apply_rotary_pos_emb once per layer")

    dtype = getattr(torch, STORAGE[storage])
    tensors = {}
    for l in range(n_layers):
        q, k_pre, k_post = rec.q[l], rec.k_pre[l], rec.k_post[l]  # [nh, W+S, d], [nkv, T+S, d]
        v = rec.v[l].view(T + S, n_kv, d)
        if q.shape != (n_heads, W + S, d) or k_post.shape != (n_kv, T + S, d):
            raise RuntimeError(f"layer {l}: captured q {tuple(q.shape)} / k {tuple(k_post.shape)}, expected "
                               f"({n_heads}, {W + S}, {d}) / ({n_kv}, {T + S}, {d})")
        for h in range(n_kv):
            p = f"layers.{l}.heads.{h}."
            qh = q[h * g:(h + 1) * g]  # the query heads that share KV head h (repeat_kv)
            tensors[p + "keys"] = k_post[h, :T]
            tensors[p + "keys_pre_rope"] = k_pre[h, :T]
            tensors[p + "values"] = v[:T, h]
            tensors[p + "obs_queries"] = qh[:, :W]
            tensors[p + "decode_queries"] = qh[:, W:]
            tensors[p + "decode_keys"] = k_post[h, T:]
            tensors[p + "decode_values"] = v[T:, h]
    for name, t in tensors.items():
        converted = t.to(dtype)
        if not torch.isfinite(converted).all():
            raise ValueError(f"tensor {name}: a value is not finite in {storage} (use --storage F32 or BF16)")
        tensors[name] = converted.contiguous().clone()
    tensors["token_ids"] = torch.tensor(ids, dtype=torch.int32)

    theta, rotary_dim, rope_type, rope_params = rope_config(model, d)
    prov = {"source": "captured", "model": getattr(model.config, "_name_or_path", "") or type(model).__name__,
            "architecture": type(model).__name__, "tool": "tools/capture_hf.py",
            "decode": "greedy (full cache)", "rope_type": rope_type,
            "attention_scaling": float(getattr(attention_modules(model)[0], "scaling", d ** -0.5)),
            "compute_dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
            "torch": torch.__version__}
    try:
        import transformers
        prov["transformers"] = transformers.__version__
    except ImportError:
        pass
    if rope_params:
        prov["rope_parameters"] = {k: v for k, v in dict(rope_params).items() if isinstance(v, (int, float, str))}
    prov.update(provenance or {})
    metadata = {
        "tierlab.format": FORMAT,
        "n_layers": str(n_layers), "n_kv_heads": str(n_kv), "group_size": str(g), "head_dim": str(d),
        "prompt_len": str(T), "obs_window": str(W), "decode_steps": str(S),
        "has_pre_rope": "true", "storage_dtype": storage,
        "rope_theta": repr(theta), "rope_dim": str(rotary_dim), "rope_style": "half",
        "provenance": json.dumps(prov), "spans": "{}",
    }
    return tensors, metadata


def save_trace(path, tensors, metadata):
    """Writes atomically: a temporary file in the same folder, then a rename."""
    from safetensors.torch import save_file
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        save_file(tensors, tmp, metadata=metadata)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def check_attention(model, tensors, metadata):
    """Largest difference between softmax(q k^T * scaling) V recomputed from the captured
    tensors (float64) and the model's own attention output (the input of o_proj), relative
    to the largest entry of that output, over every decode step of every query head."""
    import numpy as np
    n_layers, n_kv, g, d = (int(metadata[k]) for k in ("n_layers", "n_kv_heads", "group_size", "head_dim"))
    T, S = int(metadata["prompt_len"]), int(metadata["decode_steps"])
    if S == 0:
        return 0.0
    mods = attention_modules(model)
    outputs = [None] * n_layers
    handles = []
    for l, attn in enumerate(mods):
        def hook(_m, args, l=l):
            outputs[l] = args[0][0].detach().double().cpu().numpy()
        handles.append(attn.o_proj.register_forward_pre_hook(hook))
    try:
        ids = tensors["token_ids"].long()[None].to(next(model.parameters()).device)
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    scaling = json.loads(metadata["provenance"]).get("attention_scaling", d ** -0.5)
    worst = 0.0
    for l in range(n_layers):
        for h in range(n_kv):
            p = f"layers.{l}.heads.{h}."
            K = np.concatenate([tensors[p + "keys"].double().numpy(), tensors[p + "decode_keys"].double().numpy()])
            V = np.concatenate([tensors[p + "values"].double().numpy(), tensors[p + "decode_values"].double().numpy()])
            Q = tensors[p + "decode_queries"].double().numpy()
            for j in range(g):
                for s in range(1, S + 1):
                    logits = K[:T + s] @ Q[j, s - 1] * scaling
                    w = np.exp(logits - logits.max())
                    o = (w / w.sum()) @ V[:T + s]
                    qh = h * g + j
                    ref = outputs[l][T + s - 1, qh * d:(qh + 1) * d]
                    worst = max(worst, float(np.max(np.abs(o - ref)) / max(float(np.max(np.abs(ref))), 1e-12)))
    return worst


def load_model(name, device, dtype, trust_remote_code=False, attn_implementation="eager"):
    import transformers
    from transformers import AutoModelForCausalLM
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_kw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    kwargs = {dtype_kw: getattr(torch, COMPUTE[dtype]), "trust_remote_code": trust_remote_code}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model = AutoModelForCausalLM.from_pretrained(name, **kwargs)
    return model.to(device).eval()


def parse_prompt_ids(text, ap):
    """The comma-separated prompt ids of --prompt-ids (non-negative integers, at least one)."""
    parts = [x.strip() for x in text.split(",")]
    if not any(parts):
        ap.error("--prompt-ids is empty; give comma-separated token ids, e.g. 1,15,27,3")
    ids = []
    for x in parts:
        if not x.isdigit():
            ap.error(f"--prompt-ids: '{x}' is not a non-negative integer token id")
        ids.append(int(x))
    return ids


def sliding_window_of(model):
    """The model's attention window in tokens when it uses one (Mistral, Qwen2 with
    use_sliding_window), else None."""
    cfg = getattr(model, "config", None)
    window = getattr(cfg, "sliding_window", None)
    if window is None or (hasattr(cfg, "use_sliding_window") and not cfg.use_sliding_window):
        return None
    return int(window)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face model id or local directory")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text (tokenized with the model's tokenizer)")
    src.add_argument("--prompt-ids", help="prompt token ids, comma-separated")
    src.add_argument("--prompt-file", help="file holding the prompt text")
    ap.add_argument("--decode-steps", type=int, required=True, help="decode steps S (greedy, full cache)")
    ap.add_argument("--obs-window", type=int, default=None,
                    help="observation window W (1 to the prompt length; default min(32, T))")
    ap.add_argument("--device", default="cuda" if torch is not None and torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="float32", choices=sorted(COMPUTE), help="compute dtype of the model")
    ap.add_argument("--storage", default="F32", choices=sorted(STORAGE), help="dtype of the trace's float tensors")
    ap.add_argument("--attn-implementation", default="eager", help="eager (default), sdpa, ...")
    ap.add_argument("--trust-remote-code", action="store_true")
    ap.add_argument("--check", action="store_true",
                    help="recompute the decode steps' attention outputs from the trace and compare with the model's")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args(argv)
    # Every option is checked before the model is loaded (minutes, gigabytes).
    if args.decode_steps < 0:
        ap.error(f"--decode-steps is {args.decode_steps}; decode steps S must be 0 or more")
    if args.obs_window is not None and args.obs_window < 1:
        ap.error(f"--obs-window is {args.obs_window}; the observation window W must be at least 1 "
                 "(tierlab's surrogate and its observation-query errors need W >= 1 queries)")
    ids = None
    if args.prompt_ids is not None:
        ids = parse_prompt_ids(args.prompt_ids, ap)
        if args.obs_window is not None and args.obs_window > len(ids):
            ap.error(f"--obs-window is {args.obs_window}, longer than the {len(ids)} prompt ids")
    if args.prompt_file is not None and not os.path.isfile(args.prompt_file):
        ap.error(f"--prompt-file: '{args.prompt_file}' is not a readable file")
    if args.prompt is not None and not args.prompt.strip():
        ap.error("--prompt is empty")
    if torch is None:
        ap.exit(2, "capture_hf.py: PyTorch is not installed; install torch and transformers to capture a trace.\n")

    model = load_model(args.model, args.device, args.dtype, args.trust_remote_code, args.attn_implementation)
    prov = {"model": args.model}
    if ids is not None:
        prov["prompt"] = "ids"
    else:
        from transformers import AutoTokenizer
        text = args.prompt if args.prompt is not None else open(args.prompt_file, encoding="utf-8").read()
        tok = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
        ids = tok(text)["input_ids"]
        prov["prompt"] = text if len(text) <= 200 else text[:200] + "..."
    if args.obs_window is not None and args.obs_window > len(ids):
        print(f"capture_hf.py: error: --obs-window is {args.obs_window}, longer than the prompt's {len(ids)} tokens",
              file=sys.stderr)
        return 2
    W = args.obs_window if args.obs_window is not None else min(32, len(ids))
    window = sliding_window_of(model)
    if window is not None:
        prov["sliding_window"] = window
        if window < len(ids) + args.decode_steps:
            # tierlab recomputes attention over the whole cache; such a model never attends that far back.
            print(f"capture_hf.py: error: {args.model} attends through a sliding window of {window} tokens, shorter "
                  f"than T + S = {len(ids)} + {args.decode_steps} = {len(ids) + args.decode_steps}; tierlab's recomputation "
                  f"assumes every query sees the whole cache, so this trace would not be the model's attention. "
                  f"Capture at most {max(window - args.decode_steps, 0)} prompt tokens with --decode-steps {args.decode_steps}.",
                  file=sys.stderr)
            return 2
    tensors, metadata = capture(model, ids, args.decode_steps, W, args.storage, prov)
    save_trace(args.output, tensors, metadata)
    print(f"captured {args.model}: {metadata['n_layers']} layers x {metadata['n_kv_heads']} KV heads "
          f"(g={metadata['group_size']}, d={metadata['head_dim']}), T={len(ids)}, W={W}, S={args.decode_steps}; "
          f"wrote {args.output}")
    if args.check:
        worst = check_attention(model, tensors, metadata)
        print(f"check: largest relative difference of recomputed attention outputs = {worst:.3g}")
        if worst > (1e-4 if args.dtype == "float32" and args.storage == "F32" else 5e-2):
            print("check FAILED", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
