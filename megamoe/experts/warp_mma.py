"""The warp-level bf16 tensor-core MMA (``mma.sync.aligned.m16n8k16``, sm_80+) as one inline
PTX statement, for the decode-batch GEMV (``mx_gemv_kernel``): the CuTe DSL 4.3.5 reaches it
only through a tiled MMA over partitioned fragments, while the GEMV builds its operand
registers itself (decoded weights, gathered activations).

Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16" with ``.bf16``), lane ``l``, ``g = l
// 4``, ``t = l % 4``; each ``.b32`` register holds two bf16, the lower column index in the
low half:

- ``A`` (16 x 16, row major): ``a0`` = row ``g``, columns ``2t, 2t+1``; ``a1`` = row ``g+8``,
  the same columns; ``a2`` = row ``g``, columns ``2t+8, 2t+9``; ``a3`` = row ``g+8``, those;
- ``B`` (16 x 8, column major): ``b0`` = rows ``2t, 2t+1`` of column ``g``; ``b1`` = rows
  ``2t+8, 2t+9`` of column ``g``;
- ``C`` / ``D`` (16 x 8, float32): ``c0``, ``c1`` = row ``g``, columns ``2t``, ``2t+1``;
  ``c2``, ``c3`` = row ``g+8``, the same columns.

``D = A @ B + C`` with float32 accumulation; every product of two bf16 is exact in float32.
"""

from __future__ import annotations

from cutlass import Float32, Int32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

MMA_M, MMA_N, MMA_K = 16, 8, 16
"""The shape of one ``mma.sync`` (rows of A, columns of B, the reduction)."""

_ASM = ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")
_CONSTRAINTS = "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f"


@dsl_user_op
def mma_bf16_m16n8k16(a: list, b: list, c: list, *, loc=None, ip=None) -> list:
    """``d = a @ b + c`` for one warp (module docstring): ``a`` four bf16x2 words, ``b`` two,
    ``c`` four float32; returns the four float32 of ``d``. Every lane of the warp must call it
    (``.aligned``)."""
    operands = ([Int32(x).ir_value(loc=loc, ip=ip) for x in (*a, *b)]
                + [Float32(x).ir_value(loc=loc, ip=ip) for x in c])
    res = llvm.inline_asm(
        llvm.StructType.get_literal([T.f32()] * 4), operands, _ASM, _CONSTRAINTS,
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc, ip=ip,
    )
    return [Float32(llvm.extractvalue(T.f32(), res, [i], loc=loc, ip=ip)) for i in range(4)]
