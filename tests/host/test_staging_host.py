"""Staging on the host (docs/contract.md s2-s4, s9): metadata checks, the MEGAMOE_CHECK_ROUTES
setting, the workspace layout, and the Torch path against the oracle, bitwise, on CPU."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import megamoe.staging.torch_path as tp
from megamoe import ConfigError, RouteError
from megamoe.route_check_setting import ENV_VAR, read_check_routes
from megamoe.staging import StageFormat, StagingWorkspace, stage, warmup
from megamoe.staging import constants as mc
from megamoe.validation import validate_stage_inputs
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


def _ws(fmt, c=16, k=4, h=64, device="cpu", guard=64, check=True, monkeypatch=None):
    ws = StagingWorkspace.create(c, k, h, fmt, device, guard_bytes=guard)
    if monkeypatch is not None:
        monkeypatch.setenv(ENV_VAR, "1" if check else "0")
    warmup(ws)
    return ws


# ---------------------------------------------------------------- constants


def test_constants_match_the_oracle():
    for name in ("E4M3_MAX", "E5M2_MAX", "E2M1_MAX", "E4M3_TINY", "MX_BLOCK", "NVFP4_BLOCK",
                 "SCALE_COLUMN_MULTIPLE", "E8M0_NAN", "SAFE_FP8_FMAX", "SAFE_FP8_TINY",
                 "SAFE_FP8_SAFE_MIN", "SAFE_FP8_ZERO_SCALE", "FLT_MAX"):
        assert getattr(mc, name) == getattr(of.constants, name), name
    assert mc.FP8_NAN_BYTE == of.constants.E4M3_NAN_BYTE == of.constants.E5M2_NAN_BYTE
    from oracle import routing

    assert mc.ROUTE_RULES == routing.ROUTE_RULES


# ---------------------------------------------------------------- workspace


@pytest.mark.parametrize("fmt", STAGE_FORMATS, ids=lambda f: f.key)
def test_workspace_regions_are_aligned_disjoint_and_guarded(fmt):
    ws = StagingWorkspace.create(33, 5, 96, fmt, guard_bytes=32)
    spans = sorted((r.offset, r.offset + r.nbytes, r.name) for r in ws.regions.values())
    assert spans[0][0] >= 32
    for (_, a1, _), (b0, _, _) in itertools.pairwise(spans):
        assert b0 >= a1 + 32, "guard gap between regions"
    assert ws.buffer.numel() >= spans[-1][1] + 32
    for r in ws.regions.values():
        assert r.offset % 16 == 0
        assert tuple(ws.view(r.name).shape) == r.shape
        assert ws.view(r.name).data_ptr() == ws.buffer.data_ptr() + r.offset
    assert tuple(ws.ids.shape) == (33, 5) and ws.ids.dtype == torch.int32
    assert tuple(ws.scores.shape) == (33, 5) and ws.scores.dtype == torch.float32
    if fmt.is_mx:
        assert tuple(ws.scales.shape) == (33, 4)  # ceil(3 / 4) * 4 padded E8M0 columns
    if fmt.kind == "safe_fp8":
        assert tuple(ws.scales.shape) == (33, 4) and ws.scales.dtype == torch.float32


def test_workspace_rejects_bad_sizes():
    with pytest.raises(ConfigError, match="hidden_size"):
        StagingWorkspace.create(8, 2, 48, StageFormat("bf16"))
    with pytest.raises(ConfigError, match="capacity"):
        StagingWorkspace.create(0, 2, 64, StageFormat("bf16"))
    with pytest.raises(ConfigError, match=r"format\.kind"):
        StageFormat("fp16")


# ---------------------------------------------------------------- metadata checks


def _valid_call(fmt=None):
    fmt = fmt or StageFormat("bf16")
    gen = torch.Generator().manual_seed(1)
    ws = StagingWorkspace.create(16, 4, 64, fmt)
    hidden, scales = make_stage_inputs(gen, fmt, 8, 64)
    ids, w = make_routes(gen, 8, 4, 32)
    return ws, dict(hidden=hidden, topk_ids=ids, topk_weights=w, num_experts=32,
                    hidden_scales=scales)


@pytest.mark.contract("s2.metadata-checks")
@pytest.mark.parametrize(
    ("change", "argument"),
    [
        (lambda a: a.update(topk_ids=a["topk_ids"].float()), "topk_ids"),
        (lambda a: a.update(topk_ids=a["topk_ids"][:, :3]), "topk_ids"),
        (lambda a: a.update(topk_ids=a["topk_ids"][0]), "topk_ids"),
        (lambda a: a.update(topk_weights=a["topk_weights"].to(torch.int32)), "topk_weights"),
        (lambda a: a.update(topk_weights=a["topk_weights"][:7]), "topk_weights"),
        (lambda a: a.update(hidden=a["hidden"].float()), "hidden"),
        (lambda a: a.update(hidden=a["hidden"][:, :32]), "hidden"),
        (lambda a: a.update(num_experts=0), "num_experts"),
        (lambda a: a.update(num_experts=True), "num_experts"),
        (lambda a: a.update(hidden_scales=torch.zeros(8, 2, dtype=torch.uint8)), "hidden_scales"),
        (lambda a: a.update(live_tokens=torch.zeros(1, dtype=torch.int64)), "live_tokens"),
    ],
)
def test_metadata_check_names_argument_expected_and_actual(change, argument):
    ws, args = _valid_call()
    validate_stage_inputs(ws, **args)  # the unchanged call passes
    change(args)
    with pytest.raises(ConfigError) as info:
        validate_stage_inputs(ws, **args)
    assert info.value.argument == argument
    assert "expected" in str(info.value) and "got" in str(info.value)


def test_metadata_check_rejects_more_tokens_than_capacity():
    gen = torch.Generator().manual_seed(2)
    ws = StagingWorkspace.create(4, 2, 64, StageFormat("bf16"))
    ids, w = make_routes(gen, 5, 2, 8)
    with pytest.raises(ConfigError, match="T <= capacity"):
        validate_stage_inputs(ws, make_hidden(gen, 5, 64), ids, w, num_experts=8)


@pytest.mark.contract("s1.hidden-formats")
@pytest.mark.parametrize("fmt", [StageFormat("mxfp8_prequant"), StageFormat("nvfp4_prequant"),
                                 StageFormat("nvfp4")], ids=lambda f: f.kind)
def test_metadata_check_formats(fmt):
    ws, args = _valid_call(fmt)
    validate_stage_inputs(ws, **args)
    if fmt.kind == "nvfp4":
        with pytest.raises(ConfigError, match="global_scale"):
            validate_stage_inputs(ws, **args, global_scale=float("inf"))
    else:
        args["hidden_scales"] = args["hidden_scales"][:, :1]
        with pytest.raises(ConfigError, match="hidden_scales"):
            validate_stage_inputs(ws, **args)


@pytest.mark.contract("s2.metadata-checks")
def test_metadata_checks_read_no_values():
    """The checks pass on meta tensors, which hold no values: nothing is read or synced."""
    fmt = StageFormat("mxfp8_prequant")
    ws = StagingWorkspace.create(16, 4, 64, fmt, "meta")
    meta = validate_stage_inputs(
        ws, torch.empty(8, 64, dtype=torch.float8_e4m3fn, device="meta"),
        torch.empty(8, 4, dtype=torch.int64, device="meta"),
        torch.empty(8, 4, dtype=torch.float64, device="meta"), num_experts=16,
        hidden_scales=torch.empty(8, 4, dtype=torch.uint8, device="meta"),
        live_tokens=torch.empty(1, dtype=torch.int32, device="meta"),
    )
    assert meta.num_tokens == 8 and meta.graph_live


@pytest.mark.contract("s3.no-stray-writes")
def test_bad_metadata_raises_before_touching_the_workspace():
    ws, args = _valid_call()
    warmup(ws)
    fill_guards(ws)
    before = ws.buffer.clone()
    args["topk_ids"] = args["topk_ids"][:, :2]
    with pytest.raises(ConfigError):
        stage(ws, **args)
    assert torch.equal(ws.buffer, before)


# ---------------------------------------------------------------- setting


@pytest.mark.contract("s2.check-routes-switch")
@pytest.mark.parametrize(("raw", "value"), [(None, True), ("", True), ("1", True),
                                            ("0", False), ("off", False), ("true", True)])
def test_check_routes_setting_parses(raw, value):
    env = {} if raw is None else {ENV_VAR: raw}
    assert read_check_routes(env) is value


def test_check_routes_setting_rejects_garbage():
    with pytest.raises(ConfigError, match=ENV_VAR):
        read_check_routes({ENV_VAR: "maybe"})


@pytest.mark.contract("s2.check-routes-switch")
def test_setting_is_read_at_warmup_and_recorded(monkeypatch):
    gen = torch.Generator().manual_seed(3)
    ws = StagingWorkspace.create(8, 2, 64, StageFormat("bf16"))
    ids, w = make_routes(gen, 4, 2, 8, mask_frac=0.0)
    ids[1, 0] = 99  # out of range
    x = make_hidden(gen, 4, 64)
    with pytest.raises(ConfigError, match="warm"):
        stage(ws, x, ids, w, num_experts=8)  # no warmup: no setting recorded yet
    monkeypatch.setenv(ENV_VAR, "0")
    warmup(ws)
    assert ws.check_routes is False
    monkeypatch.setenv(ENV_VAR, "1")  # changing it afterwards has no effect ...
    stage(ws, x, ids, w, num_experts=8)  # ... so no RouteError
    assert ws.check_routes is False
    warmup(ws)  # ... until the next warmup
    assert ws.check_routes is True
    with pytest.raises(RouteError):
        stage(ws, x, ids, w, num_experts=8)


@pytest.mark.contract("s2.check-routes-switch", "s3.live-rows-staged")
def test_checks_off_still_zeroes_masked_scores(monkeypatch):
    gen = torch.Generator().manual_seed(4)
    monkeypatch.setenv(ENV_VAR, "0")
    ws = _ws(StageFormat("bf16"), c=8, k=3)
    ids, w = make_routes(gen, 6, 3, 16, mask_frac=0.5)
    ids[0] = -1
    w[0] = float("nan")
    stage(ws, make_hidden(gen, 6, 64), ids, w, num_experts=16)
    exp = oracle_stage(ws.fmt, make_hidden(gen, 6, 64), ids, w, 8)
    assert torch.equal(ws.scores.view(torch.int32), exp.scores.view(torch.int32))
    assert torch.equal(ws.ids, exp.ids)


@pytest.mark.contract("s3.nan-score-canonical")
@pytest.mark.parametrize("score_dtype", SCORE_DTYPES)
def test_checks_off_active_nan_scores_stage_as_the_oracles_canonical_nan(monkeypatch,
                                                                         score_dtype):
    """docs/contract.md v2 s3: with value checks off, an active slot's NaN score (any sign, any
    payload) stages as 0x7FC00000 on the Torch path, bit for bit the oracle's staging."""
    gen = torch.Generator().manual_seed(14)
    monkeypatch.setenv(ENV_VAR, "0")
    ws = _ws(StageFormat("bf16"), c=8, k=3)
    ids, w = make_routes(gen, 6, 3, 16, mask_frac=0.0, score_dtype=score_dtype)
    w[1, 0] = float("nan")
    w[2, 1] = -float("nan")
    if score_dtype in (torch.float32, torch.float64):  # a payload the hardware would keep
        bits = w.view(torch.int32 if score_dtype == torch.float32 else torch.int64)
        bits[3, 2] = 0x7F800001 if score_dtype == torch.float32 else 0x7FF0000000000001
    hidden = make_hidden(gen, 6, 64)
    stage(ws, hidden, ids, w, num_experts=16)
    exp = oracle_stage(ws.fmt, hidden, ids, w, 8)
    assert torch.equal(ws.scores.view(torch.int32), exp.scores.view(torch.int32))
    assert int(ws.scores.view(torch.int32)[1, 0]) == 0x7FC00000
    assert int(ws.scores.view(torch.int32)[2, 1]) == 0x7FC00000


@pytest.mark.contract("s2.caller-dtype-checks", "s2.active-slot-rules", "s3.live-rows-staged")
@pytest.mark.parametrize(("id_dtype", "score_dtype", "value"),
                         [c[1:] for c in boundary_cases()], ids=[c[0] for c in boundary_cases()])
def test_torch_path_judges_every_boundary_value_on_the_callers_dtype(id_dtype, score_dtype,
                                                                      value):
    """docs/contract.md s2 at every boundary: each score dtype's largest finite value, the
    first non-finite, float64 values finite there but not in float32 (valid: they stage as
    +-inf), and int64 ids at the edges of int32 (out of range, never wrapped): the Torch path
    raises the oracle's first violation or stages the oracle's bytes."""
    ids, w = boundary_routes(id_dtype, score_dtype, value)
    ws = StagingWorkspace.create(8, ids.shape[1], 64, StageFormat("bf16"), "cpu")
    ws.check_routes = True
    x = make_hidden(torch.Generator().manual_seed(1), ids.shape[0], 64)

    def call(ws, ids, w):  # type: ignore[no-untyped-def]
        return stage(ws, x, ids, w, num_experts=8, path="torch")

    assert judge_boundary(call, ws, ids, w, 8) == []


# ---------------------------------------------------------------- Torch path vs oracle


# safe FP8 rows must be finite: its non-finite rows are tested as route errors below
FORMAT_REGIMES = [
    pytest.param(f, r, id=f"{f.key}-{r}")
    for f in STAGE_FORMATS
    for r in ("normal", "tiny", "boundary", "special")
    if not (f.kind == "safe_fp8" and r == "special")
]


@pytest.mark.contract("s1.hidden-formats", "s3.fused-equals-fallback", "s3.no-stray-writes", "s3.payload-bytes", "s4.element-casts", "s4.mx-special-blocks", "s4.mxfp8-floor", "s4.mxfp8-rceil", "s4.nvfp4", "s4.safe-fp8")
@pytest.mark.parametrize(("fmt", "regime"), FORMAT_REGIMES)
def test_torch_path_matches_oracle_bitwise(fmt, regime):
    gen = torch.Generator().manual_seed(5)
    c, k, h, t, e = 12, 4, 96, 9, 16
    ws = _ws(fmt, c=c, k=k, h=h)
    hidden, scales = make_stage_inputs(gen, fmt, t, h, regime=regime)
    ids, w = make_routes(gen, t, k, e)
    fill_guards(ws)
    before = snapshot(hidden, ids, w, scales)
    res = stage(ws, hidden, ids, w, num_experts=e, hidden_scales=scales, global_scale=0.5
                if fmt.kind == "nvfp4" else 1.0)
    assert res.path == "torch" and ws.last_path == "torch"
    exp = oracle_stage(fmt, hidden, ids, w, c, hidden_scales=scales,
                       global_scale=0.5 if fmt.kind == "nvfp4" else 1.0)
    assert mismatches(ws, exp, t) == []
    assert guards_intact(ws)
    assert unchanged(before, hidden, ids, w, scales)


# ---------------------------------------------------------------- format steps at their edges


def _stage_one_row(fmt: StageFormat, row: torch.Tensor, path: str, global_scale: float = 1.0
                   ) -> tuple[list[int], list[int]]:
    """(payload bytes, scale bytes) of one bf16 row, staged on the Torch path or quantized by
    the oracle."""
    x = row.to(torch.bfloat16).view(1, -1)
    if path == "oracle":
        if fmt.kind == "nvfp4":
            payload, scales = of.quantize_nvfp4(x, global_scale)
        else:
            payload, scales = of.quantize_mxfp8(x, elem=fmt.elem, mode=fmt.mode)
        return (payload.view(torch.uint8).flatten().tolist(),
                scales.view(torch.uint8).flatten().tolist())
    ws = _ws(fmt, c=4, k=1, h=x.shape[1])
    stage(ws, x, torch.zeros(1, 1, dtype=torch.int64), torch.ones(1, 1), num_experts=1,
          global_scale=global_scale, path="torch")
    blocks = x.shape[1] // (mc.NVFP4_BLOCK if fmt.kind == "nvfp4" else mc.MX_BLOCK)
    return (ws.payload[:1].view(torch.uint8).flatten().tolist(),
            ws.scales[:1].view(torch.uint8).flatten().tolist()[:blocks])


_F32 = np.float32


def _nvfp4_reference(x: np.ndarray, g: float, *, fold_scale: bool = False,
                     fold_multiplier: bool = False) -> tuple[list[int], list[int]]:
    """docs/contract.md s4 NVFP4 written out in numpy float32 (each step one correctly rounded
    IEEE operation) with ml_dtypes' E4M3 and E2M1 casts (nearest, ties to even): (packed
    bytes, scale bytes) of float32 ``x`` in blocks of 16. ``fold_scale`` / ``fold_multiplier``
    give the near misses ``amax / (6 * g)`` and ``1 / (g * s)`` (one rounding fewer)."""
    gf = _F32(g)
    scale_bytes, codes = [], []
    for blk in x.astype(_F32).reshape(-1, 16):
        amax = np.abs(blk).max()
        s_pre = amax / (_F32(6) * gf) if fold_scale else (amax / _F32(6)) / gf
        s8 = np.array(np.clip(s_pre, _F32(2.0**-6), _F32(448)), dtype=_F32).astype(
            ml_dtypes.float8_e4m3fn)
        s = s8.astype(_F32)
        r = _F32(1) / (gf * s) if fold_multiplier else (_F32(1) / gf) / s
        c = np.clip(blk * r, _F32(-6), _F32(6)).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
        c = c & 0x0F
        c[(c & 0x07) == 0] = 0  # code 0 never carries a sign
        scale_bytes.append(int(s8.view(np.uint8)))
        codes += c.tolist()
    return [lo | hi << 4 for lo, hi in zip(codes[0::2], codes[1::2], strict=True)], scale_bytes


@pytest.mark.contract("s4.nvfp4")
@pytest.mark.parametrize("path", ["torch", "oracle"])
def test_nvfp4_takes_the_contracts_float32_steps_in_their_order(path):
    """docs/contract.md s4 NVFP4: ``s = e4m3((amax / 6) / g)`` and ``r = (1 / g) / s``, one
    float32 rounding per step, in that order. With ``g = 0.7`` two blocks tell each step from
    its fold into one rounding:

    - amax 0.8203125: ``(amax / 6) / g`` is exactly 0.1953125, the E4M3 tie between 0.1875
      and 0.203125, so ``s = 0.1875`` (byte 0x24, the even one); ``amax / (6 * g)`` lands
      just above the tie (0.203125, byte 0x25);
    - amax 7 (``s = 1.625``, byte 0x3D): ``2.84375 * r`` is exactly the E2M1 tie 2.5, code 4
      (2.0, the even one); with ``r = 1 / (g * s)`` it lands just above it, code 5.

    Blocks 2 and 3 are blocks 0 and 1 negated. The expected bytes come from a numpy float32
    model of the contract's formula (``_nvfp4_reference``), never from the code under test."""
    b0 = [0.8203125, -0.5, 0.25, 0.375, -0.125, 0.0625, 0.8125, -0.40625] + [0.0] * 8
    b1 = [7.0, 1.421875, 2.84375, 5.6875, -2.84375, -1.421875, 0.5, 3.25] + [0.0] * 8
    row = torch.tensor(b0 + b1 + [-v for v in b0 + b1])
    assert torch.equal(row.to(torch.bfloat16).float(), row)  # every value exact in bf16
    want_packed, want_scales = _nvfp4_reference(row.numpy(), 0.7)
    assert want_scales == [0x24, 0x3D, 0x24, 0x3D]  # by hand, above
    assert (want_packed[9] & 0x0F, want_packed[25] & 0x0F) == (4, 12)  # +-2.84375: +-2.0
    # the near misses give other bytes: the blocks tell the order apart
    assert _nvfp4_reference(row.numpy(), 0.7, fold_scale=True)[1][0] == 0x25
    assert _nvfp4_reference(row.numpy(), 0.7, fold_multiplier=True)[0][9] != want_packed[9]
    got_packed, got_scales = _stage_one_row(StageFormat("nvfp4"), row, path, global_scale=0.7)
    assert got_scales == want_scales
    assert got_packed == want_packed


@pytest.mark.contract("s4.mxfp8-rceil")
@pytest.mark.parametrize("elem", ["e4m3", "e5m2"])
@pytest.mark.parametrize("path", ["torch", "oracle"])
def test_a_block_whose_d_is_2_pow_minus_127_gets_byte_0(elem, path):
    """docs/contract.md s4 rceil, subnormal ``d`` included: a block with ``amax = fmax *
    2**-127`` (1.75 * 2**-119 for E4M3, 1.75 * 2**-112 for E5M2, both bf16) has ``d = amax /
    fmax = 2**-127`` exactly, a subnormal float32 power of two, so ``e = ceil(log2(d)) =
    -127``: byte 0x00 and payload ``sat_cast(x * 2**127)`` (the amax element becomes
    ``fmax``). An exact ceil(log2) that adds one at subnormal powers of two gives byte 0x01
    and half the payload."""
    fmax = {"e4m3": 448.0, "e5m2": 57344.0}[elem]
    np_dtype = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[elem]
    pattern = [1.0, -0.5, 0.25, 0.375, -0.75, 0.875, 0.0, -0.125] * 4
    block = [fmax * 2.0**-127 * k for k in pattern]  # float64, exact
    row = torch.tensor(block + [-v for v in block], dtype=torch.float64)
    assert torch.equal(row.to(torch.bfloat16).double(), row)  # every value exact in bf16
    want_payload = (row.numpy() * 2.0**127).astype(np_dtype).view(np.uint8).tolist()
    assert want_payload[0] == {"e4m3": 0x7E, "e5m2": 0x7B}[elem]  # fmax, by hand
    payload, scales = _stage_one_row(StageFormat("mxfp8", elem, "rceil"), row, path)
    assert scales == [0x00, 0x00]
    assert payload == want_payload


@pytest.mark.contract("s1.route-dtypes-and-layouts", "s2.masked-any-score", "s3.live-rows-staged")
@given(
    t=st.integers(0, 24),
    k=st.integers(1, 16),
    e=st.integers(1, 64),
    id_dtype=st.sampled_from((torch.int32, torch.int64)),
    score_dtype=st.sampled_from(SCORE_DTYPES),
    id_layout=st.sampled_from(LAYOUTS),
    score_layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**31),
)
def test_torch_path_routes_match_oracle_for_any_dtype_and_layout(
    t, k, e, id_dtype, score_dtype, id_layout, score_layout, seed
):
    gen = torch.Generator().manual_seed(seed)
    c = 24
    ws = StagingWorkspace.create(c, k, 32, StageFormat("bf16"), guard_bytes=16)
    ws.check_routes = True
    ids, w = make_routes(gen, t, k, e, id_dtype=id_dtype, score_dtype=score_dtype)
    ids, w = layout(ids, id_layout), layout(w, score_layout)
    hidden = make_hidden(gen, t, 32)
    fill_guards(ws)
    before = snapshot(ids, w)
    stage(ws, hidden, ids, w, num_experts=e)
    assert mismatches(ws, oracle_stage(ws.fmt, hidden, ids, w, c), t) == []
    assert guards_intact(ws)
    assert unchanged(before, ids, w)


@pytest.mark.contract("s3.tail-rows-emptied")
def test_shrinking_batch_leaves_no_stale_route():
    gen = torch.Generator().manual_seed(6)
    ws = _ws(StageFormat("bf16"), c=8, k=2)
    for t in (8, 3, 0, 5):
        ids, w = make_routes(gen, t, 2, 4)
        x = make_hidden(gen, t, 64)
        stage(ws, x, ids, w, num_experts=4)
        assert mismatches(ws, oracle_stage(ws.fmt, x, ids, w, 8), t) == []


# ---------------------------------------------------------------- value checks


def _bad_routes(gen, t, k, e, kind):
    ids, w = make_routes(gen, t, k, e, mask_frac=0.2)
    r = t // 2
    if kind == "range":
        ids[r, k - 1] = e
    elif kind == "negative":
        ids[r, 0] = -2
    elif kind == "wrap":
        ids[r, 0] = 2**32  # int64 2**32 is out of range, never wrapped to 0
    elif kind == "dup":
        ids[r, 0], ids[r, k - 1] = 1, 1
    else:
        ids[r, 1] = 0 if int(ids[r, 1]) == -1 else ids[r, 1]
        ids[r, 0] = -1 if ids[r, 1] != 0 else 2
        w[r, 1] = float("inf")
    return ids, w


@pytest.mark.contract("s2.active-slot-rules", "s2.caller-dtype-checks", "s2.route-error-eager")
@pytest.mark.parametrize("kind", ["range", "negative", "wrap", "dup", "nonfinite"])
def test_route_error_names_the_first_violation_like_the_oracle(kind):
    gen = torch.Generator().manual_seed(7)
    t, k, e = 6, 4, 8
    ws = _ws(StageFormat("bf16"), c=8, k=k)
    ids, w = _bad_routes(gen, t, k, e, kind)
    first = find_route_violations(ids, w, e)[0]
    before = snapshot(ids, w)
    with pytest.raises(RouteError) as info:
        stage(ws, make_hidden(gen, t, 64), ids, w, num_experts=e)
    err = info.value
    assert (err.row, err.slot, err.expert_id, err.rule) == (
        first.row, first.slot, first.expert_id, first.rule)
    assert torch.equal(torch.tensor(err.score, dtype=torch.float64),
                       torch.tensor(first.score, dtype=torch.float64)) or (
        err.score != err.score and first.score != first.score)
    assert unchanged(before, ids, w)
    # the bad row is marked NaN, the other rows are staged normally
    assert torch.isnan(ws.scores[first.row]).all()
    assert ((ws.ids[first.row] >= 0) & (ws.ids[first.row] < e)).all()
    good = [r for r in range(t) if r != first.row]
    exp = oracle_stage(ws.fmt, make_hidden(gen, t, 64), ids[good], w[good], len(good))
    assert torch.equal(ws.ids[good], exp.ids)


@pytest.mark.contract("s4.safe-fp8-row-rule")
def test_safe_fp8_non_finite_input_row_is_a_route_error():
    gen = torch.Generator().manual_seed(8)
    ws = _ws(StageFormat("safe_fp8"), c=8, k=2)
    ids, w = make_routes(gen, 5, 2, 4)
    x = make_hidden(gen, 5, 64)
    x[3, 7] = float("inf")
    with pytest.raises(RouteError) as info:
        stage(ws, x, ids, w, num_experts=4)
    assert (info.value.row, info.value.rule) == (3, "non_finite_input")
    assert torch.isnan(ws.scales[3]).all()


@pytest.mark.contract("s4.safe-fp8-inactive-row")
def test_a_safe_fp8_row_that_routes_nowhere_may_be_non_finite():
    """A non-finite input row with every slot masked raises nothing and records nothing; the
    same row with one active slot is the route error (the rule above); every other row is
    staged as the oracle stages it."""
    gen = torch.Generator().manual_seed(8)
    ids, w = make_routes(gen, 5, 2, 4)
    x = make_hidden(gen, 5, 64)
    x[3, 7] = float("inf")
    ids[3] = -1
    w[3] = float("nan")
    ws = _ws(StageFormat("safe_fp8"), c=8, k=2)
    stage(ws, x, ids, w, num_experts=4)
    assert not bool(ws.view("row_code").any()) and int(ws.view("status")[0]) == 0
    assert ws.ids[3].tolist() == [-1, -1]
    good = [0, 1, 2, 4]
    exp = oracle_stage(ws.fmt, x[good], ids[good], w[good], len(good))
    assert torch.equal(ws.ids[good], exp.ids)
    assert torch.equal(ws.payload[good].view(torch.uint8), exp.payload.view(torch.uint8))
    ids[3, 1] = 2
    w[3, 1] = 0.5
    with pytest.raises(RouteError) as info:
        stage(ws, x, ids, w, num_experts=4)
    assert (info.value.row, info.value.rule) == (3, "non_finite_input")


def test_route_codes_agree_with_oracle_on_random_bad_routes():
    gen = torch.Generator().manual_seed(9)
    for _ in range(20):
        t, k, e = 10, int(torch.randint(1, 9, (1,), generator=gen)), 6
        ids = torch.randint(-3, 9, (t, k), generator=gen)
        w = torch.randn(t, k, generator=gen)
        w[torch.rand(t, k, generator=gen) < 0.2] = float("nan")
        codes = tp.route_codes(ids, w, e)
        firsts: dict[int, object] = {}
        for v in find_route_violations(ids, w, e):
            firsts.setdefault(v.row, v)
        for r in range(t):
            if r not in firsts:
                assert int(codes[r]) == 0
            else:
                v = firsts[r]
                assert int(codes[r]) == v.slot * 4 + mc.ROUTE_RULES.index(v.rule) + 1


# ---------------------------------------------------------------- planted bugs


def test_planted_bug_rceil_exponent_off_by_one_is_caught(monkeypatch):
    """ceil(log2(d)) taken as floor + 1 (wrong when d is a power of two) must fail."""
    monkeypatch.setattr(tp, "ceil_log2_bits", lambda d: tp.floor_log2_bits(d) + 1)
    gen = torch.Generator().manual_seed(10)
    fmt = StageFormat("mxfp8", "e4m3", "rceil")
    ws = _ws(fmt, c=4, k=2)
    x = make_hidden(gen, 4, 64)
    x[:, :32] = 1.0
    x[:, 3] = 448.0  # d = 448 / 448 = 1 = 2**0: e must be 0, the bug gives 1
    ids, w = make_routes(gen, 4, 2, 4)
    stage(ws, x, ids, w, num_experts=4)
    assert {"payload", "scales"} <= set(mismatches(ws, oracle_stage(fmt, x, ids, w, 4), 4))


def test_planted_bug_stale_rows_are_caught(monkeypatch):
    """Staging that forgets rows [T, C) must fail the oracle check after a shrink."""
    real = tp.stage_routes_into

    def broken(ids, weights, **kw):
        out_ids, out_scores = kw["out_ids"], kw["out_scores"]
        keep_i, keep_s = out_ids.clone(), out_scores.clone()
        real(ids, weights, **kw)
        out_ids[ids.shape[0]:] = keep_i[ids.shape[0]:]
        out_scores[ids.shape[0]:] = keep_s[ids.shape[0]:]

    gen = torch.Generator().manual_seed(11)
    ws = _ws(StageFormat("bf16"), c=8, k=2)
    ids, w = make_routes(gen, 8, 2, 4, mask_frac=0.0)
    stage(ws, make_hidden(gen, 8, 64), ids, w, num_experts=4)
    monkeypatch.setattr(tp, "stage_routes_into", broken)
    ids2, w2 = make_routes(gen, 2, 2, 4)
    x2 = make_hidden(gen, 2, 64)
    stage(ws, x2, ids2, w2, num_experts=4)
    assert "ids" in mismatches(ws, oracle_stage(ws.fmt, x2, ids2, w2, 8), 2)


def test_planted_bug_guard_write_is_caught():
    ws = StagingWorkspace.create(4, 2, 64, StageFormat("bf16"), guard_bytes=16)
    fill_guards(ws)
    assert guards_intact(ws)
    ws.buffer[ws.regions["ids"].offset - 1] = 0  # one byte before a region
    assert not guards_intact(ws)


# ---------------------------------------------------------------- compile cache


@pytest.mark.contract("s9.warmup-before-capture")
def test_compile_cache_compiles_once_reuses_across_h_and_refuses_during_capture():
    from megamoe.staging import compile_cache as cc

    cc.clear()
    built = []

    def build():
        built.append(1)
        return object()

    key = cc.CacheKey("route_stage", "bf16", 4096, 8, "int64", "float32", "cuda:0")
    first = cc.get_compiled(key, build, capturing=False)
    assert cc.get_compiled(key, build, capturing=True) is first
    other_h = key._replace(hidden_size=7168)
    assert cc.get_compiled(other_h, build, capturing=True) is first  # same code: no compile
    assert len(built) == 1
    with pytest.raises(cc.CompileDuringCaptureError, match="warmup"):
        cc.get_compiled(key._replace(top_k=4), build, capturing=True)
    assert len(built) == 1
    cc.clear()


def test_bad_id_and_score_are_written_only_for_bad_rows():
    """Like the kernels, the Torch path writes bad_id/bad_score only for rows it records as
    bad (the kernel-vs-Torch property test compares these regions bytewise)."""
    gen = torch.Generator().manual_seed(12)
    ws = _ws(StageFormat("bf16"), c=8, k=2)
    ids, w = make_routes(gen, 6, 2, 4, mask_frac=0.0)
    ids[4, 1] = 9  # out of range
    fill_guards(ws)
    with pytest.raises(RouteError):
        stage(ws, make_hidden(gen, 6, 64), ids, w, num_experts=4)
    pattern = torch.full((8,), 0xA5A5A5A5A5A5A5A5 - 2**64, dtype=torch.int64)
    expect = pattern.clone()
    expect[4] = 9
    assert torch.equal(ws.view("bad_id"), expect)
    assert torch.equal(ws.view("bad_score").view(torch.int64)[torch.arange(8) != 4],
                       pattern[:7])


def _stage_noncanonical_nans(score_dtype, check, monkeypatch):
    """Stage NaN scores with non-canonical bits; return (scores[:, 0], bad_score) bits."""
    nans = noncanonical_nans(score_dtype)
    t = nans.shape[0]
    ids = torch.tensor([[0, 1], [2, 3], [1, 0]], dtype=torch.int64)
    w = torch.stack([nans, torch.full_like(nans, 0.5)], dim=1)
    ws = _ws(StageFormat("bf16"), c=8, k=2, check=check, monkeypatch=monkeypatch)
    x = make_hidden(torch.Generator().manual_seed(5), t, 64)
    if check:
        with pytest.raises(RouteError):
            stage(ws, x, ids, w, num_experts=4)
    else:
        stage(ws, x, ids, w, num_experts=4)
    return (ws.scores[:t, 0].view(torch.int32).tolist(),
            ws.view("bad_score")[:t].view(torch.int64).tolist())


@pytest.mark.contract("s3.nan-score-canonical")
@pytest.mark.parametrize("score_dtype", SCORE_DTYPES)
@pytest.mark.parametrize("check", [True, False])
def test_torch_path_stages_nan_scores_as_the_canonical_nan(monkeypatch, score_dtype, check):
    """Staged NaN scores and the bad_score diagnostic hold the canonical quiet NaN whatever
    the caller's NaN bits (the kernels do the same: tests/single)."""
    scores, bad = _stage_noncanonical_nans(score_dtype, check, monkeypatch)
    assert scores == [0x7FC00000] * 3
    if check:
        assert bad == [0x7FF8000000000000] * 3


def test_planted_bug_nan_payload_passed_through_is_caught(monkeypatch):
    """A path that casts NaN scores without canonicalizing them must fail the check."""
    monkeypatch.setattr(tp, "canonical_nan", lambda v: v)
    scores, bad = _stage_noncanonical_nans(torch.float32, True, monkeypatch)
    assert bad != [0x7FF8000000000000] * 3
    scores, _ = _stage_noncanonical_nans(torch.float32, False, monkeypatch)
    assert scores != [0x7FC00000] * 3
