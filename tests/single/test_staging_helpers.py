"""Shared helpers of the staging tests (host, property and single tiers).

Inputs (routes with masks, NaN/Inf behind masked slots, strided/offset views), the
oracle's expected bytes for a staging call (docs/contract.md s3-s4) and the checks:
workspace regions vs oracle, guard bytes outside the regions, caller tensors unchanged.
The expected bytes come only from ``oracle/``, never from ``megamoe``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from megamoe.workspace import StageFormat
from oracle import formats as of
from oracle.routing import stage_routes

GUARD_BYTE = 0xA5
GUARD_BYTES = 64
NON_FINITE = (float("nan"), float("inf"), float("-inf"))
STAGE_FORMATS = (
    StageFormat("bf16"),
    StageFormat("mxfp8", "e4m3", "rceil"),
    StageFormat("mxfp8", "e4m3", "floor"),
    StageFormat("mxfp8", "e5m2", "rceil"),
    StageFormat("mxfp8", "e5m2", "floor"),
    StageFormat("mxfp8_prequant", "e4m3"),
    StageFormat("mxfp8_prequant", "e5m2"),
    StageFormat("nvfp4_prequant"),
    StageFormat("nvfp4"),
    StageFormat("safe_fp8"),
)
"""Every staging format the tests cover: each MXFP8 element with each scale mode."""


def bytes_of(t: torch.Tensor) -> torch.Tensor:
    """The bytes of ``t`` (a contiguous copy viewed as uint8)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(bytes_of(a).cpu(), bytes_of(b).cpu())


def layout(t: torch.Tensor, kind: str) -> torch.Tensor:
    """A view of ``t`` ([T, K]) with the same values in another memory layout:
    ``contiguous``, ``offset`` (storage offset), ``strided`` (every other column of a wider
    buffer), ``transposed`` (column-major)."""
    if kind == "contiguous":
        return t.contiguous()
    if kind == "offset":
        buf = torch.empty(t.numel() + 3, dtype=t.dtype, device=t.device)
        v = buf[3:].view(t.shape)
        v.copy_(t)
        return v
    if kind == "strided":
        buf = torch.zeros(t.shape[0], 2 * t.shape[1] + 1, dtype=t.dtype, device=t.device)
        v = buf[:, 1::2]
        v.copy_(t)
        return v
    if kind == "transposed":
        return t.t().contiguous().t()
    raise ValueError(kind)


LAYOUTS = ("contiguous", "offset", "strided", "transposed")


def make_routes(
    gen: torch.Generator,
    t: int,
    k: int,
    num_experts: int,
    *,
    id_dtype: torch.dtype = torch.int64,
    score_dtype: torch.dtype = torch.float32,
    mask_frac: float = 0.3,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Valid routes: distinct ids per row (or -1), finite active scores, masked slots
    carrying NaN/+Inf/-Inf/anything."""
    e = max(num_experts, k)
    ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)]) if t else (
        torch.empty(0, k, dtype=torch.int64)
    )
    ids = ids.clamp(max=num_experts - 1) if num_experts < k else ids
    if num_experts < k:  # not enough experts for k distinct ids: mask the repeats
        for r in range(t):
            seen: set[int] = set()
            for j in range(k):
                v = int(ids[r, j])
                if v in seen:
                    ids[r, j] = -1
                seen.add(v)
    masked = torch.rand(t, k, generator=gen) < mask_frac
    ids = torch.where(masked, torch.full_like(ids, -1), ids)
    scores = torch.randn(t, k, generator=gen, dtype=torch.float64)
    junk = torch.tensor((*NON_FINITE, 1e300, -0.0, 7.0), dtype=torch.float64)
    pick = torch.randint(0, junk.numel(), (t, k), generator=gen)
    scores = torch.where(ids == -1, junk[pick], scores)
    return ids.to(id_dtype).to(device), scores.to(score_dtype).to(device)


def make_hidden(gen: torch.Generator, t: int, h: int, *, regime: str = "normal",
                device="cpu") -> torch.Tensor:
    """bf16 [T, H]: ``normal`` (mixed exponents per row), ``tiny`` (1e-36-scale values),
    ``boundary`` (powers of two and format maxima planted), ``special`` (NaN / +-Inf /
    all-zero / subnormal / bf16-max blocks planted; not for safe FP8, whose rows must be
    finite)."""
    x = torch.randn(t, h, generator=gen, dtype=torch.float32)
    if regime == "tiny":
        x = x * 1e-36
    elif regime == "boundary":
        x = x * torch.exp2(torch.randint(-20, 20, (t, 1), generator=gen).float())
        if t and h >= 32:
            x[:, 0] = 448.0
            x[:, 1] = -57344.0 * 2**-4
            x[:, 2] = 6.0
            x[:, 31] = 2.0**-126
    else:
        x = x * torch.exp2(torch.randint(-30, 30, (t, 1), generator=gen).float())
    if regime == "special" and h >= 32:
        blocks = h // 16
        pick = torch.randint(0, 7, (t, blocks), generator=gen)
        xb = x.view(t, blocks, 16)
        xb[pick == 0, 3] = float("nan")
        xb[pick == 1, 5] = float("inf")
        xb[pick == 2, 0] = float("-inf")
        xb[pick == 3] = 0.0
        xb[pick == 4] = xb[pick == 4] * 2.0**-133  # bf16 subnormals
        xb[pick == 5, 7] = 3.3895313892515355e38  # largest bf16
    return x.to(torch.bfloat16).to(device)


def caller_hidden(fmt: StageFormat, x: torch.Tensor, device="cpu"  # type: ignore[no-untyped-def]
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(hidden, hidden_scales) a caller of ``fmt`` passes for the bf16 activations ``x``: ``x``
    itself, or the oracle's prequantized MXFP8 / NVFP4 pair (global scale 1); on ``device``."""
    if fmt.kind == "mxfp8_prequant":
        p, s = of.quantize_mxfp8(x, elem=fmt.elem)
        return p.to(device), s.to(device)
    if fmt.kind == "nvfp4_prequant":
        p, s = of.quantize_nvfp4(x, 1.0)
        return p.to(device), s.to(device)
    return x.to(device), None


def make_stage_inputs(gen: torch.Generator, fmt: StageFormat, t: int, h: int, *,  # type: ignore[no-untyped-def]
                      regime: str = "normal", device="cpu"
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(hidden, hidden_scales) for ``fmt`` from ``make_hidden(gen, t, h, regime=regime)``
    (``caller_hidden``), on ``device``."""
    return caller_hidden(fmt, make_hidden(gen, t, h, regime=regime), device)


@dataclass(frozen=True)
class Expected:
    """The oracle's bytes for one staging call: full ids/scores [C, K]; payload/scales rows
    [0, T) (rows [T, C) of the activation regions are unspecified, docs/contract.md s3)."""

    ids: torch.Tensor
    scores: torch.Tensor
    payload: torch.Tensor
    scales: torch.Tensor | None


def oracle_stage(fmt, hidden, ids, scores, capacity, *, hidden_scales=None,
                 global_scale=1.0) -> Expected:
    """What a staging call must write, from the oracle alone (valid routes)."""
    cpu = torch.device("cpu")
    sid, ssc = stage_routes(ids.to(cpu), scores.to(cpu), capacity)
    h = hidden.to(cpu)
    kind = fmt.kind
    scales = None
    if kind == "bf16":
        payload = h
    elif kind == "mxfp8":
        payload, s = of.quantize_mxfp8(h, elem=fmt.elem, mode=fmt.mode)
        scales = of.pad_scale_columns(s)
    elif kind == "nvfp4":
        payload, scales = of.quantize_nvfp4(h, global_scale)
    elif kind == "safe_fp8":
        payload, d = of.safe_fp8_quantize(h)
        scales = of.safe_fp8_scale_wire(d)
    elif kind == "mxfp8_prequant":
        payload = h
        n = h.shape[1] // 32
        scales = of.pad_scale_columns(hidden_scales.to(cpu).view(torch.uint8)[:, :n])
    else:  # nvfp4_prequant
        payload = h.view(torch.uint8)
        scales = hidden_scales.to(cpu)
    return Expected(sid, ssc, payload, scales)


def mismatches(ws, exp: Expected, t: int) -> list[str]:
    """Names of the workspace regions whose bytes differ from ``exp`` (empty = all equal)."""
    bad = []
    if not same_bytes(ws.ids.cpu(), exp.ids):
        bad.append("ids")
    if not same_bytes(ws.scores.cpu(), exp.scores):
        bad.append("scores")
    if not same_bytes(ws.payload[:t].cpu(), exp.payload):
        bad.append("payload")
    if exp.scales is not None and not same_bytes(ws.scales[:t].cpu(), exp.scales):
        bad.append("scales")
    return bad


def fill_guards(ws) -> None:
    """Fill the whole workspace buffer (regions and guards) with ``GUARD_BYTE``."""
    ws.buffer.fill_(GUARD_BYTE)


def guards_intact(ws) -> bool:
    """True when every byte outside the regions still holds ``GUARD_BYTE``."""
    outside = ~ws.region_mask()
    return bool((ws.buffer[outside] == GUARD_BYTE).all())


def snapshot(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """Byte copies of the caller tensors' whole storage (to prove nothing was written)."""
    out = []
    for t in tensors:
        if t is None:
            continue
        st = t.untyped_storage()
        out.append(torch.tensor([], dtype=torch.uint8, device=t.device).set_(st).clone())
    return out


def unchanged(before: list[torch.Tensor], *tensors: torch.Tensor) -> bool:
    after = snapshot(*tensors)
    return len(before) == len(after) and all(
        torch.equal(a, b) for a, b in zip(before, after, strict=True)
    )


def noncanonical_nans(dtype: torch.dtype) -> torch.Tensor:
    """NaNs with non-canonical bits (sign set, payload bits) in ``dtype``."""
    bits = {
        torch.float16: (torch.int16, [0xFE01 - 2**16, 0x7C01, 0x7E55]),
        torch.bfloat16: (torch.int16, [0xFFC1 - 2**16, 0x7F81, 0x7FA5]),
        torch.float32: (torch.int32, [0xFFC00001 - 2**32, 0x7F800001, 0x7FA5A5A5]),
        torch.float64: (torch.int64, [-1, 0x7FF0000000000001, 0x7FF8DEADBEEF0000]),
    }[dtype]
    return torch.tensor(bits[1], dtype=bits[0]).view(dtype)


F32_MAX = float(torch.finfo(torch.float32).max)
BOUNDARY_SCORES: dict[torch.dtype, tuple[float, ...]] = {
    torch.float16: (65504.0, -65504.0, float("inf"), float("nan")),
    torch.bfloat16: (float(torch.finfo(torch.bfloat16).max), float("-inf"), float("nan")),
    torch.float32: (F32_MAX, -F32_MAX, 1e-45, float("inf"), float("nan")),
    # finite in the caller's float64 but not in float32 (a valid route: it stages as +-inf),
    # below float32's smallest subnormal (stages as a zero), and the first non-finite
    torch.float64: (F32_MAX, 3.5e38, -1.7e308, 1e-50, float("inf"), float("nan")),
}
"""Per score dtype, active-slot scores at the edges of finiteness (docs/contract.md s2: value
checks run on the caller's dtype, before any narrowing)."""
BOUNDARY_IDS = (2**31 - 1, 2**31, 2**32 - 1, -(2**31), 2**32, -(2**32) - 1)
"""int64 ids at the edges of int32: each out of range for a small E, never wrapped."""


def boundary_cases() -> list[tuple[str, torch.dtype, torch.dtype, object]]:
    """``(case id, id dtype, score dtype, planted value)`` for every boundary."""
    cases = [(f"score-{str(dt).removeprefix('torch.')}-{v!r}", torch.int64, dt, v)
             for dt, vals in BOUNDARY_SCORES.items() for v in vals]
    cases += [(f"id-{i}", torch.int64, torch.float32, i) for i in BOUNDARY_IDS]
    return cases


def boundary_routes(id_dtype: torch.dtype, score_dtype: torch.dtype, value: object,
                    t: int = 6, k: int = 3, e: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Valid routes with ``value`` planted at row 2, slot 1 (an active slot): an id when
    ``value`` is an int, else a score."""
    gen = torch.Generator().manual_seed(11)
    ids, w = make_routes(gen, t, k, e, id_dtype=torch.int64, score_dtype=torch.float64,
                         mask_frac=0.0)
    if isinstance(value, int):
        ids[2, 1] = value
    else:
        w[2, 1] = value
    return ids.to(id_dtype), w.to(score_dtype)


def judge_boundary(stage_call, ws, ids: torch.Tensor, w: torch.Tensor, num_experts: int
                   ) -> list[str]:
    """Stage the boundary routes through ``stage_call(ws, ids, w)`` and compare with the
    oracle: the same first violation (row, slot, caller's id, rule) as a ``RouteError``, or,
    for valid routes, the oracle's staged ids and score bits. Returns the differences."""
    from megamoe import RouteError
    from oracle.routing import find_route_violations

    violations = find_route_violations(ids.cpu(), w.cpu(), num_experts)
    try:
        stage_call(ws, ids, w)
        raised = None
    except RouteError as err:
        raised = err
    if violations:
        v = violations[0]
        if raised is None:
            return [f"no RouteError; the oracle finds {v}"]
        got = (raised.row, raised.slot, raised.expert_id, raised.rule)
        want = (v.row, v.slot, v.expert_id, v.rule)
        return [] if got == want else [f"RouteError {got}, the oracle's first violation {want}"]
    if raised is not None:
        return [f"RouteError {raised} for routes the oracle accepts"]
    exp_ids, exp_scores = stage_routes(ids.cpu(), w.cpu(), ws.capacity)
    out = []
    if not same_bytes(ws.ids.cpu(), exp_ids):
        out.append("staged ids differ from the oracle's")
    if not same_bytes(ws.scores.cpu(), exp_scores):
        out.append(f"staged scores differ from the oracle's: {ws.scores[2].cpu().tolist()} vs "
                   f"{exp_scores[2].tolist()}")
    return out
