"""Session 30: the whole layer with programmatic dependent launch (``megamoe.pdl``) on and
off, one arm per process (``MEGAMOE_PDL`` is read at import), run ABAB by
``gpu_pdl.sh``.

For each recipe, shape and case the process builds the layer (the benchmark's weights and
inputs, ``megamoe.bench.benchmarks.layer``), captures ``--calls`` forwards in one CUDA graph
and replays it ``--samples`` times (``megamoe.bench.layer_stages._time_graph``, warm L2),
prints the median, and saves every output to ``--save`` so that ``--compare A B`` can check
the two arms bit for bit. ``--probe`` captures one forward with ``keep_graph`` and counts
the graph's edges by type (programmatic edges appear only with PDL on).
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from megamoe.bench.benchmarks.layer import SHAPES, _inputs, _weights
from megamoe.bench.layer_stages import _time_graph
from megamoe.bench.registry import BuildContext, Case
from megamoe.pdl import PDL


def build(recipe: str, shape: str, routes: str, tokens: int, dev: torch.device):
    from megamoe.layer import LayerConfig, MoELayer

    s = SHAPES[shape]
    case = Case(f"{shape}-{routes}-T{tokens}", {"tokens": tokens}, scenario=routes, seed=17)
    x, ids, w = _inputs(case, BuildContext(dev, 0, 1, seed=17))
    w13, w2 = _weights(s, dev)
    layer = MoELayer(LayerConfig(s.experts, s.top_k, s.hidden, s.inter, tokens, recipe=recipe),
                     w13, w2, dev)
    out = torch.empty(tokens, s.hidden, dtype=torch.bfloat16, device=dev)
    layer.warmup(x, ids, w)
    layer.forward(x, ids, w, out=out)
    torch.cuda.synchronize()
    return layer, (x, ids, w), out


def probe(layer, inputs, out) -> str:
    """Edge types of a graph holding one captured forward."""
    import cuda.bindings.driver as cu

    from megamoe.graphs import capture

    try:
        graph = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError as exc:
        return f"keep_graph unsupported: {exc}"
    with capture(graph):
        layer.forward(*inputs, out=out)
    raw = graph.raw_cuda_graph()
    err, _, _, _, n = cu.cuGraphGetEdges(raw, 0)
    err, _, _, data, n = cu.cuGraphGetEdges(raw, n)
    kinds: dict[str, int] = {}
    for d in data[:n]:
        key = f"type={int(d.type)} from_port={int(d.from_port)}"
        kinds[key] = kinds.get(key, 0) + 1
    _, _, count = cu.cuGraphGetNodes(raw, 0)
    return f"err={err} edges={n} nodes={count} {kinds}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipes", nargs="+", default=["fp8_mxfp4", "bf16"])
    ap.add_argument("--shapes", nargs="+", default=["deepseek", "gptoss"])
    ap.add_argument("--cases", nargs="+", default=["uniform:1", "uniform:16", "skewed:1",
                                                   "uniform:256"])
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--save", type=Path)
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--compare", nargs=2, type=Path)
    args = ap.parse_args()
    if args.compare:
        a, b = (torch.load(p) for p in args.compare)
        for key in a:
            same = torch.equal(a[key].view(torch.int16), b[key].view(torch.int16))
            finite = bool(torch.isfinite(a[key].float()).all())
            print(f"| {key} | bitwise {same} | finite {finite} |")
        return 0
    import megamoe

    print(f"tree {Path(megamoe.__file__).parent}", flush=True)
    dev = torch.device("cuda", torch.cuda.current_device())
    arm = f"pdl={'on' if PDL else 'off'} ({os.environ.get('MEGAMOE_PDL', 'unset')})"
    outs = {}
    for recipe in args.recipes:
        for shape in args.shapes:
            for spec in args.cases:
                routes, t = spec.split(":")
                layer, inputs, out = build(recipe, shape, routes, int(t), dev)
                key = f"{recipe} {shape} {spec}"
                if args.probe:
                    print(f"probe | {arm} | {key} | {probe(layer, inputs, out)}", flush=True)
                if not args.compile_only:
                    us = _time_graph(partial(layer.forward, *inputs, out=out), args.calls,
                                     args.samples) * 1e6
                    print(f"| {arm} | {key} | {us:.1f} |", flush=True)
                outs[key] = out.cpu()
                layer.destroy()
    if args.save:
        torch.save(outs, args.save)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
