"""A2 of the ``fp8_mxfp4`` recipe: safe FP8 per row over the float32 SwiGLU output, one
CuTe DSL launch (docs/contract.md s4 safe FP8, s5 step 5).

The safe-FP8 scale of a row spans all ``I`` columns, which no FC1 tile sees whole (a tile
holds ``tile_n / 2`` of them), so FC1 writes ``act`` in float32 and this kernel quantizes
each listed row (``rows[i]`` for ``i < n``, the GEMM rows of the routes, read on the device):

- ``amax`` = the largest ``bits & 0x7FFFFFFF`` of the row (exact; NaN/Inf seen by the same
  bits): per thread over 16-byte loads, per warp by shuffles, per block through shared
  memory; ``(q, d)`` by ``megamoe.staging.safe_fp8_kernel.safe_fp8_scale`` (the staging
  kernel's own code, one IEEE float32 operation per step);
- payload ``e4m3_sat(x * q)`` (tiny path) or ``e4m3_sat(x / d)``, written as its exact bf16
  value (the GEMM operand FC2 reads; every E4M3 value is a bf16 value, so its bits are the
  top half of the float32 bits; NaN is ``0x7FC0``), and ``d`` to all
  four lanes of the scale wire ``[M_cap, 4]`` (FC2 multiplies its accumulators by it);
- a row holding NaN/Inf gets ``d = NaN`` and NaN payload (its outputs become NaN, never a
  plausible value; the oracle refuses such an A2).

Grid: ``min(max_rows, MAX_BLOCKS)`` blocks of ``THREADS``; block ``b`` takes the listed rows
``rows[b], rows[b + grid], ...`` below ``n`` (work scales with the live routes, spread evenly
over the blocks). Rows not listed, and listed rows outside ``[0, M_cap)``, are neither read
nor written.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils as cutlass_utils
from cutlass import BFloat16, Float32, Int16, Int32, Int64
from cutlass.cute.runtime import make_ptr

from megamoe.kernel_registry import register_kernel
from megamoe.pdl import PDL, await_inputs
from megamoe.staging.dsl_bits import (
    e2m1_to_float,
    e4m3_to_float,
    e5m2_to_float,
    f2i,
    i2f,
    make_mx_exponent,
    make_sat_fp8,
    pow2,
    sel,
)
from megamoe.staging.nvfp4_kernel import e2m1_code, nvfp4_block_scale
from megamoe.staging.safe_fp8_kernel import block_max, fsel, safe_fp8_scale

THREADS = 128
WARPS = THREADS // 32
VEC = 4
"""float32 per 16-byte load (``I`` is a multiple of it)."""
LANES = 4
"""Columns of the scale wire (docs/contract.md s4)."""
MAX_BLOCKS = 1024
_FAKE_ADDR = 1 << 20

_sat_e4m3 = make_sat_fp8("e4m3")


@cute.jit
def _for_listed_rows(rows_ptr: cute.Pointer, n_ptr: cute.Pointer, max_rows: Int32,
                     m_cap: Int32, row, ctx):
    """``row(r, ctx)`` (a ``@cute.jit`` function, inlined) for ``r = rows[i]``, ``i = bid,
    bid + grid, ...`` below ``min(max(n, 0), max_rows)`` (``rows`` and ``n`` int64, both
    read on the device); an ``r`` outside ``[0, M_cap)`` is skipped (module docstring)."""
    bidx, _, _ = cute.arch.block_idx()
    gdim, _, _ = cute.arch.grid_dim()
    m_rows = cute.make_tensor(rows_ptr, cute.make_layout(max_rows))
    m_n = cute.make_tensor(n_ptr, cute.make_layout(1))
    n = Int32(cutlass.min(cutlass.max(m_n[0], Int64(0)), Int64(max_rows)))
    for i in range(bidx, n, gdim):
        r = m_rows[i]
        if (r >= Int64(0)) & (r < Int64(m_cap)):
            row(Int32(r), ctx)


@cute.jit
def _safe_fp8_row(r: Int32, ctx):
    """Safe FP8 of row ``r`` (module docstring); ``ctx = (m_act, m_out, m_d, red, nvec)``."""
    m_act, m_out, m_d, red, nvec = ctx
    tidx, _, _ = cute.arch.thread_idx()
    lane = tidx % 32
    warp = tidx // 32
    amax_b = Int32(0)
    for c in range(tidx, nvec, THREADS):
        f = cute.make_rmem_tensor(cute.make_layout(VEC), Float32)
        f.store(m_act[r, c, None].load())
        for j in cutlass.range_constexpr(VEC):
            amax_b = cutlass.max(amax_b, f2i(f[j]) & 0x7FFFFFFF)
    q, d, bad_i, tiny_i = safe_fp8_scale(block_max(amax_b, red, lane, warp, WARPS))
    bad = bad_i != Int32(0)
    tiny = tiny_i != Int32(0)
    for c in range(tidx, nvec, THREADS):
        f = cute.make_rmem_tensor(cute.make_layout(VEC), Float32)
        f.store(m_act[r, c, None].load())
        o = cute.make_rmem_tensor(cute.make_layout(VEC), Int16)
        for j in cutlass.range_constexpr(VEC):
            x = Float32(f[j])
            v = fsel(tiny, x * q, x / d)
            # the payload's exact bf16 value: the top half of its float32 bits
            o[j] = Int16(f2i(e4m3_to_float(sel(bad, 0x7F, _sat_e4m3(v)))) >> 16)
        m_out[r, c, None].store(o.load())
    if tidx < Int32(LANES):
        m_d[r, tidx] = d
    cute.arch.sync_threads()  # `red` is reused by the next row


@cute.kernel
def _a2_kernel(
    act_ptr: cute.Pointer, out_ptr: cute.Pointer, d_ptr: cute.Pointer,
    rows_ptr: cute.Pointer, n_ptr: cute.Pointer,
    m_cap: Int32, cols: Int32, max_rows: Int32,
):
    await_inputs()
    smem = cutlass_utils.SmemAllocator()
    red = smem.allocate_tensor(Int32, cute.make_layout(WARPS), 16)
    nvec = cols // VEC
    row_s = cute.assume(cols, divby=VEC)
    m_act = cute.make_tensor(act_ptr, cute.make_layout((m_cap, nvec, VEC), stride=(row_s, VEC, 1)))
    m_out = cute.make_tensor(out_ptr, cute.make_layout((m_cap, nvec, VEC), stride=(row_s, VEC, 1)))
    m_d = cute.make_tensor(d_ptr, cute.make_layout((m_cap, LANES), stride=(LANES, 1)))
    _for_listed_rows(rows_ptr, n_ptr, max_rows, m_cap, _safe_fp8_row,
                     (m_act, m_out, m_d, red, nvec))


@cute.jit
def a2_launch(
    act_ptr: cute.Pointer, out_ptr: cute.Pointer, d_ptr: cute.Pointer,
    rows_ptr: cute.Pointer, n_ptr: cute.Pointer,
    m_cap: Int32, cols: Int32, max_rows: Int32, blocks: Int32, stream: cuda.CUstream,
):
    _a2_kernel(act_ptr, out_ptr, d_ptr, rows_ptr, n_ptr, m_cap, cols, max_rows).launch(
        grid=[blocks, 1, 1], block=[THREADS, 1, 1], smem=4 * WARPS + 16, stream=stream, use_pdl=PDL
    )


def _ptr(dtype, align: int):
    return make_ptr(dtype, _FAKE_ADDR, cute.AddressSpace.gmem, assumed_align=align)


def compile_a2_safe_fp8():
    """``cute.compile`` the A2 quantizer; every size and pointer is a runtime argument
    ``(act, a2, d, rows, n, M_cap, I, max_rows, blocks, stream)``."""
    i0 = Int32(0)
    return cute.compile(
        a2_launch, _ptr(Float32, 16), _ptr(Int16, 8), _ptr(Float32, 16),
        _ptr(Int64, 8), _ptr(Int64, 8), i0, i0, i0, i0, cuda.CUstream(0),
    )


@cute.jit
def _load_block(m_act, r: Int32, b: Int32, block: int):
    """Block ``b`` of row ``r`` (``block`` float32, 16-byte loads) in registers, and the
    largest ``bits & 0x7FFFFFFF`` of its values (NaN/Inf seen by the same bits)."""
    x = cute.make_rmem_tensor(cute.make_layout(block), Float32)
    for v in cutlass.range_constexpr(block // VEC):
        f = cute.make_rmem_tensor(cute.make_layout(VEC), Float32)
        f.store(m_act[r, b, v, None].load())
        for j in cutlass.range_constexpr(VEC):
            x[v * VEC + j] = f[j]
    amax_b = Int32(0)
    for j in cutlass.range_constexpr(block):
        amax_b = cutlass.max(amax_b, f2i(x[j]) & 0x7FFFFFFF)
    return x, amax_b


@cute.jit
def _block_row(r: Int32, ctx):
    """One thread per block of row ``r``: ``out = encode(amax, pre)(x)`` element by element,
    stored 8 bf16 (16 bytes) at a time; ``ctx = (m_act, m_out, nblk, block, encode, pre)``."""
    m_act, m_out, nblk, block, encode, pre = ctx
    tidx, _, _ = cute.arch.thread_idx()
    for b in range(tidx, nblk, THREADS):
        x, amax_b = _load_block(m_act, r, b, block)
        value = encode(amax_b, pre)
        for v in cutlass.range_constexpr(block // 8):
            o = cute.make_rmem_tensor(cute.make_layout(8), BFloat16)
            for j in cutlass.range_constexpr(8):
                o[j] = value(Float32(x[v * 8 + j]))
            m_out[r, b, v, None].store(o.load())


def _make_block_launch(block: int, encode, prepare=None):
    """The launcher of a block-scaled A2 quantizer: every live row of the float32 ``act``,
    blocks of ``block`` along ``I`` (one thread per block; blocks of ``THREADS`` threads walk
    the live rows as ``_a2_kernel`` does), written as bf16. ``encode(amax_bits, pre)``
    returns the per-element map float32 -> bf16 of a block, ``pre = prepare(g_bits)`` is
    computed once per thread (``None`` without ``prepare``). Runtime arguments ``(act, a2,
    rows, n, M_cap, I, max_rows, g_bits, blocks, stream)``."""

    @cute.kernel
    def kernel(
        act_ptr: cute.Pointer, out_ptr: cute.Pointer,
        rows_ptr: cute.Pointer, n_ptr: cute.Pointer,
        m_cap: Int32, cols: Int32, max_rows: Int32, g_bits: Int32,
    ):
        await_inputs()
        nblk = cols // block
        row_s = cute.assume(cols, divby=block)
        m_act = cute.make_tensor(act_ptr, cute.make_layout(
            (m_cap, nblk, block // VEC, VEC), stride=(row_s, block, VEC, 1)))
        m_out = cute.make_tensor(out_ptr, cute.make_layout(
            (m_cap, nblk, block // 8, 8), stride=(row_s, block, 8, 1)))
        pre = None
        if cutlass.const_expr(prepare is not None):
            pre = prepare(g_bits)
        _for_listed_rows(rows_ptr, n_ptr, max_rows, m_cap, _block_row,
                         (m_act, m_out, nblk, block, encode, pre))

    @cute.jit
    def launch(
        act_ptr: cute.Pointer, out_ptr: cute.Pointer,
        rows_ptr: cute.Pointer, n_ptr: cute.Pointer,
        m_cap: Int32, cols: Int32, max_rows: Int32, g_bits: Int32, blocks: Int32,
        stream: cuda.CUstream,
    ):
        kernel(act_ptr, out_ptr, rows_ptr, n_ptr, m_cap, cols, max_rows, g_bits).launch(
            grid=[blocks, 1, 1], block=[THREADS, 1, 1], stream=stream, use_pdl=PDL
        )

    return launch


def _compile_block(launch):
    """``cute.compile`` a ``_make_block_launch`` launcher (runtime sizes and pointers)."""
    i0 = Int32(0)
    return cute.compile(
        launch, _ptr(Float32, 16), _ptr(BFloat16, 16),
        _ptr(Int64, 8), _ptr(Int64, 8), i0, i0, i0, i0, i0, cuda.CUstream(0),
    )


MX_BLOCK = 32
_FP8_DECODE = {"e4m3": e4m3_to_float, "e5m2": e5m2_to_float}


def _make_mx(elem: str, mode: str):
    """A2 of the ``mxfp8`` recipe (docs/contract.md s4 MXFP8, s5 step 5): blocks of 32 along
    ``I``, quantized with the staging kernel's exponent and cast (``make_mx_exponent``,
    ``make_sat_fp8``) and written as the dequantized value ``fp8(code) * 2**e`` rounded to
    bf16 (exact unless below 2**-130): the operand FC2 multiplies. A NaN/Inf block gives
    NaN. ``g_bits`` is not read."""
    sat = make_sat_fp8(elem)
    exponent = make_mx_exponent(elem, mode)
    decode = _FP8_DECODE[elem]

    def encode(amax_b: Int32, _pre):
        ex, byte = exponent(amax_b)
        bad = byte == Int32(0xFF)
        down = pow2(Int32(0) - ex)
        up = pow2(ex)
        return lambda x: (decode(sel(bad, 0x7F, sat(x * down))) * up).to(BFloat16)

    return _make_block_launch(MX_BLOCK, encode)


def compile_a2_mxfp8(elem: str, mode: str):
    """``cute.compile`` the MXFP8 A2 quantizer for one (element type, scale mode); runtime
    arguments ``(act, a2, rows, n, M_cap, I, max_rows, g_bits (unread), blocks,
    stream)``."""
    return _compile_block(_make_mx(elem, mode))


NVFP4_BLOCK = 16


def _nvfp4_prepare(g_bits: Int32):
    """``(g, 1 / g)`` from the bits of the layer's A2 scale ``g``."""
    g = i2f(g_bits)
    return g, Float32(1.0) / g


def _nvfp4_encode(amax_b: Int32, pre):
    """A2 of the ``nvfp4`` recipe (docs/contract.md s4 NVFP4, s5 step 5): blocks of 16 along
    ``I``, quantized with ``g`` by the staging kernel's block arithmetic
    (``nvfp4_block_scale``, ``e2m1_code``), written as ``e2m1(code) * float32(s)`` in bf16
    (exact), **without** ``g``: FC2 applies it in float32. A NaN/Inf block gives NaN."""
    g, inv_g = pre
    six = Float32(6.0)
    bad = amax_b >= Int32(0x7F800000)
    _scode, s32, rr = nvfp4_block_scale(amax_b, g, inv_g)
    s32 = fsel(bad, i2f(Int32(0x7FC00000)), s32)

    def value(x: Float32):
        y = x * rr
        y = fsel(y > six, six, fsel(y < -six, -six, y))
        return (e2m1_to_float(sel(bad, 0, e2m1_code(y))) * s32).to(BFloat16)

    return value


a2_nvfp4_launch = _make_block_launch(NVFP4_BLOCK, _nvfp4_encode, _nvfp4_prepare)


def compile_a2_nvfp4():
    """``cute.compile`` the NVFP4 A2 quantizer; runtime arguments ``(act, a2, rows, n,
    M_cap, I, max_rows, g_bits, blocks, stream)``."""
    return _compile_block(a2_nvfp4_launch)


@register_kernel("a2_nvfp4")
def build_a2_nvfp4():
    return compile_a2_nvfp4()


@register_kernel("a2_mxfp8_e4m3_rceil")
def build_a2_mxfp8_e4m3():
    return compile_a2_mxfp8("e4m3", "rceil")


@register_kernel("a2_mxfp8_e5m2_floor")
def build_a2_mxfp8_e5m2():
    return compile_a2_mxfp8("e5m2", "floor")


@register_kernel("a2_safe_fp8")
def build_a2_safe_fp8():
    return compile_a2_safe_fp8()
