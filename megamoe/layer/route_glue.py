"""The layer's route tables, built from the dispatch layout (docs/contract.md s3, s5).

``build_route_tables(lay, scores, top_k, tables, g=None)`` fills ``tables`` (``RouteTables``)
for the routes ``i < N`` of the layout ``lay`` (``N = lay.num_routes``, read on the device):

- ``counts`` (int32 ``[E]``) = ``lay.expert_counts``; ``seg`` (int32 ``[E + 1]``) = the
  padded segment starts of the grouped GEMM (``megamoe.experts.api.padded_segment_starts``);
- with ``e = lay.order_expert[i]`` and ``(rank, row, slot) = lay.order[i]``: ``src_row[i] =
  row`` (the staged row), ``pos[i] = seg[e] + i - lay.expert_offsets[e]`` (the route's GEMM
  row: the routes of expert ``e`` fill its segment in layout order), ``term_row[i] = row *
  top_k + slot`` (its FC2 term), ``row_scale[pos] = scores[row, slot]``;
- ``nvfp4`` (``g`` given): every lane of ``pre[0][pos]`` = ``g.act[0] * g.w13[e]`` and of
  ``pre[1][pos]`` = ``g.act[1] * g.w2[e]`` (float32 products).

Entries ``i >= N`` are left as they are on the kernel path (nothing reads them: the
gathers, A2 and the scatter stop at ``N``); the PyTorch path writes row 0 / the spare scale
row there. Work scales with the live routes on the kernel path (one launch,
``megamoe.layer.route_glue_kernel``); the PyTorch path (CPU tensors, GPUs other than
Hopper) is device ops over all ``R`` entries, capturable, and gives the same values for
``i < N``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from megamoe.compile_once import compile_once
from megamoe.errors import ConfigError
from megamoe.experts import api as _gemm

PATH_KERNEL = "kernel"
PATH_TORCH = "torch"
_CACHE: dict[str, object] = {}


@dataclass(frozen=True)
class RouteTables:
    """The tables ``build_route_tables`` writes (allocated once, before capture)."""

    counts: torch.Tensor
    """int32 ``[E]``."""
    seg: torch.Tensor
    """int32 ``[E + 1]``."""
    src_row: torch.Tensor
    """int64 ``[R]``."""
    pos: torch.Tensor
    """int64 ``[R]``."""
    term_row: torch.Tensor
    """int64 ``[R]``."""
    row_scale: torch.Tensor
    """float32 ``[M_cap + 1]`` (one spare row)."""
    pre: tuple[torch.Tensor, torch.Tensor] | None = None
    """nvfp4: float32 ``[M_cap + 1, 4]`` per-row pre-scales of FC1 and FC2."""


@dataclass(frozen=True)
class GlobalScales:
    """The nvfp4 global scales: ``act`` float32 ``[2]`` (A1's, A2's), ``w13`` and ``w2``
    float32 ``[E]`` (each expert's weights')."""

    act: torch.Tensor
    w13: torch.Tensor
    w2: torch.Tensor


def _kernel_ok(device: torch.device) -> bool:
    return _gemm.kernel_supported(device)


def _compiled(device: torch.device):
    def build():  # type: ignore[no-untyped-def]
        from megamoe.layer.route_glue_kernel import compile_route_glue

        return compile_route_glue()

    return compile_once(_CACHE, str(device), build, what=f"route tables kernel on {device}",
                        warmup="megamoe.layer.route_glue.warmup(device)", device=device)


def warmup(device: torch.device | str) -> None:
    """Compile the kernel for ``device`` where it runs (a Hopper GPU). Call before capture."""
    device = torch.device(device)
    if _kernel_ok(device):
        _compiled(device)


def _check(lay, scores: torch.Tensor, tables: RouteTables, g: GlobalScales | None) -> None:
    from megamoe.layer.route_glue_kernel import E_CAP

    e = tables.counts.numel()
    if e > E_CAP:
        raise ConfigError("num_experts", f"<= {E_CAP}", e)
    r = tables.src_row.numel()
    if lay.order.shape[0] < r or lay.order_expert.shape[0] < r:
        raise ConfigError("lay.order", f">= {r} rows", tuple(lay.order.shape))
    if scores.dtype != torch.float32 or scores.dim() != 2 or not scores.is_contiguous():
        raise ConfigError("scores", "contiguous float32 [C, K]",
                          f"{scores.dtype} {tuple(scores.shape)}")
    if (tables.pre is None) != (g is None):
        raise ConfigError("g", "given exactly when tables.pre is", "mismatch")


def build_route_tables_torch(lay, scores: torch.Tensor, top_k: int, tables: RouteTables,
                             g: GlobalScales | None = None) -> None:
    """The PyTorch path (module docstring): device ops over all ``R`` entries (no sync)."""
    r = tables.src_row.numel()
    m_cap = tables.row_scale.numel() - 1
    route = torch.arange(r, dtype=torch.int64, device=tables.pos.device)
    tables.counts.copy_(lay.expert_counts)
    tables.seg.copy_(_gemm.padded_segment_starts(tables.counts))
    valid = route < lay.num_routes
    expert = torch.where(valid, lay.order_expert[:r], 0)
    rank_row_slot = lay.order[:r]
    row = torch.where(valid, rank_row_slot[:, 1], 0)
    slot = torch.where(valid, rank_row_slot[:, 2], 0)
    pos = tables.seg.to(torch.int64)[expert] + route - lay.expert_offsets[expert]
    tables.src_row.copy_(row)
    tables.pos.copy_(torch.where(valid, pos, 0))
    tables.term_row.copy_(row * top_k + slot)
    score = scores[row, slot]
    dest = torch.where(valid, pos, torch.full_like(pos, m_cap))
    tables.row_scale.index_copy_(0, dest, score)
    if g is not None and tables.pre is not None:
        for pre, g_act, g_w in ((tables.pre[0], g.act[0], g.w13), (tables.pre[1], g.act[1], g.w2)):
            gg = (g_act * g_w)[expert]
            pre.index_copy_(0, dest, gg.unsqueeze(1).expand(-1, pre.shape[1]))


def build_route_tables(lay, scores: torch.Tensor, top_k: int, tables: RouteTables,
                       g: GlobalScales | None = None) -> str:
    """Fill ``tables`` (module docstring); returns the path taken."""
    _check(lay, scores, tables, g)
    device = tables.pos.device
    if not _kernel_ok(device):
        build_route_tables_torch(lay, scores, top_k, tables, g)
        return PATH_TORCH
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    from megamoe.layer.route_glue_kernel import MAX_BLOCKS, THREADS

    compiled = _compiled(device)
    gm = cute.AddressSpace.gmem

    def ptr(t: torch.Tensor, ty: str):
        return make_ptr(getattr(cutlass, ty), t.data_ptr(), gm,
                        assumed_align=t.element_size())

    r = tables.src_row.numel()
    m_cap = tables.row_scale.numel() - 1
    pre1, pre2 = tables.pre if tables.pre is not None else (tables.row_scale,) * 2
    gs = g if g is not None else GlobalScales(tables.row_scale, tables.row_scale,
                                              tables.row_scale)  # never read: use_g = 0
    stream = cuda.CUstream(torch.cuda.current_stream(device).cuda_stream)
    compiled(
        ptr(lay.expert_counts, "Int64"), ptr(lay.expert_offsets, "Int64"),
        ptr(lay.order, "Int64"), ptr(lay.order_expert, "Int64"), ptr(lay.num_routes, "Int64"),
        ptr(scores, "Float32"), ptr(gs.act, "Float32"), ptr(gs.w13, "Float32"),
        ptr(gs.w2, "Float32"), ptr(tables.counts, "Int32"), ptr(tables.seg, "Int32"),
        ptr(tables.src_row, "Int64"), ptr(tables.pos, "Int64"), ptr(tables.term_row, "Int64"),
        ptr(tables.row_scale, "Float32"), ptr(pre1, "Float32"), ptr(pre2, "Float32"),
        tables.counts.numel(), r, scores.shape[0], top_k, m_cap, 1 if g is not None else 0,
        max(1, min(-(-r // THREADS), MAX_BLOCKS)), stream,
    )
    return PATH_KERNEL
