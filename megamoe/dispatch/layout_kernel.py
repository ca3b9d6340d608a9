"""Dispatch-layout kernels (CuTe DSL, sm_90a): histogram, offsets, stable order, extents.

Semantics: ``megamoe.dispatch.api.DispatchLayoutResult`` (docs/contract.md s3, s8; bitwise equal to
the oracle's dispatch layout). Input: staged ids int32 ``[P, C, K]`` (any strides); a slot is
active iff ``0 <= id < E``. Each rank's slots are read in flat order ``f = row * K + k``.

Four launches on one stream (all capture-safe: every output is rewritten on every launch
from the ids alone, so a replay with changed routes never sees stale state):

1. ``count`` (grid ``tiles_per_rank x P``): each tile of ``TILE`` consecutive flat slots of one
   rank counts its active slots per expert and finds its extent (largest ``row + 1`` with an
   active slot, 0 when none). Warps aggregate equal experts with ``match.any`` so each expert
   is touched once per 32 slots. This pass reads every staged id (a coalesced read of
   ``C*K`` int32 per rank) and nothing else scales with capacity.
2. ``scan`` (grid ``E``): per expert, the exclusive prefix of the tile counts in tile order
   (rank-major), and ``counts[p, e]``, ``expert_counts[e]``.
3. ``finalize`` (one block): ``expert_offsets`` (exclusive prefix), ``rank_counts``,
   ``active_extent`` (max of the tile extents of each rank) and the route total ``N``.
4. ``scatter`` (grid ``tiles_per_rank x P``): tiles with extent 0 exit at once, and warps
   whose slots all lie at or beyond the tile's extent skip their work, so the ranking and
   the writes scale with the live routes, not with capacity. A slot's position is
   ``expert_offsets[e] + tile prefix + earlier warps of the tile + earlier slots of the warp
   + earlier lanes of the same 32-slot step with the same expert``: exactly the stable order
   ``(expert, src_rank, row, slot)``. Entries ``order[N:]`` are not written.

One launch for one rank with ``C*K <= TILE`` (``_one_launch_kernel``, one CTA: the decode-size
batches of a one-GPU layer): the same four steps in one block, with the tile counts, bases
and extents in shared memory (the workspace's scratch regions are not touched); each warp's
base for an expert is the sum of the earlier warps' counts, so positions are the same stable
order. Four launches took 12.9 us of a 1-token DeepSeek forward on the H200 (docs/perf.md).

No global atomics: every count comes from a fixed tree, so the result is deterministic.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils as cutlass_utils
from cutlass import Int32, Int64
from cutlass.cute.runtime import make_ptr

from megamoe.dispatch.warp_ops import lanemask_lt, match_any
from megamoe.kernel_registry import register_kernel
from megamoe.pdl import PDL, await_inputs

THREADS = 256
WARPS = THREADS // 32
ITERS = 8
SEG = 32 * ITERS  # flat slots per warp per tile
TILE = WARPS * SEG  # flat slots per tile (2048)
E_CAP = 1024  # largest expert count the kernels handle (smem [WARPS, E_CAP] int32 = 32 KiB)
SCAN_THREADS = 256
assert SCAN_THREADS == THREADS  # the one-launch kernel scans with its whole block
_LOG2_SCAN = 8
_WCNT_BYTES = WARPS * E_CAP * 4
_SCAN_BYTES = SCAN_THREADS * 4
_SMEM_ALIGN = 16


def tiles_per_rank(capacity: int, top_k: int) -> int:
    """Tiles of ``TILE`` flat slots that cover one rank's ``C*K`` slots."""
    return max(1, (capacity * top_k + TILE - 1) // TILE)


@cute.jit
def block_exclusive_scan(v, buf, tidx):
    """Exclusive prefix of ``v`` over the ``SCAN_THREADS`` threads, and the block total.

    ``buf``: shared int32 [SCAN_THREADS]. Hillis-Steele; every thread must call it."""
    buf[tidx] = v
    cute.arch.sync_threads()
    for step in cutlass.range_constexpr(_LOG2_SCAN):
        off = 1 << step
        x = buf[tidx]
        y = buf[cutlass.max(tidx - off, Int32(0))]
        y = Int32(cutlass.select_(tidx >= off, y, Int32(0)))
        cute.arch.sync_threads()
        buf[tidx] = x + y
        cute.arch.sync_threads()
    incl = buf[tidx]
    total = buf[SCAN_THREADS - 1]
    cute.arch.sync_threads()
    return incl - v, total


@cute.jit
def _load_step(m_ids, p, f, limit, K, E):
    """The id at flat slot ``f`` of rank ``p`` (``-1`` when ``f >= limit``), its row and slot,
    whether it is active, and its match key (the id, or ``E`` for every inactive lane).
    The load address is clamped into ``[0, limit)`` so the load needs no branch."""
    fc = cutlass.min(f, limit - Int32(1))
    rowc = fc // K
    eid = m_ids[p, rowc, fc - rowc * K]
    eid = Int32(cutlass.select_(f < limit, eid, Int32(-1)))
    row = f // K
    k = f - row * K
    active = (eid >= Int32(0)) & (eid < E)
    key = Int32(cutlass.select_(active, eid, E))
    return eid, row, k, active, key


@cute.jit
def _count_segment(m_ids, p, seg0, limit, K, E, wcnt, warp, lane, lt):
    """Per-warp counts of active slots per expert over flat slots ``[seg0, seg0 + SEG)`` that
    are ``< limit``, added into ``wcnt[warp, e]``; returns this lane's largest ``row + 1``
    with an active slot (0 when none). Warp-uniform: all 32 lanes must call it. All ``ITERS``
    loads are issued before the first use."""
    steps = []
    for it in cutlass.range_constexpr(ITERS):
        steps.append(_load_step(m_ids, p, seg0 + Int32(it * 32) + lane, limit, K, E))
    mrow = Int32(0)
    for it in cutlass.range_constexpr(ITERS):
        eid, row, _k, active, key = steps[it]
        peers = match_any(key)
        if active & ((peers & lt) == Int32(0)):
            wcnt[warp, eid] = wcnt[warp, eid] + cute.arch.popc(peers)
        mrow = cutlass.max(mrow, Int32(cutlass.select_(active, row + Int32(1), Int32(0))))
        cute.arch.sync_warp()
    return mrow


@cute.jit
def _scatter_segment(m_ids, p, seg0, limit, K, E, wcnt, warp, lane, lt, m_order, m_oe):
    """Write ``(p, row, slot)`` and the expert of every active slot among flat slots
    ``[seg0, seg0 + SEG)`` below ``limit`` at its stable position: ``wcnt[warp, e]`` (this
    warp's first position for expert ``e``, advanced as it goes) plus the earlier lanes of
    the same 32-slot step with the same expert. Warp-uniform: all 32 lanes must call it."""
    steps = []
    for it in cutlass.range_constexpr(ITERS):
        steps.append(_load_step(m_ids, p, seg0 + Int32(it * 32) + lane, limit, K, E))
    for it in cutlass.range_constexpr(ITERS):
        eid, row, k, active, key = steps[it]
        peers = match_any(key)
        if active:
            pos = wcnt[warp, eid] + cute.arch.popc(peers & lt)
            m_order[pos, 0] = Int64(p)
            m_order[pos, 1] = Int64(row)
            m_order[pos, 2] = Int64(k)
            m_oe[pos] = Int64(eid)
        cute.arch.sync_warp()
        if active & ((peers & lt) == Int32(0)):
            wcnt[warp, eid] = wcnt[warp, eid] + cute.arch.popc(peers)
        cute.arch.sync_warp()


@cute.jit
def _warp_counts(tidx):
    """``(warp, lane, smem, wcnt)``: this thread's warp and lane, the block's shared-memory
    allocator, and the per-warp expert counts ``wcnt [WARPS, E_CAP]`` allocated first."""
    warp = tidx // 32
    smem = cutlass_utils.SmemAllocator()
    wcnt = smem.allocate_tensor(
        Int32, cute.make_layout((WARPS, E_CAP), stride=(E_CAP, 1)), _SMEM_ALIGN
    )
    return warp, tidx - warp * 32, smem, wcnt


@cute.jit
def _store_warp_extent(mrow, wext, warp, lane):
    """``wext[warp]`` = the largest ``mrow`` of the warp's lanes (a butterfly max; all 32
    lanes must call it)."""
    for sh in cutlass.range_constexpr(5):
        other = cute.arch.shuffle_sync_bfly(mrow, offset=1 << (4 - sh))
        mrow = cutlass.max(mrow, other)
    if lane == Int32(0):
        wext[warp] = mrow


@cute.jit
def _zero_wcnt(wcnt, tidx, E):
    for e in range(tidx, E, THREADS):
        for w in cutlass.range_constexpr(WARPS):
            wcnt[w, e] = Int32(0)


@cute.kernel
def _count_kernel(
    ids_ptr: cute.Pointer, sp: Int32, sc: Int32, sk: Int32,
    P: Int32, C: Int32, K: Int32, E: Int32, tpr: Int32,
    tile_counts_ptr: cute.Pointer, tile_ext_ptr: cute.Pointer,
):
    await_inputs()
    tidx, _, _ = cute.arch.thread_idx()
    tile, p, _ = cute.arch.block_idx()
    warp, lane, smem, wcnt = _warp_counts(tidx)
    wext = smem.allocate_tensor(Int32, cute.make_layout(WARPS), _SMEM_ALIGN)
    m_ids = cute.make_tensor(ids_ptr, cute.make_layout((P, C, K), stride=(sp, sc, sk)))
    m_tc = cute.make_tensor(tile_counts_ptr, cute.make_layout((P * tpr, E), stride=(E, 1)))
    m_te = cute.make_tensor(tile_ext_ptr, cute.make_layout(P * tpr))
    _zero_wcnt(wcnt, tidx, E)
    cute.arch.sync_threads()
    lt = lanemask_lt()
    seg0 = tile * TILE + warp * SEG
    mrow = _count_segment(m_ids, p, seg0, C * K, K, E, wcnt, warp, lane, lt)
    _store_warp_extent(mrow, wext, warp, lane)
    cute.arch.sync_threads()
    tg = p * tpr + tile
    for e in range(tidx, E, THREADS):
        s = Int32(0)
        for w in cutlass.range_constexpr(WARPS):
            s = s + wcnt[w, e]
        m_tc[tg, e] = s
    if tidx == Int32(0):
        m = Int32(0)
        for w in cutlass.range_constexpr(WARPS):
            m = cutlass.max(m, wext[w])
        m_te[tg] = m


@cute.kernel
def _scan_kernel(
    tile_counts_ptr: cute.Pointer, tile_base_ptr: cute.Pointer,
    counts_ptr: cute.Pointer, expert_counts_ptr: cute.Pointer,
    P: Int32, E: Int32, tpr: Int32,
):
    await_inputs()
    tidx, _, _ = cute.arch.thread_idx()
    e, _, _ = cute.arch.block_idx()
    smem = cutlass_utils.SmemAllocator()
    buf = smem.allocate_tensor(Int32, cute.make_layout(SCAN_THREADS), _SMEM_ALIGN)
    nt = P * tpr
    m_tc = cute.make_tensor(tile_counts_ptr, cute.make_layout((nt, E), stride=(E, 1)))
    m_tb = cute.make_tensor(tile_base_ptr, cute.make_layout((nt, E), stride=(E, 1)))
    m_counts = cute.make_tensor(counts_ptr, cute.make_layout((P, E), stride=(E, 1)))
    m_ec = cute.make_tensor(expert_counts_ptr, cute.make_layout(E))
    carry = Int32(0)
    for c0 in range(0, nt, SCAN_THREADS):
        i = c0 + tidx
        v = Int32(0)
        if i < nt:
            v = m_tc[i, e]
        excl, total = block_exclusive_scan(v, buf, tidx)
        if i < nt:
            m_tb[i, e] = carry + excl
        carry = carry + total
    cute.arch.sync_threads()
    for p in range(tidx, P, SCAN_THREADS):
        start = m_tb[p * tpr, e]
        end = carry
        if p + Int32(1) < P:
            end = m_tb[(p + Int32(1)) * tpr, e]
        m_counts[p, e] = Int64(end - start)
    if tidx == Int32(0):
        m_ec[e] = Int64(carry)


@cute.kernel
def _finalize_kernel(
    expert_counts_ptr: cute.Pointer, offsets_ptr: cute.Pointer, rank_counts_ptr: cute.Pointer,
    extent_ptr: cute.Pointer, tile_ext_ptr: cute.Pointer, num_routes_ptr: cute.Pointer,
    P: Int32, E: Int32, tpr: Int32,
):
    await_inputs()
    tidx, _, _ = cute.arch.thread_idx()
    smem = cutlass_utils.SmemAllocator()
    buf = smem.allocate_tensor(Int32, cute.make_layout(SCAN_THREADS), _SMEM_ALIGN)
    m_ec = cute.make_tensor(expert_counts_ptr, cute.make_layout(E))
    m_off = cute.make_tensor(offsets_ptr, cute.make_layout(E + Int32(1)))
    m_rc = cute.make_tensor(rank_counts_ptr, cute.make_layout(P))
    m_ext = cute.make_tensor(extent_ptr, cute.make_layout(P))
    m_te = cute.make_tensor(tile_ext_ptr, cute.make_layout(P * tpr))
    m_nr = cute.make_tensor(num_routes_ptr, cute.make_layout(1))
    carry = Int32(0)
    for c0 in range(0, E, SCAN_THREADS):
        i = c0 + tidx
        v = Int32(0)
        if i < E:
            v = Int32(m_ec[i])
        excl, total = block_exclusive_scan(v, buf, tidx)
        if i < E:
            m_off[i] = Int64(carry + excl)
        carry = carry + total
    if tidx == Int32(0):
        m_off[E] = Int64(carry)
        m_nr[0] = Int64(carry)
    cute.arch.sync_threads()
    el = E // P
    for p in range(tidx, P, SCAN_THREADS):
        m_rc[p] = m_off[(p + Int32(1)) * el] - m_off[p * el]
        ext = Int32(0)
        for t in range(tpr):
            ext = cutlass.max(ext, m_te[p * tpr + t])
        m_ext[p] = Int64(ext)


@cute.kernel
def _scatter_kernel(
    ids_ptr: cute.Pointer, sp: Int32, sc: Int32, sk: Int32,
    P: Int32, C: Int32, K: Int32, E: Int32, tpr: Int32,
    tile_base_ptr: cute.Pointer, tile_ext_ptr: cute.Pointer, offsets_ptr: cute.Pointer,
    order_ptr: cute.Pointer, order_expert_ptr: cute.Pointer,
):
    await_inputs()
    tidx, _, _ = cute.arch.thread_idx()
    tile, p, _ = cute.arch.block_idx()
    warp, lane, _smem, wcnt = _warp_counts(tidx)
    n_cap = P * C * K
    m_ids = cute.make_tensor(ids_ptr, cute.make_layout((P, C, K), stride=(sp, sc, sk)))
    m_tb = cute.make_tensor(tile_base_ptr, cute.make_layout((P * tpr, E), stride=(E, 1)))
    m_te = cute.make_tensor(tile_ext_ptr, cute.make_layout(P * tpr))
    m_off = cute.make_tensor(offsets_ptr, cute.make_layout(E + Int32(1)))
    m_order = cute.make_tensor(order_ptr, cute.make_layout((n_cap, 3), stride=(3, 1)))
    m_oe = cute.make_tensor(order_expert_ptr, cute.make_layout(n_cap))
    tg = p * tpr + tile
    text = m_te[tg]
    if text > Int32(0):  # block-uniform: a tile without active slots does nothing
        _zero_wcnt(wcnt, tidx, E)
        cute.arch.sync_threads()
        lt = lanemask_lt()
        limit = cutlass.min(C * K, text * K)  # no active slot of this tile at or beyond
        seg0 = tile * TILE + warp * SEG
        if seg0 < limit:  # warp-uniform
            _count_segment(m_ids, p, seg0, limit, K, E, wcnt, warp, lane, lt)
        cute.arch.sync_threads()
        for e in range(tidx, E, THREADS):
            base = Int32(m_off[e]) + m_tb[tg, e]
            for w in cutlass.range_constexpr(WARPS):
                c = wcnt[w, e]
                wcnt[w, e] = base
                base = base + c
        cute.arch.sync_threads()
        if seg0 < limit:  # warp-uniform
            _scatter_segment(m_ids, p, seg0, limit, K, E, wcnt, warp, lane, lt, m_order, m_oe)


@cute.jit
def dispatch_layout_launch(
    ids_ptr: cute.Pointer, sp: Int32, sc: Int32, sk: Int32,
    P: Int32, C: Int32, K: Int32, E: Int32, tpr: Int32,
    tile_counts_ptr: cute.Pointer, tile_base_ptr: cute.Pointer, tile_ext_ptr: cute.Pointer,
    counts_ptr: cute.Pointer, expert_counts_ptr: cute.Pointer, offsets_ptr: cute.Pointer,
    rank_counts_ptr: cute.Pointer, extent_ptr: cute.Pointer, num_routes_ptr: cute.Pointer,
    order_ptr: cute.Pointer, order_expert_ptr: cute.Pointer,
    stream: cuda.CUstream,
):
    wcnt_smem = _WCNT_BYTES + 2 * _SMEM_ALIGN + WARPS * 4
    _count_kernel(
        ids_ptr, sp, sc, sk, P, C, K, E, tpr, tile_counts_ptr, tile_ext_ptr
    ).launch(grid=[tpr, P, 1], block=[THREADS, 1, 1], smem=wcnt_smem, stream=stream, use_pdl=PDL)
    _scan_kernel(
        tile_counts_ptr, tile_base_ptr, counts_ptr, expert_counts_ptr, P, E, tpr
    ).launch(grid=[E, 1, 1], block=[SCAN_THREADS, 1, 1], smem=_SCAN_BYTES + _SMEM_ALIGN,
             stream=stream, use_pdl=PDL)
    _finalize_kernel(
        expert_counts_ptr, offsets_ptr, rank_counts_ptr, extent_ptr, tile_ext_ptr,
        num_routes_ptr, P, E, tpr,
    ).launch(grid=[1, 1, 1], block=[SCAN_THREADS, 1, 1], smem=_SCAN_BYTES + _SMEM_ALIGN,
             stream=stream, use_pdl=PDL)
    _scatter_kernel(
        ids_ptr, sp, sc, sk, P, C, K, E, tpr, tile_base_ptr, tile_ext_ptr, offsets_ptr,
        order_ptr, order_expert_ptr,
    ).launch(grid=[tpr, P, 1], block=[THREADS, 1, 1], smem=wcnt_smem, stream=stream, use_pdl=PDL)


@cute.kernel
def _one_launch_kernel(
    ids_ptr: cute.Pointer, sp: Int32, sc: Int32, sk: Int32, C: Int32, K: Int32, E: Int32,
    counts_ptr: cute.Pointer, expert_counts_ptr: cute.Pointer, offsets_ptr: cute.Pointer,
    rank_counts_ptr: cute.Pointer, extent_ptr: cute.Pointer, num_routes_ptr: cute.Pointer,
    order_ptr: cute.Pointer, order_expert_ptr: cute.Pointer,
):
    """The whole layout of one rank with ``C*K <= TILE`` in one CTA (module docstring):
    count (warp ``w`` takes flat slots ``[w*SEG, (w+1)*SEG)``), per-expert totals and warp
    bases, the exclusive scan of the totals (offsets), then the scatter."""
    await_inputs()
    tidx, _, _ = cute.arch.thread_idx()
    warp, lane, smem, wcnt = _warp_counts(tidx)
    offs = smem.allocate_tensor(Int32, cute.make_layout(E_CAP), _SMEM_ALIGN)
    buf = smem.allocate_tensor(Int32, cute.make_layout(SCAN_THREADS), _SMEM_ALIGN)
    wext = smem.allocate_tensor(Int32, cute.make_layout(WARPS), _SMEM_ALIGN)
    limit = C * K
    m_ids = cute.make_tensor(ids_ptr, cute.make_layout((1, C, K), stride=(sp, sc, sk)))
    m_counts = cute.make_tensor(counts_ptr, cute.make_layout(E))
    m_ec = cute.make_tensor(expert_counts_ptr, cute.make_layout(E))
    m_off = cute.make_tensor(offsets_ptr, cute.make_layout(E + Int32(1)))
    m_rc = cute.make_tensor(rank_counts_ptr, cute.make_layout(1))
    m_ext = cute.make_tensor(extent_ptr, cute.make_layout(1))
    m_nr = cute.make_tensor(num_routes_ptr, cute.make_layout(1))
    m_order = cute.make_tensor(order_ptr, cute.make_layout((limit, 3), stride=(3, 1)))
    m_oe = cute.make_tensor(order_expert_ptr, cute.make_layout(limit))
    _zero_wcnt(wcnt, tidx, E)
    cute.arch.sync_threads()
    lt = lanemask_lt()
    seg0 = warp * SEG
    mrow = Int32(0)
    if seg0 < limit:  # warp-uniform
        mrow = _count_segment(m_ids, Int32(0), seg0, limit, K, E, wcnt, warp, lane, lt)
    _store_warp_extent(mrow, wext, warp, lane)
    cute.arch.sync_threads()
    # per expert: the total, and each warp's count replaced by the earlier warps' sum
    for e in range(tidx, E, THREADS):
        base = Int32(0)
        for w in cutlass.range_constexpr(WARPS):
            c = wcnt[w, e]
            wcnt[w, e] = base
            base = base + c
        offs[e] = base
        m_counts[e] = Int64(base)
        m_ec[e] = Int64(base)
    cute.arch.sync_threads()
    carry = Int32(0)
    for c0 in range(0, E, SCAN_THREADS):  # the same trip count in every thread
        i = c0 + tidx
        v = Int32(0)
        if i < E:
            v = offs[i]
        excl, total = block_exclusive_scan(v, buf, tidx)
        if i < E:  # only thread i reads and writes offs[i] in this loop
            offs[i] = carry + excl
            m_off[i] = Int64(carry + excl)
        carry = carry + total
    ext = Int32(0)
    for w in cutlass.range_constexpr(WARPS):
        ext = cutlass.max(ext, wext[w])
    if tidx == Int32(0):
        m_off[E] = Int64(carry)
        m_nr[0] = Int64(carry)
        m_rc[0] = Int64(carry)
        m_ext[0] = Int64(ext)
    cute.arch.sync_threads()
    for e in range(tidx, E, THREADS):  # each warp's first position for expert e
        for w in cutlass.range_constexpr(WARPS):
            wcnt[w, e] = wcnt[w, e] + offs[e]
    cute.arch.sync_threads()
    live = cutlass.min(limit, ext * K)  # no active slot at or beyond
    if seg0 < live:  # warp-uniform
        _scatter_segment(m_ids, Int32(0), seg0, live, K, E, wcnt, warp, lane, lt, m_order,
                         m_oe)


@cute.jit
def dispatch_layout_one_launch(
    ids_ptr: cute.Pointer, sp: Int32, sc: Int32, sk: Int32, C: Int32, K: Int32, E: Int32,
    counts_ptr: cute.Pointer, expert_counts_ptr: cute.Pointer, offsets_ptr: cute.Pointer,
    rank_counts_ptr: cute.Pointer, extent_ptr: cute.Pointer, num_routes_ptr: cute.Pointer,
    order_ptr: cute.Pointer, order_expert_ptr: cute.Pointer, stream: cuda.CUstream,
):
    smem = _WCNT_BYTES + E_CAP * 4 + _SCAN_BYTES + WARPS * 4 + 5 * _SMEM_ALIGN
    _one_launch_kernel(
        ids_ptr, sp, sc, sk, C, K, E, counts_ptr, expert_counts_ptr, offsets_ptr,
        rank_counts_ptr, extent_ptr, num_routes_ptr, order_ptr, order_expert_ptr,
    ).launch(grid=[1, 1, 1], block=[THREADS, 1, 1], smem=smem, stream=stream, use_pdl=PDL)


_FAKE_ADDR = 1 << 20


def _ptr(dtype, addr: int = _FAKE_ADDR):
    return make_ptr(dtype, addr, cute.AddressSpace.gmem, assumed_align=dtype.width // 8)


def compile_dispatch_layout():
    """``cute.compile`` the four-launch dispatch layout (every size is a runtime argument,
    so one compiled object serves every P, C, K, E with ``E <= E_CAP``)."""
    i0 = Int32(0)
    return cute.compile(
        dispatch_layout_launch,
        _ptr(Int32), i0, i0, i0,
        i0, i0, i0, i0, i0,
        _ptr(Int32), _ptr(Int32), _ptr(Int32),
        _ptr(Int64), _ptr(Int64), _ptr(Int64),
        _ptr(Int64), _ptr(Int64), _ptr(Int64),
        _ptr(Int64), _ptr(Int64),
        cuda.CUstream(0),
    )


@register_kernel("dispatch_layout")
def build_dispatch_layout():
    return compile_dispatch_layout()


def compile_dispatch_layout_one_launch():
    """``cute.compile`` the one-launch layout (one rank, ``C*K <= TILE``; sizes are runtime
    arguments)."""
    i0 = Int32(0)
    return cute.compile(
        dispatch_layout_one_launch,
        _ptr(Int32), i0, i0, i0, i0, i0, i0,
        _ptr(Int64), _ptr(Int64), _ptr(Int64), _ptr(Int64), _ptr(Int64), _ptr(Int64),
        _ptr(Int64), _ptr(Int64),
        cuda.CUstream(0),
    )


@register_kernel("dispatch_layout_one_launch")
def build_dispatch_layout_one_launch():
    return compile_dispatch_layout_one_launch()
