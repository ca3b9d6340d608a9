"""Kernel A: route staging fused with the route value checks and the activation copy
(bf16 and prequantized MXFP8 / NVFP4 inputs), in one CuTe DSL launch (docs/contract.md s2-s3).

Grid: ``route_blocks`` blocks of ``THREADS`` threads, one thread per capacity row
(``[0, C)``), followed by ``copy_blocks`` blocks that copy the live activation rows.

Route part, per row ``r`` (``live`` = the host count, or the device live-count tensor
clamped to ``[0, rows]`` under graphs):

- ``r >= live``: ids ``-1``, scores ``+0.0`` (every call, every replay);
- ``r < live``: ids ``int32(id)``, scores ``float32(score)`` on active slots, ``+0.0`` on
  masked ones (id ``-1`` judged on the caller's dtype);
- a NaN written to ``scores`` or ``bad_score`` is the canonical quiet NaN
  (``0x7FC00000`` / ``0x7FF8000000000000``): hardware conversions of a NaN score keep
  different payload bits on different paths, so both paths canonicalize;
- with checks on: the first violation of the row by (slot, rule) is encoded as
  ``slot * 4 + rule + 1`` (rules in name order: duplicate_id, id_out_of_range,
  non_finite_score), the caller's id/score at that slot recorded, the status word set
  to 1, and the row marked (scores NaN, ids ``id if 0 <= id < E else 0``). In sticky mode
  (``reset == 0``, graph replay) an already recorded row code is kept.

Copy part: ``words_per_row`` int32 words of each live payload row (caller row stride in
words, last dim contiguous), then the scale bytes of each live row (any strides; padding
columns ``[scols_src, scols_dst)`` written as zero). With ``vec != 0`` (the caller checked
that both row bases are 16-byte aligned: 16-byte aligned ``src16_ptr`` / ``dst16_ptr`` and
row strides that are multiples of ``VEC_WORDS`` words) the payload moves in 16-byte
vectors: each copy block takes tiles of one row of ``THREADS * COPY_UNROLL`` vectors,
issuing all ``COPY_UNROLL`` loads of a thread before its stores; otherwise (and for the
scale bytes) one word / byte per thread and step. ``src16_ptr`` / ``dst16_ptr`` are never
dereferenced when ``vec == 0``.

No device asserts, no atomics: each row is owned by one thread; the status word is only
ever set to the same value 1 by the threads that find a bad row.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Float64, Int32, Int64, Uint8
from cutlass.cute.runtime import make_ptr

from megamoe.kernel_registry import register_kernel
from megamoe.pdl import PDL, await_inputs

THREADS = 128
COPY_WORDS_PER_THREAD = 4
MAX_COPY_BLOCKS = 1056
VEC_WORDS = 4  # one 16-byte vector
COPY_UNROLL = 8  # vectors per thread per tile (loads in flight)
VEC_TILE = THREADS * COPY_UNROLL  # vectors per tile (one row segment)
MAX_VEC_COPY_BLOCKS = 8192
MAX_QUANT_BLOCKS = 1 << 16  # quantizing kernels: one work item per thread up to this grid
_BIG = 1 << 30


@dataclass(frozen=True)
class RouteArgs:
    """The route part's arguments, the first parameter of every staging kernel: the caller's
    ids and scores with their strides; ``rows`` and the live count (host count, device flag,
    device pointer); the staged ids and scores, row codes, bad id and score, status word;
    capacity, E, check, reset (module docstring). The DSL flattens it into the kernel's
    parameters in this order (its dynamic-expression protocol), so a kernel compiled with it
    has the parameters, and the machine code, of the flat list (``tests.harness.compile_gate
    --compare``); launchers take the flat list from the host and group it here. ``str`` is
    the flat list's, so the DSL mangles the kernel's name as before."""

    ids_ptr: cute.Pointer
    s_i0: Int32
    s_i1: Int32
    sc_ptr: cute.Pointer
    s_s0: Int32
    s_s1: Int32
    rows: Int32
    live_host: Int32
    use_dev_live: Int32
    live_ptr: cute.Pointer
    out_ids_ptr: cute.Pointer
    out_sc_ptr: cute.Pointer
    row_code_ptr: cute.Pointer
    bad_id_ptr: cute.Pointer
    bad_sc_ptr: cute.Pointer
    status_ptr: cute.Pointer
    capacity: Int32
    num_experts: Int32
    check: Int32
    reset: Int32

    def _values(self) -> list:  # type: ignore[type-arg]
        return [getattr(self, f.name) for f in fields(self)]

    def __extract_mlir_values__(self) -> list:  # type: ignore[type-arg]
        return cutlass.extract_mlir_values(self._values())

    def __new_from_mlir_values__(self, values: list) -> RouteArgs:  # type: ignore[type-arg]
        return RouteArgs(*cutlass.new_from_mlir_values(self._values(), values))

    def __str__(self) -> str:
        return "_".join(map(str, self._values()))


@cute.jit
def live_count(route: RouteArgs) -> Int32:
    """The live row count of a staging launch (module docstring): ``live_host``, or with
    ``use_dev_live`` the device live-count tensor at ``live_ptr`` clamped to ``[0, rows]``.
    Inlined into every staging kernel."""
    m_live = cute.make_tensor(route.live_ptr, cute.make_layout(1))
    live = route.live_host
    if route.use_dev_live != Int32(0):
        live = cutlass.min(cutlass.max(m_live[0], Int32(0)), route.rows)
    return live


@cute.jit
def stage_prologue(route: RouteArgs):
    """What every staging kernel reads first, right after ``await_inputs()`` (the PDL rule
    wants that call first in each kernel's own body): ``(tidx, bidx, gdim, nrows, live)``,
    thread, block, grid size, the caller's rows (at least 1, for layouts) and the live row
    count (``live_count``). Inlined."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    gdim, _, _ = cute.arch.grid_dim()
    return tidx, bidx, gdim, cutlass.max(route.rows, Int32(1)), live_count(route)


@cute.jit
def chunked_rows(ptr: cute.Pointer, rows: Int32, chunks: Int32, chunk: int, row_stride: Int32,
                 divby: int) -> cute.Tensor:
    """``rows x chunks x chunk`` elements at ``ptr``: rows ``row_stride`` elements apart (a
    multiple of ``divby``), each cut in contiguous chunks of ``chunk`` (one vector access).
    Inlined."""
    return cute.make_tensor(
        ptr, cute.make_layout((rows, chunks, chunk),
                              stride=(cute.assume(row_stride, divby=divby), chunk, 1)))


def make_route_rows(K: int):
    """The route part of the staging kernels for top-k ``K`` (see the module docstring):
    stages (and checks) capacity row ``row``. Inlined into each kernel that calls it.
    ``extra`` is a row failure code found by the caller (safe-FP8 non-finite input row),
    used when checks are on, the routes of the row are valid and one of its slots is active
    (a row that routes nowhere is never consumed: docs/contract.md s4.safe-fp8-inactive-row)."""

    @cute.jit
    def route_rows(row: Int32, live: Int32, nrows: Int32, route: RouteArgs, extra: Int32):
        a = route
        capacity, num_experts, check, reset = a.capacity, a.num_experts, a.check, a.reset
        m_ids = cute.make_tensor(a.ids_ptr, cute.make_layout((nrows, K), stride=(a.s_i0, a.s_i1)))
        m_sc = cute.make_tensor(a.sc_ptr, cute.make_layout((nrows, K), stride=(a.s_s0, a.s_s1)))
        o_ids = cute.make_tensor(a.out_ids_ptr, cute.make_layout((capacity, K), stride=(K, 1)))
        o_sc = cute.make_tensor(a.out_sc_ptr, cute.make_layout((capacity, K), stride=(K, 1)))
        o_code = cute.make_tensor(a.row_code_ptr, cute.make_layout(capacity))
        o_bid = cute.make_tensor(a.bad_id_ptr, cute.make_layout(capacity))
        o_bsc = cute.make_tensor(a.bad_sc_ptr, cute.make_layout(capacity))
        o_status = cute.make_tensor(a.status_ptr, cute.make_layout(1))
        if row < capacity:
            if row < live:
                e64 = Int64(num_experts)
                idv = []
                scv = []
                active = []
                in_range = []
                finite = []
                for k in cutlass.range_constexpr(K):
                    i = Int64(m_ids[row, k])
                    x = Float64(m_sc[row, k])
                    idv.append(i)
                    scv.append(x)
                    active.append(i != Int64(-1))
                    in_range.append((i >= Int64(0)) & (i < e64))
                    finite.append((x - x) == Float64(0.0))
                code = Int32(0)
                if check != Int32(0):
                    code = Int32(_BIG)
                    for kk in cutlass.range_constexpr(K):
                        k = K - 1 - kk
                        dup = active[k] & (~active[k])  # False, as a dynamic Boolean
                        for j in cutlass.range_constexpr(K):
                            if cutlass.const_expr(j != k):
                                dup = dup | (in_range[j] & active[j] & (idv[j] == idv[k]))
                        dup = dup & in_range[k] & active[k]
                        oor = active[k] & (~in_range[k])
                        nf = active[k] & (~finite[k])
                        code = Int32(cutlass.select_(nf, Int32(k * 4 + 3), code))
                        code = Int32(cutlass.select_(oor, Int32(k * 4 + 2), code))
                        code = Int32(cutlass.select_(dup, Int32(k * 4 + 1), code))
                    routed = active[0]
                    for k in cutlass.range_constexpr(1, K):
                        routed = routed | active[k]
                    extra_k = Int32(cutlass.select_(routed, extra, Int32(0)))
                    code = Int32(cutlass.select_(code == Int32(_BIG), extra_k, code))
                bad = code != Int32(0)
                for k in cutlass.range_constexpr(K):
                    sid = Int32(idv[k])
                    sid = Int32(cutlass.select_(bad & (~in_range[k]), Int32(0), sid))
                    o_ids[row, k] = sid
                    s32 = scv[k].to(Float32)
                    # any NaN is written as the canonical quiet NaN (module docstring)
                    s32 = Float32(cutlass.select_(s32 == s32, s32, Float32(float("nan"))))
                    s32 = Float32(cutlass.select_(active[k], s32, Float32(0.0)))
                    o_sc[row, k] = Float32(cutlass.select_(bad, Float32(float("nan")), s32))
                if check != Int32(0):
                    old = o_code[row]
                    if (reset != Int32(0)) | (old == Int32(0)):
                        o_code[row] = code
                        if bad:
                            slot = (code - Int32(1)) // Int32(4)
                            bid = idv[0]
                            bsc = scv[0]
                            for k in cutlass.range_constexpr(1, K):
                                bid = Int64(cutlass.select_(slot == Int32(k), idv[k], bid))
                                bsc = Float64(cutlass.select_(slot == Int32(k), scv[k], bsc))
                            o_bid[row] = bid
                            o_bsc[row] = Float64(
                                cutlass.select_(bsc == bsc, bsc, Float64(float("nan")))
                            )
                    if bad:
                        o_status[0] = Int32(1)
                elif reset != Int32(0):
                    o_code[row] = Int32(0)
            else:
                for k in cutlass.range_constexpr(K):
                    o_ids[row, k] = Int32(-1)
                    o_sc[row, k] = Float32(0.0)
                if reset != Int32(0):
                    o_code[row] = Int32(0)

    return route_rows


def _make(K: int):
    """The kernel and its launcher for top-k ``K`` (a Python constant closed over, so that
    unrolled loops inside dynamic branches see it as compile-time)."""
    route_rows = make_route_rows(K)

    @cute.kernel
    def _route_stage_kernel(
        route: RouteArgs,
        src_ptr: cute.Pointer, src_row_words: Int32, dst_ptr: cute.Pointer, words_per_row: Int32,
        ssrc_ptr: cute.Pointer, ss0: Int32, ss1: Int32, sdst_ptr: cute.Pointer,
        scols_src: Int32, scols_dst: Int32,
        vec: Int32, src16_ptr: cute.Pointer, dst16_ptr: cute.Pointer,
        route_blocks: Int32,
    ):
        await_inputs()
        tidx, bidx, gdim, nrows, live = stage_prologue(route)
        capacity = route.capacity

        if bidx < route_blocks:
            row = bidx * THREADS + tidx
            route_rows(row, live, nrows, route, Int32(0))
        else:
            cb = bidx - route_blocks
            ncb = gdim - route_blocks
            start = cb * THREADS + tidx
            stride = ncb * THREADS
            if (words_per_row > Int32(0)) & (vec != Int32(0)):
                nch = words_per_row // VEC_WORDS
                tpr = (nch + (VEC_TILE - 1)) // VEC_TILE
                v_src = chunked_rows(src16_ptr, nrows, nch, VEC_WORDS, src_row_words, VEC_WORDS)
                v_dst = chunked_rows(dst16_ptr, capacity, nch, VEC_WORDS, words_per_row,
                                     VEC_WORDS)
                for tile in range(cb, live * tpr, ncb):
                    r = tile // tpr
                    c0 = (tile - r * tpr) * VEC_TILE + tidx
                    frags = []
                    for _u in cutlass.range_constexpr(COPY_UNROLL):
                        frags.append(cute.make_rmem_tensor(cute.make_layout(VEC_WORDS), Int32))
                    for u in cutlass.range_constexpr(COPY_UNROLL):
                        if c0 + u * THREADS < nch:
                            frags[u].store(v_src[r, c0 + u * THREADS, None].load())
                    for u in cutlass.range_constexpr(COPY_UNROLL):
                        if c0 + u * THREADS < nch:
                            v_dst[r, c0 + u * THREADS, None].store(frags[u].load())
            if (words_per_row > Int32(0)) & (vec == Int32(0)):
                m_src = cute.make_tensor(
                    src_ptr, cute.make_layout((nrows, words_per_row), stride=(src_row_words, 1))
                )
                m_dst = cute.make_tensor(
                    dst_ptr, cute.make_layout((capacity, words_per_row), stride=(words_per_row, 1))
                )
                total = live * words_per_row
                for i in range(start, total, stride):
                    r = i // words_per_row
                    col = i - r * words_per_row
                    m_dst[r, col] = m_src[r, col]
            if scols_dst > Int32(0):
                s_src = cute.make_tensor(
                    ssrc_ptr, cute.make_layout((nrows, cutlass.max(scols_src, Int32(1))),
                                               stride=(ss0, ss1))
                )
                s_dst = cute.make_tensor(
                    sdst_ptr, cute.make_layout((capacity, scols_dst), stride=(scols_dst, 1))
                )
                total_s = live * scols_dst
                for i in range(start, total_s, stride):
                    r = i // scols_dst
                    col = i - r * scols_dst
                    v = Uint8(0)
                    if col < scols_src:
                        v = Uint8(s_src[r, col])
                    s_dst[r, col] = v


    @cute.jit
    def route_stage_launch(
        ids_ptr: cute.Pointer, s_i0: Int32, s_i1: Int32,
        sc_ptr: cute.Pointer, s_s0: Int32, s_s1: Int32,
        rows: Int32, live_host: Int32, use_dev_live: Int32, live_ptr: cute.Pointer,
        out_ids_ptr: cute.Pointer, out_sc_ptr: cute.Pointer, row_code_ptr: cute.Pointer,
        bad_id_ptr: cute.Pointer, bad_sc_ptr: cute.Pointer, status_ptr: cute.Pointer,
        capacity: Int32, num_experts: Int32, check: Int32, reset: Int32,
        src_ptr: cute.Pointer, src_row_words: Int32, dst_ptr: cute.Pointer, words_per_row: Int32,
        ssrc_ptr: cute.Pointer, ss0: Int32, ss1: Int32, sdst_ptr: cute.Pointer,
        scols_src: Int32, scols_dst: Int32,
        vec: Int32, src16_ptr: cute.Pointer, dst16_ptr: cute.Pointer,
        route_blocks: Int32, copy_blocks: Int32,
        stream: cuda.CUstream,
    ):
        _route_stage_kernel(
            RouteArgs(ids_ptr, s_i0, s_i1, sc_ptr, s_s0, s_s1, rows, live_host, use_dev_live,
                      live_ptr, out_ids_ptr, out_sc_ptr, row_code_ptr, bad_id_ptr, bad_sc_ptr,
                      status_ptr, capacity, num_experts, check, reset),
            src_ptr, src_row_words, dst_ptr, words_per_row,
            ssrc_ptr, ss0, ss1, sdst_ptr, scols_src, scols_dst,
            vec, src16_ptr, dst16_ptr, route_blocks,
        ).launch(grid=[route_blocks + copy_blocks, 1, 1], block=[THREADS, 1, 1],
                 stream=stream, use_pdl=PDL)

    return route_stage_launch


ID_TYPES = {"int32": Int32, "int64": Int64}
SCORE_TYPES = {
    "float16": cutlass.Float16, "bfloat16": cutlass.BFloat16,
    "float32": Float32, "float64": Float64,
}
_FAKE_ADDR = 1 << 20


VEC_ALIGN = 16  # bytes: the alignment the 16-byte vector pointers assume


def _ptr(dtype, addr: int = _FAKE_ADDR, align: int | None = None):
    return make_ptr(dtype, addr, cute.AddressSpace.gmem,
                    assumed_align=align if align is not None else dtype.width // 8)


def route_arg_placeholders(id_dtype: str, score_dtype: str) -> tuple:  # type: ignore[type-arg]
    """The route part's arguments, first in every staging launcher (ids and scores with
    their strides; rows and the live count; the staged ids, scores, row codes, bad id and
    score and status word; capacity, E, check, reset), as ``cute.compile`` placeholders:
    pointers of the dtypes at a fake address, sizes 0."""
    it, st = ID_TYPES[id_dtype], SCORE_TYPES[score_dtype]
    i0 = Int32(0)
    return (
        _ptr(it), i0, i0, _ptr(st), i0, i0,
        i0, i0, i0, _ptr(Int32),
        _ptr(Int32), _ptr(Float32), _ptr(Int32), _ptr(Int64), _ptr(Float64), _ptr(Int32),
        i0, i0, i0, i0,
    )


def compile_stage(launcher, id_dtype: str, score_dtype: str, *own: object):  # type: ignore[no-untyped-def]
    """``cute.compile`` a staging launcher: the route part's placeholders for the id and score
    dtypes (``route_arg_placeholders``), the launcher's own ``own`` placeholders, a stream."""
    return cute.compile(launcher, *route_arg_placeholders(id_dtype, score_dtype), *own,
                        cuda.CUstream(0))


def compile_route_stage(top_k: int, id_dtype: str, score_dtype: str):
    """``cute.compile`` kernel A for one (K, id dtype, score dtype). Pointers and sizes are
    runtime arguments; the compiled object is called by ``megamoe.staging.launch``."""
    i0 = Int32(0)
    return compile_stage(_make(top_k), id_dtype, score_dtype,
                         _ptr(Int32), i0, _ptr(Int32), i0, _ptr(Uint8), i0, i0, _ptr(Uint8), i0, i0,
                         i0, _ptr(Int32, align=VEC_ALIGN), _ptr(Int32, align=VEC_ALIGN), i0, i0)


@register_kernel("route_stage_k8_i64_bf16")
def build_route_stage_k8_i64_bf16():
    return compile_route_stage(8, "int64", "bfloat16")


@register_kernel("route_stage_k1_i32_f64")
def build_route_stage_k1_i32_f64():
    return compile_route_stage(1, "int32", "float64")
