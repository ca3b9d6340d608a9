"""Host launcher of the ``fp8_mxfp4`` A2 quantizer (``megamoe.layer.a2_quant_kernel``;
docs/contract.md s4 safe FP8, s5 step 5).

``quantize_a2_safe_fp8(act, a2, d, rows, count)``: for every listed row ``r = rows[i]``,
``i < count[0]`` (``rows`` int64, the GEMM rows of the routes, as the layer's gathers use
them; ``count`` int64 ``[1]``, e.g. the dispatch layout's ``num_routes``; rows outside ``[0, M_cap)`` are skipped), the safe-FP8 payload
of the float32 row ``act[r]`` as exact bf16 values into ``a2[r]`` and its dequant scale ``d``
into all four lanes of ``d[r]``. Other rows are neither read nor written. The CuTe DSL
kernel runs on CUDA tensors (list and count read on the device: capturable; the work is
spread over the blocks by route, so it scales with the live routes); CPU tensors take the
Torch path (``megamoe.staging.torch_path.quantize_safe_fp8``, the staging fallback's
quantizer; it reads the count on the host), which gives the same bytes. ``segment_rows``
lists the live rows of a grouped layout (``seg_start``, ``counts``) without a sync.
"""

from __future__ import annotations

import torch

from megamoe.compile_once import compile_once
from megamoe.errors import ConfigError
from megamoe.layer.constants import BF16_NAN
from megamoe.staging.torch_path import (
    pow2_f32,
    quantize_mxfp8,
    quantize_nvfp4,
    quantize_safe_fp8,
)

LANES = 4  # = a2_quant_kernel.LANES
VEC = 4  # = a2_quant_kernel.VEC
MAX_BLOCKS = 1024  # = a2_quant_kernel.MAX_BLOCKS
PATH_KERNEL = "kernel"
PATH_TORCH = "torch"
_CACHE: dict[str, object] = {}


def _check(act, a2, d, rows, count) -> None:
    for name, t in (("act", act), ("a2", a2), ("d", d), ("rows", rows), ("count", count)):
        if not isinstance(t, torch.Tensor):
            raise ConfigError(name, "a torch.Tensor", type(t).__name__)
        if not t.is_contiguous():
            raise ConfigError(name, "contiguous", f"strides {t.stride()}")
    if act.dtype != torch.float32 or act.dim() != 2 or act.shape[1] % VEC:
        raise ConfigError("act", f"float32 [M_cap, I] with I a multiple of {VEC}",
                          f"{act.dtype} {tuple(act.shape)}")
    if a2.dtype != torch.bfloat16 or a2.shape != act.shape:
        raise ConfigError("a2", f"bfloat16 {tuple(act.shape)}", f"{a2.dtype} {tuple(a2.shape)}")
    if d.dtype != torch.float32 or tuple(d.shape) != (act.shape[0], LANES):
        raise ConfigError("d", f"float32 ({act.shape[0]}, {LANES})",
                          f"{d.dtype} {tuple(d.shape)}")
    if rows.dtype != torch.int64 or rows.dim() != 1:
        raise ConfigError("rows", "int64 [R]", f"{rows.dtype} {tuple(rows.shape)}")
    if count.dtype != torch.int64 or tuple(count.shape) != (1,):
        raise ConfigError("count", "int64 [1]", f"{count.dtype} {tuple(count.shape)}")
    devs = {t.device for t in (act, a2, d, rows, count)}
    if len(devs) != 1:
        raise ConfigError("device", "every tensor on one device", sorted(map(str, devs)))


def _check_blocked(act, a2, rows, count, block: int) -> None:
    """``_check`` for the block-scaled quantizers (no ``d``), and ``I % block == 0``."""
    d_dummy = torch.empty(act.shape[0] if isinstance(act, torch.Tensor) else 0, LANES,
                          dtype=torch.float32, device=getattr(act, "device", "cpu"))
    _check(act, a2, d_dummy, rows, count)
    if act.shape[1] % block:
        raise ConfigError("act.shape[1]", f"a multiple of {block}", act.shape[1])


def segment_rows(seg_start: torch.Tensor, counts: torch.Tensor,
                 m_cap: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, count)`` listing the live rows of a grouped layout, expert by expert: row
    ``r`` is live when ``seg_start[e] <= r < min(seg_start[e] + max(counts[e], 0),
    seg_start[e + 1], M_cap)``. ``rows`` is int64 ``[M_cap]`` (entries past ``count`` are 0),
    ``count`` int64 ``[1]``. Device ops only (no sync): capturable."""
    lo = seg_start[:-1].to(torch.int64).clamp_min(0)
    hi = torch.minimum(torch.minimum(lo + counts.to(torch.int64).clamp_min(0),
                                     seg_start[1:].to(torch.int64)),
                       torch.full_like(lo, m_cap))
    live = (hi - lo).clamp_min(0)
    ends = torch.cumsum(live, 0)
    idx = torch.arange(m_cap, dtype=torch.int64, device=lo.device)
    e = torch.searchsorted(ends, idx, right=True).clamp_max(max(lo.numel() - 1, 0))
    total = ends[-1:] if ends.numel() else torch.zeros(1, dtype=torch.int64, device=lo.device)
    rows = torch.where(idx < total, lo[e] + idx - (ends[e] - live[e]), 0)
    return rows, total


def _listed(act: torch.Tensor, rows: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Torch paths: the listed rows ``rows[:count]`` inside ``[0, M_cap)`` (syncs)."""
    n = min(max(int(count[0]), 0), rows.numel())
    idx = rows[:n]
    return idx[(idx >= 0) & (idx < act.shape[0])]


def _launch(kind: str, act: torch.Tensor, outs: tuple, rows: torch.Tensor,
            count: torch.Tensor, extra: tuple = ()) -> str:
    """Run the compiled quantizer ``kind``: ``(act, *outs, rows, count, M_cap, I, R,
    *extra, blocks, stream)``, each of ``outs`` a ``(tensor, cutlass element type name,
    pointer alignment)``."""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    compiled = _compiled(act.device, kind)
    m_cap, cols = act.shape
    if m_cap == 0 or rows.numel() == 0:
        return PATH_KERNEL
    gm = cute.AddressSpace.gmem

    def ptr(t: torch.Tensor, ty: str, align: int):
        return make_ptr(getattr(cutlass, ty), t.data_ptr(), gm, assumed_align=align)

    stream = cuda.CUstream(torch.cuda.current_stream(act.device).cuda_stream)
    compiled(
        ptr(act, "Float32", 16), *(ptr(*o) for o in outs), ptr(rows, "Int64", 8),
        ptr(count, "Int64", 8), m_cap, cols, rows.numel(), *extra,
        min(rows.numel(), MAX_BLOCKS), stream,
    )
    return PATH_KERNEL


def _compiled(device: torch.device, kind: str = "safe_fp8"):
    def build():  # type: ignore[no-untyped-def]
        from megamoe.layer import a2_quant_kernel as qk

        if kind == "nvfp4":
            return qk.compile_a2_nvfp4()
        if kind.startswith("mxfp8_"):
            _, elem, mode = kind.split("_")
            return qk.compile_a2_mxfp8(elem, mode)
        return qk.compile_a2_safe_fp8()

    return compile_once(_CACHE, f"{kind} {device}", build, what=f"A2 quantizer on {device}",
                        warmup="megamoe.layer.a2_quant.warmup(device)", device=device)


def warmup(device: torch.device | str, mxfp8: tuple[str, str] | None = None,
           nvfp4: bool = False) -> None:
    """Compile the safe-FP8 quantizer (``mxfp8=(elem, mode)``: the MXFP8 one; ``nvfp4``:
    the NVFP4 one) for ``device`` (CUDA only). Call before capture."""
    device = torch.device(device)
    if device.type == "cuda":
        kind = f"mxfp8_{mxfp8[0]}_{mxfp8[1]}" if mxfp8 else "safe_fp8"
        _compiled(device, "nvfp4" if nvfp4 else kind)


def quantize_a2_torch(act, a2, d, rows, count) -> None:
    """The Torch path (module docstring); syncs on the count."""
    idx = _listed(act, rows, count)
    payload, dd, _ = quantize_safe_fp8(act[idx])
    vals = payload.to(torch.bfloat16)
    a2[idx] = torch.where(vals.isnan(), BF16_NAN.to(vals.device), vals)
    d[idx] = dd.unsqueeze(1).expand(idx.numel(), LANES)


def quantize_a2_safe_fp8(act: torch.Tensor, a2: torch.Tensor, d: torch.Tensor,
                         rows: torch.Tensor, count: torch.Tensor) -> str:
    """Run the quantizer (module docstring); returns the path taken."""
    _check(act, a2, d, rows, count)
    if act.device.type != "cuda":
        quantize_a2_torch(act, a2, d, rows, count)
        return PATH_TORCH
    return _launch("safe_fp8", act, ((a2, "Int16", 8), (d, "Float32", 16)), rows, count)


MX_BLOCK = 32  # = a2_quant_kernel.MX_BLOCK
MX_ELEMS = ("e4m3", "e5m2")
MX_MODES = ("rceil", "floor")


def quantize_a2_mxfp8_torch(act, a2, rows, count, elem: str, mode: str) -> None:
    """The Torch path of ``quantize_a2_mxfp8`` (syncs on the count)."""
    idx = _listed(act, rows, count)
    payload, sbytes = quantize_mxfp8(act[idx], elem, mode)
    b = sbytes.to(torch.int32)
    sc = torch.where(b == 0xFF, torch.full(b.shape, float("nan"), device=b.device),
                     pow2_f32(b - 127))
    cols = act.shape[1]
    vals = payload.to(torch.float32).reshape(idx.numel(), cols // MX_BLOCK, MX_BLOCK)
    a2[idx] = (vals * sc.unsqueeze(-1)).reshape(idx.numel(), cols).to(torch.bfloat16)


def quantize_a2_mxfp8(act: torch.Tensor, a2: torch.Tensor, rows: torch.Tensor,
                      count: torch.Tensor, elem: str, mode: str) -> str:
    """A2 of the ``mxfp8`` recipe (docs/contract.md s4-s5): every listed row of the float32
    ``act`` quantized to MXFP8 (``elem``, ``mode``; blocks of 32 along ``I``) and written into
    ``a2`` as its dequantized values rounded to bf16 (exact unless below 2**-130; a NaN/Inf
    block gives NaN). Other rows are neither read nor written. Returns the path taken."""
    if elem not in MX_ELEMS:
        raise ConfigError("elem", f"one of {MX_ELEMS}", repr(elem))
    if mode not in MX_MODES:
        raise ConfigError("mode", f"one of {MX_MODES}", repr(mode))
    _check_blocked(act, a2, rows, count, MX_BLOCK)
    if act.device.type != "cuda":
        quantize_a2_mxfp8_torch(act, a2, rows, count, elem, mode)
        return PATH_TORCH
    return _launch(f"mxfp8_{elem}_{mode}", act, ((a2, "BFloat16", 16),), rows, count,
                   (0,))  # g_bits: not read by the MXFP8 quantizer


NVFP4_BLOCK = 16  # = a2_quant_kernel.NVFP4_BLOCK


def quantize_a2_nvfp4_torch(act, a2, rows, count, global_scale: float) -> None:
    """The Torch path of ``quantize_a2_nvfp4`` (syncs on the count)."""
    from megamoe.experts.mxfp4 import E2M1_MAGNITUDES

    cols = act.shape[1]
    mags = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=act.device)
    idx = _listed(act, rows, count)
    m = idx.numel()
    packed, sc = quantize_nvfp4(act[idx], global_scale)
    codes = packed.to(torch.int64)
    code = torch.stack((codes & 0xF, codes >> 4), dim=-1).reshape(m, cols)
    val = torch.where((code & 8) != 0, -mags[code & 7], mags[code & 7])
    s32 = sc.to(torch.float32)
    out = val.reshape(m, cols // NVFP4_BLOCK, NVFP4_BLOCK) * s32.unsqueeze(-1)
    a2[idx] = out.reshape(m, cols).to(torch.bfloat16)


def quantize_a2_nvfp4(act: torch.Tensor, a2: torch.Tensor, rows: torch.Tensor,
                      count: torch.Tensor, global_scale: float) -> str:
    """A2 of the ``nvfp4`` recipe (docs/contract.md s4-s5): every listed row of the float32 ``act``
    quantized to NVFP4 with ``g = global_scale`` (blocks of 16 along ``I``) and written into
    ``a2`` as ``e2m1(code) * float32(s)`` in bf16 (exact), **without** ``g`` (FC2 applies it
    in float32). A NaN/Inf block gives NaN. Returns the path taken."""
    import math
    import struct

    if not (isinstance(global_scale, int | float) and math.isfinite(global_scale)
            and global_scale > 0):
        raise ConfigError("global_scale", "a finite float > 0", global_scale)
    _check_blocked(act, a2, rows, count, NVFP4_BLOCK)
    if act.device.type != "cuda":
        quantize_a2_nvfp4_torch(act, a2, rows, count, float(global_scale))
        return PATH_TORCH
    g_bits = struct.unpack("<i", struct.pack("<f", float(global_scale)))[0]
    return _launch("nvfp4", act, ((a2, "BFloat16", 16),), rows, count, (g_bits,))
