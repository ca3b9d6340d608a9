"""Host launcher of the row permute (``megamoe.layer.permute_kernel``; docs/contract.md s5, s9).

``permute_rows(src, dst, src_index, dst_index, count)`` writes ``dst[dst_index[i]] =
src[src_index[i]]`` for ``i < count[0]`` (``count`` a one-element device tensor, read on
the device) and nothing else. Indices must be in range for ``i < count`` (the layer makes
them); rows ``i >= count`` of the index tensors are never read.

The CuTe DSL kernel runs on CUDA tensors whose rows are 16-byte aligned (``row bytes``,
row strides and base pointers multiples of 16); anything else, or CPU tensors, takes the
Torch path (which reads ``count`` on the host, so it is not graph-capturable). Compiled once
per (index dtype, count dtype, device); compiling during capture is an error (docs/contract.md s9).
"""

from __future__ import annotations

import torch

from megamoe.compile_once import compile_once
from megamoe.errors import ConfigError
from megamoe.layer.constants import BF16_NAN
from megamoe.validation import I32_LIMIT

INDEX_DTYPES = (torch.int32, torch.int64)
WORD_BYTES = 16  # = permute_kernel.WORD_BYTES (a test checks they agree)
THREADS = 128  # = permute_kernel.THREADS
MAX_BLOCKS = 2048  # = permute_kernel.MAX_BLOCKS
PATH_KERNEL = "kernel"
PATH_TORCH = "torch"
WIDEN_CHUNK = 8  # = permute_kernel.WIDEN_CHUNK (a test checks they agree)
_CACHE: dict[tuple[str, torch.dtype, torch.dtype, str], object] = {}


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def _check(src, dst, src_index, dst_index, count, same_dtype: bool = True,
           cols_per_src_col: int = 1) -> None:
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
    want_cols = src.shape[1] * cols_per_src_col
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
        if t.shape[0] * t.stride(0) * es // 4 > I32_LIMIT:
            return f"{name} spans more than 2**31 int32 words"
    return ""


def _compiled(index_dtype: torch.dtype, count_dtype: torch.dtype, device: torch.device,
              kind: str = "permute"):
    key = (kind, index_dtype, count_dtype, str(device))

    def build():  # type: ignore[no-untyped-def]
        from megamoe.layer import permute_kernel as pk

        index, cnt = _dtype_name(index_dtype), _dtype_name(count_dtype)
        if kind.startswith("widen_mx_"):
            return pk.compile_widen_mx(kind.removeprefix("widen_mx_"), index, cnt)
        compile_kind = {"permute": pk.compile_permute, "widen": pk.compile_widen,
                        "widen_nvfp4": pk.compile_widen_nvfp4}[kind]
        return compile_kind(index, cnt)

    return compile_once(_CACHE, key, build, what=f"row {kind} for {key}",
                        warmup="megamoe.layer.permute.warmup(...)")


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


def _live(src_index: torch.Tensor, dst_index: torch.Tensor,
          count: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Torch paths: ``(n, src rows, dst rows)`` of the ``n = clamp(count[0], 0, len)`` live
    entries (reads ``count`` on the host)."""
    n = max(0, min(int(count.reshape(-1)[0]), src_index.numel()))
    return n, src_index[:n].long(), dst_index[:n].long()


def _check_dtypes(rule: str = "", **tensors: tuple[object, torch.dtype]) -> None:
    """Each tensor of ``name=(tensor, dtype)`` has that dtype (``rule`` added to the
    expected value of the error; non-tensors are left to ``_check``)."""
    for name, (t, dt) in tensors.items():
        if isinstance(t, torch.Tensor) and t.dtype != dt:
            raise ConfigError(f"{name}.dtype", f"{dt}{rule}", t.dtype)


def _check_scales(scales: torch.Tensor, src: torch.Tensor, nblk: int) -> None:
    """``scales`` is a 2-D tensor with at least ``nblk`` columns for each row of ``src``."""
    if not isinstance(scales, torch.Tensor) or scales.dim() != 2 or (
        scales.shape[0] != src.shape[0] or scales.shape[1] < nblk
    ):
        raise ConfigError("scales", f"uint8 [{src.shape[0]}, >= {nblk}]",
                          tuple(getattr(scales, "shape", ())))


def _launch(kind: str, src: tuple, dst: tuple, units: int, src_index: torch.Tensor,
            dst_index: torch.Tensor, count: torch.Tensor,
            scales: torch.Tensor | None = None) -> str:
    """Run the compiled gather ``kind`` (``permute_kernel._make_gather``'s argument list).
    ``src``/``dst``: ``(tensor, cutlass element type name, pointer alignment, row stride in
    those elements)``; ``scales``: uint8 rows (gathers without scales get a stand-in)."""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    src_t = src[0]
    compiled = _compiled(src_index.dtype, count.dtype, src_t.device, kind)
    rows = src_index.numel()
    if rows == 0:
        return PATH_KERNEL
    gm = cute.AddressSpace.gmem

    def ptr(t: torch.Tensor, ty, align: int):
        return make_ptr(ty, t.data_ptr(), gm, assumed_align=align)

    def rows_args(side: tuple) -> tuple:
        t, ty, align, stride = side
        return ptr(t, getattr(cutlass, ty), align), t.shape[0], stride

    it = cutlass.Int32 if src_index.dtype == torch.int32 else cutlass.Int64
    ct = cutlass.Int32 if count.dtype == torch.int32 else cutlass.Int64
    sc, sc_stride = (src_t, 0) if scales is None else (scales, scales.stride(0))
    stream = cuda.CUstream(torch.cuda.current_stream(src_t.device).cuda_stream)
    compiled(
        *rows_args(src), ptr(sc, cutlass.Uint8, 1), sc_stride, *rows_args(dst), units,
        ptr(src_index, it, it.width // 8), ptr(dst_index, it, it.width // 8),
        ptr(count, ct, ct.width // 8), rows, min(rows, MAX_BLOCKS), stream,
    )
    return PATH_KERNEL


def permute_rows(src: torch.Tensor, dst: torch.Tensor, src_index: torch.Tensor,
                 dst_index: torch.Tensor, count: torch.Tensor) -> str:
    """Run the permute (module docstring); returns the path taken."""
    _check(src, dst, src_index, dst_index, count)
    if kernel_plan(src, dst):
        _, si, di = _live(src_index, dst_index, count)
        dst[di] = src[si]
        return PATH_TORCH
    es = src.element_size()
    return _launch("permute", (src, "Int32", WORD_BYTES, src.stride(0) * es // 4),
                   (dst, "Int32", WORD_BYTES, dst.stride(0) * es // 4),
                   src.shape[1] * es // WORD_BYTES, src_index, dst_index, count)


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
        if t.shape[0] * t.stride(0) > I32_LIMIT:
            return f"{name} spans more than 2**31 elements"
    return ""


def _chunk_sides(src: torch.Tensor, dst: torch.Tensor, dst_type: str) -> tuple:
    """``_launch``'s ``src``/``dst`` for the widening gathers (units of ``WIDEN_CHUNK``)."""
    return ((src, "Uint8", WIDEN_CHUNK, src.stride(0)),
            (dst, dst_type, 2 * WIDEN_CHUNK, dst.stride(0)))


def widen_rows(src: torch.Tensor, dst: torch.Tensor, src_index: torch.Tensor,
               dst_index: torch.Tensor, count: torch.Tensor) -> str:
    """``dst[dst_index[i]] = bf16(src[src_index[i]])`` for ``i < count[0]``, ``src`` E4M3
    bytes (uint8 or ``float8_e4m3fn``) and ``dst`` bf16: exact (every E4M3 value is a bf16
    value, docs/contract.md s4; both NaN bytes become the canonical bf16 NaN ``0x7FC0``). The
    ``fp8_mxfp4`` layer gathers the staged safe-FP8 payload into its GEMM input with it.
    Returns the path taken."""
    if isinstance(src, torch.Tensor) and src.dtype == torch.float8_e4m3fn:
        src = src.view(torch.uint8)
    _check_dtypes(" (E4M3 bytes in, bf16 out)", src=(src, torch.uint8),
                  dst=(dst, torch.bfloat16))
    _check(src, dst, src_index, dst_index, count, same_dtype=False)
    if widen_plan(src, dst):
        _, si, di = _live(src_index, dst_index, count)
        rows = src[si].view(torch.float8_e4m3fn).to(torch.bfloat16)
        dst[di] = torch.where(rows.isnan(), BF16_NAN.to(rows.device), rows)
        return PATH_TORCH
    return _launch("widen", *_chunk_sides(src, dst, "Int16"), src.shape[1] // WIDEN_CHUNK,
                   src_index, dst_index, count)


MX_FP8_DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
MX_BLOCK = 32  # = permute_kernel.MX_BLOCK


def widen_mx_rows(src: torch.Tensor, scales: torch.Tensor, dst: torch.Tensor,
                  src_index: torch.Tensor, dst_index: torch.Tensor, count: torch.Tensor,
                  elem: str) -> str:
    """``dst[dst_index[i]] = bf16(fp8(src[si]) * 2**(scales[si, j // 32] - 127))`` for
    ``i < count[0]`` (the MXFP8 A1 gather, docs/contract.md s4: ``src`` the staged payload in
    ``elem`` (E4M3 or E5M2, or its uint8 bytes), ``scales`` its E8M0 bytes ``[rows, >=
    H/32]``, ``dst`` bf16). The float32 product is exact and rounds to bf16 exactly unless
    it lies below 2**-130 (then to nearest). NaN scale bytes or payloads give NaN (bits may
    differ between the paths). Returns the path taken."""
    if elem not in MX_FP8_DTYPES:
        raise ConfigError("elem", f"one of {tuple(MX_FP8_DTYPES)}", repr(elem))
    if isinstance(src, torch.Tensor) and src.dtype in MX_FP8_DTYPES.values():
        src = src.view(torch.uint8)
    _check_dtypes(src=(src, torch.uint8), scales=(scales, torch.uint8),
                  dst=(dst, torch.bfloat16))
    _check(src, dst, src_index, dst_index, count, same_dtype=False)
    _check_scales(scales, src, -(-src.shape[1] // MX_BLOCK))
    if widen_plan(src, dst) or scales.device != src.device or scales.stride(1) != 1:
        n, si, di = _live(src_index, dst_index, count)
        vals = src[si].view(MX_FP8_DTYPES[elem]).to(torch.float32)
        b = scales[si, : src.shape[1] // MX_BLOCK].to(torch.int32)
        from megamoe.staging.torch_path import pow2_f32

        sc = torch.where(b == 0xFF, torch.full(b.shape, float("nan"), device=b.device),
                         pow2_f32(b - 127))
        h = src.shape[1]
        vals = (vals.reshape(n, h // MX_BLOCK, MX_BLOCK) * sc.unsqueeze(-1)).reshape(n, h)
        dst[di] = vals.to(torch.bfloat16)
        return PATH_TORCH
    return _launch(f"widen_mx_{elem}", *_chunk_sides(src, dst, "BFloat16"),
                   src.shape[1] // WIDEN_CHUNK, src_index, dst_index, count, scales)


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
    _check_dtypes(src=(src, torch.uint8), scales=(scales, torch.uint8),
                  dst=(dst, torch.bfloat16))
    _check(src, dst, src_index, dst_index, count, same_dtype=False, cols_per_src_col=2)
    nblk = dst.shape[1] // NVFP4_BLOCK
    _check_scales(scales, src, nblk)
    kernel_ok = (src.device.type == "cuda" and dst.shape[1] % NVFP4_BLOCK == 0
                 and src.data_ptr() % 8 == 0 and src.stride(0) % 8 == 0
                 and dst.data_ptr() % 16 == 0 and dst.stride(0) % 8 == 0
                 and dst.stride(1) == 1 and scales.stride(1) == 1)
    if not kernel_ok:
        n, si, di = _live(src_index, dst_index, count)
        codes = src[si].to(torch.int64)
        code = torch.stack((codes & 0xF, codes >> 4), dim=-1).reshape(n, dst.shape[1])
        mags = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=src.device)
        val = torch.where((code & 8) != 0, -mags[code & 7], mags[code & 7])
        sc = scales[si, :nblk].view(torch.float8_e4m3fn).to(torch.float32)
        out = (val.reshape(n, nblk, NVFP4_BLOCK) * sc.unsqueeze(-1)).reshape(n, dst.shape[1])
        dst[di] = out.to(torch.bfloat16)
        return PATH_TORCH
    return _launch("widen_nvfp4", (src, "Uint8", 8, src.stride(0)),
                   (dst, "BFloat16", 16, dst.stride(0)), nblk, src_index, dst_index, count,
                   scales)
