#!/usr/bin/python3
"""Train one small Llama-architecture language model of tierlab's zoo (data/zoo/) on a CPU.

The model is Llama's (RMSNorm eps 1e-5, rotary position embedding with a chosen theta on
interleaved pairs (2i, 2i+1) as llama2.c rotates them, SwiGLU feed-forward, grouped-query
attention, an embedding shared with the classifier, no biases), over bytes: token id = byte
value, vocabulary 256, and id 1 (the control byte 0x01, absent from the corpus) is BOS, as
tierlab's llama2.c reader expects. Every training sequence is BOS followed by ctx-1 bytes
of a random window of the training text.

The result is written in llama2.c's legacy checkpoint format (data/stories260K/FORMAT.md:
a 7-int32 header, float32 weights, then the RoPE cos and sin tables, from which
`tierlab capture` reads theta), next to a config.json (the architecture, the training
options, the corpus and the measured numbers) and train.log (the progress lines).

Held-out text: the corpus is cut into 16 KiB blocks and every 20th block is held out. The
held-out loss (nats per byte) is compared with n-gram baselines fitted on the training
blocks (unigram, bigram and trigram, each interpolated with the order below it), so that
it is clear what the model learned beyond byte statistics.

Seeded and resumable: the training state (model, optimizer, step, random generators,
elapsed time) is saved to --state-dir every --save-every seconds and at the end; rerunning
the same command continues where it stopped. --max-minutes bounds the training's
wall-clock time over all runs together: when it is spent the run stops, says so in the log
and writes the model it has. The learning-rate schedule (linear warm-up, cosine decay to a
tenth) runs over --steps or over --max-minutes, whichever runs out first (the training's
progress is the larger of the two fractions), so a run cut short by its time budget still
ends with a decayed learning rate; a run whose steps bind is reproducible bit for bit.

BLAS: Debian's torch calls the system BLAS (libblas.so.3). With the reference BLAS
(libblas3) training is about 10x slower than with OpenBLAS; when the reference one is the
system's choice and libopenblas0-pthread is installed, the script restarts itself once with
OpenBLAS preloaded (LD_PRELOAD, OPENBLAS_NUM_THREADS = --threads) and says so.

Corpus: --corpus kjv (the default) is the King James Bible from Debian's bible-kjv
(`bible -l0 Gen1:1-Rev22:21`, public domain; data/zoo/README.md), lines stripped of their
leading spaces; --corpus FILE reads any UTF-8 or byte text instead.

Needs Debian's python3-torch (deps/zoo-packages.txt): /usr/bin/python3 tools/train_zoo.py ...
"""
import argparse
import hashlib
import json
import math
import os
import struct
import subprocess
import sys
import time

import numpy as np

BOS = 1
VOCAB = 256
BLOCK = 16384       # held-out split: blocks of this many bytes ...
HELD_OUT_EVERY = 20  # ... and every 20th one is held out


def fail(msg):
    print(f"train_zoo.py: {msg}", file=sys.stderr)
    sys.exit(2)


# ----------------------------------------------------------------------------- corpus

def load_corpus(spec):
    """Returns (bytes, description) of the corpus."""
    if spec == "kjv":
        try:
            out = subprocess.run(["bible", "-l0", "Gen1:1-Rev22:21"], stdin=subprocess.DEVNULL,
                                 capture_output=True, check=True).stdout
        except FileNotFoundError:
            fail("--corpus kjv needs Debian's bible-kjv (apt-get install bible-kjv); "
                 "the program 'bible' is not on PATH")
        lines = [ln.lstrip() for ln in out.decode("utf-8").split("\n")]
        text = ("\n".join(lines)).encode("utf-8")
        desc = ("King James Version of the Bible (1611/1769), Debian package bible-kjv-text, "
                "dumped with `bible -l0 Gen1:1-Rev22:21`, leading spaces stripped; public domain")
    else:
        if not os.path.isfile(spec):
            fail(f"--corpus '{spec}' is neither 'kjv' nor a readable file")
        with open(spec, "rb") as f:
            text = f.read()
        desc = f"file {os.path.basename(spec)}"
    if len(text) < 2 * BLOCK * HELD_OUT_EVERY:
        fail(f"--corpus '{spec}' has {len(text)} bytes; at least {2 * BLOCK * HELD_OUT_EVERY} are needed")
    if BOS in text:
        fail(f"--corpus '{spec}' contains byte 0x01 (at offset {text.index(BOS)}), which is the BOS id")
    return text, desc


def split_corpus(text):
    """Every HELD_OUT_EVERY-th BLOCK-byte block is held out; the rest is for training."""
    data = np.frombuffer(text, dtype=np.uint8)
    n_blocks = (len(data) + BLOCK - 1) // BLOCK
    train, held = [], []
    for b in range(n_blocks):
        (held if b % HELD_OUT_EVERY == HELD_OUT_EVERY // 2 else train).append(data[b * BLOCK:(b + 1) * BLOCK])
    return np.concatenate(train), held


def ngram_baselines(train, held_blocks):
    """Held-out cross-entropy (nats per byte) of unigram, bigram and trigram models fitted on
    the training bytes: p1 add-one smoothed; p_n(c | ctx) = (count(ctx, c) + a p_{n-1}(c | .)) /
    (count(ctx) + a) with a = 1 (interpolated Dirichlet smoothing)."""
    t = train.astype(np.int64)
    c1 = np.bincount(t, minlength=VOCAB).astype(np.float64)
    c2 = np.bincount(t[:-1] * VOCAB + t[1:], minlength=VOCAB ** 2).astype(np.float64)
    c3 = np.bincount((t[:-2] * VOCAB + t[1:-1]) * VOCAB + t[2:], minlength=VOCAB ** 3).astype(np.float64)
    p1 = (c1 + 1) / (c1.sum() + VOCAB)
    n2 = c2.reshape(VOCAB, VOCAB).sum(axis=1)
    n3 = c3.reshape(VOCAB * VOCAB, VOCAB).sum(axis=1)
    a = 1.0
    nll = {1: 0.0, 2: 0.0, 3: 0.0}
    count = 0
    for blk in held_blocks:
        h = blk.astype(np.int64)
        y = h[2:]
        x1 = h[1:-1]
        x0 = h[:-2]
        q1 = p1[y]
        q2 = (c2[x1 * VOCAB + y] + a * q1) / (n2[x1] + a)
        q3 = (c3[(x0 * VOCAB + x1) * VOCAB + y] + a * q2) / (n3[x0 * VOCAB + x1] + a)
        nll[1] += -np.log(q1).sum()
        nll[2] += -np.log(q2).sum()
        nll[3] += -np.log(q3).sum()
        count += len(y)
    return {f"{n}-gram": nll[n] / count for n in nll}


# ----------------------------------------------------------------------------- model

def rope_tables(seq_len, head_dim, theta):
    """cos and sin of the angle pos / theta^(2i/head_dim), computed in float64 and rounded to
    float32 (as tierlab's reader computes them): shape (seq_len, head_dim/2)."""
    i = np.arange(head_dim // 2, dtype=np.float64)
    pos = np.arange(seq_len, dtype=np.float64)
    angle = pos[:, None] / np.power(theta, 2.0 * i / head_dim)[None, :]
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


def build_model(torch, cfg):
    nn = torch.nn
    F = torch.nn.functional
    dim, hd = cfg["dim"], cfg["head_dim"]
    nh, nkv = cfg["n_heads"], cfg["n_kv_heads"]

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight

    def rotate(x, cos, sin):  # x (B, T, H, hd): pairs (2i, 2i+1) rotated by angle[pos, i]
        xr, xi = x[..., 0::2], x[..., 1::2]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack((xr * c - xi * s, xr * s + xi * c), dim=-1).flatten(-2)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm = RMSNorm()
            self.wq = nn.Linear(dim, nh * hd, bias=False)
            self.wk = nn.Linear(dim, nkv * hd, bias=False)
            self.wv = nn.Linear(dim, nkv * hd, bias=False)
            self.wo = nn.Linear(nh * hd, dim, bias=False)
            self.ffn_norm = RMSNorm()
            self.w1 = nn.Linear(dim, cfg["hidden_dim"], bias=False)
            self.w2 = nn.Linear(cfg["hidden_dim"], dim, bias=False)
            self.w3 = nn.Linear(dim, cfg["hidden_dim"], bias=False)

        def forward(self, x, cos, sin, mask, trace=None):
            B, T, _ = x.shape
            u = self.attention_norm(x)
            q = self.wq(u).view(B, T, nh, hd)
            k_pre = self.wk(u).view(B, T, nkv, hd)
            v = self.wv(u).view(B, T, nkv, hd)
            q, k = rotate(q, cos, sin), rotate(k_pre, cos, sin)
            if trace is not None:
                trace.append({"q": q, "k_pre": k_pre, "k": k, "v": v})
            g = nh // nkv
            kk = k.repeat_interleave(g, dim=2).transpose(1, 2)  # query head j reads KV head j // g
            vv = v.repeat_interleave(g, dim=2).transpose(1, 2)
            att = (q.transpose(1, 2) @ kk.transpose(-1, -2)) / math.sqrt(hd)
            att = F.softmax(att + mask[:T, :T], dim=-1)
            a = (att @ vv).transpose(1, 2).reshape(B, T, nh * hd)
            x = x + self.wo(a)
            u = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(u)) * self.w3(u))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(VOCAB, dim)
            self.layers = nn.ModuleList(Block() for _ in range(cfg["n_layers"]))
            self.norm = RMSNorm()
            cos, sin = rope_tables(cfg["seq_len"], hd, cfg["rope_theta"])
            self.register_buffer("cos", torch.from_numpy(cos), persistent=False)
            self.register_buffer("sin", torch.from_numpy(sin), persistent=False)
            mask = torch.full((cfg["seq_len"], cfg["seq_len"]), float("-inf")).triu(1)
            self.register_buffer("mask", mask, persistent=False)
            self.apply(self._init)
            for name, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
                if name.endswith("wo.weight") or name.endswith("w2.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg["n_layers"]))

        @staticmethod
        def _init(m):
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)

        def forward(self, idx, trace=None):
            T = idx.shape[1]
            x = self.tok_embeddings(idx)
            for layer in self.layers:
                x = layer(x, self.cos[:T], self.sin[:T], self.mask, trace)
            return self.norm(x) @ self.tok_embeddings.weight.t()  # shared classifier

    return Llama()


def write_llama2c(model, cfg, path):
    """llama2.c's legacy format: header, then every weight in FORMAT.md's order, float32."""
    layers = model.layers

    def per_layer(name):
        return [getattr(layer, name).weight for layer in layers]

    arrays = [model.tok_embeddings.weight]
    arrays += [layer.attention_norm.weight for layer in layers]
    for name in ("wq", "wk", "wv", "wo"):
        arrays += per_layer(name)
    arrays += [layer.ffn_norm.weight for layer in layers]
    for name in ("w1", "w2", "w3"):
        arrays += per_layer(name)
    arrays.append(model.norm.weight)
    cos, sin = rope_tables(cfg["seq_len"], cfg["head_dim"], cfg["rope_theta"])
    tmp = path + ".tmp-write"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<7i", cfg["dim"], cfg["hidden_dim"], cfg["n_layers"], cfg["n_heads"],
                            cfg["n_kv_heads"], VOCAB, cfg["seq_len"]))
        for a in arrays:
            f.write(a.detach().to("cpu").float().numpy().astype("<f4").tobytes())
        f.write(cos.astype("<f4").tobytes())
        f.write(sin.astype("<f4").tobytes())
    os.replace(tmp, path)


SAMPLE_BYTES = 256


def reference_outputs(torch, model, sample, out_dir):
    """What the training code's forward pass gives on a shipped held-out sample, for readers of
    the checkpoint to reproduce without torch (tests/test_zoo.cpp): the sample's mean next-byte
    loss with BOS in front (nats per byte, float64 sum of float32 log-softmax), the logits of
    its last position, and 32 greedy bytes decoded from BOS."""
    path = os.path.join(out_dir, "heldout-sample.txt")
    with open(path, "wb") as f:
        f.write(sample.tobytes())
    model.eval()
    with torch.no_grad():
        x = torch.from_numpy(np.concatenate([[BOS], sample[:-1]]).astype(np.int64))[None]
        logp = torch.log_softmax(model(x)[0], dim=-1)
        nll = -logp[torch.arange(len(sample)), torch.from_numpy(sample.astype(np.int64))].double()
        last = model(x)[0, -1].tolist()
        ids = [BOS]
        for _ in range(32):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    model.train()
    return {"sample": os.path.basename(path), "sample_bytes": int(len(sample)),
            "sample_loss_nats_per_byte": float(nll.mean()), "last_logits": last, "greedy_from_bos": ids[1:]}


# ----------------------------------------------------------------------------- training

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="model name: output folder OUT/NAME, file NAME.bin")
    p.add_argument("--out", default="data/zoo", help="folder of the zoo (default data/zoo)")
    p.add_argument("--state-dir", default="build-zoo",
                   help="git-ignored folder of the resumable training state (default build-zoo)")
    p.add_argument("--corpus", default="kjv", help="'kjv' (Debian's bible-kjv) or a text file")
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--heads", type=int, required=True, help="query heads")
    p.add_argument("--kv-heads", type=int, required=True, help="KV heads (divides --heads)")
    p.add_argument("--head-dim", type=int, required=True, help="head dimension (even); dim = heads * head-dim")
    p.add_argument("--hidden", type=int, default=0, help="SwiGLU hidden size (default: 8 dim / 3 rounded up to 16)")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--ctx", type=int, required=True, help="training context length (the checkpoint's seq_len)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument("--steps", type=int, required=True, help="optimizer steps (the learning-rate schedule's length)")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (AdamW)")
    p.add_argument("--warmup", type=int, default=100, help="linear warm-up steps")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--max-minutes", type=float, default=45.0, help="training wall-clock budget over all runs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--eval-every", type=int, default=250, help="held-out evaluation every N steps")
    p.add_argument("--eval-windows", type=int, default=32, help="held-out windows per periodic evaluation")
    p.add_argument("--final-eval-windows", type=int, default=256, help="held-out windows of the final evaluation")
    p.add_argument("--save-every", type=float, default=120.0, help="seconds between state saves")
    p.add_argument("--log-every", type=int, default=25, help="progress line every N steps")
    a = p.parse_args(argv)
    for name in ("layers", "heads", "kv_heads", "head_dim", "ctx", "batch", "steps", "threads",
                 "eval_every", "eval_windows", "final_eval_windows", "log_every"):
        if getattr(a, name) <= 0:
            fail(f"--{name.replace('_', '-')} = {getattr(a, name)} must be positive")
    if a.heads % a.kv_heads:
        fail(f"--heads = {a.heads} is not a multiple of --kv-heads = {a.kv_heads}")
    if a.head_dim % 2:
        fail(f"--head-dim = {a.head_dim} must be even (RoPE rotates pairs)")
    if not a.rope_theta > 1:
        fail(f"--rope-theta = {a.rope_theta} must be greater than 1")
    if a.ctx < 2:
        fail(f"--ctx = {a.ctx} must be at least 2")
    if not a.max_minutes > 0:
        fail(f"--max-minutes = {a.max_minutes} must be positive")
    return a


def model_config(a):
    dim = a.heads * a.head_dim
    hidden = a.hidden if a.hidden > 0 else 16 * ((8 * dim // 3 + 15) // 16)
    return {"dim": dim, "hidden_dim": hidden, "n_layers": a.layers, "n_heads": a.heads,
            "n_kv_heads": a.kv_heads, "head_dim": a.head_dim, "vocab_size": VOCAB, "seq_len": a.ctx,
            "rope_theta": a.rope_theta, "bos": BOS, "tokenizer": "bytes (id = byte value; 1 = BOS)",
            "rope_style": "interleaved", "norm_eps": 1e-5, "shared_classifier": True}


def fmt_time(s):
    s = int(s)
    return f"{s // 3600}h{s // 60 % 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"


def prefer_openblas(threads):
    """Restarts the script with OpenBLAS preloaded when torch would use the reference BLAS."""
    if os.environ.get("TIERLAB_ZOO_BLAS_CHECKED") or not os.path.exists(OPENBLAS):
        return
    system_blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    if "openblas" in system_blas:
        return
    env = dict(os.environ, TIERLAB_ZOO_BLAS_CHECKED="1", OPENBLAS_NUM_THREADS=str(threads),
               LD_PRELOAD=(OPENBLAS + " " + os.environ.get("LD_PRELOAD", "")).strip())
    print(f"train_zoo.py: the system BLAS is {system_blas}; restarting with {OPENBLAS} preloaded", flush=True)
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def main(argv):
    a = parse_args(argv)
    prefer_openblas(a.threads)
    try:
        import torch
    except ImportError:
        fail("PyTorch is not installed for this interpreter: apt-get install python3-torch "
             "(deps/zoo-packages.txt) and run with /usr/bin/python3")
    torch.set_num_threads(a.threads)
    cfg = model_config(a)

    text, corpus_desc = load_corpus(a.corpus)
    train, held = split_corpus(text)
    held_all = np.concatenate(held)
    corpus = {"source": corpus_desc, "bytes": len(text), "sha256": hashlib.sha256(text).hexdigest(),
              "train_bytes": int(len(train)), "held_out_bytes": int(len(held_all)),
              "held_out": f"every {HELD_OUT_EVERY}th block of {BLOCK} bytes (block index % {HELD_OUT_EVERY} == "
                          f"{HELD_OUT_EVERY // 2})"}
    baselines = ngram_baselines(train, held)

    out_dir = os.path.join(a.out, a.name)
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(a.state_dir, exist_ok=True)
    state_path = os.path.join(a.state_dir, f"{a.name}.pt")
    log_path = os.path.join(out_dir, "train.log")

    torch.manual_seed(a.seed)
    model = build_model(torch, cfg)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(a.seed)
    step, elapsed, history, resumed = 0, 0.0, [], False
    options = {k: v for k, v in vars(a).items() if k not in ("out", "state_dir", "threads", "save_every",
                                                              "log_every", "max_minutes")}
    if os.path.exists(state_path):
        st = torch.load(state_path)
        if st["options"] != options:
            fail(f"the saved state '{state_path}' was trained with other options ({st['options']}); "
                 f"delete it to start again")
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["optimizer"])
        rng.bit_generator.state = st["numpy_rng"]
        torch.set_rng_state(st["torch_rng"])
        step, elapsed, history = st["step"], st["elapsed"], st["history"]
        resumed = True
    log = open(log_path, "a" if resumed else "w")

    def say(line):
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    if resumed:
        say(f"resumed at step {step} ({fmt_time(elapsed)} trained) from {state_path}")
    else:
        say(f"model {a.name}: {json.dumps(cfg)}")
        say(f"parameters {n_params}; corpus {corpus['bytes']} bytes ({corpus['train_bytes']} train, "
            f"{corpus['held_out_bytes']} held out), sha256 {corpus['sha256'][:16]}...")
        say("held-out baselines (nats/byte): " + ", ".join(f"{k} {v:.4f}" for k, v in baselines.items()))
        say(f"options: {json.dumps(options)}; torch {torch.__version__}, {a.threads} thread(s)")

    def batch(data, n, gen):
        starts = gen.integers(0, len(data) - a.ctx, size=n)
        x = np.empty((n, a.ctx), dtype=np.int64)
        x[:, 0] = BOS
        y = np.empty((n, a.ctx), dtype=np.int64)
        for r, s in enumerate(starts):
            w = data[s:s + a.ctx]
            x[r, 1:] = w[:-1]
            y[r] = w
        return torch.from_numpy(x), torch.from_numpy(y)

    def held_out_loss(windows):
        """Mean next-byte loss (nats) over `windows` fixed held-out windows (seed 12345)."""
        gen = np.random.default_rng(12345)
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for i in range(0, windows, 16):
                x, y = batch(held_all, min(16, windows - i), gen)
                logits = model(x)
                total += torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1),
                                                           reduction="sum").item()
                count += y.numel()
        model.train()
        return total / count

    def progress(s, seconds):
        """How far training is: the larger of the step and the time fractions."""
        return max(s / a.steps, seconds / budget)

    def lr_at(s, seconds):
        """Linear warm-up over --warmup steps, then a cosine from the peak to a tenth of it
        over the rest of the progress (steps or time, whichever runs out first)."""
        if s < a.warmup:
            return a.lr * (s + 1) / a.warmup
        p0 = progress(a.warmup, 0.0)
        frac = (progress(s, seconds) - p0) / max(1e-9, 1.0 - p0)
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))

    def save_state():
        tmp = state_path + ".tmp-save"
        torch.save({"options": options, "model": model.state_dict(), "optimizer": opt.state_dict(),
                    "numpy_rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                    "step": step, "elapsed": elapsed, "history": history}, tmp)
        os.replace(tmp, state_path)

    budget = a.max_minutes * 60.0
    t_run = time.time()
    t_saved = t_run
    elapsed0 = elapsed
    tokens_per_step = a.batch * a.ctx
    loss_acc, loss_n = 0.0, 0
    stopped = "steps"
    model.train()
    while step < a.steps:
        if elapsed >= budget:
            stopped = "time"
            break
        lr = lr_at(step, elapsed)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = batch(train, a.batch, rng)
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        loss_acc += loss.item()
        loss_n += 1
        now = time.time()
        elapsed = elapsed0 + (now - t_run)
        if step % a.log_every == 0 or step == a.steps:
            rate = (step * tokens_per_step) / elapsed if elapsed > 0 else 0.0
            eta = min((a.steps - step) * elapsed / step, budget - elapsed)
            say(f"step {step}/{a.steps} | train loss {loss_acc / loss_n:.4f} | lr {lr:.2e} | "
                f"{rate:.0f} tok/s | {fmt_time(elapsed)} | eta {fmt_time(eta)}")
            history.append({"step": step, "train_loss": loss_acc / loss_n, "elapsed_s": round(elapsed, 1)})
            loss_acc, loss_n = 0.0, 0
        if step % a.eval_every == 0 and step < a.steps:
            hl = held_out_loss(a.eval_windows)
            say(f"step {step}: held-out loss {hl:.4f} nats/byte ({a.eval_windows} windows)")
            history.append({"step": step, "held_out_loss": hl})
        if now - t_saved >= a.save_every:
            save_state()
            t_saved = now
    if stopped == "time":
        say(f"stopped at step {step} of {a.steps}: the --max-minutes {a.max_minutes} budget is spent")
    save_state()

    final = held_out_loss(a.final_eval_windows)
    best = min(baselines.values())
    say(f"final held-out loss {final:.4f} nats/byte ({final / math.log(2):.3f} bits/byte; "
        f"{a.final_eval_windows} windows of {a.ctx}); baselines " +
        ", ".join(f"{k} {v:.4f}" for k, v in baselines.items()) +
        f"; {abs(100 * (1 - final / best)):.1f}% {'below' if final < best else 'above'} the best n-gram")
    bin_path = os.path.join(out_dir, f"{a.name}.bin")
    write_llama2c(model, cfg, bin_path)
    sample = reference_outputs(torch, model, held[0][:min(a.ctx, SAMPLE_BYTES)], out_dir)
    with open(bin_path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    result = {
        "name": a.name, "architecture": cfg, "parameters": n_params, "options": options,
        "corpus": corpus,
        "training": {"steps": step, "tokens_seen": step * tokens_per_step, "wall_clock_s": round(elapsed, 1),
                     "stopped_by": stopped, "threads": a.threads, "torch": torch.__version__},
        "held_out_loss_nats_per_byte": final, "held_out_windows": a.final_eval_windows,
        "baselines_nats_per_byte": baselines,
        "reference": sample,
        "checkpoint": {"file": os.path.basename(bin_path), "bytes": os.path.getsize(bin_path), "sha256": sha,
                       "format": "llama2.c legacy (float32), RoPE tables carry theta"},
        "command": "/usr/bin/python3 tools/train_zoo.py " + " ".join(argv),
        "history": history,
    }
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    say(f"wrote {bin_path} ({os.path.getsize(bin_path)} bytes) and {os.path.join(out_dir, 'config.json')}")
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
