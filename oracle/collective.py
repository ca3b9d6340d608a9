"""The collective (EP world) reference: every rank's output from every rank's inputs (docs/contract.md s7).

``ep_forward`` runs the forward the way an expert-parallel kernel must, through the dispatch
bookkeeping of ``oracle.routing``:

1. stage: each source rank checks (s2) and stages (s3) its routes into capacity-shaped
   buffers and quantizes its hidden rows into the A1 wire format;
2. layout: ``dispatch_layout`` over all ranks' staged ids gives per-expert offsets and the
   order ``(src_rank, row, slot)`` of every active slot, sorted by expert;
3. dispatch: destination rank r receives, in layout order, the A1 rows and staged scores of
   the slots routed to its local experts ``[r*E/P, (r+1)*E/P)``;
4. experts: each local expert computes its contiguous segment of the receive buffer
   (``oracle.experts.expert_block``);
5. return: each term goes back to ``(src_rank, row, slot)``; each source rank masked-combines
   its terms (s6).

Each slot's term is computed exactly as in s5 whichever rank owns the expert, so the outputs
do not depend on the world size: bitwise equal to ``oracle.experts.moe_forward`` on each
rank's rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from oracle.activations import (
    ActivationRows,
    check_hidden,
    hidden_device,
    num_hidden_rows,
    stage_a1,
)
from oracle.combine import masked_combine
from oracle.experts import check_route_metadata
from oracle.ffn import expert_block
from oracle.moe_config import MoEConfig
from oracle.routing import dispatch_layout, raise_on_route_violations, stage_routes
from oracle.weights import ExpertWeights, check_weights


def _bad(argument: str, expected: object, actual: object) -> ValueError:
    return ValueError(f"{argument}: expected {expected}, got {actual}")


def _unpack_rank(r: int, item: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(hidden, topk_ids, topk_weights)``, or an object with ``.live()`` returning it."""
    live = getattr(item, "live", None)
    if callable(live):
        item = live()
    if not isinstance(item, (tuple, list)) or len(item) != 3:
        raise _bad(
            f"per_rank_inputs[{r}]",
            "a (hidden, topk_ids, topk_weights) triple or an object with .live()",
            type(item).__name__,
        )
    return item[0], item[1], item[2]


def _concat_rows(parts: list[ActivationRows]) -> ActivationRows:
    """The rows of every rank's A1, rank after rank (the symmetric buffer, addressed by rank)."""
    first = parts[0]
    scale = None if first.scale is None else torch.cat([p.scale for p in parts])
    return ActivationRows(
        first.fmt, torch.cat([p.payload for p in parts]), scale, first.global_scale
    )


def ep_forward(
    per_rank_inputs: Sequence[object],
    weights: ExpertWeights,
    config: MoEConfig,
    world_size: int,
    *,
    capacity: int | None = None,
) -> list[torch.Tensor]:
    """Every rank's output ``[T_r, H]`` bf16 for an EP world of ``world_size`` ranks (s7).

    per_rank_inputs: one ``(hidden bf16 [T_r, H], topk_ids [T_r, K], topk_weights [T_r, K])``
        per rank (dtypes and rules as ``oracle.experts.moe_forward``; hidden may be
        prequantized, ``oracle.experts.prequantized_a1``), or objects with a
        ``.live()`` method returning that triple (``fixtures.scenarios.RankInputs``).
    weights: all E experts (``prepare_weights``); rank r owns ``[r*E/P, (r+1)*E/P)``.
    capacity: rows of the staging buffers, ``>= max T_r`` (default ``max(1, max T_r)``).

    The result equals ``moe_forward`` of each rank's rows, bit for bit, for every world size.
    Raises ``ValueError`` when ``num_experts`` is not a multiple of ``world_size``, on bad
    metadata, and on a route violation (naming the rank, row, slot, id, score and rule).
    """
    if not isinstance(config, MoEConfig):
        raise _bad("config", "a MoEConfig", type(config).__name__)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise _bad("world_size", "an int >= 1", repr(world_size))
    num_experts = config.num_experts
    if num_experts % world_size:
        raise _bad("world_size", f"a divisor of num_experts={num_experts} (E % P == 0)", world_size)
    ranks = list(per_rank_inputs)
    if len(ranks) != world_size:
        raise _bad("per_rank_inputs", f"{world_size} entries (world_size)", len(ranks))
    inputs = [_unpack_rank(r, item) for r, item in enumerate(ranks)]
    for r, (hidden, ids, scores) in enumerate(inputs):
        hidden = check_hidden(f"per_rank_inputs[{r}].hidden", hidden, config)
        inputs[r] = (hidden, ids, scores)
        check_route_metadata(f"per_rank_inputs[{r}].", hidden, ids, scores, config)
        if hidden_device(hidden) != hidden_device(inputs[0][0]):
            raise _bad(
                f"per_rank_inputs[{r}].hidden",
                f"device {hidden_device(inputs[0][0])}",
                hidden_device(hidden),
            )
    device = hidden_device(inputs[0][0])
    check_weights(weights, config, device)
    tokens = [num_hidden_rows(h) for h, _, _ in inputs]
    if capacity is None:
        capacity = max(1, *tokens)
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < max(1, *tokens):
        raise _bad("capacity", f"an int >= max(1, max T_r) = {max(1, *tokens)}", repr(capacity))

    # 1. Stage every source rank: routes (checked on the caller's dtype) and A1 rows.
    staged_ids: list[torch.Tensor] = []
    staged_scores: list[torch.Tensor] = []
    a1_parts: list[ActivationRows] = []
    for r, (hidden, ids, scores) in enumerate(inputs):
        raise_on_route_violations(ids, scores, num_experts, prefix=f"per_rank_inputs[{r}].")
        s_ids, s_scores = stage_routes(ids, scores, capacity)
        staged_ids.append(s_ids)
        staged_scores.append(s_scores)
        a1_parts.append(stage_a1(f"per_rank_inputs[{r}].hidden", hidden, s_ids, config))
    a1_all = _concat_rows(a1_parts)  # rank after rank: row_base[src] + row
    part_rows = torch.tensor([p.num_rows for p in a1_parts], dtype=torch.int64, device=device)
    row_base = torch.cumsum(part_rows, 0) - part_rows
    scores_all = torch.stack(staged_scores)  # [P, C, K]

    # 2. The dispatch layout.
    layout = dispatch_layout(staged_ids, num_experts, world_size)
    offsets = layout.expert_offsets.tolist()
    local = num_experts // world_size

    # 3-5. Per destination rank: receive, compute local experts, return terms.
    k, h = config.top_k, config.hidden_size
    terms_all = torch.zeros((world_size, capacity, k, h), dtype=torch.bfloat16, device=device)
    for dest in range(world_size):
        lo, hi = offsets[dest * local], offsets[(dest + 1) * local]
        received = int(layout.rank_counts[dest])
        if hi - lo != received:
            raise RuntimeError(
                f"dispatch layout of rank {dest}: expert offsets span {hi - lo} slots but "
                f"rank_counts says {received}"
            )
        if received == 0:
            continue
        seg = layout.order[lo:hi]  # (src_rank, row, slot), sorted by (expert, src, row, slot)
        src, row, slot = seg[:, 0], seg[:, 1], seg[:, 2]
        recv = a1_all.rows(row_base[src] + row).dequantize()  # the receive buffer
        recv_scores = scores_all[src, row, slot]
        out = torch.empty((received, h), dtype=torch.bfloat16, device=device)
        for e in range(dest * local, (dest + 1) * local):
            a, b = offsets[e] - lo, offsets[e + 1] - lo
            if b > a:
                out[a:b] = expert_block(recv[a:b], recv_scores[a:b], e, weights, config)
        terms_all[src, row, slot] = out

    weighted = staged_scores if config.combine_weighting else [None] * world_size
    return [masked_combine(terms_all[r], staged_ids[r], weighted[r])[: tokens[r]]
            for r in range(world_size)]
