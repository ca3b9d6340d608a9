"""The guard bytes of our layer's workspaces (issue 40 item 9): every byte outside a region
of its staging and its layout workspace (``megamoe.workspace.GUARD_BYTES`` before, between
and after the regions) is filled before a run and must hold its fill after it; a write past a
region's end, or before its start, shows there."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from megamoe.layer import MoELayer
from megamoe.workspace import GUARD_BYTES, region_mask

__all__ = ["GUARD_FILL", "WorkspaceGuards", "fill_workspace_guards", "guard_problems"]

GUARD_FILL = 0xA5


@dataclass(frozen=True)
class WorkspaceGuards:
    """Each workspace's byte buffer and the mask of its bytes outside every region."""

    outside: dict[str, tuple[torch.Tensor, torch.Tensor]]


def fill_workspace_guards(layer: MoELayer) -> WorkspaceGuards:
    """Fill the whole buffer of the layer's staging and layout workspaces (regions too: a
    workspace may hold anything before a warmup) with ``GUARD_FILL``; fails when a workspace
    lacks a full guard before its first region or after its last (alignment padding alone
    is not a guard)."""
    stage, lay = layer._stage_ws, layer._layout_ws
    outside = {
        "staging": (stage.buffer, ~stage.region_mask()),
        "layout": (lay.buffer, ~region_mask(lay._regions.values(), lay.buffer.numel(),
                                            lay.buffer.device)),
    }
    for name, (buffer, mask) in outside.items():
        edges = torch.cat((mask[:GUARD_BYTES], mask[-GUARD_BYTES:]))
        assert mask.numel() > 2 * GUARD_BYTES and bool(edges.all()), (
            f"the {name} workspace has no guard of {GUARD_BYTES} bytes around its regions")
        buffer.fill_(GUARD_FILL)
    return WorkspaceGuards(outside)


def guard_problems(guards: WorkspaceGuards) -> list[str]:
    """One line per workspace with a guard byte that no longer holds ``GUARD_FILL``."""
    problems = []
    for name, (buffer, mask) in guards.outside.items():
        hit = ((buffer != GUARD_FILL) & mask).nonzero().flatten()
        if hit.numel():
            problems.append(f"{name} workspace: {hit.numel()} guard byte(s) written, first at "
                            f"byte {int(hit[0])}")
    return problems
