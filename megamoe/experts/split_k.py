"""Split-K for the MX GEMMs at small route counts: K slices, float32 partials, in-order fixup.

With few routed rows (decode-size batches, one-expert batches) an MX GEMM's CTAs are its
column tiles, each walking all of K: DeepSeek FC1 for one expert is 64 CTAs of 112 k tiles
on a 132-SM GPU (docs/perf.md, "Session 18"). A variant with ``splits = S``
(``KernelConfig.splits``, the ``specialized`` MX kernels only) gives every output tile ``S``
CTAs; CTA ``s`` of a tile walks the k tiles ``[s * kt // S, (s + 1) * kt // S)`` (``kt =
K / TILE_K``; ``S`` is capped at ``kt``: ``effective_splits``).

The fixup (one launch, deterministic):

1. every CTA of a live tile writes its float32 accumulators of the tile's live rows to
   ``partials[s, rank, col]``, where ``rank`` is the row's rank among all live rows
   (``rows before its expert + (row - seg_start[e])``, ``rows before`` = the sum over experts
   ``j < e`` of ``min(max(counts[j], 0), seg_start[j + 1] - seg_start[j])``), so the workspace
   holds live rows only, not the padded segments;
2. it then arrives on the tile's counter ``arrivals[pid_m * n_tiles + pid_n]`` (a CTA
   barrier, then one ``fence.acq_rel.gpu`` and ``atom.acq_rel.gpu.add`` by one thread);
3. the CTA that reads ``S - 1`` (the last to arrive) sums the ``S`` partials of each of its
   elements in slice order ``0, 1, ..., S - 1`` (float32, left to right), runs the
   variant's unchanged epilogue on the sums, and sets the counter back to zero for the next
   launch (stream order makes the reset visible to it; a CUDA-graph replay finds zeros).

So a row's bits depend only on its own ``a`` row (and pre-scale, score), the expert's weights
and ``S``: not on which CTA arrives last, on the other rows or on their number (the
invariance contract, docs/contract.md s8; ``S`` is fixed by the variant, which the caller picks,
never a batch: s7). The sum differs from the unsplit K loop's by float32 reassociation only,
far inside the s8 tolerances. No default picks a split-K variant (measured:
``mxfp4_gemm_kernel.SPLIT_K_NOTE``).

The workspace (``SplitKWorkspace``) belongs to one GEMM at a time: two launches that run
concurrently must not share one. Its ``rows`` must be at least the number of live rows of
any launch (the sum of the live counts; ``M_cap`` always suffices). A row whose rank falls
past ``rows`` (metadata outside the API's contract) is neither written nor read: memory
stays safe, that row's output is undefined.
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
import torch
from cutlass import Int32, Int64
from cutlass.cutlass_dsl import dsl_user_op

from megamoe.experts.grouped_gemm_kernel import TILE_K, KernelConfig
from megamoe.ptx import asm_i32

ARRIVAL_BARRIER_ID = 2
"""Named barrier of the MMA warps around the arrival (id 1 is the decode warpgroup's)."""


def effective_splits(config: KernelConfig, k: int) -> int:
    """The K slices a variant really uses for ``K``: ``config.splits``, at most one per k
    tile (so no slice is empty)."""
    return max(1, min(config.splits, k // TILE_K))


def arrival_slots(config: KernelConfig, m_cap: int, n: int) -> int:
    """Counters a launch over ``M_cap`` rows and ``N`` columns may touch: one per output
    tile of the grid."""
    return -(-m_cap // config.tile_m) * (n // config.tile_n)


@dataclass(frozen=True)
class SplitKWorkspace:
    """Device memory of a split-K GEMM (module docstring): ``partials`` float32 ``[S, rows,
    N]`` (``S = effective_splits``) and ``arrivals`` int32 counters, zero between launches."""

    partials: torch.Tensor
    arrivals: torch.Tensor

    @classmethod
    def create(cls, config: KernelConfig, n: int, k: int, m_cap: int, rows: int,
               device: torch.device | str) -> SplitKWorkspace:
        """The workspace of variant ``config`` for ``N``, ``K``, ``M_cap`` and at most
        ``rows`` live rows per launch."""
        splits = effective_splits(config, k)
        return cls(
            torch.zeros(splits, max(rows, 1), n, dtype=torch.float32, device=device),
            torch.zeros(max(arrival_slots(config, m_cap, n), 1), dtype=torch.int32,
                        device=device),
        )


@dsl_user_op
def arrive(addr: Int64, *, loc=None, ip=None) -> Int32:
    """``atom.acq_rel.gpu.global.add.u32`` of 1 at global address ``addr``; returns the count
    before this arrival. The CuTe DSL 4.3.5 has no ordered global atomic, hence inline PTX;
    the memory clobber keeps the compiler from moving loads or stores across it."""
    return asm_i32("atom.acq_rel.gpu.global.add.u32 $0, [$1], 1;", "=r,l,~{memory}",
                   [Int64(addr)], side_effects=True, loc=loc, ip=ip)


@cute.jit
def rows_before(seg_ptr: cute.Pointer, cnt_ptr: cute.Pointer, e: Int32,
                num_experts: Int32) -> Int32:
    """The live rows of experts ``0 .. e - 1`` (module docstring, step 1), summed over the
    lanes of the calling warp with a warp reduction (every warp gets the same value)."""
    seg = cute.make_tensor(seg_ptr, cute.make_layout(num_experts + 1))
    cnt = cute.make_tensor(cnt_ptr, cute.make_layout(num_experts))
    total = Int32(0)
    for j in cutlass.range(cute.arch.lane_idx(), e, 32, unroll=4):
        total = total + cutlass.max(cutlass.min(cnt[j], seg[j + 1] - seg[j]), Int32(0))
    return cute.arch.warp_reduction_sum(total)
