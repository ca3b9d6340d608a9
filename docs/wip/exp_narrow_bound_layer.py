"""Session 29: the whole layer under the rows-per-expert narrow bound against the
session-28 rule (8192 routes), ABAB on the same inputs (``python3 docs/wip/exp_narrow_bound_layer.py``).

For each recipe and case (DeepSeek shape; the layer's own GEMM choice) two layers are
built on the same weights: ``new`` (main: ``MX_NARROW_ROWS_PER_EXPERT``) and ``old``
(``mx_narrow`` patched to ``routes <= 8192``, the session-28 bound). Each forward is
captured ``--calls`` times in one CUDA graph and replayed ``--samples`` times (the method of
``megamoe.bench.layer_stages``, warm L2), the arms alternating ABAB; the median of each arm's
samples is printed, with the two layers' outputs compared bit for bit (the 64-row and
128-row variants give the same rows: CONTRACTS.md s7).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from megamoe.bench.benchmarks.layer import SHAPES, _inputs, _weights
from megamoe.bench.layer_stages import _time_graph
from megamoe.bench.registry import BuildContext, Case
from megamoe.experts import mxfp4_gemm_kernel as mk

OLD_ROUTES = 8192  # the session-28 bound, by hand


def build(recipe: str, tokens: int, rule: str, dev: torch.device):
    from megamoe.layer import LayerConfig, MoELayer

    s = SHAPES["deepseek"]
    real = mk.mx_narrow
    if rule == "old":
        mk.mx_narrow = lambda w, r, e=None: r is not None and r <= OLD_ROUTES
    try:
        w13, w2 = _weights(s, dev)
        layer = MoELayer(LayerConfig(s.experts, s.top_k, s.hidden, s.inter, tokens,
                                     recipe=recipe), w13, w2, dev)
    finally:
        mk.mx_narrow = real
    return layer


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipes", nargs="+", default=["fp8_mxfp4", "mxfp8", "nvfp4"])
    ap.add_argument("--cases", nargs="+", default=["uniform:1536", "uniform:2048",
                                                   "skewed:2048"])
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--samples", type=int, default=10)
    args = ap.parse_args()
    dev = torch.device("cuda", torch.cuda.current_device())
    print("| recipe | case | old variants | new variants | old (us) | new (us) | new/old | "
          "bitwise |")
    print("|---|---|---|---|---|---|---|---|")
    for recipe in args.recipes:
        for spec in args.cases:
            routes, t = spec.split(":")
            tokens = int(t)
            case = Case(f"deepseek-{routes}-T{tokens}", {"tokens": tokens}, scenario=routes,
                        seed=17)
            x, ids, w = _inputs(case, BuildContext(dev, 0, 1, seed=17))
            layers, outs, times = {}, {}, {"old": [], "new": []}
            for rule in ("old", "new"):
                layer = build(recipe, tokens, rule, dev)
                out = torch.empty(tokens, SHAPES["deepseek"].hidden, dtype=torch.bfloat16,
                                  device=dev)
                layer.warmup(x, ids, w)
                layer.forward(x, ids, w, out=out)
                torch.cuda.synchronize()
                layers[rule], outs[rule] = layer, out
            for _ in range(2):  # ABAB
                for rule in ("old", "new"):
                    layer, out = layers[rule], outs[rule]
                    times[rule].append(_time_graph(
                        partial(layer.forward, x, ids, w, out=out), args.calls, args.samples))
            same = torch.equal(outs["old"].view(torch.int16), outs["new"].view(torch.int16))
            names = {r: "/".join(c.name for c in layers[r].gemm_configs) for r in layers}
            old, new = (statistics.median(times[r]) * 1e6 for r in ("old", "new"))
            print(f"| {recipe} | {spec} | {names['old']} | {names['new']} | {old:.1f} | "
                  f"{new:.1f} | {new / old:.3f} | {same} |", flush=True)
            for layer in layers.values():
                layer.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
