"""Row permute: ``dst[dst_index[i]] = src[src_index[i]]`` for ``i < n``, one CuTe DSL launch
(and its widening twin, E4M3 rows in, bf16 rows out, for the ``fp8_mxfp4`` A1 gather).

The layer moves routed rows with it (CONTRACTS.md s3, s5): staged A1 rows into each
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
from cutlass import BFloat16, Float32, Int16, Int32, Int64, Uint8
from cutlass.cute.runtime import make_ptr

from megamoe.kernel_registry import register_kernel
from megamoe.staging.dsl_bits import e4m3_to_float, e5m2_to_float, f2i, i2f

THREADS = 128
MAX_BLOCKS = 2048
WORD_BYTES = 16
WIDEN_CHUNK = 8
"""E4M3 bytes per step of the widening permute (8 bytes in, 16 bytes of bf16 out)."""
_FAKE_ADDR = 1 << 20


@cute.kernel
def _permute_kernel(
    src_ptr: cute.Pointer, src_rows: Int32, src_stride: Int32,
    dst_ptr: cute.Pointer, dst_rows: Int32, dst_stride: Int32,
    words: Int32,
    src_idx_ptr: cute.Pointer, dst_idx_ptr: cute.Pointer,
    n_ptr: cute.Pointer, max_rows: Int32,
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    gdim, _, _ = cute.arch.grid_dim()
    src_s = cute.assume(src_stride, divby=4)
    dst_s = cute.assume(dst_stride, divby=4)
    m_src = cute.make_tensor(
        src_ptr, cute.make_layout((src_rows, words, 4), stride=(src_s, 4, 1))
    )
    m_dst = cute.make_tensor(
        dst_ptr, cute.make_layout((dst_rows, words, 4), stride=(dst_s, 4, 1))
    )
    m_si = cute.make_tensor(src_idx_ptr, cute.make_layout(max_rows))
    m_di = cute.make_tensor(dst_idx_ptr, cute.make_layout(max_rows))
    m_n = cute.make_tensor(n_ptr, cute.make_layout(1))
    n = cutlass.min(cutlass.max(Int32(m_n[0]), Int32(0)), max_rows)
    for i in range(bidx, n, gdim):
        s = Int32(m_si[i])
        d = Int32(m_di[i])
        for w in range(tidx, words, THREADS):
            m_dst[d, w, None].store(m_src[s, w, None].load())


@cute.jit
def permute_launch(
    src_ptr: cute.Pointer, src_rows: Int32, src_stride: Int32,
    dst_ptr: cute.Pointer, dst_rows: Int32, dst_stride: Int32,
    words: Int32,
    src_idx_ptr: cute.Pointer, dst_idx_ptr: cute.Pointer,
    n_ptr: cute.Pointer, max_rows: Int32, blocks: Int32,
    stream: cuda.CUstream,
):
    _permute_kernel(
        src_ptr, src_rows, src_stride, dst_ptr, dst_rows, dst_stride, words,
        src_idx_ptr, dst_idx_ptr, n_ptr, max_rows,
    ).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1], stream=stream)


@cute.kernel
def _widen_kernel(
    src_ptr: cute.Pointer, src_rows: Int32, src_stride: Int32,
    dst_ptr: cute.Pointer, dst_rows: Int32, dst_stride: Int32,
    chunks: Int32,
    src_idx_ptr: cute.Pointer, dst_idx_ptr: cute.Pointer,
    n_ptr: cute.Pointer, max_rows: Int32,
):
    """``dst[di[i]] = bf16(e4m3(src[si[i]]))`` for ``i < n``: exact (every E4M3 value is a
    bf16 value, so its bf16 bits are the top half of its float32 bits; both NaN bytes give
    the canonical ``0x7FC0``). ``dst`` is addressed as int16 bits. Strides in elements
    (bytes for ``src``), multiples of ``WIDEN_CHUNK``."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    gdim, _, _ = cute.arch.grid_dim()
    m_src = cute.make_tensor(src_ptr, cute.make_layout(
        (src_rows, chunks, WIDEN_CHUNK),
        stride=(cute.assume(src_stride, divby=WIDEN_CHUNK), WIDEN_CHUNK, 1)))
    m_dst = cute.make_tensor(dst_ptr, cute.make_layout(
        (dst_rows, chunks, WIDEN_CHUNK),
        stride=(cute.assume(dst_stride, divby=WIDEN_CHUNK), WIDEN_CHUNK, 1)))
    m_si = cute.make_tensor(src_idx_ptr, cute.make_layout(max_rows))
    m_di = cute.make_tensor(dst_idx_ptr, cute.make_layout(max_rows))
    m_n = cute.make_tensor(n_ptr, cute.make_layout(1))
    n = cutlass.min(cutlass.max(Int32(m_n[0]), Int32(0)), max_rows)
    for i in range(bidx, n, gdim):
        s = Int32(m_si[i])
        d = Int32(m_di[i])
        for w in range(tidx, chunks, THREADS):
            raw = cute.make_rmem_tensor(cute.make_layout(WIDEN_CHUNK), Uint8)
            raw.store(m_src[s, w, None].load())
            wide = cute.make_rmem_tensor(cute.make_layout(WIDEN_CHUNK), Int16)
            for j in cutlass.range_constexpr(WIDEN_CHUNK):
                wide[j] = Int16(f2i(e4m3_to_float(Int32(raw[j]) & 0xFF)) >> 16)
            m_dst[d, w, None].store(wide.load())


@cute.jit
def widen_launch(
    src_ptr: cute.Pointer, src_rows: Int32, src_stride: Int32,
    dst_ptr: cute.Pointer, dst_rows: Int32, dst_stride: Int32,
    chunks: Int32,
    src_idx_ptr: cute.Pointer, dst_idx_ptr: cute.Pointer,
    n_ptr: cute.Pointer, max_rows: Int32, blocks: Int32,
    stream: cuda.CUstream,
):
    _widen_kernel(
        src_ptr, src_rows, src_stride, dst_ptr, dst_rows, dst_stride, chunks,
        src_idx_ptr, dst_idx_ptr, n_ptr, max_rows,
    ).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1], stream=stream)


MX_BLOCK = 32
_FP8_DECODE = {"e4m3": e4m3_to_float, "e5m2": e5m2_to_float}


def _make_widen_mx(elem: str):
    """The MXFP8 A1 gather for one element type (``widen_mx_launch``)."""
    decode = _FP8_DECODE[elem]

    @cute.kernel
    def kernel(
        src_ptr: cute.Pointer, src_rows: Int32, src_stride: Int32,
        sc_ptr: cute.Pointer, sc_stride: Int32,
        dst_ptr: cute.Pointer, dst_rows: Int32, dst_stride: Int32,
        chunks: Int32,
        src_idx_ptr: cute.Pointer, dst_idx_ptr: cute.Pointer,
        n_ptr: cute.Pointer, max_rows: Int32,
    ):
        """``dst[di[i]] = bf16(fp8(src[si[i]]) * 2**(scale - 127))`` for ``i < n``, one E8M0
        byte per 32 elements (CONTRACTS.md s4 MXFP8 dequant; byte 0xFF: NaN). The float32
        product is exact; its bf16 rounding (to nearest) is exact unless the value lies below
        2**-130."""
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        m_src = cute.make_tensor(src_ptr, cute.make_layout(
            (src_rows, chunks, WIDEN_CHUNK),
            stride=(cute.assume(src_stride, divby=WIDEN_CHUNK), WIDEN_CHUNK, 1)))
        m_dst = cute.make_tensor(dst_ptr, cute.make_layout(
            (dst_rows, chunks, WIDEN_CHUNK),
            stride=(cute.assume(dst_stride, divby=WIDEN_CHUNK), WIDEN_CHUNK, 1)))
        m_si = cute.make_tensor(src_idx_ptr, cute.make_layout(max_rows))
        m_di = cute.make_tensor(dst_idx_ptr, cute.make_layout(max_rows))
        m_n = cute.make_tensor(n_ptr, cute.make_layout(1))
        n = cutlass.min(cutlass.max(Int32(m_n[0]), Int32(0)), max_rows)
        for i in range(bidx, n, gdim):
            s = Int32(m_si[i])
            d = Int32(m_di[i])
            m_row_sc = cute.make_tensor(sc_ptr + s * sc_stride,
                                        cute.make_layout(chunks * WIDEN_CHUNK // MX_BLOCK + 1))
            for w in range(tidx, chunks, THREADS):
                raw = cute.make_rmem_tensor(cute.make_layout(WIDEN_CHUNK), Uint8)
                raw.store(m_src[s, w, None].load())
                sb = Int32(m_row_sc[w * WIDEN_CHUNK // MX_BLOCK]) & 0xFF
                sbits = Int32(cutlass.select_(sb == Int32(0), Int32(0x00400000), sb << 23))
                sbits = Int32(cutlass.select_(sb == Int32(0xFF), Int32(0x7FC00000), sbits))
                scale = i2f(sbits)
                wide = cute.make_rmem_tensor(cute.make_layout(WIDEN_CHUNK), BFloat16)
                for j in cutlass.range_constexpr(WIDEN_CHUNK):
                    wide[j] = (decode(Int32(raw[j]) & 0xFF) * scale).to(BFloat16)
                m_dst[d, w, None].store(wide.load())

    @cute.jit
    def launch(
        src_ptr: cute.Pointer, src_rows: Int32, src_stride: Int32,
        sc_ptr: cute.Pointer, sc_stride: Int32,
        dst_ptr: cute.Pointer, dst_rows: Int32, dst_stride: Int32,
        chunks: Int32,
        src_idx_ptr: cute.Pointer, dst_idx_ptr: cute.Pointer,
        n_ptr: cute.Pointer, max_rows: Int32, blocks: Int32,
        stream: cuda.CUstream,
    ):
        kernel(
            src_ptr, src_rows, src_stride, sc_ptr, sc_stride, dst_ptr, dst_rows, dst_stride,
            chunks, src_idx_ptr, dst_idx_ptr, n_ptr, max_rows,
        ).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1], stream=stream)

    return launch


NVFP4_BLOCK = 16
E2M1_TWICE = (0, 1, 2, 3, 4, 6, 8, 12)
"""Twice the E2M1 magnitude of codes 0..7 (exact small integers)."""


@cute.jit
def e2m1_to_float(code: Int32) -> Float32:
    """The value of an E2M1 code (bit 3 the sign; CONTRACTS.md s4)."""
    m = code & 7
    ex = (m >> 1) & 3
    twice = Int32(cutlass.select_(ex == Int32(0), m & 1, ((m & 1) + 2) << (ex - 1)))
    v = Float32(twice) * Float32(0.5)
    return Float32(cutlass.select_((code & 8) != Int32(0), -v, v))


@cute.kernel
def _widen_nvfp4_kernel(
    src_ptr: cute.Pointer, src_rows: Int32, src_stride: Int32,
    sc_ptr: cute.Pointer, sc_stride: Int32,
    dst_ptr: cute.Pointer, dst_rows: Int32, dst_stride: Int32,
    blocks: Int32,
    src_idx_ptr: cute.Pointer, dst_idx_ptr: cute.Pointer,
    n_ptr: cute.Pointer, max_rows: Int32,
):
    """``dst[di[i]] = bf16(e2m1(codes) * float32(e4m3 scale))`` for ``i < n``, one E4M3
    scale per 16 elements (8 packed bytes): the NVFP4 A1 gather without the global scale
    (exact: at most 6 significant bits; a NaN scale gives a NaN block)."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    gdim, _, _ = cute.arch.grid_dim()
    half = NVFP4_BLOCK // 2
    m_src = cute.make_tensor(src_ptr, cute.make_layout(
        (src_rows, blocks, half), stride=(cute.assume(src_stride, divby=half), half, 1)))
    m_sc = cute.make_tensor(sc_ptr, cute.make_layout((src_rows, blocks), stride=(sc_stride, 1)))
    m_dst = cute.make_tensor(dst_ptr, cute.make_layout(
        (dst_rows, blocks, 2, 8), stride=(cute.assume(dst_stride, divby=8), NVFP4_BLOCK, 8, 1)))
    m_si = cute.make_tensor(src_idx_ptr, cute.make_layout(max_rows))
    m_di = cute.make_tensor(dst_idx_ptr, cute.make_layout(max_rows))
    m_n = cute.make_tensor(n_ptr, cute.make_layout(1))
    n = cutlass.min(cutlass.max(Int32(m_n[0]), Int32(0)), max_rows)
    for i in range(bidx, n, gdim):
        s = Int32(m_si[i])
        d = Int32(m_di[i])
        for w in range(tidx, blocks, THREADS):
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


@cute.jit
def widen_nvfp4_launch(
    src_ptr: cute.Pointer, src_rows: Int32, src_stride: Int32,
    sc_ptr: cute.Pointer, sc_stride: Int32,
    dst_ptr: cute.Pointer, dst_rows: Int32, dst_stride: Int32,
    blocks: Int32,
    src_idx_ptr: cute.Pointer, dst_idx_ptr: cute.Pointer,
    n_ptr: cute.Pointer, max_rows: Int32, grid: Int32,
    stream: cuda.CUstream,
):
    _widen_nvfp4_kernel(
        src_ptr, src_rows, src_stride, sc_ptr, sc_stride, dst_ptr, dst_rows, dst_stride,
        blocks, src_idx_ptr, dst_idx_ptr, n_ptr, max_rows,
    ).launch(grid=[grid, 1, 1], block=[THREADS, 1, 1], stream=stream)


INDEX_TYPES = {"int32": Int32, "int64": Int64}


def _ptr(dtype, align: int, addr: int = _FAKE_ADDR):
    return make_ptr(dtype, addr, cute.AddressSpace.gmem, assumed_align=align)


def compile_permute(index_dtype: str, count_dtype: str):
    """``cute.compile`` the permute for one (index dtype, count dtype); every size and
    pointer is a runtime argument (row strides in int32 units, multiples of 4)."""
    it, ct = INDEX_TYPES[index_dtype], INDEX_TYPES[count_dtype]
    i0 = Int32(0)
    return cute.compile(
        permute_launch,
        _ptr(Int32, WORD_BYTES), i0, i0, _ptr(Int32, WORD_BYTES), i0, i0, i0,
        _ptr(it, it.width // 8), _ptr(it, it.width // 8), _ptr(ct, ct.width // 8), i0, i0,
        cuda.CUstream(0),
    )


def compile_widen(index_dtype: str, count_dtype: str):
    """``cute.compile`` the E4M3 -> bf16 widening permute for one (index dtype, count
    dtype); sizes, strides and pointers are runtime arguments."""
    it, ct = INDEX_TYPES[index_dtype], INDEX_TYPES[count_dtype]
    i0 = Int32(0)
    return cute.compile(
        widen_launch,
        _ptr(Uint8, WIDEN_CHUNK), i0, i0, _ptr(Int16, 2 * WIDEN_CHUNK), i0, i0, i0,
        _ptr(it, it.width // 8), _ptr(it, it.width // 8), _ptr(ct, ct.width // 8), i0, i0,
        cuda.CUstream(0),
    )


def compile_widen_mx(elem: str, index_dtype: str, count_dtype: str):
    """``cute.compile`` the MXFP8 dequantizing gather for one (element type, index dtype,
    count dtype); sizes, strides and pointers are runtime arguments."""
    it, ct = INDEX_TYPES[index_dtype], INDEX_TYPES[count_dtype]
    i0 = Int32(0)
    return cute.compile(
        _make_widen_mx(elem),
        _ptr(Uint8, WIDEN_CHUNK), i0, i0, _ptr(Uint8, 1), i0,
        _ptr(BFloat16, 2 * WIDEN_CHUNK), i0, i0, i0,
        _ptr(it, it.width // 8), _ptr(it, it.width // 8), _ptr(ct, ct.width // 8), i0, i0,
        cuda.CUstream(0),
    )


def compile_widen_nvfp4(index_dtype: str, count_dtype: str):
    """``cute.compile`` the NVFP4 dequantizing gather (runtime sizes and pointers)."""
    it, ct = INDEX_TYPES[index_dtype], INDEX_TYPES[count_dtype]
    i0 = Int32(0)
    return cute.compile(
        widen_nvfp4_launch,
        _ptr(Uint8, 8), i0, i0, _ptr(Uint8, 1), i0,
        _ptr(BFloat16, 16), i0, i0, i0,
        _ptr(it, it.width // 8), _ptr(it, it.width // 8), _ptr(ct, ct.width // 8), i0, i0,
        cuda.CUstream(0),
    )


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
