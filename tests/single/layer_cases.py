"""The layer cases of the single tier's layer tests (``test_layer_contract.py`` against any
backend, ``test_layer.py`` for our own kernels): one shape, the capacities, and how every
stage must have run."""

from __future__ import annotations

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
