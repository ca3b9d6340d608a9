"""How much of a ceiling each ``layer`` benchmark case can reach at all:
``python -m devtools.roofline RECORD.json [RECORD.json ...]``.

Issue 7 judges the layer against one ceiling per case (``megamoe.bench.benchmarks.layer``):
for ``T <= 64`` the weight-streaming floor (bytes of the touched experts' weights over the
``copy_bw`` ceiling), above it the tensor-core rate (``bf16_mm``, or ``fp8_mm`` for the
quantized recipes), both measured in the same run and stored in the record. The roofline
says what a case's arithmetic intensity allows: no kernel runs faster than ``max(weight
bytes / copy_bw, FLOPs / rate)``, so the attainable fraction of the rate is ``min(1,
(FLOPs / weight bytes) / (rate / copy_bw))``. Only the weights' bytes count (activations
and outputs are left out), so the bound is optimistic: a case whose attainable fraction is
below a goal cannot meet it with any kernel, and "achieved / attainable" says how close a
kernel is to the best the case allows.

Each case's routes come from ``fixtures.scenarios`` (the benchmark's own definition, same
seed): FLOPs ``2 * active slots * 3 * H * I`` and weight bytes ``experts touched * 3 * H *
I * bytes per weight`` (bf16: 2; the quantized recipes: payload plus scale bytes,
``layer_quantized.RECIPES``); the rate is ``bf16_mm`` for the bf16 arms and ``fp8_mm`` for
the quantized ones (their recipes' math; this implementation multiplies in bf16, so it
cannot pass ``bf16_mm``, about half of ``fp8_mm``). Prints one Markdown table per record.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TORCH_ARM = "torch-grouped-mm"
"""The stock PyTorch layer's arm in the ``layer`` benchmarks (``megamoe.bench.benchmarks``)."""
BF16_ARMS = ("layer", "layer-bf16")
"""Our bf16 layer's arm: ``layer`` in its own benchmark, ``layer-bf16`` as the quantized
benchmarks' second baseline."""
BF16_BYTES = 2.0
"""Bytes per weight of the bf16 arms (``layer``, ``layer-bf16``, ``torch-grouped-mm``)."""
BF16_RATE = "bf16_mm"
QUANTIZED_RATE = "fp8_mm"
"""The matmul-rate ceilings the bf16 and the quantized arms are judged against."""


@dataclass(frozen=True)
class CaseWork:
    """What one case asks of any implementation."""

    flops: int
    """``2 * active slots * (H * 2I + I * H)``: FC1 and FC2 of every active route."""
    weight_elems: int
    """Weights of the touched experts: ``touched * 3 * H * I``."""


def case_work(shape: dict, scenario: str, seed: int) -> CaseWork:
    """The FLOPs and touched weights of a record's case, from the benchmark's routes."""
    from fixtures.scenarios import make_scenario

    t, h, i = shape["tokens"], shape["hidden"], shape["inter"]
    state = make_scenario(scenario, world_size=1, capacity=t, top_k=shape["top_k"],
                          num_experts=shape["experts"], hidden_size=h, seed=seed,
                          device="cpu")
    ids = state.ranks[0].live()[1]
    active = ids[ids >= 0]
    touched = int(active.unique().numel())
    return CaseWork(flops=2 * int(active.numel()) * 3 * h * i, weight_elems=touched * 3 * h * i)


def arm_math(arm: str) -> tuple[float, str]:
    """``(weight bytes per element, matmul-rate ceiling)`` of an arm: bf16 and ``bf16_mm``
    for ours and torch's bf16 layers; for ``layer-<recipe>`` the recipe's payload and scale
    bytes and ``fp8_mm`` (the recipes' math, as ``layer_quantized`` judges them); for the
    side-by-side arms, their recipe's (``layer_flashinfer.ARM_RECIPES``)."""
    from megamoe.bench.backend_layer import RECIPE_WORK
    from megamoe.bench.benchmarks.layer_flashinfer import ARM_RECIPES
    from megamoe.bench.benchmarks.layer_quantized import RECIPES

    if arm in ARM_RECIPES:  # the side-by-side benchmarks' arms (``layer_flashinfer``)
        return RECIPE_WORK[ARM_RECIPES[arm]]
    for q in RECIPES:
        if arm == f"layer-{q.recipe.replace('_', '-')}":
            return q.bytes_per_weight, QUANTIZED_RATE
    if arm in (*BF16_ARMS, TORCH_ARM):
        return BF16_BYTES, BF16_RATE
    raise ValueError(f"arm: expected a layer benchmark arm, got {arm!r}")


@dataclass(frozen=True)
class Bound:
    """One arm of one case against its roofline."""

    case: str
    arm: str
    seconds: float
    """The arm's median time per call, from its achieved rate and declared work."""
    bound_s: float
    """``max(weight bytes / copy_bw, FLOPs / rate)``, rate: the arm's matmul rate
    (``arm_math``)."""
    ceiling: str
    achieved: float
    """The record's achieved / ceiling."""
    attainable: float
    """The most of that ceiling the roofline allows: ``floor / bound`` against ``copy_bw``
    (1 unless the FLOPs bind), ``FLOPs / bound / rate`` against a matmul rate."""


def bounds(record: dict) -> list[Bound]:
    """Every (case, arm) of a ``layer`` benchmark record with its roofline bound."""
    ceilings = {c["name"]: c["value"] for c in record["ceilings"]}
    bw = ceilings["copy_bw"]
    out = []
    for case in record["cases"]:
        work = case_work(case["shape"], case["scenario"], case["seed"])
        for a in case["achieved"]:
            arm, ceiling = a["arm"], a["ceiling"]
            declared = case["arms"][arm]
            units = declared["bytes_moved"] if ceiling == "copy_bw" else declared["flops"]
            seconds = units / a["value"]
            per_weight, rate_name = arm_math(arm)
            rate = ceilings[rate_name]
            stream_s = work.weight_elems * per_weight / bw
            bound_s = max(stream_s, work.flops / rate)
            attainable = (stream_s / bound_s if ceiling == "copy_bw"
                          else work.flops / bound_s / rate)
            out.append(Bound(case["case"], arm, seconds, bound_s, ceiling, a["ratio"],
                             attainable))
    return out


def render(rows: Sequence[Bound]) -> str:
    lines = ["| case | arm | time (us) | roofline bound (us) | time / bound | ceiling | "
             "achieved | attainable | achieved / attainable |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.case} | {r.arm} | {r.seconds * 1e6:.1f} | {r.bound_s * 1e6:.1f} | "
                     f"{r.seconds / r.bound_s:.2f} | {r.ceiling} | {100 * r.achieved:.1f} % | "
                     f"{100 * r.attainable:.1f} % | {r.achieved / r.attainable:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.roofline",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+", type=Path, help="layer benchmark JSON records")
    args = ap.parse_args(argv)
    for path in args.records:
        record = json.loads(path.read_text())
        print(f"## {path.name} ({record['benchmark']['name']})\n")
        print(render(bounds(record)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
