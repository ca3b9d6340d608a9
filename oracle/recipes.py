"""The expert recipe table (docs/contract.md s5, s8), defined once.

A recipe names the number format of each operand of the expert FFN: the first activation
``A1`` (the hidden rows fed to the W13 GEMM), the weights (``W13`` and ``W2``) and the
second activation ``A2`` (the SwiGLU output fed to the W2 GEMM). Everything else in the
oracle (``oracle.experts``, ``oracle.collective``) and in the harness reads these entries;
nothing redefines them.

| recipe      | A1                         | weights            | A2                         |
|-------------|----------------------------|--------------------|----------------------------|
| ``bf16``      | bf16 as given              | bf16               | bf16(act)                  |
| ``mxfp8``     | MXFP8 (E4M3 or E5M2) of H  | MXFP8 E4M3         | MXFP8, A1's element, of I  |
| ``nvfp4``     | NVFP4, g = input scale     | NVFP4, per-expert g| NVFP4, g = layer constant  |
| ``fp8_mxfp4`` | safe FP8 per token         | MXFP4              | safe FP8 per token         |
| ``fp8_block`` | FP8, 1 x 128 block scales  | FP8, 128 x 128     | FP8, 1 x 128 block scales  |
| ``fp8_block_fi`` | FP8, 1 x 128 block scales | FP8, 128 x 128, W13 tiles over gate/up groups of 8 | FP8, 1 x 64, ``x * (1/d)`` |

``fp8_block`` and ``fp8_block_fi`` are the extension of docs/contract.md s12 (not in the shared
contract's section 5), so that the harness can judge FP8 MegaMoE backends with block scales:
``fp8_block`` the DeepSeek-V3 style recipe, ``fp8_block_fi`` FlashInfer's sm90 FP8 pull as it
is (its reference and weight transform, run on the CPU, meet it up to float32 rounding in the
activation and the GEMMs: docs/contract.md s12). Our layer runs neither.

The MXFP8 activation element type (E4M3 or E5M2) and the MX scale mode are layer settings
(``oracle.experts.MoEConfig``), not recipe entries; MXFP8 weights are always E4M3.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from math import lcm

from oracle.formats import FP8_BLOCK, MX_BLOCK, NVFP4_BLOCK


class Format(StrEnum):
    """An operand's number format (docs/contract.md s4)."""

    BF16 = "bf16"
    MXFP8 = "mxfp8"
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"
    SAFE_FP8 = "safe_fp8"
    FP8_BLOCK = "fp8_block"
    FP8_BLOCK_FI = "fp8_block_fi"


FORMAT_BLOCK: dict[Format, int] = {
    Format.BF16: 1,
    Format.MXFP8: MX_BLOCK,
    Format.NVFP4: NVFP4_BLOCK,
    Format.MXFP4: MX_BLOCK,
    Format.SAFE_FP8: 1,  # one scale per row: any row length
    Format.FP8_BLOCK: FP8_BLOCK,  # weights: also 128 along N (tiles)
    Format.FP8_BLOCK_FI: FP8_BLOCK,  # weights' tiles; its A2 blocks of 64 divide 128
}
"""Elements per scale block along the GEMM's K dimension (1: no block constraint)."""

MXFP8_WEIGHT_ELEM = "e4m3"
"""MXFP8 weights are always E4M3 (docs/contract.md s5)."""


@dataclass(frozen=True)
class Recipe:
    """One row of the recipe table (docs/contract.md s5) plus its comparison tolerance (s8).

    name: the recipe's stable name (the key of ``RECIPES``).
    a1: format of the hidden rows fed to the W13 GEMM, blocks along H.
    weights: format of W13 ``[E, 2I, H]`` and W2 ``[E, H, I]``, blocks along the last dim.
    a2: format of the SwiGLU output fed to the W2 GEMM, blocks along I.
    rel_l2_tolerance: the kernel-vs-oracle relative L2 bound of docs/contract.md s8, per live
        row and for the whole output.
    """

    name: str
    a1: Format
    weights: Format
    a2: Format
    rel_l2_tolerance: float

    @property
    def hidden_multiple(self) -> int:
        """H must be a multiple of this (the A1 and W13 block sizes)."""
        return lcm(FORMAT_BLOCK[self.a1], FORMAT_BLOCK[self.weights])

    @property
    def intermediate_multiple(self) -> int:
        """I must be a multiple of this (the A2 and W2 block sizes)."""
        return lcm(FORMAT_BLOCK[self.a2], FORMAT_BLOCK[self.weights])


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("bf16", Format.BF16, Format.BF16, Format.BF16, 0.01),
        Recipe("mxfp8", Format.MXFP8, Format.MXFP8, Format.MXFP8, 0.02),
        Recipe("nvfp4", Format.NVFP4, Format.NVFP4, Format.NVFP4, 0.06),
        Recipe("fp8_mxfp4", Format.SAFE_FP8, Format.MXFP4, Format.SAFE_FP8, 0.025),
        Recipe("fp8_block", Format.FP8_BLOCK, Format.FP8_BLOCK, Format.FP8_BLOCK, 0.02),
        Recipe("fp8_block_fi", Format.FP8_BLOCK, Format.FP8_BLOCK_FI, Format.FP8_BLOCK_FI, 0.02),
    )
}
"""The four recipes of docs/contract.md s5 and the two of the s12 extension, by name."""
CONTRACT_RECIPES: tuple[str, ...] = ("bf16", "mxfp8", "nvfp4", "fp8_mxfp4")
"""The recipes of the shared contract's section 5 (``fp8_block`` and ``fp8_block_fi`` are our
s12 extension)."""

RECIPE_NAMES: tuple[str, ...] = tuple(RECIPES)


def get_recipe(name: object) -> Recipe:
    """The recipe called ``name``; ``ValueError`` naming the known recipes otherwise."""
    if not isinstance(name, str) or name not in RECIPES:
        raise ValueError(f"recipe: expected one of {RECIPE_NAMES}, got {name!r}")
    return RECIPES[name]
