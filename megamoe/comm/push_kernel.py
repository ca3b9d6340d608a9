"""Rows to peers: ``peer(dest[i])[dst_index[i]] = src[src_index[i]]`` for ``i < n``, one
CuTe DSL launch (docs/contract.md s7: dispatch sends each active slot's A1 row, scales and
score to the owner rank; the owner sends each term back to its source rank).

The destination of row ``i`` is rank ``dest[i]``'s copy of a symmetric region, reached
through the region's peer-pointer table only (``table[d]``: the address of rank d's copy
as this rank maps it; ``megamoe.comm.symmetric_workspace``), so the kernel is the same in
every world. ``n`` is read on the device (a count the layout wrote), so a captured forward
replays with new routes; blocks of rows ``>= n`` do nothing.

Rows move in units of ``unit`` int32 words: 4 (16-byte vectors: row bytes, row strides and
every base 16-byte aligned, which the launcher checks) or 1 (any row of whole words: the
E8M0 scale rows of a small ``H`` and the 4-byte scores). Grid: ``min(max_rows,
MAX_BLOCKS)`` blocks of ``THREADS`` threads, grid-stride over rows; the threads of a block
stride over the units of a row. Nothing else is written; no atomics. The stores are plain
weak stores: the step's signal (``megamoe.comm.signal_kernel``) orders them before its
flags.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64
from cutlass.cute.runtime import make_ptr

from megamoe.kernel_registry import register_kernel
from megamoe.pdl import PDL, await_inputs

THREADS = 128
MAX_BLOCKS = 2048
UNITS = (4, 1)
"""int32 words per unit: the 16-byte vector variant and the word variant."""
_FAKE_ADDR = 1 << 20


def _make_push(unit: int):
    """The push launcher for ``unit`` words per unit (module docstring)."""
    align = 4 * unit

    @cute.kernel
    def kernel(src_ptr: cute.Pointer, src_rows: Int32, src_stride: Int32, units: Int32,
               table_ptr: cute.Pointer, size: Int32, dst_stride: Int32,
               dest_ptr: cute.Pointer, src_idx_ptr: cute.Pointer, dst_idx_ptr: cute.Pointer,
               n_ptr: cute.Pointer, max_rows: Int32):
        await_inputs()
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        m_src = cute.make_tensor(src_ptr, cute.make_layout(
            (src_rows, units, unit), stride=(cute.assume(src_stride, divby=unit), unit, 1)))
        m_tab = cute.make_tensor(table_ptr, cute.make_layout(size))
        m_dest = cute.make_tensor(dest_ptr, cute.make_layout(max_rows))
        m_si = cute.make_tensor(src_idx_ptr, cute.make_layout(max_rows))
        m_di = cute.make_tensor(dst_idx_ptr, cute.make_layout(max_rows))
        m_n = cute.make_tensor(n_ptr, cute.make_layout(1))
        n = cutlass.min(cutlass.max(Int32(m_n[0]), Int32(0)), max_rows)
        for i in range(bidx, n, gdim):
            s = Int32(m_si[i])
            row = m_tab[Int32(m_dest[i])] + Int64(4) * Int64(dst_stride) * m_di[i]
            dst = cute.make_tensor(
                cute.make_ptr(Int32, row, cute.AddressSpace.gmem, assumed_align=align),
                cute.make_layout((units, unit), stride=(unit, 1)))
            for w in range(tidx, units, THREADS):
                dst[w, None].store(m_src[s, w, None].load())

    @cute.jit
    def launch(src_ptr: cute.Pointer, src_rows: Int32, src_stride: Int32, units: Int32,
               table_ptr: cute.Pointer, size: Int32, dst_stride: Int32,
               dest_ptr: cute.Pointer, src_idx_ptr: cute.Pointer, dst_idx_ptr: cute.Pointer,
               n_ptr: cute.Pointer, max_rows: Int32, blocks: Int32, stream: cuda.CUstream):
        kernel(src_ptr, src_rows, src_stride, units, table_ptr, size, dst_stride, dest_ptr,
               src_idx_ptr, dst_idx_ptr, n_ptr, max_rows).launch(
            grid=[blocks, 1, 1], block=[THREADS, 1, 1], stream=stream, use_pdl=PDL)

    return launch


_LAUNCHERS = {u: _make_push(u) for u in UNITS}


def compile_push(unit: int):
    """The push for ``unit`` words per unit; every size, stride, count and address is a
    runtime argument (indices, destinations and the count are int64)."""
    gm = cute.AddressSpace.gmem
    i0 = Int32(0)

    def p(ty, align: int):
        return make_ptr(ty, _FAKE_ADDR, gm, assumed_align=align)

    return cute.compile(
        _LAUNCHERS[unit], p(Int32, 4 * unit), i0, i0, i0, p(Int64, 8), i0, i0, p(Int64, 8),
        p(Int64, 8), p(Int64, 8), p(Int64, 8), i0, i0, cuda.CUstream(0),
    )


@register_kernel("ep_push_v4")
def build_push_v4():
    return compile_push(4)


@register_kernel("ep_push_v1")
def build_push_v1():
    return compile_push(1)
