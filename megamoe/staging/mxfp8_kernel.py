"""Kernel B: BF16 -> MXFP8 (E4M3 / E5M2; ``rceil`` / ``floor``) fused with route staging
and the route value checks, one CuTe DSL launch (docs/contract.md s2-s4).

Grid: ``route_blocks`` blocks run the route part of kernel A (``make_route_rows``), the
rest quantize: one thread per (live row, scale column); columns ``< H/32`` quantize one
32-element block, padding columns write scale byte 0.

Per block (docs/contract.md s4), all bit-exact (``dsl_bits``): ``amax`` from the largest
``bits & 0x7FFFFFFF`` (exact for bf16 input; NaN/Inf blocks detected by the same bits);
``rceil``: ``d = amax / fmax`` (one float32 division), ``e = ceil(log2(d))`` from the bits
of ``d``; ``floor``: ``e = floor(log2(amax)) - emax_elem`` from the bits of ``amax``;
``e`` clamped to [-127, 127]; byte ``e + 127`` (0 for an all-zero block, 0xFF for a
NaN/Inf block, whose payload is all 0x7F); payload = sat_cast(x * 2**-e), the product one
float32 multiply by an exact power of two.

With ``vec != 0`` (the caller checked a 16-byte aligned ``x16_ptr`` and a row stride that
is a multiple of 8 elements; the payload rows, ``H`` bytes apart with ``H % 32 == 0``,
start 16-byte aligned in the workspace) a thread reads its 32 inputs as four 16-byte
vectors and writes its 32 payload bytes as two; otherwise one element per access. The
arithmetic is the same in both variants. ``x16_ptr`` / ``p16_ptr`` are never dereferenced
when ``vec == 0``.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int16, Int32, Uint8

from megamoe.kernel_registry import register_kernel
from megamoe.pdl import PDL, await_inputs
from megamoe.staging.dsl_bits import (
    i2f,
    make_mx_exponent,
    make_sat_fp8,
    pow2,
    sel,
)
from megamoe.staging.route_kernel import (
    THREADS,
    VEC_ALIGN,
    RouteArgs,
    _ptr,
    chunked_rows,
    compile_stage,
    make_route_rows,
    stage_prologue,
)

BLOCK = 32
VEC_ELEMS = 8  # bf16 elements per 16-byte vector


def _make(K: int, elem: str, mode: str):
    route_rows = make_route_rows(K)
    sat_fp8 = make_sat_fp8(elem)
    mx_exponent = make_mx_exponent(elem, mode)

    @cute.kernel
    def _mxfp8_stage_kernel(
        route: RouteArgs,
        x_ptr: cute.Pointer, x_s0: Int32, hidden: Int32,
        p_ptr: cute.Pointer, s_ptr: cute.Pointer, ncols: Int32,
        vec: Int32, x16_ptr: cute.Pointer, p16_ptr: cute.Pointer,
        route_blocks: Int32,
    ):
        await_inputs()
        tidx, bidx, gdim, nrows, live = stage_prologue(route)
        capacity = route.capacity
        if bidx < route_blocks:
            route_rows(bidx * THREADS + tidx, live, nrows, route, Int32(0))
        else:
            m_x = cute.make_tensor(x_ptr, cute.make_layout((nrows, hidden), stride=(x_s0, 1)))
            m_p = cute.make_tensor(p_ptr, cute.make_layout((capacity, hidden), stride=(hidden, 1)))
            m_s = cute.make_tensor(s_ptr, cute.make_layout((capacity, ncols), stride=(ncols, 1)))
            nblk = hidden // BLOCK
            v_x = chunked_rows(x16_ptr, nrows, nblk, BLOCK, x_s0, VEC_ELEMS)
            v_p = chunked_rows(p16_ptr, capacity, nblk, BLOCK, hidden, BLOCK)
            start = (bidx - route_blocks) * THREADS + tidx
            stride = (gdim - route_blocks) * THREADS
            for i in range(start, live * ncols, stride):
                r = i // ncols
                j = i - r * ncols
                if j < nblk:
                    base = j * BLOCK
                    xf = cute.make_rmem_tensor(cute.make_layout(BLOCK), Int16)
                    if vec != Int32(0):
                        xf.store(v_x[r, j, None].load())
                    else:
                        for q in cutlass.range_constexpr(BLOCK):
                            xf[q] = m_x[r, base + q]
                    bits = []
                    amax_b = Int32(0)
                    for q in cutlass.range_constexpr(BLOCK):
                        b = (Int32(xf[q]) & 0xFFFF) << 16
                        bits.append(b)
                        amax_b = cutlass.max(amax_b, b & 0x7FFFFFFF)
                    bad = amax_b >= Int32(0x7F800000)
                    e, byte = mx_exponent(amax_b)
                    scale = pow2(Int32(0) - e)
                    pf = cute.make_rmem_tensor(cute.make_layout(BLOCK), Uint8)
                    for q in cutlass.range_constexpr(BLOCK):
                        code = sat_fp8(i2f(bits[q]) * scale)
                        pf[q] = Uint8(sel(bad, 0x7F, code))
                    if vec != Int32(0):
                        v_p[r, j, None].store(pf.load())
                    else:
                        for q in cutlass.range_constexpr(BLOCK):
                            m_p[r, base + q] = pf[q]
                    m_s[r, j] = Uint8(byte)
                else:
                    m_s[r, j] = Uint8(0)

    @cute.jit
    def mxfp8_stage_launch(
        ids_ptr: cute.Pointer, s_i0: Int32, s_i1: Int32,
        sc_ptr: cute.Pointer, s_s0: Int32, s_s1: Int32,
        rows: Int32, live_host: Int32, use_dev_live: Int32, live_ptr: cute.Pointer,
        out_ids_ptr: cute.Pointer, out_sc_ptr: cute.Pointer, row_code_ptr: cute.Pointer,
        bad_id_ptr: cute.Pointer, bad_sc_ptr: cute.Pointer, status_ptr: cute.Pointer,
        capacity: Int32, num_experts: Int32, check: Int32, reset: Int32,
        x_ptr: cute.Pointer, x_s0: Int32, hidden: Int32,
        p_ptr: cute.Pointer, s_ptr: cute.Pointer, ncols: Int32,
        vec: Int32, x16_ptr: cute.Pointer, p16_ptr: cute.Pointer,
        route_blocks: Int32, quant_blocks: Int32,
        stream: cuda.CUstream,
    ):
        _mxfp8_stage_kernel(
            RouteArgs(ids_ptr, s_i0, s_i1, sc_ptr, s_s0, s_s1, rows, live_host, use_dev_live,
                      live_ptr, out_ids_ptr, out_sc_ptr, row_code_ptr, bad_id_ptr, bad_sc_ptr,
                      status_ptr, capacity, num_experts, check, reset),
            x_ptr, x_s0, hidden, p_ptr, s_ptr, ncols, vec, x16_ptr, p16_ptr, route_blocks,
        ).launch(grid=[route_blocks + quant_blocks, 1, 1], block=[THREADS, 1, 1],
                 stream=stream, use_pdl=PDL)

    return mxfp8_stage_launch


def compile_mxfp8_stage(top_k: int, id_dtype: str, score_dtype: str, elem: str, mode: str):
    """``cute.compile`` kernel B for one (K, id dtype, score dtype, element, mode)."""
    i0 = Int32(0)
    return compile_stage(_make(top_k, elem, mode), id_dtype, score_dtype,
                         _ptr(Int16), i0, i0, _ptr(Uint8), _ptr(Uint8), i0,
                         i0, _ptr(Int16, align=VEC_ALIGN), _ptr(Uint8, align=VEC_ALIGN), i0, i0)


@register_kernel("mxfp8_stage_k8_i64_f32_e4m3_rceil")
def build_mxfp8_stage_e4m3_rceil():
    return compile_mxfp8_stage(8, "int64", "float32", "e4m3", "rceil")


@register_kernel("mxfp8_stage_k4_i32_bf16_e5m2_floor")
def build_mxfp8_stage_e5m2_floor():
    return compile_mxfp8_stage(4, "int32", "bfloat16", "e5m2", "floor")
