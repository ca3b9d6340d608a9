"""``layer``: the whole MoE layer (issue 7) against a stock-PyTorch layer, with the
weight-streaming floor and the tensor-core rate measured in the same run.

Cases: the DeepSeek-like shape (H=7168, I=2048, E=256, K=8) and the gpt-oss-like shape
(H=2880, I=2880, E=128, K=4) at T in {1, 4, 16, 64, 256, 1024, 4096}, with ``uniform`` and
``skewed`` routes from ``fixtures.scenarios`` (one definition per scenario). ``--quick``
keeps DeepSeek-like T in {1, 16, 256, 4096}.

Arms (bf16 recipe, early weighting, no clamp):

- candidate ``layer``: ``MoELayer.forward`` (staging, layout, gather, FC1, FC2, scatter,
  combine: every stage a CuTe DSL kernel);
- baseline ``torch-grouped-mm``: the same math in stock PyTorch, graph-capturable: a stable
  sort of the routes by expert (masked slots last), ``torch._grouped_mm`` for FC1 and FC2
  over the expert offsets, SwiGLU and weighting in float32, a float32 sum over slots.

What each case is compared with: for ``T <= 64`` the layer declares the bytes of the expert
weights its routes touch and the ``copy_bw`` ceiling, so "achieved / ceiling" is the
weight-streaming floor divided by the layer's time; for larger ``T`` it declares its FLOPs
and the ``bf16_mm`` ceiling (tensor-core rate). Before timing, the layer's output is checked
against the oracle (on the GPU, first 32 tokens) within docs/contract.md s8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from megamoe.bench.registry import Arm, Benchmark, BuildContext, Case, Workload, register_benchmark

FLOOR_MAX_TOKENS = 64
"""Up to this T a case is judged against the weight-streaming floor; above, the GEMM rate."""
CHECK_TOKENS = 32
TOKENS = (1, 4, 16, 64, 256, 1024, 4096)
QUICK_TOKENS = (1, 16, 256, 4096)
ROUTES = ("uniform", "skewed")


@dataclass(frozen=True)
class Shape:
    name: str
    hidden: int
    inter: int
    experts: int
    top_k: int


DEEPSEEK = Shape("deepseek", 7168, 2048, 256, 8)
GPT_OSS = Shape("gptoss", 2880, 2880, 128, 4)
DEEPSEEK_RANK = Shape("dsrank", 7168, 2048, 32, 8)
"""One rank's share of the DeepSeek-like layer at EP8 (E = 256 / 8 = 32 experts, same H, I,
K): its weights are 2.6 GiB in bf16 where the whole layer's are 21 GiB, so two layers of it in
two processes fit an 80 GB H100 (``layer_flashinfer``); not among the ``layer`` cases."""

_WEIGHTS: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


SHAPES: dict[str, Shape] = {s.name: s for s in (DEEPSEEK, GPT_OSS, DEEPSEEK_RANK)}
"""Case names start with a shape name (``deepseek-uniform-T16``)."""


def _shape(case: Case) -> Shape:
    return SHAPES[case.name.split("-")[0]]


def _weights(shape: Shape, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Shared read-only weights per (shape, device): every arm reads the same bytes."""
    key = (shape, str(device))
    if key not in _WEIGHTS:
        _WEIGHTS.clear()
        g = torch.Generator(device=device).manual_seed(7)
        e, h, i = shape.experts, shape.hidden, shape.inter
        bf16 = torch.bfloat16
        w13 = torch.randn(e, 2 * i, h, generator=g, device=device, dtype=bf16) / math.sqrt(h)
        w2 = torch.randn(e, h, i, generator=g, device=device, dtype=bf16) / math.sqrt(i)
        _WEIGHTS[key] = (w13, w2)
    return _WEIGHTS[key]


def release_weights() -> None:
    """Forget the shared weights (``_weights``); the next build makes them again."""
    _WEIGHTS.clear()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _inputs(case: Case, ctx: BuildContext):
    from fixtures.scenarios import make_scenario

    s = _shape(case)
    state = make_scenario(case.scenario or "uniform", world_size=1,
                          capacity=case.shape["tokens"], top_k=s.top_k,
                          num_experts=s.experts, hidden_size=s.hidden, seed=case.seed,
                          device=ctx.device)
    return state.ranks[0].live()


BF16_BYTES_PER_WEIGHT = 2.0


def _work(case: Case, ids: torch.Tensor, bytes_per_weight: float = BF16_BYTES_PER_WEIGHT,
          matmul: str = "bf16_mm") -> dict[str, object]:
    """Bytes of the touched experts' weights (floor; ``bytes_per_weight`` with any scales) up to
    ``FLOOR_MAX_TOKENS``, else the FLOPs of the active slots against the ``matmul`` ceiling."""
    s = _shape(case)
    active = ids[ids >= 0]
    if case.shape["tokens"] <= FLOOR_MAX_TOKENS:
        touched = int(torch.unique(active).numel())
        per_expert = 3 * s.inter * s.hidden * bytes_per_weight
        return {"bytes_moved": int(touched * per_expert), "ceiling": "copy_bw"}
    flops = 2 * int(active.numel()) * (s.hidden * 2 * s.inter + s.inter * s.hidden)
    return {"flops": flops, "ceiling": matmul}


def build_layer(case: Case, ctx: BuildContext) -> Workload:
    from megamoe.layer import LayerConfig, MoELayer

    s = _shape(case)
    t = case.shape["tokens"]
    w13, w2 = _weights(s, ctx.device)
    layer = MoELayer(LayerConfig(s.experts, s.top_k, s.hidden, s.inter, t), w13, w2,
                     ctx.device)
    x, ids, w = _inputs(case, ctx)
    out = torch.empty(t, s.hidden, dtype=torch.bfloat16, device=ctx.device)
    layer.warmup(x, ids, w)

    def check() -> None:
        from oracle.compare import compare_rows
        from oracle.experts import moe_forward
        from oracle.moe_config import MoEConfig
        from oracle.weights import ExpertWeights

        n = min(t, CHECK_TOKENS)
        cfg = MoEConfig("bf16", s.experts, s.top_k, s.hidden, s.inter)
        want = moe_forward(x[:n], ids[:n], w[:n], ExpertWeights("bf16", w13, w2), cfg)
        got = layer.forward(x, ids, w)[:n]
        report = compare_rows(got, want, ids[:n], "bf16")
        if report.problems:
            raise AssertionError(f"layer {case.name}: {report.problems}")

    return Workload(lambda: layer.forward(x, ids, w, out=out), check=check,
                    **_work(case, ids))  # type: ignore[arg-type]


def build_torch_grouped_mm(case: Case, ctx: BuildContext) -> Workload:
    """Stock PyTorch with ``torch._grouped_mm`` (module docstring)."""
    s = _shape(case)
    t = case.shape["tokens"]
    w13, w2 = _weights(s, ctx.device)
    w13_t = w13.transpose(1, 2)  # [E, H, 2I], the layout _grouped_mm takes
    w2_t = w2.transpose(1, 2)  # [E, I, H]
    x, ids, w = _inputs(case, ctx)
    e, k, i = s.experts, s.top_k, s.inter

    def fn() -> torch.Tensor:
        flat = ids.reshape(-1)
        valid = flat >= 0
        key = torch.where(valid, flat, e)
        order = torch.argsort(key, stable=True)
        counts = torch.zeros(e + 1, dtype=torch.int64, device=key.device)
        counts = counts.scatter_add_(0, key, torch.ones_like(key))[:e]  # capturable
        offs = torch.cumsum(counts, 0).to(torch.int32)
        a = x[order // k]
        h1 = torch._grouped_mm(a, w13_t, offs=offs)
        gate, up = h1[:, :i].float(), h1[:, i:].float()
        score = torch.where(valid, w.reshape(-1), 0.0)[order].unsqueeze(1)
        act = (up * gate * torch.sigmoid(gate) * score).to(torch.bfloat16)
        h2 = torch._grouped_mm(act, w2_t, offs=offs)
        h2 = torch.where(valid[order].unsqueeze(1), h2, 0)
        terms = torch.empty_like(h2)
        terms[order] = h2
        return terms.view(t, k, -1).float().sum(1).to(torch.bfloat16)

    return Workload(fn, **_work(case, ids))  # type: ignore[arg-type]


def _cases(shapes: tuple[Shape, ...] = (DEEPSEEK, GPT_OSS),
           quick_shapes: tuple[Shape, ...] = (DEEPSEEK,)) -> tuple[Case, ...]:
    """Every shape's cases at every T and route; ``--quick`` keeps ``quick_shapes`` at
    ``QUICK_TOKENS``."""
    return tuple(
        Case(f"{s.name}-{r}-T{t}", {"tokens": t, "hidden": s.hidden, "inter": s.inter,
                                    "experts": s.experts, "top_k": s.top_k},
             scenario=r, seed=17, quick=s in quick_shapes and t in QUICK_TOKENS,
             calls_per_sample=10 if t <= FLOOR_MAX_TOKENS else None)
        for s in shapes for r in ROUTES for t in TOKENS
    )


LAYER = register_benchmark(
    Benchmark(
        name="layer",
        description="the bf16 MoE layer (CuTe DSL stages) vs stock PyTorch with _grouped_mm",
        cases=_cases(),
        candidate=Arm("layer", build_layer),
        baselines=(Arm("torch-grouped-mm", build_torch_grouped_mm),),
        ceilings=("copy_bw", "bf16_mm"),
    )
)
