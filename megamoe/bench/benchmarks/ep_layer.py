"""``ep_layer``: the EP layer's overhead over EP1 on the same GPU (issue 37 item 7).

Run under torchrun, one process per rank (``python -m torch.distributed.run
--nproc-per-node=P -m megamoe.bench ep_layer``): in an emulated world the P processes share
one GPU, so the numbers are the exchange's overhead (staging of every rank's ids, the pushes,
the signals, the receive-side glue) on top of the expert work, never a bandwidth claim (one
time-sliced GPU is not NVLink). Each sample is the slowest rank's time (seed 001).

Cases (issue 38 item 3): the gpt-oss-like shape (H = I = 2880, E = 128, K = 4) and the
DeepSeek-like one (H = 7168, I = 2048, E = 256, K = 8) at T in {1, 16, 256, 4096} per rank,
``uniform`` and ``skewed`` routes from ``fixtures.scenarios``; ``--quick`` keeps gpt-oss-like
T = 16. Each rank's EP1 arm holds every expert (DeepSeek-like: 22.5 GB of bf16 weights), so
in an emulated world, where the P ranks share one GPU, run ``--quick`` or ``--case
'gptoss-*'``. The builders read the shape from the case's name (``layer.SHAPES``), so the
multi tier runs them at its own shape (``tests/multi/test_ep_bench.py``). Arms (bf16, early
weighting):

- candidate ``ep-layer``: ``MoELayer(..., world=world)`` with the rank's experts only;
- baseline ``ep1-layer``: the EP1 layer with every expert on the same rows (bitwise the same
  output: docs/contract.md s7, checked before timing).

Both declare the weight bytes their rows touch (``layer._work``), so the ceiling line says
what fraction of the copy bandwidth each reaches; the ratio of the two arms is the overhead.

``ep_layer_torch`` (issue 38): the same cases, the EP layer against a stock-PyTorch EP layer
(``megamoe.bench.torch_ep``: all-to-alls plus ``torch._grouped_mm``; its check: every live
row within docs/contract.md s8 of EP1's). Its baseline reads split sizes on the host, so
the benchmark times eager loops (``Benchmark.graph``). Meaningful on a real world (NCCL);
in an emulated world the baseline's exchange goes through host memory over gloo.
"""

from __future__ import annotations

import torch

from megamoe.bench.benchmarks.layer import DEEPSEEK, GPT_OSS, _shape, _weights, _work
from megamoe.bench.ep_world import current_world
from megamoe.bench.registry import Arm, Benchmark, BuildContext, Case, Workload, register_benchmark

TOKENS = (1, 16, 256, 4096)
ROUTES = ("uniform", "skewed")
QUICK_TOKENS = 16


def _inputs(case: Case, ctx: BuildContext):  # type: ignore[no-untyped-def]
    from fixtures.scenarios import make_scenario

    s = _shape(case)
    state = make_scenario(case.scenario or "uniform", world_size=ctx.world_size,
                          capacity=case.shape["tokens"], top_k=s.top_k, num_experts=s.experts,
                          hidden_size=s.hidden, seed=case.seed, device=ctx.device)
    return state.ranks[ctx.rank].live()


def _local_weights(case: Case, ctx: BuildContext):  # type: ignore[no-untyped-def]
    """This rank's experts ``[r * E/P, (r + 1) * E/P)`` of the shared weights, and the world."""
    s = _shape(case)
    world = current_world()
    e_l = s.experts // world.size
    lo = world.rank * e_l
    w13, w2 = _weights(s, ctx.device)
    return w13[lo : lo + e_l], w2[lo : lo + e_l], world


def _layer(case: Case, ctx: BuildContext, ep: bool):  # type: ignore[no-untyped-def]
    from megamoe.layer import LayerConfig, MoELayer

    s = _shape(case)
    cfg = LayerConfig(s.experts, s.top_k, s.hidden, s.inter, case.shape["tokens"])
    if not ep:
        return MoELayer(cfg, *_weights(s, ctx.device), ctx.device)
    w13, w2, world = _local_weights(case, ctx)
    return MoELayer(cfg, w13, w2, world=world)


def _ep1_output(case: Case, ctx: BuildContext, x, ids, w) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """EP1's rows for this rank's inputs: a layer with every expert, built, run and destroyed
    by one rank at a time, its memory handed back to the device before the next rank's turn.

    In an emulated world the P ranks share one GPU and each already holds the EP1 arm's layer
    and the shared weights, so P references at once do not fit (H100, 2026-12-05: ``ep_layer
    --quick`` at P = 4 ran out of its 80 GB in this check, 20 GB a rank)."""
    world = current_world()
    want = None
    for turn in range(world.size):
        if turn == world.rank:
            ref = _layer(case, ctx, ep=False)
            want = ref.warmup(x, ids, w)
            ref.destroy()
            del ref
            _release_cached(ctx.device)
        world.barrier(f"ep_layer check: EP1 reference of rank {turn}")
    assert want is not None
    return want


def _release_cached(device: torch.device) -> None:
    """Hand the memory this process freed back to the device (the caching allocator keeps
    it otherwise, out of the other ranks' reach)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def _build(ep: bool):  # type: ignore[no-untyped-def]
    def build(case: Case, ctx: BuildContext) -> Workload:
        layer = _layer(case, ctx, ep)
        x, ids, w = _inputs(case, ctx)
        out = torch.empty(x.shape[0], _shape(case).hidden, dtype=torch.bfloat16,
                          device=ctx.device)
        layer.warmup(x, ids, w)

        def check() -> None:
            want = _ep1_output(case, ctx, x, ids, w)
            got = layer.forward(x, ids, w)
            if not torch.equal(got.view(torch.int16), want.view(torch.int16)):
                raise AssertionError(f"{case.name}: the EP layer's rows differ from EP1's")

        return Workload(lambda: layer.forward(x, ids, w, out=out), check=check if ep else None,
                        **_work(case, ids))  # type: ignore[arg-type]

    return build


def build_torch_ep(case: Case, ctx: BuildContext) -> Workload:
    """The stock-PyTorch EP layer of this rank (``megamoe.bench.torch_ep``), warmed up; its
    check: every live row within docs/contract.md s8 of EP1's (not bitwise: other GEMMs)."""
    from megamoe.bench.torch_ep import TorchEpLayer
    from oracle.compare import compare_rows

    w13, w2, world = _local_weights(case, ctx)
    layer = TorchEpLayer(w13, w2, world)
    x, ids, w = _inputs(case, ctx)
    layer.forward(x, ids, w)

    def check() -> None:
        want = _ep1_output(case, ctx, x, ids, w)
        got = layer.forward(x, ids, w)
        report = compare_rows(got, want, ids, "bf16", rank=world.rank)
        if report.problems:
            raise AssertionError(f"{case.name}: the stock-PyTorch EP layer misses EP1: "
                                 f"{report.problems[:4]}")

    return Workload(lambda: layer.forward(x, ids, w), check=check,
                    **_work(case, ids))  # type: ignore[arg-type]


CASES = tuple(
    Case(f"{s.name}-{r}-T{t}", {"tokens": t, "hidden": s.hidden, "inter": s.inter,
                                "experts": s.experts, "top_k": s.top_k},
         scenario=r, seed=17, quick=s is GPT_OSS and t == QUICK_TOKENS, calls_per_sample=10)
    for s in (GPT_OSS, DEEPSEEK) for r in ROUTES for t in TOKENS
)
"""Both shapes at T = 1, 16, 256 and 4096 per rank, uniform and skewed routes."""

EP_LAYER = register_benchmark(
    Benchmark(
        name="ep_layer",
        description="the EP layer (P ranks under torchrun) vs EP1 on the same rows: overhead",
        cases=CASES,
        candidate=Arm("ep-layer", _build(ep=True)),
        baselines=(Arm("ep1-layer", _build(ep=False)),),
        ceilings=("copy_bw",),
    )
)

EP_LAYER_TORCH = register_benchmark(
    Benchmark(
        name="ep_layer_torch",
        description="the EP layer vs a stock-PyTorch EP layer (all_to_all + _grouped_mm), eager",
        cases=CASES,
        candidate=Arm("ep-layer", _build(ep=True)),
        baselines=(Arm("torch-ep-layer", build_torch_ep),),
        ceilings=("copy_bw",),
        graph=False,
    )
)
