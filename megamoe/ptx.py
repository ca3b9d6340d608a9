"""One 32-bit result from one inline PTX statement, for the instructions the CuTe DSL 4.3.5
lacks (``warp_ops.match_any``, ``packed_decode.bf16x2_mul`` / ``prmt``, ``split_k.arrive``):
the DSL's ``llvm.inline_asm`` call written once, so each wrapper states only its PTX, its
constraints and whether it has side effects."""

from __future__ import annotations

from collections.abc import Sequence

from cutlass import Int32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T


def asm_i32(asm: str, constraints: str, operands: Sequence[object], *,
            side_effects: bool, loc=None, ip=None) -> Int32:
    """``asm`` with result ``$0`` (``=r``) and ``operands`` ``$1 ..`` (DSL integers), as an
    ``Int32``. ``side_effects``: the statement must not be removed or reordered (a warp
    vote, an atomic); pure arithmetic passes False so the compiler may schedule it freely."""
    return Int32(
        llvm.inline_asm(
            T.i32(),
            [x.ir_value(loc=loc, ip=ip) for x in operands],
            asm,
            constraints,
            has_side_effects=side_effects,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
            loc=loc,
            ip=ip,
        )
    )
