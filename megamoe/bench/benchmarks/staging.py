"""``staging``: the fused staging kernels (issue 6) against the Torch path and a copy.

Each case stages ``T`` tokens of width ``H`` with top-k ``K`` into a workspace of
capacity ``C = T`` in one format (docs/contract.md s2-s4). Arms:

- candidate ``kernel``: ``megamoe.staging.stage(path="kernel")``, the fused CuTe DSL launch
  (route checks on, as in production);
- baseline ``torch``: the same call with ``path="torch"`` (the bitwise-equal Torch path);
- baseline ``copy``: one device-to-device ``copy_`` of as many bytes as the kernel must
  read (``bytes_moved / 2``), so copy time is the floor for the same traffic.

``bytes_moved`` is the fewest bytes a staging call must move: the caller's activations
(and scales), ids and scores read once, the workspace payload, scales, ids and scores
written once. Achieved bandwidth is compared with the ``copy_bw`` ceiling measured in the
same run. Before timing, each arm's output is checked bytewise against the oracle's
staging (``oracle.routing.stage_routes`` and ``oracle.formats``), so nothing wrong is
timed. Goals (issue 6): ``T >= 4096`` at least 85% of copy bandwidth, ``T <= 128`` at least
3x the Torch path, under 5 us per call at ``T = 1``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from megamoe.bench.registry import Arm, Benchmark, BuildContext, Case, Workload, register_benchmark

HIDDEN_SIZES = (4096, 7168)
TOKENS = (1, 4, 16, 128, 1024, 4096, 16384)
TOP_KS = (4, 8)
QUICK_TOKENS = (1, 16, 128, 1024, 4096, 16384)
QUICK_HIDDEN = 7168
QUICK_TOP_K = 8
NUM_EXPERTS = 256


@dataclass(frozen=True)
class Format:
    """One staging format as the benchmark names it (``StageFormat`` arguments)."""

    name: str
    kind: str
    elem: str = "e4m3"
    mode: str = "rceil"


FORMATS = (
    Format("bf16", "bf16"),
    Format("mxfp8", "mxfp8", "e4m3", "rceil"),
    Format("mxfp8-pre", "mxfp8_prequant", "e4m3"),
    Format("nvfp4", "nvfp4"),
    Format("nvfp4-pre", "nvfp4_prequant"),
    Format("safefp8", "safe_fp8"),
)
_BY_NAME = {f.name: f for f in FORMATS}
NVFP4_GLOBAL_SCALE = 0.37


@dataclass
class _Inputs:
    ws: object
    hidden: torch.Tensor
    scales: torch.Tensor | None
    ids: torch.Tensor
    weights: torch.Tensor
    read_bytes: int
    write_bytes: int


def _make_inputs(case: Case, ctx: BuildContext) -> _Inputs:
    from megamoe.staging import StageFormat, StagingWorkspace, warmup
    from oracle import formats as of

    t, h, k = case.shape["tokens"], case.shape["hidden"], case.shape["top_k"]
    f = _BY_NAME[case.scenario]
    fmt = StageFormat(f.kind, f.elem, f.mode)
    gen = ctx.generator()
    x = torch.randn(t, h, generator=gen, device=ctx.device).to(torch.bfloat16)
    hidden, scales = x, None
    if fmt.kind == "mxfp8_prequant":
        hidden, scales = of.quantize_mxfp8(x, elem=fmt.elem)
    elif fmt.kind == "nvfp4_prequant":
        hidden, scales = of.quantize_nvfp4(x, NVFP4_GLOBAL_SCALE)
    # routes: K distinct experts per token, one slot in eight masked
    ids = torch.rand(t, NUM_EXPERTS, generator=gen, device=ctx.device).argsort(dim=1)[:, :k]
    masked = torch.rand(t, k, generator=gen, device=ctx.device) < 0.125
    ids = torch.where(masked, torch.full_like(ids, -1), ids).to(torch.int64)
    weights = torch.rand(t, k, generator=gen, device=ctx.device)
    ws = StagingWorkspace.create(t, k, h, fmt, ctx.device)
    warmup(ws, id_dtypes=(torch.int64,), score_dtypes=(torch.float32,))
    read = hidden.nbytes + (scales.nbytes if scales is not None else 0)
    read += ids.nbytes + weights.nbytes
    write = ws.payload.nbytes + (ws.scales.nbytes if ws.scales is not None else 0)
    write += ws.ids.nbytes + ws.scores.nbytes
    return _Inputs(ws, hidden, scales, ids, weights, read, write)


def _checker(case: Case, inp: _Inputs) -> Callable[[], None]:
    """Bytewise comparison of the workspace with the oracle's staging (untimed)."""

    def check() -> None:
        from oracle import formats as of
        from oracle.routing import stage_routes

        ws, t = inp.ws, case.shape["tokens"]
        ids, scores = stage_routes(inp.ids.cpu(), inp.weights.cpu(), t)
        want = {"ids": ids, "scores": scores}
        kind = ws.fmt.kind
        x = inp.hidden.cpu()
        if kind == "bf16":
            want["payload"] = x
        elif kind == "mxfp8":
            p, s = of.quantize_mxfp8(x, elem=ws.fmt.elem, mode=ws.fmt.mode)
            want["payload"], want["scales"] = p, of.pad_scale_columns(s)
        elif kind == "mxfp8_prequant":
            want["payload"], want["scales"] = x, of.pad_scale_columns(inp.scales.cpu())
        elif kind == "nvfp4":
            want["payload"], want["scales"] = of.quantize_nvfp4(x, NVFP4_GLOBAL_SCALE)
        elif kind == "nvfp4_prequant":
            want["payload"], want["scales"] = x, inp.scales.cpu()
        elif kind == "safe_fp8":
            p, d = of.safe_fp8_quantize(x)
            want["payload"], want["scales"] = p, of.safe_fp8_scale_wire(d)
        for name, w in want.items():
            got = getattr(ws, name).cpu()
            got_b = got.contiguous().view(torch.uint8).reshape(-1)
            want_b = w.contiguous().view(torch.uint8).reshape(-1)
            if not torch.equal(got_b, want_b):
                raise AssertionError(f"staging {case.name}: {name} differs from the oracle")

    return check


def _stage_arm(path: str) -> Callable[[Case, BuildContext], Workload]:
    def build(case: Case, ctx: BuildContext) -> Workload:
        from megamoe.staging import stage

        inp = _make_inputs(case, ctx)
        gs = NVFP4_GLOBAL_SCALE if inp.ws.fmt.is_nvfp4 else 1.0

        def fn() -> None:
            stage(inp.ws, inp.hidden, inp.ids, inp.weights, num_experts=NUM_EXPERTS,
                  hidden_scales=inp.scales, global_scale=gs, path=path)

        return Workload(fn, bytes_moved=inp.read_bytes + inp.write_bytes, ceiling="copy_bw",
                        check=_checker(case, inp))

    build.__qualname__ = f"build_stage_{path}"
    return build


def build_copy_same_bytes(case: Case, ctx: BuildContext) -> Workload:
    """One ``copy_`` of as many bytes as the staging call reads (the traffic floor)."""
    inp = _make_inputs(case, ctx)
    n = max(1, inp.read_bytes)
    src = torch.empty(n, dtype=torch.uint8, device=ctx.device).fill_(7)
    dst = torch.empty_like(src)
    return Workload(lambda: dst.copy_(src), bytes_moved=2 * n, ceiling="copy_bw")


def _cases() -> tuple[Case, ...]:
    cases = []
    for f in FORMATS:
        for h in HIDDEN_SIZES:
            for t in TOKENS:
                for k in TOP_KS:
                    quick = h == QUICK_HIDDEN and k == QUICK_TOP_K and t in QUICK_TOKENS
                    cases.append(Case(
                        f"{f.name}-T{t}-H{h}-K{k}", {"tokens": t, "hidden": h, "top_k": k},
                        scenario=f.name, seed=11, quick=quick,
                        # sub-10-us calls need more calls per sample than the timer resolution
                        calls_per_sample=20 if t <= 128 else None,
                    ))
    return tuple(cases)


STAGING = register_benchmark(
    Benchmark(
        name="staging",
        description="fused route staging + quantization kernels vs the Torch path and a copy",
        cases=_cases(),
        candidate=Arm("kernel", _stage_arm("kernel")),
        baselines=(Arm("torch", _stage_arm("torch")), Arm("copy", build_copy_same_bytes)),
        ceilings=("copy_bw",),
    )
)
