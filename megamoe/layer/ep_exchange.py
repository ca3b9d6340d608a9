"""The exchange steps of the EP forward (docs/contract.md s7): routes to every rank, A1 rows to
their expert's owner, terms back to their source rank.

One ``EpExchange`` per layer and rank. Everything peers write into this rank lives in one
symmetric workspace (``megamoe.comm.symmetric_workspace``), capacity-shaped so a captured
forward replays with new routes:

- ``ids`` int32 ``[P, C*K]``: every rank's staged ids (row p: rank p's ``[C, K]``);
- ``payload`` / ``scales`` / ``scores``: the receive buffer, ``R_in = P * C * min(K, E_l)``
  rows (a token routes to an expert once, so at most ``min(K, E_l)`` of its slots land on
  one rank) of A1 wire rows, their scale rows and their staged scores;
- ``terms`` bf16 ``[C*K, H]``: this rank's per-slot terms, written by the experts' owners;
- ``flags`` int32 ``[P]``: the step signal's flags (``megamoe.comm.signal``).

A forward, every step on the current stream, no host sync:

1. ``exchange_ids``: push this rank's staged ids into row ``rank`` of every rank's ``ids``;
   signal ``ids``;
2. ``layout``: the dispatch layout of all ranks' ids (``megamoe.dispatch``, P ranks: every
   rank computes the same one, equal to the oracle's ``dispatch_layout``) and of this
   rank's own ids (P = 1: the EP1 layer's layout, the same kernel on the same ids);
3. ``send_tables``: for this rank's route ``j`` (its own layout's order: expert, row, slot)
   of expert ``e``: owner ``d = e // E_l`` and receive row ``G_off[e] - G_off[d*E_l] +
   (routes of ranks before this one to e) + (j - L_off[e])``, the route's place in the
   global order ``(expert, src_rank, row, slot)`` counted from ``d``'s first expert;
4. ``dispatch``: push the routes' A1 rows, scale rows and staged scores to their owners'
   receive buffers; signal ``dispatch``;
5. ``recv_tables``: the receive buffer as a local layout (``E_l`` experts, routes in
   receive order) for the EP1 route glue (``megamoe.layer.route_glue``: segment starts,
   GEMM rows, scores beside them), and for every received route its source rank and
   term row ``row * K + slot`` (from the global order);
6. the layer's expert stages read the receive buffer instead of the staging workspace;
7. ``return``: push each received route's FC2 row to ``terms[row * K + slot]`` of its
   source rank; signal ``return``; the layer combines its own ``terms``.

The three signals order every reuse of a buffer: a rank writes a peer's ``ids`` of forward
n+1 only after the ``return`` signal of forward n, which every rank gives after its layout
of n; receive buffers and terms likewise one signal later.

Glue (steps 3 and 5) is PyTorch device ops over capacity-shaped tensors (capturable,
``"torch"`` in ``last_paths``); the pushes and signals are CuTe DSL kernels on a Hopper
GPU and PyTorch on the CPU world.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from megamoe.comm import push as _push
from megamoe.comm import signal as _signal
from megamoe.comm.symmetric_workspace import RegionSpec, SymmetricWorkspace
from megamoe.comm.world import World
from megamoe.dispatch import api as _dispatch
from megamoe.errors import CommTimeoutError, ConfigError
from megamoe.workspace import StagingWorkspace

STEPS = ("ids", "dispatch", "return")
"""The signalled steps of a forward, in order (the status word names them)."""
EXCHANGE_DATA_REGIONS = ("ids", "payload", "scales", "scores", "terms")
"""The symmetric regions a forward writes data into (``scales``: quantized recipes only);
``flags`` is the protocol itself (monotonic epochs), not data a forward rewrites."""


@dataclass(frozen=True)
class LocalLayout:
    """The receive buffer as the route glue reads a layout (``megamoe.layer.route_glue``):
    ``E_l`` local experts, routes in receive order, each route's "row" its receive row and
    its "slot" 0."""

    expert_counts: torch.Tensor
    expert_offsets: torch.Tensor
    order: torch.Tensor
    order_expert: torch.Tensor
    num_routes: torch.Tensor


def receive_capacity(world_size: int, capacity: int, top_k: int, local_experts: int) -> int:
    """``R_in``: the most routes one rank can receive (module docstring)."""
    return world_size * capacity * min(top_k, local_experts)


class EpExchange:
    """The exchange of one layer on one rank (module docstring). Collective to build."""

    def __init__(self, world: World, stage_ws: StagingWorkspace, num_experts: int,
                 hidden_size: int) -> None:
        p, r = world.size, world.rank
        c, k = stage_ws.capacity, stage_ws.top_k
        if num_experts % p:
            raise ConfigError("num_experts", f"a multiple of the world size {p} (E % P == 0)",
                              num_experts)
        self.world = world
        self.local_experts = e_l = num_experts // p
        self.recv_rows = r_in = receive_capacity(p, c, k, e_l)
        self._c, self._k, self._e = c, k, num_experts
        dev = world.device
        specs = [RegionSpec("ids", torch.int32, (p, c * k)),
                 RegionSpec("payload", stage_ws.payload.dtype, (r_in, *stage_ws.payload.shape[1:]))]
        if stage_ws.scales is not None:
            specs.append(RegionSpec("scales", stage_ws.scales.dtype,
                                    (r_in, *stage_ws.scales.shape[1:])))
        specs += [RegionSpec("scores", torch.float32, (r_in, 1)),
                  RegionSpec("terms", torch.bfloat16, (c * k, hidden_size)),
                  RegionSpec("flags", torch.int32, (p,))]
        self.ws = SymmetricWorkspace(world, specs)
        self.signal = _signal.StepSignal(self.ws, "flags", STEPS)
        self.global_layout_ws = _dispatch.LayoutWorkspace(
            _dispatch.LayoutShape(p, c, k, num_experts), dev)
        self.own_layout_ws = _dispatch.LayoutWorkspace(
            _dispatch.LayoutShape(1, c, k, num_experts), dev)
        routes = c * k
        i64 = dict(dtype=torch.int64, device=dev)
        # ids push: one row (this rank's C*K ids) to row `rank` of every rank
        self._id_dest = torch.arange(p, **i64)
        self._id_src = torch.zeros(p, **i64)
        self._id_dst = torch.full((p,), r, **i64)
        self._id_count = torch.tensor([p], **i64)
        # send tables, one entry per route of this rank
        self._route = torch.arange(routes, **i64)
        self.send_dest = torch.zeros(routes, **i64)
        self.send_row = torch.zeros(routes, **i64)
        self.send_flat = torch.zeros(routes, **i64)
        self.send_dst = torch.zeros(routes, **i64)
        # receive side: a local layout for the route glue, and the return tables
        self._recv = torch.arange(r_in, **i64)
        order = torch.zeros(r_in, 3, **i64)
        order[:, 1] = self._recv
        self.recv_layout = LocalLayout(torch.zeros(e_l, **i64), torch.zeros(e_l + 1, **i64),
                                       order, torch.zeros(r_in, **i64), torch.zeros(1, **i64))
        self.ret_dest = torch.zeros(r_in, **i64)
        self.ret_dst = torch.zeros(r_in, **i64)
        self._before = torch.zeros(num_experts, **i64)
        self.layout: _dispatch.DispatchLayoutResult | None = None
        """The last forward's layout of every rank's routes (workspace views: the oracle's
        ``dispatch_layout`` of all ranks, bitwise; ``.trimmed()`` cuts it to N)."""
        self.own_layout: _dispatch.DispatchLayoutResult | None = None

    # ------------------------------------------------------------------ views

    @property
    def terms(self) -> torch.Tensor:
        """This rank's terms ``[C, K, H]`` (what its combine reads)."""
        t = self.ws.local("terms")
        return t.view(self._c, self._k, t.shape[1])

    @property
    def recv_payload(self) -> torch.Tensor:
        return self.ws.local("payload")

    @property
    def recv_scales(self) -> torch.Tensor | None:
        return self.ws.local("scales") if "scales" in self.ws.specs else None

    @property
    def recv_scores(self) -> torch.Tensor:
        return self.ws.local("scores")

    @property
    def recv_count(self) -> torch.Tensor:
        """int64 ``[1]``: routes this rank received in the last forward (on the device)."""
        return self.recv_layout.num_routes

    # ------------------------------------------------------------------ steps

    def exchange_ids(self, stage_ws: StagingWorkspace) -> str:
        path = _push.push_rows(stage_ws.ids.view(1, -1), self.ws, "ids", self._id_dest,
                               self._id_src, self._id_dst, self._id_count)
        self.signal.signal("ids")
        return path

    def layouts(self, stage_ws: StagingWorkspace) -> str:
        ids = self.ws.local("ids").view(self.world.size, self._c, self._k)
        g = _dispatch.dispatch_layout(ids, self._e, self.world.size,
                                      workspace=self.global_layout_ws)
        own = _dispatch.dispatch_layout(stage_ws.ids, self._e, 1, workspace=self.own_layout_ws)
        self.layout, self.own_layout = g, own
        return g.path if g.path == own.path else f"{g.path}+{own.path}"

    def send_tables(self) -> str:
        """Step 3 (module docstring): device ops over the ``C*K`` routes of this rank."""
        g, own = self.layout, self.own_layout
        e_l, r = self.local_experts, self.world.rank
        routes = self._route.numel()
        valid = self._route < own.num_routes
        expert = torch.where(valid, own.order_expert[:routes], 0)
        owner_first = (expert // e_l) * e_l
        torch.sum(g.counts[:r], dim=0, out=self._before)
        recv_row = (g.expert_offsets[expert] - g.expert_offsets[owner_first]
                    + self._before[expert] + self._route - own.expert_offsets[expert])
        row, slot = own.order[:routes, 1], own.order[:routes, 2]
        self.send_dest.copy_(torch.where(valid, expert // e_l, 0))
        self.send_dst.copy_(torch.where(valid, recv_row, 0))
        self.send_row.copy_(torch.where(valid, row, 0))
        self.send_flat.copy_(torch.where(valid, row * self._k + slot, 0))
        return "torch"

    def dispatch(self, stage_ws: StagingWorkspace) -> str:
        """Step 4: A1 rows, scale rows and staged scores to the owners; signal."""
        n = self.own_layout_ws.view("num_routes")
        paths = {_push.push_rows(stage_ws.payload, self.ws, "payload", self.send_dest,
                                 self.send_row, self.send_dst, n)}
        if stage_ws.scales is not None:
            paths.add(_push.push_rows(stage_ws.scales, self.ws, "scales", self.send_dest,
                                      self.send_row, self.send_dst, n))
        paths.add(_push.push_rows(stage_ws.scores.view(-1, 1), self.ws, "scores",
                                  self.send_dest, self.send_flat, self.send_dst, n))
        self.signal.signal("dispatch")
        return "+".join(sorted(paths))

    def recv_tables(self) -> str:
        """Step 5: the receive buffer's local layout and the return tables."""
        g = self.layout
        e_l, r = self.local_experts, self.world.rank
        lo = r * e_l
        lay = self.recv_layout
        base = g.expert_offsets[lo]
        lay.expert_counts.copy_(g.expert_counts[lo : lo + e_l])
        lay.expert_offsets.copy_(g.expert_offsets[lo : lo + e_l + 1] - base)
        lay.num_routes.copy_(g.rank_counts[r : r + 1])
        slots = g.order_expert.numel()
        index = torch.clamp(base + self._recv, max=slots - 1)
        valid = self._recv < lay.num_routes
        lay.order_expert.copy_(torch.where(valid, g.order_expert[index] - lo, 0))
        src = g.order[index]
        self.ret_dest.copy_(torch.where(valid, src[:, 0], 0))
        self.ret_dst.copy_(torch.where(valid, src[:, 1] * self._k + src[:, 2], 0))
        return "torch"

    def give_back(self, h2: torch.Tensor, gemm_rows: torch.Tensor) -> str:
        """Step 7: each received route's FC2 row ``h2[gemm_rows[i]]`` to its source's terms;
        signal."""
        path = _push.push_rows(h2, self.ws, "terms", self.ret_dest, gemm_rows, self.ret_dst,
                               self.recv_count)
        self.signal.signal("return")
        return path

    # ------------------------------------------------------------------ errors

    def timeout(self) -> CommTimeoutError | None:
        """The recorded timeout of this rank's waits (host read: syncs), or None; a timeout
        marks the world failed (``World.mark_failed``)."""
        err = self.signal.error()
        if err is not None:
            self.world.mark_failed(str(err))
        return err

    def free(self) -> None:
        self.ws.free()
