"""The Torch staging path (docs/contract.md s2-s4): an independent implementation of what
the fused kernels do, used for inputs the kernels do not cover and as their twin.

Everything here is plain tensor arithmetic with no host reads of tensor values, so the
path is also CUDA-graph capturable (the live count may come from a device tensor).
Each float step is one IEEE float32 operation, as docs/contract.md s4 prescribes.

Bad rows (a route value check failed, checks on): every staged score of the row is NaN
(the row marker that makes later stages produce NaN outputs) and every staged id of
the row is the caller's id where it is in ``[0, E)`` and ``0`` otherwise (so no later
stage indexes out of range). ``row_code``/``bad_id``/``bad_score``/``status`` record the
failure (see ``megamoe.workspace``).
"""

from __future__ import annotations

import torch

from megamoe.staging import constants as c

_BIG = 1 << 30


def _f32(v: float, device: torch.device) -> torch.Tensor:
    """float32(v) (RNE from the Python double) as a 0-d device tensor; graph-capturable."""
    return torch.full((), v, dtype=torch.float32, device=device)


def canonical_nan(v: torch.Tensor) -> torch.Tensor:
    """``v`` with every NaN replaced by the canonical quiet NaN (sign 0, quiet bit only).

    Staged scores and the ``bad_score`` diagnostic carry NaN bits that do not depend on
    the path: a cast keeps or drops NaN payload bits differently on CPU, in torch's CUDA
    casts and in the kernels' conversions, so both paths canonicalize.
    """
    return torch.where(v.isnan(), torch.full_like(v, float("nan")), v)


# ---------------------------------------------------------------- element casts


def _nan_bytes(payload: torch.Tensor, isnan: torch.Tensor) -> torch.Tensor:
    """Force the single NaN byte 0x7F wherever ``isnan``."""
    b = payload.view(torch.uint8)
    return torch.where(isnan, torch.full_like(b, c.FP8_NAN_BYTE), b).view(payload.dtype)


def sat_cast_fp8(v: torch.Tensor, elem: str) -> torch.Tensor:
    """float32 -> E4M3/E5M2: RNE, saturating finite values, NaN -> 0x7F."""
    fmax = c.MX_FMAX[elem]
    dt = torch.float8_e4m3fn if elem == "e4m3" else torch.float8_e5m2
    out = v.clamp(-fmax, fmax).to(dt)
    return _nan_bytes(out, torch.isnan(v))


_E2M1_THRESHOLDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def e2m1_codes(v: torch.Tensor) -> torch.Tensor:
    """float32 (already clamped to [-6, 6], finite) -> E2M1 codes (uint8), ties to even code;
    code 0 never carries a sign."""
    mag = v.abs()
    code = torch.zeros(v.shape, dtype=torch.int32, device=v.device)
    for i, t in enumerate(_E2M1_THRESHOLDS):
        up = (mag >= t) if (i + 1) % 2 == 0 else (mag > t)
        code += up.to(torch.int32)
    sign = (v < 0) & (code != 0)
    return (code | (sign.to(torch.int32) << 3)).to(torch.uint8)


# ---------------------------------------------------------------- exponents from bits


def _fields(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    bits = v.contiguous().view(torch.int32)
    return (bits >> 23) & 0xFF, bits & 0x7FFFFF


def _floor_log2_int(m: torch.Tensor) -> torch.Tensor:
    """floor(log2(m)) for int32 m in [1, 2**23], exact (m is exact in float32)."""
    e, _ = _fields(m.to(torch.float32))
    return e - 127


def ceil_log2_bits(d: torch.Tensor) -> torch.Tensor:
    """ceil(log2(d)) for float32 d > 0 (normal or subnormal), from its bits; -200 for d == 0."""
    e, m = _fields(d)
    normal = e - 127 + (m != 0).to(torch.int32)
    mm1 = (m - 1).clamp(min=1)
    sub_ceil = torch.where(m > 1, _floor_log2_int(mm1) + 1, torch.zeros_like(m)) - 149
    out = torch.where(e > 0, normal, sub_ceil)
    return torch.where((e == 0) & (m == 0), torch.full_like(out, -200), out)


def floor_log2_bits(a: torch.Tensor) -> torch.Tensor:
    """floor(log2(a)) for float32 a > 0, from its bits; -200 for a == 0."""
    e, m = _fields(a)
    sub = _floor_log2_int(m.clamp(min=1)) - 149
    out = torch.where(e > 0, e - 127, sub)
    return torch.where((e == 0) & (m == 0), torch.full_like(out, -200), out)


def pow2_f32(k: torch.Tensor) -> torch.Tensor:
    """Exact float32 2**k for int32 k in [-127, 127] (2**-127 is subnormal)."""
    normal = ((k.clamp(-126, 127) + 127) << 23).view(torch.float32)
    sub = torch.full_like(k, 1 << 22).view(torch.float32)
    return torch.where(k >= -126, normal, sub)


# ---------------------------------------------------------------- quantizers


def quantize_mxfp8(x: torch.Tensor, elem: str, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 [R, H] -> (payload fp8 [R, H], E8M0 bytes uint8 [R, H/32]) (docs/contract.md s4)."""
    r, h = x.shape
    xf = x.to(torch.float32).reshape(r, h // c.MX_BLOCK, c.MX_BLOCK)
    bad = ~torch.isfinite(xf).all(dim=-1)
    amax = torch.where(bad, torch.zeros((), dtype=torch.float32, device=x.device),
                       xf.abs().amax(dim=-1))
    if mode == "rceil":
        d = amax / _f32(c.MX_FMAX[elem], x.device)
        e = ceil_log2_bits(d)
    else:
        e = floor_log2_bits(amax) - c.MX_EMAX_ELEM[elem]
    e = e.clamp(c.E8M0_MIN_EXP, c.E8M0_MAX_EXP)
    zero = amax == 0
    byte = torch.where(zero, torch.zeros_like(e), e + c.E8M0_BIAS)
    byte = torch.where(bad, torch.full_like(e, c.E8M0_NAN), byte).to(torch.uint8)
    scaled = xf * pow2_f32(-e).unsqueeze(-1)
    scaled = torch.where(bad.unsqueeze(-1), torch.full_like(scaled, float("nan")), scaled)
    payload = sat_cast_fp8(scaled, elem).reshape(r, h)
    return payload, byte


def quantize_nvfp4(x: torch.Tensor, global_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 [R, H] -> (packed uint8 [R, H/2], E4M3 scales [R, H/16]) (docs/contract.md s4)."""
    r, h = x.shape
    dev = x.device
    xf = x.to(torch.float32).reshape(r, h // c.NVFP4_BLOCK, c.NVFP4_BLOCK)
    bad = ~torch.isfinite(xf).all(dim=-1)
    amax = torch.where(bad, torch.zeros((), dtype=torch.float32, device=dev),
                       xf.abs().amax(dim=-1))
    g = _f32(global_scale, dev)
    s = ((amax / _f32(c.E2M1_MAX, dev)) / g).clamp(c.E4M3_TINY, c.E4M3_MAX)
    s8 = s.to(torch.float8_e4m3fn)
    rcp = (_f32(1.0, dev) / g) / s8.to(torch.float32)
    v = (xf * rcp.unsqueeze(-1)).clamp(-c.E2M1_MAX, c.E2M1_MAX)
    codes = e2m1_codes(torch.where(bad.unsqueeze(-1), torch.zeros_like(v), v))
    codes = codes.reshape(r, h)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    sbytes = torch.where(bad, torch.full_like(s8.view(torch.uint8), c.FP8_NAN_BYTE),
                         s8.view(torch.uint8))
    return packed, sbytes.view(torch.float8_e4m3fn)


def quantize_safe_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """bf16 [R, H] -> (payload e4m3 [R, H], d float32 [R], non_finite bool [R]) (docs/contract.md s4).

    An all-zero row gets ``d = 1e-30`` and payload ``cast(x / d)`` (zeros keep their sign).
    A row holding NaN/Inf gets ``d = NaN`` and an all-NaN payload (0x7F) and is reported in
    ``non_finite``.
    """
    dev = x.device
    xf = x.to(torch.float32)
    bad = ~torch.isfinite(xf).all(dim=-1)
    amax = torch.where(bad, torch.zeros((), dtype=torch.float32, device=dev),
                       xf.abs().amax(dim=-1))
    fmax = _f32(c.SAFE_FP8_FMAX, dev)
    tiny = _f32(c.SAFE_FP8_TINY, dev)
    safe_min = _f32(c.SAFE_FP8_SAFE_MIN, dev)
    zero_d = _f32(c.SAFE_FP8_ZERO_SCALE, dev)
    inv = _f32(1.0 / 448.0, dev)
    flt_max = _f32(c.FLT_MAX, dev)
    is_zero = amax == 0
    is_tiny = (amax > 0) & (amax < tiny)
    q = torch.minimum(fmax / torch.maximum(amax, safe_min), flt_max)
    d_tiny = _f32(1.0, dev) / q
    d_norm = torch.maximum(amax * inv, zero_d)
    d = torch.where(is_tiny, d_tiny, d_norm)
    d = torch.where(is_zero, zero_d, d)
    v = torch.where(is_tiny.unsqueeze(-1), xf * q.unsqueeze(-1), xf / d.unsqueeze(-1))
    v = torch.where(bad.unsqueeze(-1), torch.full_like(v, float("nan")), v)
    d = torch.where(bad, torch.full_like(d, float("nan")), d)
    return sat_cast_fp8(v, "e4m3"), d, bad


# ---------------------------------------------------------------- routes


def route_codes(ids: torch.Tensor, weights: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Per-row first violation code (``constants.RULES_PER_SLOT``), 0 for a good row."""
    ids64 = ids.to(torch.int64)
    active = ids64 != c.MASKED_ID
    in_range = (ids64 >= 0) & (ids64 < num_experts)
    valid = active & in_range
    k = ids.shape[1]
    same = (ids64.unsqueeze(2) == ids64.unsqueeze(1)) & valid.unsqueeze(2) & valid.unsqueeze(1)
    same &= ~torch.eye(k, dtype=torch.bool, device=ids.device)
    rules = torch.stack(
        [same.any(dim=2), active & ~in_range, active & ~torch.isfinite(weights)], dim=-1
    )  # [R, K, 3] in ROUTE_RULES order
    slot = torch.arange(k, device=ids.device, dtype=torch.int64).view(1, k, 1)
    j = torch.arange(3, device=ids.device, dtype=torch.int64).view(1, 1, 3)
    code = torch.where(rules, slot * c.RULES_PER_SLOT + j + 1, torch.full_like(slot, _BIG))
    first = code.reshape(ids.shape[0], k * 3).amin(dim=1)
    return torch.where(first == _BIG, torch.zeros_like(first), first).to(torch.int32)


def live_rows(rows: int, live: int | torch.Tensor, device: torch.device) -> torch.Tensor:
    """Bool [rows]: row < clamp(live, 0, rows) (live from the host or a device tensor)."""
    r = torch.arange(rows, device=device, dtype=torch.int32)
    if isinstance(live, torch.Tensor):
        return r < live.clamp(0, rows)
    return r < max(0, min(live, rows))


def stage_routes_into(
    ids: torch.Tensor,
    weights: torch.Tensor,
    *,
    num_experts: int,
    live: int | torch.Tensor,
    check: bool,
    reset: bool,
    out_ids: torch.Tensor,
    out_scores: torch.Tensor,
    row_code: torch.Tensor,
    bad_id: torch.Tensor,
    bad_score: torch.Tensor,
    status: torch.Tensor,
    extra_code: torch.Tensor | None = None,
) -> None:
    """Stage routes into the workspace views (docs/contract.md s2-s3); graph-capturable.

    ``extra_code`` (int32 [R], optional) adds row failures found elsewhere (safe-FP8
    non-finite input rows), merged only when ``check`` and only for rows with an active
    slot (docs/contract.md s4.safe-fp8-inactive-row).
    """
    r = ids.shape[0]
    dev = out_ids.device
    ids64 = ids.to(torch.int64)
    masked = ids64 == c.MASKED_ID
    lr = live_rows(r, live, dev).unsqueeze(1)
    sid = torch.where(lr, ids64.to(torch.int32), torch.full_like(ids64, -1, dtype=torch.int32))
    sc = torch.where(lr & ~masked, canonical_nan(weights.to(torch.float32)),
                     torch.zeros((), dtype=torch.float32, device=dev))
    if check:
        code = route_codes(ids, weights, num_experts)
        if extra_code is not None:
            routed = (~masked).any(dim=1)
            code = torch.where(code != 0, code, torch.where(routed, extra_code, 0))
        code = torch.where(lr.squeeze(1), code, torch.zeros_like(code))
        bad = (code != 0).unsqueeze(1)
        in_range = (ids64 >= 0) & (ids64 < num_experts)
        sid = torch.where(bad, torch.where(in_range, sid, torch.zeros_like(sid)), sid)
        sc = torch.where(bad, torch.full_like(sc, float("nan")), sc)
        # the slot at fault; slot 0 for a row failure that names no slot (non-finite input)
        slot_ok = (code != 0) & (code < c.ROW_CODE_NON_FINITE_INPUT)
        slot = torch.where(slot_ok, (code.to(torch.int64) - 1) // c.RULES_PER_SLOT, 0)
        slot = slot.unsqueeze(1)
        bid = ids64.gather(1, slot).squeeze(1)
        bsc = canonical_nan(weights.to(torch.float64).gather(1, slot).squeeze(1))
        old = row_code[:r]
        keep = torch.zeros_like(code, dtype=torch.bool) if reset else old != 0
        row_code[:r] = torch.where(keep, old, code)
        # bad_id / bad_score are written only for newly recorded bad rows (as the kernels do)
        record = ~keep & (code != 0)
        bad_id[:r] = torch.where(record, bid, bad_id[:r])
        bad_score[:r] = torch.where(record, bsc, bad_score[:r])
        if reset:
            row_code[r:] = 0
        any_bad = (code != 0).any().to(torch.int32).reshape(1)
        status.copy_(any_bad if reset else status | any_bad)
    elif reset:
        row_code.zero_()
    out_ids[:r] = sid
    out_scores[:r] = sc
    out_ids[r:] = -1
    out_scores[r:] = 0.0
