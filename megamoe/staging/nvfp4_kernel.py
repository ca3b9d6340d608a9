"""Kernel D: BF16 -> NVFP4 (layer input global scale ``g``) fused with route staging and
the route value checks, one CuTe DSL launch (docs/contract.md s2-s4).

Grid: ``route_blocks`` blocks run kernel A's route code; the rest quantize, one thread
per (live row, 16-element block). Per block, one IEEE float32 operation per step:
``s = e4m3(clamp((amax / 6) / g, 2**-6, 448))`` (the cast by the bit-exact saturating RNE
of ``dsl_bits``), ``r = (1 / g) / float32(s)``, ``code = e2m1(clamp(x * r, -6, 6))`` with
ties to the even code and no sign on code 0; two codes per byte, even element in the low
nibble. A block holding NaN/Inf gets scale byte 0x7F and codes 0. ``g`` arrives as the
bits of float32(g).

With ``vec != 0`` (the caller checked a 16-byte aligned ``x16_ptr`` and a row stride that
is a multiple of 8 elements; payload rows are ``H / 2`` bytes apart, a multiple of 8, and
start 16-byte aligned in the workspace) a thread reads its 16 inputs as two 16-byte
vectors and writes its 8 payload bytes as one 8-byte vector; otherwise one element per
access. The arithmetic is the same in both variants. ``x16_ptr`` / ``p16_ptr`` are never
dereferenced when ``vec == 0``.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int16, Int32, Uint8

from megamoe.kernel_registry import register_kernel
from megamoe.pdl import PDL, await_inputs
from megamoe.staging import constants as c
from megamoe.staging.dsl_bits import f2i, i2f, make_sat_fp8, sel
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
from megamoe.staging.safe_fp8_kernel import f32_bits, fsel

BLOCK = 16
VEC_ELEMS = 8  # bf16 elements per 16-byte vector
E2M1_THRESHOLDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


@cute.jit
def e2m1_code(v: Float32) -> Int32:
    """E2M1 code of a finite float32 already clamped to [-6, 6]: nearest, ties to the even
    code, sign bit (8) only on non-zero codes."""
    vb = f2i(v)
    mag = i2f(vb & 0x7FFFFFFF)
    code = Int32(0)
    for i in cutlass.range_constexpr(len(E2M1_THRESHOLDS)):
        t = Float32(E2M1_THRESHOLDS[i])
        if cutlass.const_expr((i + 1) % 2 == 0):
            code = code + sel(mag >= t, 1, 0)
        else:
            code = code + sel(mag > t, 1, 0)
    neg = (vb < Int32(0)) & (code != Int32(0))
    return code | sel(neg, 8, 0)


_B_SIX = f32_bits(c.E2M1_MAX)
_B_TINY = f32_bits(c.E4M3_TINY)
_B_MAX = f32_bits(c.E4M3_MAX)
_B_ONE = f32_bits(1.0)
_sat_e4m3 = make_sat_fp8("e4m3")


@cute.jit
def nvfp4_block_scale(amax_b: Int32, g: Float32, inv_g: Float32):
    """``(scode, s, r)`` of one NVFP4 block from the bits of its float32 ``amax``
    (docs/contract.md s4): ``scode = e4m3(clamp((amax / 6) / g, 2**-6, 448))`` (the byte),
    ``s = float32(scode)``, ``r = (1 / g) / s`` (``inv_g`` = ``1 / g``), one IEEE float32
    operation per step."""
    six = i2f(Int32(_B_SIX))
    p = (i2f(amax_b) / six) / g
    p = fsel(p < i2f(Int32(_B_TINY)), i2f(Int32(_B_TINY)), p)
    p = fsel(p > i2f(Int32(_B_MAX)), i2f(Int32(_B_MAX)), p)
    scode = _sat_e4m3(p)
    s32 = i2f((((scode >> 3) + 120) << 23) | ((scode & 7) << 20))
    return scode, s32, inv_g / s32


def _make(K: int):
    route_rows = make_route_rows(K)
    b_one = _B_ONE

    @cute.kernel
    def _nvfp4_stage_kernel(
        route: RouteArgs,
        x_ptr: cute.Pointer, x_s0: Int32, hidden: Int32,
        p_ptr: cute.Pointer, s_ptr: cute.Pointer, g_bits: Int32,
        vec: Int32, x16_ptr: cute.Pointer, p16_ptr: cute.Pointer,
        route_blocks: Int32,
    ):
        await_inputs()
        tidx, bidx, gdim, nrows, live = stage_prologue(route)
        capacity = route.capacity
        if bidx < route_blocks:
            route_rows(bidx * THREADS + tidx, live, nrows, route, Int32(0))
        else:
            half = hidden // 2
            nblk = hidden // BLOCK
            m_x = cute.make_tensor(x_ptr, cute.make_layout((nrows, hidden), stride=(x_s0, 1)))
            m_p = cute.make_tensor(p_ptr, cute.make_layout((capacity, half), stride=(half, 1)))
            m_s = cute.make_tensor(s_ptr, cute.make_layout((capacity, nblk), stride=(nblk, 1)))
            v_x = chunked_rows(x16_ptr, nrows, nblk, BLOCK, x_s0, VEC_ELEMS)
            v_p = chunked_rows(p16_ptr, capacity, nblk, BLOCK // 2, half, BLOCK // 2)
            g = i2f(g_bits)
            inv_g = i2f(Int32(b_one)) / g
            six = i2f(Int32(_B_SIX))
            start = (bidx - route_blocks) * THREADS + tidx
            stride = (gdim - route_blocks) * THREADS
            for i in range(start, live * nblk, stride):
                r = i // nblk
                j = i - r * nblk
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
                scode, _s32, rr = nvfp4_block_scale(amax_b, g, inv_g)
                pf = cute.make_rmem_tensor(cute.make_layout(BLOCK // 2), Uint8)
                for q in cutlass.range_constexpr(BLOCK // 2):
                    v0 = i2f(bits[2 * q]) * rr
                    v1 = i2f(bits[2 * q + 1]) * rr
                    v0 = fsel(v0 > six, six, fsel(v0 < -six, -six, v0))
                    v1 = fsel(v1 > six, six, fsel(v1 < -six, -six, v1))
                    byte = e2m1_code(v0) | (e2m1_code(v1) << 4)
                    pf[q] = Uint8(sel(bad, 0, byte))
                if vec != Int32(0):
                    v_p[r, j, None].store(pf.load())
                else:
                    for q in cutlass.range_constexpr(BLOCK // 2):
                        m_p[r, j * (BLOCK // 2) + q] = pf[q]
                m_s[r, j] = Uint8(sel(bad, 0x7F, scode))

    @cute.jit
    def nvfp4_stage_launch(
        ids_ptr: cute.Pointer, s_i0: Int32, s_i1: Int32,
        sc_ptr: cute.Pointer, s_s0: Int32, s_s1: Int32,
        rows: Int32, live_host: Int32, use_dev_live: Int32, live_ptr: cute.Pointer,
        out_ids_ptr: cute.Pointer, out_sc_ptr: cute.Pointer, row_code_ptr: cute.Pointer,
        bad_id_ptr: cute.Pointer, bad_sc_ptr: cute.Pointer, status_ptr: cute.Pointer,
        capacity: Int32, num_experts: Int32, check: Int32, reset: Int32,
        x_ptr: cute.Pointer, x_s0: Int32, hidden: Int32,
        p_ptr: cute.Pointer, s_ptr: cute.Pointer, g_bits: Int32,
        vec: Int32, x16_ptr: cute.Pointer, p16_ptr: cute.Pointer,
        route_blocks: Int32, quant_blocks: Int32,
        stream: cuda.CUstream,
    ):
        _nvfp4_stage_kernel(
            RouteArgs(ids_ptr, s_i0, s_i1, sc_ptr, s_s0, s_s1, rows, live_host, use_dev_live,
                      live_ptr, out_ids_ptr, out_sc_ptr, row_code_ptr, bad_id_ptr, bad_sc_ptr,
                      status_ptr, capacity, num_experts, check, reset),
            x_ptr, x_s0, hidden, p_ptr, s_ptr, g_bits, vec, x16_ptr, p16_ptr, route_blocks,
        ).launch(grid=[route_blocks + quant_blocks, 1, 1], block=[THREADS, 1, 1],
                 stream=stream, use_pdl=PDL)

    return nvfp4_stage_launch


def compile_nvfp4_stage(top_k: int, id_dtype: str, score_dtype: str):
    """``cute.compile`` kernel D for one (K, id dtype, score dtype); g is a runtime value."""
    i0 = Int32(0)
    return compile_stage(_make(top_k), id_dtype, score_dtype,
                         _ptr(Int16), i0, i0, _ptr(Uint8), _ptr(Uint8), i0,
                         i0, _ptr(Int16, align=VEC_ALIGN), _ptr(Uint8, align=VEC_ALIGN), i0, i0)


@register_kernel("nvfp4_stage_k8_i64_f32")
def build_nvfp4_stage():
    return compile_nvfp4_stage(8, "int64", "float32")
