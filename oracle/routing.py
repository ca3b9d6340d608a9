"""Routes: validity rules, staging and the dispatch layout (docs/contract.md s1-s3, s8).

Pure PyTorch, vectorized, any device. Nothing here writes a caller tensor.

Definitions (docs/contract.md s0/s2):

- a slot ``(row, k)`` is **masked** iff its expert id is ``-1``, otherwise **active**;
- an active slot is valid iff ``0 <= id < E``, its score is finite, and no other
  active slot of the same row carries the same id.

Values are checked on the caller's dtype: int32 ids are widened to int64 (lossless),
int64 ids are never narrowed before the range check, so an int64 id of ``2**32`` is
out of range rather than wrapped to 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

RULE_ID_OUT_OF_RANGE = "id_out_of_range"
RULE_DUPLICATE_ID = "duplicate_id"
RULE_NON_FINITE_SCORE = "non_finite_score"
ROUTE_RULES = (RULE_DUPLICATE_ID, RULE_ID_OUT_OF_RANGE, RULE_NON_FINITE_SCORE)

MASKED_ID = -1
ID_DTYPES = (torch.int32, torch.int64)
SCORE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
STAGED_ID_DTYPE = torch.int32
STAGED_SCORE_DTYPE = torch.float32
# The float32 NaN an active NaN score stages as: the canonical quiet NaN 0x7FC00000 (sign 0,
# quiet bit only; docs/contract.md v2 s3), whatever the caller's sign and payload. Conversions
# disagree on NaN payloads (torch CPU gives 0x7FFFFFFF for a float16 NaN, numpy 0x7FC00000),
# so the staged bits are pinned here. Only invalid routes (checks off) can carry one.
CANONICAL_NAN_BITS = 0x7FC00000


class RouteViolation(NamedTuple):
    """One broken rule of docs/contract.md s2 at one slot.

    ``expert_id`` is the caller's id as a Python int (never narrowed); ``score`` is the
    caller's score as a Python float (NaN/Inf preserved).
    """

    row: int
    slot: int
    expert_id: int
    score: float
    rule: str


def _bad(argument: str, expected: object, actual: object) -> ValueError:
    return ValueError(f"{argument}: expected {expected}, got {actual}")


def _check_int(argument: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(argument, f"an int >= {minimum}", f"{type(value).__name__} {value!r}")
    if value < minimum:
        raise _bad(argument, f"an int >= {minimum}", value)
    return value


def _check_routes(topk_ids: object, topk_weights: object) -> None:
    """Metadata checks shared by the route functions (shapes, dtypes, devices)."""
    if not isinstance(topk_ids, torch.Tensor):
        raise _bad("topk_ids", "a torch.Tensor", type(topk_ids).__name__)
    if not isinstance(topk_weights, torch.Tensor):
        raise _bad("topk_weights", "a torch.Tensor", type(topk_weights).__name__)
    if topk_ids.dim() != 2:
        raise _bad("topk_ids", "a 2-D tensor [T, K]", f"shape {tuple(topk_ids.shape)}")
    if topk_ids.dtype not in ID_DTYPES:
        raise _bad("topk_ids", "dtype int32 or int64", topk_ids.dtype)
    if topk_weights.dtype not in SCORE_DTYPES:
        raise _bad(
            "topk_weights", "dtype float16, bfloat16, float32 or float64", topk_weights.dtype
        )
    if topk_weights.shape != topk_ids.shape:
        raise _bad(
            "topk_weights",
            f"shape {tuple(topk_ids.shape)} (the shape of topk_ids)",
            f"shape {tuple(topk_weights.shape)}",
        )
    if topk_ids.shape[1] < 1:
        raise _bad("topk_ids", "K >= 1 route slots per token", f"shape {tuple(topk_ids.shape)}")
    if topk_weights.device != topk_ids.device:
        raise _bad(
            "topk_weights", f"device {topk_ids.device} (that of topk_ids)", topk_weights.device
        )


def _violation_masks(
    topk_ids: torch.Tensor, topk_weights: torch.Tensor, num_experts: int
) -> dict[str, torch.Tensor]:
    """Boolean [T, K] masks, one per rule, computed on the caller's values."""
    ids = topk_ids.to(torch.int64)  # widening only: int32 -> int64 is exact
    active = ids != MASKED_ID
    in_range = (ids >= 0) & (ids < num_experts)
    out_of_range = active & ~in_range
    non_finite = active & ~torch.isfinite(topk_weights)
    # Duplicates among in-range active slots. Out-of-range ids are already invalid; they can
    # never equal an in-range id, so the set of bad slots does not depend on this choice.
    valid = active & in_range
    k = ids.shape[1]
    same = ids.unsqueeze(2) == ids.unsqueeze(1)  # [T, K, K]
    same &= valid.unsqueeze(2) & valid.unsqueeze(1)
    same &= ~torch.eye(k, dtype=torch.bool, device=ids.device)
    duplicate = same.any(dim=2)
    return {
        RULE_ID_OUT_OF_RANGE: out_of_range,
        RULE_DUPLICATE_ID: duplicate,
        RULE_NON_FINITE_SCORE: non_finite,
    }


def find_route_violations(
    topk_ids: torch.Tensor, topk_weights: torch.Tensor, num_experts: int
) -> list[RouteViolation]:
    """Every broken rule of docs/contract.md s2, sorted by ``(row, slot, rule)``.

    Rules, per active slot (id != -1); masked slots are never reported, whatever their
    score (NaN, +Inf, -Inf), and repeated ``-1`` is fine:

    - ``id_out_of_range``: the id is not in ``[0, num_experts)`` (ids like ``-2`` included),
      judged on the caller's dtype (int64 ``2**32`` is out of range, never wrapped);
    - ``non_finite_score``: the score is NaN or +-Inf;
    - ``duplicate_id``: another active, in-range slot of the same row carries the same id.
      Every slot of a duplicated id is reported, the first occurrence included.

    A slot may break several rules and then appears once per rule. Raises ``ValueError`` for
    bad metadata (not 2-D, dtypes outside s1, shape or device mismatch, num_experts < 1).
    """
    _check_routes(topk_ids, topk_weights)
    _check_int("num_experts", num_experts, 1)
    masks = _violation_masks(topk_ids, topk_weights, num_experts)
    found: list[RouteViolation] = []
    ids_cpu = topk_ids.detach().to("cpu", torch.int64)
    scores_cpu = topk_weights.detach().to("cpu", torch.float64)  # exact for every s1 dtype
    for rule, mask in masks.items():
        for row, slot in mask.nonzero().tolist():
            found.append(
                RouteViolation(
                    row, slot, int(ids_cpu[row, slot]), float(scores_cpu[row, slot]), rule
                )
            )
    found.sort(key=lambda v: (v.row, v.slot, v.rule))
    return found


def raise_on_route_violations(
    topk_ids: torch.Tensor, topk_weights: torch.Tensor, num_experts: int, prefix: str = ""
) -> None:
    """Raise ``ValueError`` naming the first s2 violation (row, slot, id, score, rule).

    ``prefix`` names where the routes came from (e.g. ``"per_rank_inputs[2]."``).
    """
    violations = find_route_violations(topk_ids, topk_weights, num_experts)
    if violations:
        v = violations[0]
        raise ValueError(
            f"{prefix}topk_ids/topk_weights: bad route at row {v.row}, slot {v.slot}: "
            f"id={v.expert_id}, score={v.score!r} breaks rule {v.rule!r} "
            f"({len(violations)} violation(s) in total; docs/contract.md s2)"
        )


def stage_routes(
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    capacity: int,
    *,
    num_experts: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage one rank's routes into capacity-shaped buffers (docs/contract.md s3).

    Returns ``(ids int32 [C, K], scores float32 [C, K])``, new contiguous tensors on the
    inputs' device:

    - rows ``[0, T)``: ``ids = int32(id)``; ``scores = float32(score)`` (round to nearest even
      from float64; exact from float16/bfloat16; any NaN becomes ``CANONICAL_NAN_BITS``) on
      active slots and ``+0.0`` on masked slots, whatever the caller's score (NaN, +-Inf, -0.0);
    - rows ``[T, C)``: ``ids = -1``, ``scores = +0.0``.

    Narrowing never wraps: an id outside the int32 range raises ``ValueError`` (judged on the
    caller's dtype). With ``num_experts`` given, the value checks of s2 run first and the first
    violation (in ``find_route_violations`` order) raises ``ValueError`` naming row, slot,
    id, score and rule. Without it, the other s2 rules are the caller's business and the
    staged values are exactly the casts above.

    Raises ``ValueError`` for bad metadata, including ``T > capacity``. Inputs may have any
    strides and storage offset and are never written.
    """
    _check_routes(topk_ids, topk_weights)
    _check_int("capacity", capacity, 1)
    num_tokens, top_k = topk_ids.shape
    if num_tokens > capacity:
        raise _bad("topk_ids", f"at most capacity={capacity} rows (T <= C)", f"T={num_tokens}")
    if num_experts is not None:
        _check_int("num_experts", num_experts, 1)
        raise_on_route_violations(topk_ids, topk_weights, num_experts)
    ids64 = topk_ids.to(torch.int64)
    info = torch.iinfo(STAGED_ID_DTYPE)
    unfit = (ids64 < info.min) | (ids64 > info.max)
    if bool(unfit.any()):
        row, slot = (int(i) for i in unfit.nonzero()[0])
        raise _bad(
            f"topk_ids[{row}, {slot}]",
            f"an id representable in int32 [{info.min}, {info.max}] (narrowing never wraps)",
            int(ids64[row, slot]),
        )
    device = topk_ids.device
    ids = torch.full((capacity, top_k), MASKED_ID, dtype=STAGED_ID_DTYPE, device=device)
    scores = torch.zeros((capacity, top_k), dtype=STAGED_SCORE_DTYPE, device=device)
    active = ids64 != MASKED_ID
    ids[:num_tokens] = ids64.to(STAGED_ID_DTYPE)
    zero = torch.zeros((), dtype=STAGED_SCORE_DTYPE, device=device)
    nan = torch.tensor(CANONICAL_NAN_BITS, dtype=torch.int32, device=device).view(
        STAGED_SCORE_DTYPE
    )
    live = topk_weights.to(STAGED_SCORE_DTYPE)
    live = torch.where(torch.isnan(live), nan, live)
    scores[:num_tokens] = torch.where(active, live, zero)
    return ids, scores


@dataclass(frozen=True)
class DispatchLayout:
    """Routing metadata of one EP forward (docs/contract.md s8: compared bitwise).

    P = world size, E = experts, rank r owns experts ``[r*E/P, (r+1)*E/P)``.
    Only active slots with ``0 <= id < E`` count; ``-1`` and out-of-range ids never do.

    - ``counts`` int64 [P, E]: active slots of source rank p routed to expert e;
    - ``expert_counts`` int64 [E]: ``counts.sum(0)``;
    - ``rank_counts`` int64 [P]: active slots each destination rank receives;
    - ``expert_offsets`` int64 [E+1]: exclusive prefix sum of ``expert_counts``;
    - ``order`` int64 [N, 3]: ``(src_rank, row, slot)`` of every active slot, sorted by
      ``(expert, src_rank, row, slot)``; ``N = expert_counts.sum()``;
    - ``order_expert`` int64 [N]: the expert of each ``order`` entry;
    - ``active_extent`` int64 [P]: last row of rank p with an active slot + 1 (0 when none).
    """

    counts: torch.Tensor
    expert_counts: torch.Tensor
    rank_counts: torch.Tensor
    expert_offsets: torch.Tensor
    order: torch.Tensor
    order_expert: torch.Tensor
    active_extent: torch.Tensor

    @property
    def world_size(self) -> int:
        return int(self.counts.shape[0])

    @property
    def num_experts(self) -> int:
        return int(self.counts.shape[1])

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.world_size


def dispatch_layout(
    staged_ids_per_rank: Sequence[torch.Tensor], num_experts: int, world_size: int
) -> DispatchLayout:
    """The dispatch layout of staged routes (see ``DispatchLayout``; docs/contract.md s3, s8).

    ``staged_ids_per_rank``: one int32 ``[C, K]`` tensor per rank (``stage_routes`` output),
    all of one shape and device. Raises ``ValueError`` when the count differs from
    ``world_size``, shapes/dtypes/devices differ, or ``num_experts`` is not a positive
    multiple of ``world_size``.
    """
    _check_int("world_size", world_size, 1)
    _check_int("num_experts", num_experts, 1)
    if num_experts % world_size:
        raise _bad("num_experts", f"a multiple of world_size={world_size}", num_experts)
    ranks = list(staged_ids_per_rank)
    if len(ranks) != world_size:
        raise _bad("staged_ids_per_rank", f"{world_size} tensors (world_size)", len(ranks))
    for r, t in enumerate(ranks):
        name = f"staged_ids_per_rank[{r}]"
        if not isinstance(t, torch.Tensor):
            raise _bad(name, "a torch.Tensor", type(t).__name__)
        if t.dtype != STAGED_ID_DTYPE:
            raise _bad(name, f"dtype {STAGED_ID_DTYPE}", t.dtype)
        if t.dim() != 2 or t.shape[0] < 1 or t.shape[1] < 1:
            raise _bad(name, "a 2-D tensor [C, K] with C >= 1, K >= 1", f"shape {tuple(t.shape)}")
        if t.shape != ranks[0].shape:
            raise _bad(
                name, f"shape {tuple(ranks[0].shape)} (that of rank 0)", f"shape {tuple(t.shape)}"
            )
        if t.device != ranks[0].device:
            raise _bad(name, f"device {ranks[0].device} (that of rank 0)", t.device)
    capacity, top_k = ranks[0].shape
    device = ranks[0].device
    ids = torch.stack([t.to(torch.int64) for t in ranks])  # [P, C, K]
    active = (ids >= 0) & (ids < num_experts)

    flat_ids = ids.reshape(-1)
    flat_active = active.reshape(-1)
    src = torch.arange(world_size, device=device).repeat_interleave(capacity * top_k)
    counts = torch.bincount(
        (src * num_experts + flat_ids)[flat_active], minlength=world_size * num_experts
    )
    counts = counts.view(world_size, num_experts)
    expert_counts = counts.sum(0)
    rank_counts = expert_counts.view(world_size, num_experts // world_size).sum(1)
    expert_offsets = torch.zeros(num_experts + 1, dtype=torch.int64, device=device)
    expert_offsets[1:] = torch.cumsum(expert_counts, 0)

    # Flat index order is (src_rank, row, slot) lexicographic; a stable sort by expert
    # therefore yields (expert, src_rank, row, slot).
    flat_index = torch.nonzero(flat_active).reshape(-1)
    experts = flat_ids[flat_index]
    experts_sorted, perm = torch.sort(experts, stable=True)
    chosen = flat_index[perm]
    per_rank = capacity * top_k
    order = torch.stack([chosen // per_rank, (chosen % per_rank) // top_k, chosen % top_k], 1)

    row_active = active.any(dim=2)  # [P, C]
    rows = torch.arange(1, capacity + 1, dtype=torch.int64, device=device)
    active_extent = torch.where(row_active, rows, torch.zeros_like(rows)).amax(dim=1)
    return DispatchLayout(
        counts=counts,
        expert_counts=expert_counts,
        rank_counts=rank_counts,
        expert_offsets=expert_offsets,
        order=order,
        order_expert=experts_sorted,
        active_extent=active_extent,
    )
