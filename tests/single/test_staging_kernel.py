"""Staging kernel A on the GPU (docs/contract.md s2-s3): route staging fused with the value
checks and the activation copy (bf16 and prequantized MXFP8 / NVFP4), bitwise equal to
the oracle; guard bytes; caller tensors untouched; eager RouteError; Torch fallbacks."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from megamoe import RouteError
from megamoe.graphs import capture
from megamoe.route_check_setting import ENV_VAR
from megamoe.staging import StageFormat, StagingWorkspace, check_errors, stage, warmup
from oracle import formats as of
from oracle.routing import SCORE_DTYPES, find_route_violations
from tests.single.test_staging_helpers import (
    LAYOUTS,
    STAGE_FORMATS,
    boundary_cases,
    boundary_routes,
    fill_guards,
    guards_intact,
    judge_boundary,
    layout,
    make_hidden,
    make_routes,
    make_stage_inputs,
    mismatches,
    noncanonical_nans,
    oracle_stage,
    snapshot,
    unchanged,
)

QUANT_FORMATS = tuple(f for f in STAGE_FORMATS if f.quantizes)
GLOBAL_SCALES = (1.0, 0.37, 1e-3, 3.0, 2.0**-20)
HIDDEN = (32, 64, 96, 160, 1024, 4096, 7168, 16384)


def _ws(fmt, c, k, h, dev, id_dtype, score_dtype):
    ws = StagingWorkspace.create(c, k, h, fmt, dev, guard_bytes=64)
    warmup(ws, id_dtypes=(id_dtype,), score_dtypes=(score_dtype,))
    return ws


@pytest.mark.contract("s1.hidden-formats", "s1.route-dtypes-and-layouts", "s2.masked-any-score", "s3.live-rows-staged", "s3.no-stray-writes", "s3.payload-bytes", "s4.mx-special-blocks", "s4.nvfp4", "s8.bitwise-stages")
@given(
    fmt=st.sampled_from(STAGE_FORMATS),
    h=st.sampled_from(HIDDEN),
    c=st.integers(1, 4096),
    t_frac=st.floats(0.0, 1.0),
    k=st.integers(1, 16),
    e=st.integers(1, 256),
    id_dtype=st.sampled_from((torch.int32, torch.int64)),
    score_dtype=st.sampled_from(SCORE_DTYPES),
    id_layout=st.sampled_from(LAYOUTS),
    score_layout=st.sampled_from(LAYOUTS),
    regime=st.sampled_from(("normal", "tiny", "boundary", "special")),
    g=st.sampled_from(GLOBAL_SCALES),
    seed=st.integers(0, 2**31),
)
@pytest.mark.mega_sm107("masked-routes")
@pytest.mark.mega_sm90_mxfp4("guard-bytes")
def test_kernel_matches_oracle_bitwise(cuda_device, fmt, h, c, t_frac, k, e, id_dtype,
                                       score_dtype, id_layout, score_layout, regime, g, seed):
    c = min(c, max(1, (1 << 24) // h))  # keep one example's activations under ~32 MB
    if fmt.quantizes:
        # kernels B-D share kernel A's route code (make_route_rows); fixing their route
        # dtypes and K bounds the number of (slow) compilations per run
        k, id_dtype, score_dtype = 8, torch.int64, torch.float32
    if fmt.kind == "safe_fp8" and regime == "special":
        regime = "boundary"  # safe FP8 rows must be finite (non-finite rows: error tests)
    t = round(t_frac * c)
    gen = torch.Generator().manual_seed(seed)
    ws = _ws(fmt, c, k, h, cuda_device, id_dtype, score_dtype)
    hidden, scales = make_stage_inputs(gen, fmt, t, h, regime=regime, device=cuda_device)
    ids, w = make_routes(gen, t, k, e, id_dtype=id_dtype, score_dtype=score_dtype,
                         device=cuda_device)
    ids, w = layout(ids, id_layout), layout(w, score_layout)
    exp = oracle_stage(fmt, hidden, ids, w, c, hidden_scales=scales, global_scale=g)
    fill_guards(ws)
    before = snapshot(hidden, ids, w, scales)
    res = stage(ws, hidden, ids, w, num_experts=e, hidden_scales=scales, global_scale=g)
    assert res.path == "kernel", res.reason
    assert mismatches(ws, exp, t) == []
    assert guards_intact(ws)
    assert unchanged(before, hidden, ids, w, scales)


@pytest.mark.contract("s3.tail-rows-emptied")
@pytest.mark.mega_sm107("staging-tails")
def test_kernel_rewrites_capacity_tail_every_call(cuda_device):
    gen = torch.Generator().manual_seed(1)
    fmt = StageFormat("bf16")
    ws = _ws(fmt, 300, 8, 64, cuda_device, torch.int64, torch.float32)
    for t in (300, 129, 0, 1, 300, 7):
        ids, w = make_routes(gen, t, 8, 64, device=cuda_device)
        x = make_hidden(gen, t, 64, device=cuda_device)
        assert stage(ws, x, ids, w, num_experts=64).path == "kernel"
        assert mismatches(ws, oracle_stage(fmt, x, ids, w, 300), t) == []


@pytest.mark.contract("s1.hidden-formats")
@pytest.mark.mega_sm107("masked-routes")
def test_prequant_padded_scale_columns_are_zeroed(cuda_device):
    gen = torch.Generator().manual_seed(2)
    fmt = StageFormat("mxfp8_prequant", "e4m3")
    h, t = 96, 5  # 3 scale columns, padded to 4
    x = make_hidden(gen, t, h)
    p, s = of.quantize_mxfp8(x)
    s_pad = torch.cat([s, torch.full((t, 1), 0xEE, dtype=torch.uint8)], dim=1)
    ws = _ws(fmt, 8, 2, h, cuda_device, torch.int64, torch.float32)
    ids, w = make_routes(gen, t, 2, 8, device=cuda_device)
    fill_guards(ws)
    assert stage(ws, p.to(cuda_device), ids, w, num_experts=8,
                 hidden_scales=s_pad.to(cuda_device)).path == "kernel"
    assert torch.equal(ws.scales[:t].cpu(), of.pad_scale_columns(s))
    assert guards_intact(ws)


BAD_KINDS = ("range", "negative", "wrap", "dup", "nonfinite", "many")


def _bad_routes(gen, t, k, e, kind, id_dtype, score_dtype, dev):
    ids, w = make_routes(gen, t, k, e, mask_frac=0.2)
    r = t // 2
    if kind == "range":
        ids[r, k - 1] = e
    elif kind == "negative":
        ids[r, 0] = -2
    elif kind == "wrap":
        ids[r, 0] = 2**32 if id_dtype == torch.int64 else e + 5
    elif kind == "dup":
        ids[r, 0], ids[r, k - 1] = 1, 1
    elif kind == "nonfinite":
        ids[r, k - 1] = 0 if int(ids[r, k - 1]) == -1 else ids[r, k - 1]
        w[r, k - 1] = float("nan")
    else:
        bad = torch.rand(t, k, generator=gen) < 0.05
        ids = torch.where(bad, torch.randint(-3, e + 3, (t, k), generator=gen), ids)
        w = torch.where(torch.rand(t, k, generator=gen) < 0.05, float("inf"), w)
    return ids.to(id_dtype).to(dev), w.to(score_dtype).to(dev)


@pytest.mark.contract("s2.active-slot-rules", "s2.caller-dtype-checks", "s2.route-error-eager", "s3.no-stray-writes")
@pytest.mark.parametrize("kind", BAD_KINDS)
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("score_dtype", [torch.bfloat16, torch.float64])
@pytest.mark.mega_sm107("masked-routes")
def test_kernel_route_error_equals_torch_path_and_oracle(cuda_device, kind, id_dtype,
                                                         score_dtype):
    gen = torch.Generator().manual_seed(3)
    t, k, e, c = 40, 6, 16, 64
    ids, w = _bad_routes(gen, t, k, e, kind, id_dtype, score_dtype, cuda_device)
    x = make_hidden(gen, t, 64, device=cuda_device)
    violations = find_route_violations(ids.cpu(), w.cpu(), e)
    assert violations
    errs, regions = [], []
    for path in ("kernel", "torch"):
        ws = _ws(StageFormat("bf16"), c, k, 64, cuda_device, id_dtype, score_dtype)
        fill_guards(ws)
        before = snapshot(x, ids, w)
        with pytest.raises(RouteError) as info:
            stage(ws, x, ids, w, num_experts=e, path=path)
        assert ws.last_path == path
        assert unchanged(before, x, ids, w)
        assert guards_intact(ws)
        errs.append(info.value)
        regions.append([ws.view(n).cpu().view(torch.uint8).clone()
                        for n in ("ids", "scores", "row_code", "status")])
    first = violations[0]
    for err in errs:
        assert (err.row, err.slot, err.expert_id, err.rule) == (
            first.row, first.slot, first.expert_id, first.rule)
    for a, b in zip(regions[0], regions[1], strict=True):
        assert torch.equal(a, b)


@pytest.mark.contract("s2.caller-dtype-checks", "s2.active-slot-rules", "s3.live-rows-staged")
@pytest.mark.parametrize(("id_dtype", "score_dtype", "value"),
                         [c[1:] for c in boundary_cases()], ids=[c[0] for c in boundary_cases()])
@pytest.mark.mega_sm107("staging-tails")
def test_kernel_judges_every_boundary_value_on_the_callers_dtype(cuda_device, id_dtype,
                                                                 score_dtype, value):
    """The staging kernel at every boundary of docs/contract.md s2 (the host test of the
    Torch path has the same cases): the oracle's first violation, or the oracle's bytes."""
    ids, w = boundary_routes(id_dtype, score_dtype, value)
    ids, w = ids.to(cuda_device), w.to(cuda_device)
    x = make_hidden(torch.Generator().manual_seed(1), ids.shape[0], 64, device=cuda_device)
    ws = _ws(StageFormat("bf16"), 8, ids.shape[1], 64, cuda_device, id_dtype, score_dtype)

    def call(ws, ids, w):  # type: ignore[no-untyped-def]
        return stage(ws, x, ids, w, num_experts=8, path="kernel")

    assert judge_boundary(call, ws, ids, w, 8) == []
    assert ws.last_path == "kernel"


def _checks_off_case(gen, fmt, dev):  # type: ignore[no-untyped-def]
    t, k, e, h = 20, 4, 8, 64
    ids, w = _bad_routes(gen, t, k, e, "many", torch.int64, torch.float32, dev)
    ids = torch.where(ids.abs() > 2**31, torch.zeros_like(ids), ids)
    x, scales = make_stage_inputs(gen, fmt, t, h, device=dev)
    return t, k, e, h, ids, w, x, scales


def _staged_as_given(ws, ids, w, t: int) -> bool:  # type: ignore[no-untyped-def]
    """Checks off: ids as given (int32), scores as given on active slots, +0.0 on masked."""
    expect = torch.where(ids == -1, 0.0, w.to(torch.float32))
    return (torch.equal(ws.scores[:t].view(torch.int32), expect.view(torch.int32))
            and torch.equal(ws.ids[:t], ids.to(torch.int32)))


@pytest.mark.contract("s2.check-routes-switch", "s3.live-rows-staged", "s3.nan-score-canonical")
@pytest.mark.parametrize("fmt", STAGE_FORMATS, ids=lambda f: f.key)  # every format
@pytest.mark.mega_sm107("masked-routes")
def test_checks_off_kernel_stages_without_error(cuda_device, monkeypatch, fmt):
    """MEGAMOE_CHECK_ROUTES=0 at warmup: every staging kernel stages bad routes (out of range,
    duplicates, non-finite scores) as given, eagerly, without an error or a status word."""
    gen = torch.Generator().manual_seed(4)
    monkeypatch.setenv(ENV_VAR, "0")
    t, k, e, h, ids, w, x, scales = _checks_off_case(gen, fmt, cuda_device)
    ws = _ws(fmt, 32, k, h, cuda_device, torch.int64, torch.float32)
    assert ws.check_routes is False
    res = stage(ws, x, ids, w, num_experts=e, hidden_scales=scales)  # no RouteError
    assert res.path == "kernel", res
    assert _staged_as_given(ws, ids, w, t)
    assert int(ws.view("status")[0]) == 0
    check_errors(ws)


@pytest.mark.contract("s2.check-routes-switch")
@pytest.mark.parametrize("fmt", STAGE_FORMATS, ids=lambda f: f.key)  # every format
@pytest.mark.mega_sm107("masked-routes")
def test_the_setting_is_read_at_capture_and_kept_by_every_replay(cuda_device, monkeypatch,
                                                                 fmt):
    """docs/contract.md s2: the setting in force when a graph is captured is the one its
    replays use. Captured with checks off, bad routes stage as given, even after the variable
    says 1; captured again with checks on, the same replay marks the bad rows and the status
    word, even after the variable says 0."""
    gen = torch.Generator().manual_seed(5)
    t, k, e, h, ids, w, x, scales = _checks_off_case(gen, fmt, cuda_device)
    for setting, after in (("0", "1"), ("1", "0")):
        monkeypatch.setenv(ENV_VAR, setting)
        ws = _ws(fmt, 32, k, h, cuda_device, torch.int64, torch.float32)
        if setting == "1":  # the eager call before capture: checks on, so it raises
            with pytest.raises(RouteError):
                stage(ws, x, ids, w, num_experts=e, hidden_scales=scales, path="kernel")
        else:
            stage(ws, x, ids, w, num_experts=e, hidden_scales=scales, path="kernel")
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with capture(graph):
            stage(ws, x, ids, w, num_experts=e, hidden_scales=scales, path="kernel")
        monkeypatch.setenv(ENV_VAR, after)
        ws.view("status").zero_()
        graph.replay()
        torch.cuda.synchronize()
        if setting == "0":
            assert _staged_as_given(ws, ids, w, t), fmt.key
            assert int(ws.view("status")[0]) == 0
            check_errors(ws)
        else:
            assert int(ws.view("status")[0]) == 1, fmt.key
            with pytest.raises(RouteError):
                check_errors(ws)


@pytest.mark.contract("s3.fused-equals-fallback")
@pytest.mark.parametrize("fmt", [StageFormat("bf16"), *QUANT_FORMATS], ids=lambda f: f.key)
@pytest.mark.mega_sm107("staging-tails")
@pytest.mark.mega_sm90_mxfp4("fallback")
def test_non_contiguous_hidden_takes_the_torch_path_and_matches(cuda_device, fmt):
    gen = torch.Generator().manual_seed(6)
    t, k, e, c, h = 17, 8, 8, 32, 64
    ws = _ws(fmt, c, k, h, cuda_device, torch.int64, torch.float32)
    x = make_hidden(gen, t, 2 * h, device=cuda_device)[:, ::2]
    ids, w = make_routes(gen, t, k, e, device=cuda_device)
    res = stage(ws, x, ids, w, num_experts=e)
    assert res.path == "torch" and "contiguous" in res.reason
    assert mismatches(ws, oracle_stage(fmt, x, ids, w, c), t) == []


QUANT_REGIMES = [
    pytest.param(f, r, id=f"{f.key}-{r}")
    for f in QUANT_FORMATS
    for r in ("normal", "tiny", "boundary", "special")
    if not (f.kind == "safe_fp8" and r == "special")
]


@pytest.mark.contract("s3.fused-equals-fallback", "s3.payload-bytes", "s4.element-casts", "s4.mx-special-blocks", "s4.mxfp8-floor", "s4.mxfp8-rceil", "s4.safe-fp8")
@pytest.mark.parametrize(("fmt", "regime"), QUANT_REGIMES)
@pytest.mark.mega_sm107("fused-mxfp8-staging")
@pytest.mark.mega_sm90_mxfp4("fused-equals-fallback")
def test_quantizing_kernel_equals_torch_path_and_oracle(cuda_device, fmt, regime):
    gen = torch.Generator().manual_seed(7)
    t, k, e, c, h = 300, 8, 64, 512, 7168
    x = make_hidden(gen, t, h, regime=regime, device=cuda_device)
    ids, w = make_routes(gen, t, k, e, device=cuda_device)
    exp = oracle_stage(fmt, x, ids, w, c, global_scale=0.37)
    out = []
    for path in ("kernel", "torch"):
        ws = _ws(fmt, c, k, h, cuda_device, torch.int64, torch.float32)
        fill_guards(ws)
        res = stage(ws, x, ids, w, num_experts=e, path=path, global_scale=0.37)
        assert res.path == path
        assert mismatches(ws, exp, t) == [], path
        assert guards_intact(ws)
        out.append([ws.view(n)[:t].cpu().contiguous().view(torch.uint8)
                    for n in ("payload", "scales", "ids", "scores")])
    for a, b in zip(out[0], out[1], strict=True):
        assert torch.equal(a, b)  # bytes: NaN payloads included


@pytest.mark.contract("s3.payload-bytes", "s4.element-casts", "s4.mxfp8-floor", "s4.mxfp8-rceil", "s4.nvfp4", "s4.safe-fp8")
@pytest.mark.mega_sm107("fused-mxfp8-staging")
def test_quantizing_kernels_sweep_every_bf16_value(cuda_device):
    """Every positive and negative finite bf16 value appears in some block / row, with
    amaxes across the whole exponent range: kernel bytes == oracle bytes."""
    gen = torch.Generator().manual_seed(8)
    allbits = torch.arange(0, 0x7F80, dtype=torch.int32)
    vals = (allbits << 16).view(torch.float32)
    vals = torch.cat([vals, -vals])
    vals = vals[torch.randperm(vals.numel(), generator=gen)]
    h = 1024
    t = (vals.numel() + h - 1) // h
    x = torch.zeros(t * h)
    x[: vals.numel()] = vals
    x = x.view(t, h).to(torch.bfloat16)
    ids, w = make_routes(gen, t, 2, 4)
    for fmt in QUANT_FORMATS:
        for g in (1.0, 1e-3) if fmt.kind == "nvfp4" else (1.0,):
            ws = _ws(fmt, t, 2, h, cuda_device, torch.int64, torch.float32)
            res = stage(ws, x.to(cuda_device), ids.to(cuda_device), w.to(cuda_device),
                        num_experts=4, global_scale=g)
            assert res.path == "kernel"
            assert mismatches(ws, oracle_stage(fmt, x, ids, w, t, global_scale=g), t) == [], (
                fmt.key, g)


@pytest.mark.contract("s4.safe-fp8-row-rule")
@pytest.mark.mega_sm90_mxfp4("fused-equals-fallback")
def test_safe_fp8_kernel_non_finite_row_equals_torch_path(cuda_device):
    gen = torch.Generator().manual_seed(9)
    fmt = StageFormat("safe_fp8")
    t, k, e, c, h = 40, 4, 16, 64, 1024
    x = make_hidden(gen, t, h, device=cuda_device)
    x[11, 500] = float("nan")
    x[30, 0] = float("-inf")
    ids, w = make_routes(gen, t, k, e, device=cuda_device)
    regions = []
    for path in ("kernel", "torch"):
        ws = _ws(fmt, c, k, h, cuda_device, torch.int64, torch.float32)
        with pytest.raises(RouteError) as info:
            stage(ws, x, ids, w, num_experts=e, path=path)
        assert (info.value.row, info.value.rule) == (11, "non_finite_input")
        assert torch.isnan(ws.scales[11]).all() and torch.isnan(ws.scores[30]).all()
        regions.append([ws.view(n)[:t].cpu().contiguous().view(torch.uint8)
                        for n in ("ids", "scores", "payload", "scales", "row_code")])
    for a, b in zip(regions[0], regions[1], strict=True):
        assert torch.equal(a, b)


@pytest.mark.contract("s4.safe-fp8-inactive-row")
@pytest.mark.parametrize("check", [True, False])
def test_safe_fp8_kernel_row_that_routes_nowhere_may_be_non_finite(cuda_device, monkeypatch,
                                                                   check):
    """NaN/Inf input rows whose slots are all masked record nothing on the kernel path, as on
    the Torch path, with checks on or off; every staged region equals the Torch path's."""
    monkeypatch.setenv(ENV_VAR, "1" if check else "0")
    gen = torch.Generator().manual_seed(9)
    fmt = StageFormat("safe_fp8")
    t, k, e, c, h = 40, 4, 16, 64, 1024
    x = make_hidden(gen, t, h, device=cuda_device)
    ids, w = make_routes(gen, t, k, e, device=cuda_device)
    for row, junk in ((11, float("nan")), (30, float("-inf")), (39, float("inf"))):
        x[row, 500] = junk
        ids[row] = -1
        w[row] = float("nan")
    regions = []
    for path in ("kernel", "torch"):
        ws = _ws(fmt, c, k, h, cuda_device, torch.int64, torch.float32)
        stage(ws, x, ids, w, num_experts=e, path=path)
        assert ws.last_path == path
        assert not bool(ws.view("row_code").any()) and int(ws.view("status")[0]) == 0, path
        regions.append([ws.view(n)[:t].cpu().contiguous().view(torch.uint8)
                        for n in ("ids", "scores", "payload", "scales", "row_code")])
    for a, b in zip(regions[0], regions[1], strict=True):
        assert torch.equal(a, b)


@pytest.mark.contract("s3.nan-score-canonical")
@pytest.mark.parametrize("score_dtype", SCORE_DTYPES)
@pytest.mark.parametrize("check", [True, False])
@pytest.mark.mega_sm107("masked-routes")
def test_nan_scores_are_staged_as_the_canonical_nan(cuda_device, monkeypatch, score_dtype,
                                                     check):
    """Any NaN the kernel writes to ``scores`` / ``bad_score`` is the canonical quiet NaN,
    whatever the caller's NaN bits, on both paths (the Torch path is the kernel's twin)."""
    monkeypatch.setenv(ENV_VAR, "1" if check else "0")
    nans = noncanonical_nans(score_dtype)
    t, k, e = 3, 2, 4
    ids = torch.tensor([[0, 1], [2, 3], [1, 0]], dtype=torch.int64, device=cuda_device)
    w = torch.stack([nans, torch.full_like(nans, 0.5)], dim=1).to(cuda_device)
    x = make_hidden(torch.Generator().manual_seed(5), t, 64, device=cuda_device)
    for path in ("kernel", "torch"):
        ws = _ws(StageFormat("bf16"), 8, k, 64, cuda_device, torch.int64, score_dtype)
        assert ws.check_routes is check
        if check:
            with pytest.raises(RouteError):
                stage(ws, x, ids, w, num_experts=e, path=path)
            bad = ws.view("bad_score")[:t].view(torch.int64).cpu()
            assert bad.tolist() == [0x7FF8000000000000] * t, path
        else:
            stage(ws, x, ids, w, num_experts=e, path=path)
        assert ws.last_path == path
        staged = ws.scores[:t, 0].view(torch.int32).cpu()
        assert staged.tolist() == [0x7FC00000] * t, path


@pytest.mark.sanitizer
@pytest.mark.mega_sm107("sanitizer")
@pytest.mark.mega_sm90_mxfp4("sanitizer")
def test_sanitizer_case_staging_small(cuda_device):
    """Designated small case of every staging kernel for the compute-sanitizer suite (one
    process per tool, so one test): per format a clean call, a shrink, then bad routes."""
    gen = torch.Generator().manual_seed(21)
    c, k, e, h = 8, 2, 6, 64
    for fmt in STAGE_FORMATS:
        ws = _ws(fmt, c, k, h, cuda_device, torch.int64, torch.float32)
        for t in (c, 3):
            hidden, scales = make_stage_inputs(gen, fmt, t, h, device=cuda_device)
            ids, w = make_routes(gen, t, k, e, device=cuda_device)
            res = stage(ws, hidden, ids, w, num_experts=e, hidden_scales=scales)
            assert res.path == "kernel", res.reason
            exp = oracle_stage(fmt, hidden, ids, w, c, hidden_scales=scales)
            assert mismatches(ws, exp, t) == [], fmt.key
        ids[1, 0] = e  # out of range
        with pytest.raises(RouteError, match="id_out_of_range"):
            stage(ws, hidden, ids, w, num_experts=e, hidden_scales=scales)
        assert ws.last_path == "kernel"


@pytest.mark.parametrize("fmt", STAGE_FORMATS, ids=lambda f: f.key)
@pytest.mark.mega_sm107("staging-tails")
@pytest.mark.mega_sm90_mxfp4("fallback")
def test_hidden_rows_not_16_byte_aligned_take_the_element_variant_and_match(cuda_device, fmt):
    """The kernels pick 16-byte vector loads only for 16-byte aligned hidden rows; rows
    offset by 4 bytes (copy formats, the least the copy accepts) or one element (quantizing
    formats) run the per-element variant of the same kernel, with the same bytes."""
    gen = torch.Generator().manual_seed(31)
    t, c, h, k, e = 37, 64, 1024, 4, 16
    ws = _ws(fmt, c, k, h, cuda_device, torch.int64, torch.float32)
    hidden, scales = make_stage_inputs(gen, fmt, t, h, device=cuda_device)
    shift = 1 if fmt.quantizes else 4 // hidden.element_size()
    buf = torch.zeros(hidden.numel() + 16, dtype=hidden.dtype, device=cuda_device)
    moved = buf[shift : shift + hidden.numel()].view(hidden.shape)
    moved.copy_(hidden)
    assert moved.data_ptr() % 16 != 0
    ids, w = make_routes(gen, t, k, e, device=cuda_device)
    fill_guards(ws)
    res = stage(ws, moved, ids, w, num_experts=e, hidden_scales=scales)
    assert res.path == "kernel", res.reason
    assert mismatches(ws, oracle_stage(fmt, hidden, ids, w, c, hidden_scales=scales), t) == []
    assert guards_intact(ws)
