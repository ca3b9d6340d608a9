"""One MoE layer's settings, and the argument checks the oracle shares (docs/contract.md s0, s5).

``MoEConfig`` is validated once, at construction. The helpers below build the one
``ValueError`` message form of the oracle (argument, expected value, actual value) and
accept block-scale column counts (docs/contract.md s4); ``oracle.activations``,
``oracle.weights`` and ``oracle.experts`` use them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from oracle.formats import MX_BLOCK, NVFP4_BLOCK, SCALE_COLUMN_MULTIPLE
from oracle.recipes import Format, Recipe, get_recipe

MXFP8_ELEMS = ("e4m3", "e5m2")
MX_SCALE_MODES = ("rceil", "floor")


def _bad(argument: str, expected: object, actual: object) -> ValueError:
    return ValueError(f"{argument}: expected {expected}, got {actual}")


def _check_positive_int(argument: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(argument, "an int >= 1", repr(value))
    return value


def _check_real(argument: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(argument, "a real number", repr(value))
    return float(value)


def _scale_columns(fmt: Format, k: int) -> tuple[int, ...]:
    """Accepted scale column counts: exact, or (E8M0 bytes) padded to a multiple of 4."""
    if fmt is Format.NVFP4:
        return (k // NVFP4_BLOCK,)
    n = k // MX_BLOCK
    return tuple(sorted({n, -(-n // SCALE_COLUMN_MULTIPLE) * SCALE_COLUMN_MULTIPLE}))


@dataclass(frozen=True)
class MoEConfig:
    """One MoE layer's settings, validated once at construction (docs/contract.md s0, s5).

    recipe: a key of ``oracle.recipes.RECIPES`` (``bf16``, ``mxfp8``, ``nvfp4``, ``fp8_mxfp4``,
        and the s12 extension ``fp8_block``).
    num_experts (E), top_k (K), hidden_size (H), intermediate_size (I): positive ints; H and I
        must be multiples of the recipe's block sizes (``Recipe.hidden_multiple`` and
        ``Recipe.intermediate_multiple``: 32 for MX formats, 16 for NVFP4).
    clamp: ``None`` (no clamp) or a finite ``c >= 0``, rounded once to float32.
    late_weighting: ``False`` (default): ``act *= score`` before A2; ``True``: ``h2 *= score``.
    combine_weighting: ``True``: the score multiplies the slot's bf16 term in the combine
        instead (docs/contract.md s12.combine-weighting; ``late_weighting`` must be False).
    mxfp8_elem: the MXFP8 activation element (``"e4m3"`` or ``"e5m2"``; A1 and A2 alike).
    mxfp8_mode: MX scale mode for MXFP8 activations and weights (``"rceil"`` or ``"floor"``).
    mxfp4_mode: MX scale mode for MXFP4 weights (``"rceil"`` or ``"floor"``).
    nvfp4_input_scale: NVFP4 global decode scale ``g`` of A1 (finite, > 0).
    nvfp4_a2_scale: NVFP4 global decode scale ``g`` of A2 (finite, > 0).

    Bad values raise ``ValueError`` naming the field, the expected and the actual value.
    """

    recipe: str
    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int
    clamp: float | None = None
    late_weighting: bool = False
    mxfp8_elem: str = "e4m3"
    mxfp8_mode: str = "rceil"
    mxfp4_mode: str = "rceil"
    nvfp4_input_scale: float = 1.0
    nvfp4_a2_scale: float = 1.0
    combine_weighting: bool = False

    def __post_init__(self) -> None:
        recipe = get_recipe(self.recipe)
        for name in ("num_experts", "top_k", "hidden_size", "intermediate_size"):
            _check_positive_int(name, getattr(self, name))
        if self.hidden_size % recipe.hidden_multiple:
            raise _bad(
                "hidden_size",
                f"a multiple of {recipe.hidden_multiple} (recipe {recipe.name} block size)",
                self.hidden_size,
            )
        if self.intermediate_size % recipe.intermediate_multiple:
            raise _bad(
                "intermediate_size",
                f"a multiple of {recipe.intermediate_multiple} (recipe {recipe.name} block size)",
                self.intermediate_size,
            )
        if self.clamp is not None:
            c = _check_real("clamp", self.clamp)
            if not (math.isfinite(c) and c >= 0):
                raise _bad("clamp", "None or a finite number >= 0", repr(self.clamp))
            object.__setattr__(self, "clamp", c)
        if not isinstance(self.late_weighting, bool):
            raise _bad("late_weighting", "a bool", repr(self.late_weighting))
        if not isinstance(self.combine_weighting, bool):
            raise _bad("combine_weighting", "a bool", repr(self.combine_weighting))
        if self.combine_weighting and self.late_weighting:
            raise _bad("combine_weighting", "False when late_weighting is True (one place for "
                       "the score)", True)
        if self.mxfp8_elem not in MXFP8_ELEMS:
            raise _bad("mxfp8_elem", f"one of {MXFP8_ELEMS}", repr(self.mxfp8_elem))
        for name in ("mxfp8_mode", "mxfp4_mode"):
            if getattr(self, name) not in MX_SCALE_MODES:
                raise _bad(name, f"one of {MX_SCALE_MODES}", repr(getattr(self, name)))
        for name in ("nvfp4_input_scale", "nvfp4_a2_scale"):
            g = _check_real(name, getattr(self, name))
            if not (math.isfinite(g) and g > 0):
                raise _bad(name, "a finite number > 0", repr(getattr(self, name)))
            object.__setattr__(self, name, g)

    @property
    def spec(self) -> Recipe:
        """The recipe table entry (``oracle.recipes.RECIPES[self.recipe]``)."""
        return get_recipe(self.recipe)
