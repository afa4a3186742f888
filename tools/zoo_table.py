#!/usr/bin/python3
"""Prints the zoo's table (docs/real-model.md, "The zoo") from data/zoo/*/config.json.

Usage: /usr/bin/python3 tools/zoo_table.py [ZOO_DIR, default data/zoo]
"""
import glob
import json
import math
import os
import sys


def main(argv):
    zoo = argv[1] if len(argv) > 1 else "data/zoo"
    rows = []
    for path in sorted(glob.glob(os.path.join(zoo, "*", "config.json"))):
        with open(path) as f:
            c = json.load(f)
        a, t = c["architecture"], c["training"]
        base = c["baselines_nats_per_byte"]
        loss = c["held_out_loss_nats_per_byte"]
        g = a["n_heads"] // a["n_kv_heads"]
        kv = "MHA" if g == 1 else f"GQA g={g}"
        theta = a["rope_theta"]
        mantissa, exponent = f"{theta:.0e}".split("e")
        theta_text = (f"{mantissa}e{int(exponent)}" if mantissa != "1" else f"1e{int(exponent)}") \
            if float(f"{theta:.0e}") == theta else f"{theta:g}"
        rows.append(
            f"| `{c['name']}` | {a['n_layers']} | {a['n_heads']} / {a['n_kv_heads']} ({kv}) | {a['head_dim']} | "
            f"{a['dim']} / {a['hidden_dim']} | {theta_text} | {a['seq_len']} | {c['parameters'] / 1e6:.2f} M | "
            f"{t['tokens_seen'] / 1e6:.2f} M ({t['steps']} steps) | **{loss:.3f}** ({loss / math.log(2):.2f} bits) | "
            f"{100 * (1 - loss / base['3-gram']):.0f}% | {t['wall_clock_s'] / 60:.1f} min | "
            f"{c['checkpoint']['bytes'] / 1e6:.1f} MB |")
        corpus = c["corpus"]
    if not rows:
        print(f"zoo_table.py: no model in '{zoo}' (no */config.json)", file=sys.stderr)
        return 2
    print("| model | layers | heads / KV heads | head dim | dim / hidden | RoPE theta | train context | parameters | "
          "training tokens | held-out loss (nats/byte) | below the 3-gram | training time | file |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print(f"Baselines on the same held-out text (nats/byte, fitted on the {corpus['train_bytes']:,} training bytes): "
          + ", ".join(f"{k} {v:.3f}" for k, v in base.items()) + ".")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
