"""One rank's exchange, set up for the ``ep_dispatch`` and ``ep_combine`` benchmarks, and what
its buffers must hold after each push (docs/contract.md s7).

``exchange_state(case, ctx)`` stages this rank's routes of the case, builds an ``EpExchange``
and runs one whole exchange (ids, layouts, send tables, dispatch, receive tables), so that
each of its pushes can then be repeated alone: a push reads only what earlier steps wrote
(``exchange=False``: the expectations only, for a baseline that does not use our exchange).
Collective: every rank builds the same case in the same order. The scenario's inputs of
every rank are known to every rank (``fixtures.scenarios`` is deterministic).

The expected contents come from the oracle, not from the exchange's own tables: the oracle's
``dispatch_layout`` of every rank's staged ids gives the global order ``(expert, src_rank,
row, slot)``; a rank receives its experts' part of it, in that order, and sends its own
routes. A route's *wire row* is its source's staged A1 row, scale row and staged score, as
bytes (every rank stages every rank's inputs to know them). A route's *term* is a tagged
bf16 row: a random row shared by all ranks with the route's source rank, row and slot
written into its first columns (exact in bf16), so a term that lands at another slot or rank
is seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from megamoe.bench.benchmarks.layer import Shape, _shape
from megamoe.bench.ep_world import current_world
from megamoe.bench.registry import BuildContext, Case
from megamoe.comm.world import World

if TYPE_CHECKING:  # the kernels' modules load when a case is built, not when listed
    from megamoe.layer.ep_exchange import EpExchange
    from megamoe.staging import StageFormat, StagingWorkspace

TAG_COLUMNS = 4
"""Columns 0..3 of a term: source rank, row // 256, row % 256, slot (exact in bf16)."""
STAGE_FORMATS = {"bf16": "bf16", "mxfp8": "mxfp8"}
"""Recipes the exchange benchmarks stage, and their staging formats (bf16 rows: 2H bytes;
mxfp8 rows: H bytes and H/32 scale bytes, the wire of a 1x128-scaled FP8 dispatch)."""


def case_recipe(case: Case) -> str:
    """A case name reads ``{shape}-{recipe}-{routes}-T{tokens}``."""
    recipe = case.name.split("-")[1]
    if recipe not in STAGE_FORMATS:
        raise ValueError(f"case: expected a recipe from {sorted(STAGE_FORMATS)} as the second "
                         f"part of {case.name!r}")
    return recipe


@dataclass
class ExchangeState:
    """This rank's exchange after one whole forward (module docstring).

    ``order`` int64 ``[N, 3]``: the oracle's global order as ``(src, row, slot)``;
    ``owner``: each entry's owner rank; ``sent`` / ``received``: indices into ``order`` of
    the routes this rank sends (its own, in its layout order) and receives (its experts', in
    order). ``rows`` uint8 ``[P, C, B]``: every rank's staged payload and scale bytes per
    row; ``scores`` uint8 ``[P, C, K, 4]``: its staged scores' bytes.
    """

    world: World
    shape: Shape
    stage_ws: StagingWorkspace
    exchange: EpExchange | None
    order: torch.Tensor
    owner: torch.Tensor
    sent: torch.Tensor
    received: torch.Tensor
    rows: torch.Tensor
    scores: torch.Tensor
    filler: torch.Tensor

    @property
    def wire_bytes(self) -> int:
        """Bytes of one wire row: payload, scales and the 4-byte score."""
        return self.rows.shape[2] + 4

    def wire_rows(self, entries: torch.Tensor) -> torch.Tensor:
        """uint8 ``[n, wire_bytes]``: the wire rows of ``order[entries]``."""
        src, row, slot = self.order[entries].unbind(1)
        return torch.cat([self.rows[src, row], self.scores[src, row, slot]], 1)

    def term_rows(self, entries: torch.Tensor) -> torch.Tensor:
        """bf16 ``[n, H]``: the tagged terms of ``order[entries]`` (module docstring)."""
        src, row, slot = self.order[entries].unbind(1)
        out = self.filler.expand(entries.numel(), -1).clone()
        for column, value in enumerate((src, row // 256, row % 256, slot)):
            out[:, column] = value.to(torch.bfloat16)
        return out

    def bytes_per_rank(self, row_bytes: int) -> int:
        """The world's routes times ``row_bytes``, divided by P: what a rank sends on average
        (the same on every rank; skewed routes load some ranks more, which the slowest
        rank's time shows)."""
        return self.order.shape[0] * row_bytes // self.world.size

    def received_by_source(self) -> torch.Tensor:
        """``received`` as an all-to-all delivers it: each source's routes in its send order,
        sources in rank order (a stable sort of the global order by source)."""
        return self.received[torch.argsort(self.order[self.received, 0], stable=True)]

    def split_sizes(self) -> tuple[list[int], list[int]]:
        """Routes this rank sends to each rank and receives from each rank (host lists)."""
        p = self.world.size
        send = torch.bincount(self.owner[self.sent], minlength=p)
        recv = torch.bincount(self.order[self.received, 0], minlength=p)
        return send.tolist(), recv.tolist()


def _staged(case: Case, ctx: BuildContext, fmt: StageFormat, live: list
            ) -> list[StagingWorkspace]:
    """Every rank's staging workspace of the case (our staging; bitwise the oracle's)."""
    from megamoe.staging import StagingWorkspace, stage, warmup

    s = _shape(case)
    out = []
    for x, ids, w in live:
        ws = StagingWorkspace.create(case.shape["tokens"], s.top_k, s.hidden, fmt, ctx.device)
        warmup(ws, id_dtypes=(ids.dtype,), score_dtypes=(w.dtype,))
        stage(ws, x, ids, w, num_experts=s.experts)
        out.append(ws)
    return out


def row_bytes(payload: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:
    """uint8 ``[n, B]``: each row's payload bytes, then its scale bytes."""
    parts = [payload.flatten(1).view(torch.uint8)]
    if scales is not None:
        parts.append(scales.flatten(1).view(torch.uint8))
    return torch.cat(parts, 1)


def score_bytes(scores: torch.Tensor) -> torch.Tensor:
    """uint8 ``[..., 4]``: each float32 score's bytes."""
    return scores.contiguous().view(torch.uint8).view(*scores.shape, 4)


def exchange_state(case: Case, ctx: BuildContext, exchange: bool = True) -> ExchangeState:
    """This rank's exchange of ``case``, after one whole forward (module docstring)."""
    from fixtures.scenarios import make_scenario
    from megamoe.layer.ep_exchange import EpExchange
    from megamoe.staging import StageFormat
    from oracle.routing import dispatch_layout

    s = _shape(case)
    world = current_world()
    p, r, e_l = world.size, world.rank, s.experts // world.size
    state = make_scenario(case.scenario or "uniform", world_size=p,
                          capacity=case.shape["tokens"], top_k=s.top_k,
                          num_experts=s.experts, hidden_size=s.hidden, seed=case.seed,
                          device=ctx.device)
    live = [rank.live() for rank in state.ranks]
    fmt = StageFormat(STAGE_FORMATS[case_recipe(case)])
    staged = _staged(case, ctx, fmt, live)
    stage_ws = staged[r]
    ex = EpExchange(world, stage_ws, s.experts, s.hidden) if exchange else None
    if ex is not None:
        ex.exchange_ids(stage_ws)
        ex.layouts(stage_ws)
        ex.send_tables()
        ex.dispatch(stage_ws)
        ex.recv_tables()
    lay = dispatch_layout([ws.ids for ws in staged], s.experts, p)
    order = lay.order.to(ctx.device)
    owner = lay.order_expert.to(ctx.device) // e_l
    base, n = int(lay.expert_offsets[r * e_l]), int(lay.rank_counts[r])
    sent = torch.nonzero(order[:, 0] == r).reshape(-1)
    # this rank's routes in its own layout order (expert, row, slot): the global order is
    # (expert, src, row, slot), so its entries with src == r are already in that order
    received = torch.arange(base, base + n, device=ctx.device)
    rows = torch.stack([row_bytes(ws.payload, ws.scales) for ws in staged])
    scores = torch.stack([score_bytes(ws.scores) for ws in staged])
    g = torch.Generator(device=ctx.device).manual_seed(case.seed)
    filler = torch.randn(1, s.hidden, generator=g, device=ctx.device).to(torch.bfloat16)
    return ExchangeState(world, s, stage_ws, ex, order, owner, sent, received, rows, scores,
                         filler)
