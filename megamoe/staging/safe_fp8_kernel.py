"""Kernel C: per-token safe FP8 quantization (the ``fp8_mxfp4`` recipe's activation
quantizer) fused with route staging and the route value checks, one CuTe DSL launch
(docs/contract.md s2-s4).

Grid: ``splits`` row blocks of ``SAFE_THREADS`` threads per input row ``r < rows`` (the host
row count, capped at ``C``), then ``ceil((C - rows) / SAFE_THREADS)`` route blocks, one
thread per capacity row ``[rows, C)`` (all dead: ``live <= rows``). Live row ``r``: each row
block takes the largest ``bits & 0x7FFFFFFF`` of the whole row (exact for bf16; NaN/Inf
detected by the same bits; each thread over its elements, then the warp by shuffles, then
the block through one shared word per warp), so every block of the row has the same
float32 ``amax``; every thread then computes ``d`` by the tiny / normal path of docs/contract.md
s4 with one IEEE float32 operation per step (constants are float32 bit patterns) and
writes the E4M3 payload of its elements of the block's ``1 / splits`` slice of the row
(``sat_cast(x * q)`` on the tiny path, ``sat_cast(x / d)`` otherwise, the division an IEEE
float32 division). Block 0 of the row writes the 4-lane float32 scale wire. A row holding
NaN/Inf gets ``d = NaN``, an all-0x7F payload and (checks on, and the row has an active
slot: docs/contract.md s4.safe-fp8-inactive-row) the row failure ``non_finite_input``. Once ``amax`` is known, one thread of block 0 stages the row's routes
(kernel A's route code), merging that failure, while the others write the payload; rows
``[T, C)`` are rewritten too. ``splits > 1`` spreads
a few rows over more multiprocessors (each block re-reads the row for ``amax``).

Element access: with ``vec != 0`` (the caller checked a 16-byte aligned ``x16_ptr`` and a
row stride that is a multiple of 8 elements; payload rows, ``H`` bytes apart with
``H % 32 == 0``, start 16-byte aligned in the workspace) a thread handles 8-element
chunks ``tidx + k * SAFE_THREADS``, ``SAFE_UNROLL`` 16-byte loads in flight, writing 8
payload bytes per chunk as one vector; otherwise one element per access. The arithmetic
is the same either way (the max reduction is order independent). ``x16_ptr`` /
``p16_ptr`` are never dereferenced when ``vec == 0``.
"""

from __future__ import annotations

import struct

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils as cutlass_utils
from cutlass import Float32, Int16, Int32, Uint8

from megamoe.kernel_registry import register_kernel
from megamoe.pdl import PDL, await_inputs
from megamoe.staging import constants as c
from megamoe.staging.dsl_bits import i2f, make_sat_fp8, sel
from megamoe.staging.route_kernel import (
    VEC_ALIGN,
    RouteArgs,
    _ptr,
    chunked_rows,
    compile_stage,
    make_route_rows,
    stage_prologue,
)

WARP = 32
SAFE_THREADS = 256  # threads per row block (and per route block)
SAFE_WARPS = SAFE_THREADS // WARP
SAFE_UNROLL = 4  # 16-byte chunks per thread per step (loads in flight)
VEC_ELEMS = 8  # bf16 elements per 16-byte vector
SMEM_BYTES = 4 * SAFE_WARPS
SAFE_MAX_SPLITS = 8  # most row blocks per row (few-row calls)
ROUTE_THREAD = SAFE_THREADS - 1  # stages the row's routes (the last warp has the least payload)


def f32_bits(v: float) -> int:
    """The bits of float32(v) (round to nearest even from the Python double)."""
    return struct.unpack("<i", struct.pack("<f", v))[0]


def fsel(cond, a, b) -> Float32:
    return Float32(cutlass.select_(cond, Float32(a), Float32(b)))


_B_FMAX = f32_bits(c.SAFE_FP8_FMAX)
_B_TINY = f32_bits(c.SAFE_FP8_TINY)
_B_SAFE_MIN = f32_bits(c.SAFE_FP8_SAFE_MIN)
_B_ZERO_D = f32_bits(c.SAFE_FP8_ZERO_SCALE)
_B_INV = f32_bits(1.0 / c.SAFE_FP8_FMAX)
_B_FLT_MAX = f32_bits(c.FLT_MAX)
_B_ONE = f32_bits(1.0)
_B_NAN = 0x7FC00000



@cute.jit
def block_max(v: Int32, red, lane: Int32, warp: Int32, warps: int) -> Int32:
    """The largest ``v`` of a block's ``warps`` warps, in every thread (this one: ``lane`` of
    ``warp``): per warp by shuffles, then through ``warps`` int32 of shared memory ``red``
    (the caller synchronizes before ``red`` is written again)."""
    v = cute.arch.warp_reduction_max(v)
    if lane == Int32(0):
        red[warp] = v
    cute.arch.sync_threads()
    out = red[0]
    for w in cutlass.range_constexpr(1, warps):
        out = cutlass.max(out, red[w])
    return out

@cute.jit
def safe_fp8_scale(amax_b: Int32):
    """``(q, d, bad, tiny)`` of a row from the bits of its float32 ``amax`` (docs/contract.md s4,
    safe FP8): one IEEE float32 operation per step, constants as float32 bit patterns.
    ``bad`` (Int32 0/1): the row holds NaN/Inf (``d`` is then NaN); ``tiny`` (0/1): the tiny
    path (payload ``sat(x * q)``; otherwise ``sat(x / d)``)."""
    bad = amax_b >= Int32(0x7F800000)
    amax = i2f(amax_b)
    tiny = (amax_b > Int32(0)) & (amax < i2f(Int32(_B_TINY)))
    safe_min = i2f(Int32(_B_SAFE_MIN))
    q_raw = i2f(Int32(_B_FMAX)) / fsel(amax > safe_min, amax, safe_min)
    flt_max = i2f(Int32(_B_FLT_MAX))
    q = fsel(q_raw > flt_max, flt_max, q_raw)
    d_tiny = i2f(Int32(_B_ONE)) / q
    prod = amax * i2f(Int32(_B_INV))
    zero_d = i2f(Int32(_B_ZERO_D))
    d_norm = fsel(prod > zero_d, prod, zero_d)
    d = fsel(tiny, d_tiny, d_norm)
    d = fsel(bad, i2f(Int32(_B_NAN)), d)
    return q, d, sel(bad, 1, 0), sel(tiny, 1, 0)


def _make(K: int):
    route_rows = make_route_rows(K)
    sat_e4m3 = make_sat_fp8("e4m3")

    @cute.kernel
    def _safe_fp8_stage_kernel(
        route: RouteArgs,
        x_ptr: cute.Pointer, x_s0: Int32, hidden: Int32,
        p_ptr: cute.Pointer, d_ptr: cute.Pointer,
        vec: Int32, x16_ptr: cute.Pointer, p16_ptr: cute.Pointer,
        splits: Int32, row_blocks: Int32,
    ):
        await_inputs()
        tidx, bidx, _, nrows, live = stage_prologue(route)
        capacity = route.capacity
        smem = cutlass_utils.SmemAllocator()
        red = smem.allocate_tensor(Int32, cute.make_layout(SAFE_WARPS), 16)
        lane = tidx % WARP
        warp = tidx // WARP
        if bidx < row_blocks:
            row = bidx // splits
            part = bidx - row * splits
            m_x = cute.make_tensor(x_ptr, cute.make_layout((nrows, hidden), stride=(x_s0, 1)))
            m_p = cute.make_tensor(p_ptr, cute.make_layout((capacity, hidden), stride=(hidden, 1)))
            m_d = cute.make_tensor(d_ptr, cute.make_layout((capacity, 4), stride=(4, 1)))
            nch = hidden // VEC_ELEMS
            cps = (nch + splits - 1) // splits
            lo = part * cps
            hi = cutlass.min(lo + cps, nch)
            v_x = chunked_rows(x16_ptr, nrows, nch, VEC_ELEMS, x_s0, VEC_ELEMS)
            v_p = chunked_rows(p16_ptr, capacity, nch, VEC_ELEMS, hidden, VEC_ELEMS)
            extra = Int32(0)
            bad_i = Int32(0)
            tiny_i = Int32(0)
            q = Float32(0.0)
            d = Float32(0.0)
            if row < live:
                amax_b = Int32(0)
                if vec != Int32(0):
                    for c0 in range(tidx, nch, SAFE_THREADS * SAFE_UNROLL):
                        frags = []
                        for u in cutlass.range_constexpr(SAFE_UNROLL):
                            f = cute.make_rmem_tensor(cute.make_layout(VEC_ELEMS), Int16)
                            f.fill(0)
                            if c0 + u * SAFE_THREADS < nch:
                                f.store(v_x[row, c0 + u * SAFE_THREADS, None].load())
                            frags.append(f)
                        for u in cutlass.range_constexpr(SAFE_UNROLL):
                            for e in cutlass.range_constexpr(VEC_ELEMS):
                                b = (Int32(frags[u][e]) & 0xFFFF) << 16
                                amax_b = cutlass.max(amax_b, b & 0x7FFFFFFF)
                else:
                    for i in range(tidx, hidden, SAFE_THREADS):
                        b = (Int32(m_x[row, i]) & 0xFFFF) << 16
                        amax_b = cutlass.max(amax_b, b & 0x7FFFFFFF)
                q, d, bad_i, tiny_i = safe_fp8_scale(block_max(amax_b, red, lane, warp,
                                                               SAFE_WARPS))
                extra = sel(bad_i != Int32(0), c.ROW_CODE_NON_FINITE_INPUT, 0)
            # the row's routes (its failure code is known): one thread, while the others
            # write the payload
            if (part == Int32(0)) & (tidx == Int32(ROUTE_THREAD)):
                route_rows(
                    row, live, nrows, route, extra,
                )
            if row < live:
                bad = bad_i != Int32(0)
                tiny = tiny_i != Int32(0)
                if vec != Int32(0):
                    for c0 in range(lo + tidx, hi, SAFE_THREADS * SAFE_UNROLL):
                        frags = []
                        for u in cutlass.range_constexpr(SAFE_UNROLL):
                            f = cute.make_rmem_tensor(cute.make_layout(VEC_ELEMS), Int16)
                            if c0 + u * SAFE_THREADS < hi:
                                f.store(v_x[row, c0 + u * SAFE_THREADS, None].load())
                            frags.append(f)
                        for u in cutlass.range_constexpr(SAFE_UNROLL):
                            if c0 + u * SAFE_THREADS < hi:
                                pf = cute.make_rmem_tensor(cute.make_layout(VEC_ELEMS), Uint8)
                                for e in cutlass.range_constexpr(VEC_ELEMS):
                                    x = i2f((Int32(frags[u][e]) & 0xFFFF) << 16)
                                    v = fsel(tiny, x * q, x / d)
                                    pf[e] = Uint8(sel(bad, 0x7F, sat_e4m3(v)))
                                v_p[row, c0 + u * SAFE_THREADS, None].store(pf.load())
                else:
                    for i in range(lo * VEC_ELEMS + tidx, hi * VEC_ELEMS, SAFE_THREADS):
                        x = i2f((Int32(m_x[row, i]) & 0xFFFF) << 16)
                        v = fsel(tiny, x * q, x / d)
                        m_p[row, i] = Uint8(sel(bad, 0x7F, sat_e4m3(v)))
                if (part == Int32(0)) & (tidx < Int32(4)):
                    m_d[row, tidx] = d
        else:
            route_rows(
                row_blocks // splits + (bidx - row_blocks) * SAFE_THREADS + tidx, live, nrows,
                route, Int32(0),
            )

    @cute.jit
    def safe_fp8_stage_launch(
        ids_ptr: cute.Pointer, s_i0: Int32, s_i1: Int32,
        sc_ptr: cute.Pointer, s_s0: Int32, s_s1: Int32,
        rows: Int32, live_host: Int32, use_dev_live: Int32, live_ptr: cute.Pointer,
        out_ids_ptr: cute.Pointer, out_sc_ptr: cute.Pointer, row_code_ptr: cute.Pointer,
        bad_id_ptr: cute.Pointer, bad_sc_ptr: cute.Pointer, status_ptr: cute.Pointer,
        capacity: Int32, num_experts: Int32, check: Int32, reset: Int32,
        x_ptr: cute.Pointer, x_s0: Int32, hidden: Int32,
        p_ptr: cute.Pointer, d_ptr: cute.Pointer,
        vec: Int32, x16_ptr: cute.Pointer, p16_ptr: cute.Pointer,
        splits: Int32, row_blocks: Int32, blocks: Int32,
        stream: cuda.CUstream,
    ):
        _safe_fp8_stage_kernel(
            RouteArgs(ids_ptr, s_i0, s_i1, sc_ptr, s_s0, s_s1, rows, live_host, use_dev_live,
                      live_ptr, out_ids_ptr, out_sc_ptr, row_code_ptr, bad_id_ptr, bad_sc_ptr,
                      status_ptr, capacity, num_experts, check, reset),
            x_ptr, x_s0, hidden, p_ptr, d_ptr, vec, x16_ptr, p16_ptr, splits, row_blocks,
        ).launch(grid=[blocks, 1, 1], block=[SAFE_THREADS, 1, 1], smem=SMEM_BYTES,
                 stream=stream, use_pdl=PDL)

    return safe_fp8_stage_launch


def compile_safe_fp8_stage(top_k: int, id_dtype: str, score_dtype: str):
    """``cute.compile`` kernel C for one (K, id dtype, score dtype)."""
    i0 = Int32(0)
    return compile_stage(_make(top_k), id_dtype, score_dtype,
                         _ptr(Int16), i0, i0, _ptr(Uint8), _ptr(Float32),
                         i0, _ptr(Int16, align=VEC_ALIGN), _ptr(Uint8, align=VEC_ALIGN),
                         i0, i0, i0)


@register_kernel("safe_fp8_stage_k8_i64_f32")
def build_safe_fp8_stage():
    return compile_safe_fp8_stage(8, "int64", "float32")
