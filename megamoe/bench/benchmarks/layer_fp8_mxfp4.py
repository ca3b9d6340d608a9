"""``layer-fp8-mxfp4``: the ``fp8_mxfp4`` MoE layer (issue 7) against stock PyTorch and the
bf16 layer, with the weight-streaming floor and the fp8 tensor-core rate measured in the
same run.

Cases: those of ``layer`` (DeepSeek-like and gpt-oss-like shapes, T in {1, 4, 16, 64, 256,
1024, 4096}, ``uniform`` and ``skewed`` routes). The weights are the ``layer`` benchmark's
bf16 weights, quantized to MXFP4 once per shape (the layer's own quantizer, mode ``rceil``).

Arms (early weighting, no clamp):

- candidate ``layer-fp8-mxfp4``: ``MoELayer(recipe="fp8_mxfp4").forward`` (safe-FP8 staging,
  layout, widening gather, MXFP4 FC1 with the weights decoded in the mainloop, A2
  quantizer, MXFP4 FC2, scatter, combine);
- baseline ``torch-grouped-mm``: the ``layer`` benchmark's stock-PyTorch bf16 layer (PyTorch
  has no MXFP4 grouped GEMM on Hopper; this is the best stock path);
- baseline ``layer-bf16``: our bf16 layer on the unquantized weights (what MXFP4 buys).

Work: for ``T <= 64`` the MXFP4 bytes of the touched experts (codes and scale bytes:
17/32 byte per weight) against ``copy_bw`` (the weight-streaming floor); above, the FLOPs
against ``fp8_mm`` (the recipe's math is FP8 x FP4; this implementation multiplies in bf16,
so it cannot exceed the ``bf16_mm`` rate, about half of ``fp8_mm``). Before timing, the
layer's output is checked against the oracle (first 32 tokens) within CONTRACTS.md s8.
"""

from __future__ import annotations

import torch

from megamoe.bench.benchmarks import layer as base
from megamoe.bench.registry import Arm, Benchmark, BuildContext, Case, Workload, register_benchmark

MXFP4_BYTES_PER_WEIGHT = 0.5 + 1 / 32
"""One E2M1 code (half a byte) plus one E8M0 byte per 32 weights."""
_MX: dict[tuple, tuple] = {}


def _mx_weights(shape: base.Shape, device: torch.device):
    """The ``layer`` weights quantized to MXFP4 (cached per shape and device)."""
    from megamoe.experts.mxfp4 import quantize_mxfp4

    key = (shape, str(device))
    if key not in _MX:
        _MX.clear()
        w13, w2 = base._weights(shape, device)
        _MX[key] = (quantize_mxfp4(w13), quantize_mxfp4(w2))
    return _MX[key]


def _work(case: Case, ids: torch.Tensor) -> dict[str, object]:
    s = base._shape(case)
    active = ids[ids >= 0]
    if case.shape["tokens"] <= base.FLOOR_MAX_TOKENS:
        touched = int(torch.unique(active).numel())
        per_expert = 3 * s.inter * s.hidden * MXFP4_BYTES_PER_WEIGHT
        return {"bytes_moved": int(touched * per_expert), "ceiling": "copy_bw"}
    flops = 2 * int(active.numel()) * (s.hidden * 2 * s.inter + s.inter * s.hidden)
    return {"flops": flops, "ceiling": "fp8_mm"}


def build_layer_fp8_mxfp4(case: Case, ctx: BuildContext) -> Workload:
    from megamoe.layer import LayerConfig, MoELayer

    s = base._shape(case)
    t = case.shape["tokens"]
    w13, w2 = _mx_weights(s, ctx.device)
    cfg = LayerConfig(s.experts, s.top_k, s.hidden, s.inter, t, recipe="fp8_mxfp4")
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
        ocfg = MoEConfig("fp8_mxfp4", s.experts, s.top_k, s.hidden, s.inter)
        ew = ExpertWeights("fp8_mxfp4", w13.codes, w2.codes, w13.scales, w2.scales)
        want = moe_forward(x[:n], ids[:n], w[:n], ew, ocfg)
        got = layer.forward(x, ids, w)[:n]
        report = compare_rows(got, want, ids[:n], "fp8_mxfp4")
        if report.problems:
            raise AssertionError(f"layer-fp8-mxfp4 {case.name}: {report.problems}")

    return Workload(lambda: layer.forward(x, ids, w, out=out), check=check,
                    **_work(case, ids))  # type: ignore[arg-type]


LAYER_FP8_MXFP4 = register_benchmark(
    Benchmark(
        name="layer-fp8-mxfp4",
        description="the fp8_mxfp4 MoE layer vs stock PyTorch (bf16 _grouped_mm) and the "
                    "bf16 layer",
        cases=base.LAYER.cases,
        candidate=Arm("layer-fp8-mxfp4", build_layer_fp8_mxfp4),
        baselines=(Arm("torch-grouped-mm", base.build_torch_grouped_mm),
                   Arm("layer-bf16", base.build_layer)),
        ceilings=("copy_bw", "fp8_mm"),
    )
)
