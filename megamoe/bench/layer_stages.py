"""Per-stage times of the MoE layer (issue 7): ``python -m megamoe.bench.layer_stages``.

For each case (a ``layer`` benchmark shape, ``--shape``, DeepSeek-like by default; uniform
and skewed routes; the recipe ``--recipe``, whose layer quantizes the benchmark's bf16
weights itself) the layer is warmed up, one eager forward fills its workspace, then each stage of
``MoELayer.stage_plan`` (stage, layout, gather, fc1, [a2,] fc2, scatter, combine) and the whole
forward are captured alone into a CUDA graph of ``calls`` launches and replayed ``samples``
times; a sample is one replay's CUDA-event time divided by ``calls``; the median is
reported (warm L2: the same buffers every call). Replaying one stage repeats the same work:
each stage reads only what earlier stages wrote. The stage times need not add up to the
forward exactly (launch overlap and L2 reuse across stages differ).

Writes ``layer_stages.json`` and ``layer_stages.md`` into ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from megamoe.bench.benchmarks.layer import ROUTES, SHAPES, TOKENS, _inputs, _weights
from megamoe.bench.registry import BuildContext, Case
from megamoe.graphs import capture


def _time_graph(fn: Callable[[], object], calls: int, samples: int) -> float:
    """Median seconds per call of ``fn`` captured ``calls`` times in one graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # the stage's first call on this stream, outside capture
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / calls)
    return statistics.median(times)


def profile_case(tokens: int, routes: str, calls: int, samples: int, recipe: str = "bf16",
                 shape: str = "deepseek") -> dict[str, object]:
    from megamoe.layer import LayerConfig, MoELayer

    dev = torch.device("cuda", torch.cuda.current_device())
    s = SHAPES[shape]
    case = Case(f"{s.name}-{routes}-T{tokens}", {"tokens": tokens}, scenario=routes, seed=17)
    ctx = BuildContext(dev, 0, 1, seed=17)
    w13, w2 = _weights(s, dev)
    cfg = LayerConfig(s.experts, s.top_k, s.hidden, s.inter, tokens, recipe=recipe)
    layer = MoELayer(cfg, w13, w2, dev)
    x, ids, w = _inputs(case, ctx)
    out = torch.empty(tokens, s.hidden, dtype=torch.bfloat16, device=dev)
    layer.warmup(x, ids, w)
    layer.forward(x, ids, w, out=out)
    result: dict[str, object] = {"case": f"{recipe} {case.name}", "tokens": tokens,
                                 "routes": routes, "recipe": recipe}
    stages = {}
    for name, run in layer.stage_plan(x, ids, w, None, out):
        stages[name] = _time_graph(run, calls, samples)
    stages["forward"] = _time_graph(lambda: layer.forward(x, ids, w, out=out), calls, samples)
    result["median_s"] = stages
    layer.destroy()
    return result


def render(results: Sequence[dict],
           extra: tuple[str, Callable[[dict], str]] | None = None) -> str:
    """A markdown table of each case's median per stage in us, with an ``extra`` column
    (its header and its cell of a result) after the case where given."""
    names = list(results[0]["median_s"]) if results else []
    head = ["case", *([extra[0]] if extra else []), *(f"{n} (us)" for n in names)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r["case"], *([extra[1](r)] if extra else []),
                 *(f"{r['median_s'][n] * 1e6:.1f}" for n in names)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_results(results: Sequence[dict], table: str, output_dir: Path, name: str) -> None:
    """``<name>.json`` (every result) and ``<name>.md`` (``table``, the rendered results) in
    ``output_dir``, made if missing; the table printed too."""
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / f"{name}.json").write_text(json.dumps(results, indent=1))
    (output_dir / f"{name}.md").write_text(table)
    print(table)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m megamoe.bench.layer_stages",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    ap.add_argument("--routes", nargs="+", default=list(ROUTES), choices=ROUTES)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--recipe", default="bf16", help="a recipe the layer runs")
    ap.add_argument("--shape", default="deepseek", choices=sorted(SHAPES))
    ap.add_argument("--output-dir", type=Path, default=Path("out/bench/layer_stages"))
    args = ap.parse_args(argv)
    results = [profile_case(t, r, args.calls, args.samples, args.recipe, args.shape)
               for r in args.routes for t in args.tokens]
    write_results(results, render(results), args.output_dir, "layer_stages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
