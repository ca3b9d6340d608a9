"""Torch fallback of the dispatch layout (docs/contract.md s3, s8): same outputs as the kernel.

Used for CPU tensors, for ``E`` above the kernel's limit, and when a caller forces it. Not
capture-safe (it sizes ``order`` from the data); the kernel path is.
"""

from __future__ import annotations

import torch


def torch_layout(ids: torch.Tensor, num_experts: int) -> dict[str, torch.Tensor]:
    """Layout of staged ids ``[P, C, K]`` (any integer dtype, any device).

    Returns int64 tensors: ``counts [P, E]``, ``expert_counts [E]``, ``rank_counts [P]``,
    ``expert_offsets [E+1]``, ``order [N, 3]`` (src_rank, row, slot) sorted by
    (expert, src_rank, row, slot), ``order_expert [N]``, ``active_extent [P]``,
    ``num_routes [1]``. A slot is active iff ``0 <= id < E``.
    """
    world, capacity, top_k = ids.shape
    device = ids.device
    wide = ids.to(torch.int64)
    active = (wide >= 0) & (wide < num_experts)
    per_rank = capacity * top_k
    flat = torch.nonzero(active.reshape(-1)).reshape(-1)  # ascending (rank, row, slot)
    experts = wide.reshape(-1)[flat]
    ranks = flat // per_rank
    counts = torch.bincount(
        ranks * num_experts + experts, minlength=world * num_experts
    ).view(world, num_experts)
    expert_counts = counts.sum(0)
    rank_counts = expert_counts.view(world, num_experts // world).sum(1)
    offsets = torch.zeros(num_experts + 1, dtype=torch.int64, device=device)
    offsets[1:] = torch.cumsum(expert_counts, 0)
    # Composite keys are unique, so any sort gives the one order (expert, flat index).
    key = experts * (world * per_rank) + flat
    chosen = flat[torch.argsort(key)]
    order = torch.stack(
        [chosen // per_rank, (chosen % per_rank) // top_k, chosen % top_k], dim=1
    )
    order_expert = wide.reshape(-1)[chosen]
    row_live = active.any(dim=2)  # [P, C]
    row_ids = torch.arange(1, capacity + 1, dtype=torch.int64, device=device)
    extent = (row_live.to(torch.int64) * row_ids).amax(dim=1)
    num_routes = torch.tensor([int(flat.numel())], dtype=torch.int64, device=device)
    return {
        "counts": counts.to(torch.int64),
        "expert_counts": expert_counts.to(torch.int64),
        "rank_counts": rank_counts.to(torch.int64),
        "expert_offsets": offsets,
        "order": order.to(torch.int64),
        "order_expert": order_expert.to(torch.int64),
        "active_extent": extent,
        "num_routes": num_routes,
    }
