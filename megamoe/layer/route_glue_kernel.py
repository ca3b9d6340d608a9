"""The layer's route tables from the dispatch layout, one CuTe DSL launch (docs/contract.md s3,
s5; semantics: ``megamoe.layer.route_glue``).

Every block first builds the padded segment starts in shared memory: ``seg[e]`` = the
exclusive prefix of ``round_up(max(expert_counts[e], 0), TILE_M)`` (a block-wide scan in
chunks of ``SCAN_THREADS`` experts); block 0 also writes ``counts`` (int32) and ``seg``.
Then the blocks stride over the routes ``i < N`` (``num_routes``, read on the device; work
scales with the live routes): with ``e = order_expert[i]`` and ``(rank, row, slot) =
order[i]``, the route's GEMM row is ``pos = seg[e] + i - expert_offsets[e]``, and the kernel
writes ``src_row[i] = row``, ``pos[i] = pos``, ``term_row[i] = row * K + slot``,
``row_scale[pos] = scores[row, slot]`` and, for ``nvfp4`` (``use_g``), all lanes of
``pre1[pos]`` / ``pre2[pos]`` = ``g_in * g_w13[e]`` / ``g_a2 * g_w2[e]`` (float32 products,
as the PyTorch path computes them). Entries ``i >= N`` are not written (nothing reads them).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils as cutlass_utils
from cutlass import Float32, Int32, Int64
from cutlass.cute.runtime import make_ptr

from megamoe.dispatch.layout_kernel import E_CAP, SCAN_THREADS, block_exclusive_scan
from megamoe.experts.grouped_gemm_kernel import TILE_M
from megamoe.kernel_registry import register_kernel
from megamoe.pdl import PDL, await_inputs

THREADS = SCAN_THREADS
MAX_BLOCKS = 264
LANES = 4
"""Columns of the per-row pre-scale wire (``megamoe.experts.api.PRE_LANES``)."""
_SMEM_ALIGN = 16
_SMEM_BYTES = (E_CAP + 1) * 4 + THREADS * 4 + 2 * _SMEM_ALIGN
_FAKE_ADDR = 1 << 20


@cute.kernel
def _glue_kernel(
    ecnt_ptr: cute.Pointer, eoff_ptr: cute.Pointer, order_ptr: cute.Pointer,
    oexp_ptr: cute.Pointer, n_ptr: cute.Pointer, scores_ptr: cute.Pointer,
    g_ptr: cute.Pointer, gw13_ptr: cute.Pointer, gw2_ptr: cute.Pointer,
    counts_ptr: cute.Pointer, seg_ptr: cute.Pointer, src_ptr: cute.Pointer,
    pos_ptr: cute.Pointer, term_ptr: cute.Pointer, rs_ptr: cute.Pointer,
    pre1_ptr: cute.Pointer, pre2_ptr: cute.Pointer,
    E: Int32, R: Int32, C: Int32, K: Int32, m_cap: Int32, use_g: Int32,
):
    await_inputs()
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    gdim, _, _ = cute.arch.grid_dim()
    smem = cutlass_utils.SmemAllocator()
    s_seg = smem.allocate_tensor(Int32, cute.make_layout(E_CAP + 1), _SMEM_ALIGN)
    buf = smem.allocate_tensor(Int32, cute.make_layout(THREADS), _SMEM_ALIGN)
    m_ecnt = cute.make_tensor(ecnt_ptr, cute.make_layout(E))
    m_eoff = cute.make_tensor(eoff_ptr, cute.make_layout(E + Int32(1)))
    m_counts = cute.make_tensor(counts_ptr, cute.make_layout(E))
    m_seg = cute.make_tensor(seg_ptr, cute.make_layout(E + Int32(1)))

    # padded segment starts (every block; block 0 publishes them and the int32 counts)
    carry = Int32(0)
    for c0 in range(0, E, THREADS):
        e = c0 + tidx
        v = Int32(0)
        if e < E:
            c = Int32(cutlass.max(m_ecnt[e], Int64(0)))
            v = (c + (TILE_M - 1)) // TILE_M * TILE_M
            if bidx == Int32(0):
                m_counts[e] = Int32(m_ecnt[e])
        excl, total = block_exclusive_scan(v, buf, tidx)
        if e < E:
            s_seg[e] = carry + excl
            if bidx == Int32(0):
                m_seg[e] = carry + excl
        carry = carry + total
    if tidx == Int32(0):
        s_seg[E] = carry
        if bidx == Int32(0):
            m_seg[E] = carry
    cute.arch.sync_threads()

    m_order = cute.make_tensor(order_ptr, cute.make_layout((R, 3), stride=(3, 1)))
    m_oexp = cute.make_tensor(oexp_ptr, cute.make_layout(R))
    m_n = cute.make_tensor(n_ptr, cute.make_layout(1))
    m_scores = cute.make_tensor(scores_ptr, cute.make_layout((C, K), stride=(K, 1)))
    m_src = cute.make_tensor(src_ptr, cute.make_layout(R))
    m_pos = cute.make_tensor(pos_ptr, cute.make_layout(R))
    m_term = cute.make_tensor(term_ptr, cute.make_layout(R))
    m_rs = cute.make_tensor(rs_ptr, cute.make_layout(m_cap + Int32(1)))
    m_g = cute.make_tensor(g_ptr, cute.make_layout(2))
    m_gw13 = cute.make_tensor(gw13_ptr, cute.make_layout(E))
    m_gw2 = cute.make_tensor(gw2_ptr, cute.make_layout(E))
    pre_layout = cute.make_layout((m_cap + Int32(1), LANES), stride=(LANES, 1))
    m_pre1 = cute.make_tensor(pre1_ptr, pre_layout)
    m_pre2 = cute.make_tensor(pre2_ptr, pre_layout)
    n = Int32(cutlass.min(cutlass.max(m_n[0], Int64(0)), Int64(R)))
    for i in range(bidx * THREADS + tidx, n, gdim * THREADS):
        e = Int32(m_oexp[i])
        row = m_order[i, 1]
        slot = m_order[i, 2]
        pos64 = Int64(s_seg[e]) + Int64(i) - m_eoff[e]
        pos = Int32(pos64)
        m_src[i] = row
        m_pos[i] = pos64
        m_term[i] = row * Int64(K) + slot
        m_rs[pos] = m_scores[Int32(row), Int32(slot)]
        if use_g != Int32(0):
            g1 = Float32(m_g[0]) * Float32(m_gw13[e])
            g2 = Float32(m_g[1]) * Float32(m_gw2[e])
            for j in cutlass.range_constexpr(LANES):
                m_pre1[pos, j] = g1
                m_pre2[pos, j] = g2


@cute.jit
def glue_launch(
    ecnt_ptr: cute.Pointer, eoff_ptr: cute.Pointer, order_ptr: cute.Pointer,
    oexp_ptr: cute.Pointer, n_ptr: cute.Pointer, scores_ptr: cute.Pointer,
    g_ptr: cute.Pointer, gw13_ptr: cute.Pointer, gw2_ptr: cute.Pointer,
    counts_ptr: cute.Pointer, seg_ptr: cute.Pointer, src_ptr: cute.Pointer,
    pos_ptr: cute.Pointer, term_ptr: cute.Pointer, rs_ptr: cute.Pointer,
    pre1_ptr: cute.Pointer, pre2_ptr: cute.Pointer,
    E: Int32, R: Int32, C: Int32, K: Int32, m_cap: Int32, use_g: Int32, blocks: Int32,
    stream: cuda.CUstream,
):
    _glue_kernel(
        ecnt_ptr, eoff_ptr, order_ptr, oexp_ptr, n_ptr, scores_ptr, g_ptr, gw13_ptr, gw2_ptr,
        counts_ptr, seg_ptr, src_ptr, pos_ptr, term_ptr, rs_ptr, pre1_ptr, pre2_ptr,
        E, R, C, K, m_cap, use_g,
    ).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1], smem=_SMEM_BYTES,
             stream=stream, use_pdl=PDL)


def _ptr(dtype, align: int):
    return make_ptr(dtype, _FAKE_ADDR, cute.AddressSpace.gmem, assumed_align=align)


def compile_route_glue():
    """``cute.compile`` the route-table kernel; every size and pointer is a runtime
    argument (``glue_launch``'s)."""
    i64, i32, f32 = _ptr(Int64, 8), _ptr(Int32, 4), _ptr(Float32, 4)
    i0 = Int32(0)
    return cute.compile(
        glue_launch, i64, i64, i64, i64, i64, f32, f32, f32, f32,
        i32, i32, i64, i64, i64, f32, f32, f32,
        i0, i0, i0, i0, i0, i0, i0, cuda.CUstream(0),
    )


@register_kernel("route_glue")
def build_route_glue():
    return compile_route_glue()
