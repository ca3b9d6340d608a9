"""Warp primitives the CuTe DSL 4.3.5 ``cute.arch`` module lacks (inline PTX).

``match_any``: ``match.sync.any.b32`` over the full warp (sm_70+), the lanes holding the same
32-bit key; ``lanemask_lt``: the ``%lanemask_lt`` special register. Both must be executed by
all 32 lanes of the warp (warp-uniform control flow).
"""

from __future__ import annotations

from cutlass import Int32
from cutlass.cutlass_dsl import dsl_user_op

from megamoe.ptx import asm_i32

FULL_MASK = -1  # 0xFFFFFFFF as a signed 32-bit value


@dsl_user_op
def match_any(key: Int32, *, loc=None, ip=None) -> Int32:
    """Mask of the lanes of this warp whose ``key`` equals this lane's ``key``."""
    return asm_i32("match.any.sync.b32 $0, $1, 0xffffffff;", "=r,r", [Int32(key)],
                   side_effects=True, loc=loc, ip=ip)


@dsl_user_op
def lanemask_lt(*, loc=None, ip=None) -> Int32:
    """Bits of the lanes below this lane (``%lanemask_lt``)."""
    return asm_i32("mov.u32 $0, %lanemask_lt;", "=r", [], side_effects=False, loc=loc,
                   ip=ip)
