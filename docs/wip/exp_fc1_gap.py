"""Session-24 experiment (not a test, not a benchmark of record): why does the layer's FC1
take 55-66 us at DeepSeek skewed T = 1 (``layer_stages``) when the same variant on one
expert with one row takes 40-50 us in the GEMM benchmarks (``exp_decode_depth.py``,
``mx_gemm``)? Open since session 19 (docs/perf.md "Session 19", "Session 23").

Each case builds the layer as ``layer_stages`` does, runs one forward, then times (CUDA
graph, ``_time_graph``, warm L2) the same GEMM called five ways, changing one thing at a
time between the layer's call and the benchmark's:

- ``layer``: the layer's own stage (``stage_plan``: pre-scale, row scale, clamp);
- ``bare``: the layer's buffers and weights, no pre-scale, row scale or clamp;
- ``rand-w``: ``bare`` with the benchmark's random weights of the same format;
- ``expert0``: ``bare`` with the hot expert's rows moved to expert 0 (its weights then);
- ``bench``: the benchmark's own set-up (random A and weights, expert 0, ``M_cap`` for
  one row), as ``exp_decode_depth.py``.

Run on the device (``PYTHONPATH`` from the CuTe DSL prelude):

    python3 docs/wip/exp_fc1_gap.py --recipe fp8_mxfp4 mxfp8 --cases skewed:1 uniform:1
"""

from __future__ import annotations

import argparse
import traceback
from collections.abc import Callable

import torch

from megamoe.bench.benchmarks.layer import SHAPES, _inputs
from megamoe.bench.benchmarks.layer import _weights as layer_weights
from megamoe.bench.layer_stages import _time_graph
from megamoe.bench.mx_gemm import _weights as random_weights
from megamoe.bench.mx_gemm import expert_rows
from megamoe.bench.registry import BuildContext, Case

WEIGHT_KIND = {"fp8_mxfp4": "mxfp4", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}


def _time(fn: Callable[[], object]) -> str:
    try:
        return f"{_time_graph(fn, 5, 7) * 1e6:.1f}"
    except Exception:  # an experiment: report and go on
        traceback.print_exc()
        return "error"


def run_case(recipe: str, routes: str, tokens: int) -> None:
    from megamoe.experts import api
    from megamoe.layer import LayerConfig, MoELayer

    dev = torch.device("cuda")
    s = SHAPES["deepseek"]
    case = Case(f"{s.name}-{routes}-T{tokens}", {"tokens": tokens}, scenario=routes, seed=17)
    w13, w2 = layer_weights(s, dev)
    layer = MoELayer(LayerConfig(s.experts, s.top_k, s.hidden, s.inter, tokens,
                                 recipe=recipe), w13, w2, dev)
    x, ids, w = _inputs(case, BuildContext(dev, 0, 1, seed=17))
    out = torch.empty(tokens, s.hidden, dtype=torch.bfloat16, device=dev)
    layer.warmup(x, ids, w)
    layer.forward(x, ids, w, out=out)
    torch.cuda.synchronize()
    plan = dict(layer.stage_plan(x, ids, w, None, out))
    fc1_cfg, fc2_cfg = layer.gemm_configs
    kind = WEIGHT_KIND[recipe]
    counts = layer._counts.clone()
    hot = int(torch.argmax(counts).item())
    counts0 = torch.zeros_like(counts)
    counts0[: int((counts > 0).sum())] = counts[counts > 0]
    seg0 = api.padded_segment_starts(counts0)
    active, rows = expert_rows(s.experts, s.top_k, tokens, routes)
    cb = torch.zeros(s.experts, dtype=torch.int32)
    cb[:active] = rows
    mb = api.capacity_rows(int(cb.sum()), s.experts)
    seg_b, cnt_b = api.padded_segment_starts(cb).to(dev), cb.to(dev)
    gen = torch.Generator(device=dev).manual_seed(5)
    print(f"{recipe} {case.name}: hot expert {hot}, live experts {int((counts > 0).sum())}, "
          f"M_cap layer {layer._m_cap} bench {mb}, configs {fc1_cfg.name} / {fc2_cfg.name}",
          flush=True)
    for gemm, mode, a, wt, dst, cfg, n, k in (
            ("fc1", "swiglu", layer._a1, layer._w13, layer._act, fc1_cfg, 2 * s.inter,
             s.hidden),
            ("fc2", "plain", layer._a2, layer._w2, layer._h2, fc2_cfg, s.hidden, s.inter)):
        rw = random_weights(kind, s.experts, n, k, dev)
        ab = torch.randn(mb, k, generator=gen, device=dev).to(torch.bfloat16)
        db = torch.zeros(mb, dst.shape[1], dtype=dst.dtype, device=dev)

        def call(a_, w_, seg_, cnt_, d_, mode=mode, cfg=cfg):
            return lambda: api.grouped_gemm(a_, w_, seg_, cnt_, d_, mode=mode, config=cfg)

        times = {
            "layer": _time(plan[gemm]),
            "bare": _time(call(a, wt, layer._seg, layer._counts, dst)),
            "rand-w": _time(call(a, rw, layer._seg, layer._counts, dst)),
            "expert0": _time(call(a, wt, seg0, counts0, dst)),
            "bench": _time(call(ab, rw, seg_b, cnt_b, db)),
        }
        print(f"| {recipe} {case.name} {gemm} | " + " | ".join(
            f"{k_} {v}" for k_, v in times.items()) + " |", flush=True)
    layer.destroy()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", nargs="+", default=["fp8_mxfp4"])
    ap.add_argument("--cases", nargs="+", default=["skewed:1"])
    args = ap.parse_args()
    for recipe in args.recipe:
        for c in args.cases:
            routes, tokens = c.split(":")
            try:
                run_case(recipe, routes, int(tokens))
            except Exception:
                traceback.print_exc()


if __name__ == "__main__":
    main()
