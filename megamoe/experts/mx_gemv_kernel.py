"""Decode-batch grouped GEMM with block-scaled weights on warp-level MMAs (Hopper, sm_90a).

The same contract as ``mxfp4_gemm_kernel`` (its module docstring; docs/contract.md s4 MXFP4,
MXFP8, NVFP4, s5, s8), for its three weight formats (``GEMV_FORMATS``): the grouped raster over ``TILE_M``-row segment tiles, both modes and epilogues
(``swiglu_act`` / ``plain_value``, shared with every other variant), float32 or bf16 output,
rows outside the live segments never written, every element of ``b`` decoded exactly to the
bf16 the oracle's float32 dequant rounds to (``packed_decode``), never stored in any other
format. What differs is how the work is cut, for batches of a few rows per expert, where the
wgmma variants leave most of the GPU idle (``N / 64`` CTAs at one expert, each walking all of
K in sequence behind one decode warpgroup; docs/perf.md "Where the layer stands"):

- a CTA owns ``GEMV_TILE_N`` = 16 weight rows of one expert (one ``mma.m16n8k16`` A operand)
  and the live rows of one segment tile, taken ``GEMV_ROWS`` = 16 at a time (two 8-token B
  operands); at DeepSeek's FC1 one expert is 256 CTAs, not 64;
- its ``cfg.gemv_warps`` warps split K: 128-element steps (``STEP_K``; a 64-element last
  step where ``K`` is not a multiple of 128) go round robin to the warps, and each warp
  loads, decodes and multiplies its steps with no shared memory, fence or barrier: lane
  ``(g, t)`` (``warp_mma``'s fragment names) loads the 32 elements of each of its two weight
  rows (16 bytes of E2M1 codes or 32 of E4M3) and their scale bytes (one MX block, two
  NVFP4 blocks), decodes them into the A registers, and loads 64 bytes of each live token
  row's activations into the B registers.
  The reduction index ``k`` of the MMA is a fixed permutation of the step's elements, the
  same for A and B, so each MMA sums exactly the products of one weight row and one token;
- the warps' float32 partial sums meet in shared memory and warp 0 adds them in warp order
  and runs the epilogue;
- the grid is persistent (at most ``GEMV_WAVES`` waves of ``GEMV_SMS * GEMV_THREADS_PER_SM``
  threads): CTA ``b``
  takes tiles ``b, b + grid, ...`` of the live tiles (``live_m_tiles`` x ``N / 16``), so a
  batch with few live experts does not pay for the CTAs a grid over the whole route capacity
  would launch dead (the layer's one-expert FC2 at DeepSeek T = 16: 57 344 CTAs, 38.7 us
  against 12.2 us for the same GEMM on a grid sized for its rows; docs/perf.md "Session
  31"). Which CTA computes a tile never changes its bits.

Order of the float32 sums: fixed by ``K`` and ``gemv_warps`` alone (each warp's steps in
order, then the warps in order), never by the rows of the batch: a token's MMA column is
computed from its own activations only (tokens past the live rows are zero operands), so a
row's bits depend only on its own ``a`` row, pre-scale and score, and ``b[e]`` (the
invariance contract, docs/contract.md s8). They differ from the wgmma variants' order, so the two
agree within the s8 GEMM tolerance, not bit for bit.

The weight rows are taken in the order that puts a lane's two A rows next to each other in
``b``: MMA row ``g`` is weight row ``2g`` of the tile and MMA row ``g + 8`` row ``2g + 1``.
In ``swiglu`` mode (``b`` interleaved: row ``2j`` gate_j, row ``2j + 1`` up_j) a lane then
holds the gate and the up of the same output column for its two tokens, so the epilogue
needs no exchange between lanes.
"""

# no `from __future__ import annotations`: cute.struct reads its annotations as objects

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32

from megamoe.experts.grouped_gemm_kernel import (
    MODES,
    TILE_M,
    KernelConfig,
    live_m_tiles,
    make_locate,
    plain_value,
    swiglu_act,
)
from megamoe.experts.packed_decode import (
    e2m1_word_scaled,
    e4m3_block_scale,
    e4m3_word_scaled,
    scale_pair,
)
from megamoe.experts.warp_mma import MMA_M, MMA_N, mma_bf16_m16n8k16
from megamoe.pdl import PDL, await_inputs
from megamoe.staging.constants import MX_BLOCK, NVFP4_BLOCK

GEMV_TILE_N = MMA_M
"""Weight rows (output columns; FC1: 8 SwiGLU outputs) per CTA."""
GEMV_GROUPS = 2
"""8-token MMA columns a pass multiplies: the live rows are taken ``GEMV_ROWS`` at a time."""
GEMV_ROWS = GEMV_GROUPS * MMA_N
STEP_K = 128
"""Elements of K one warp step covers: 32 per lane quad position."""
LANE_K = STEP_K // 4
"""Elements of one weight row a lane decodes per step: 16 bytes of E2M1 codes or 32 of
E4M3, and their one (MX) or two (NVFP4) scale bytes."""
GEMV_FORMATS = {"mxfp4": (4, MX_BLOCK, False), "nvfp4": (4, NVFP4_BLOCK, True),
                "mxfp8": (8, MX_BLOCK, False)}
"""Per weight format with a GEMV variant: (bits per element, elements per scale byte,
whether the scale bytes are E4M3 rather than E8M0)."""
GEMV_WEIGHTS = tuple(GEMV_FORMATS)
"""The weight formats with a GEMV variant."""
GEMV_SMS = 132
"""SMs of the H100 / H200 SXM: the persistent grid is ``GEMV_WAVES`` waves of ``GEMV_SMS
* GEMV_THREADS_PER_SM`` threads' worth of CTAs (fewer when there are fewer tiles). Only a
width: on a GPU with fewer SMs the extra CTAs wait longer, with the same bits."""
GEMV_THREADS_PER_SM = 768
"""Threads of the GEMV resident per SM: ptxas gives the FP4 formats 70-80 registers a thread
(sm_90a), so six 128-thread CTAs (three of 256) fit in the 64 Ki registers of an SM (MXFP8:
128, four CTAs; with ``GEMV_WAVES`` waves the grid outnumbers the resident CTAs either
way)."""
GEMV_WAVES = 16
"""Waves of resident CTAs in the grid: ``GEMV_SMS * GEMV_WAVES`` SMs' worth of
``GEMV_THREADS_PER_SM``. H200, DeepSeek ``fp8_mxfp4`` layer by stage, forward us at uniform
T = 1 / 16 and one expert T = 1 / 16 (docs/perf.md "Session 31" item 3b): one wave 147.5 /
1845 / 42.6 / 55.0, four 132.0 / 1556 / 44.1 / 56.1, eight 132.9 / 1508 / 42.7 / 56.1,
sixteen 132.7 / 1478 / 43.2 / 57.0, one CTA per tile 133.9 / 1466 / 42.9 / 83.2."""


def make_gemv(mode: str, n: int, k: int, cfg: KernelConfig, out_f32: bool,
              weights: str = "mxfp4"):
    """The launcher of the GEMV variant ``cfg`` (``cfg.gemv_warps`` > 0) for one (mode, N,
    K, output type), with ``mxfp4_gemm_kernel._make``'s launch signature (the split-K
    arguments are unused)."""
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    if weights not in GEMV_WEIGHTS:
        raise ValueError(f"weights: expected one of {GEMV_WEIGHTS}, got {weights!r}")
    if cfg.gemv_warps < 1 or cfg.tile_n != GEMV_TILE_N:
        raise ValueError(f"config: expected a GEMV variant (tile_n {GEMV_TILE_N}), got {cfg.name}")
    if n % GEMV_TILE_N or k % (STEP_K // 2):
        raise ValueError(f"N, K: expected multiples of ({GEMV_TILE_N}, {STEP_K // 2}), "
                         f"got ({n}, {k})")
    bits, sblock, e4m3_scales = GEMV_FORMATS[weights]
    swiglu = mode == "swiglu"
    warps = cfg.gemv_warps
    n_out = n // 2 if swiglu else n
    n_tiles = n // GEMV_TILE_N
    full_steps = k // STEP_K
    tail = (k % STEP_K) != 0  # one last step of STEP_K / 2 elements
    row_words = k * bits // 32
    k_scales = k // sblock
    elems_per_word = 32 // bits  # 8 E2M1 codes or 4 E4M3 bytes
    mmas_per_word = elems_per_word // 4  # an MMA takes 4 elements of a lane's range
    out_type = Float32 if out_f32 else BFloat16
    locate = make_locate(n_tiles, TILE_M)
    part_words = warps * 32 * 4 * GEMV_GROUPS

    def block_scale(byte: Int32) -> Int32:
        """A scale byte of this format as the word its decode takes (``packed_decode``:
        ``e4m3_block_scale`` for E4M3 payloads, ``scale_pair`` for E2M1)."""
        return e4m3_block_scale(byte) if bits == 8 else scale_pair(byte, e4m3_scales)

    @cute.struct
    class Storage:
        part: cute.struct.MemRange[Float32, part_words]

    @cute.jit
    def load_step(m_q: cute.Tensor, m_s: cute.Tensor, m_a: cute.Tensor, e: Int32,
                  wrow: Int32, kb: Int32, toks: list, oks: list, width: int):
        """One step's operands of this lane: the payload words of its two weight rows from
        element ``kb`` (``width`` elements: ``LANE_K``, or half of it in the last step),
        their scale bytes (one per block the range touches), and each token's ``width``
        activations (zeros for a token past the live rows)."""
        words = width * bits // 32
        first = kb * bits // 32  # a multiple of 4 whenever ``words`` is
        q = cute.make_rmem_tensor(cute.make_layout((words, 2)), Int32)
        for r in cutlass.range_constexpr(2):
            for w in cutlass.range_constexpr(0, words, 4):
                if cutlass.const_expr(words % 4 == 0):  # 16-byte vectors
                    vec = m_q[None, first // 4 + w // 4, wrow + r, e].load()
                    for i in cutlass.range_constexpr(4):
                        q[w + i, r] = vec[i]
                else:  # the E2M1 half step: two words
                    for i in cutlass.range_constexpr(words):
                        q[i, r] = m_q[(first + i) % 4, (first + i) // 4, wrow + r, e]
        blocks = max(1, width // sblock)
        sb = [[block_scale(Int32(m_s[kb // sblock + i, wrow + r, e]))
               for i in range(blocks)] for r in range(2)]
        vecs = width // 8
        acts = []
        for grp in cutlass.range_constexpr(GEMV_GROUPS):
            av = cute.make_rmem_tensor(cute.make_layout((4, vecs)), Int32)
            av.fill(0)
            if oks[grp]:
                for v in cutlass.range_constexpr(vecs):
                    av[None, v].store(m_a[None, kb // 8 + v, toks[grp]].load())
            acts.append(av)
        return q, sb, acts

    @cute.jit
    def mma_step(q: cute.Tensor, sb: list, acts: list, acc: cute.Tensor,
                 live1: cutlass.Boolean, width: int):
        """Decode the step's payload (exact bf16 times the block scale, one rounding:
        ``packed_decode``) into the A registers and issue its MMAs into ``acc`` (four
        float32 per token group): per 4 elements ``4j .. 4j+3`` of the lane's range, A rows
        ``g`` / ``g+8`` = weight rows ``wrow`` / ``wrow + 1`` and B column ``g`` = the lane's
        token of each group (module docstring). ``live1``: the second token group has a
        live row (warp-uniform), else its MMAs are skipped."""
        for w in cutlass.range_constexpr(width * bits // 32):
            dec = []
            for r in cutlass.range_constexpr(2):
                scale = sb[r][w * elems_per_word // sblock]
                dec.append(e2m1_word_scaled(q[w, r], scale) if bits == 4
                           else e4m3_word_scaled(q[w, r], scale))
            for h in cutlass.range_constexpr(mmas_per_word):
                j = mmas_per_word * w + h  # the 4-element group of this MMA
                a = [dec[0][2 * h], dec[1][2 * h], dec[0][2 * h + 1], dec[1][2 * h + 1]]
                for grp in cutlass.range_constexpr(GEMV_GROUPS):
                    av = acts[grp]
                    b = [av[(2 * j) % 4, (2 * j) // 4], av[(2 * j + 1) % 4, (2 * j + 1) // 4]]
                    if cutlass.const_expr(grp == 0):
                        d = mma_bf16_m16n8k16(a, b, [acc[i] for i in range(4)])
                        for i in cutlass.range_constexpr(4):
                            acc[i] = d[i]
                    elif live1:
                        d = mma_bf16_m16n8k16(a, b, [acc[4 * grp + i] for i in range(4)])
                        for i in cutlass.range_constexpr(4):
                            acc[4 * grp + i] = d[i]

    @cute.jit
    def gemv_tile(a_ptr: cute.Pointer, q_ptr: cute.Pointer, wscale_ptr: cute.Pointer,
                  out_ptr: cute.Pointer, scale_ptr: cute.Pointer, pre_ptr: cute.Pointer,
                  m_cap: Int32, num_experts: Int32, use_scale: Int32, use_pre: Int32,
                  clamp: Float32, s_part: cute.Tensor, pid_n: Int32, e: Int32, row0: Int32,
                  live_end: Int32):
        """One output tile: weight rows ``[16 pid_n, +16)`` of expert ``e`` times the live
        rows ``[row0, live_end)`` of its segment tile (module docstring)."""
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        lane = cute.arch.lane_idx()
        g = lane // 4
        t = lane % 4
        wrow = pid_n * GEMV_TILE_N + 2 * g
        # the payload as 16-byte vectors of 4 words: (word, vector, row, expert)
        m_q = cute.make_tensor(cute.recast_ptr(q_ptr, dtype=Int32), cute.make_layout(
            (4, row_words // 4, n, num_experts), stride=(1, 4, row_words, n * row_words)))
        m_s = cute.make_tensor(wscale_ptr, cute.make_layout(
            (k_scales, n, num_experts), stride=(1, k_scales, n * k_scales)))
        # activations as 16-byte vectors of 4 bf16x2 words: (word, 8-element chunk, row)
        m_a = cute.make_tensor(cute.recast_ptr(a_ptr, dtype=Int32), cute.make_layout(
            (4, k // 8, m_cap), stride=(1, 4, k // 2)))
        m_out = cute.make_tensor(out_ptr, cute.make_layout((m_cap, n_out),
                                                           stride=(n_out, 1)))
        m_scale = cute.make_tensor(scale_ptr, cute.make_layout(m_cap))
        m_pre = cute.make_tensor(pre_ptr, cute.make_layout(m_cap, stride=4))
        rows = cutlass.min(live_end - row0, Int32(TILE_M))
        for p in cutlass.range((rows + GEMV_ROWS - 1) // GEMV_ROWS):
            first = row0 + p * GEMV_ROWS
            toks = [first + grp * MMA_N + g for grp in range(GEMV_GROUPS)]
            oks = [toks[grp] < live_end for grp in range(GEMV_GROUPS)]
            live1 = first + MMA_N < live_end
            acc = cute.make_rmem_tensor(cute.make_layout(4 * GEMV_GROUPS), Float32)
            acc.fill(0.0)
            for s in cutlass.range(warp, full_steps, warps, unroll=2):
                kb = s * STEP_K + t * LANE_K
                q, sb, acts = load_step(m_q, m_s, m_a, e, wrow, kb, toks, oks, LANE_K)
                mma_step(q, sb, acts, acc, live1, LANE_K)
            if cutlass.const_expr(tail):  # noqa: SIM102 (a compile-time test, then a run-time one)
                if warp == Int32(full_steps % warps):
                    kb = full_steps * STEP_K + t * (LANE_K // 2)
                    q, sb, acts = load_step(m_q, m_s, m_a, e, wrow, kb, toks, oks,
                                            LANE_K // 2)
                    mma_step(q, sb, acts, acc, live1, LANE_K // 2)
            for i in cutlass.range_constexpr(4 * GEMV_GROUPS):
                s_part[i, lane, warp] = acc[i]
            cute.arch.sync_threads()
            if warp == Int32(0):
                tot = [Float32(s_part[i, lane, 0]) for i in range(4 * GEMV_GROUPS)]
                for w in cutlass.range_constexpr(1, warps):
                    for i in cutlass.range_constexpr(4 * GEMV_GROUPS):
                        tot[i] = tot[i] + s_part[i, lane, w]
                for grp in cutlass.range_constexpr(GEMV_GROUPS):
                    for c in cutlass.range_constexpr(2):  # the lane's tokens 2t, 2t+1
                        row = first + grp * MMA_N + 2 * t + c
                        if row < live_end:
                            lo = tot[4 * grp + c]  # MMA row g: weight row wrow
                            hi = tot[4 * grp + 2 + c]  # MMA row g+8: weight row wrow+1
                            if cutlass.const_expr(swiglu):
                                act = swiglu_act(lo, hi, row, m_pre, m_scale, use_scale,
                                                 use_pre, clamp)
                                m_out[row, wrow // 2] = act.to(out_type)
                            else:
                                m_out[row, wrow] = plain_value(
                                    lo, row, m_pre, m_scale, use_scale, use_pre
                                ).to(out_type)
                                m_out[row, wrow + 1] = plain_value(
                                    hi, row, m_pre, m_scale, use_scale, use_pre
                                ).to(out_type)
            cute.arch.sync_threads()

    @cute.kernel
    def kernel(a_ptr: cute.Pointer, q_ptr: cute.Pointer, wscale_ptr: cute.Pointer,
               out_ptr: cute.Pointer, seg_ptr: cute.Pointer, cnt_ptr: cute.Pointer,
               scale_ptr: cute.Pointer, pre_ptr: cute.Pointer, m_cap: Int32,
               num_experts: Int32, use_scale: Int32, use_pre: Int32, clamp: Float32):
        await_inputs(launch_dependents=False)
        bid, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(Storage)
        s_part = cute.make_tensor(storage.part.data_ptr(), cute.make_layout(
            (4 * GEMV_GROUPS, 32, warps), stride=(1, 4 * GEMV_GROUPS, 32 * 4 * GEMV_GROUPS)))
        m_tiles = live_m_tiles(m_cap, seg_ptr, num_experts, TILE_M)
        for tile in cutlass.range(bid, m_tiles * n_tiles, grid):
            _, pid_n, e, row0, live, live_end = locate(tile, m_tiles, m_cap, seg_ptr,
                                                       cnt_ptr, num_experts)
            if live:
                gemv_tile(a_ptr, q_ptr, wscale_ptr, out_ptr, scale_ptr, pre_ptr, m_cap,
                          num_experts, use_scale, use_pre, clamp, s_part, pid_n, e, row0,
                          live_end)

    @cute.jit
    def launch(
        a_ptr: cute.Pointer, q_ptr: cute.Pointer, wscale_ptr: cute.Pointer,
        out_ptr: cute.Pointer, seg_ptr: cute.Pointer, cnt_ptr: cute.Pointer,
        scale_ptr: cute.Pointer, pre_ptr: cute.Pointer, m_cap: Int32, num_experts: Int32,
        use_scale: Int32, use_pre: Int32, clamp: Float32, part_ptr: cute.Pointer,
        arrive_ptr: cute.Pointer, part_rows: Int32, stream: cuda.CUstream,
    ):
        tiles = (m_cap + (TILE_M - 1)) // TILE_M * n_tiles
        ctas = cutlass.min(tiles, Int32(GEMV_SMS * GEMV_WAVES * GEMV_THREADS_PER_SM
                                        // (32 * warps)))
        kernel(
            a_ptr, q_ptr, wscale_ptr, out_ptr, seg_ptr, cnt_ptr, scale_ptr, pre_ptr, m_cap,
            num_experts, use_scale, use_pre, clamp,
        ).launch(grid=[ctas, 1, 1], block=[32 * warps, 1, 1], stream=stream, use_pdl=PDL)

    return launch


