"""Host API of the grouped expert GEMM (docs/contract.md s5, s8, s9).

``grouped_gemm(a, b, seg_start, counts, out, mode=..., row_scale=None, clamp=None)`` computes,
for every expert ``e`` and every live row ``r`` of it (``seg_start[e] <= r < seg_start[e] +
counts[e]``):

- ``mode="swiglu"`` (FC1, s5 steps 1-4): ``h = a[r] @ b[e].T`` in float32 with ``b[e]`` the
  *interleaved* W13 (``interleave_gate_up``: row ``2j`` = gate_j, row ``2j + 1`` = up_j);
  optional clamp ``c``: ``gate = min(gate, c)``, ``up = clamp(up, -c, c)``;
  ``act = up * gate * sigmoid(gate)``; optional ``act *= row_scale[r]``; ``out[r] = bf16(act)``
  (``out`` is ``[M_cap, N / 2]``);
- ``mode="plain"`` (FC2, s5 steps 5-7): ``h = a[r] @ b[e].T``; optional ``h *= row_scale[r]``;
  ``out[r] = bf16(h)`` (``out`` is ``[M_cap, N]``).

Rows of ``out`` outside the live segments are never written. ``seg_start`` (int32 ``[E + 1]``)
and ``counts`` (int32 ``[E]``) live on the device and are read there: no host sync, so the
launch is CUDA-graph capturable and a replay with new counts / starts works. Every
``seg_start[e]`` must be a multiple of ``TILE_M``, nondecreasing, with ``seg_start[e] +
counts[e] <= seg_start[e + 1]`` and ``seg_start[E] <= M_cap`` (``padded_segment_starts`` makes
them; ``capacity_rows`` gives the ``M_cap`` that always suffices). The kernel never writes
outside ``[seg_start[e], min(seg_start[e] + counts[e], seg_start[e + 1], M_cap))``.

Metadata is checked on the host (``ConfigError`` naming argument, expected, actual); values are
not (they are on the device). ``K`` must be a multiple of ``TILE_K`` (64) and ``N`` of the
variant's column tile (``default_config(N)``: 256, 192, 128 or 64, the widest that divides N,
warp-specialized persistent kernels for the first three). Kernels are compiled once per
(mode, N, K, variant, device) and cached;
a miss while a CUDA graph is being captured raises ``CompileDuringCaptureError`` (call
``warmup`` first, docs/contract.md s9). ``grouped_gemm_torch`` is the PyTorch path (reads the
counts on the host: it syncs and is not capturable): the reference of the tests and the
fallback where the kernel cannot run (non-CUDA tensors, GPUs other than Hopper).
"""

from __future__ import annotations

import math

import torch

from megamoe.compile_once import CompileDuringCaptureError
from megamoe.compile_once import capturing as _capturing
from megamoe.errors import ConfigError
from megamoe.experts.grouped_gemm_kernel import (
    MAX_EXPERTS,
    MODES,
    TILE_K,
    TILE_M,
    TILE_N,
    KernelConfig,
    default_config,
)
from megamoe.experts.mx_gemv_kernel import GEMV_WEIGHTS
from megamoe.experts.mxfp4 import Mxfp4Matrix
from megamoe.experts.mxfp8 import Mxfp8Matrix
from megamoe.experts.nvfp4 import Nvfp4Matrix
from megamoe.experts.split_k import SplitKWorkspace, arrival_slots, effective_splits
from megamoe.staging.constants import MX_BLOCK, NVFP4_BLOCK
from megamoe.validation import I32_LIMIT

PATH_KERNEL = "kernel"
PATH_TORCH = "torch"
_HOPPER = (9, 0)

_CACHE: dict[tuple[object, ...], object] = {}
OUT_DTYPES = (torch.bfloat16, torch.float32)
PRE_LANES = 4
"""Columns of ``pre_scale``: the safe-FP8 scale wire ``[rows, 4]`` (docs/contract.md s4)."""
COMPILE_COUNT = {"n": 0}

__all__ = [
    "PATH_KERNEL",
    "PATH_TORCH",
    "CompileDuringCaptureError",
    "Mxfp4Matrix",
    "Mxfp8Matrix",
    "Nvfp4Matrix",
    "SplitKWorkspace",
    "capacity_rows",
    "grouped_gemm",
    "grouped_gemm_torch",
    "interleave_gate_up",
    "kernel_supported",
    "padded_segment_starts",
    "warmup",
]


def interleave_gate_up(w13: torch.Tensor) -> torch.Tensor:
    """``[E, 2I, H]`` canonical W13 (gate rows, then up rows) -> ``[E, 2I, H]`` with row
    ``2j`` = gate_j and row ``2j + 1`` = up_j (the ``swiglu`` mode's layout). New tensor."""
    if w13.dim() != 3 or w13.shape[1] % 2:
        raise ConfigError("w13", "[E, 2I, H] with an even second dim", tuple(w13.shape))
    e, two_i, h = w13.shape
    i = two_i // 2
    return torch.stack((w13[:, :i], w13[:, i:]), dim=2).reshape(e, two_i, h).contiguous()


def padded_segment_starts(counts: torch.Tensor, tile_m: int = TILE_M) -> torch.Tensor:
    """int32 ``[E + 1]`` exclusive prefix of ``counts`` rounded up to ``tile_m`` per expert.

    Device ops only (no sync): usable under CUDA-graph capture.
    """
    if counts.dim() != 1:
        raise ConfigError("counts", "1-D [E]", tuple(counts.shape))
    c = counts.to(torch.int64).clamp_min(0)
    padded = (c + (tile_m - 1)) // tile_m * tile_m
    out = torch.zeros(counts.numel() + 1, dtype=torch.int32, device=counts.device)
    out[1:] = torch.cumsum(padded, 0).to(torch.int32)
    return out


def capacity_rows(total_rows: int, num_experts: int, tile_m: int = TILE_M) -> int:
    """An ``M_cap`` that holds any split of ``total_rows`` over ``num_experts`` padded segments:
    at most ``min(E, total_rows)`` experts have rows, and each pads fewer than ``tile_m``
    (an expert without rows pads none). Kept tight because the MX kernels launch one CTA
    per tile of ``M_cap`` (dead ones exit at once, but each launch costs: about 0.64 ns per
    CTA on the H200, 45 us of a one-row DeepSeek FC2 with ``E * 127`` padding rows;
    docs/perf.md, "Session 19")."""
    need = total_rows + min(num_experts, total_rows) * (tile_m - 1)
    return max(tile_m, -(-need // tile_m) * tile_m)


def _out_cols(mode: str, n: int) -> int:
    return n // 2 if mode == "swiglu" else n


_U8 = (torch.uint8,)
_BLOCK_SCALED = {
    Mxfp4Matrix: ("mxfp4", "codes", _U8, 2, MX_BLOCK, _U8),
    Mxfp8Matrix: ("mxfp8", "payload", (torch.float8_e4m3fn, torch.uint8), 1, MX_BLOCK, _U8),
    Nvfp4Matrix: ("nvfp4", "codes", _U8, 2, NVFP4_BLOCK, (torch.float8_e4m3fn, torch.uint8)),
}
"""Block-scaled weight kinds: (name, payload field, payload dtypes, elements per payload
byte, elements per scale, scale dtypes)."""


def _check_b(b: object, k: int) -> tuple[int, int, str]:
    """``b`` metadata: bf16 ``[E, N, K]``, or an ``Mxfp4Matrix`` / ``Mxfp8Matrix`` /
    ``Nvfp4Matrix`` (contiguous 3-D payload ``[E, N, K / elements per byte]`` and scales
    ``[E, N, K / block]`` on one device); returns (E, N, weights)."""
    kind = _BLOCK_SCALED.get(type(b))
    if kind is not None:
        weights, field, payload_dtypes, per_byte, block, scale_dtypes = kind
        payload, scales = getattr(b, field), b.scales  # type: ignore[attr-defined]
        for name, t, dts in ((f"b.{field}", payload, payload_dtypes),
                             ("b.scales", scales, scale_dtypes)):
            if not isinstance(t, torch.Tensor):
                raise ConfigError(name, "a torch.Tensor", type(t).__name__)
            if t.dtype not in dts:
                raise ConfigError(f"{name}.dtype", " or ".join(map(str, dts)), t.dtype)
            if t.dim() != 3 or not t.is_contiguous():
                raise ConfigError(name, "contiguous 3-D", f"{tuple(t.shape)} {t.stride()}")
        e, n, kp = payload.shape
        if kp * per_byte != k:
            raise ConfigError(f"b.{field}.shape[2]",
                              f"K = {k}" if per_byte == 1 else f"K / {per_byte} = {k // per_byte}",
                              kp)
        if tuple(scales.shape) != (e, n, k // block):
            raise ConfigError("b.scales.shape", (e, n, k // block), tuple(scales.shape))
        if scales.device != payload.device:
            raise ConfigError("b.scales.device", str(payload.device), str(scales.device))
        return int(e), int(n), weights
    if not isinstance(b, torch.Tensor):
        raise ConfigError("b", "a torch.Tensor or a block-scaled weight matrix", type(b).__name__)
    if b.dtype != torch.bfloat16:
        raise ConfigError("b.dtype", torch.bfloat16, b.dtype)
    if b.dim() != 3:
        raise ConfigError("b", "3-D [E, N, K]", tuple(b.shape))
    if not b.is_contiguous():
        raise ConfigError("b", "contiguous", f"strides {b.stride()}")
    e, n, kb = b.shape
    if kb != k:
        raise ConfigError("b.shape[2]", f"K = a.shape[1] = {k}", kb)
    return int(e), int(n), "bf16"


def _check(a, b, seg_start, counts, out, mode, row_scale, clamp,
           pre_scale=None) -> tuple[int, int, int, int]:
    """Metadata checks (docs/contract.md s2 style); returns (M_cap, E, N, K)."""
    if mode not in MODES:
        raise ConfigError("mode", f"one of {MODES}", repr(mode))
    for name, t in (("a", a), ("seg_start", seg_start), ("counts", counts), ("out", out)):
        if not isinstance(t, torch.Tensor):
            raise ConfigError(name, "a torch.Tensor", type(t).__name__)
    if a.dtype != torch.bfloat16:
        raise ConfigError("a.dtype", torch.bfloat16, a.dtype)
    if a.dim() != 2:
        raise ConfigError("a", "2-D [M_cap, K]", tuple(a.shape))
    if not a.is_contiguous():
        raise ConfigError("a", "contiguous", f"strides {a.stride()}")
    m_cap, k = a.shape
    e, n, _ = _check_b(b, k)
    if k == 0 or k % TILE_K:
        raise ConfigError("K (a.shape[1])", f"a positive multiple of TILE_K={TILE_K}", k)
    if n == 0 or n % TILE_N:
        raise ConfigError("N (b.shape[1])", f"a positive multiple of TILE_N={TILE_N}", n)
    if not 1 <= e <= MAX_EXPERTS:
        raise ConfigError("E (b.shape[0])", f"1 <= E <= {MAX_EXPERTS}", e)
    if seg_start.dtype != torch.int32 or tuple(seg_start.shape) != (e + 1,):
        raise ConfigError("seg_start", f"int32 [{e + 1}]",
                          f"{seg_start.dtype} {tuple(seg_start.shape)}")
    if counts.dtype != torch.int32 or tuple(counts.shape) != (e,):
        raise ConfigError("counts", f"int32 [{e}]", f"{counts.dtype} {tuple(counts.shape)}")
    if not (seg_start.is_contiguous() and counts.is_contiguous()):
        raise ConfigError("seg_start/counts", "contiguous", "non-contiguous")
    want = (m_cap, _out_cols(mode, n))
    if out.dtype not in OUT_DTYPES or tuple(out.shape) != want:
        raise ConfigError("out", f"bfloat16 or float32 {want}",
                          f"{out.dtype} {tuple(out.shape)}")
    if not out.is_contiguous():
        raise ConfigError("out", "contiguous", f"strides {out.stride()}")
    if row_scale is not None and (
        not isinstance(row_scale, torch.Tensor) or row_scale.dtype != torch.float32
        or tuple(row_scale.shape) != (m_cap,) or not row_scale.is_contiguous()
    ):
        got = (f"{row_scale.dtype} {tuple(row_scale.shape)}"
               if isinstance(row_scale, torch.Tensor) else type(row_scale).__name__)
        raise ConfigError("row_scale", f"None or contiguous float32 [{m_cap}]", got)
    if pre_scale is not None and (
        not isinstance(pre_scale, torch.Tensor) or pre_scale.dtype != torch.float32
        or tuple(pre_scale.shape) != (m_cap, PRE_LANES) or not pre_scale.is_contiguous()
    ):
        got = (f"{pre_scale.dtype} {tuple(pre_scale.shape)}"
               if isinstance(pre_scale, torch.Tensor) else type(pre_scale).__name__)
        raise ConfigError("pre_scale", f"None or contiguous float32 [{m_cap}, {PRE_LANES}]",
                          got)
    if clamp is not None:
        if mode != "swiglu":
            raise ConfigError("clamp", "None for mode 'plain'", clamp)
        if not (isinstance(clamp, int | float) and math.isfinite(clamp) and clamp >= 0):
            raise ConfigError("clamp", "None or a finite number >= 0", clamp)
    tensors = [a, *_b_tensors(b), seg_start, counts, out] + [
        t for t in (row_scale, pre_scale) if t is not None
    ]
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise ConfigError("devices", "all tensors on one device", sorted(map(str, devices)))
    if m_cap * k > I32_LIMIT or m_cap * n > I32_LIMIT or n * k > I32_LIMIT:
        raise ConfigError("sizes", "M_cap*K, M_cap*N and N*K below 2**31",
                          (m_cap * k, m_cap * n, n * k))
    return m_cap, e, n, k


def grouped_gemm_torch(
    a: torch.Tensor, b: torch.Tensor | Mxfp4Matrix, seg_start: torch.Tensor,
    counts: torch.Tensor, out: torch.Tensor, *, mode: str,
    row_scale: torch.Tensor | None = None, clamp: float | None = None,
    pre_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """The PyTorch path: the same contract as ``grouped_gemm`` (float32 products, IEEE float32
    matmul, float32 epilogue, one rounding to ``out``'s dtype). Reads ``seg_start`` /
    ``counts`` on the host (a sync: not capturable). Writes the live rows of ``out`` only;
    returns ``out``."""
    m_cap, e, _, _ = _check(a, b, seg_start, counts, out, mode, row_scale, clamp, pre_scale)
    starts = seg_start.tolist()
    cnts = counts.tolist()
    if isinstance(b, Nvfp4Matrix):
        b_float = b.dequantize(with_global=False)  # g is the caller's (pre_scale)
    else:
        b_float = b.dequantize() if isinstance(b, Mxfp4Matrix | Mxfp8Matrix) else None
    backends = [torch.backends.cuda.matmul, torch.backends.mkldnn.matmul]
    saved = [bk.fp32_precision for bk in backends]
    for bk in backends:
        bk.fp32_precision = "ieee"  # full float32 products and sums (no TF32 / bf16 shortcut)
    try:
        for x in range(e):
            lo = max(starts[x], 0)
            hi = min(lo + max(cnts[x], 0), starts[x + 1], m_cap)
            if hi <= lo:
                continue
            w = b_float[x] if b_float is not None else b[x].float()
            h = a[lo:hi].float() @ w.t()
            if pre_scale is not None:
                h = h * pre_scale[lo:hi, :1]
            if mode == "swiglu":
                gate, up = h[:, 0::2], h[:, 1::2]
                if clamp is not None:
                    c = torch.tensor(float(clamp), dtype=torch.float32, device=h.device)
                    gate = torch.where(gate > c, c, gate)
                    up = torch.where(up > c, c, up)
                    up = torch.where(up < -c, -c, up)
                h = up * gate * (1.0 / (1.0 + torch.exp(-gate)))
            if row_scale is not None:
                h = h * row_scale[lo:hi].unsqueeze(1)
            out[lo:hi] = h.to(out.dtype)
    finally:
        for bk, old in zip(backends, saved, strict=True):
            bk.fp32_precision = old
    return out


def kernel_supported(device: torch.device) -> bool:
    """Whether the CuTe DSL kernel can run on ``device`` (a Hopper GPU)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) == _HOPPER


WEIGHT_KINDS = ("bf16", "mxfp4", "mxfp8", "nvfp4")


def _b_tensors(b) -> list[torch.Tensor]:  # type: ignore[no-untyped-def]
    """The tensors behind ``b`` (checked by ``_check_b``): payload and scale bytes."""
    kind = _BLOCK_SCALED.get(type(b))
    if kind is None:
        return [b]
    return [getattr(b, kind[1]), b.scales.view(torch.uint8)]


def weight_kind(b) -> str:  # type: ignore[no-untyped-def]
    """The ``WEIGHT_KINDS`` entry of weights ``b`` (bf16 tensor or a block-scaled matrix)."""
    kind = _BLOCK_SCALED.get(type(b))
    return "bf16" if kind is None else kind[0]


def gemm_config(weights: str, n: int, routes: int | None = None,
                k: int | None = None, experts: int | None = None,
                tokens: int | None = None) -> KernelConfig:
    """The variant a caller should compile and run for weight kind ``weights``, ``N`` and
    the GEMM's ``K``: ``mx_default_config(N, weights, routes, K, experts, tokens)`` for the
    block-scaled kinds (the decode-batch GEMV for a capacity of at most ``GEMV_MAX_ROWS``
    tokens where the format has one, else 64-row tiles for a capacity of at most 64 rows per
    expert, as deep a pipeline as ``K`` leaves room for), ``default_config(N, routes)`` for
    bf16 (narrow column tiles for a small one), where ``routes`` is the caller's *static*
    route capacity (``C * K``, with ``K`` there the routes per token), ``experts`` the
    experts the GEMM covers (one when not given) and ``tokens`` the capacity in tokens
    (``C``: the most rows one expert can get). A layer picks it once from its config, so
    the variant, and with it every row's result, never depends on a batch's live rows
    (docs/contract.md s7)."""
    if weights not in WEIGHT_KINDS:
        raise ConfigError("weights", f"one of {WEIGHT_KINDS}", repr(weights))
    if experts is not None and (isinstance(experts, bool) or not isinstance(experts, int)
                                or experts < 1):
        raise ConfigError("experts", "a positive int (the experts the GEMM covers)",
                          repr(experts))
    if weights != "bf16":
        from megamoe.experts.mxfp4_gemm_kernel import mx_default_config

        return mx_default_config(n, weights, routes, k, experts, tokens)
    return default_config(n, routes)


def _compiled(mode: str, n: int, k: int, device: torch.device,
              cfg: KernelConfig | None = None, weights: str = "bf16",
              out_f32: bool = False):
    cfg = cfg if cfg is not None else gemm_config(weights, n)
    key = (mode, n, k, cfg.name, weights, out_f32, str(device))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    if _capturing(device):
        raise CompileDuringCaptureError(
            f"grouped GEMM (mode={mode!r}, N={n}, K={k}, config {cfg.name}, weights "
            f"{weights}, float32 out {out_f32}) on {device} is not compiled and a CUDA graph "
            "is being captured: call megamoe.experts.api.warmup(...) before capture "
            "(docs/contract.md s9)"
        )
    with torch.cuda.device(device):
        if weights != "bf16":
            from megamoe.experts.mxfp4_gemm_kernel import compile_mx_gemm

            compiled = compile_mx_gemm(mode, n, k, cfg, out_f32=out_f32, weights=weights)
        else:
            from megamoe.experts.grouped_gemm_kernel import compile_grouped_gemm

            compiled = compile_grouped_gemm(mode, n, k, cfg, out_f32=out_f32)
    COMPILE_COUNT["n"] += 1
    _CACHE[key] = compiled
    return compiled


def warmup(mode: str, n: int, k: int, device: torch.device | str,
           config: KernelConfig | None = None, *, weights: str = "bf16",
           out_dtype: torch.dtype = torch.bfloat16) -> None:
    """Compile the kernel for (mode, N, K, config, weight kind, output dtype) on ``device``
    ahead of CUDA-graph capture."""
    if mode not in MODES:
        raise ConfigError("mode", f"one of {MODES}", repr(mode))
    if weights not in WEIGHT_KINDS:
        raise ConfigError("weights", f"one of {WEIGHT_KINDS}", repr(weights))
    if out_dtype not in OUT_DTYPES:
        raise ConfigError("out_dtype", f"one of {OUT_DTYPES}", out_dtype)
    if n <= 0 or n % TILE_N:
        raise ConfigError("N", f"a positive multiple of TILE_N={TILE_N}", n)
    if k <= 0 or k % TILE_K:
        raise ConfigError("K", f"a positive multiple of TILE_K={TILE_K}", k)
    cfg = config if config is not None else gemm_config(weights, n)
    if n % cfg.tile_n:
        raise ConfigError("N", f"a multiple of config.tile_n={cfg.tile_n}", n)
    _compiled(mode, n, k, torch.device(device), cfg, weights, out_dtype == torch.float32)


_SM_COUNT: dict[str, int] = {}


def _sm_count(device: torch.device) -> int:
    key = str(device)
    if key not in _SM_COUNT:
        _SM_COUNT[key] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SM_COUNT[key]


def _ptr(dtype, t: torch.Tensor, align: int):
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    return make_ptr(dtype, t.data_ptr(), cute.AddressSpace.gmem, assumed_align=align)


def _check_split_workspace(ws: object, cfg: KernelConfig, m_cap: int, n: int, k: int,
                           device: torch.device) -> None:
    """A split-K variant's workspace (``grouped_gemm``): float32 ``partials [S, rows, N]``
    with ``S = effective_splits(cfg, K)``, int32 ``arrivals`` of at least ``arrival_slots``
    counters, both contiguous on ``device``; None for a variant without split-K."""
    if cfg.splits == 1:
        if ws is not None:
            raise ConfigError("split_workspace", f"None for config {cfg.name} (no split-K)",
                              type(ws).__name__)
        return
    if not isinstance(ws, SplitKWorkspace):
        raise ConfigError("split_workspace", f"a SplitKWorkspace for config {cfg.name}",
                          type(ws).__name__)
    splits, slots = effective_splits(cfg, k), arrival_slots(cfg, m_cap, n)
    parts, arrivals = ws.partials, ws.arrivals
    if (parts.dtype != torch.float32 or parts.dim() != 3 or parts.shape[0] != splits
            or parts.shape[1] < 1 or parts.shape[2] != n or not parts.is_contiguous()):
        raise ConfigError("split_workspace.partials",
                          f"contiguous float32 [{splits}, rows >= 1, {n}]",
                          f"{parts.dtype} {tuple(parts.shape)}")
    if (arrivals.dtype != torch.int32 or arrivals.dim() != 1 or arrivals.numel() < slots
            or not arrivals.is_contiguous()):
        raise ConfigError("split_workspace.arrivals", f"contiguous int32 [>= {slots}]",
                          f"{arrivals.dtype} {tuple(arrivals.shape)}")
    for name, t in (("partials", parts), ("arrivals", arrivals)):
        if t.device != device:
            raise ConfigError(f"split_workspace.{name}.device", str(device), str(t.device))
    if parts.numel() > I32_LIMIT:
        raise ConfigError("split_workspace.partials", "fewer than 2**31 elements",
                          parts.numel())


def grouped_gemm(
    a: torch.Tensor, b: torch.Tensor | Mxfp4Matrix, seg_start: torch.Tensor,
    counts: torch.Tensor, out: torch.Tensor, *, mode: str,
    row_scale: torch.Tensor | None = None, clamp: float | None = None,
    config: KernelConfig | None = None, max_ctas: int | None = None,
    pre_scale: torch.Tensor | None = None, split_workspace: SplitKWorkspace | None = None,
) -> str:
    """Run the grouped GEMM (module docstring); returns the path taken (``"kernel"`` on a
    Hopper GPU, else ``"torch"``). Never modifies its inputs; writes live rows of ``out``
    (bf16, or float32: one rounding of the float32 epilogue either way).

    ``b``: bf16 ``[E, N, K]``, an ``Mxfp4Matrix`` or ``Mxfp8Matrix`` (decoded to bf16 inside
    the mainloop), or an ``Nvfp4Matrix``, of which the GEMM multiplies ``code * scale``
    only: its per-expert ``global_scale`` is the caller's to apply (``pre_scale``). ``pre_scale`` (float32 ``[M_cap, 4]``, the safe-FP8 scale wire, lane 0 read):
    multiplies the accumulators before the epilogue math (FC1: before the clamp and SwiGLU).
    ``config`` picks a compiled variant (default ``gemm_config(weight kind, N)``, without a
    route capacity: a layer passes its own); ``max_ctas`` caps the grid of the
    persistent (``ws``) variants (default: the device's SM count). ``split_workspace``: the
    device memory of a split-K variant (``config.splits > 1``: required; otherwise None),
    ``SplitKWorkspace.create(config, N, K, M_cap, rows, device)`` with ``rows`` at least the
    live rows of any launch it serves, used by one GEMM at a time (``megamoe.experts.split_k``)."""
    m_cap, e, n, k = _check(a, b, seg_start, counts, out, mode, row_scale, clamp, pre_scale)
    weights = weight_kind(b)
    cfg = config if config is not None else gemm_config(weights, n)
    if n % cfg.tile_n:
        raise ConfigError("N (b.shape[1])", f"a multiple of config.tile_n={cfg.tile_n}", n)
    if weights != "bf16" and cfg.ws:
        raise ConfigError("config", f"a non-persistent variant for {weights} weights", cfg.name)
    if cfg.splits > 1 and (weights == "bf16" or not cfg.specialized):
        raise ConfigError("config", "split-K only in a specialized MX variant", cfg.name)
    if cfg.gemv_warps and weights not in GEMV_WEIGHTS:
        raise ConfigError("config", f"a GEMV variant only for {' or '.join(GEMV_WEIGHTS)} "
                          "weights", f"{cfg.name} with {weights} weights")
    _check_split_workspace(split_workspace, cfg, m_cap, n, k, a.device)
    if max_ctas is not None and not (isinstance(max_ctas, int) and 1 <= max_ctas <= I32_LIMIT):
        raise ConfigError("max_ctas", "None or an int >= 1", max_ctas)
    if not kernel_supported(a.device):
        if _capturing(a.device):
            raise ConfigError("device", "a Hopper GPU under CUDA-graph capture",
                              torch.cuda.get_device_name(a.device))
        grouped_gemm_torch(a, b, seg_start, counts, out, mode=mode, row_scale=row_scale,
                           clamp=clamp, pre_scale=pre_scale)
        return PATH_TORCH
    b_parts = _b_tensors(b)
    for name, t in (("a", a), ("b", b_parts[0]), ("b.scales", b_parts[-1])):
        if t.data_ptr() % 16:
            raise ConfigError(f"{name}.data_ptr()", "16-byte aligned (TMA, vector loads)",
                              t.data_ptr())
    out_f32 = out.dtype == torch.float32
    compiled = _compiled(mode, n, k, a.device, cfg, weights, out_f32)
    if m_cap == 0:
        return PATH_KERNEL

    import cuda.bindings.driver as cuda
    from cutlass import BFloat16, Float32, Int32, Uint8

    scale = row_scale if row_scale is not None else counts  # never read when use_scale == 0
    pre = pre_scale if pre_scale is not None else counts  # never read when use_pre == 0
    out_ptr = _ptr(Float32, out, 4) if out_f32 else _ptr(BFloat16, out, 2)
    stream = cuda.CUstream(torch.cuda.current_stream(a.device).cuda_stream)
    flags = (1 if row_scale is not None else 0, 1 if pre_scale is not None else 0)
    clamp_v = math.inf if clamp is None else float(clamp)
    if weights != "bf16":
        payload, scales = _b_tensors(b)
        # no split-K: the workspace arguments are never read (counts stands in)
        ws = split_workspace
        parts, arrivals = (ws.partials, ws.arrivals) if ws is not None else (counts, counts)
        compiled(
            _ptr(BFloat16, a, 16), _ptr(Uint8, payload, 16), _ptr(Uint8, scales, 16),
            out_ptr, _ptr(Int32, seg_start, 4), _ptr(Int32, counts, 4),
            _ptr(Float32, scale, 4), _ptr(Float32, pre, 4), m_cap, e, *flags, clamp_v,
            _ptr(Float32, parts, 4), _ptr(Int32, arrivals, 4),
            ws.partials.shape[1] if ws is not None else 0, stream,
        )
        return PATH_KERNEL
    if max_ctas is None:
        max_ctas = _sm_count(a.device)
    compiled(
        _ptr(BFloat16, a, 16), _ptr(BFloat16, b, 16), out_ptr,
        _ptr(Int32, seg_start, 4), _ptr(Int32, counts, 4), _ptr(Float32, scale, 4),
        _ptr(Float32, pre, 4), m_cap, e, *flags, clamp_v, max_ctas, stream,
    )
    return PATH_KERNEL
