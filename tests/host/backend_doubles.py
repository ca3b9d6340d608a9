"""Backends for the host tests of the backend interface (``test_backends.py``,
``test_bench_backend_layer.py``): a toy that declares one recipe and no CPU support, and our
layer with a planted bug behind the interface (an id of -1 read as the last expert, ``0 * NaN``
in the combine, the score never applied, masked slots that add what an earlier forward left,
also in cells pooled across layers, the gate clamped from below too).
Named ``package.module:attribute``, as a user names their own backend."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from megamoe.backends import BackendInfo, LayerSpec
from megamoe.backends.megamoe_layer import BACKEND as OURS
from tests.layer_check import oracle_output_gate_clamped_both_ways


class ToyBackend:
    """Declares ``bf16`` on sm_100 only; builds nothing (its refusal says why)."""

    info = BackendInfo("toy", "0.0", ("sm_100",), ("bf16",), frozenset({"cuda_graphs"}))

    def refusal(self, spec: LayerSpec, device: torch.device, world_size: int) -> str:
        return "toy builds nothing"

    def build(self, spec, w13, w2, *, device, world=None):  # type: ignore[no-untyped-def]
        raise AssertionError("never built: refusal() refuses every layer")


class PlantedHandle:
    """Our layer's handle with one bug planted in its forward."""

    def __init__(self, inner, bug: str, built: tuple, *,  # type: ignore[no-untyped-def]
                 pool: dict[str, torch.Tensor] | None = None) -> None:
        self.inner, self.bug, self.built = inner, bug, built  # built: (spec, w13, w2)
        self.e = built[0].config.num_experts
        self.check_errors, self.destroy = inner.check_errors, inner.destroy
        # "stale": float32 [rows, K, H] under "cells"; its own unless a pool is shared
        self.pool: dict[str, torch.Tensor] = {} if pool is None else pool

    def _stale(self, out: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``stale``: each (row, slot) has a cell that an active slot fills and the row sums,
        masked slots included (FlashInfer's FP8 pull, docs/conformance.md); the row's output
        stands in for the slot's term. With a shared pool the cells outlive the layer, as
        FlashInfer's workspace, pooled across layers of one shape, does."""
        t, k = ids.shape
        rows = out[:t].float()
        cells = self.pool.get("cells")
        if cells is None or cells.shape[0] < t:
            grown = torch.zeros(t, k, rows.shape[1], dtype=torch.float32, device=out.device)
            if cells is not None:
                grown[: cells.shape[0]] = cells
            cells = self.pool["cells"] = grown
        masked = (ids < 0).unsqueeze(-1)
        stale = torch.where(masked, cells[:t], 0.0).sum(dim=1)
        cells[:t] = torch.where(masked, cells[:t], rows.unsqueeze(1))
        got = out.clone()
        got[:t] = (rows + stale).to(out.dtype)
        return got

    def _routes(self, ids: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.bug == "wrap":  # an id of -1 read as the last expert, with its masked score
            return torch.where(ids == -1, self.e - 1, ids), torch.where(
                ids == -1, torch.nan_to_num(w, nan=0.0, posinf=0.0, neginf=0.0), w)
        if self.bug == "unweighted":  # the router's score never applied
            return ids, torch.where(ids >= 0, torch.ones_like(w), w)
        return ids, w

    def _leak(self, out: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if self.bug == "nan-leak":  # masked slots zeroed by multiplying: 0 * NaN is NaN
            junk = (torch.where(ids == -1, w.float(), 0.0) * 0.0).sum(dim=1, keepdim=True)
            out = (out.float() + junk).bfloat16()
        return out

    def _clamp(self, got: torch.Tensor, hidden, ids, w) -> torch.Tensor:  # type: ignore[no-untyped-def]
        """``clamp-below``: the live rows as the oracle computes them with the gate clamped to
        ``[-c, c]`` (docs/contract.md s5 clamps it from above only)."""
        if self.bug != "clamp-below":
            return got
        got = got.clone()
        got[: ids.shape[0]] = oracle_output_gate_clamped_both_ways(*self.built, hidden, ids, w).to(got)
        return got

    def warmup(self, hidden, topk_ids, topk_weights):  # type: ignore[no-untyped-def]
        ids, w = self._routes(topk_ids, topk_weights)
        got = self._clamp(self.inner.warmup(hidden, ids, w), hidden, topk_ids, topk_weights)
        return self._leak(got, topk_ids, topk_weights)

    def forward(self, hidden, topk_ids, topk_weights, *, live_tokens=None, out=None):  # type: ignore[no-untyped-def]
        ids, w = self._routes(topk_ids, topk_weights)
        got = self.inner.forward(hidden, ids, w, live_tokens=live_tokens, out=out)
        got = self._clamp(got, hidden, topk_ids, topk_weights)
        if self.bug == "stale":
            got = self._stale(got, topk_ids)
        return self._leak(got, topk_ids, topk_weights)

    def stages_ran(self) -> Mapping[str, str]:
        return self.inner.stages_ran()

    def workspaces(self) -> tuple[torch.Tensor, ...]:
        return self.inner.workspaces()


class PlantedBackend:
    """``megamoe`` with ``bug`` planted behind the interface (``PlantedHandle``); with a
    ``pool`` every layer it builds keeps its ``stale`` cells there (backends given one pool
    share them), and ``name`` tells it from other planted backends."""

    def __init__(self, bug: str, *, pool: dict[str, torch.Tensor] | None = None,
                 name: str | None = None) -> None:
        self.bug, self.pool = bug, pool
        self.info = BackendInfo(name or f"megamoe-planted-{bug}", OURS.info.version,
                                OURS.info.archs, OURS.info.recipes, OURS.info.features)

    def refusal(self, spec: LayerSpec, device: torch.device, world_size: int) -> str | None:
        return OURS.refusal(spec, device, world_size)

    def build(self, spec, w13, w2, *, device, world=None):  # type: ignore[no-untyped-def]
        return PlantedHandle(OURS.build(spec, w13, w2, device=device, world=world), self.bug,
                             (spec, w13, w2), pool=self.pool)


TOY = ToyBackend()
WRAP = PlantedBackend("wrap")
NAN_LEAK = PlantedBackend("nan-leak")
UNWEIGHTED = PlantedBackend("unweighted")
STALE = PlantedBackend("stale")
CLAMP_BELOW = PlantedBackend("clamp-below")
NOT_A_BACKEND = object()
