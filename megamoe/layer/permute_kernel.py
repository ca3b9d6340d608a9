"""Row permute: ``dst[dst_index[i]] = src[src_index[i]]`` for ``i < n``, one CuTe DSL launch
(and its dequantizing twins for the A1 gathers: E4M3 rows to bf16 for ``fp8_mxfp4``, MXFP8
and NVFP4 rows to bf16). All four are ``_make_gather`` kernels: one row loop, each stating
only its unit layouts and the per-unit step.

The layer moves routed rows with it (docs/contract.md s3, s5): staged A1 rows into each
expert's segment of the GEMM input, FC2 rows back to their ``(token, slot)`` term, and
live output rows to the caller's buffer. ``n`` is read on the device (a count the dispatch
layout wrote, or the live-token count), so a CUDA graph captured around the launch
replays with a new ``n`` and new indices; blocks of rows ``>= n`` do nothing, so the work
scales with the live routes, not the capacity.

Rows are moved as 16-byte words (``WORD_BYTES``): row starts and row strides must be
multiples of 16 bytes (``megamoe.layer.permute`` checks). Grid: ``min(max_rows,
MAX_BLOCKS)`` blocks of ``THREADS`` threads, grid-stride over rows ``i``; the threads of a
block stride over the words of one row. Nothing else is written; no atomics.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Int16, Int32, Int64, Uint8
from cutlass.cute.runtime import make_ptr

from megamoe.kernel_registry import register_kernel
from megamoe.pdl import PDL, await_inputs
from megamoe.staging.dsl_bits import (
    e2m1_to_float,
    e4m3_to_float,
    e5m2_to_float,
    e8m0_to_float,
    f2i,
)

THREADS = 128
MAX_BLOCKS = 2048
WORD_BYTES = 16
WIDEN_CHUNK = 8
"""E4M3 bytes per step of the widening permute (8 bytes in, 16 bytes of bf16 out)."""
_FAKE_ADDR = 1 << 20


def _row_view(ptr: cute.Pointer, rows: Int32, stride: Int32, units: Int32, unit_shape: tuple,
              divby: int):
    """``[rows, units, *unit_shape]`` over rows ``stride`` elements apart (hinted a multiple
    of ``divby``), each row a packed run of ``units`` units of ``unit_shape`` elements."""
    inner = [1]
    for extent in reversed(unit_shape[1:]):
        inner.insert(0, inner[0] * extent)
    unit = inner[0] * unit_shape[0]
    return cute.make_tensor(ptr, cute.make_layout(
        (rows, units, *unit_shape), stride=(cute.assume(stride, divby=divby), unit, *inner)))


def _scale_args(scale_view, sc_ptr: cute.Pointer, sc_stride: Int32) -> tuple:
    """The kernel's scale arguments: ``None`` (no parameters) when the gather has no scales."""
    return (None, None) if scale_view is None else (sc_ptr, sc_stride)


def _make_gather(src_unit: tuple, dst_unit: tuple, step, scale_view=None):
    """A row gather ``dst[dst_index[i]] = f(src[src_index[i]])`` for ``i < n`` (module
    docstring: ``n`` read on the device and clamped to ``[0, max_rows]``, blocks grid-stride
    over rows, the threads of a block over the ``units`` of a row).

    - ``src_unit``/``dst_unit``: ``(unit_shape, divby)`` of each side's ``_row_view``;
    - ``step(m_src, m_sc, m_dst, s, d, w)`` (``@cute.jit``, inlined at trace time) writes
      unit ``w`` of destination row ``d`` from source row ``s``;
    - ``scale_view(sc_ptr, sc_stride, src_rows, units, s)`` (plain Python, traced) gives
      ``m_sc``, the scale bytes as ``step`` indexes them for row ``s`` (rows ``sc_stride``
      bytes apart); ``None``: no scales, ``m_sc`` is ``None`` and the kernel takes no
      ``sc_ptr``/``sc_stride`` parameters (its launcher still does, and ignores them).

    Returns the ``@cute.jit`` launcher ``(src_ptr, src_rows, src_stride, sc_ptr, sc_stride,
    dst_ptr, dst_rows, dst_stride, units, src_idx_ptr, dst_idx_ptr, n_ptr, max_rows, blocks,
    stream)``; strides in elements of each pointer's type."""

    @cute.kernel
    def kernel(
        src_ptr: cute.Pointer, src_rows: Int32, src_stride: Int32, sc_ptr, sc_stride,
        dst_ptr: cute.Pointer, dst_rows: Int32, dst_stride: Int32,
        units: Int32,
        src_idx_ptr: cute.Pointer, dst_idx_ptr: cute.Pointer,
        n_ptr: cute.Pointer, max_rows: Int32,
    ):
        await_inputs()
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        m_src = _row_view(src_ptr, src_rows, src_stride, units, *src_unit)
        m_dst = _row_view(dst_ptr, dst_rows, dst_stride, units, *dst_unit)
        m_si = cute.make_tensor(src_idx_ptr, cute.make_layout(max_rows))
        m_di = cute.make_tensor(dst_idx_ptr, cute.make_layout(max_rows))
        m_n = cute.make_tensor(n_ptr, cute.make_layout(1))
        n = cutlass.min(cutlass.max(Int32(m_n[0]), Int32(0)), max_rows)
        for i in range(bidx, n, gdim):
            s = Int32(m_si[i])
            d = Int32(m_di[i])
            m_sc = None
            if cutlass.const_expr(scale_view is not None):
                m_sc = scale_view(sc_ptr, sc_stride, src_rows, units, s)
            for w in range(tidx, units, THREADS):
                step(m_src, m_sc, m_dst, s, d, w)

    @cute.jit
    def launch(
        src_ptr: cute.Pointer, src_rows: Int32, src_stride: Int32,
        sc_ptr: cute.Pointer, sc_stride: Int32,
        dst_ptr: cute.Pointer, dst_rows: Int32, dst_stride: Int32,
        units: Int32,
        src_idx_ptr: cute.Pointer, dst_idx_ptr: cute.Pointer,
        n_ptr: cute.Pointer, max_rows: Int32, blocks: Int32,
        stream: cuda.CUstream,
    ):
        kernel(
            src_ptr, src_rows, src_stride, *_scale_args(scale_view, sc_ptr, sc_stride),
            dst_ptr, dst_rows, dst_stride, units, src_idx_ptr, dst_idx_ptr, n_ptr, max_rows,
        ).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1], stream=stream, use_pdl=PDL)

    return launch


@cute.jit
def _copy_step(m_src, m_sc, m_dst, s, d, w):
    """One 16-byte word (4 int32), unchanged."""
    m_dst[d, w, None].store(m_src[s, w, None].load())


@cute.jit
def _widen_step(m_src, m_sc, m_dst, s, d, w):
    """``bf16(e4m3(byte))`` for ``WIDEN_CHUNK`` bytes: exact (every E4M3 value is a bf16
    value, so its bf16 bits are the top half of its float32 bits; both NaN bytes give the
    canonical ``0x7FC0``). ``dst`` is addressed as int16 bits."""
    raw = cute.make_rmem_tensor(cute.make_layout(WIDEN_CHUNK), Uint8)
    raw.store(m_src[s, w, None].load())
    wide = cute.make_rmem_tensor(cute.make_layout(WIDEN_CHUNK), Int16)
    for j in cutlass.range_constexpr(WIDEN_CHUNK):
        wide[j] = Int16(f2i(e4m3_to_float(Int32(raw[j]) & 0xFF)) >> 16)
    m_dst[d, w, None].store(wide.load())


_CHUNK_UNIT = ((WIDEN_CHUNK,), WIDEN_CHUNK)
permute_launch = _make_gather(((4,), 4), ((4,), 4), _copy_step)
"""The plain permute over 16-byte words (4 int32 units; strides in int32 units)."""
widen_launch = _make_gather(_CHUNK_UNIT, _CHUNK_UNIT, _widen_step)
"""The E4M3 -> bf16 widening permute (units of ``WIDEN_CHUNK``; strides in elements)."""


MX_BLOCK = 32
_FP8_DECODE = {"e4m3": e4m3_to_float, "e5m2": e5m2_to_float}


def _mx_scale_row(sc_ptr: cute.Pointer, sc_stride: Int32, src_rows: Int32, chunks: Int32,
                  s: Int32):
    """The E8M0 bytes of source row ``s`` (one per ``MX_BLOCK`` elements)."""
    return cute.make_tensor(sc_ptr + s * sc_stride,
                            cute.make_layout(chunks * WIDEN_CHUNK // MX_BLOCK + 1))


def _make_widen_mx(elem: str):
    """The MXFP8 A1 gather for one element type: ``dst[di[i]] = bf16(fp8(src[si[i]]) *
    2**(scale - 127))`` for ``i < n``, one E8M0 byte per 32 elements (docs/contract.md s4 MXFP8
    dequant; byte 0xFF: NaN). The float32 product is exact; its bf16 rounding (to nearest)
    is exact unless the value lies below 2**-130."""
    decode = _FP8_DECODE[elem]

    @cute.jit
    def step(m_src, m_sc, m_dst, s, d, w):
        raw = cute.make_rmem_tensor(cute.make_layout(WIDEN_CHUNK), Uint8)
        raw.store(m_src[s, w, None].load())
        scale = e8m0_to_float(Int32(m_sc[w * WIDEN_CHUNK // MX_BLOCK]) & 0xFF)
        wide = cute.make_rmem_tensor(cute.make_layout(WIDEN_CHUNK), BFloat16)
        for j in cutlass.range_constexpr(WIDEN_CHUNK):
            wide[j] = (decode(Int32(raw[j]) & 0xFF) * scale).to(BFloat16)
        m_dst[d, w, None].store(wide.load())

    return _make_gather(_CHUNK_UNIT, _CHUNK_UNIT, step, scale_view=_mx_scale_row)


NVFP4_BLOCK = 16
@cute.jit
def _widen_nvfp4_step(m_src, m_sc, m_dst, s, d, w):
    """``bf16(e2m1(codes) * float32(e4m3 scale))`` for one NVFP4 block (16 elements, 8
    packed bytes, one E4M3 scale): the NVFP4 A1 gather without the global scale (exact: at
    most 6 significant bits; a NaN scale gives a NaN block)."""
    half = NVFP4_BLOCK // 2
    raw = cute.make_rmem_tensor(cute.make_layout(half), Uint8)
    raw.store(m_src[s, w, None].load())
    scale = e4m3_to_float(Int32(m_sc[s, w]) & 0xFF)
    for h in cutlass.range_constexpr(2):
        wide = cute.make_rmem_tensor(cute.make_layout(8), BFloat16)
        for j in cutlass.range_constexpr(4):
            byte = Int32(raw[4 * h + j]) & 0xFF
            wide[2 * j] = (e2m1_to_float(byte & 0xF) * scale).to(BFloat16)
            wide[2 * j + 1] = (e2m1_to_float(byte >> 4) * scale).to(BFloat16)
        m_dst[d, w, h, None].store(wide.load())


def _nvfp4_scales(sc_ptr: cute.Pointer, sc_stride: Int32, src_rows: Int32, blocks: Int32,
                  s: Int32):
    """The E4M3 block scales ``[src_rows, blocks]`` (indexed ``[s, block]``)."""
    return cute.make_tensor(sc_ptr, cute.make_layout((src_rows, blocks), stride=(sc_stride, 1)))


widen_nvfp4_launch = _make_gather(((NVFP4_BLOCK // 2,), NVFP4_BLOCK // 2), ((2, 8), 8),
                                  _widen_nvfp4_step, scale_view=_nvfp4_scales)
"""The NVFP4 A1 gather (units: NVFP4 blocks; strides in elements, bytes for ``src``)."""


INDEX_TYPES = {"int32": Int32, "int64": Int64}


def _ptr(dtype, align: int, addr: int = _FAKE_ADDR):
    return make_ptr(dtype, addr, cute.AddressSpace.gmem, assumed_align=align)


def _compile(launch, src: tuple, dst: tuple, index_dtype: str, count_dtype: str):
    """``cute.compile`` a ``_make_gather`` launcher for ``src``/``dst`` = ``(element type,
    alignment)`` and one (index dtype, count dtype); every size, stride and pointer is a
    runtime argument (scales: uint8 bytes, a stand-in pointer for gathers without them)."""
    it, ct = INDEX_TYPES[index_dtype], INDEX_TYPES[count_dtype]
    i0 = Int32(0)
    return cute.compile(
        launch, _ptr(*src), i0, i0, _ptr(Uint8, 1), i0, _ptr(*dst), i0, i0, i0,
        _ptr(it, it.width // 8), _ptr(it, it.width // 8), _ptr(ct, ct.width // 8), i0, i0,
        cuda.CUstream(0),
    )


def compile_permute(index_dtype: str, count_dtype: str):
    """The permute (row strides in int32 units, multiples of 4)."""
    words = (Int32, WORD_BYTES)
    return _compile(permute_launch, words, words, index_dtype, count_dtype)


def compile_widen(index_dtype: str, count_dtype: str):
    """The E4M3 -> bf16 widening permute."""
    return _compile(widen_launch, (Uint8, WIDEN_CHUNK), (Int16, 2 * WIDEN_CHUNK),
                    index_dtype, count_dtype)


def compile_widen_mx(elem: str, index_dtype: str, count_dtype: str):
    """The MXFP8 dequantizing gather for one element type."""
    return _compile(_make_widen_mx(elem), (Uint8, WIDEN_CHUNK), (BFloat16, 2 * WIDEN_CHUNK),
                    index_dtype, count_dtype)


def compile_widen_nvfp4(index_dtype: str, count_dtype: str):
    """The NVFP4 dequantizing gather."""
    return _compile(widen_nvfp4_launch, (Uint8, NVFP4_BLOCK // 2), (BFloat16, 16),
                    index_dtype, count_dtype)


@register_kernel("row_widen_nvfp4_i64_n32")
def build_row_widen_nvfp4():
    return compile_widen_nvfp4("int64", "int32")


@register_kernel("row_widen_mxfp8_e4m3_i64_n32")
def build_row_widen_mx_e4m3():
    return compile_widen_mx("e4m3", "int64", "int32")


@register_kernel("row_widen_mxfp8_e5m2_i64_n32")
def build_row_widen_mx_e5m2():
    return compile_widen_mx("e5m2", "int64", "int32")


@register_kernel("row_widen_e4m3_i64_n64")
def build_row_widen_i64():
    return compile_widen("int64", "int64")


@register_kernel("row_permute_i64_n64")
def build_row_permute_i64():
    return compile_permute("int64", "int64")


@register_kernel("row_permute_i32_n32")
def build_row_permute_i32():
    return compile_permute("int32", "int32")
