"""Grouped expert GEMM kernel on a Hopper GPU (docs/contract.md s5, s8, s9).

- Accuracy: every live row against the oracle's float32 steps on the canonical weights
  (relative L2 per row and overall <= 0.01, every row finite); rows outside the live
  segments keep their poison bits.
- Invariance (s8): a row's output bits do not depend on the other rows (their contents, NaN
  padding rows included), on its expert's row count, or on where in its tile it lands.
- CUDA graphs (s9): one capture, replays with new activations, counts and segment starts
  (an expert with 0 rows, all experts 0) match eager calls bitwise.
- A planted bug (weights not interleaved, i.e. gate and up swapped per pair) is caught.

Shapes: swiglu (K=640, N=768) and plain (K=576, N=768) in every ``KernelConfig`` (the
persistent ``ws`` ones also with a 3-CTA grid, so that each CTA walks many tiles); the FC1
shape K=2880, N=5760 and the FC2 shape K=2880, N=2880 in their default and persistent
configs. K spans more
tiles than pipeline stages in each.
``python -m tests.single.test_grouped_gemm_kernel`` prints a timing comparison.
"""

from __future__ import annotations

import pytest
import torch

from megamoe.experts import api
from megamoe.experts.api import capacity_rows, grouped_gemm, padded_segment_starts
from megamoe.experts.grouped_gemm_kernel import CONFIGS, TILE_K, default_config
from megamoe.graphs import capture
from tests.bitwise import same_bits
from tests.host.test_grouped_gemm_host import (
    POISON,
    check_against_oracle,
    live_mask,
    make_case,
    part_height_counts,
    poison_,
)

SHAPES = {"swiglu": (640, 768), "plain": (576, 768)}  # (K, N): N divisible by every tile
CLAMP = {"swiglu": 0.75, "plain": None}
assert all(k // TILE_K > max(c.stages for c in CONFIGS) for k, _ in SHAPES.values())
CFG_IDS = [c.name for c in CONFIGS]


def _run(case, mode, clamp, b=None, cfg=None, max_ctas=None):
    path = grouped_gemm(case["a"], case["b"] if b is None else b, case["seg"], case["counts"],
                        case["out"], mode=mode, row_scale=case["scale"], clamp=clamp, config=cfg,
                        max_ctas=max_ctas)
    assert path == api.PATH_KERNEL


def _same_on_a_small_grid(case, mode, clamp, cfg):
    """Persistent variants: a 3-CTA grid (each CTA walks many live and dead tiles, its
    pipeline carried across tiles) gives the same bits as the full grid."""
    if cfg.ws:
        full = case["out"].clone()
        poison_(case["out"])
        _run(case, mode, clamp, cfg=cfg, max_ctas=3)
        assert same_bits(case["out"], full), f"{cfg.name}: 3-CTA grid differs from full grid"


@pytest.mark.contract("s5.clamp", "s5.ffn-recipes")
@pytest.mark.parametrize("cfg", CONFIGS, ids=CFG_IDS)
@pytest.mark.parametrize(("clamp", "scale"), [(None, False), (0.75, True)])
def test_swiglu_rows_match_the_oracle(cuda_device, clamp, scale, cfg):
    k, n = SHAPES["swiglu"]
    case = make_case("swiglu", [0, 1, 130, 77, 256, 64], k, n, seed=11, scale=scale,
                     device=cuda_device)
    poison_(case["out"])
    _run(case, "swiglu", clamp, cfg=cfg)
    worst = check_against_oracle(case, "swiglu", clamp)
    _same_on_a_small_grid(case, "swiglu", clamp, cfg)
    print(f"swiglu {cfg.name} clamp={clamp} scale={scale}: worst row rel L2 {worst:.3g}")


@pytest.mark.contract("s5.weighting")
@pytest.mark.parametrize("cfg", CONFIGS, ids=CFG_IDS)
@pytest.mark.parametrize("scale", [False, True])
def test_plain_rows_match_the_oracle(cuda_device, scale, cfg):
    k, n = SHAPES["plain"]
    case = make_case("plain", [128, 0, 3, 200], k, n, seed=12, scale=scale, device=cuda_device)
    poison_(case["out"])
    _run(case, "plain", None, cfg=cfg)
    worst = check_against_oracle(case, "plain", None)
    _same_on_a_small_grid(case, "plain", None, cfg)
    print(f"plain {cfg.name} scale={scale}: worst row rel L2 {worst:.3g}")


@pytest.mark.parametrize("cfg", CONFIGS, ids=CFG_IDS)
def test_every_a_load_height_gives_the_live_rows(cuda_device, cfg):
    """One A load per stage (``A_PART_ROWS``): experts sized so tiles take each partial
    height and the whole tile; every live row against the oracle, no dead row written."""
    k, n = SHAPES["plain"]
    case = make_case("plain", part_height_counts(), k, n, seed=13, scale=True,
                     device=cuda_device)
    poison_(case["out"])
    _run(case, "plain", None, cfg=cfg)
    check_against_oracle(case, "plain", None)


GPT_OSS = [("swiglu", 2880, 5760, 7.0), ("plain", 2880, 2880, None)]
GPT_OSS_CASES = [
    pytest.param(*shape, cfg, id=f"{shape[0]}-{shape[2]}-{cfg.name}")
    for shape in GPT_OSS
    for cfg in dict.fromkeys([default_config(shape[2])] + [c for c in CONFIGS if c.ws])
    if shape[2] % cfg.tile_n == 0
]


@pytest.mark.parametrize(("mode", "k", "n", "clamp", "cfg"), GPT_OSS_CASES)
def test_gpt_oss_shapes_match_the_oracle(cuda_device, mode, k, n, clamp, cfg):
    case = make_case(mode, [3, 129], k, n, seed=13, scale=True, device=cuda_device)
    poison_(case["out"])
    _run(case, mode, clamp, cfg=cfg)
    worst = check_against_oracle(case, mode, clamp)
    print(f"{mode} K={k} N={n} {cfg.name}: worst row rel L2 {worst:.3g}")


def test_planted_bug_gate_up_swap_is_caught_on_the_kernel(cuda_device):
    k, n = SHAPES["swiglu"]
    case = make_case("swiglu", [50, 90], k, n, seed=14, scale=False, device=cuda_device)
    poison_(case["out"])
    _run(case, "swiglu", None, b=case["w"].contiguous())  # canonical, not interleaved
    with pytest.raises(AssertionError, match="relative L2"):
        check_against_oracle(case, "swiglu", None)


@pytest.mark.contract("s8.invariance")
@pytest.mark.parametrize("cfg", CONFIGS, ids=CFG_IDS)
@pytest.mark.parametrize("mode", ["swiglu", "plain"])
def test_row_bits_do_not_depend_on_other_rows_counts_or_position(cuda_device, mode, cfg):
    """Two probe rows of expert 2, placed at different tile rows / warpgroups per run."""
    k, n = SHAPES[mode]
    gen = torch.Generator().manual_seed(21)
    probes = torch.randn(2, k, generator=gen).to(torch.bfloat16).to(cuda_device)
    probe_scale = [0.625, 1.375]
    runs = [
        ([7, 0, 120, 3], [5, 101], False),  # tile rows 5 and 101
        ([200, 5, 300, 0], [200, 280], True),  # tile rows 72 and 24; NaN padding rows
        ([0, 0, 1, 0], [0, None], True),  # the probe alone in its expert
    ]
    outs = []
    weights = None
    for seed, (counts, positions, nan_padding) in enumerate(runs):
        case = make_case(mode, counts, k, n, seed=30 + seed, scale=True, device=cuda_device)
        if weights is None:
            weights = (case["w"], case["b"])
        case["w"], case["b"] = weights  # the same expert weights in every run
        seg = case["seg"].tolist()
        if nan_padding:
            dead = ~live_mask(seg, counts, case["a"].shape[0]).to(cuda_device)
            case["a"][dead] = float("nan")
        rows = []
        for p, pos in enumerate(positions):
            if pos is not None:
                r = seg[2] + pos
                case["a"][r] = probes[p]
                case["scale"][r] = probe_scale[p]
                rows.append(r)
        poison_(case["out"])
        _run(case, mode, CLAMP[mode], cfg=cfg)
        outs.append([case["out"][r].clone() for r in rows])
        check_against_oracle(case, mode, CLAMP[mode])
    for p in range(2):
        got = [o[p] for o in outs if len(o) > p]
        assert bool(torch.isfinite(got[0].float()).all())
        for g in got[1:]:
            assert same_bits(g, got[0]), f"probe {p}: bits differ between runs"


@pytest.mark.parametrize("cfg", CONFIGS, ids=CFG_IDS)
@pytest.mark.parametrize("mode", ["swiglu", "plain"])
def test_graph_replays_match_eager_bitwise(cuda_device, mode, cfg):
    k, n = SHAPES[mode]
    e = 4
    m_cap = capacity_rows(400, e)
    base = make_case(mode, [10, 20, 30, 40], k, n, seed=41, scale=True, device=cuda_device)
    a = torch.empty(m_cap, k, dtype=torch.bfloat16, device=cuda_device)
    a[: base["a"].shape[0]].copy_(base["a"][:m_cap])
    b = base["b"]
    counts = base["counts"].clone()
    seg = torch.zeros(e + 1, dtype=torch.int32, device=cuda_device)
    scale = torch.ones(m_cap, dtype=torch.float32, device=cuda_device)
    out = torch.empty(m_cap, base["out"].shape[1], dtype=torch.bfloat16, device=cuda_device)

    def step():
        seg.copy_(padded_segment_starts(counts))
        grouped_gemm(a, b, seg, counts, out, mode=mode, row_scale=scale, clamp=CLAMP[mode],
                     config=cfg)

    api.warmup(mode, n, k, cuda_device, cfg)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # eager launch before capture (module load)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        step()

    gen = torch.Generator().manual_seed(42)
    for counts_now in ([10, 20, 30, 40], [0, 129, 1, 256], [0, 0, 0, 0], [400, 0, 0, 0],
                       [1, 1, 1, 397]):
        a.copy_(torch.randn(m_cap, k, generator=gen).to(torch.bfloat16))
        scale.copy_(torch.rand(m_cap, generator=gen) + 0.5)
        counts.copy_(torch.tensor(counts_now, dtype=torch.int32))
        poison_(out)
        graph.replay()
        torch.cuda.synchronize()
        replayed = out.clone()
        poison_(out)
        step()
        torch.cuda.synchronize()
        assert same_bits(replayed, out), f"counts {counts_now}: replay differs from eager"
        case = dict(a=a, w=base["w"], seg=seg, counts=counts, scale=scale, out=replayed)
        check_against_oracle(case, mode, CLAMP[mode])
        if sum(counts_now) == 0:
            assert bool((replayed.view(torch.int16) == POISON).all())


def _timed(fn, reps=20) -> float:  # pragma: no cover - manual timing
    """Median milliseconds of ``fn`` over ``reps`` CUDA-event timed calls (after one warmup)."""
    fn()
    ts = []
    for _ in range(reps):
        s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        t.record()
        t.synchronize()
        ts.append(s.elapsed_time(t))
    return sorted(ts)[len(ts) // 2]


def _bench_shape(mode: str, e: int, rows: int, k: int, n: int, ws: bool) -> str:  # pragma: no cover
    dev = torch.device("cuda")
    a = torch.randn(e * rows, k, device=dev).to(torch.bfloat16)
    b = (torch.randn(e, n, k, device=dev) / k**0.5).to(torch.bfloat16)
    counts = torch.full((e,), rows, dtype=torch.int32, device=dev)
    seg = padded_segment_starts(counts)
    out = torch.empty(e * rows, n // 2 if mode == "swiglu" else n, dtype=torch.bfloat16,
                      device=dev)
    clamp = 7.0 if mode == "swiglu" else None
    flop = 2 * e * rows * k * n
    line = f"{mode} E={e} M={rows}/expert K={k} N={n}:"
    for cfg in CONFIGS:
        if n % cfg.tile_n == 0 and cfg.ws == ws:
            ms = _timed(lambda cfg=cfg: grouped_gemm(a, b, seg, counts, out, mode=mode,
                                                     clamp=clamp, config=cfg))
            line += f" {cfg.name} {ms:.3f} ms {flop / ms / 1e9:.0f} TF/s;"
    if ws:
        return line
    loop = _timed(lambda: [torch.mm(a[i * rows : (i + 1) * rows], b[i].t()) for i in range(e)])
    line += f" torch.mm loop {loop:.3f} ms {flop / loop / 1e9:.0f} TF/s"
    if hasattr(torch, "_grouped_mm"):
        offs = torch.arange(1, e + 1, device=dev, dtype=torch.int32) * rows
        try:
            gm = _timed(lambda: torch._grouped_mm(a, b.transpose(1, 2), offs=offs))
            line += f"; torch._grouped_mm {gm:.3f} ms {flop / gm / 1e9:.0f} TF/s"
        except RuntimeError as err:
            line += f"; torch._grouped_mm unavailable: {str(err)[:80]}"
    return line


if __name__ == "__main__":
    import sys

    only_ws = sys.argv[1:] == ["ws"]
    for shape in (("plain", 8, 1024, 4096, 4096), ("swiglu", 8, 1024, 2880, 5760),
                  ("plain", 8, 1024, 2880, 2880), ("plain", 8, 1024, 2048, 7168)):
        print(_bench_shape(*shape, ws=only_ws), flush=True)
