"""Grouped expert GEMM for Hopper (sm_90a): ``out[rows of e] = epilogue(a[rows of e] @ b[e].T)``.

The expert GEMMs of docs/contract.md s5 for the ``bf16`` recipe, grouped over the local experts,
on the rows routed to each expert only:

- ``a`` bf16 ``[M_cap, K]`` (row-major), rows grouped by expert: expert ``e`` owns the live
  rows ``[seg_start[e], seg_start[e] + counts[e])``; every ``seg_start[e]`` is a multiple of
  ``TILE_M`` (segments padded to whole tiles), so no tile straddles two experts;
- ``b`` bf16 ``[E, N, K]`` (K-major: ``out = a @ b[e].T``, a "TN" GEMM);
- ``seg_start`` int32 ``[E + 1]`` and ``counts`` int32 ``[E]`` are read on the device (no host
  sync: the launch is CUDA-graph capturable and a replay with new counts works).

Epilogues (float32, one bf16 rounding per output element):

- ``swiglu`` (FC1, s5 steps 1-4): ``b`` rows interleaved ``2j = gate_j, 2j + 1 = up_j``, so a
  thread's accumulator holds (gate, up) as an adjacent column pair; optional clamp ``c``
  (``gate = min(gate, c)``, ``up = clamp(up, -c, c)``; ``c = +inf`` is no clamp, NaN
  propagates), ``act = up * gate * sigmoid(gate)`` (two multiplies, left to right;
  ``sigmoid = 1 / (1 + exp(-gate))``), optional ``act *= row_scale[row]``; out ``[M_cap, N/2]``;
- ``plain`` (FC2, s5 steps 5-7): optional ``h *= row_scale[row]``; out ``[M_cap, N]``.

Rows of a tile at or beyond the live end of its expert are never stored; tiles past the live
extent are skipped. The grid is sized from ``M_cap`` (the persistent variants cap it at
``max_ctas``, e.g. the SM count).

Two kernels (``KernelConfig``), both ``TILE_M`` x ``tile_n`` output tiles in a grouped raster
(``GROUP_M``), two MMA warpgroups each owning ``TILE_M / 2`` rows, TMA loads of A and B tiles
into 128B-swizzled shared memory through a ``stages``-deep mbarrier pipeline
(``PipelineTmaAsync``), ``wgmma`` bf16 x bf16 -> float32, epilogue straight from registers:

- ``kernel``: one CTA per tile; warp 0 also issues the copies;
- ``kernel_ws`` (``ws=True``): warp-specialized and persistent; a producer warpgroup (warp 0
  issues the copies, ``setmaxnreg`` down) feeds the two MMA warpgroups (``setmaxnreg`` up);
  every CTA walks tiles ``bid, bid + grid, ...``, so the epilogue of a tile overlaps the
  loads of the next.

The K loop is fixed (``K / TILE_K`` steps in order, no split-K), so a row's bits depend only
on its own ``a`` row and ``b[e]`` (docs/contract.md s8): not on other rows, on the expert's row
count or on the row's position in its tile (the GPU tests check it bitwise).

Each tile finds its expert from ``seg_start``: ``e = #{j in [1, E) : seg_start[j] <= row0}``
(the segments are nondecreasing), counted by each warp over strided lanes and summed with a
warp reduction (no shared memory, no barrier).
"""

# no `from __future__ import annotations`: cute.struct reads its annotations as objects

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float32, Int32
from cutlass.cute.runtime import make_ptr
from cutlass.utils import LayoutEnum

from megamoe.kernel_registry import register_kernel
from megamoe.pdl import PDL, await_inputs

TILE_M = 128
"""Rows per tile; expert segments are padded to a multiple of it."""
TILE_N = 64
"""The smallest column tile of ``b`` (``N`` must be a multiple of the config's ``tile_n``)."""
TILE_K = 64
"""K per pipeline stage (``K`` must be a multiple)."""
GROUP_M = 8
"""Raster: CTAs walk ``GROUP_M`` M tiles for each N tile, so a wave shares A and B in L2."""
MMA_WARPGROUPS = 2
THREADS = 128 * MMA_WARPGROUPS
"""MMA threads per CTA (the ``ws`` variants add a 128-thread producer warpgroup)."""
WS_PRODUCER_REGS = 40
WS_CONSUMER_REGS = 232
MAX_EXPERTS = 1024
MODES = ("swiglu", "plain")
_ALIGN = 1024
B_TILES = 3
"""bf16 B tiles an MX GEMM CTA decodes into, unless a specialized variant names another count
(``KernelConfig.b_tiles``); the non-specialized MX kernel's barrier scheme needs exactly
three (``mxfp4_gemm_kernel`` module docstring)."""
PRE_LANES = 4
"""Lanes of the safe-FP8 scale wire ``[rows, 4]`` (docs/contract.md s4); the epilogue reads lane 0."""


@dataclass(frozen=True)
class KernelConfig:
    """One compiled variant (TILE_K fixed): column tile, pipeline depth, whether the kernel
    is warp-specialized and persistent (``ws``: a producer warp feeds two MMA warpgroups;
    CTAs loop over tiles, so the epilogue of one tile overlaps the loads of the next), and
    the row tile (``tile_m``: ``TILE_M``, two MMA warpgroups; or 64, one, which only the MX
    GEMM offers: half the A bytes and MMAs per tile when an expert has few rows), and, for the
    MX GEMM only, whether a decode warpgroup feeds the MMA warpgroups through a pipeline of
    decoded B tiles (``specialized``; ``mxfp4_gemm_kernel``), and, for the ``specialized``
    MX GEMM only, into how many K slices each output tile is split (``splits``: one CTA per
    slice, float32 partial sums combined in slice order by the tile's last CTA;
    ``megamoe.experts.split_k``), and whether its decode threads read the weights' scale
    bytes from global memory into registers a few k tiles ahead instead of from a K-long
    copy in shared memory (``scale_regs``; ``mxfp4_gemm_kernel.scale_run_in_smem``), and
    whether its grid takes the first 64-row half of every segment's tiles before the second
    halves (``halves``: ``halves_tile``; 64-row specialized MX GEMM without split-K only), and
    how many bf16 B tiles its decode warpgroup hands over through (``b_tiles``; specialized
    MX GEMM only; ``B_TILES`` unless named), and, for the MX GEMM only, whether it is the
    decode-batch GEMV on warp-level MMAs with that many warps splitting K (``gemv_warps``;
    ``mx_gemv_kernel``: ``tile_n`` 16, ``stages`` 1, no other option)."""

    tile_n: int
    stages: int
    ws: bool = False
    tile_m: int = TILE_M
    specialized: bool = False
    splits: int = 1
    scale_regs: bool = False
    halves: bool = False
    b_tiles: int = B_TILES
    gemv_warps: int = 0

    def __post_init__(self) -> None:
        if self.gemv_warps and (self.tile_n, self.stages, self.ws, self.tile_m, self.specialized,
                                self.splits, self.scale_regs, self.halves,
                                self.b_tiles) != (16, 1, False, TILE_M, False, 1, False, False,
                                                  B_TILES):
            raise ValueError("gemv_warps: a GEMV variant is KernelConfig(16, 1, "
                             f"gemv_warps=w) with no other option, got {self}")
        if self.gemv_warps < 0:
            raise ValueError(f"gemv_warps: expected >= 0, got {self.gemv_warps}")
        if self.b_tiles != B_TILES and (not self.specialized or self.b_tiles < 2):
            raise ValueError("b_tiles: needs a specialized variant and at least 2 tiles, got "
                             f"specialized={self.specialized}, b_tiles={self.b_tiles}")
        if self.splits < 1:
            raise ValueError(f"splits: expected >= 1, got {self.splits}")
        if self.scale_regs and (not self.specialized or self.splits > 1):
            raise ValueError("scale_regs: needs a specialized variant without split-K, got "
                             f"specialized={self.specialized}, splits={self.splits}")
        if self.halves and (not self.specialized or self.splits > 1
                            or 2 * self.tile_m != TILE_M):
            raise ValueError("halves: needs a specialized variant of TILE_M / 2 rows without "
                             f"split-K, got specialized={self.specialized}, "
                             f"splits={self.splits}, tile_m={self.tile_m}")

    @property
    def name(self) -> str:
        if self.gemv_warps:
            return f"n{self.tile_n}gemv{self.gemv_warps}"
        rows = "" if self.tile_m == TILE_M else f"m{self.tile_m}"
        return (f"{rows}n{self.tile_n}s{self.stages}" + ("persist" if self.ws else "")
                + ("ws" if self.specialized else "") + ("r" if self.scale_regs else "")
                + (f"k{self.splits}" if self.splits > 1 else "")
                + ("h" if self.halves else "")
                + (f"b{self.b_tiles}" if self.b_tiles != B_TILES else ""))


CONFIGS = (
    KernelConfig(128, 6), KernelConfig(256, 4), KernelConfig(64, 8),
    KernelConfig(128, 6, True), KernelConfig(256, 4, True), KernelConfig(192, 5, True),
)
"""The compiled variants (each one is tested on the GPU); shared memory per CTA is about
``(TILE_M + tile_n) * TILE_K * 2 bytes * stages`` (160-200 KiB: one CTA per SM)."""
_PREFERRED = (
    KernelConfig(256, 4, True), KernelConfig(192, 5, True), KernelConfig(128, 6, True),
    KernelConfig(64, 8),
)
"""Default order (fastest first, H200 timings at E=8, 1024 rows per expert)."""


NARROW_ROUTES = 512
"""Callers whose capacity holds at most this many routes (``C * K``: up to 64 tokens at
DeepSeek's K = 8, 128 at gpt-oss's K = 4) get ``_NARROW`` where it divides ``N``. With few
rows the GEMM's CTAs are its column tiles, and a one-expert batch (skewed routes) gives
``n256s4persist`` only ``N / 256`` of them (16 at DeepSeek FC1): there ``_NARROW`` is
1.5-1.7x faster. With only the live rows' A rows loaded (``A_PART_ROWS``) it no longer loses to
the wide tile with many experts at these capacities. H200, DeepSeek, ``mx_gemm --samples
5``, FC1 + FC2 us, ``n256s4persist`` against ``n128s6persist``: skewed T = 16 106.8 / 70.0;
uniform T = 4 706.0 / 697.0, T = 16 2749.2 / 2706.6, T = 64 5577.2 / 5459.8; past the
bound uniform T = 256 5554.7 / 5591.4, T = 1024 6012.7 / 6696.2 and skewed T = 1024
239.0 / 417.5 (docs/perf.md, "Live rows"). A choice from the capacity, never from the live
rows, so a row's result does not depend on how many other rows a batch has
(docs/contract.md s7)."""
_NARROW = KernelConfig(128, 6, True)


def default_config(n: int, routes: int | None = None) -> KernelConfig:
    """The variant used for an ``N``: ``_NARROW`` when ``routes`` (the caller's static route
    capacity, ``C * K``) is at most ``NARROW_ROUTES`` and its tile divides ``N``, else the
    first of ``_PREFERRED`` whose tile divides it (``N`` a multiple of ``TILE_N`` always
    finds one)."""
    if routes is not None and routes <= NARROW_ROUTES and n % _NARROW.tile_n == 0:
        return _NARROW
    for cfg in _PREFERRED:
        if n % cfg.tile_n == 0:
            return cfg
    raise ValueError(f"N: expected a multiple of {TILE_N}, got {n}")


@cute.jit
def live_m_tiles(m_cap: Int32, seg_ptr: cute.Pointer, num_experts: Int32,
                 tile_m: int = TILE_M) -> Int32:
    """The M tiles that can hold a live row: ``ceil(min(seg_start[E], M_cap) / tile_m)``.
    Segments are nondecreasing and end at ``seg_start[E]`` (the API's contract), so every
    tile past these is dead: the kernels schedule only ``live_m_tiles * n_tiles`` tiles, and
    a decode-size batch does not pay for the padding ``capacity_rows`` reserves."""
    seg = cute.make_tensor(seg_ptr, cute.make_layout(num_experts + 1))
    end = cutlass.min(cutlass.max(seg[num_experts], Int32(0)), m_cap)
    return (end + (tile_m - 1)) // tile_m


A_PART_ROWS = (8, 16, 32, 64)
"""Heights of the partial A loads: multiples of the 8-row 128-byte-swizzle atom of a
64-wide bf16 K tile (1 KB). Every stage loads A with ONE TMA load of the tile's first ``h``
rows, ``h`` the smallest of these heights below the tile height, or the tile height
itself, that covers the tile's live rows (``a_load_height``): with one live row per expert
(decode-size batches) a 128-row tile moves 1 KB of A per K step instead of 16 KB, a tile
whose rows are all live loads it whole, and no stage issues more than one A load (one load
per 8-row atom, 16 for a full 128-row tile, measured 40-60 % slower: docs/perf.md, "The
whole layer, full grid, on the live-row kernels"). Rows past the live ones keep stale
shared memory, which only feeds accumulator rows the epilogue never stores (an output row
of a GEMM reads only its own A row). Tiles start at multiples of the tile height
(``seg_start`` is a multiple of ``TILE_M``), so a tile's first ``h`` rows are block
``row0 / h`` of A."""
A_ROW_BYTES = TILE_K * 2
"""Bytes of one row of a bf16 A stage."""


def a_part_heights(tile_m: int) -> tuple[int, ...]:
    """The partial-load heights of a ``tile_m``-row tile: ``A_PART_ROWS`` below it."""
    return tuple(h for h in A_PART_ROWS if h < tile_m)


def make_a_part_tmas(m_a: cute.Tensor, tile_m: int):
    """``(atoms, coords)``: one TMA atom (and its coordinate tensor) per height of
    ``a_part_heights(tile_m)``, each loading that many rows of ``m_a`` (bf16 ``[M_cap, K]``,
    K-major) into the first rows of one of the kernels' 128-byte-swizzled A stages. Call
    inside the launcher's ``cute.jit``."""
    atoms, coords = [], []
    for h in a_part_heights(tile_m):
        part = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (h, TILE_N, TILE_K),
                                             BFloat16, 1)
        atom, coord = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), m_a,
            cute.slice_(part, (None, None, 0)), (h, TILE_K),
        )
        atoms.append(atom)
        coords.append(coord)
    return tuple(atoms), tuple(coords)


@cute.jit
def a_part_views(tma_as, m_as, s_a: cute.Tensor, tile_m: int):
    """``(t_sas, t_gas)``: per height of ``a_part_heights(tile_m)``, the TMA partitions of
    the A stages' first ``h`` rows as ``(block, 0, stage)`` (block 0) and of A as
    ``(block of h rows, k tile)``."""
    heights = a_part_heights(tile_m)
    t_sas, t_gas = [], []
    for i in cutlass.range_constexpr(len(heights)):
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(
            tma_as[i], 0, cute.make_layout(1),
            cute.group_modes(cute.flat_divide(s_a, (heights[i], TILE_K)), 0, 2),
            cute.group_modes(cute.flat_divide(m_as[i], (heights[i], TILE_K)), 0, 2),
        )
        t_sas.append(t_s)
        t_gas.append(t_g)
    return tuple(t_sas), tuple(t_gas)


@cute.jit
def prefetch_a_parts(tma_as):
    """Prefetch the partial A loads' TMA descriptors (``make_a_part_tmas``)."""
    for i in cutlass.range_constexpr(len(tma_as)):
        cute.nvgpu.cpasync.prefetch_descriptor(tma_as[i])


@cute.jit
def live_rows(row0: Int32, live_end: Int32, tile_m: int) -> Int32:
    """The live rows ``[row0, live_end)`` of a tile, at most ``tile_m``."""
    return cutlass.min(live_end - row0, Int32(tile_m))


def make_a_tile_tma(m_a: cute.Tensor, a_layout: cute.ComposedLayout, tile_m: int):
    """The TMA atom (and its coordinate tensor) for whole ``tile_m``-row A tiles of ``m_a``
    in the kernels' A stage layout ``a_layout``: the load of a tile whose live rows exceed
    every partial height (``A_PART_ROWS``). Call inside the launcher's ``cute.jit``."""
    return cute.nvgpu.cpasync.make_tiled_tma_atom(
        cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), m_a, cute.slice_(a_layout, (None, None, 0)),
        (tile_m, TILE_K),
    )


@cute.jit
def a_tile_views(tma_t: cute.CopyAtom, m_t: cute.Tensor, s_a: cute.Tensor, pid_m: Int32,
                 tile_m: int):
    """``(t_st, t_gt)``: the TMA partitions of the A stages as ``(stage)`` and of M tile
    ``pid_m`` of A as ``(k tile)``, for ``make_a_tile_tma``'s atom."""
    g_a = cute.local_tile(m_t, (tile_m, TILE_K), (pid_m, None))
    return cute.nvgpu.cpasync.tma_partition(
        tma_t, 0, cute.make_layout(1), cute.group_modes(s_a, 0, 2), cute.group_modes(g_a, 0, 2),
    )


@cute.jit
def a_load_height(rows: Int32, tile_m: int) -> Int32:
    """The rows a stage of a tile with ``rows`` live rows loads (``A_PART_ROWS``)."""
    heights = a_part_heights(tile_m)
    h = Int32(tile_m)
    for i in cutlass.range_constexpr(len(heights)):
        j = len(heights) - 1 - i
        h = cutlass.select_(rows <= Int32(heights[j]), Int32(heights[j]), h)
    return h


@cute.jit
def load_stage(mainloop, prod, kt, row0: Int32, rows: Int32, tile_m: int,
               tma_as, t_gas, t_sas,
               tma_t: cute.CopyAtom, t_gt: cute.Tensor, t_st: cute.Tensor,
               tma_b: cute.CopyAtom, t_gb: cute.Tensor, t_sb: cute.Tensor):
    """Producer side of one pipeline stage: acquire stage ``prod`` (its barrier then expects
    the B bytes: the pipeline's ``tx_count``), add the bytes of the A rows it loads, TMA-load
    A of k tile ``kt`` with one load (``A_PART_ROWS``: the smallest partial height that
    covers the tile's ``rows`` live rows from ``row0``, with ``tma_as[i]``, or the whole tile
    with ``tma_t``) and B (bf16 B, or the MX kernels' packed weights) onto the barrier. The
    caller advances ``prod``."""
    heights = a_part_heights(tile_m)
    bounds = (0, *heights)
    mainloop.producer_acquire(prod)
    bar = mainloop.producer_get_barrier(prod)
    with cute.arch.elect_one():
        cute.arch.mbarrier_expect_tx(bar, a_load_height(rows, tile_m) * A_ROW_BYTES)
    for i in cutlass.range_constexpr(len(heights)):
        if (rows > Int32(bounds[i])) & (rows <= Int32(bounds[i + 1])):
            cute.copy(tma_as[i], t_gas[i][(None, row0 // bounds[i + 1], kt)],
                      t_sas[i][(None, 0, 0, prod.index)], tma_bar_ptr=bar)
    if rows > Int32(heights[-1]):
        cute.copy(tma_t, t_gt[(None, kt)], t_st[(None, prod.index)], tma_bar_ptr=bar)
    cute.copy(tma_b, t_gb[(None, kt)], t_sb[(None, prod.index)], tma_bar_ptr=bar)
    mainloop.producer_commit(prod)


def tma_mainloop(storage, stages: int, consumer_warps: int, tx_bytes: int):
    """The kernels' TMA stage pipeline: ``stages`` barriers in ``storage.bars``, one producer
    thread, ``consumer_warps`` consumer warps, ``tx_bytes`` expected per stage (B or the
    packed weights; ``load_stage`` adds the A bytes), initialization deferred to the caller's
    ``pipeline_init_arrive`` / ``pipeline_init_wait``."""
    return pipeline.PipelineTmaAsync.create(
        barrier_storage=storage.bars.data_ptr(),
        num_stages=stages,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, consumer_warps),
        tx_count=tx_bytes,
        defer_sync=True,
    )


def make_locate(n_tiles: int, tile_m: int = TILE_M):
    """``locate(tile, m_tiles, m_cap, seg_ptr, cnt_ptr, E) -> (pid_m, pid_n, e, row0, live,
    live_end)`` for tiles ``0 .. m_tiles * n_tiles - 1`` (``m_tiles``: ``live_m_tiles``) of
    ``n_tiles`` column tiles (shared by every variant of the grouped GEMM).

    Raster: ``GROUP_M`` consecutive M tiles per N tile (a wave shares A and B in L2).
    Expert: ``e = #{j in [1, E) : seg_start[j] <= row0}``, counted over the lanes of the
    calling warp and summed with a warp reduction (every warp gets the same value).
    """

    @cute.jit
    def locate(tile: Int32, m_tiles: Int32, m_cap: Int32, seg_ptr: cute.Pointer,
               cnt_ptr: cute.Pointer, num_experts: Int32):
        group = tile // (GROUP_M * n_tiles)
        first_m = group * GROUP_M
        group_size = cutlass.min(m_tiles - first_m, Int32(GROUP_M))
        local = tile - group * (GROUP_M * n_tiles)
        pid_m = first_m + local % group_size
        pid_n = local // group_size
        row0 = pid_m * tile_m
        lane = cute.arch.lane_idx()
        seg = cute.make_tensor(seg_ptr, cute.make_layout(num_experts + 1))
        cnt = cute.make_tensor(cnt_ptr, cute.make_layout(num_experts))
        below = Int32(0)
        for j in cutlass.range(lane + 1, num_experts, 32, unroll=4):
            below = below + cutlass.select_(seg[j] <= row0, Int32(1), Int32(0))
        e = cute.arch.warp_reduction_sum(below)
        start = seg[e]
        live_end = start + cutlass.max(cnt[e], Int32(0))
        live_end = cutlass.min(cutlass.min(live_end, seg[e + 1]), m_cap)
        live = (start <= row0) & (row0 < live_end)
        return pid_m, pid_n, e, row0, live, live_end

    return locate


def halves_tile(block: Int32, tiles: Int32, select=cutlass.select_) -> Int32:
    """The raster tile (``locate``'s order) of live block ``block`` of ``tiles``: the first
    ``ceil(tiles / 2)`` blocks take the even tiles in order, the rest the odd ones. A
    bijection of ``[0, tiles)``, so every tile still has one CTA and no output bit depends
    on it (docs/contract.md s7).

    Why: with 64-row tiles and segments padded to ``TILE_M`` = 128 rows, ``locate``'s even
    tiles are the first halves of the segments, where a small batch's rows sit (rows fill a
    segment from its start), and the odd ones the second halves, dead below 65 rows per
    expert. Interleaved, the live CTAs take every other block; once the grid exceeds the
    resident slots the hardware then puts two or three of them on one SM, where their
    decode warpgroups share it (session 25's probe, docs/perf.md "Session 25"). Taken
    first, they are consecutive blocks and land one to an SM. ``select``:
    ``cutlass.select_`` in a kernel, a Python choice on the host."""
    evens = (tiles + 1) // 2
    return select(block < evens, 2 * block, 2 * (block - evens) + 1)


def make_locate_cta(n_tiles: int, tile_m: int = TILE_M, halves: bool = False):
    """``locate_cta(bid, m_cap, seg_ptr, cnt_ptr, E) -> (pid_m, pid_n, e, row0, live,
    live_end)``: ``make_locate``'s ``locate`` for the kernels that give each CTA one tile of
    a grid over all ``M_cap`` tiles; a CTA past the live tiles (``live_m_tiles``) is dead
    after one load, without the expert search. ``halves``: the live blocks take their
    tiles through ``halves_tile`` (``KernelConfig.halves``)."""
    locate = make_locate(n_tiles, tile_m)

    @cute.jit
    def locate_cta(bid: Int32, m_cap: Int32, seg_ptr: cute.Pointer, cnt_ptr: cute.Pointer,
                   num_experts: Int32):
        m_tiles = live_m_tiles(m_cap, seg_ptr, num_experts, tile_m)
        live = bid < m_tiles * n_tiles
        pid_m, pid_n, e, row0, live_end = bid, bid, Int32(0), Int32(0), Int32(0)
        if live:
            tile = bid
            if cutlass.const_expr(halves):
                tile = halves_tile(bid, m_tiles * n_tiles)
            pid_m, pid_n, e, row0, live, live_end = locate(tile, m_tiles, m_cap, seg_ptr,
                                                           cnt_ptr, num_experts)
        return pid_m, pid_n, e, row0, live, live_end

    return locate_cta


@cute.jit
def swiglu_act(gate: Float32, up: Float32, row: Int32, m_pre: cute.Tensor, m_scale: cute.Tensor,
               use_scale: Int32, use_pre: Int32, clamp: Float32) -> Float32:
    """FC1's epilogue of one output element of row ``row`` (docs/contract.md s5 steps 1-4), float32
    throughout: ``gate`` and ``up`` times the row's pre-scale ``m_pre[row]`` (``use_pre``),
    ``gate = min(gate, clamp)``, ``up = clamp(up, -clamp, clamp)``, ``act = up * gate *
    sigmoid(gate)``, times the score ``m_scale[row]`` (``use_scale``). Shared by every
    kernel's epilogue (``make_store``, ``mx_gemv_kernel``), so they compute the same bits from
    the same accumulators."""
    if use_pre != Int32(0):
        gate = gate * m_pre[row]
        up = up * m_pre[row]
    gate = Float32(cutlass.select_(gate > clamp, clamp, gate))
    up = Float32(cutlass.select_(up > clamp, clamp, up))
    up = Float32(cutlass.select_(up < -clamp, -clamp, up))
    sig = Float32(1.0) / (Float32(1.0) + cute.math.exp(-gate))
    act = up * gate * sig
    if use_scale != Int32(0):
        act = act * m_scale[row]
    return act


@cute.jit
def plain_value(h: Float32, row: Int32, m_pre: cute.Tensor, m_scale: cute.Tensor,
                use_scale: Int32, use_pre: Int32) -> Float32:
    """FC2's epilogue of one output element of row ``row`` (docs/contract.md s5 steps 5-7): ``h``
    times the row's pre-scale (``use_pre``), then times the score (``use_scale``)."""
    if use_pre != Int32(0):
        h = h * m_pre[row]
    if use_scale != Int32(0):
        h = h * m_scale[row]
    return h


def make_store(swiglu: bool, n_out: int, out_f32: bool):
    """The epilogue of one thread's accumulators (module docstring): float32 math, one
    rounding to the output type (bf16, or float32 when ``out_f32``), rows at or past
    ``live_end`` not stored.

    ``use_pre``: multiply every accumulator by ``pre[row, 0]`` first (``pre`` float32
    ``[M_cap, PRE_LANES]``, the safe-FP8 dequant scale wire of docs/contract.md s4: FC1 applies
    A1's ``d`` to ``h1`` before the clamp and SwiGLU, FC2 applies A2's ``d`` to ``h2``);
    ``use_scale``: multiply the result by ``scale[row]`` (the score: early weighting after
    SwiGLU, late weighting after FC2).
    """
    out_type = Float32 if out_f32 else BFloat16

    @cute.jit
    def store(acc: cute.Tensor, c_coord: cute.Tensor, out_ptr: cute.Pointer,
              scale_ptr: cute.Pointer, pre_ptr: cute.Pointer, m_cap: Int32, row0: Int32,
              col0: Int32, live_end: Int32, use_scale: Int32, use_pre: Int32,
              clamp: Float32):
        m_out = cute.make_tensor(out_ptr, cute.make_layout((m_cap, n_out), stride=(n_out, 1)))
        m_scale = cute.make_tensor(scale_ptr, cute.make_layout(m_cap))
        m_pre = cute.make_tensor(pre_ptr, cute.make_layout(m_cap, stride=PRE_LANES))
        if cutlass.const_expr(swiglu):
            for i in cutlass.range_constexpr(cute.size(acc) // 2):
                crd = c_coord[2 * i]
                row = row0 + crd[0]
                if row < live_end:
                    act = swiglu_act(Float32(acc[2 * i]), Float32(acc[2 * i + 1]), row, m_pre,
                                     m_scale, use_scale, use_pre, clamp)
                    m_out[row, (col0 + crd[1]) // 2] = act.to(out_type)
        else:
            for i in cutlass.range_constexpr(cute.size(acc)):
                crd = c_coord[i]
                row = row0 + crd[0]
                if row < live_end:
                    h = plain_value(Float32(acc[i]), row, m_pre, m_scale, use_scale, use_pre)
                    m_out[row, col0 + crd[1]] = h.to(out_type)

    return store



def _make(mode: str, n: int, k: int, cfg: KernelConfig, out_f32: bool = False):
    """Kernel and launcher for one (mode, N, K, config, output type) with bf16 ``b``;
    ``M_cap`` and ``E`` are runtime."""
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    if cfg.tile_m != TILE_M:
        raise ValueError(f"config: the bf16 GEMM has tile_m {TILE_M} only, got {cfg.name}")
    if cfg.splits != 1:
        raise ValueError(f"config: the bf16 GEMM has no split-K variant, got {cfg.name}")
    swiglu = mode == "swiglu"
    tile_n, stages = cfg.tile_n, cfg.stages
    n_out = n // 2 if swiglu else n
    n_tiles = n // tile_n
    k_tiles = k // TILE_K
    tile_mnk = (TILE_M, tile_n, TILE_K)
    tx_bytes = tile_n * TILE_K * 2  # B; each stage adds its A rows (``load_stage``)
    locate = make_locate(n_tiles)
    locate_cta = make_locate_cta(n_tiles)
    store = make_store(swiglu, n_out, out_f32)

    @cute.struct
    class Storage:
        bars: cute.struct.MemRange[cutlass.Int64, stages * 2]
        sa: cute.struct.Align[cute.struct.MemRange[BFloat16, TILE_M * TILE_K * stages], _ALIGN]
        sb: cute.struct.Align[cute.struct.MemRange[BFloat16, tile_n * TILE_K * stages], _ALIGN]

    @cute.kernel
    def kernel(
        tma_a: tuple, m_a: tuple, tma_t: cute.CopyAtom, m_t: cute.Tensor,
        tma_b: cute.CopyAtom, m_b: cute.Tensor, tiled_mma: cute.TiledMma,
        a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout,
        out_ptr: cute.Pointer, seg_ptr: cute.Pointer, cnt_ptr: cute.Pointer,
        scale_ptr: cute.Pointer, pre_ptr: cute.Pointer, m_cap: Int32, num_experts: Int32,
        use_scale: Int32, use_pre: Int32, clamp: Float32,
    ):
        await_inputs(launch_dependents=False)
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        pid_m, pid_n, e, row0, live, live_end = locate_cta(bid, m_cap, seg_ptr, cnt_ptr,
                                                          num_experts)

        if live:
            if warp_idx == 0:
                prefetch_a_parts(tma_a)
                cute.nvgpu.cpasync.prefetch_descriptor(tma_t)
                cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
            smem = cutlass.utils.SmemAllocator()
            storage = smem.allocate(Storage)
            mainloop = tma_mainloop(storage, stages, THREADS // 32, tx_bytes)
            pipeline.pipeline_init_arrive()
            s_a = storage.sa.get_tensor(a_layout.outer, swizzle=a_layout.inner)
            s_b = storage.sb.get_tensor(b_layout.outer, swizzle=b_layout.inner)

            # A rows of a [M_cap, K]; (tile_n, TILE_K, k_tiles) of b (N, K, E)
            rows = live_rows(row0, live_end, TILE_M)
            t_sa, t_ga = a_part_views(tma_a, m_a, s_a, TILE_M)
            t_st, t_gt = a_tile_views(tma_t, m_t, s_a, pid_m, TILE_M)
            g_b = cute.local_tile(m_b, (tile_n, TILE_K), (pid_n, None, e))
            t_sb, t_gb = cute.nvgpu.cpasync.tma_partition(
                tma_b, 0, cute.make_layout(1), cute.group_modes(s_b, 0, 2),
                cute.group_modes(g_b, 0, 2),
            )

            wg = cute.arch.make_warp_uniform(tidx // 128)
            thr_mma = tiled_mma.get_slice(cute.make_layout(MMA_WARPGROUPS, stride=128)(wg))
            t_ca = tiled_mma.make_fragment_A(thr_mma.partition_A(s_a))
            t_cb = tiled_mma.make_fragment_B(thr_mma.partition_B(s_b))
            # (row, col) in the tile of each accumulator element of THIS thread
            c_coord = tiled_mma.get_slice(tidx).partition_C(
                cute.make_identity_tensor((TILE_M, tile_n))
            )
            acc = cute.make_rmem_tensor(c_coord.shape, Float32)
            k_blocks = cute.size(t_ca, mode=[2])  # static

            pipeline.pipeline_init_wait()

            prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
            if warp_idx == 0:
                for _ in cutlass.range(min(stages, k_tiles), unroll=1):
                    load_stage(mainloop, prod, prod.count, row0, rows, TILE_M, tma_a,
                               t_ga, t_sa, tma_t, t_gt, t_st, tma_b, t_gb, t_sb)
                    prod.advance()

            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
            # k tile 0: the first wgmma overwrites the accumulators (tiles >= 1 add)
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, False)
            mainloop.consumer_wait(read)
            cute.nvgpu.warpgroup.fence()
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(tiled_mma, acc, t_ca[(None, None, kb, read.index)],
                          t_cb[(None, None, kb, read.index)], acc)
                tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
            cute.nvgpu.warpgroup.commit_group()
            read.advance()
            for _ in cutlass.range(1, k_tiles, unroll=1):
                mainloop.consumer_wait(read)
                cute.nvgpu.warpgroup.fence()
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(tiled_mma, acc, t_ca[(None, None, kb, read.index)],
                              t_cb[(None, None, kb, read.index)], acc)
                cute.nvgpu.warpgroup.commit_group()
                # one wgmma group stays in flight; the previous tile's group is complete:
                # free its stage and refill it with tile prod.count
                cute.nvgpu.warpgroup.wait_group(1)
                mainloop.consumer_release(release)
                release.advance()
                read.advance()
                if (warp_idx == 0) & (prod.count < k_tiles):
                    load_stage(mainloop, prod, prod.count, row0, rows, TILE_M, tma_a,
                               t_ga, t_sa, tma_t, t_gt, t_st, tma_b, t_gb, t_sb)
                    prod.advance()
            cute.nvgpu.warpgroup.wait_group(0)

            store(acc, c_coord, out_ptr, scale_ptr, pre_ptr, m_cap, row0, pid_n * tile_n,
                  live_end, use_scale, use_pre, clamp)

    @cute.kernel
    def kernel_ws(
        tma_a: tuple, m_a: tuple, tma_t: cute.CopyAtom, m_t: cute.Tensor,
        tma_b: cute.CopyAtom, m_b: cute.Tensor, tiled_mma: cute.TiledMma,
        a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout,
        out_ptr: cute.Pointer, seg_ptr: cute.Pointer, cnt_ptr: cute.Pointer,
        scale_ptr: cute.Pointer, pre_ptr: cute.Pointer, m_cap: Int32, num_experts: Int32,
        use_scale: Int32, use_pre: Int32, clamp: Float32,
    ):
        """Warp-specialized persistent variant: warpgroup 0 (warp 0) loads, warpgroups 1-2
        compute and store; every CTA walks tiles ``bid, bid + grid, ...`` of the raster, and
        producer and consumers skip the same dead tiles (same ``locate``)."""
        await_inputs(launch_dependents=False)
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        m_tiles = live_m_tiles(m_cap, seg_ptr, num_experts)
        total = m_tiles * n_tiles
        if warp_idx == 0:
            prefetch_a_parts(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_t)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(Storage)
        mainloop = tma_mainloop(storage, stages, THREADS // 32, tx_bytes)
        pipeline.pipeline_init_arrive()
        s_a = storage.sa.get_tensor(a_layout.outer, swizzle=a_layout.inner)
        s_b = storage.sb.get_tensor(b_layout.outer, swizzle=b_layout.inner)
        pipeline.pipeline_init_wait()

        if warp_idx < 4:
            cute.arch.warpgroup_reg_dealloc(WS_PRODUCER_REGS)
            if warp_idx == 0:
                prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
                t_sa, t_ga = a_part_views(tma_a, m_a, s_a, TILE_M)
                tile = bid
                while tile < total:
                    pid_m, pid_n, e, row0, live, live_end = locate(
                        tile, m_tiles, m_cap, seg_ptr, cnt_ptr, num_experts
                    )
                    if live:
                        rows = live_rows(row0, live_end, TILE_M)
                        t_st, t_gt = a_tile_views(tma_t, m_t, s_a, pid_m, TILE_M)
                        g_b = cute.local_tile(m_b, (tile_n, TILE_K), (pid_n, None, e))
                        t_sb, t_gb = cute.nvgpu.cpasync.tma_partition(
                            tma_b, 0, cute.make_layout(1), cute.group_modes(s_b, 0, 2),
                            cute.group_modes(g_b, 0, 2),
                        )
                        for kt in cutlass.range(k_tiles, unroll=1):
                            load_stage(mainloop, prod, kt, row0, rows, TILE_M, tma_a,
                                       t_ga, t_sa, tma_t, t_gt, t_st, tma_b, t_gb, t_sb)
                            prod.advance()
                    tile = tile + grid
                mainloop.producer_tail(prod)
        else:
            cute.arch.warpgroup_reg_alloc(WS_CONSUMER_REGS)
            ctid = tidx - 128
            wg = cute.arch.make_warp_uniform(ctid // 128)
            thr_mma = tiled_mma.get_slice(cute.make_layout(MMA_WARPGROUPS, stride=128)(wg))
            t_ca = tiled_mma.make_fragment_A(thr_mma.partition_A(s_a))
            t_cb = tiled_mma.make_fragment_B(thr_mma.partition_B(s_b))
            c_coord = tiled_mma.get_slice(ctid).partition_C(
                cute.make_identity_tensor((TILE_M, tile_n))
            )
            acc = cute.make_rmem_tensor(c_coord.shape, Float32)
            k_blocks = cute.size(t_ca, mode=[2])  # static
            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
            # accumulate onto zeroed accumulators: one code path for every k tile
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
            tile = bid
            while tile < total:
                _pid_m, pid_n, e, row0, live, live_end = locate(
                    tile, m_tiles, m_cap, seg_ptr, cnt_ptr, num_experts
                )
                if live:
                    acc.fill(0.0)
                    mainloop.consumer_wait(read)
                    cute.nvgpu.warpgroup.fence()
                    for kb in cutlass.range_constexpr(k_blocks):
                        cute.gemm(tiled_mma, acc, t_ca[(None, None, kb, read.index)],
                                  t_cb[(None, None, kb, read.index)], acc)
                    cute.nvgpu.warpgroup.commit_group()
                    read.advance()
                    for _ in cutlass.range(1, k_tiles, unroll=1):
                        mainloop.consumer_wait(read)
                        cute.nvgpu.warpgroup.fence()
                        for kb in cutlass.range_constexpr(k_blocks):
                            cute.gemm(tiled_mma, acc, t_ca[(None, None, kb, read.index)],
                                      t_cb[(None, None, kb, read.index)], acc)
                        cute.nvgpu.warpgroup.commit_group()
                        cute.nvgpu.warpgroup.wait_group(1)
                        mainloop.consumer_release(release)
                        release.advance()
                        read.advance()
                    cute.nvgpu.warpgroup.wait_group(0)
                    mainloop.consumer_release(release)
                    release.advance()
                    store(acc, c_coord, out_ptr, scale_ptr, pre_ptr, m_cap, row0,
                          pid_n * tile_n, live_end, use_scale, use_pre, clamp)
                tile = tile + grid

    @cute.jit
    def launch(
        a_ptr: cute.Pointer, b_ptr: cute.Pointer, out_ptr: cute.Pointer,
        seg_ptr: cute.Pointer, cnt_ptr: cute.Pointer, scale_ptr: cute.Pointer,
        pre_ptr: cute.Pointer, m_cap: Int32, num_experts: Int32, use_scale: Int32,
        use_pre: Int32, clamp: Float32, max_ctas: Int32, stream: cuda.CUstream,
    ):
        m_a = cute.make_tensor(a_ptr, cute.make_layout((m_cap, k), stride=(k, 1)))
        m_b = cute.make_tensor(b_ptr, cute.make_layout((n, k, num_experts), stride=(k, 1, n * k)))
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            BFloat16, BFloat16, LayoutEnum.ROW_MAJOR.sm90_mma_major_mode(),
            LayoutEnum.ROW_MAJOR.sm90_mma_major_mode(), Float32,
            (MMA_WARPGROUPS, 1, 1), tiler_mn=(64, tile_n),
        )
        a_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, tile_mnk, BFloat16, stages)
        b_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, tile_mnk, BFloat16, stages)
        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        tma_a, t_a = make_a_part_tmas(m_a, TILE_M)
        tma_t, t_t = make_a_tile_tma(m_a, a_layout, TILE_M)
        tma_b, t_b = cute.nvgpu.cpasync.make_tiled_tma_atom(
            g2s, m_b, cute.slice_(b_layout, (None, None, 0)), (tile_n, TILE_K)
        )
        tiles = (m_cap + (TILE_M - 1)) // TILE_M * n_tiles
        if cutlass.const_expr(cfg.ws):
            kernel_ws(
                tma_a, t_a, tma_t, t_t, tma_b, t_b, tiled_mma, a_layout, b_layout,
                out_ptr, seg_ptr, cnt_ptr, scale_ptr, pre_ptr, m_cap, num_experts, use_scale,
                use_pre, clamp,
            ).launch(grid=[cutlass.max(cutlass.min(tiles, max_ctas), Int32(1)), 1, 1],
                     block=[THREADS + 128, 1, 1], stream=stream, use_pdl=PDL)
        else:
            kernel(
                tma_a, t_a, tma_t, t_t, tma_b, t_b, tiled_mma, a_layout, b_layout,
                out_ptr, seg_ptr, cnt_ptr, scale_ptr, pre_ptr, m_cap, num_experts, use_scale,
                use_pre, clamp,
            ).launch(grid=[tiles, 1, 1], block=[THREADS, 1, 1], stream=stream, use_pdl=PDL)

    return launch


_FAKE_ADDR = 1 << 20


def _fake_ptr(dtype, align: int):
    return make_ptr(dtype, _FAKE_ADDR, cute.AddressSpace.gmem, assumed_align=align)


def compile_grouped_gemm(mode: str, n: int, k: int, cfg: KernelConfig | None = None,
                         ptrs=None, stream=None, out_f32: bool = False):
    """``cute.compile`` the bf16 grouped GEMM for one (mode, N, K, config; default
    ``default_config(n)``; output bf16, or float32 when ``out_f32``).

    ``ptrs`` (a, b, out, seg_start, counts, row_scale, pre_scale pointers) default to fake
    addresses (the offline compile gate); the compiled object takes the launcher's runtime
    arguments ``(a, b, out, seg_start, counts, row_scale, pre_scale, m_cap, E, use_scale,
    use_pre, clamp, max_ctas, stream)`` (``max_ctas``: the grid of the persistent ``ws``
    variants, e.g. the number of SMs).
    """
    cfg = cfg if cfg is not None else default_config(n)
    if n % cfg.tile_n or k % TILE_K:
        raise ValueError(f"N, K: expected multiples of ({cfg.tile_n}, {TILE_K}), got ({n}, {k})")
    if ptrs is None:
        ptrs = (
            _fake_ptr(BFloat16, 16), _fake_ptr(BFloat16, 16),
            _fake_ptr(Float32 if out_f32 else BFloat16, 4 if out_f32 else 2),
            _fake_ptr(Int32, 4), _fake_ptr(Int32, 4), _fake_ptr(Float32, 4),
            _fake_ptr(Float32, 16),
        )
    return cute.compile(
        _make(mode, n, k, cfg, out_f32), *ptrs, Int32(TILE_M), Int32(1), Int32(0), Int32(0),
        Float32(0.0), Int32(1), stream if stream is not None else cuda.CUstream(0),
    )


@register_kernel("grouped_gemm_swiglu_k256_n256_n128s6")
def build_grouped_gemm_swiglu():
    return compile_grouped_gemm("swiglu", 256, 256, KernelConfig(128, 6))


@register_kernel("grouped_gemm_plain_k256_n256_n256s4")
def build_grouped_gemm_plain():
    return compile_grouped_gemm("plain", 256, 256, KernelConfig(256, 4))


@register_kernel("grouped_gemm_swiglu_k256_n384_n192s5persist")
def build_grouped_gemm_swiglu_ws():
    return compile_grouped_gemm("swiglu", 384, 256, KernelConfig(192, 5, True))
