"""Host launcher of the ``fp8_mxfp4`` A2 quantizer (``megamoe.layer.a2_quant_kernel``;
CONTRACTS.md s4 safe FP8, s5 step 5).

``quantize_a2_safe_fp8(act, a2, d, seg_start, counts)``: for every live row ``r`` of the
grouped layout (``seg_start[e] <= r < seg_start[e] + counts[e]``), the safe-FP8 payload of
the float32 row ``act[r]`` as exact bf16 values into ``a2[r]`` and its dequant scale ``d``
into all four lanes of ``d[r]``. Other rows are neither read nor written. The CuTe DSL
kernel runs on CUDA tensors (segments read on the device: capturable); CPU tensors take the
Torch path (``megamoe.staging.torch_path.quantize_safe_fp8``, the staging fallback's
quantizer; it reads the counts on the host), which gives the same bytes.
"""

from __future__ import annotations

import torch

from megamoe.errors import ConfigError
from megamoe.staging.compile_cache import CompileDuringCaptureError
from megamoe.staging.torch_path import quantize_safe_fp8

LANES = 4  # = a2_quant_kernel.LANES
VEC = 4  # = a2_quant_kernel.VEC
MAX_BLOCKS = 1024  # = a2_quant_kernel.MAX_BLOCKS
PATH_KERNEL = "kernel"
PATH_TORCH = "torch"
_CACHE: dict[str, object] = {}
_BF16_NAN = torch.tensor(0x7FC0, dtype=torch.int16).view(torch.bfloat16)
"""The one NaN the kernel writes into A2 (a non-finite row), on both paths."""


def _check(act, a2, d, seg_start, counts) -> None:
    for name, t in (("act", act), ("a2", a2), ("d", d), ("seg_start", seg_start),
                    ("counts", counts)):
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
    e = counts.numel()
    if counts.dtype != torch.int32 or counts.dim() != 1:
        raise ConfigError("counts", "int32 [E]", f"{counts.dtype} {tuple(counts.shape)}")
    if seg_start.dtype != torch.int32 or tuple(seg_start.shape) != (e + 1,):
        raise ConfigError("seg_start", f"int32 [{e + 1}]",
                          f"{seg_start.dtype} {tuple(seg_start.shape)}")
    devs = {t.device for t in (act, a2, d, seg_start, counts)}
    if len(devs) != 1:
        raise ConfigError("device", "every tensor on one device", sorted(map(str, devs)))


def _compiled(device: torch.device):
    key = str(device)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    if torch.cuda.is_current_stream_capturing():
        raise CompileDuringCaptureError(
            f"A2 quantizer on {device} is not compiled and a CUDA graph is being captured: "
            "call megamoe.layer.a2_quant.warmup(device) before capture (CONTRACTS.md s9)"
        )
    from megamoe.layer.a2_quant_kernel import compile_a2_safe_fp8

    with torch.cuda.device(device):
        compiled = compile_a2_safe_fp8()
    _CACHE[key] = compiled
    return compiled


def warmup(device: torch.device | str) -> None:
    """Compile the kernel for ``device`` (CUDA only). Call before capture."""
    device = torch.device(device)
    if device.type == "cuda":
        _compiled(device)


def quantize_a2_torch(act, a2, d, seg_start, counts) -> None:
    """The Torch path (module docstring); syncs on the counts."""
    starts = seg_start.tolist()
    cnts = counts.tolist()
    m_cap = act.shape[0]
    for e, n in enumerate(cnts):
        lo = max(starts[e], 0)
        hi = min(lo + max(n, 0), starts[e + 1], m_cap)
        if hi <= lo:
            continue
        payload, dd, _ = quantize_safe_fp8(act[lo:hi])
        vals = payload.to(torch.bfloat16)
        a2[lo:hi] = torch.where(vals.isnan(), _BF16_NAN.to(vals.device), vals)
        d[lo:hi] = dd.unsqueeze(1).expand(hi - lo, LANES)


def quantize_a2_safe_fp8(act: torch.Tensor, a2: torch.Tensor, d: torch.Tensor,
                         seg_start: torch.Tensor, counts: torch.Tensor) -> str:
    """Run the quantizer (module docstring); returns the path taken."""
    _check(act, a2, d, seg_start, counts)
    if act.device.type != "cuda":
        quantize_a2_torch(act, a2, d, seg_start, counts)
        return PATH_TORCH
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    compiled = _compiled(act.device)
    m_cap, cols = act.shape
    if m_cap == 0:
        return PATH_KERNEL
    gm = cute.AddressSpace.gmem

    def ptr(ty, t: torch.Tensor, align: int):
        return make_ptr(ty, t.data_ptr(), gm, assumed_align=align)

    stream = cuda.CUstream(torch.cuda.current_stream(act.device).cuda_stream)
    compiled(
        ptr(cutlass.Float32, act, 16), ptr(cutlass.Int16, a2, 8),
        ptr(cutlass.Float32, d, 16), ptr(cutlass.Int32, seg_start, 4),
        ptr(cutlass.Int32, counts, 4), m_cap, cols, counts.numel(),
        min(m_cap, MAX_BLOCKS), stream,
    )
    return PATH_KERNEL
