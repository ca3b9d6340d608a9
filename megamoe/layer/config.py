"""The layer's configuration, validated once at construction (docs/contract.md s0, s1, s5).

``LayerConfig`` names what a MegaMoE layer on one GPU (EP1) is built for: experts ``E``,
top-k ``K``, hidden size ``H``, intermediate size ``I``, capacity ``C`` (the most tokens one
forward may carry; every workspace is capacity-shaped so a captured forward replays), the
expert recipe, the optional clamp and early/late weighting. Bad values raise
``ConfigError`` naming the field, the expected and the actual value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from megamoe.errors import ConfigError
from megamoe.experts.grouped_gemm_kernel import TILE_K, TILE_N

KNOWN_RECIPES = ("bf16", "mxfp8", "nvfp4", "fp8_mxfp4")
"""Every recipe of docs/contract.md s5."""
LAYER_RECIPES = ("bf16", "fp8_mxfp4", "mxfp8", "nvfp4")
"""Recipes the layer runs (every recipe of docs/contract.md s5); the layer never silently
computes a different recipe."""
MXFP8_ELEMS = ("e4m3", "e5m2")
MX_MODES = ("rceil", "floor")
H_MULTIPLE = math.lcm(TILE_K, TILE_N)
"""H is FC1's K and FC2's N: a multiple of both GEMM tiles."""
I_MULTIPLE = math.lcm(TILE_K, TILE_N // 2)
"""I is FC2's K; 2I is FC1's N (interleaved gate/up pairs)."""


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(name, "an int >= 1", repr(value))
    return value


@dataclass(frozen=True)
class LayerConfig:
    """One MoE layer on one GPU (EP1). See the module docstring; docs/contract.md s5.

    num_experts (E), top_k (K, at most E), hidden_size (H, a multiple of ``H_MULTIPLE``),
    intermediate_size (I, a multiple of ``I_MULTIPLE``), capacity (C): positive ints.
    recipe: one of ``LAYER_RECIPES``.
    clamp: ``None`` or a finite float ``>= 0`` (``gate = min(gate, c)``, ``up = clamp(up,
        -c, c)``).
    late_weighting: ``False`` (default): the score multiplies the SwiGLU output before A2;
        ``True``: it multiplies the FC2 output.
    mxfp8_elem, mxfp8_mode: recipe ``mxfp8`` only: the activation element (``e4m3`` or
        ``e5m2``, A1 and A2 alike) and the MX scale mode (``rceil`` or ``floor``) of the
        activations and of weights the layer quantizes.
    nvfp4_input_scale, nvfp4_a2_scale: recipe ``nvfp4`` only: the global decode scales ``g``
        of A1 and A2 (finite, > 0; docs/contract.md s4).
    """

    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int
    capacity: int
    recipe: str = "bf16"
    clamp: float | None = None
    late_weighting: bool = False
    mxfp8_elem: str = "e4m3"
    mxfp8_mode: str = "rceil"
    nvfp4_input_scale: float = 1.0
    nvfp4_a2_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("num_experts", "top_k", "hidden_size", "intermediate_size", "capacity"):
            _positive_int(name, getattr(self, name))
        if self.top_k > self.num_experts:
            raise ConfigError("top_k", f"<= num_experts = {self.num_experts}", self.top_k)
        if self.hidden_size % H_MULTIPLE:
            raise ConfigError("hidden_size", f"a multiple of {H_MULTIPLE} (the GEMM tiles)",
                              self.hidden_size)
        if self.intermediate_size % I_MULTIPLE:
            raise ConfigError("intermediate_size",
                              f"a multiple of {I_MULTIPLE} (the GEMM tiles)",
                              self.intermediate_size)
        if self.recipe not in KNOWN_RECIPES:
            raise ConfigError("recipe", f"one of {KNOWN_RECIPES}", repr(self.recipe))
        if self.clamp is not None:
            if isinstance(self.clamp, bool) or not isinstance(self.clamp, (int, float)):
                raise ConfigError("clamp", "None or a finite float >= 0", repr(self.clamp))
            if not math.isfinite(self.clamp) or self.clamp < 0:
                raise ConfigError("clamp", "None or a finite float >= 0", repr(self.clamp))
            object.__setattr__(self, "clamp", float(self.clamp))
        if not isinstance(self.late_weighting, bool):
            raise ConfigError("late_weighting", "a bool", repr(self.late_weighting))
        if self.mxfp8_elem not in MXFP8_ELEMS:
            raise ConfigError("mxfp8_elem", f"one of {MXFP8_ELEMS}", repr(self.mxfp8_elem))
        if self.mxfp8_mode not in MX_MODES:
            raise ConfigError("mxfp8_mode", f"one of {MX_MODES}", repr(self.mxfp8_mode))
        for name in ("nvfp4_input_scale", "nvfp4_a2_scale"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                math.isfinite(v) and v > 0
            ):
                raise ConfigError(name, "a finite float > 0", repr(v))
            object.__setattr__(self, name, float(v))
