"""``layer-fp8-mxfp4``, ``layer-mxfp8`` and ``layer-nvfp4``: the quantized MoE layers (issue 7) against stock
PyTorch and the bf16 layer, with the weight-streaming floor and the FP8 tensor-core rate
measured in the same run.

Cases: those of ``layer`` (DeepSeek-like and gpt-oss-like shapes, T in {1, 4, 16, 64, 256,
1024, 4096}, ``uniform`` and ``skewed`` routes). The weights are the ``layer`` benchmark's
bf16 weights, quantized once per shape by the layer's own quantizer (MXFP4 ``rceil``,
MXFP8 E4M3 ``rceil``, or NVFP4 with a per-expert global scale).

Arms (early weighting, no clamp):

- candidate ``layer-<recipe>``: ``MoELayer(recipe=...).forward`` (every stage a CuTe DSL
  kernel; the weights decoded to bf16 inside the GEMM mainloop);
- baseline ``torch-grouped-mm``: the ``layer`` benchmark's stock-PyTorch bf16 layer (PyTorch
  has no MX grouped GEMM on Hopper; this is the best stock path);
- baseline ``layer-bf16``: our bf16 layer on the unquantized weights (what the format buys).

Work: for ``T <= 64`` the quantized bytes of the touched experts (payload and scale bytes)
against ``copy_bw`` (the weight-streaming floor); above, the FLOPs against ``fp8_mm`` (the
recipes' math is FP8; this implementation multiplies in bf16, so it cannot exceed the
``bf16_mm`` rate, about half of ``fp8_mm``). Both matmul rates are measured in the same run
(the baselines' achieved rates are against ``bf16_mm``). Before timing, the layer's output is checked
against the oracle (first 32 tokens) within docs/contract.md s8.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from megamoe.bench.benchmarks import layer as base
from megamoe.bench.registry import Arm, Benchmark, BuildContext, Case, Workload, register_benchmark


@dataclass(frozen=True)
class QuantizedRecipe:
    """One quantized layer recipe as the benchmark runs it."""

    recipe: str
    bytes_per_weight: float
    """Payload plus E8M0 scale bytes per weight (one scale byte per 32 weights)."""
    quantize: Callable[[torch.Tensor], object]
    fields: tuple[str, str]
    """The prequantized matrix's payload and scale field names (for the oracle's weights)."""


def _mxfp4(w: torch.Tensor) -> object:
    from megamoe.experts.mxfp4 import quantize_mxfp4

    return quantize_mxfp4(w)


def _mxfp8(w: torch.Tensor) -> object:
    from megamoe.experts.mxfp8 import quantize_mxfp8_weights

    return quantize_mxfp8_weights(w)


def _nvfp4(w: torch.Tensor) -> object:
    from megamoe.experts.nvfp4 import quantize_nvfp4_weights

    return quantize_nvfp4_weights(w)


RECIPES = (
    QuantizedRecipe("fp8_mxfp4", 0.5 + 1 / 32, _mxfp4, ("codes", "scales")),
    QuantizedRecipe("mxfp8", 1 + 1 / 32, _mxfp8, ("payload", "scales")),
    QuantizedRecipe("nvfp4", 0.5 + 1 / 16, _nvfp4, ("codes", "scales")),
)
_MX: dict[tuple, tuple] = {}


def _quantized(q: QuantizedRecipe, shape: base.Shape, device: torch.device):
    """The ``layer`` weights quantized for ``q`` (cached per recipe, shape and device)."""
    key = (q.recipe, shape, str(device))
    if key not in _MX:
        _MX.clear()
        w13, w2 = base._weights(shape, device)
        _MX[key] = (q.quantize(w13), q.quantize(w2))
    return _MX[key]


def make_builder(q: QuantizedRecipe) -> Callable[[Case, BuildContext], Workload]:
    """The candidate arm's builder for one recipe."""

    def build(case: Case, ctx: BuildContext) -> Workload:
        from megamoe.layer import LayerConfig, MoELayer

        s = base._shape(case)
        t = case.shape["tokens"]
        w13, w2 = _quantized(q, s, ctx.device)
        cfg = LayerConfig(s.experts, s.top_k, s.hidden, s.inter, t, recipe=q.recipe)
        layer = MoELayer(cfg, w13, w2, ctx.device)
        x, ids, w = base._inputs(case, ctx)
        out = torch.empty(t, s.hidden, dtype=torch.bfloat16, device=ctx.device)
        layer.warmup(x, ids, w)

        def check() -> None:
            from oracle.compare import compare_rows
            from oracle.experts import moe_forward
            from oracle.moe_config import MoEConfig
            from oracle.weights import ExpertWeights

            n = min(t, base.CHECK_TOKENS)
            ocfg = MoEConfig(q.recipe, s.experts, s.top_k, s.hidden, s.inter)
            pay, sc = q.fields
            ew = ExpertWeights(q.recipe, getattr(w13, pay), getattr(w2, pay),
                               getattr(w13, sc), getattr(w2, sc),
                               getattr(w13, "global_scale", None),
                               getattr(w2, "global_scale", None))
            want = moe_forward(x[:n], ids[:n], w[:n], ew, ocfg)
            got = layer.forward(x, ids, w)[:n]
            report = compare_rows(got, want, ids[:n], q.recipe)
            if report.problems:
                raise AssertionError(f"layer-{q.recipe} {case.name}: {report.problems}")

        return Workload(lambda: layer.forward(x, ids, w, out=out), check=check,
                        **base._work(case, ids, q.bytes_per_weight, "fp8_mm"))  # type: ignore[arg-type]

    return build


BENCHMARKS = {
    q.recipe: register_benchmark(
        Benchmark(
            name=f"layer-{q.recipe.replace('_', '-')}",
            description=f"the {q.recipe} MoE layer vs stock PyTorch (bf16 _grouped_mm) and "
                        "the bf16 layer",
            cases=base.LAYER.cases,
            candidate=Arm(f"layer-{q.recipe.replace('_', '-')}", make_builder(q)),
            baselines=(Arm("torch-grouped-mm", base.build_torch_grouped_mm),
                       Arm("layer-bf16", base.build_layer)),
            ceilings=("copy_bw", "bf16_mm", "fp8_mm"),
        )
    )
    for q in RECIPES
}
