"""Grouped expert GEMM with MXFP4 weights dequantized inside the mainloop (Hopper, sm_90a).

The expert GEMMs of the ``fp8_mxfp4`` recipe (docs/contract.md s4 MXFP4, s5): the same grouped
raster, segments, epilogues and row rules as ``grouped_gemm_kernel`` (its module docstring),
with ``b`` an MXFP4 matrix per expert instead of bf16:

- ``b`` packed E2M1 codes, uint8 ``[E, N, K / 2]`` (element ``2j`` in the low nibble of byte
  ``j``), and E8M0 scale bytes, uint8 ``[E, N, K / 32]`` (one per 32 elements along K);
- element value ``e2m1(code) * 2**(byte - 127)`` (byte 255: NaN), computed as one exact
  float32 product (or +-Inf past float32's range, as in the oracle's float32 dequant) and
  converted to bf16, which is exact: an E2M1 magnitude has at most 2 significant bits and
  bf16 has float32's exponent range, subnormals included. So the bf16 wgmma sees exactly the
  values of ``oracle.formats.dequantize_mxfp4``; the weights are never written to global
  memory in any other format than the packed one.

Pipeline per K tile (``TILE_K`` = 64): warp 0 issues TMA copies of the A tile (bf16, 128B
swizzle) and of the tile's packed codes (``tile_n x 32`` bytes, unswizzled) into a
``stages``-deep ``PipelineTmaAsync``; all 256 MMA threads then decode the codes of the stage
(each thread: one vector load of its weight words, then per pair of elements a bf16x2 word
built by placing the code's bits, and two bf16x2 products, one restoring the format's
exponent bias and one with the block's scale, which rounds once to bf16: ``packed_decode``)
into one of ``B_TILES`` bf16 B tiles (the 128B-swizzled layout wgmma reads), make the writes
visible to the async proxy (``fence.proxy.async``), meet at a CTA barrier, and issue the
wgmmas. Three B buffers make the reuse safe without waiting for the MMAs: a thread decodes
tile ``kt`` into buffer ``kt % 3`` only after the barrier of tile ``kt - 1``, which every
warpgroup reaches after its ``wait_group(1)`` of tile ``kt - 2``, so every wgmma of tile
``kt - 3`` (the buffer's previous reader) is complete. The scale bytes of the tile's
``tile_n`` weight rows (all of K: ``tile_n * K / 32`` bytes, one contiguous run) are copied
to shared memory once per tile before the mainloop, except in a ``scale_regs`` variant at a
K whose rows' scale bytes are whole 16-byte vectors (``scale_run_in_smem``): each decode
thread there loads its row's scale bytes straight from global memory, 16 bytes (8 k tiles; 4
for NVFP4) at a time, one vector ahead of the k tiles it decodes, gathers its own bytes of
the vector into two registers with ``prmt``, and picks each k tile's byte by a constant
shift (the k loop unrolled by the vector's k tiles; for MXFP8 by a select and a variable
shift in the plain loop: ``SCALE_LOOP_UNROLLED``). No prologue and no K-long run: a 4-stage
64-row CTA then keeps three CTAs per SM at DeepSeek's K = 7168 (MXFP4 79 -> 66 KiB, NVFP4 93
-> 66 KiB).

``specialized`` variants split those roles (the ``kernel_specialized`` docstring): one
decode warpgroup turns each stage's weights into the next free bf16 B tile while the MMA
warpgroups multiply earlier tiles, handing tiles over through a second pipeline
(``decoded``: the decode fences its stores to the async proxy, then arrives; the MMA warps
release a tile once their wgmmas on it are complete), and a separate warp issues the TMA
loads; so the decode neither waits at a CTA-wide barrier each k tile nor for the wgmmas.

The K loop is fixed and in order (no split-K), so a row's bits depend only on its own ``a``
row, its pre-scale and score, and ``b[e]`` (the invariance contract, docs/contract.md s8).
"""

# no `from __future__ import annotations`: cute.struct reads its annotations as objects

import math
from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float32, Int32, Uint8
from cutlass.utils import LayoutEnum

from megamoe.experts.grouped_gemm_kernel import (
    _ALIGN,
    B_TILES,
    MODES,
    THREADS,
    TILE_K,
    TILE_M,
    KernelConfig,
    _fake_ptr,
    a_part_views,
    a_tile_views,
    live_rows,
    load_stage,
    make_a_part_tmas,
    make_a_tile_tma,
    make_locate_cta,
    make_store,
    prefetch_a_parts,
    tma_mainloop,
)
from megamoe.experts.mx_gemv_kernel import make_gemv
from megamoe.experts.packed_decode import (
    e2m1_word_scaled,
    e4m3_block_scale,
    e4m3_word_scaled,
    prmt,
    scale_pair,
)
from megamoe.experts.split_k import ARRIVAL_BARRIER_ID, arrive, effective_splits, rows_before
from megamoe.kernel_registry import register_kernel
from megamoe.pdl import PDL, await_inputs

ROW_BYTES = {"mxfp4": TILE_K // 2, "mxfp8": TILE_K, "nvfp4": TILE_K // 2}
"""Bytes of a weight row's payload per K tile: packed E2M1 codes, or E4M3 bytes."""
SCALE_BLOCK = {"mxfp4": 32, "mxfp8": 32, "nvfp4": 16}
"""Elements per scale byte along K (E8M0 for the MX formats, E4M3 for NVFP4)."""
WEIGHT_FORMATS = tuple(ROW_BYTES)
DECODE_THREADS = 128
"""The decode warpgroup of the ``specialized`` variants."""
SCALE_COPY_BATCH = 8
"""Scale-byte vectors a thread loads before it stores them (``copy_scales``; 4 registers
each). A decode thread of a 64-row specialized variant copies 7 vectors at DeepSeek FC1
(K = 7168), so one batch: one memory round trip instead of 7. Registers (ptxas, sm_90a,
DeepSeek FC1): MXFP4 and MXFP8 ``m64n64s3ws`` stay at 58; NVFP4 ``m64n64s2ws`` (14 vectors)
goes from 58 to 62, still three CTAs per SM."""
SCALE_VEC_BYTES = 16
"""Bytes of one scale-byte vector load (``copy_scales``, and a ``scale_regs`` decode thread's
register vectors)."""
SCALE_LOOP_UNROLLED = {"mxfp4": True, "mxfp8": False, "nvfp4": True}
"""Per format, how a ``scale_regs`` decode thread takes each k tile's scale bytes from the
ones it gathered from the current vector (``pack_scales``): with the k loop unrolled by the
vector's k tiles, by a constant shift (``packed_scales``), or in the plain k loop by a
select of the word and a variable shift (``picked_scales``). Unrolled, MXFP8's decode
(twice FP4's payload per thread, with its E4M3 NaN test) is copied 8 times: measured 10-24 %
slower than ``m64n64s3ws`` at DeepSeek, while a picking loop (session 23's first version)
was 3-11 % faster at uniform batches; the FP4 formats gain from the unroll (docs/perf.md
"Session 23")."""
CHUNK = 8
"""bf16 elements per 16-byte chunk: the unit the 128B swizzle moves (and the decode stores)."""
MXFP4_CONFIGS = (
    KernelConfig(64, 3, tile_m=64, specialized=True),
    KernelConfig(64, 4, specialized=True),
    KernelConfig(64, 4),
    KernelConfig(128, 6),
    KernelConfig(64, 2),
    KernelConfig(64, 6, tile_m=64),
    KernelConfig(64, 3, tile_m=64, specialized=True, splits=2),
    KernelConfig(64, 3, tile_m=64, specialized=True, splits=4),
    KernelConfig(64, 4, tile_m=64, specialized=True),
    KernelConfig(64, 6, tile_m=64, specialized=True),
    KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True),
    KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True, halves=True),
    KernelConfig(64, 6, tile_m=64, specialized=True, halves=True),
    KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True, halves=True, b_tiles=4),
    KernelConfig(16, 1, gemv_warps=4),
    KernelConfig(16, 1, gemv_warps=8),
)
"""The compiled MXFP4 variants; ``mx_default_config`` takes the first of the height the route
capacity asks for (``MX_NARROW_ROWS_PER_EXPERT``) whose column tile divides ``N`` (one CTA per tile;
no persistent variant), or for a small capacity and a known ``K`` a deeper pipeline
(``MX_NARROW_DEPTHS``). Their H200 A/B numbers: docs/perf.md, "MX GEMM variants" and
"Session 21" (``python -m megamoe.bench.mx_gemm``).

- ``n64s4``: every warp decodes and multiplies; about 110 KB of shared memory at K = 7168,
  so two CTAs share an SM and one's decode overlaps the other's wgmmas and loads (1.7x
  faster than ``n128s6`` with two rows per expert). ``n64s2``: three CTAs per SM, shallower
  pipelines (1-4 % slower than ``n64s4`` except at FC2).
- ``n64s4ws`` (the default for large route capacities): the ``specialized`` variant (a decode
  warpgroup, two MMA warpgroups and a TMA
  warp; 416 threads, 59 registers each; two CTAs per SM): 3-7 % faster than ``n64s4`` at
  every DeepSeek shape measured (uniform T = 1, 16, 64, 1024). Its register twin
  ``n64s4wsr`` (NVFP4's large-capacity default) was no faster here: +2.9 / -4.4 % (FC1 /
  FC2) at DeepSeek uniform T = 4096, -3.2 / -2.4 % at one expert, within 1 % at gpt-oss
  (docs/perf.md "Session 28").
- ``m64n64s6``: 64-row M tiles (one MMA warpgroup, both warpgroups decoding): half the A
  bytes and wgmmas of a 128-row tile; faster than ``n64s4`` only at T = 64 FC1.
- ``m64n64s3ws`` (the default for small route capacities): ``specialized`` with one MMA
  warpgroup: 288 threads and about 70 KB of shared memory at K = 7168, so three CTAs (three
  decode warpgroups) share an SM. H200, DeepSeek uniform, one A load per stage
  (``A_PART_ROWS``), FC1 / FC2 us against ``n64s4ws``: T = 1024 (32 rows per expert)
  3729 / 1995 against 4826 / 2570; T = 2048 (64 rows) 3825 / 2127 against 6489 / 3411;
  T = 4096 (128 rows) 7526 / 3914 against 5580 / 3172; one expert (skewed) T = 1 69 / 45
  against 53 / 39 (docs/perf.md, "One A load per stage").
- ``m64n64s4ws``, ``m64n64s6ws``: the same kernel with deeper TMA pipelines, which the
  narrow default takes when they keep enough CTAs on an SM (``MX_NARROW_DEPTHS``).
- ``m64n64s4wsr``: ``m64n64s4ws`` with the scale bytes in registers (``scale_regs``; the
  module docstring): three CTAs per SM at every K of whole scale vectors. H200, DeepSeek,
  GEMM alone, against the variants the narrow default took before (FC1 ``m64n64s6ws``, FC2
  ``m64n64s4ws``): FC1 -12 / -13 % at uniform T = 16 / 64, -1 / -5 % at one expert T = 1 /
  16, +4 % at uniform T = 1; FC2 -3 to -5 % everywhere measured (docs/perf.md "Session
  23").
- ``m64n64s4wsrh`` (every format; the narrow default where three CTAs fit,
  ``MX_NARROW_DEPTHS``): ``m64n64s4wsr`` with the segments' first halves first
  (``halves_tile``). H200, DeepSeek, GEMM alone in the layer's grid (``M_cap`` for the
  route capacity), against ``m64n64s4wsr``, MXFP4 FC1 / FC2: -30 / -24 % at one expert
  T = 1, -29 / -4 % at T = 16, -13 / -8 % at uniform T = 1, -2 / -2 % at T = 16 (MXFP8:
  -19 / -17, -24 / -14, -11 / -9, +0.5 / -3 %); every live row bit for bit the same
  (docs/perf.md "Session 25").
- ``m64n64s6wsh``: ``m64n64s6ws`` with the same raster, the fallback where ``K``'s scale run
  keeps ``m64n64s4wsrh`` to two CTAs per SM (``MX_NARROW_DEPTHS``; NVFP4's twin measured in
  session 26).
- ``m64n64s4wsrhb4`` (MXFP4 and NVFP4; the narrow default where it keeps three CTAs per
  SM, ``MX_NARROW_DEPTHS``): ``m64n64s4wsrh`` with four bf16 B tiles instead of
  ``B_TILES`` (``KernelConfig.b_tiles``; 74 KiB at DeepSeek's K), so the decode warpgroup
  runs one more k tile ahead of the wgmmas. H200, DeepSeek, GEMM alone in the layer's grid,
  MXFP4 FC1 / FC2 against ``m64n64s4wsrh``: -4.1 / -3.7 % at uniform T = 1, -6.7 / -6.6 % at
  T = 16, -5.8 / -6.6 % at T = 64, -5.2 / -6.5 % at T = 256, -5.6 / -5.9 % at T = 1024;
  one expert +2.3 / -5.6 % at T = 1, 0.0 / -1.2 % at T = 16 (docs/perf.md "Session 27").
- ``n16gemv4`` (the default for a capacity of at most ``GEMV_MAX_ROWS`` tokens), ``n16gemv8``:
  the decode-batch GEMV on warp-level MMAs (``mx_gemv_kernel``): 16 weight rows per tile,
  four or eight warps splitting K, a persistent grid; no shared-memory pipeline, so a
  one-expert FC1 at DeepSeek is 256 tiles, not 64 (docs/perf.md "Session 31"). MXFP8 and
  NVFP4 compile ``n16gemv4`` too, the default at their ``GEMV_MAX_ROWS``."""
MXFP8_CONFIGS = (
    KernelConfig(64, 3, tile_m=64, specialized=True),
    KernelConfig(64, 3),
    KernelConfig(128, 5),
    KernelConfig(64, 3, specialized=True),
    KernelConfig(64, 4, tile_m=64),
    KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True),
    KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True, halves=True),
    KernelConfig(64, 3, tile_m=64, specialized=True, halves=True),
    KernelConfig(16, 1, gemv_warps=4),
)
"""The MXFP8 variants, chosen as ``MXFP4_CONFIGS`` (a stage holds twice the payload bytes:
``n64s3`` is the deepest 64-column pipeline that still fits two CTAs per SM at K = 7168).
``n64s3ws`` measured 5-11 % slower than ``n64s3`` (one decode warpgroup decodes twice the
payload bytes of MXFP4 per tile). ``m64n64s3ws`` (the default for small route capacities): as
for MXFP4 (about 75 KB); H200, DeepSeek uniform, FC1 / FC2 us against ``n64s3``: T = 16
2244 / 1181 against 3175 / 1581, T = 1024 4550 / 2423 against 6382 / 3248 (docs/perf.md,
"One A load per stage"). ``m64n64s4wsr`` (``scale_regs``, its k loop not unrolled:
``SCALE_LOOP_UNROLLED``) keeps three CTAs per SM at K = 7168 and is the narrow default
where it does (``MX_NARROW_DEPTHS``): H200, DeepSeek, GEMM alone, against ``m64n64s3ws``,
FC1 / FC2 -14 / -5 % at uniform T = 1, -6 / -5 % at T = 16, -3 / -6 % at T = 64, and at one
expert FC1 +0.3 / -1.2 % and FC2 +1.5 / +3.0 % at T = 1 / 16 (docs/perf.md "Session
24"). ``m64n64s3wsh`` (``m64n64s3ws`` with the first-halves raster) is the narrow default
where ``m64n64s4wsrh`` keeps two (gpt-oss's K = 2880): 1-21 % faster than ``m64n64s3ws`` in
the GEMM alone there, most at FC2 (docs/perf.md "Session 26"). ``n64s3`` stays the default
for large route capacities: the 128-row register variant ``n64s4wsr`` was +6.1 / +1.0 %
(FC1 / FC2) at DeepSeek uniform T = 4096 and +7.4 / +4.0 % at one expert, ``n64s3wsr``
+10.1 / +4.7 % (H200, GEMM alone, docs/perf.md "Session 28")."""
NVFP4_CONFIGS = (
    KernelConfig(64, 2, tile_m=64, specialized=True),
    KernelConfig(64, 4, specialized=True, scale_regs=True),
    KernelConfig(64, 3),
    KernelConfig(128, 4),
    KernelConfig(64, 3, specialized=True),
    KernelConfig(64, 4, tile_m=64),
    KernelConfig(64, 4, tile_m=64, specialized=True),
    KernelConfig(64, 6, tile_m=64, specialized=True),
    KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True),
    KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True, halves=True),
    KernelConfig(64, 6, tile_m=64, specialized=True, halves=True),
    KernelConfig(64, 4, tile_m=64, specialized=True, scale_regs=True, halves=True, b_tiles=4),
    KernelConfig(16, 1, gemv_warps=4),
)
"""The NVFP4 variants, chosen as ``MXFP4_CONFIGS`` (twice the scale bytes of MXFP4 in shared
memory: fewer stages). ``m64n64s2ws``: the MX formats' 64-row shape with two stages
(NVFP4's 28 KB of scale bytes at K = 7168 leave about 72 KB per CTA, three CTAs per SM);
faster than ``n64s3`` in the GEMM alone at DeepSeek uniform T = 16 and 1024 (FC1 2672 /
3122 us, 5535 / 6267 us), but not in the layer (uniform T = 16 to 1024 within 2 % of the
``n64s3`` layer, one-expert batches 31-65 % slower). Two stages were its problem, not its
height: ``m64n64s4ws`` / ``m64n64s6ws`` (the narrow default, ``MX_NARROW_DEPTHS``) were
25-36 % faster than ``n64s3`` at DeepSeek uniform T = 16 and 64 and 0-34 % faster at one
expert, except one row through FC2 (22.3-22.5 against 21.1 us) in the GEMM alone; in the
whole layer (``layer_stages``) 21-28 % faster at uniform T = 1, 16 and 1024, within 1 % at
one-expert T <= 16, and 27 % slower at skewed T = 1024 (thousands of rows on a few
experts, where 128-row tiles win: ``MX_NARROW_ROWS_PER_EXPERT``) (docs/perf.md "Session 22").
``m64n64s4wsr`` (``scale_regs``): without the 28 KiB scale run, three CTAs per SM at K =
7168; 14 % faster than ``m64n64s6ws`` at DeepSeek FC1 uniform T = 16 and 64, 5 % than
``m64n64s4ws`` at FC2 (docs/perf.md "Session 23"). ``m64n64s6wsh``, ``m64n64s6ws`` with the
first-halves raster, is the fallback where the scale run stays (gpt-oss's K = 2880): 1-32 %
faster than ``m64n64s6ws`` in the GEMM alone there (docs/perf.md "Session 26").
``m64n64s4wsrhb4`` (four bf16 B tiles, as MXFP4's) first where three CTAs fit: H200,
DeepSeek, GEMM alone, FC1 / FC2 against ``m64n64s4wsrh`` -3.7 / -2.9 % at uniform T = 1,
-5.3 / -4.0 % at T = 16, -3.7 / -3.6 % at T = 64, -6.0 / -3.4 % at T = 256, one expert
-1.7 / -5.0 % at T = 1, -3.3 / +4.9 % at T = 16 (docs/perf.md "Session 27").
``n64s4wsr`` (the default for large or unknown route capacities, past
``MX_NARROW_ROWS_PER_EXPERT``): the 128-row specialized kernel (two MMA warpgroups, 416 threads, 59
registers at the benchmark shapes) with the scale bytes in registers, two CTAs per SM at
DeepSeek's and gpt-oss's K (at gpt-oss's 2880 the run stays in shared memory). H200, GEMM
alone in the layer's grid, FC1 / FC2 against ``n64s3``, the default before session 28:
DeepSeek uniform T = 4096 (128 rows per expert) -4.4 / -4.7 %, T = 2048 -14.7 / -8.7 %,
one expert T = 4096 -13.3 / -7.5 %; gpt-oss uniform T = 4096 -7.6 / -6.9 %, one expert
-6.3 / -5.6 %; every live row bit for bit ``n64s3``'s (docs/perf.md "Session 28"). Its
four-B-tile twin ``n64s4wsrb4`` gains 1-2 points more at DeepSeek and is 25-34 % slower at
gpt-oss, so not taken. ``n64s3ws`` measured 4 % faster than ``n64s3`` at DeepSeek FC1 T =
16, 2-5 % slower everywhere else (whole A tiles)."""
CONFIGS_BY_FORMAT = {"mxfp4": MXFP4_CONFIGS, "mxfp8": MXFP8_CONFIGS, "nvfp4": NVFP4_CONFIGS}


SPLIT_K_NOTE = """Split-K (``split_k``; MXFP4 ``m64n64s3wsk2`` / ``m64n64s3wsk4``) is compiled and
GPU-tested but never a default: H200, DeepSeek, GEMM alone (``mx_gemm``, docs/perf.md,
"Session 19"), FC1 + FC2 us against ``m64n64s3ws``: one expert with one row 59.8 / 57.8
(k2 / k4) against 73.3, but a real one-token batch (8 experts, 1 row each) 250.7 / 289.0
against 249.6, and 4 or 16 tokens 19-75 % slower (the slices multiply the CTAs, dead ones
included). A caller that knows its batches put every route on a few experts may pass one."""

MX_NARROW_ROWS_PER_EXPERT = {"mxfp4": 64, "mxfp8": 64, "nvfp4": 64}
"""Per format: callers whose route capacity (``C * K``) is at most this many rows per expert
(``C * K <= bound * E``, ``E`` the experts the GEMM covers) get the format's 64-row variant
(``MX_NARROW_DEPTHS``, else the first of its configs with ``tile_m`` 64), larger ones (and
callers that give no capacity) its first 128-row variant; a caller that gives a capacity
but no expert count is read as one expert (the most rows a single expert can get). A
64-row tile needs one tile where a 128-row one does for experts of up to 64 rows, with half
its A bytes and wgmmas and three CTAs per SM: H200, DeepSeek uniform, MXFP4 FC1 3729
against 4826 us at 32 rows per expert (T = 1024, 8192 routes) and 3825 against 6489 us at
64 rows (T = 2048); at 128 rows (T = 4096) the 128-row tile wins (5580 against 7526 us).
Session 29 (docs/perf.md "Session 29") moved the bound from 8192 routes (32 rows per expert
at DeepSeek's E = 256, K = 8; 64 at gpt-oss's E = 128, K = 4, where nothing changes) to 64
rows per expert: H200, GEMM alone in the layer's grid, DeepSeek uniform T = 1536 and 2048
(48 and 64 rows per expert), the narrow default against the 128-row one, FC1 / FC2: MXFP4
-33 / -33 % and -34 / -32 %, MXFP8 -27 / -27 % and -27 / -30 %, NVFP4 (against
``n64s4wsr``) -31 / -31 % and -31 / -30 %, 0.8-1.7 ms a GEMM; one expert with the same T
(1536 or 2048 rows) +12 to +46 % (MXFP8's FC1 the most), 24-175 us a GEMM, the trade the
old bound already made at T = 1024 (+14 to +48 %). The capacity does not say how the routes
spread: a batch whose routes all go to one expert (skewed) runs 8-34 % slower on the 64-row
variant than on main's earlier 128-row kernels (the whole layer, DeepSeek skewed T <= 1024),
while uniform batches run 15-23 % faster (docs/perf.md, "One A load per stage").
NVFP4's two-stage 64-row variant won nowhere in the layer (its bound was 0 until its deeper
pipelines, ``MX_NARROW_DEPTHS``, were measured; with them, the same trade as MXFP4's: the
DeepSeek layer 28 % faster at uniform T = 1024 and 27 % slower at skewed T = 1024). A
choice from the capacity and the expert count, never from a batch's live rows
(docs/contract.md s7)."""


GEMV_MAX_ROWS = {"mxfp4": 32, "nvfp4": 32, "mxfp8": 32}
"""Per format: callers whose capacity in tokens (``C``, the most rows one expert can get: an
expert appears at most once per token, docs/contract.md s2) is at most this many get
``GEMV_DEFAULT``, the decode-batch GEMV on warp-level MMAs (``mx_gemv_kernel``); formats not
named here have no GEMV variant. Its cost grows with the rows of an expert (one pass over
the expert's weights per ``GEMV_ROWS`` = 16 rows), the wgmma variants' hardly. H200, GEMM
alone (``mx_gemm``), ``n16gemv4`` against the narrow default, FC1 / FC2 us (docs/perf.md
"Session 31"): DeepSeek one expert with 1 row 13.7 / 8.6 against 40.1 / 14.5, 16 rows 20.3 /
12.2 against 41.0 / 18.7, 64 rows 69.0 / 37.4 against 40.9 / 20.2 (a loss); uniform T = 1
(8 experts x 1 row) 70.1 / 39.8 against 109.4 / 57.6, T = 16 934 / 537 against 1385 / 756,
T = 64 (2 rows each) 1885 / 1076 against 2756 / 1504, T = 256 (8 rows) 1951 / 1123
against 2769 / 1519, T = 1024 (32 rows) 5586 / 2837 against 2927 / 1605 (a loss); gpt-oss
alike (one expert with 64 rows a loss, 16 a win). So the bound is the tokens: at most two
passes for any expert, where one expert with every route still wins or ties (32 rows:
36.3 / 20.1 against 41.0 / 18.8); a capacity of 64 tokens would win 30 % at uniform routes
and lose 70 % at one expert. The whole ``fp8_mxfp4`` layer by stage (``layer_stages``, the
rule against the same code with it off), forward us: DeepSeek uniform T = 1 / 4 / 16 147.5 /
473.9 / 1845 against 191.5 / 583.0 / 2158, one expert 42.6 / 44.1 / 55.0 against 75.8 /
77.2 / 87.2; gpt-oss uniform 57.1 / 143.8 / 486.3 against 84.0 / 212.8 / 722.8, one expert
32.3 / 33.9 / 38.4 against 59.7 / 60.7 / 63.7.

NVFP4 and MXFP8 (the layer's grid for the capacity: ``exp_decode_depth.py --layer-mcap``,
FC1 / FC2 us, DeepSeek): NVFP4's GEMV beats its narrow default ``m64n64s4wsrhb4`` in every
case measured (session 32, docs/perf.md "Session 32"), uniform T = 1 / 16 / 32 79.1 / 44.8,
1077 / 618, 2151 / 1237 against 115.7 / 61.5, 1491 / 832, 2967 / 1662, one expert with 1 /
16 / 32 rows 18.2 / 10.8, 22.4 / 13.1, 40.4 / 21.7 against 40.3 / 19.5, 41.5 / 27.7, 42.3 /
45.5 (gpt-oss alike): MXFP4's bound. MXFP8's GEMV, since the E4M3 decode folds its rebias
into the block scale (``packed_decode``; session 34, docs/perf.md "Session 34"), beats the
narrow default too in every case measured: DeepSeek uniform T = 1 / 4 / 16 / 32 95.9 / 55.6,
354 / 202, 1352 / 783, 2684 / 1579 against ``m64n64s4wsrh``'s 147.5 / 78.3, 488 / 258, 1845
/ 1000, 3620 / 1998; one expert with 4 / 16 / 32 rows 21.7 / 15.7, 25.2 / 17.4, 45.3 / 23.3
against 62.7 / 25.8, 64.0 / 28.4, 64.4 / 46.8; gpt-oss alike against ``m64n64s3wsh``
(uniform T = 32 937 / 462 against 1185 / 573, one expert with 32 rows 27.8 / 19.5 against
34.8 / 26.5). Before the fold it lost at uniform T = 16 and 32 (session 32), and its bound
was one token. So all three formats share MXFP4's bound."""
GEMV_DEFAULT = KernelConfig(16, 1, gemv_warps=4)
"""The GEMV variant the default takes (``GEMV_MAX_ROWS``): four warps split K; eight were
slower in 12 of 16 cases (the same runs)."""


def mx_gemv(weights: str, tokens: int | None) -> bool:
    """Whether a caller with static capacity ``tokens`` (``C``) gets the GEMV variant of
    format ``weights`` (``GEMV_MAX_ROWS``)."""
    return tokens is not None and tokens <= GEMV_MAX_ROWS.get(weights, 0)


def mx_narrow(weights: str, routes: int | None, experts: int | None = None) -> bool:
    """Whether a caller with static route capacity ``routes`` (``C * K``) over ``experts``
    experts (one when not given) gets 64-row tiles: ``MX_NARROW_ROWS_PER_EXPERT``."""
    if routes is None:
        return False
    return routes <= MX_NARROW_ROWS_PER_EXPERT[weights] * (1 if experts is None else experts)


SM90_SHARED_BYTES_PER_SM = 228 * 1024
"""Shared memory of one Hopper SM (H100, H200) that resident CTAs divide among them."""
SM90_SHARED_BYTES_RESERVED_PER_CTA = 1024
"""Shared memory the hardware keeps per resident CTA beside what the kernel allocates."""
SM90_REGISTERS_PER_SM = 65536
"""32-bit registers of one Hopper SM that resident CTAs divide among them."""
MX_REGISTERS_PER_THREAD = 64
"""The registers a thread of these kernels is counted with: ptxas (sm_90a) gives the
defaults 58-59 at the benchmark shapes (the four-B-tile ``m64n64s4wsrhb4`` 67-71 at
DeepSeek's, which still fit the three CTAs counted: ``tests/host/test_mx_registers_host.py``
compiles every default and checks) and allocates a warp's registers in units of 256 (8 per
thread), so 64."""

MX_NARROW_DEPTHS: dict[str, tuple[tuple[str, int], ...]] = {
    "mxfp4": (("m64n64s4wsrhb4", 3), ("m64n64s4wsrh", 3), ("m64n64s6wsh", 2)),
    "mxfp8": (("m64n64s4wsrh", 3), ("m64n64s3wsh", 1)),
    "nvfp4": (("m64n64s4wsrhb4", 3), ("m64n64s4wsrh", 3), ("m64n64s6wsh", 2)),
}
"""Per format, the 64-row specialized variants the narrow default prefers, in order, as
``(name, CTAs per SM)``: the variant (one of the format's compiled configs) is taken if it
keeps that many CTAs per SM (``ctas_per_sm``) at the GEMM's ``K``; when none qualifies (or
``K`` is not given) the narrow default is the format's first 64-row variant.
Session 27 (docs/perf.md "Session 27"): MXFP4 and NVFP4 take ``m64n64s4wsrhb4``, the
session-25 variant with four bf16 B tiles (``KernelConfig.b_tiles``), where it keeps three
CTAs per SM (DeepSeek's K = 7168 and 2048; at gpt-oss's 2880, where the scale run stays,
it keeps two and the rule goes on to ``m64n64s4wsrh``). Whole DeepSeek ``fp8_mxfp4`` layer
by stage against the session-26 rule, forward: -3.9 / -6.5 / -4.3 % at uniform T = 1 / 16
/ 256, +0.5 / +0.4 / -2.0 % at one expert. Not taken: MXFP8's four-tile variants (its
stage is twice as large: ``m64n64s3wsrhb4`` keeps three CTAs with one stage fewer and lost
6-14 % at DeepSeek uniform batches, ``m64n64s4wsrhb4`` keeps two and lost 2-23 %), and at
gpt-oss MXFP4's ``m64n64s3wsrhb4`` (12-15 % slower at uniform T >= 16), MXFP8's
``m64n64s3wshb4`` and NVFP4's ``m64n64s3wshb4`` / ``m64n64s6wshb4`` (all within 1.5 % at
uniform batches, up to 11 % slower at one expert).
Session 25 (docs/perf.md "Session 25"): ``m64n64s4wsrh``, ``m64n64s4wsr`` with the
segments' first halves first (``halves_tile``), in its place in every format: the same
shared memory and rows, the live CTAs on consecutive blocks. Whole DeepSeek layer by
stage against ``m64n64s4wsr``: forward -21 / -13 % (``fp8_mxfp4``), -16 / -17 %
(``mxfp8``), -24 / -18 % (``nvfp4``) at one expert T = 1 / 16; -12 / -8 / -7 % at uniform
T = 1; -1 to -3 % at uniform T = 16; within 1 % at T = 256 (uniform and one expert).
Session 26 (docs/perf.md "Session 26"): the same raster on the fallbacks, where the scale
run stays in shared memory and ``m64n64s4wsrh`` keeps too few CTAs (gpt-oss's K = 2880):
NVFP4 ``m64n64s6wsh`` and MXFP8 ``m64n64s3wsh`` (``(name, 1)``: at any occupancy, as the
first 64-row variant it replaces was). H200, gpt-oss, GEMM alone in the layer's grid,
against the twin without the raster, FC1 / FC2: NVFP4 -16 / -32 % at one expert T = 1,
-5 / -27 % at T = 16, -6 / -1 % at uniform T = 1, -2 / -3 % at T = 16; MXFP8 -2 / -21 %,
-1 / -14 %, -2 / -19 %, -2 / -3 %; every live row bit for bit the twin's. MXFP4 takes
``m64n64s6wsh`` for the same fallback (where ``K``'s scale run leaves ``m64n64s4wsrh`` two
CTAs, e.g. H = 7040).
Session 23 (docs/perf.md): ``m64n64s4wsr`` first, the 4-stage pipeline without the
K-long scale run (``scale_regs``), which keeps three CTAs per SM wherever the scale bytes
are whole vectors and, where they are not (gpt-oss's K = 2880), runs ``m64n64s4ws``'s code.
The whole DeepSeek layer by stage against the previous rule (``s6ws`` / ``s4ws``):
``fp8_mxfp4`` forward -9 / -8 % at uniform T = 16 / 1024, -4 / -3 / -9 % at one expert T =
1 / 16 / 1024, +3 % at uniform T = 1 (FC1 133 against 122 us: eight rows, where the 6-stage
pipeline's depth still wins); ``nvfp4`` -3 / -10 / -9 % at uniform T = 1 / 16 / 1024, -6 /
-5 / -10 % at one expert.
Before that, with the run in shared memory (H200, GEMM alone,
``docs/wip/exp_decode_depth.py``, docs/perf.md "Session 21"): at one
or a few rows per expert a ``m64n64s3ws`` CTA waits on its three-deep TMA pipeline, not on
its decode (a second decode warpgroup made it slower in 6 of 8 cases; more stages made it
faster, every live row bit for bit the same). ``m64n64s4ws`` keeps three CTAs per SM
where the K-long scale run is small (DeepSeek FC2, gpt-oss FC1 and FC2) and was 1-12 % faster than
``m64n64s3ws`` at uniform T = 1 to 64 there (6.6-7.5 % at DeepSeek FC2); at DeepSeek FC1
(K = 7168) it keeps two and lost about 7 % at uniform T = 16 and 64, where ``m64n64s6ws``
(also two) ties ``m64n64s3ws`` (-0.0 %, +0.7 %), and wins 3 % at T = 4 and 12-21 % at one
expert and at T = 1. At 8 and 32 rows per expert (uniform T = 256, 1024) ``m64n64s4ws`` at
FC2 stays 6.5-7 % faster and ``m64n64s6ws`` at FC1 ties (-0.3 %, +0.3 %) (Session 22).
NVFP4 (the same rule; docs/perf.md "Session 22"): its two-stage ``m64n64s2ws`` was the
shallow one; ``m64n64s6ws`` at DeepSeek FC1 (two CTAs per SM) and ``m64n64s4ws`` at FC2
(three) are 15-29 % faster than it at uniform T = 1 to 64 and at one expert.
MXFP8: ``m64n64s4wsr`` where it keeps three CTAs per SM (DeepSeek's K = 7168 and 2048; at
gpt-oss's 2880 its run stays and two fit, so ``m64n64s3ws``): 3-14 % faster than
``m64n64s3ws`` at uniform T = 1 to 64, within 3 % at one expert (``MXFP8_CONFIGS``;
docs/perf.md "Session 24"). Before the register variant its deeper pipelines kept two CTAs
and lost 7-12 % at uniform T = 16 and 64 (Session 22)."""


def scale_run_in_smem(cfg: KernelConfig, k: int, weights: str = "mxfp4") -> bool:
    """Whether a CTA of variant ``cfg`` at ``K`` copies its tile's scale bytes for all of K
    into shared memory (``copy_scales``) before its first decode. Not for a ``scale_regs``
    variant whose weight rows' scale bytes are whole ``SCALE_VEC_BYTES`` vectors (``K`` a
    multiple of 512 for the MX formats, 256 for NVFP4; DeepSeek's 7168 and 2048 are,
    gpt-oss's 2880 is not): each decode thread then loads its row's scale vectors from
    global memory into registers one vector ahead of the one it decodes with
    (``kernel_specialized``). The bytes, and so every decoded bf16, are the same either way
    (docs/contract.md s4)."""
    k_scales = k // SCALE_BLOCK[weights]
    return not (cfg.scale_regs and k_scales % SCALE_VEC_BYTES == 0)


def mx_storage(cfg: KernelConfig, k: int, weights: str = "mxfp4"):  # -> cute.struct
    """The shared-memory layout of one CTA of variant ``cfg`` at ``K`` (the ``_make`` kernels
    allocate exactly this): TMA stage barriers, the decoded-tile barriers, the split-K
    arrival slot, the A stages and bf16 B tiles (wgmma's 128B swizzle, 1 KiB aligned), the
    packed-weight stages, and the tile's scale bytes for all of K (one 16-byte vector when
    ``scale_run_in_smem`` is false: unused)."""
    row_bytes = ROW_BYTES[weights]
    k_scales = k // SCALE_BLOCK[weights]
    run_bytes = (cfg.tile_n * k_scales if scale_run_in_smem(cfg, k, weights)
                 else SCALE_VEC_BYTES)
    tile_n, stages, tile_m, b_tiles = cfg.tile_n, cfg.stages, cfg.tile_m, cfg.b_tiles

    @cute.struct
    class Storage:
        bars: cute.struct.MemRange[cutlass.Int64, stages * 2]
        dbars: cute.struct.MemRange[cutlass.Int64, b_tiles * 2]  # ``specialized`` only
        arrived: cute.struct.MemRange[Int32, 1]  # split-K: the count before this CTA's arrival
        sa: cute.struct.Align[cute.struct.MemRange[BFloat16, tile_m * TILE_K * stages], _ALIGN]
        sb: cute.struct.Align[
            cute.struct.MemRange[BFloat16, tile_n * TILE_K * b_tiles], _ALIGN
        ]
        sq: cute.struct.Align[cute.struct.MemRange[Uint8, tile_n * row_bytes * stages], 128]
        ss: cute.struct.Align[cute.struct.MemRange[Uint8, run_bytes], 16]

    return Storage


def ctas_per_sm(cfg: KernelConfig, k: int, weights: str = "mxfp4") -> int:
    """How many CTAs of variant ``cfg`` at ``K`` fit on one Hopper SM: by shared memory, and
    by registers (``MX_REGISTERS_PER_THREAD`` for each of its 256 to 416 threads: three
    288-thread CTAs, so a ``scale_regs`` ``m64n64s3wsr``, 56 KiB, gets three, not four)."""
    per_cta = mx_storage(cfg, k, weights).size_in_bytes() + SM90_SHARED_BYTES_RESERVED_PER_CTA
    threads = (DECODE_THREADS + 128 * (cfg.tile_m // 64) + 32 if cfg.specialized
               else THREADS)
    by_registers = SM90_REGISTERS_PER_SM // (threads * MX_REGISTERS_PER_THREAD)
    return min(SM90_SHARED_BYTES_PER_SM // per_cta, by_registers)


def mx_default_config(n: int, weights: str = "mxfp4", routes: int | None = None,
                      k: int | None = None, experts: int | None = None,
                      tokens: int | None = None) -> KernelConfig:
    """The variant of weight format ``weights`` for an ``N`` (and the GEMM's ``K``): when
    ``routes`` (the caller's static route capacity) over ``experts`` experts is narrow
    (``mx_narrow``: at most ``MX_NARROW_ROWS_PER_EXPERT[weights]`` rows per expert), the
    first of ``MX_NARROW_DEPTHS[weights]`` whose column tile divides ``N`` and that keeps
    its CTAs per SM at ``K``, else the first 64-row one whose column tile divides ``N``; for
    larger (or unknown) capacities the first 128-row one (any variant whose tile divides
    ``N`` when the preferred height has none). Never a split-K variant (``SPLIT_K_NOTE``).
    Before all that: ``GEMV_DEFAULT`` when the capacity in ``tokens`` is at most
    ``GEMV_MAX_ROWS[weights]`` and 16 divides ``N``."""
    configs = CONFIGS_BY_FORMAT[weights]
    if mx_gemv(weights, tokens) and n % GEMV_DEFAULT.tile_n == 0:
        return GEMV_DEFAULT
    narrow = mx_narrow(weights, routes, experts)
    fits = [cfg for cfg in configs
            if n % cfg.tile_n == 0 and cfg.splits == 1 and not cfg.gemv_warps]
    if narrow and k is not None:
        by_name = {cfg.name: cfg for cfg in fits}
        for name, ctas in MX_NARROW_DEPTHS[weights]:
            cfg = by_name.get(name)
            if cfg is not None and ctas_per_sm(cfg, k, weights) >= ctas:
                return cfg
    for cfg in fits:
        if (cfg.tile_m < TILE_M) == narrow:
            return cfg
    if fits:
        return fits[0]
    raise ValueError(f"N: expected a multiple of {min(c.tile_n for c in configs)}, got {n}")


def mxfp4_default_config(n: int, routes: int | None = None, k: int | None = None,
                         experts: int | None = None) -> KernelConfig:
    """``mx_default_config`` for MXFP4 weights."""
    return mx_default_config(n, "mxfp4", routes, k, experts)


def decode_k_tile(mainloop, decoded, read, fill, decode, s_qw, scales, s_b32, outer, wrow,
                  b0):
    """One k tile of the specialized kernel's decode warpgroup, whichever path its scale bytes
    come from (shared-memory run, register vectors, picked words): wait for the tile's TMA
    stage ``read``, decode it with ``scales`` into the free bf16 B tile ``fill``, hand that to
    the MMA warpgroups, free the stage. Returns the advanced ``(read, fill)``: the callers'
    dynamic loops carry the states by name. Module-level, all operands passed: the DSL
    refuses a closure that captures variables inside dynamic control flow."""
    mainloop.consumer_wait(read)
    decoded.producer_acquire(fill)
    decode(s_qw, scales, s_b32, outer, wrow, b0, read.index, fill.index)
    cute.arch.fence_proxy(cute.arch.ProxyKind.async_shared,
                          space=cute.arch.SharedSpace.shared_cta)
    decoded.producer_commit(fill)
    fill.advance()
    mainloop.consumer_release(read)
    read.advance()
    return read, fill


def _make(mode: str, n: int, k: int, cfg: KernelConfig, out_f32: bool, weights: str = "mxfp4"):
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"weights: expected one of {WEIGHT_FORMATS}, got {weights!r}")
    configs = CONFIGS_BY_FORMAT[weights]
    if cfg not in configs:
        raise ValueError(f"config: expected one of {[c.name for c in configs]}, "
                         f"got {cfg.name}")
    fp4 = weights in ("mxfp4", "nvfp4")
    e4m3_scales = weights == "nvfp4"
    sblock = SCALE_BLOCK[weights]
    row_bytes = ROW_BYTES[weights]
    elems_per_byte = 2 if fp4 else 1
    swiglu = mode == "swiglu"
    tile_n, stages, tile_m, b_tiles = cfg.tile_n, cfg.stages, cfg.tile_m, cfg.b_tiles
    mma_wgs = tile_m // 64  # MMA warpgroups (64 rows each)
    specialized = cfg.specialized
    if cfg.splits > 1 and not specialized:
        raise ValueError(f"config: split-K needs a specialized variant, got {cfg.name}")
    splits = effective_splits(cfg, k)  # K slices per output tile (``split_k``)
    # who decodes: all THREADS (and MMA warpgroups among them), or one decode warpgroup
    # beside mma_wgs MMA warpgroups and a TMA producer warp (``specialized``)
    decoders = DECODE_THREADS if specialized else THREADS
    mma_threads = 128 * mma_wgs
    block_threads = decoders + mma_threads + 32 if specialized else THREADS
    producer_warp = (decoders + mma_threads) // 32
    n_out = n // 2 if swiglu else n
    n_tiles = n // tile_n
    k_tiles = k // TILE_K
    k_scales = k // sblock
    tile_mnk = (tile_m, tile_n, TILE_K)
    tx_bytes = tile_n * row_bytes  # the packed weights; A's rows are added per stage
    bytes_per_thread = tile_n * row_bytes // decoders  # fp4: 8 to 32; fp8: 16 to 64
    threads_per_row = row_bytes // bytes_per_thread
    chunks_per_thread = elems_per_byte * bytes_per_thread // CHUNK
    # a thread's elements start on a scale-block boundary or lie within one block, so
    # chunk c uses block (first block) + c * CHUNK // sblock
    thread_blocks = max(1, chunks_per_thread * CHUNK // sblock)
    # the tile's scale bytes are one contiguous run (module docstring), copied in vectors of
    # scale_vec bytes (16 unless the run or an expert's block of scale bytes is not a
    # multiple of 16; the API checks the scale tensor is 16-byte aligned)
    scale_vec = math.gcd(SCALE_VEC_BYTES, tile_n * k_scales, n * k_scales)
    run_vecs = tile_n * k_scales // scale_vec
    # ``scale_regs`` (``scale_run_in_smem`` false): a decode thread keeps its row's scale
    # bytes in registers, one 16-byte vector (``group`` k tiles of ``ktile_scales`` bytes
    # each) for the k tiles it decodes now and the next vector in flight
    scale_regs = not scale_run_in_smem(cfg, k, weights)
    ktile_scales = TILE_K // sblock  # a row's scale bytes per k tile: 2 (MX), 4 (NVFP4)
    group = SCALE_VEC_BYTES // ktile_scales
    row_vecs = k_scales // SCALE_VEC_BYTES
    # a thread's bytes of one vector, gathered into ``packed_words`` words (``pack_scales``):
    # with two threads per row each takes ``thread_blocks`` of a k tile's ``ktile_scales``
    packed_words = SCALE_VEC_BYTES // 4 if threads_per_row == 1 else 2
    if scale_regs and group * thread_blocks != 4 * packed_words:
        raise ValueError(f"scale_regs: {group} k tiles x {thread_blocks} scale bytes per "
                         f"thread do not fill {packed_words} words")
    locate_cta = make_locate_cta(n_tiles, tile_m, cfg.halves)
    store = make_store(swiglu, n_out, out_f32)

    Storage = mx_storage(cfg, k, weights)

    words_per_thread = bytes_per_thread // 4
    words_per_chunk = CHUNK // (4 * elems_per_byte)  # fp4: 1 word, fp8: 2 words

    def block_scale_pair(byte: Int32) -> Int32:
        """A scale byte of this format as the word its decode takes (``packed_decode``:
        ``scale_pair`` for E2M1 payloads, ``e4m3_block_scale`` for E4M3)."""
        return scale_pair(byte, e4m3_scales) if fp4 else e4m3_block_scale(byte)

    @cute.jit
    def decode_start(tidx: Int32):
        """``(wrow, b0, first)`` of decode thread ``tidx``: its weight row in the tile, the
        first of its ``bytes_per_thread`` payload bytes of that row in a k tile, and the
        first of the row's scale bytes in a k tile that its elements use (a thread's
        elements start on a scale-block boundary or lie within one block)."""
        wrow = tidx // threads_per_row
        b0 = (tidx % threads_per_row) * bytes_per_thread
        return wrow, b0, (elems_per_byte * b0) // sblock

    @cute.jit
    def smem_scales(s_s: cute.Tensor, wrow: Int32, first: Int32, kt: Int32) -> list:
        """This thread's ``thread_blocks`` scales of k tile ``kt`` from the tile's scale run
        in shared memory (``copy_scales``), from its first scale byte in a k tile,
        ``first``."""
        blk = kt * ktile_scales + first
        # Int32(...) & 0xFF: a Uint8 load widens with its sign bit
        return [block_scale_pair(Int32(s_s[wrow, blk + i])) for i in range(thread_blocks)]

    @cute.jit
    def pack_scales(vec: cute.Tensor, first: Int32) -> list:
        """This thread's bytes of the scale vector ``vec`` (four words: ``group`` k tiles of
        ``ktile_scales`` bytes of its weight row) in k tile order, ``thread_blocks`` per k
        tile from byte ``first`` of each (``scale_regs``): with one thread per row all of
        them; with two, one ``prmt`` per pair of words picks the thread's half (selector
        nibble ``t`` = the byte of output position ``t``, shifted by ``first``)."""
        if cutlass.const_expr(threads_per_row == 1):
            return [vec[w] for w in range(SCALE_VEC_BYTES // 4)]
        tiles_per_pair = 8 // ktile_scales
        sel = sum((jj * ktile_scales + i) << (4 * (jj * thread_blocks + i))
                  for jj in range(tiles_per_pair) for i in range(thread_blocks))
        sel_t = Int32(sel) + first * 0x1111
        return [prmt(vec[2 * c], vec[2 * c + 1], sel_t) for c in range(packed_words)]

    @cute.jit
    def picked_scales(packed: cute.Tensor, j: Int32) -> list:
        """``packed_scales`` for a run-time ``j`` (``SCALE_LOOP_UNROLLED`` false): the word
        by selects (static indices only, so ``packed`` stays in registers), the byte by a
        variable shift."""
        out = []
        for i in cutlass.range_constexpr(thread_blocks):
            t = j * thread_blocks + i
            word = packed[0]
            for w in cutlass.range_constexpr(1, packed_words):
                word = Int32(cutlass.select_((t >> 2) == Int32(w), packed[w], word))
            out.append(block_scale_pair(word >> ((t & 3) * 8)))
        return out

    def packed_scales(packed: list, j: int) -> list:
        """The ``thread_blocks`` scales of k tile ``j`` of the vector (static: a shift of a
        register, no select)."""
        return [block_scale_pair(packed[(j * thread_blocks + i) // 4]
                           >> (8 * ((j * thread_blocks + i) % 4)))
                for i in range(thread_blocks)]

    @cute.jit
    def decode(s_qw: cute.Tensor, scales: list, s_b32: cute.Tensor, b_outer: cute.Layout,
               wrow: Int32, b0: Int32, stage: Int32, buf: Int32):
        """Decode this thread's weight words of one stage into bf16 B buffer ``buf``: one
        vector load of the words, then per pair of elements one bf16x2 product of exact
        bf16x2 bits with the block scale (E2M1: the values by byte permutes, times a
        ``scale_pair`` word; E4M3: the placed bits, times the scale with the rebias folded
        in, ``e4m3_block_scale``; ``scales``: the thread's blocks of this k tile as those
        words; ``packed_decode``): exactly the float32 ``value * scale`` rounded to bf16 (or
        NaN for a NaN scale or an E4M3 NaN byte, +-Inf past bf16's range)."""
        q = cute.make_rmem_tensor(cute.make_layout(words_per_thread), Int32)
        q.store(s_qw[wrow, b0 // bytes_per_thread, None, stage].load())
        for c in cutlass.range_constexpr(chunks_per_thread):
            scale = scales[c * CHUNK // sblock]
            frag = cute.make_rmem_tensor(cute.make_layout(CHUNK // 2), Int32)
            for w in cutlass.range_constexpr(words_per_chunk):
                x = q[c * words_per_chunk + w]
                # E2M1: the exact values by byte permutes; E4M3: placed bits
                pairs = e2m1_word_scaled(x, scale) if fp4 else e4m3_word_scaled(x, scale)
                for j in cutlass.range_constexpr(len(pairs)):
                    frag[w * len(pairs) + j] = pairs[j]
            # the chunk's place in the 128B-swizzled tile (byte address bits 4-6 ^= bits
            # 7-9; a 16-byte chunk stays contiguous)
            kpos = elems_per_byte * b0 + c * CHUNK
            off = cute.crd2idx((wrow, kpos, buf), b_outer) * 2
            off = off ^ (((off >> 7) & 7) << 4)
            s_b32[off // (2 * CHUNK), None].store(frag.load())

    @cute.jit
    def issue(tiled_mma: cute.TiledMma, acc: cute.Tensor, t_ca: cute.Tensor, t_cb: cute.Tensor,
              stage: Int32, buf: Int32):
        """This warpgroup's wgmmas of one k tile, one commit group."""
        cute.nvgpu.warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(t_ca, mode=[2])):
            cute.gemm(tiled_mma, acc, t_ca[(None, None, kb, stage)],
                      t_cb[(None, None, kb, buf)], acc)
        cute.nvgpu.warpgroup.commit_group()

    @cute.jit
    def mma(tiled_mma: cute.TiledMma, acc: cute.Tensor, t_ca: cute.Tensor, t_cb: cute.Tensor,
            stage: Int32, buf: Int32, wg: Int32):
        """Publish the decoded tile to the async proxy, meet, and issue its wgmmas (``tile_m
        = 64``: warpgroup 0 only; warpgroup 1 only decodes)."""
        cute.arch.fence_proxy(cute.arch.ProxyKind.async_shared,
                              space=cute.arch.SharedSpace.shared_cta)
        cute.arch.sync_threads()
        if cutlass.const_expr(mma_wgs * 128 == THREADS):
            issue(tiled_mma, acc, t_ca, t_cb, stage, buf)
        else:
            if wg < Int32(mma_wgs):
                issue(tiled_mma, acc, t_ca, t_cb, stage, buf)

    @cute.jit
    def mma_fragments(tiled_mma: cute.TiledMma, s_a: cute.Tensor, s_b: cute.Tensor, wg: Int32,
                      mtid: Int32):
        """``(t_ca, t_cb, c_coord, acc)`` of MMA warpgroup ``wg`` and MMA thread ``mtid``: the
        wgmma views of the A stages and B buffers, the (row, col) in the tile of each of the
        thread's accumulator elements, and the zeroed accumulator."""
        thr_mma = tiled_mma.get_slice(cute.make_layout(mma_wgs, stride=128)(wg))
        t_ca = tiled_mma.make_fragment_A(thr_mma.partition_A(s_a))
        t_cb = tiled_mma.make_fragment_B(thr_mma.partition_B(s_b))
        c_coord = tiled_mma.get_slice(mtid).partition_C(cute.make_identity_tensor((tile_m, tile_n)))
        acc = cute.make_rmem_tensor(c_coord.shape, Float32)
        acc.fill(0.0)
        return t_ca, t_cb, c_coord, acc

    @cute.jit
    def smem_views(storage, a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout,
                   q_layout: cute.Layout):
        """The shared-memory tensors: A stages and B buffers as wgmma reads them, the B
        buffers as the decode writes them, the packed-weight stages as TMA writes them and as
        the decode reads them, the tile's scale bytes."""
        s_a = storage.sa.get_tensor(a_layout.outer, swizzle=a_layout.inner)
        s_b = storage.sb.get_tensor(b_layout.outer, swizzle=b_layout.inner)
        # the same bytes, unswizzled, as 16-byte chunks of 4 bf16x2 words (the decode's
        # stores)
        s_b32 = cute.make_tensor(
            cute.recast_ptr(storage.sb.data_ptr(), dtype=Int32),
            cute.make_layout((tile_n * TILE_K * b_tiles // CHUNK, CHUNK // 2),
                             stride=(CHUNK // 2, 1)),
        )
        s_q = storage.sq.get_tensor(q_layout)
        # the same bytes as 32-bit words (row, thread, word, stage): one vector load per
        # decode
        s_qw = cute.make_tensor(
            cute.recast_ptr(storage.sq.data_ptr(), dtype=Int32),
            cute.make_layout((tile_n, threads_per_row, words_per_thread, stages),
                             stride=(row_bytes // 4, words_per_thread, 1,
                                     tile_n * row_bytes // 4)),
        )
        s_s = None  # ``scale_regs``: no scale run in shared memory
        if cutlass.const_expr(not scale_regs):
            s_s = storage.ss.get_tensor(cute.make_layout((tile_n, k_scales),
                                                         stride=(k_scales, 1)))
        return s_a, s_b, s_b32, s_q, s_qw, s_s

    @cute.jit
    def copy_scales(storage, wscale_ptr: cute.Pointer, pid_n: Int32, e: Int32,
                    num_experts: Int32, first: Int32, step: int):
        """This tile's scale bytes (rows ``[pid_n * tile_n, +tile_n)`` of expert ``e``, all of
        K) into shared memory, 16-byte vectors ``first, first + step, ...``, loaded
        ``SCALE_COPY_BATCH`` at a time before any of them is stored: a thread then waits for
        a batch of loads at once instead of one load after another (a prologue every CTA
        pays before its first decode; 7 vectors per decode thread at DeepSeek FC1). Only a
        thread's last vector can lie past the run (``first < step``), and only when ``step``
        does not divide the run: that one load is clamped to the run's last vector and its
        store skipped; every other load and store is unconditional, so the compiler keeps
        the batch's loads ahead of its stores."""
        m_wsv = cute.make_tensor(wscale_ptr, cute.make_layout(
            (scale_vec, n * k_scales // scale_vec, num_experts),
            stride=(1, scale_vec, n * k_scales)))
        s_sv = cute.make_tensor(storage.ss.data_ptr(),
                                cute.make_layout((scale_vec, run_vecs), stride=(1, scale_vec)))
        per_thread = -(-run_vecs // step)
        ragged = run_vecs % step != 0  # some threads' last vector is past the run
        for b in cutlass.range_constexpr(0, per_thread, SCALE_COPY_BATCH):
            batch = min(SCALE_COPY_BATCH, per_thread - b)
            vals = []
            for j in cutlass.range_constexpr(batch):
                v = first + (b + j) * step
                if cutlass.const_expr(ragged and b + j == per_thread - 1):
                    v = cutlass.min(v, Int32(run_vecs - 1))
                vals.append(m_wsv[None, pid_n * run_vecs + v, e].load())
            for j in cutlass.range_constexpr(batch):
                v = first + (b + j) * step
                if cutlass.const_expr(ragged and b + j == per_thread - 1):
                    if v < Int32(run_vecs):
                        s_sv[None, v].store(vals[j])
                else:
                    s_sv[None, v].store(vals[j])

    @cute.jit
    def tma_views(tma_a: tuple, m_a: tuple, tma_t: cute.CopyAtom,
                  m_t: cute.Tensor, tma_q: cute.CopyAtom, m_q: cute.Tensor, s_a: cute.Tensor,
                  s_q: cute.Tensor, pid_m: Int32, pid_n: Int32, e: Int32):
        """The TMA partitions of this tile's A (partial loads and the whole tile) and packed
        weights, all k tiles."""
        t_sa, t_ga = a_part_views(tma_a, m_a, s_a, tile_m)
        t_st, t_gt = a_tile_views(tma_t, m_t, s_a, pid_m, tile_m)
        g_q = cute.local_tile(m_q, (tile_n, row_bytes), (pid_n, None, e))
        t_sq, t_gq = cute.nvgpu.cpasync.tma_partition(
            tma_q, 0, cute.make_layout(1), cute.group_modes(s_q, 0, 2),
            cute.group_modes(g_q, 0, 2),
        )
        return t_sa, t_ga, t_st, t_gt, t_sq, t_gq

    @cute.kernel
    def kernel(
        tma_a: tuple, m_a: tuple, tma_t: cute.CopyAtom, m_t: cute.Tensor,
        tma_q: cute.CopyAtom, m_q: cute.Tensor, tiled_mma: cute.TiledMma,
        a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout, q_layout: cute.Layout,
        wscale_ptr: cute.Pointer, out_ptr: cute.Pointer, seg_ptr: cute.Pointer,
        cnt_ptr: cute.Pointer, scale_ptr: cute.Pointer, pre_ptr: cute.Pointer, m_cap: Int32,
        num_experts: Int32, use_scale: Int32, use_pre: Int32, clamp: Float32,
    ):
        await_inputs(launch_dependents=False)
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        pid_m, pid_n, e, row0, live, live_end = locate_cta(bid, m_cap, seg_ptr, cnt_ptr,
                                                           num_experts)

        if live:
            # whole A tiles only: in this body (every warp decodes and multiplies, warp 0
            # also loads) the partial loads made full tiles 8-12 % slower (the layer, NVFP4
            # and MXFP8 n64s3, DeepSeek uniform T = 4096) and raised the registers from 58
            # to 63-72
            rows = Int32(tile_m)
            if warp_idx == 0:
                prefetch_a_parts(tma_a)
                cute.nvgpu.cpasync.prefetch_descriptor(tma_t)
                cute.nvgpu.cpasync.prefetch_descriptor(tma_q)
            smem = cutlass.utils.SmemAllocator()
            storage = smem.allocate(Storage)
            mainloop = tma_mainloop(storage, stages, THREADS // 32, tx_bytes)
            pipeline.pipeline_init_arrive()
            s_a, s_b, s_b32, s_q, s_qw, s_s = smem_views(storage, a_layout, b_layout, q_layout)
            copy_scales(storage, wscale_ptr, pid_n, e, num_experts, tidx, THREADS)
            t_sa, t_ga, t_st, t_gt, t_sq, t_gq = tma_views(tma_a, m_a, tma_t, m_t, tma_q, m_q,
                                                           s_a, s_q, pid_m, pid_n, e)

            wg = cute.arch.make_warp_uniform(tidx // 128)
            # the MMA warpgroup's slice and this thread's accumulator rows (tile_m = 64: the
            # decode-only warpgroup takes warpgroup 0's, and never uses them)
            mwg, mtid = wg, tidx
            if cutlass.const_expr(mma_wgs * 128 != THREADS):
                mwg = cutlass.min(wg, Int32(mma_wgs - 1))
                mtid = tidx % (128 * mma_wgs)
            t_ca, t_cb, c_coord, acc = mma_fragments(tiled_mma, s_a, s_b, mwg, mtid)

            pipeline.pipeline_init_wait()
            cute.arch.sync_threads()  # s_s complete before any decode reads it

            prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
            if warp_idx == 0:
                for _ in cutlass.range(min(stages, k_tiles), unroll=1):
                    load_stage(mainloop, prod, prod.count, row0, rows, tile_m, tma_a, t_ga,
                               t_sa, tma_t, t_gt, t_st, tma_q,
                               t_gq, t_sq)
                    prod.advance()

            wrow, b0, first = decode_start(tidx)

            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
            mainloop.consumer_wait(read)
            decode(s_qw, smem_scales(s_s, wrow, first, Int32(0)), s_b32, b_layout.outer, wrow, b0,
                   read.index, Int32(0))
            mma(tiled_mma, acc, t_ca, t_cb, read.index, Int32(0), wg)
            read.advance()
            buf = Int32(1)
            for kt in cutlass.range(1, k_tiles, unroll=1):
                mainloop.consumer_wait(read)
                decode(s_qw, smem_scales(s_s, wrow, first, kt), s_b32, b_layout.outer, wrow, b0,
                       read.index, buf)
                mma(tiled_mma, acc, t_ca, t_cb, read.index, buf, wg)
                # tile kt - 1's wgmmas are complete: free its stage and refill it
                cute.nvgpu.warpgroup.wait_group(1)
                mainloop.consumer_release(release)
                release.advance()
                read.advance()
                buf = Int32(cutlass.select_(buf == Int32(B_TILES - 1), Int32(0), buf + 1))
                if (warp_idx == 0) & (prod.count < k_tiles):
                    load_stage(mainloop, prod, prod.count, row0, rows, tile_m, tma_a, t_ga,
                               t_sa, tma_t, t_gt, t_st, tma_q,
                               t_gq, t_sq)
                    prod.advance()
            cute.nvgpu.warpgroup.wait_group(0)

            if cutlass.const_expr(mma_wgs * 128 == THREADS):
                store(acc, c_coord, out_ptr, scale_ptr, pre_ptr, m_cap, row0, pid_n * tile_n,
                      live_end, use_scale, use_pre, clamp)
            else:
                if wg < Int32(mma_wgs):
                    store(acc, c_coord, out_ptr, scale_ptr, pre_ptr, m_cap, row0,
                          pid_n * tile_n, live_end, use_scale, use_pre, clamp)

    @cute.jit
    def split_fixup(acc: cute.Tensor, c_coord: cute.Tensor, part_ptr: cute.Pointer,
                    arrive_ptr: cute.Pointer, part_rows: Int32, arrived: cute.Tensor,
                    row0: Int32, live_end: Int32, rank0: Int32, col0: Int32, split: Int32,
                    slot: Int32, mtid: Int32):
        """Split-K steps 1-3 (``split_k`` module docstring) for this MMA thread's
        accumulators: write this slice's partials of the live rows, arrive on counter
        ``slot``; returns whether this CTA arrived last, in which case ``acc`` now holds the
        in-order sums of every slice and the counter is zero again."""
        m_part = cute.make_tensor(part_ptr, cute.make_layout(
            (splits, part_rows, n), stride=(part_rows * n, n, 1)))
        m_arrive = cute.make_tensor(arrive_ptr, cute.make_layout(slot + 1))
        for i in cutlass.range_constexpr(cute.size(acc)):
            crd = c_coord[i]
            rank = rank0 + crd[0]
            if (row0 + crd[0] < live_end) & (rank < part_rows):
                m_part[split, rank, col0 + crd[1]] = Float32(acc[i])
        cute.arch.barrier(barrier_id=ARRIVAL_BARRIER_ID, number_of_threads=mma_threads)
        if mtid == Int32(0):
            cute.arch.fence_acq_rel_gpu()
            arrived[0] = arrive((arrive_ptr + slot).toint())
        cute.arch.barrier(barrier_id=ARRIVAL_BARRIER_ID, number_of_threads=mma_threads)
        last = arrived[0] == Int32(splits - 1)
        if last:
            # thread 0's acquiring atomic, then the barrier: every slice's writes are visible
            for i in cutlass.range_constexpr(cute.size(acc)):
                crd = c_coord[i]
                rank = rank0 + crd[0]
                if (row0 + crd[0] < live_end) & (rank < part_rows):
                    col = col0 + crd[1]
                    total = Float32(m_part[0, rank, col])
                    for s in cutlass.range_constexpr(1, splits):
                        total = total + Float32(m_part[s, rank, col])
                    acc[i] = total
            if mtid == Int32(0):
                m_arrive[slot] = Int32(0)
        return last

    @cute.kernel
    def kernel_specialized(
        tma_a: tuple, m_a: tuple, tma_t: cute.CopyAtom, m_t: cute.Tensor,
        tma_q: cute.CopyAtom, m_q: cute.Tensor, tiled_mma: cute.TiledMma,
        a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout, q_layout: cute.Layout,
        wscale_ptr: cute.Pointer, out_ptr: cute.Pointer, seg_ptr: cute.Pointer,
        cnt_ptr: cute.Pointer, scale_ptr: cute.Pointer, pre_ptr: cute.Pointer, m_cap: Int32,
        num_experts: Int32, use_scale: Int32, use_pre: Int32, clamp: Float32,
        part_ptr: cute.Pointer, arrive_ptr: cute.Pointer, part_rows: Int32,
    ):
        """The ``specialized`` variant (module docstring): warpgroup 0 decodes, warpgroups
        1 .. ``mma_wgs`` multiply and store, the last warp issues the TMA loads. Two
        pipelines: ``mainloop`` (TMA stages of A and packed weights; a stage is free once
        the decode warps have read its weights and the MMA warps' wgmmas on its A are done)
        and ``decoded`` (the ``b_tiles`` bf16 B tiles: the decode writes one, fences it
        to the async proxy and commits; the MMA warps release it after their wgmmas on it
        are done). Split-K (``splits > 1``): CTA ``bid`` works on slice ``bid % splits`` of
        tile ``bid // splits`` and ends with ``split_fixup``."""
        await_inputs(launch_dependents=False)
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tile, split = bid, Int32(0)
        if cutlass.const_expr(splits > 1):
            tile = bid // splits
            split = bid - tile * splits
        kt0 = split * k_tiles // splits  # this CTA's k tiles [kt0, kt1): at least one
        kt1 = (split + 1) * k_tiles // splits
        pid_m, pid_n, e, row0, live, live_end = locate_cta(tile, m_cap, seg_ptr, cnt_ptr,
                                                           num_experts)
        if live:
            rows = live_rows(row0, live_end, tile_m)  # A_PART_ROWS: only live A rows load
            if warp_idx == producer_warp:
                prefetch_a_parts(tma_a)
                cute.nvgpu.cpasync.prefetch_descriptor(tma_t)
                cute.nvgpu.cpasync.prefetch_descriptor(tma_q)
            smem = cutlass.utils.SmemAllocator()
            storage = smem.allocate(Storage)
            mainloop = tma_mainloop(storage, stages, (decoders + mma_threads) // 32, tx_bytes)
            decoded = pipeline.PipelineAsync.create(
                barrier_storage=storage.dbars.data_ptr(),
                num_stages=b_tiles,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, decoders),
                consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, mma_threads),
                defer_sync=True,
            )
            pipeline.pipeline_init_arrive()
            s_a, s_b, s_b32, s_q, s_qw, s_s = smem_views(storage, a_layout, b_layout, q_layout)
            arrived = storage.arrived.get_tensor(cute.make_layout(1))
            pipeline.pipeline_init_wait()

            if warp_idx == producer_warp:
                t_sa, t_ga, t_st, t_gt, t_sq, t_gq = tma_views(
                    tma_a, m_a, tma_t, m_t, tma_q, m_q, s_a, s_q, pid_m, pid_n, e)
                prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
                for kt in cutlass.range(kt0, kt1, unroll=1):
                    load_stage(mainloop, prod, kt, row0, rows, tile_m, tma_a, t_ga, t_sa,
                               tma_t, t_gt, t_st, tma_q, t_gq, t_sq)
                    prod.advance()
                mainloop.producer_tail(prod)
            elif warp_idx < Int32(decoders // 32):
                wrow, b0, first = decode_start(tidx)
                read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
                fill = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer,
                                                    b_tiles)

                if cutlass.const_expr(scale_regs):
                    # its row's scale vectors as words (vector, expert): vector g's bytes are
                    # packed at the start of k tile group g, when vector g + 1 is loaded
                    m_wv = cute.make_tensor(
                        cute.recast_ptr(wscale_ptr, dtype=Int32),
                        cute.make_layout((SCALE_VEC_BYTES // 4, n * row_vecs, num_experts),
                                         stride=(1, SCALE_VEC_BYTES // 4, n * k_scales // 4)))
                    vec0 = (pid_n * tile_n + wrow) * row_vecs
                    nxt = cute.make_rmem_tensor(cute.make_layout(SCALE_VEC_BYTES // 4), Int32)
                    nxt.store(m_wv[None, vec0, e].load())
                if cutlass.const_expr(scale_regs and not SCALE_LOOP_UNROLLED[weights]):
                    pk = cute.make_rmem_tensor(cute.make_layout(packed_words), Int32)
                    for w, v in enumerate(pack_scales(nxt, first)):
                        pk[w] = v
                    nxt.store(m_wv[None, vec0 + min(1, row_vecs - 1), e].load())
                    for kt in cutlass.range(kt0, kt1, unroll=1):
                        j = kt % group
                        if (j == Int32(0)) & (kt > kt0):
                            for w, v in enumerate(pack_scales(nxt, first)):
                                pk[w] = v
                            ahead = cutlass.min(kt // group + 1, Int32(row_vecs - 1))
                            nxt.store(m_wv[None, vec0 + ahead, e].load())
                        read, fill = decode_k_tile(mainloop, decoded, read, fill, decode, s_qw,
                                                   picked_scales(pk, j), s_b32,
                                                   b_layout.outer, wrow, b0)
                elif cutlass.const_expr(scale_regs):
                    for g in cutlass.range(row_vecs, unroll=1):
                        packed = pack_scales(nxt, first)
                        ahead = cutlass.min(g + 1, Int32(row_vecs - 1))
                        nxt.store(m_wv[None, vec0 + ahead, e].load())
                        for j in cutlass.range_constexpr(group):
                            read, fill = decode_k_tile(mainloop, decoded, read, fill, decode, s_qw,
                                                       packed_scales(packed, j), s_b32,
                                                       b_layout.outer, wrow, b0)
                else:
                    copy_scales(storage, wscale_ptr, pid_n, e, num_experts, tidx, decoders)
                    # the decode warpgroup's own barrier (id 1): s_s complete before it is read
                    cute.arch.barrier(barrier_id=1, number_of_threads=decoders)
                    for kt in cutlass.range(kt0, kt1, unroll=1):
                        read, fill = decode_k_tile(mainloop, decoded, read, fill, decode, s_qw,
                                                   smem_scales(s_s, wrow, first, kt), s_b32,
                                                   b_layout.outer, wrow, b0)
                decoded.producer_tail(fill)
            else:
                mtid = tidx - decoders
                wg = cute.arch.make_warp_uniform(mtid // 128)
                t_ca, t_cb, c_coord, acc = mma_fragments(tiled_mma, s_a, s_b, wg, mtid)
                rank0 = Int32(0)  # split-K: the rank of row0 among all live rows
                if cutlass.const_expr(splits > 1):
                    seg = cute.make_tensor(seg_ptr, cute.make_layout(num_experts + 1))
                    rank0 = rows_before(seg_ptr, cnt_ptr, e, num_experts) + row0 - seg[e]
                tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
                read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
                release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer,
                                                       stages)
                take = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer,
                                                    b_tiles)
                give = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer,
                                                    b_tiles)
                mainloop.consumer_wait(read)
                decoded.consumer_wait(take)
                issue(tiled_mma, acc, t_ca, t_cb, read.index, take.index)
                read.advance()
                take.advance()
                for _ in cutlass.range(kt0 + 1, kt1, unroll=1):
                    mainloop.consumer_wait(read)
                    decoded.consumer_wait(take)
                    issue(tiled_mma, acc, t_ca, t_cb, read.index, take.index)
                    # the previous k tile's wgmmas are complete: free its A stage and B tile
                    cute.nvgpu.warpgroup.wait_group(1)
                    mainloop.consumer_release(release)
                    decoded.consumer_release(give)
                    release.advance()
                    give.advance()
                    read.advance()
                    take.advance()
                cute.nvgpu.warpgroup.wait_group(0)
                mainloop.consumer_release(release)
                decoded.consumer_release(give)
                if cutlass.const_expr(splits > 1):
                    if split_fixup(acc, c_coord, part_ptr, arrive_ptr, part_rows, arrived,
                                   row0, live_end, rank0, pid_n * tile_n, split,
                                   pid_m * n_tiles + pid_n, mtid):
                        store(acc, c_coord, out_ptr, scale_ptr, pre_ptr, m_cap, row0,
                              pid_n * tile_n, live_end, use_scale, use_pre, clamp)
                else:
                    store(acc, c_coord, out_ptr, scale_ptr, pre_ptr, m_cap, row0,
                          pid_n * tile_n, live_end, use_scale, use_pre, clamp)

    @cute.jit
    def launch(
        a_ptr: cute.Pointer, q_ptr: cute.Pointer, wscale_ptr: cute.Pointer,
        out_ptr: cute.Pointer, seg_ptr: cute.Pointer, cnt_ptr: cute.Pointer,
        scale_ptr: cute.Pointer, pre_ptr: cute.Pointer, m_cap: Int32, num_experts: Int32,
        use_scale: Int32, use_pre: Int32, clamp: Float32, part_ptr: cute.Pointer,
        arrive_ptr: cute.Pointer, part_rows: Int32, stream: cuda.CUstream,
    ):
        m_a = cute.make_tensor(a_ptr, cute.make_layout((m_cap, k), stride=(k, 1)))
        m_q = cute.make_tensor(
            q_ptr, cute.make_layout((n, k // elems_per_byte, num_experts),
                                    stride=(k // elems_per_byte, 1, n * k // elems_per_byte))
        )
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            BFloat16, BFloat16, LayoutEnum.ROW_MAJOR.sm90_mma_major_mode(),
            LayoutEnum.ROW_MAJOR.sm90_mma_major_mode(), Float32,
            (mma_wgs, 1, 1), tiler_mn=(64, tile_n),
        )
        a_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, tile_mnk, BFloat16, stages)
        b_layout = sm90_utils.make_smem_layout_b(
            LayoutEnum.ROW_MAJOR, tile_mnk, BFloat16, b_tiles
        )
        q_layout = cute.make_layout(
            (tile_n, row_bytes, stages), stride=(row_bytes, 1, tile_n * row_bytes)
        )
        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        tma_a, t_a = make_a_part_tmas(m_a, tile_m)
        tma_t, t_t = make_a_tile_tma(m_a, a_layout, tile_m)
        tma_q, t_q = cute.nvgpu.cpasync.make_tiled_tma_atom(
            g2s, m_q, cute.slice_(q_layout, (None, None, 0)), (tile_n, row_bytes)
        )
        tiles = (m_cap + (tile_m - 1)) // tile_m * n_tiles
        if cutlass.const_expr(specialized):
            kernel_specialized(
                tma_a, t_a, tma_t, t_t, tma_q, t_q, tiled_mma, a_layout, b_layout, q_layout,
                wscale_ptr, out_ptr, seg_ptr, cnt_ptr, scale_ptr, pre_ptr, m_cap, num_experts,
                use_scale, use_pre, clamp, part_ptr, arrive_ptr, part_rows,
            ).launch(grid=[tiles * splits, 1, 1], block=[block_threads, 1, 1],
                     stream=stream, use_pdl=PDL)
        else:
            kernel(
                tma_a, t_a, tma_t, t_t, tma_q, t_q, tiled_mma, a_layout, b_layout, q_layout,
                wscale_ptr, out_ptr, seg_ptr, cnt_ptr, scale_ptr, pre_ptr, m_cap, num_experts,
                use_scale, use_pre, clamp,
            ).launch(grid=[tiles, 1, 1], block=[THREADS, 1, 1], stream=stream, use_pdl=PDL)

    return launch


def compile_mx_gemm(mode: str, n: int, k: int, cfg: KernelConfig | None = None,
                    ptrs=None, stream=None, out_f32: bool = False, weights: str = "mxfp4"):
    """``cute.compile`` the MX-weight grouped GEMM for one (mode, N, K, config; default
    ``mx_default_config(n, weights)``; output bf16, or float32 when ``out_f32``; weights
    ``mxfp4`` or ``mxfp8``).

    The compiled object takes ``(a, payload, scale_bytes, out, seg_start, counts,
    row_scale, pre_scale, m_cap, E, use_scale, use_pre, clamp, partials, arrivals,
    partial_rows, stream)`` (the last three: the split-K workspace, ``split_k``; unused by a
    variant without split-K); ``ptrs`` (the ten pointers) default to fake addresses (the
    offline compile gate).
    """
    cfg = cfg if cfg is not None else mx_default_config(n, weights)
    if n % cfg.tile_n or k % TILE_K:
        raise ValueError(f"N, K: expected multiples of ({cfg.tile_n}, {TILE_K}), got ({n}, {k})")
    if ptrs is None:
        ptrs = (
            _fake_ptr(BFloat16, 16), _fake_ptr(Uint8, 16), _fake_ptr(Uint8, 16),
            _fake_ptr(Float32 if out_f32 else BFloat16, 4 if out_f32 else 2),
            _fake_ptr(Int32, 4), _fake_ptr(Int32, 4), _fake_ptr(Float32, 4),
            _fake_ptr(Float32, 16), _fake_ptr(Float32, 16), _fake_ptr(Int32, 4),
        )
    make = make_gemv if cfg.gemv_warps else _make
    return cute.compile(
        make(mode, n, k, cfg, out_f32, weights), *ptrs[:8], Int32(TILE_M), Int32(1), Int32(0),
        Int32(0), Float32(0.0), *ptrs[8:], Int32(1),
        stream if stream is not None else cuda.CUstream(0),
    )


def compile_mxfp4_gemm(mode: str, n: int, k: int, cfg: KernelConfig | None = None,
                       ptrs=None, stream=None, out_f32: bool = False):
    """``compile_mx_gemm`` for MXFP4 weights."""
    return compile_mx_gemm(mode, n, k, cfg, ptrs, stream, out_f32, "mxfp4")


@dataclass(frozen=True)
class GateBuild:
    """One MX GEMM the offline compile gate (``megamoe.kernel_registry``) builds: weight
    format, mode, ``N``, ``K``, variant and output type, registered under ``name``
    (``grouped_gemm_<weights>_<mode>[_f32]_k<K>_n<N>_<variant>``)."""

    weights: str
    mode: str
    n: int
    k: int
    cfg: KernelConfig
    out_f32: bool = False
    why: str = ""

    @property
    def name(self) -> str:
        f32 = "_f32" if self.out_f32 else ""
        return f"grouped_gemm_{self.weights}_{self.mode}{f32}_k{self.k}_n{self.n}_{self.cfg.name}"

    def build(self):
        return compile_mx_gemm(self.mode, self.n, self.k, self.cfg, out_f32=self.out_f32,
                               weights=self.weights)


_M64WS = {"tile_m": 64, "specialized": True}
GATE_BUILDS = (
    GateBuild("mxfp4", "swiglu", 256, 256, KernelConfig(128, 6), True),
    GateBuild("mxfp4", "plain", 192, 128, KernelConfig(64, 4)),
    GateBuild("mxfp4", "swiglu", 256, 256, KernelConfig(64, 6, tile_m=64)),
    GateBuild("nvfp4", "swiglu", 256, 256, KernelConfig(128, 4), True),
    GateBuild("nvfp4", "plain", 192, 128, KernelConfig(64, 3)),
    GateBuild("mxfp8", "swiglu", 256, 256, KernelConfig(128, 5), True),
    GateBuild("mxfp8", "plain", 192, 128, KernelConfig(64, 3)),
    GateBuild("mxfp4", "swiglu", 256, 256, KernelConfig(64, 4, specialized=True)),
    GateBuild("nvfp4", "plain", 192, 128, KernelConfig(64, 3, specialized=True), True),
    GateBuild("mxfp4", "swiglu", 256, 256, KernelConfig(64, 3, **_M64WS), True),
    GateBuild("mxfp8", "plain", 192, 128, KernelConfig(64, 3, **_M64WS)),
    GateBuild("nvfp4", "swiglu", 256, 256, KernelConfig(64, 2, **_M64WS), True),
    GateBuild("mxfp4", "swiglu", 256, 256, KernelConfig(64, 3, **_M64WS, splits=4), True),
    GateBuild("mxfp4", "plain", 192, 512, KernelConfig(64, 3, **_M64WS, splits=2)),
    GateBuild("mxfp4", "plain", 192, 256, KernelConfig(64, 4, **_M64WS)),
    GateBuild("mxfp4", "swiglu", 256, 512, KernelConfig(64, 6, **_M64WS), True),
    GateBuild("nvfp4", "plain", 192, 256, KernelConfig(64, 4, **_M64WS)),
    GateBuild("nvfp4", "swiglu", 256, 512, KernelConfig(64, 6, **_M64WS), True),
    GateBuild("mxfp4", "swiglu", 256, 1024, KernelConfig(64, 4, **_M64WS, scale_regs=True),
              True, "32 scale bytes per row, two vectors: the register path, not the fallback"),
    GateBuild("mxfp4", "plain", 192, 1024,
              KernelConfig(64, 4, **_M64WS, scale_regs=True, halves=True),
              why="the segments' first halves first (``halves_tile`` in ``locate_cta``)"),
    GateBuild("nvfp4", "plain", 192, 512, KernelConfig(64, 4, **_M64WS, scale_regs=True),
              why="32 scale bytes per row, two vectors: the register path"),
    GateBuild("mxfp8", "plain", 192, 1024, KernelConfig(64, 4, **_M64WS, scale_regs=True),
              why="the register path's picking loop (``SCALE_LOOP_UNROLLED``)"),
    GateBuild("mxfp4", "swiglu", 256, 1024,
              KernelConfig(64, 4, **_M64WS, scale_regs=True, halves=True, b_tiles=4), True,
              "four bf16 B tiles (``b_tiles``): the decoded pipeline and B layout resized"),
    GateBuild("nvfp4", "plain", 192, 512,
              KernelConfig(64, 4, **_M64WS, scale_regs=True, halves=True, b_tiles=4),
              why="four bf16 B tiles with NVFP4's E4M3 scales"),
    GateBuild("nvfp4", "swiglu", 256, 512, KernelConfig(64, 4, specialized=True, scale_regs=True),
              True, "the 128-row register path (two MMA warpgroups; NVFP4's large-capacity "
              "default)"),
    GateBuild("mxfp4", "swiglu", 256, 320, KernelConfig(16, 1, gemv_warps=4), True,
              "the decode-batch GEMV (``mx_gemv_kernel``), K with a 64-element last step"),
    GateBuild("mxfp4", "plain", 192, 1024, KernelConfig(16, 1, gemv_warps=8),
              why="the decode-batch GEMV, bf16 output, whole 128-element steps"),
    GateBuild("nvfp4", "swiglu", 256, 320, KernelConfig(16, 1, gemv_warps=4), True,
              "the GEMV with E4M3 block scales of 16 elements, and a half step"),
    GateBuild("mxfp8", "plain", 192, 320, KernelConfig(16, 1, gemv_warps=4),
              why="the GEMV with E4M3 payload words (its NaN bytes), and a half step"),
)
"""The MX GEMMs the offline compile gate builds: small shapes that reach each code path (the
three formats, both modes, both output types, 128- and 64-row tiles, the specialized,
split-K, register, first-halves and four-B-tile variants); ``why`` names the path a shape was chosen
for where the variant alone does not."""

for _gate in GATE_BUILDS:
    register_kernel(_gate.name)(_gate.build)
