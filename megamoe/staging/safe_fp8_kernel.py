"""Kernel C: per-token safe FP8 quantization (the ``fp8_mxfp4`` recipe's activation
quantizer) fused with route staging and the route value checks, one CuTe DSL launch
(CONTRACTS s2-s4).

One warp per capacity row. Live rows: the lanes take the row's float32 ``amax`` (largest
``bits & 0x7FFFFFFF``, exact for bf16; NaN/Inf detected by the same bits), reduce it over
the warp, compute ``d`` by the tiny / normal path of CONTRACTS s4 with one IEEE float32
operation per step (constants are float32 bit patterns), write the E4M3 payload
(``sat_cast(x * q)`` on the tiny path, ``sat_cast(x / d)`` otherwise) and the 4-lane
float32 scale wire. A row holding NaN/Inf gets ``d = NaN``, an all-0x7F payload and (checks
on) the row failure ``non_finite_input``. Lane 0 then stages the row's routes (kernel A's
route code), merging that failure, so rows ``[T, C)`` are rewritten too.
"""

from __future__ import annotations

import struct

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Float64, Int16, Int32, Int64, Uint8

from megamoe.kernel_registry import register_kernel
from megamoe.staging import constants as c
from megamoe.staging.dsl_bits import i2f, make_sat_fp8, sel
from megamoe.staging.route_kernel import ID_TYPES, SCORE_TYPES, THREADS, _ptr, make_route_rows

WARP = 32
ROWS_PER_BLOCK = THREADS // WARP


def f32_bits(v: float) -> int:
    """The bits of float32(v) (round to nearest even from the Python double)."""
    return struct.unpack("<i", struct.pack("<f", v))[0]


def fsel(cond, a, b) -> Float32:
    return Float32(cutlass.select_(cond, Float32(a), Float32(b)))


def _make(K: int):
    route_rows = make_route_rows(K)
    sat_e4m3 = make_sat_fp8("e4m3")
    b_fmax = f32_bits(c.SAFE_FP8_FMAX)
    b_tiny = f32_bits(c.SAFE_FP8_TINY)
    b_safe_min = f32_bits(c.SAFE_FP8_SAFE_MIN)
    b_zero_d = f32_bits(c.SAFE_FP8_ZERO_SCALE)
    b_inv = f32_bits(1.0 / c.SAFE_FP8_FMAX)
    b_flt_max = f32_bits(c.FLT_MAX)
    b_one = f32_bits(1.0)
    b_nan = 0x7FC00000

    @cute.kernel
    def _safe_fp8_stage_kernel(
        ids_ptr: cute.Pointer, s_i0: Int32, s_i1: Int32,
        sc_ptr: cute.Pointer, s_s0: Int32, s_s1: Int32,
        rows: Int32, live_host: Int32, use_dev_live: Int32, live_ptr: cute.Pointer,
        out_ids_ptr: cute.Pointer, out_sc_ptr: cute.Pointer, row_code_ptr: cute.Pointer,
        bad_id_ptr: cute.Pointer, bad_sc_ptr: cute.Pointer, status_ptr: cute.Pointer,
        capacity: Int32, num_experts: Int32, check: Int32, reset: Int32,
        x_ptr: cute.Pointer, x_s0: Int32, hidden: Int32,
        p_ptr: cute.Pointer, d_ptr: cute.Pointer,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        nrows = cutlass.max(rows, Int32(1))
        m_live = cute.make_tensor(live_ptr, cute.make_layout(1))
        live = live_host
        if use_dev_live != Int32(0):
            live = cutlass.min(cutlass.max(m_live[0], Int32(0)), rows)
        lane = tidx % WARP
        row = bidx * ROWS_PER_BLOCK + tidx // WARP
        if row < capacity:
            extra = Int32(0)
            if row < live:
                m_x = cute.make_tensor(x_ptr, cute.make_layout((nrows, hidden), stride=(x_s0, 1)))
                m_p = cute.make_tensor(
                    p_ptr, cute.make_layout((capacity, hidden), stride=(hidden, 1))
                )
                m_d = cute.make_tensor(d_ptr, cute.make_layout((capacity, 4), stride=(4, 1)))
                amax_b = Int32(0)
                for i in range(lane, hidden, WARP):
                    b = (Int32(m_x[row, i]) & 0xFFFF) << 16
                    amax_b = cutlass.max(amax_b, b & 0x7FFFFFFF)
                amax_b = cute.arch.warp_reduction_max(amax_b)
                bad = amax_b >= Int32(0x7F800000)
                amax = i2f(amax_b)
                tiny = (amax_b > Int32(0)) & (amax < i2f(Int32(b_tiny)))
                safe_min = i2f(Int32(b_safe_min))
                q_raw = i2f(Int32(b_fmax)) / fsel(amax > safe_min, amax, safe_min)
                flt_max = i2f(Int32(b_flt_max))
                q = fsel(q_raw > flt_max, flt_max, q_raw)
                d_tiny = i2f(Int32(b_one)) / q
                prod = amax * i2f(Int32(b_inv))
                zero_d = i2f(Int32(b_zero_d))
                d_norm = fsel(prod > zero_d, prod, zero_d)
                d = fsel(tiny, d_tiny, d_norm)
                d = fsel(bad, i2f(Int32(b_nan)), d)
                for i in range(lane, hidden, WARP):
                    x = i2f((Int32(m_x[row, i]) & 0xFFFF) << 16)
                    v = fsel(tiny, x * q, x / d)
                    m_p[row, i] = Uint8(sel(bad, 0x7F, sat_e4m3(v)))
                if lane < Int32(4):
                    m_d[row, lane] = d
                extra = sel(bad, c.ROW_CODE_NON_FINITE_INPUT, 0)
            if lane == Int32(0):
                route_rows(
                    row, live, nrows, ids_ptr, s_i0, s_i1, sc_ptr, s_s0, s_s1,
                    out_ids_ptr, out_sc_ptr, row_code_ptr, bad_id_ptr, bad_sc_ptr, status_ptr,
                    capacity, num_experts, check, reset, extra,
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
        blocks: Int32,
        stream: cuda.CUstream,
    ):
        _safe_fp8_stage_kernel(
            ids_ptr, s_i0, s_i1, sc_ptr, s_s0, s_s1, rows, live_host, use_dev_live, live_ptr,
            out_ids_ptr, out_sc_ptr, row_code_ptr, bad_id_ptr, bad_sc_ptr, status_ptr,
            capacity, num_experts, check, reset, x_ptr, x_s0, hidden, p_ptr, d_ptr,
        ).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1], stream=stream)

    return safe_fp8_stage_launch


def compile_safe_fp8_stage(top_k: int, id_dtype: str, score_dtype: str):
    """``cute.compile`` kernel C for one (K, id dtype, score dtype)."""
    it, st = ID_TYPES[id_dtype], SCORE_TYPES[score_dtype]
    i0 = Int32(0)
    return cute.compile(
        _make(top_k),
        _ptr(it), i0, i0, _ptr(st), i0, i0,
        i0, i0, i0, _ptr(Int32),
        _ptr(Int32), _ptr(Float32), _ptr(Int32), _ptr(Int64), _ptr(Float64), _ptr(Int32),
        i0, i0, i0, i0,
        _ptr(Int16), i0, i0, _ptr(Uint8), _ptr(Float32),
        i0,
        cuda.CUstream(0),
    )


@register_kernel("safe_fp8_stage_k8_i64_f32")
def build_safe_fp8_stage():
    return compile_safe_fp8_stage(8, "int64", "float32")
