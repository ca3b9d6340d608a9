"""The layer cases of the single tier's layer tests (``test_layer_contract.py`` against any
backend, ``test_layer.py`` for our own kernels): one shape, the capacities, and how every
stage must have run."""

from __future__ import annotations

from dataclasses import dataclass

import torch

E, K, H, INTER, C = 8, 2, 256, 128, 300
C_GEMV = {"fp8_mxfp4": 32, "nvfp4": 32, "mxfp8": 32}
"""Per recipe, the largest capacity at which our layer takes its GEMMs' GEMV variant
(``mxfp4_gemm_kernel.GEMV_MAX_ROWS``; ``test_layer.py`` asserts it); ``C`` takes the wgmma
variants. Any backend meets every rule at both capacities."""
REPLAYS_PER_STATE = 17
KERNEL_PATHS = {"kernel"}
"""How every stage of a forward must have run (``MoEHandle.stages_ran``)."""


def layer_cases(recipes: tuple[str, ...]) -> list[tuple[str, int]]:
    """(recipe, capacity) of the layers the contract tests run: every recipe of the backend,
    and each recipe with a ``C_GEMV`` again at that capacity."""
    return [(r, C) for r in recipes] + [(r, C_GEMV[r]) for r in recipes if r in C_GEMV]


def case_id(recipe: str, capacity: int) -> str:
    return recipe if capacity == C else f"{recipe}-gemv"


@dataclass
class StaticBatch:
    """The capacity-shaped inputs, live count and output of a captured forward (docs/contract.md
    s9): a replay reads whatever they hold; ``load`` puts a scenario state's rank in."""

    x: torch.Tensor
    ids: torch.Tensor
    w: torch.Tensor
    live: torch.Tensor
    out: torch.Tensor

    @classmethod
    def empty(cls, capacity: int, hidden: int, top_k: int, device) -> StaticBatch:  # type: ignore[no-untyped-def]
        """No live row: zero hidden rows, every slot masked, live count C."""
        return cls(torch.zeros(capacity, hidden, dtype=torch.bfloat16, device=device),
                   torch.full((capacity, top_k), -1, dtype=torch.int64, device=device),
                   torch.zeros(capacity, top_k, dtype=torch.float32, device=device),
                   torch.full((1,), capacity, dtype=torch.int32, device=device),
                   torch.zeros(capacity, hidden, dtype=torch.bfloat16, device=device))

    def load(self, rank) -> int:  # type: ignore[no-untyped-def]
        """Copy a ``fixtures.scenarios.RankInputs`` (capacity-shaped) in; returns its T."""
        self.x.copy_(rank.hidden)
        self.ids.copy_(rank.topk_ids)
        self.w.copy_(rank.topk_weights)
        self.live.fill_(rank.num_tokens)
        return int(rank.num_tokens)
