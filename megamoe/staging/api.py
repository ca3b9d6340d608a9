"""The staging API (docs/contract.md s2-s4, s9): ``warmup``, ``stage``, ``check_errors``.

``stage`` runs the metadata checks (host, no syncs), then either the fused CuTe DSL
kernel or the Torch path, which produce identical bytes. Which path ran, and why, is
returned and recorded in the workspace (``last_path``, ``last_path_reason``).

Route value checks (unless ``MEGAMOE_CHECK_ROUTES=0`` was in force at warmup/capture):
eager calls raise ``RouteError`` for the first bad (row, slot) after the launch (one
sync); under CUDA-graph capture nothing is read back: bad rows are marked NaN and the
sticky status word records the failure until ``check_errors`` reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from megamoe.compile_once import capturing as _capturing
from megamoe.errors import ConfigError, RouteError
from megamoe.route_check_setting import check_routes_in_force, record_check_routes
from megamoe.staging import compile_cache
from megamoe.staging import constants as c
from megamoe.staging import torch_path as tp
from megamoe.validation import I32_LIMIT, StageMeta, validate_stage_inputs
from megamoe.workspace import StagingWorkspace

PATH_KERNEL = "kernel"
PATH_TORCH = "torch"
KERNEL_FORMATS = ("bf16", "mxfp8_prequant", "nvfp4_prequant", "mxfp8", "safe_fp8", "nvfp4")
"""Formats with a fused kernel: A (route staging + checks + activation copy) for bf16 and
the prequantized formats, B (BF16 -> MXFP8 + routes), C (safe FP8 + routes), D (BF16 ->
NVFP4 + routes)."""
_KERNEL_NAMES = {"mxfp8": "mxfp8_stage", "safe_fp8": "safe_fp8_stage", "nvfp4": "nvfp4_stage"}


@dataclass(frozen=True)
class StageResult:
    """Which path ran (``kernel`` or ``torch``) and why."""

    path: str
    reason: str


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def _kernel_name(ws: StagingWorkspace) -> str:
    return _KERNEL_NAMES.get(ws.fmt.kind, "route_stage")


def _route_key(ws: StagingWorkspace, id_dtype: torch.dtype, score_dtype: torch.dtype):
    return compile_cache.CacheKey(
        _kernel_name(ws), ws.fmt.key, ws.hidden_size, ws.top_k, _dtype_name(id_dtype),
        _dtype_name(score_dtype), str(ws.device),
    )


def _build_route(ws: StagingWorkspace, id_dtype: torch.dtype, score_dtype: torch.dtype):
    idn, scn = _dtype_name(id_dtype), _dtype_name(score_dtype)
    if ws.fmt.kind == "mxfp8":
        from megamoe.staging.mxfp8_kernel import compile_mxfp8_stage

        return lambda: compile_mxfp8_stage(ws.top_k, idn, scn, ws.fmt.elem, ws.fmt.mode)
    if ws.fmt.kind == "safe_fp8":
        from megamoe.staging.safe_fp8_kernel import compile_safe_fp8_stage

        return lambda: compile_safe_fp8_stage(ws.top_k, idn, scn)
    if ws.fmt.kind == "nvfp4":
        from megamoe.staging.nvfp4_kernel import compile_nvfp4_stage

        return lambda: compile_nvfp4_stage(ws.top_k, idn, scn)
    from megamoe.staging.route_kernel import compile_route_stage

    return lambda: compile_route_stage(ws.top_k, idn, scn)


def warmup(
    ws: StagingWorkspace,
    *,
    id_dtypes: Sequence[torch.dtype] = (torch.int32, torch.int64),
    score_dtypes: Sequence[torch.dtype] = (torch.float32,),
) -> None:
    """Read and record ``MEGAMOE_CHECK_ROUTES`` and compile the kernels this workspace
    needs for the given route dtypes (CUDA workspaces only). Call before capture."""
    if _capturing(ws.device):
        raise compile_cache.CompileDuringCaptureError(
            "megamoe.staging.warmup() called during CUDA-graph capture (docs/contract.md s9)"
        )
    record_check_routes(ws)
    if ws.device.type != "cuda" or ws.fmt.kind not in KERNEL_FORMATS:
        return
    for idt in id_dtypes:
        for sdt in score_dtypes:
            compile_cache.get_compiled(
                _route_key(ws, idt, sdt), _build_route(ws, idt, sdt), capturing=False
            )


def _max_offset(t: torch.Tensor) -> int:
    return sum((s - 1) * st for s, st in zip(t.shape, t.stride(), strict=True) if s > 0)


def kernel_plan(ws: StagingWorkspace, hidden, topk_ids, topk_weights, hidden_scales) -> str:
    """'' when the kernel path can take these inputs, else the reason it cannot."""
    if ws.device.type != "cuda":
        return "workspace is not on a CUDA device"
    if ws.fmt.kind not in KERNEL_FORMATS:
        return f"format {ws.fmt.kind!r} has no fused kernel yet"
    for name, t in (("topk_ids", topk_ids), ("topk_weights", topk_weights)):
        if _max_offset(t) > I32_LIMIT:
            return f"{name} spans more than 2**31 elements"
    t_rows = hidden.shape[0]
    if t_rows > 0 and hidden.shape[1] > 1 and hidden.stride(1) != 1:
        return "hidden's last dim is not contiguous"
    es = hidden.element_size()
    if ws.fmt.quantizes:
        return "" if _max_offset(hidden) <= I32_LIMIT else "hidden spans more than 2**31"
    if t_rows > 0 and (hidden.data_ptr() % 4 != 0 or (hidden.stride(0) * es) % 4 != 0):
        return "hidden rows are not 4-byte aligned"
    if _max_offset(hidden) * es // 4 > I32_LIMIT:
        return "hidden spans more than 2**31 words"
    if hidden_scales is not None and _max_offset(hidden_scales) > I32_LIMIT:
        return "hidden_scales spans more than 2**31 elements"
    return ""


def _ptr(cutlass_type, t: torch.Tensor):
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    addr = t.data_ptr() if t.numel() > 0 else ws_dummy_addr(t)
    return make_ptr(cutlass_type, addr, cute.AddressSpace.gmem,
                    assumed_align=cutlass_type.width // 8)


def ws_dummy_addr(t: torch.Tensor) -> int:
    """An aligned address for an empty tensor (never dereferenced)."""
    return 256


_VEC_BYTES = 16  # = route_kernel.VEC_ALIGN: the 16-byte vector variants' pointer alignment


def _ptr16(cutlass_type, t: torch.Tensor, use: bool):
    """``t``'s base as a 16-byte aligned pointer when ``use`` (the caller checked the
    alignment), else an aligned dummy address that the kernel never dereferences."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    addr = t.data_ptr() if use and t.numel() > 0 else ws_dummy_addr(t)
    return make_ptr(cutlass_type, addr, cute.AddressSpace.gmem, assumed_align=_VEC_BYTES)


def _rows_vec_aligned(t: torch.Tensor, rows: int) -> bool:
    """True when every row of ``t`` (``[rows, n]``, last dim contiguous) starts 16-byte
    aligned: an aligned base and a row stride that is a multiple of 16 bytes."""
    if rows == 0 or t.numel() == 0:
        return True
    es = t.element_size()
    return t.data_ptr() % _VEC_BYTES == 0 and (t.stride(0) * es) % _VEC_BYTES == 0


def _launch_kernel(ws, meta: StageMeta, hidden, ids, w, hidden_scales, global_scale,
                   live_tokens, check, reset, capturing) -> None:
    import cuda.bindings.driver as cuda
    import cutlass

    from megamoe.staging import route_kernel as rk

    compiled = compile_cache.get_compiled(
        _route_key(ws, ids.dtype, w.dtype), _build_route(ws, ids.dtype, w.dtype),
        capturing=capturing,
    )
    cap = ws.capacity
    rows = meta.num_tokens
    route_blocks = (cap + rk.THREADS - 1) // rk.THREADS
    live_t = live_tokens if live_tokens is not None else ws.view("status")
    it = rk.ID_TYPES[_dtype_name(ids.dtype)]
    st = rk.SCORE_TYPES[_dtype_name(w.dtype)]
    i32, u8 = cutlass.Int32, cutlass.Uint8
    route_args = (
        _ptr(it, ids), ids.stride(0), ids.stride(1),
        _ptr(st, w), w.stride(0), w.stride(1),
        rows, rows, 1 if live_tokens is not None else 0, _ptr(i32, live_t),
        _ptr(i32, ws.ids), _ptr(cutlass.Float32, ws.scores), _ptr(i32, ws.view("row_code")),
        _ptr(cutlass.Int64, ws.view("bad_id")), _ptr(cutlass.Float64, ws.view("bad_score")),
        _ptr(i32, ws.view("status")),
        cap, meta.num_experts, 1 if check else 0, 1 if reset else 0,
    )
    stream = cuda.CUstream(torch.cuda.current_stream(ws.device).cuda_stream)
    per_block = rk.THREADS * rk.COPY_WORDS_PER_THREAD
    i16 = cutlass.Int16
    if ws.fmt.quantizes:
        # 16-byte vector variant: every hidden row and every payload row 16-byte aligned
        vec = _rows_vec_aligned(hidden, rows) and ws.payload.data_ptr() % _VEC_BYTES == 0
        vec_args = (1 if vec else 0, _ptr16(i16, hidden, vec), _ptr16(u8, ws.payload, vec))
    if ws.fmt.kind == "mxfp8":
        ncols = ws.scales.shape[1]
        work = rows * ncols
        quant_blocks = min(max((work + rk.THREADS - 1) // rk.THREADS, 1), rk.MAX_QUANT_BLOCKS)
        compiled(
            *route_args,
            _ptr(i16, hidden), hidden.stride(0) if rows > 0 else 0, ws.hidden_size,
            _ptr(u8, ws.payload), _ptr(u8, ws.scales), ncols, *vec_args,
            route_blocks, quant_blocks, stream,
        )
        return
    x_s0 = hidden.stride(0) if rows > 0 else 0
    if ws.fmt.kind == "safe_fp8":
        from megamoe.staging.safe_fp8_kernel import SAFE_MAX_SPLITS, SAFE_THREADS

        n_rows = min(rows, cap)
        sms = torch.cuda.get_device_properties(ws.device).multi_processor_count
        splits = max(1, min(SAFE_MAX_SPLITS, sms // max(n_rows, 1)))
        row_blocks = n_rows * splits
        tail_blocks = (cap - n_rows + SAFE_THREADS - 1) // SAFE_THREADS
        compiled(
            *route_args,
            _ptr(i16, hidden), x_s0, ws.hidden_size,
            _ptr(u8, ws.payload), _ptr(cutlass.Float32, ws.scales), *vec_args,
            splits, row_blocks, max(row_blocks + tail_blocks, 1), stream,
        )
        return
    if ws.fmt.kind == "nvfp4":
        from megamoe.staging.safe_fp8_kernel import f32_bits

        nblk = ws.hidden_size // 16
        quant_blocks = min(max((rows * nblk + rk.THREADS - 1) // rk.THREADS, 1),
                           rk.MAX_QUANT_BLOCKS)
        compiled(
            *route_args,
            _ptr(i16, hidden), x_s0, ws.hidden_size,
            _ptr(u8, ws.payload), _ptr(u8, ws.scales), f32_bits(float(global_scale)),
            *vec_args, route_blocks, quant_blocks, stream,
        )
        return
    hb = hidden.view(torch.uint8) if hidden.dtype != torch.bfloat16 else hidden
    words_per_row = ws.payload[0].numel() * ws.payload.element_size() // 4
    src_row_words = (hidden.stride(0) * hidden.element_size()) // 4 if rows > 0 else 0
    vec = (
        words_per_row % rk.VEC_WORDS == 0
        and _rows_vec_aligned(hb, rows)
        and ws.payload.data_ptr() % _VEC_BYTES == 0
    )
    scols_src = scols_dst = 0
    ssrc = ws.view("row_code")  # any valid pointer when there are no scales
    ss0 = ss1 = 0
    if hidden_scales is not None:
        ssrc = hidden_scales.view(torch.uint8)
        ss0, ss1 = ssrc.stride()
        scols_dst = ws.scales.shape[1]
        scols_src = ws.hidden_size // 32 if ws.fmt.is_mx else ws.hidden_size // 16
    if vec:
        tiles = rows * -(-(words_per_row // rk.VEC_WORDS) // rk.VEC_TILE)
        scale_blocks = (rows * scols_dst + per_block - 1) // per_block
        copy_blocks = min(max(tiles, scale_blocks, 1), rk.MAX_VEC_COPY_BLOCKS)
    else:
        work = rows * max(words_per_row, scols_dst)
        copy_blocks = min(max((work + per_block - 1) // per_block, 1), rk.MAX_COPY_BLOCKS)
    compiled(
        *route_args,
        _ptr(i32, hb), src_row_words, _ptr(i32, ws.payload), words_per_row,
        _ptr(u8, ssrc), ss0, ss1, _ptr(u8, ws.scales if ws.scales is not None else ssrc),
        scols_src, scols_dst,
        1 if vec else 0, _ptr16(i32, hb, vec), _ptr16(i32, ws.payload, vec),
        route_blocks, copy_blocks,
        stream,
    )


def _torch_stage(ws, meta: StageMeta, hidden, ids, w, hidden_scales, global_scale,
                 live_tokens, check, reset) -> None:
    fmt = ws.fmt
    r = meta.num_tokens
    extra = None
    if fmt.kind in ("bf16", "mxfp8_prequant"):
        ws.payload[:r].copy_(hidden)
    elif fmt.kind == "nvfp4_prequant":
        ws.payload[:r].copy_(hidden.view(torch.uint8))
    elif fmt.kind == "mxfp8":
        p, s = tp.quantize_mxfp8(hidden, fmt.elem, fmt.mode)
        ws.payload[:r].copy_(p)
        ws.scales[:r, : s.shape[1]].copy_(s)
        ws.scales[:r, s.shape[1] :].zero_()
    elif fmt.kind == "nvfp4":
        p, s = tp.quantize_nvfp4(hidden, float(global_scale))
        ws.payload[:r].copy_(p)
        ws.scales[:r].copy_(s)
    else:  # safe_fp8
        p, d, bad = tp.quantize_safe_fp8(hidden)
        ws.payload[:r].copy_(p)
        ws.scales[:r].copy_(d.unsqueeze(1).expand(r, c.SAFE_FP8_WIRE_LANES))
        extra = torch.where(bad, c.ROW_CODE_NON_FINITE_INPUT, 0).to(torch.int32)
    if fmt.kind == "mxfp8_prequant":
        n = ws.hidden_size // 32
        ws.scales[:r, :n].copy_(hidden_scales.view(torch.uint8)[:, :n])
        ws.scales[:r, n:].zero_()
    elif fmt.kind == "nvfp4_prequant":
        ws.scales[:r].copy_(hidden_scales)
    tp.stage_routes_into(
        ids, w, num_experts=meta.num_experts,
        live=live_tokens if live_tokens is not None else r, check=check, reset=reset,
        out_ids=ws.ids, out_scores=ws.scores, row_code=ws.view("row_code"),
        bad_id=ws.view("bad_id"), bad_score=ws.view("bad_score"), status=ws.view("status"),
        extra_code=extra,
    )


def first_recorded_error(ws: StagingWorkspace) -> RouteError | None:
    """The ``RouteError`` for the first row recorded in the workspace (host read, syncs)."""
    codes = ws.view("row_code")
    bad = torch.nonzero(codes).flatten()
    if bad.numel() == 0:
        return None
    row = int(bad[0])
    code = int(codes[row])
    if code >= c.ROW_CODE_NON_FINITE_INPUT:
        return RouteError(row, -1, -1, float("nan"), c.RULE_NON_FINITE_INPUT)
    slot, rule = divmod(code - 1, c.RULES_PER_SLOT)
    return RouteError(row, slot, int(ws.view("bad_id")[row]),
                      float(ws.view("bad_score")[row]), c.ROUTE_RULES[rule])


def check_errors(ws: StagingWorkspace) -> None:
    """Read the status word (syncs); raise ``RouteError`` for the first recorded bad row and
    clear the record. Returns quietly when no failure was recorded."""
    if int(ws.view("status")[0]) == 0:
        return
    err = first_recorded_error(ws)
    ws.view("status").zero_()
    ws.view("row_code").zero_()
    if err is None:  # pragma: no cover - status set without a row record
        raise RuntimeError("staging status word set but no bad row recorded")
    raise err


def stage(
    ws: StagingWorkspace,
    hidden: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    *,
    num_experts: int,
    hidden_scales: torch.Tensor | None = None,
    global_scale: float = 1.0,
    live_tokens: torch.Tensor | None = None,
    path: str = "auto",
) -> StageResult:
    """Stage one forward's routes and activations into ``ws`` (docs/contract.md s2-s3).

    ``hidden`` is bf16 ``[T, H]`` for the quantizing and bf16 formats, or the prequantized
    payload (with ``hidden_scales``). ``live_tokens`` (int32 ``[1]`` device tensor) replaces
    ``T`` as the live count for CUDA-graph replays with capacity-shaped inputs.
    ``path``: ``auto`` (kernel when it covers the inputs), ``kernel`` (error otherwise) or
    ``torch``. Raises ``ConfigError`` on bad metadata before any launch; ``RouteError`` in
    eager mode for the first bad route.
    """
    meta = validate_stage_inputs(
        ws, hidden, topk_ids, topk_weights, num_experts=num_experts,
        hidden_scales=hidden_scales, global_scale=global_scale, live_tokens=live_tokens,
    )
    if path not in ("auto", PATH_KERNEL, PATH_TORCH):
        raise ConfigError("path", "'auto', 'kernel' or 'torch'", repr(path))
    capturing = _capturing(ws.device)
    if capturing:
        check = record_check_routes(ws)
        ws.captured = True
    else:
        check = check_routes_in_force(ws)
    reason = kernel_plan(ws, hidden, topk_ids, topk_weights, hidden_scales)
    if path == PATH_KERNEL and reason:
        raise ConfigError("path", "inputs the fused kernel covers", reason)
    use_kernel = path != PATH_TORCH and not reason
    reset = not capturing
    if reset and check:
        ws.view("status").zero_()
    if use_kernel:
        _launch_kernel(ws, meta, hidden, topk_ids, topk_weights, hidden_scales, global_scale,
                       live_tokens, check, reset, capturing)
        result = StageResult(PATH_KERNEL, "")
    else:
        _torch_stage(ws, meta, hidden, topk_ids, topk_weights, hidden_scales, global_scale,
                     live_tokens, check, reset)
        result = StageResult(PATH_TORCH, reason or "path='torch' requested")
    ws.last_path, ws.last_path_reason = result.path, result.reason
    if check and not capturing and int(ws.view("status")[0]) != 0:
        err = first_recorded_error(ws)
        # reported here, once: a later check_errors() (e.g. after graph replays, which never
        # reset the word) must not raise this eager error again
        ws.view("status").zero_()
        if err is not None:
            raise err
    return result
