"""Host launcher of the row permute (``megamoe.layer.permute_kernel``; CONTRACTS.md s5, s9).

``permute_rows(src, dst, src_index, dst_index, count)`` writes ``dst[dst_index[i]] =
src[src_index[i]]`` for ``i < count[0]`` (``count`` a one-element device tensor, read on
the device) and nothing else. Indices must be in range for ``i < count`` (the layer makes
them); rows ``i >= count`` of the index tensors are never read.

The CuTe DSL kernel runs on CUDA tensors whose rows are 16-byte aligned (``row bytes``,
row strides and base pointers multiples of 16); anything else, or CPU tensors, takes the
Torch path (which reads ``count`` on the host, so it is not graph-capturable). Compiled once
per (index dtype, count dtype, device); compiling during capture is an error (CONTRACTS s9).
"""

from __future__ import annotations

import torch

from megamoe.errors import ConfigError
from megamoe.staging.compile_cache import CompileDuringCaptureError

INDEX_DTYPES = (torch.int32, torch.int64)
WORD_BYTES = 16  # = permute_kernel.WORD_BYTES (a test checks they agree)
THREADS = 128  # = permute_kernel.THREADS
MAX_BLOCKS = 2048  # = permute_kernel.MAX_BLOCKS
PATH_KERNEL = "kernel"
PATH_TORCH = "torch"
WIDEN_CHUNK = 8  # = permute_kernel.WIDEN_CHUNK (a test checks they agree)
_BF16_NAN = torch.tensor(0x7FC0, dtype=torch.int16).view(torch.bfloat16)
"""The one NaN the widening permute writes (both E4M3 NaN bytes, either path)."""
_CACHE: dict[tuple[str, torch.dtype, torch.dtype, str], object] = {}


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def _check(src, dst, src_index, dst_index, count, same_dtype: bool = True,
           dst_cols: int | None = None) -> None:
    for name, t in (("src", src), ("dst", dst), ("src_index", src_index),
                    ("dst_index", dst_index), ("count", count)):
        if not isinstance(t, torch.Tensor):
            raise ConfigError(name, "a torch.Tensor", type(t).__name__)
    for name, t in (("src", src), ("dst", dst)):
        if t.dim() != 2:
            raise ConfigError(name, "a 2-D tensor [rows, cols]", f"shape {tuple(t.shape)}")
        if t.shape[1] > 1 and t.stride(1) != 1:
            raise ConfigError(f"{name}.stride(1)", 1, t.stride(1))
    if same_dtype and dst.dtype != src.dtype:
        raise ConfigError("dst.dtype", f"src's dtype {src.dtype}", dst.dtype)
    want_cols = src.shape[1] if dst_cols is None else dst_cols
    if dst.shape[1] != want_cols:
        raise ConfigError("dst.shape[1]", f"{want_cols} (from src's row length "
                          f"{src.shape[1]})", dst.shape[1])
    for name, t in (("src_index", src_index), ("dst_index", dst_index)):
        if t.dtype not in INDEX_DTYPES or t.dim() != 1:
            raise ConfigError(name, "a 1-D int32/int64 tensor", f"{t.dtype} {tuple(t.shape)}")
    if dst_index.dtype != src_index.dtype or dst_index.shape != src_index.shape:
        raise ConfigError("dst_index", f"src_index's dtype and shape {src_index.dtype} "
                          f"{tuple(src_index.shape)}", f"{dst_index.dtype} "
                          f"{tuple(dst_index.shape)}")
    if count.dtype not in INDEX_DTYPES or count.numel() != 1:
        raise ConfigError("count", "a one-element int32/int64 tensor",
                          f"{count.dtype} {tuple(count.shape)}")
    devs = {t.device for t in (src, dst, src_index, dst_index, count)}
    if len(devs) != 1:
        raise ConfigError("device", "every tensor on one device", sorted(map(str, devs)))


def kernel_plan(src: torch.Tensor, dst: torch.Tensor) -> str:
    """'' when the kernel covers ``src``/``dst``, else why not."""
    if src.device.type != "cuda":
        return "tensors are not on a CUDA device"
    es = src.element_size()
    if (src.shape[1] * es) % WORD_BYTES:
        return f"row bytes {src.shape[1] * es} are not a multiple of {WORD_BYTES}"
    for name, t in (("src", src), ("dst", dst)):
        if t.data_ptr() % WORD_BYTES or (t.stride(0) * es) % WORD_BYTES:
            return f"{name} rows are not {WORD_BYTES}-byte aligned"
        if t.shape[0] * t.stride(0) * es // 4 > 2**31 - 1:
            return f"{name} spans more than 2**31 int32 words"
    return ""


def _compiled(index_dtype: torch.dtype, count_dtype: torch.dtype, device: torch.device,
              kind: str = "permute"):
    key = (kind, index_dtype, count_dtype, str(device))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    if torch.cuda.is_current_stream_capturing():
        raise CompileDuringCaptureError(
            f"row {kind} for {key} is not compiled and a CUDA graph is being captured: call "
            "megamoe.layer.permute.warmup(...) before capture (CONTRACTS.md s9)"
        )
    from megamoe.layer.permute_kernel import (
        compile_permute,
        compile_widen,
        compile_widen_mx,
        compile_widen_nvfp4,
    )

    if kind == "widen_nvfp4":
        compiled = compile_widen_nvfp4(_dtype_name(index_dtype), _dtype_name(count_dtype))
    elif kind.startswith("widen_mx_"):
        compiled = compile_widen_mx(kind.removeprefix("widen_mx_"), _dtype_name(index_dtype),
                                    _dtype_name(count_dtype))
    else:
        build = compile_widen if kind == "widen" else compile_permute
        compiled = build(_dtype_name(index_dtype), _dtype_name(count_dtype))
    _CACHE[key] = compiled
    return compiled


def warmup(device: torch.device | str, index_dtype: torch.dtype = torch.int64,
           count_dtype: torch.dtype = torch.int64, *, widen: bool = False,
           mx_elem: str | None = None, nvfp4: bool = False) -> None:
    """Compile the permute (``widen``: the E4M3 -> bf16 widening permute; ``mx_elem``: the
    MXFP8 dequantizing gather for that element type) for these dtypes on ``device`` (CUDA
    only). Call before capture."""
    device = torch.device(device)
    if device.type == "cuda":
        kind = f"widen_mx_{mx_elem}" if mx_elem else ("widen" if widen else "permute")
        kind = "widen_nvfp4" if nvfp4 else kind
        _compiled(index_dtype, count_dtype, device, kind)


def _torch_permute(src, dst, src_index, dst_index, count) -> None:
    n = max(0, min(int(count.reshape(-1)[0]), src_index.numel()))
    dst[dst_index[:n].long()] = src[src_index[:n].long()]


def permute_rows(src: torch.Tensor, dst: torch.Tensor, src_index: torch.Tensor,
                 dst_index: torch.Tensor, count: torch.Tensor) -> str:
    """Run the permute (module docstring); returns the path taken."""
    _check(src, dst, src_index, dst_index, count)
    if kernel_plan(src, dst):
        _torch_permute(src, dst, src_index, dst_index, count)
        return PATH_TORCH
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    compiled = _compiled(src_index.dtype, count.dtype, src.device)
    es = src.element_size()
    rows = src_index.numel()
    if rows == 0:
        return PATH_KERNEL
    gm = cute.AddressSpace.gmem
    it = cutlass.Int32 if src_index.dtype == torch.int32 else cutlass.Int64
    ct = cutlass.Int32 if count.dtype == torch.int32 else cutlass.Int64

    def words_ptr(t: torch.Tensor):
        return make_ptr(cutlass.Int32, t.data_ptr(), gm, assumed_align=WORD_BYTES)

    def idx_ptr(t: torch.Tensor, ty):
        return make_ptr(ty, t.data_ptr(), gm, assumed_align=ty.width // 8)

    stream = cuda.CUstream(torch.cuda.current_stream(src.device).cuda_stream)
    compiled(
        words_ptr(src), src.shape[0], src.stride(0) * es // 4,
        words_ptr(dst), dst.shape[0], dst.stride(0) * es // 4,
        src.shape[1] * es // WORD_BYTES,
        idx_ptr(src_index, it), idx_ptr(dst_index, it), idx_ptr(count, ct),
        rows, min(rows, MAX_BLOCKS), stream,
    )
    return PATH_KERNEL


def widen_plan(src: torch.Tensor, dst: torch.Tensor) -> str:
    """'' when the widening kernel covers ``src`` (E4M3 bytes) / ``dst`` (bf16), else why."""
    if src.device.type != "cuda":
        return "tensors are not on a CUDA device"
    if src.shape[1] % WIDEN_CHUNK:
        return f"row length {src.shape[1]} is not a multiple of {WIDEN_CHUNK}"
    if src.data_ptr() % WIDEN_CHUNK or src.stride(0) % WIDEN_CHUNK:
        return f"src rows are not {WIDEN_CHUNK}-byte aligned"
    if dst.data_ptr() % (2 * WIDEN_CHUNK) or dst.stride(0) % WIDEN_CHUNK:
        return f"dst rows are not {2 * WIDEN_CHUNK}-byte aligned"
    for name, t in (("src", src), ("dst", dst)):
        if t.shape[0] * t.stride(0) > 2**31 - 1:
            return f"{name} spans more than 2**31 elements"
    return ""


def widen_rows(src: torch.Tensor, dst: torch.Tensor, src_index: torch.Tensor,
               dst_index: torch.Tensor, count: torch.Tensor) -> str:
    """``dst[dst_index[i]] = bf16(src[src_index[i]])`` for ``i < count[0]``, ``src`` E4M3
    bytes (uint8 or ``float8_e4m3fn``) and ``dst`` bf16: exact (every E4M3 value is a bf16
    value, CONTRACTS.md s4; both NaN bytes become the canonical bf16 NaN ``0x7FC0``). The ``fp8_mxfp4`` layer gathers the staged
    safe-FP8 payload into its GEMM input with it. Returns the path taken."""
    if isinstance(src, torch.Tensor) and src.dtype == torch.float8_e4m3fn:
        src = src.view(torch.uint8)
    for name, t, dt in (("src", src, torch.uint8), ("dst", dst, torch.bfloat16)):
        if isinstance(t, torch.Tensor) and t.dtype != dt:
            raise ConfigError(f"{name}.dtype", f"{dt} (E4M3 bytes in, bf16 out)", t.dtype)
    _check(src, dst, src_index, dst_index, count, same_dtype=False)
    if widen_plan(src, dst):
        n = max(0, min(int(count.reshape(-1)[0]), src_index.numel()))
        rows = src[src_index[:n].long()].view(torch.float8_e4m3fn).to(torch.bfloat16)
        dst[dst_index[:n].long()] = torch.where(rows.isnan(), _BF16_NAN.to(rows.device), rows)
        return PATH_TORCH
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    compiled = _compiled(src_index.dtype, count.dtype, src.device, "widen")
    rows = src_index.numel()
    if rows == 0:
        return PATH_KERNEL
    gm = cute.AddressSpace.gmem
    it = cutlass.Int32 if src_index.dtype == torch.int32 else cutlass.Int64
    ct = cutlass.Int32 if count.dtype == torch.int32 else cutlass.Int64
    stream = cuda.CUstream(torch.cuda.current_stream(src.device).cuda_stream)
    compiled(
        make_ptr(cutlass.Uint8, src.data_ptr(), gm, assumed_align=WIDEN_CHUNK),
        src.shape[0], src.stride(0),
        make_ptr(cutlass.Int16, dst.data_ptr(), gm, assumed_align=2 * WIDEN_CHUNK),
        dst.shape[0], dst.stride(0), src.shape[1] // WIDEN_CHUNK,
        make_ptr(it, src_index.data_ptr(), gm, assumed_align=it.width // 8),
        make_ptr(it, dst_index.data_ptr(), gm, assumed_align=it.width // 8),
        make_ptr(ct, count.data_ptr(), gm, assumed_align=ct.width // 8),
        rows, min(rows, MAX_BLOCKS), stream,
    )
    return PATH_KERNEL


MX_FP8_DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
MX_BLOCK = 32  # = permute_kernel.MX_BLOCK


def widen_mx_rows(src: torch.Tensor, scales: torch.Tensor, dst: torch.Tensor,
                  src_index: torch.Tensor, dst_index: torch.Tensor, count: torch.Tensor,
                  elem: str) -> str:
    """``dst[dst_index[i]] = bf16(fp8(src[si]) * 2**(scales[si, j // 32] - 127))`` for
    ``i < count[0]`` (the MXFP8 A1 gather, CONTRACTS.md s4: ``src`` the staged payload in
    ``elem`` (E4M3 or E5M2, or its uint8 bytes), ``scales`` its E8M0 bytes ``[rows, >=
    H/32]``, ``dst`` bf16). The float32 product is exact and rounds to bf16 exactly unless
    it lies below 2**-130 (then to nearest). NaN scale bytes or payloads give NaN (bits may
    differ between the paths). Returns the path taken."""
    if elem not in MX_FP8_DTYPES:
        raise ConfigError("elem", f"one of {tuple(MX_FP8_DTYPES)}", repr(elem))
    if isinstance(src, torch.Tensor) and src.dtype in MX_FP8_DTYPES.values():
        src = src.view(torch.uint8)
    for name, t, dt in (("src", src, torch.uint8), ("scales", scales, torch.uint8),
                        ("dst", dst, torch.bfloat16)):
        if isinstance(t, torch.Tensor) and t.dtype != dt:
            raise ConfigError(f"{name}.dtype", dt, t.dtype)
    _check(src, dst, src_index, dst_index, count, same_dtype=False)
    if not isinstance(scales, torch.Tensor) or scales.dim() != 2 or (
        scales.shape[0] != src.shape[0] or scales.shape[1] * MX_BLOCK < src.shape[1]
    ):
        raise ConfigError("scales", f"uint8 [{src.shape[0]}, >= {src.shape[1] // MX_BLOCK}]",
                          tuple(getattr(scales, "shape", ())))
    if widen_plan(src, dst) or scales.device != src.device or scales.stride(1) != 1:
        n = max(0, min(int(count.reshape(-1)[0]), src_index.numel()))
        rows = src_index[:n].long()
        vals = src[rows].view(MX_FP8_DTYPES[elem]).to(torch.float32)
        b = scales[rows, : src.shape[1] // MX_BLOCK].to(torch.int32)
        from megamoe.staging.torch_path import pow2_f32

        sc = torch.where(b == 0xFF, torch.full(b.shape, float("nan"), device=b.device),
                         pow2_f32(b - 127))
        h = src.shape[1]
        vals = (vals.reshape(n, h // MX_BLOCK, MX_BLOCK) * sc.unsqueeze(-1)).reshape(n, h)
        dst[dst_index[:n].long()] = vals.to(torch.bfloat16)
        return PATH_TORCH
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    compiled = _compiled(src_index.dtype, count.dtype, src.device, f"widen_mx_{elem}")
    rows = src_index.numel()
    if rows == 0:
        return PATH_KERNEL
    gm = cute.AddressSpace.gmem
    it = cutlass.Int32 if src_index.dtype == torch.int32 else cutlass.Int64
    ct = cutlass.Int32 if count.dtype == torch.int32 else cutlass.Int64
    stream = cuda.CUstream(torch.cuda.current_stream(src.device).cuda_stream)
    compiled(
        make_ptr(cutlass.Uint8, src.data_ptr(), gm, assumed_align=WIDEN_CHUNK),
        src.shape[0], src.stride(0),
        make_ptr(cutlass.Uint8, scales.data_ptr(), gm, assumed_align=1), scales.stride(0),
        make_ptr(cutlass.BFloat16, dst.data_ptr(), gm, assumed_align=2 * WIDEN_CHUNK),
        dst.shape[0], dst.stride(0), src.shape[1] // WIDEN_CHUNK,
        make_ptr(it, src_index.data_ptr(), gm, assumed_align=it.width // 8),
        make_ptr(it, dst_index.data_ptr(), gm, assumed_align=it.width // 8),
        make_ptr(ct, count.data_ptr(), gm, assumed_align=ct.width // 8),
        rows, min(rows, MAX_BLOCKS), stream,
    )
    return PATH_KERNEL


NVFP4_BLOCK = 16  # = permute_kernel.NVFP4_BLOCK


def widen_nvfp4_rows(src: torch.Tensor, scales: torch.Tensor, dst: torch.Tensor,
                     src_index: torch.Tensor, dst_index: torch.Tensor,
                     count: torch.Tensor) -> str:
    """``dst[dst_index[i]] = bf16(e2m1(src[si]) * float32(scales[si]))`` for ``i <
    count[0]``: the NVFP4 A1 gather **without** the global scale (the layer applies ``g`` in
    float32 in FC1's epilogue). ``src`` packed codes uint8 ``[rows, H/2]``, ``scales`` E4M3
    (or its bytes) ``[rows, >= H/16]``, ``dst`` bf16 ``[*, H]``. Exact. Returns the path."""
    from megamoe.experts.mxfp4 import E2M1_MAGNITUDES

    if isinstance(scales, torch.Tensor) and scales.dtype == torch.float8_e4m3fn:
        scales = scales.view(torch.uint8)
    for name, t, dt in (("src", src, torch.uint8), ("scales", scales, torch.uint8),
                        ("dst", dst, torch.bfloat16)):
        if not isinstance(t, torch.Tensor) or t.dtype != dt:
            raise ConfigError(f"{name}.dtype", dt, getattr(t, "dtype", type(t).__name__))
    _check(src, dst, src_index, dst_index, count, same_dtype=False, dst_cols=2 * src.shape[1])
    nblk = dst.shape[1] // NVFP4_BLOCK
    if scales.dim() != 2 or scales.shape[0] != src.shape[0] or scales.shape[1] < nblk:
        raise ConfigError("scales", f"[{src.shape[0]}, >= {nblk}]", tuple(scales.shape))
    kernel_ok = (src.device.type == "cuda" and dst.shape[1] % NVFP4_BLOCK == 0
                 and src.data_ptr() % 8 == 0 and src.stride(0) % 8 == 0
                 and dst.data_ptr() % 16 == 0 and dst.stride(0) % 8 == 0
                 and dst.stride(1) == 1 and scales.stride(1) == 1)
    if not kernel_ok:
        n = max(0, min(int(count.reshape(-1)[0]), src_index.numel()))
        rows = src_index[:n].long()
        codes = src[rows].to(torch.int64)
        code = torch.stack((codes & 0xF, codes >> 4), dim=-1).reshape(n, dst.shape[1])
        mags = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=src.device)
        val = torch.where((code & 8) != 0, -mags[code & 7], mags[code & 7])
        sc = scales[rows, :nblk].view(torch.float8_e4m3fn).to(torch.float32)
        out = (val.reshape(n, nblk, NVFP4_BLOCK) * sc.unsqueeze(-1)).reshape(n, dst.shape[1])
        dst[dst_index[:n].long()] = out.to(torch.bfloat16)
        return PATH_TORCH
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    compiled = _compiled(src_index.dtype, count.dtype, src.device, "widen_nvfp4")
    rows = src_index.numel()
    if rows == 0:
        return PATH_KERNEL
    gm = cute.AddressSpace.gmem
    it = cutlass.Int32 if src_index.dtype == torch.int32 else cutlass.Int64
    ct = cutlass.Int32 if count.dtype == torch.int32 else cutlass.Int64
    stream = cuda.CUstream(torch.cuda.current_stream(src.device).cuda_stream)
    compiled(
        make_ptr(cutlass.Uint8, src.data_ptr(), gm, assumed_align=8), src.shape[0],
        src.stride(0), make_ptr(cutlass.Uint8, scales.data_ptr(), gm, assumed_align=1),
        scales.stride(0),
        make_ptr(cutlass.BFloat16, dst.data_ptr(), gm, assumed_align=16), dst.shape[0],
        dst.stride(0), nblk,
        make_ptr(it, src_index.data_ptr(), gm, assumed_align=it.width // 8),
        make_ptr(it, dst_index.data_ptr(), gm, assumed_align=it.width // 8),
        make_ptr(ct, count.data_ptr(), gm, assumed_align=ct.width // 8),
        rows, min(rows, MAX_BLOCKS), stream,
    )
    return PATH_KERNEL
