"""Grouped expert GEMM host side (docs/contract.md s2, s5, s8, s9), CPU only.

The PyTorch path (``grouped_gemm_torch``, also what ``grouped_gemm`` runs on CPU tensors) is
compared with the oracle's per-expert FFN steps on the *canonical* W13 (gate rows first), so
the gate/up interleave, the clamp, SwiGLU and the row weighting are all checked against an
independent definition. ``assert_rows_match`` is the checker the GPU tests use too; a
planted-bug test shows it catches broken variants.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from megamoe.errors import ConfigError
from megamoe.experts import api
from megamoe.experts.api import (
    capacity_rows,
    grouped_gemm,
    grouped_gemm_torch,
    interleave_gate_up,
    padded_segment_starts,
)
from megamoe.experts.grouped_gemm_kernel import (
    CONFIGS,
    NARROW_ROUTES,
    TILE_K,
    TILE_M,
    TILE_N,
    KernelConfig,
    default_config,
)
from oracle.ffn import rows_matmul, swiglu
from tests.bitwise import same_bits

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BF16_TOL = 0.01  # docs/contract.md s8, bf16 recipe: relative L2 per live row and overall
POISON = -12345  # int16 bit pattern written to rows that must stay untouched


# ----------------------------------------------------------------------------- checker


def row_rel_errors(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """float64 relative L2 error of every row of ``got`` against ``want`` (float32); a row whose
    reference is all zero counts as error 0 only when ``got`` is all zero too (else inf)."""
    g = got.to(torch.float64)
    w = want.to(torch.float64)
    num = (g - w).norm(dim=1)
    den = w.norm(dim=1)
    rel = num / den.clamp_min(torch.finfo(torch.float64).tiny)
    return torch.where(den > 0, rel, torch.where(num > 0, torch.inf, 0.0))


def assert_rows_match(got: torch.Tensor, want: torch.Tensor, tol: float = BF16_TOL) -> float:
    """docs/contract.md s8 (GEMM vs oracle): every row finite, relative L2 error of every row and
    of the whole block at most ``tol``. Returns the worst row error."""
    assert got.shape == want.shape, (got.shape, want.shape)
    finite = torch.isfinite(got.to(torch.float32)).all(dim=1)
    assert bool(finite.all()), f"non-finite output rows {torch.nonzero(~finite).flatten()[:8]}"
    rel = row_rel_errors(got, want)
    worst = float(rel.max()) if rel.numel() else 0.0
    assert worst <= tol, f"row {int(rel.argmax())}: relative L2 {worst:.3g} > {tol}"
    total = float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-300))
    assert total <= tol, f"whole block relative L2 {total:.3g} > {tol}"
    return worst


def poison_(t: torch.Tensor) -> torch.Tensor:
    t.view(torch.int16).fill_(POISON)
    return t


def part_height_counts() -> list[int]:
    """Expert row counts whose tiles take every A load height of the GEMM kernels
    (``grouped_gemm_kernel.A_PART_ROWS``: 8, 16, 32 and 64 rows, or the whole tile): for each
    height ``h``, ``h / 2 + 1`` rows (more than the height below it), then 100 (a whole
    128-row tile; 64 + 36 in 64-row tiles) and 128 + 17 (a full tile, then 17 rows)."""
    from megamoe.experts.grouped_gemm_kernel import A_PART_ROWS, TILE_M

    return [h // 2 + 1 for h in A_PART_ROWS] + [100, TILE_M + A_PART_ROWS[2] // 2 + 1]


def live_mask(seg: list[int], counts: list[int], m_cap: int) -> torch.Tensor:
    mask = torch.zeros(m_cap, dtype=torch.bool)
    for e, c in enumerate(counts):
        mask[seg[e] : seg[e] + c] = True
    return mask


# ----------------------------------------------------------------------------- reference


def oracle_rows(a: torch.Tensor, w: torch.Tensor, mode: str, scale: torch.Tensor | None,
                clamp: float | None) -> torch.Tensor:
    """float32 rows from the oracle's steps: ``w`` is canonical (swiglu: W13 gate rows first)."""
    h = rows_matmul(a.float(), w.float())
    if mode == "swiglu":
        i = w.shape[0] // 2
        h = swiglu(h[:, :i], h[:, i:], clamp)
    if scale is not None:
        h = h * scale.float().unsqueeze(1)
    return h


def grouped_rows(counts: list[int], k: int, gen: torch.Generator):
    """``(counts int32, padded segment starts, M_cap, a bf16 [M_cap, K])``: the grouped
    layout of the GEMM tests, ``a`` random (padding rows included) from ``gen``."""
    cnt = torch.tensor(counts, dtype=torch.int32)
    m_cap = capacity_rows(sum(counts), len(counts))
    a = torch.randn(m_cap, k, generator=gen).to(torch.bfloat16)
    return cnt, padded_segment_starts(cnt), m_cap, a


def make_case(mode: str, counts: list[int], k: int, n: int, *, seed: int, scale: bool,
              device: str | torch.device = "cpu"):
    """Random inputs in the grouped layout: a [M_cap, K] with poison-free garbage in padding
    rows, canonical weights w [E, N, K] and the kernel operand b (interleaved for swiglu)."""
    gen = torch.Generator().manual_seed(seed)
    e = len(counts)
    cnt, seg, m_cap, a = grouped_rows(counts, k, gen)
    w = (torch.randn(e, n, k, generator=gen) / k**0.5).to(torch.bfloat16)
    b = interleave_gate_up(w) if mode == "swiglu" else w.clone()
    rs = (torch.rand(m_cap, generator=gen) + 0.5) if scale else None
    out_cols = n // 2 if mode == "swiglu" else n
    out = torch.empty(m_cap, out_cols, dtype=torch.bfloat16)

    def to(t):
        return t.to(device) if t is not None else None

    return dict(a=to(a), w=to(w), b=to(b), seg=to(seg), counts=to(cnt), scale=to(rs),
                out=to(out))


def check_against_oracle(case, mode: str, clamp: float | None) -> float:
    seg = case["seg"].tolist()
    counts = case["counts"].tolist()
    out = case["out"]
    worst = 0.0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        lo = seg[e]
        sc = case["scale"][lo : lo + c] if case["scale"] is not None else None
        want = oracle_rows(case["a"][lo : lo + c], case["w"][e], mode, sc, clamp)
        worst = max(worst, assert_rows_match(out[lo : lo + c], want))
    mask = live_mask(seg, counts, out.shape[0]).to(out.device)
    dead = out[~mask].view(torch.int16)
    assert bool((dead == POISON).all()), "rows outside the live segments were written"
    return worst


# ----------------------------------------------------------------------------- helpers


def test_interleave_gate_up_puts_gate_j_at_2j_and_up_j_at_2j_plus_1():
    w = torch.arange(2 * 6 * 3, dtype=torch.float32).reshape(2, 6, 3).to(torch.bfloat16)
    out = interleave_gate_up(w)
    for e in range(2):
        for j in range(3):
            assert same_bits(out[e, 2 * j], w[e, j])
            assert same_bits(out[e, 2 * j + 1], w[e, 3 + j])
    assert same_bits(w, torch.arange(36, dtype=torch.float32).reshape(2, 6, 3).to(torch.bfloat16))


def test_padded_segment_starts_rounds_each_expert_up_to_the_tile():
    counts = torch.tensor([0, 1, TILE_M, TILE_M + 1, 5, 0], dtype=torch.int32)
    got = padded_segment_starts(counts).tolist()
    t = TILE_M
    assert got == [0, 0, t, 2 * t, 4 * t, 5 * t, 5 * t]


@pytest.mark.parametrize(
    "counts", [[0], [1] * 7, [300, 0, 1], [TILE_M] * 3, [TILE_M + 1] * 5, [1000, 17, 129]]
)
def test_capacity_rows_holds_the_padded_segments(counts):
    """``[1] * 7`` and ``[TILE_M + 1] * 5`` are worst cases: TILE_M - 1 padding rows each."""
    cap = capacity_rows(sum(counts), len(counts))
    assert cap % TILE_M == 0
    assert int(padded_segment_starts(torch.tensor(counts, dtype=torch.int32))[-1]) <= cap


@given(st.lists(st.integers(0, 3 * TILE_M), min_size=1, max_size=300), st.integers(0, 300))
def test_capacity_rows_holds_every_split_and_pads_only_experts_that_can_have_rows(counts, rows):
    """Any split of the rows fits; with fewer rows than experts, only as many experts can
    have rows (and pad) as there are rows: 8 routes over DeepSeek's 256 experts need 8
    padded segments (1024 rows), not 256 (32 K rows, each a tile of dead CTAs)."""
    cap = capacity_rows(sum(counts), len(counts))
    assert int(padded_segment_starts(torch.tensor(counts, dtype=torch.int32))[-1]) <= cap
    worst = [1] * min(rows, 256) + [0] * (256 - min(rows, 256))  # one row per expert
    worst[0] += rows - sum(worst)
    tight = capacity_rows(rows, 256)
    assert int(padded_segment_starts(torch.tensor(worst, dtype=torch.int32))[-1]) <= tight
    assert tight <= rows + min(rows, 256) * (TILE_M - 1) + TILE_M


def test_one_token_at_deepseek_needs_eight_padded_segments() -> None:
    """8 routes over 256 experts: 8 tiles of rows, not 256 (docs/perf.md, "Session 19")."""
    assert capacity_rows(8, 256) == 8 * TILE_M


# ----------------------------------------------------------------------------- metadata checks


def _good(mode="plain", e=2, n=TILE_N, k=TILE_K, m_cap=TILE_M):
    out_cols = n // 2 if mode == "swiglu" else n
    return dict(
        a=torch.zeros(m_cap, k, dtype=torch.bfloat16),
        b=torch.zeros(e, n, k, dtype=torch.bfloat16),
        seg_start=torch.zeros(e + 1, dtype=torch.int32),
        counts=torch.zeros(e, dtype=torch.int32),
        out=torch.zeros(m_cap, out_cols, dtype=torch.bfloat16),
        mode=mode,
    )


BAD = {
    "mode": lambda d: d.update(mode="gelu"),
    "a.dtype": lambda d: d.update(a=d["a"].float()),
    "a": lambda d: d.update(a=d["a"].t().contiguous().t()[:, :]),
    "b.dtype": lambda d: d.update(b=d["b"].half()),
    "b.shape[2]": lambda d: d.update(b=torch.zeros(2, TILE_N, 2 * TILE_K, dtype=torch.bfloat16)),
    "K (a.shape[1])": lambda d: d.update(a=torch.zeros(TILE_M, 96, dtype=torch.bfloat16),
                                         b=torch.zeros(2, TILE_N, 96, dtype=torch.bfloat16)),
    "N (b.shape[1])": lambda d: d.update(b=torch.zeros(2, 96, TILE_K, dtype=torch.bfloat16),
                                         out=torch.zeros(TILE_M, 96, dtype=torch.bfloat16)),
    "E (b.shape[0])": lambda d: d.update(b=torch.zeros(0, TILE_N, TILE_K, dtype=torch.bfloat16)),
    "seg_start": lambda d: d.update(seg_start=torch.zeros(2, dtype=torch.int32)),
    "counts": lambda d: d.update(counts=torch.zeros(2, dtype=torch.int64)),
    "out": lambda d: d.update(out=torch.zeros(TILE_M, TILE_N // 2, dtype=torch.bfloat16)),
    "row_scale": lambda d: d.update(row_scale=torch.ones(TILE_M, dtype=torch.float64)),
    "max_ctas": lambda d: d.update(max_ctas=0),
    "clamp": lambda d: d.update(mode="swiglu", out=torch.zeros(TILE_M, TILE_N // 2,
                                                                dtype=torch.bfloat16),
                                clamp=float("nan")),
}


@pytest.mark.parametrize("argument", sorted(BAD))
def test_bad_metadata_raises_config_error_naming_the_argument(argument):
    kwargs = _good()
    BAD[argument](kwargs)
    before = {k: v.clone() for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    with pytest.raises(ConfigError) as info:
        grouped_gemm(**kwargs)
    assert info.value.argument == argument
    assert "expected" in str(info.value) and "got" in str(info.value)
    for k, v in before.items():  # never modifies caller tensors
        assert same_bits(kwargs[k], v)


def test_config_tile_must_divide_n():
    kwargs = _good(n=3 * TILE_N)
    with pytest.raises(ConfigError) as info:
        grouped_gemm(**kwargs, config=KernelConfig(2 * TILE_N, 4))
    assert info.value.argument == "N (b.shape[1])"


@pytest.mark.parametrize(
    ("n", "tile_n"), [(4096, 256), (5760, 192), (2880, 192), (7168, 256), (640, 128), (320, 64)]
)
def test_default_config_takes_the_widest_tile_that_divides_n(n, tile_n):
    assert default_config(n).tile_n == tile_n
    assert default_config(n) in CONFIGS  # so the GPU tests cover it


@pytest.mark.parametrize("n", [4096, 7168, 5760, 2880, 640])
def test_a_small_route_capacity_gets_the_narrow_tile_where_it_divides_n(n):
    narrow = default_config(n, NARROW_ROUTES)
    assert narrow in CONFIGS  # so the GPU tests cover it
    if n % 128 == 0:
        assert (narrow.tile_n, narrow.ws) == (128, True)
        assert narrow.tile_n <= default_config(n).tile_n  # 640: n128s6persist anyway
    else:  # 2880 = 22.5 x 128: the usual widest tile
        assert narrow == default_config(n)
    # one route more, or no capacity given: the widest tile again
    assert default_config(n, NARROW_ROUTES + 1) == default_config(n)
    assert default_config(n, None) == default_config(n)


def test_gemm_config_follows_the_weight_kind_and_the_route_capacity():
    from megamoe.experts.mxfp4_gemm_kernel import mx_default_config

    assert api.gemm_config("bf16", 4096, 64) == default_config(4096, 64)
    assert api.gemm_config("bf16", 4096, 64, experts=256) == default_config(4096, 64)
    for kind in ("mxfp4", "mxfp8", "nvfp4"):
        assert api.gemm_config(kind, 4096, 64) == mx_default_config(4096, kind, 64)
        assert api.gemm_config(kind, 4096, 10**6) == mx_default_config(4096, kind, 10**6)
        # the expert count reaches the MX rule: 16384 routes are narrow over 256 experts only
        assert (api.gemm_config(kind, 4096, 16384, 7168, 256)
                == mx_default_config(4096, kind, 16384, 7168, 256))
        assert (api.gemm_config(kind, 4096, 16384, 7168, 256).tile_m,
                api.gemm_config(kind, 4096, 16384, 7168).tile_m) == (64, TILE_M)
    with pytest.raises(ConfigError) as info:
        api.gemm_config("fp4", 4096)
    assert info.value.argument == "weights"


@pytest.mark.parametrize("experts", [0, -4, True, 2.0, "256"])
def test_gemm_config_refuses_an_expert_count_that_is_not_a_positive_int(experts):
    with pytest.raises(ConfigError) as info:
        api.gemm_config("mxfp4", 4096, 128, 7168, experts)
    assert info.value.argument == "experts"


# (E, K routes per token, T at 64 rows per expert): the bound C * K = 64 * E, by hand
BOUNDS = [(1, 8, 8), (8, 2, 256), (128, 4, 2048), (256, 8, 2048)]


def assert_the_narrow_bound(kind: str, n: int, experts: int, top_k: int, tokens: int) -> None:
    """``MX_NARROW_ROWS_PER_EXPERT`` at one ``(E, K, T)`` of ``BOUNDS``: 64-row tiles up to
    ``C * K = 64 * E``, 128-row tiles one route past it and when no capacity is given; a
    capacity without an expert count is read as one expert's; both variants among the
    format's compiled (GPU-tested) ones."""
    from megamoe.experts.mxfp4_gemm_kernel import (
        CONFIGS_BY_FORMAT,
        MX_NARROW_ROWS_PER_EXPERT,
        mx_default_config,
    )

    assert MX_NARROW_ROWS_PER_EXPERT[kind] == 64  # docs/perf.md "Session 29"
    routes = tokens * top_k
    small = mx_default_config(n, kind, routes, None, experts)
    large = mx_default_config(n, kind, routes + 1, None, experts)
    assert (small.tile_m, large.tile_m) == (64, TILE_M)
    assert mx_default_config(n, kind, None) == large == mx_default_config(n, kind)
    assert mx_default_config(n, kind, 1, None, experts) == small
    assert mx_default_config(n, kind, 64) == small != mx_default_config(n, kind, 65)
    assert mx_default_config(n, kind, routes, None, None) == (small if experts == 1 else large)
    assert small in CONFIGS_BY_FORMAT[kind] and large in CONFIGS_BY_FORMAT[kind]
    assert n % small.tile_n == 0 and n % large.tile_n == 0


@pytest.mark.parametrize("kind", ["mxfp4", "mxfp8", "nvfp4"])
@pytest.mark.parametrize("n", [4096, 7168, 5760, 2880])
@pytest.mark.parametrize(("experts", "top_k", "tokens"), BOUNDS)
def test_an_mx_variant_is_64_rows_high_up_to_64_rows_per_expert(kind, n, experts, top_k,
                                                                 tokens):
    """DeepSeek (E = 256, K = 8) and gpt-oss (E = 128, K = 4) take 64-row tiles up to T =
    2048, one expert up to 64 routes (``assert_the_narrow_bound``)."""
    assert_the_narrow_bound(kind, n, experts, top_k, tokens)


@pytest.mark.parametrize(("experts", "top_k", "tokens"), [(256, 8, 2048), (1, 8, 8)])
def test_the_bound_is_caught_when_it_ignores_the_expert_count(monkeypatch, experts, top_k,
                                                              tokens):
    """Planted bug: the session-28 rule (8192 routes whatever ``E``) hands DeepSeek T = 2048
    (64 rows per expert) the 128-row tile and one expert past 64 routes the 64-row one; the
    rule check refuses both."""
    from megamoe.experts import mxfp4_gemm_kernel as mk

    monkeypatch.setattr(mk, "mx_narrow", lambda weights, routes, experts=None:
                        routes is not None and routes <= 8192)
    with pytest.raises(AssertionError):
        assert_the_narrow_bound("mxfp4", 4096, experts, top_k, tokens)


WIDE_DEFAULTS = {"mxfp4": "n64s4ws", "mxfp8": "n64s3", "nvfp4": "n64s4wsr"}
"""Each format's 128-row variant past ``MX_NARROW_ROWS_PER_EXPERT``, as measured
(docs/perf.md "One A load per stage"; "Session 28": NVFP4's register variant ``n64s4wsr``
4-15 % faster than ``n64s3`` at 64 and 128 rows per expert and at one expert, both shapes;
MXFP4's and MXFP8's 128-row register variants no faster than these)."""


@pytest.mark.parametrize("kind", sorted(WIDE_DEFAULTS))
@pytest.mark.parametrize("n", [4096, 7168, 5760, 2880])
@pytest.mark.parametrize(("routes", "experts"), [(None, None), (65, None), (8193, 128),
                                               (16385, 256), (10**6, 256)])
def test_each_format_takes_its_measured_128_row_variant_past_the_narrow_bound(kind, n, routes,
                                                                             experts):
    """Past ``MX_NARROW_ROWS_PER_EXPERT`` (and with no capacity) the 128-row variant is the
    one the measurements chose, whatever ``K``, and it keeps two CTAs per SM at the
    benchmark shapes' K."""
    from megamoe.experts.mxfp4_gemm_kernel import CONFIGS_BY_FORMAT, ctas_per_sm, mx_default_config

    for k in (None, 2048, 2880, 7168):
        cfg = mx_default_config(n, kind, routes, k, experts)
        assert cfg.tile_m == TILE_M and cfg.name == WIDE_DEFAULTS[kind]
        assert cfg in CONFIGS_BY_FORMAT[kind] and cfg.splits == 1
        if k is not None:
            assert ctas_per_sm(cfg, k, kind) == 2


@pytest.mark.parametrize("tile_m", [TILE_M, 64])
def test_the_load_height_counts_reach_every_height_of_both_tile_heights(tile_m):
    """``part_height_counts`` (the GPU tests' experts) put, in tiles of ``tile_m`` rows, a
    tile at every A load height: each partial height of ``a_part_heights`` and the whole
    tile. Otherwise a height's branch of ``load_stage`` would go untested."""
    from megamoe.experts.grouped_gemm_kernel import a_part_heights

    heights = (*a_part_heights(tile_m), tile_m)
    taken = set()
    for count in part_height_counts():
        for start in range(0, count, tile_m):
            live = min(count - start, tile_m)
            taken.add(min(h for h in heights if h >= live))
    assert taken == set(heights)


def test_good_metadata_passes_the_checks():
    kwargs = _good()
    assert grouped_gemm(**kwargs) == api.PATH_TORCH  # CPU tensors: the PyTorch path


def test_negative_clamp_and_clamp_in_plain_mode_are_refused():
    k = _good("swiglu")
    with pytest.raises(ConfigError, match="clamp"):
        grouped_gemm(**k, clamp=-1.0)
    with pytest.raises(ConfigError, match="clamp"):
        grouped_gemm(**_good("plain"), clamp=1.0)


@pytest.mark.contract("s9.warmup-before-capture")
def test_compile_during_capture_is_refused_with_a_clear_error(monkeypatch):
    monkeypatch.setattr(api, "_capturing", lambda device: True)
    built = []
    monkeypatch.setattr("megamoe.experts.grouped_gemm_kernel.compile_grouped_gemm",
                        lambda *a, **k: built.append(a))
    with pytest.raises(api.CompileDuringCaptureError, match="warmup"):
        api._compiled("plain", 7 * TILE_N, 3 * TILE_K, torch.device("cuda", 0))
    assert built == []


# ----------------------------------------------------------------------------- torch path


@pytest.mark.contract("s5.clamp")
@pytest.mark.parametrize("clamp", [None, 0.75])
def test_torch_path_swiglu_matches_the_oracle_per_expert(clamp):
    case = make_case("swiglu", [3, 0, 130, 1], k=2 * TILE_K, n=TILE_N, seed=1, scale=True)
    poison_(case["out"])
    path = grouped_gemm(case["a"], case["b"], case["seg"], case["counts"], case["out"],
                        mode="swiglu", row_scale=case["scale"], clamp=clamp)
    assert path == api.PATH_TORCH
    check_against_oracle(case, "swiglu", clamp)


@pytest.mark.parametrize("scale", [False, True])
def test_torch_path_plain_matches_the_oracle_per_expert(scale):
    case = make_case("plain", [0, 200, 7], k=TILE_K, n=TILE_N, seed=2, scale=scale)
    poison_(case["out"])
    grouped_gemm_torch(case["a"], case["b"], case["seg"], case["counts"], case["out"],
                       mode="plain", row_scale=case["scale"])
    check_against_oracle(case, "plain", None)


def test_torch_path_leaves_the_inputs_unchanged():
    case = make_case("swiglu", [5, 9], k=TILE_K, n=TILE_N, seed=3, scale=True)
    before = {k: v.clone() for k, v in case.items() if k != "out"}
    grouped_gemm_torch(case["a"], case["b"], case["seg"], case["counts"], case["out"],
                       mode="swiglu", row_scale=case["scale"], clamp=0.5)
    for k, v in before.items():
        assert same_bits(case[k], v), k


# ----------------------------------------------------------------------------- planted bugs


def _swapped_interleave(w13):
    e, two_i, h = w13.shape
    i = two_i // 2
    return torch.stack((w13[:, i:], w13[:, :i]), dim=2).reshape(e, two_i, h)


def test_planted_bug_gate_up_swap_is_caught():
    case = make_case("swiglu", [40, 70], k=TILE_K, n=TILE_N, seed=4, scale=False)
    case["b"] = _swapped_interleave(case["w"])
    poison_(case["out"])
    grouped_gemm_torch(case["a"], case["b"], case["seg"], case["counts"], case["out"],
                       mode="swiglu")
    with pytest.raises(AssertionError, match="relative L2"):
        check_against_oracle(case, "swiglu", None)


def test_planted_bug_missing_row_scale_is_caught():
    case = make_case("plain", [40, 70], k=TILE_K, n=TILE_N, seed=5, scale=True)
    poison_(case["out"])
    grouped_gemm_torch(case["a"], case["b"], case["seg"], case["counts"], case["out"],
                       mode="plain")  # forgets the weighting
    with pytest.raises(AssertionError, match="relative L2"):
        check_against_oracle(case, "plain", None)


def test_planted_bug_write_outside_live_rows_is_caught():
    case = make_case("plain", [3, 5], k=TILE_K, n=TILE_N, seed=6, scale=False)
    poison_(case["out"])
    grouped_gemm_torch(case["a"], case["b"], case["seg"], case["counts"], case["out"],
                       mode="plain")
    case["out"][4].zero_()  # padding row of expert 0
    with pytest.raises(AssertionError, match="outside the live segments"):
        check_against_oracle(case, "plain", None)


def test_planted_bug_one_bad_row_among_good_rows_is_caught():
    got = torch.randn(50, 16, generator=torch.Generator().manual_seed(17))
    got /= got.norm(dim=1, keepdim=True)  # equal row norms: the block's error is 5 % / sqrt(50)
    want = got.clone()
    got[17] *= 1.05  # one row 5 % off: the whole block is still within 1 % (0.71 %)
    assert float((got - want).norm() / want.norm()) < BF16_TOL
    with pytest.raises(AssertionError, match="row 17"):
        assert_rows_match(got.to(torch.bfloat16), want)


@pytest.mark.contract("s8.row-tolerance")
def test_checker_refuses_all_zero_output_and_non_finite_rows():
    want = torch.randn(4, 8)
    with pytest.raises(AssertionError):
        assert_rows_match(torch.zeros(4, 8, dtype=torch.bfloat16), want)
    bad = want.clone().to(torch.bfloat16)
    bad[2, 3] = float("nan")
    with pytest.raises(AssertionError, match="non-finite"):
        assert_rows_match(bad, want)
