"""Warp primitives the CuTe DSL 4.3.5 ``cute.arch`` module lacks (inline PTX).

``match_any``: ``match.sync.any.b32`` over the full warp (sm_70+), the lanes holding the same
32-bit key; ``lanemask_lt``: the ``%lanemask_lt`` special register. Both must be executed by
all 32 lanes of the warp (warp-uniform control flow).
"""

from __future__ import annotations

from cutlass import Int32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

FULL_MASK = -1  # 0xFFFFFFFF as a signed 32-bit value


@dsl_user_op
def match_any(key: Int32, *, loc=None, ip=None) -> Int32:
    """Mask of the lanes of this warp whose ``key`` equals this lane's ``key``."""
    return Int32(
        llvm.inline_asm(
            T.i32(),
            [Int32(key).ir_value(loc=loc, ip=ip)],
            "match.any.sync.b32 $0, $1, 0xffffffff;",
            "=r,r",
            has_side_effects=True,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
            loc=loc,
            ip=ip,
        )
    )


@dsl_user_op
def lanemask_lt(*, loc=None, ip=None) -> Int32:
    """Bits of the lanes below this lane (``%lanemask_lt``)."""
    return Int32(
        llvm.inline_asm(
            T.i32(),
            [],
            "mov.u32 $0, %lanemask_lt;",
            "=r",
            has_side_effects=False,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
            loc=loc,
            ip=ip,
        )
    )
